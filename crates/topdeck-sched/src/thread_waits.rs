// SPDX-License-Identifier: Apache-2.0
//! Publishing the probe's thread-waits array (docs/FORMAT.md "Thread
//! waits", [`topdeck_format::waits`]): sizing it, writing its header,
//! freezing it and pinning it where every process can map it read-only;
//! and, when the probe goes, unpinning it if the pin is still ours.
//!
//! The probe's programs write the slots and mark the header gone (at a
//! clean stop through `td_waits_gone`, at the agent's death through
//! `td_exit_*`); this module only does what user space must.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libbpf_rs::libbpf_sys;
use topdeck_format::waits;

use crate::error::{Error, ErrorKind, Result};

pub use topdeck_format::waits::{DEFAULT_MAX_BYTES, DEFAULT_PIN};

/// `BPF_FS_MAGIC` from `linux/magic.h`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Where bpffs is mounted by convention, and mounted by the agent when
/// nothing is.
const BPFFS: &str = "/sys/fs/bpf";

/// The thread-waits array as published: where, and how big.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadWaitsPin {
    path: PathBuf,
    entries: u32,
    map_id: u32,
}

impl ThreadWaitsPin {
    /// Where the array is pinned.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Entries, the two header entries included.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Thread ids that have a slot (0 up to this, excluded).
    pub fn slots(&self) -> u32 {
        self.entries.saturating_sub(waits::HEADER_ENTRIES as u32)
    }

    /// The array's memory, bytes.
    pub fn bytes(&self) -> usize {
        self.entries as usize * waits::ENTRY_BYTES
    }

    /// The kernel's id of the array.
    pub fn map_id(&self) -> u32 {
        self.map_id
    }
}

/// The host's `pid_max`: thread ids are below it.
pub fn pid_max() -> Result<usize> {
    let path = "/proc/sys/kernel/pid_max";
    let text = fs::read_to_string(path)
        .map_err(|e| Error::with_source(ErrorKind::Io, format!("reading {path}"), e))?;
    text.trim().parse().map_err(|_| {
        Error::new(
            ErrorKind::Unsupported,
            format!("{path} holds {:?}, not a number", text.trim()),
        )
    })
}

/// Entries of the array for thread waits within `max_bytes` on this host,
/// or just the header when `on` is false (thread waits off).
pub fn entries(on: bool, max_bytes: usize) -> Result<u32> {
    if !on {
        return Ok(waits::HEADER_ENTRIES as u32);
    }
    let tids = waits::tids_within(pid_max()?, max_bytes);
    if tids == 0 {
        return Err(Error::new(
            ErrorKind::ThreadWaits,
            format!(
                "a thread-waits budget of {max_bytes} bytes holds no thread's slot; give at least {} bytes (--thread-waits-memory) or turn thread waits off (--thread-waits off)",
                waits::bytes_for(1)
            ),
        ));
    }
    Ok(u32::try_from(waits::entries_for(tids)).unwrap_or(u32::MAX))
}

/// `CLOCK_MONOTONIC` now, ns.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// The header entry (entry 0) as the array holds it.
pub fn header_bytes(state: u64, started_ns: u64, entries: u32, pid: u32) -> [u8; 32] {
    let mut h = [0u8; waits::ENTRY_BYTES];
    let at = waits::header::MAGIC;
    h[at..at + 4].copy_from_slice(&waits::MAGIC.to_ne_bytes());
    let at = waits::header::VERSION;
    h[at..at + 4].copy_from_slice(&waits::VERSION.to_ne_bytes());
    let at = waits::header::STATE;
    h[at..at + 8].copy_from_slice(&state.to_ne_bytes());
    let at = waits::header::STARTED_NS;
    h[at..at + 8].copy_from_slice(&started_ns.to_ne_bytes());
    let at = waits::header::ENTRIES;
    h[at..at + 4].copy_from_slice(&entries.to_ne_bytes());
    let at = waits::header::AGENT_PID;
    h[at..at + 4].copy_from_slice(&pid.to_ne_bytes());
    h
}

/// A header read back, `None` without the magic: (state, agent pid).
fn parse_header(h: &[u8]) -> Option<(u64, u32)> {
    let u32_at = |at: usize| Some(u32::from_ne_bytes(h.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_ne_bytes(h.get(at..at + 8)?.try_into().ok()?));
    if u32_at(waits::header::MAGIC)? != waits::MAGIC {
        return None;
    }
    Some((
        u64_at(waits::header::STATE)?,
        u32_at(waits::header::AGENT_PID)?,
    ))
}

fn cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::new(
            ErrorKind::ThreadWaits,
            format!(
                "the thread-waits pin {} contains a NUL byte",
                path.display()
            ),
        )
    })
}

/// `BPF_OBJ_GET` of `path` with flags 0; the errno on failure.
pub fn obj_get(path: &Path) -> Result<OwnedFd, io::Error> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a NUL-terminated path; bpf_obj_get returns a new fd
    // or a negative errno.
    let fd = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The kernel id of the map behind `fd`, `None` if it is not a map.
pub fn map_id(fd: &OwnedFd) -> Option<u32> {
    let mut info = libbpf_sys::bpf_map_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: `info` is a writable bpf_map_info of `len` bytes.
    let ret = unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    (ret == 0).then_some(info.id)
}

/// Entry 0 of the map behind `fd`, read with a lookup (root may look up a
/// frozen map); `None` when it is not an array of 32-byte entries.
fn read_header(fd: &OwnedFd) -> Option<[u8; 32]> {
    let mut info = libbpf_sys::bpf_map_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: `info` is a writable bpf_map_info of `len` bytes.
    let ret = unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if ret != 0
        || info.type_ != libbpf_sys::BPF_MAP_TYPE_ARRAY
        || info.key_size != 4
        || info.value_size as usize != waits::ENTRY_BYTES
    {
        return None;
    }
    let key = 0u32;
    let mut value = [0u8; 32];
    // SAFETY: the key is 4 bytes and the value 32, as the map's info says.
    let ret = unsafe {
        libbpf_sys::bpf_map_lookup_elem(
            fd.as_raw_fd(),
            (&key as *const u32).cast(),
            value.as_mut_ptr().cast(),
        )
    };
    (ret == 0).then_some(value)
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data; `c` is NUL-terminated.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type as i64 == BPF_FS_MAGIC
    }
}

/// Mounts bpffs at /sys/fs/bpf when `dir` is below it and nothing is
/// mounted there yet; then checks that `dir`'s nearest existing ancestor
/// is on bpffs.
fn ensure_bpffs(dir: &Path) -> Result<()> {
    let bpffs = Path::new(BPFFS);
    if dir.starts_with(bpffs) && !is_bpffs(bpffs) {
        let (src, target, fstype) = (c"bpf", c"/sys/fs/bpf", c"bpf");
        // SAFETY: all strings are NUL-terminated; no mount data.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(Error::with_source(
                ErrorKind::ThreadWaits,
                format!("mounting bpffs at {BPFFS} for the thread-waits pin (run `mount -t bpf bpf {BPFFS}`, or --thread-waits off)"),
                io::Error::last_os_error(),
            ));
        }
    }
    let existing = dir.ancestors().find(|a| a.exists()).unwrap_or(dir);
    if !is_bpffs(existing) {
        return Err(Error::new(
            ErrorKind::ThreadWaits,
            format!(
                "the thread-waits pin directory {} is not on a bpffs mount; give --thread-waits a path under {BPFFS} (or mount bpffs: `mount -t bpf bpf DIR`)",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Creates `dir` (0755, root's) if absent, and refuses a directory that
/// is not root's or that others may write: whoever can write it could
/// replace the pin with an array of their own.
fn ensure_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        let made = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            // Whatever the umask (systemd units often set 0077): readers
            // must be able to reach the pin.
            .and_then(|()| fs::set_permissions(dir, fs::Permissions::from_mode(0o755)));
        made.map_err(|e| {
            Error::with_source(
                ErrorKind::ThreadWaits,
                format!(
                    "creating the thread-waits pin directory {} (is bpffs writable here? give --thread-waits another path, or `off`)",
                    dir.display()
                ),
                e,
            )
        })?;
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| {
        Error::with_source(
            ErrorKind::ThreadWaits,
            format!(
                "inspecting the thread-waits pin directory {}",
                dir.display()
            ),
            e,
        )
    })?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(Error::new(
            ErrorKind::ThreadWaits,
            format!(
                "refusing to pin thread waits in {}: it is {} owned by uid {} with mode {:o}, and whoever can write it could replace the array; make it a root-owned directory others cannot write (`chown root:root {0} && chmod 755 {0}`), or give --thread-waits another path",
                dir.display(),
                if meta.is_dir() { "a directory" } else { "not a directory" },
                meta.uid(),
                meta.mode() & 0o7777,
            ),
        ));
    }
    Ok(())
}

/// Refuses when a live agent's array is pinned at `path`; anything else
/// there (a gone array, a dead agent's, another object) is replaced.
fn check_existing(path: &Path) -> Result<()> {
    let Ok(fd) = obj_get(path) else {
        return Ok(());
    };
    if let Some((state, pid)) = read_header(&fd).as_ref().and_then(|h| parse_header(h)) {
        if state == waits::LIVE && alive(pid) {
            return Err(Error::new(
                ErrorKind::ThreadWaits,
                format!(
                    "another agent publishes thread waits at {} (pid {pid}); stop it or give --thread-waits another path",
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Writes the header (live), freezes the array and pins it at `path`,
/// readable and mappable by everyone. `agent_pid` is this process's id
/// in the initial pid namespace, as the probe's exit programs see it.
pub(crate) fn publish(
    map_fd: i32,
    entries: u32,
    path: &Path,
    agent_pid: u32,
) -> Result<ThreadWaitsPin> {
    let fail = |what: &str, e: io::Error| {
        Error::with_source(
            ErrorKind::ThreadWaits,
            format!(
                "{what} (thread-waits pin {}; give --thread-waits another path, or `off`)",
                path.display()
            ),
            e,
        )
    };
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) if !d.as_os_str().is_empty() => (d, n),
        _ => {
            return Err(Error::new(
                ErrorKind::ThreadWaits,
                format!(
                    "the thread-waits pin {} names no file in a directory; give an absolute path such as {}",
                    path.display(),
                    waits::DEFAULT_PIN
                ),
            ))
        }
    };
    if name.as_bytes().contains(&b'.') {
        return Err(Error::new(
            ErrorKind::ThreadWaits,
            format!(
                "the thread-waits pin {} has a dot in its name, which bpffs refuses; give --thread-waits a name without one",
                path.display()
            ),
        ));
    }
    ensure_bpffs(dir)?;
    ensure_dir(dir)?;
    check_existing(path)?;

    let header = header_bytes(waits::LIVE, monotonic_ns(), entries, agent_pid);
    let key = 0u32;
    // SAFETY: the key is 4 bytes and the value 32, the map's sizes.
    let ret = unsafe {
        libbpf_sys::bpf_map_update_elem(
            map_fd,
            (&key as *const u32).cast(),
            header.as_ptr().cast(),
            libbpf_sys::BPF_ANY as u64,
        )
    };
    if ret != 0 {
        return Err(fail(
            "writing the header",
            io::Error::from_raw_os_error(-ret),
        ));
    }
    // SAFETY: a plain command on a map descriptor we own.
    let ret = unsafe { libbpf_sys::bpf_map_freeze(map_fd) };
    if ret != 0 {
        return Err(fail(
            "freezing the array",
            io::Error::from_raw_os_error(-ret),
        ));
    }

    // Pinned under a temporary name, opened to everyone, then renamed over
    // the path: readers never find a pin they cannot open.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // bpffs refuses names with a dot (reserved), so no hidden name.
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(
        "-tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(tmp_name);
    let tmp_c = cstring(&tmp)?;
    // SAFETY: `tmp_c` is NUL-terminated; the fd is the map's.
    let ret = unsafe { libbpf_sys::bpf_obj_pin(map_fd, tmp_c.as_ptr()) };
    if ret != 0 {
        return Err(fail(
            "pinning the array",
            io::Error::from_raw_os_error(-ret),
        ));
    }
    let placed = fs::set_permissions(&tmp, fs::Permissions::from_mode(0o666))
        .map_err(|e| fail("making the pin readable by everyone", e))
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| fail("renaming the pin into place", e)));
    if let Err(e) = placed {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    // SAFETY: map_fd is the probe's open map descriptor, borrowed here.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(map_fd) };
    let owned = borrowed
        .try_clone_to_owned()
        .map_err(|e| fail("duplicating the map descriptor", e))?;
    let map_id = map_id(&owned).unwrap_or(0);
    Ok(ThreadWaitsPin {
        path: path.to_path_buf(),
        entries,
        map_id,
    })
}

/// Removes the pin if it still names this array (another agent may have
/// replaced it since, after this one was marked gone).
pub(crate) fn unpin_if_ours(pin: &ThreadWaitsPin) {
    let Ok(fd) = obj_get(&pin.path) else {
        return;
    };
    if map_id(&fd) == Some(pin.map_id) {
        let _ = fs::remove_file(&pin.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = header_bytes(waits::LIVE, 5, 32_770, 42);
        assert_eq!(parse_header(&h), Some((waits::LIVE, 42)));
        assert_eq!(&h[..4], b"TDWT");
        assert_eq!(u32::from_ne_bytes(h[24..28].try_into().unwrap()), 32_770);
        assert_eq!(parse_header(&[0u8; 32]), None);
    }

    #[test]
    fn off_is_the_header_alone() {
        assert_eq!(entries(false, 0).unwrap(), 2);
        assert_eq!(
            entries(true, 64).unwrap_err().kind(),
            ErrorKind::ThreadWaits
        );
    }
}
