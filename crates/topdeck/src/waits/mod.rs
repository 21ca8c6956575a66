// SPDX-License-Identifier: Apache-2.0
//! The agent's thread-waits array, mapped read-only: each thread's
//! cumulative run-queue wait, kept by the scheduler probe and read here
//! with plain loads (docs/FORMAT.md §10, `topdeck_format::waits`).
//!
//! Writers use it through [`Timer`](crate::Timer), which records each
//! request's CPU wait; observers use [`ThreadWaits::slot`] to sum a
//! process's threads over a span:
//!
//! ```no_run
//! use topdeck::ThreadWaits;
//!
//! // None: no agent (or TOPDECK_THREAD_WAITS=off); try_from_env says why.
//! let Some(waits) = ThreadWaits::from_env() else { return };
//! let threads: Vec<u32> = vec![4242, 4243]; // host thread ids, from /proc/<pid>/task
//! let sum = |w: &ThreadWaits| {
//!     let mut s = topdeck_format::waits::Waits::default();
//!     for &tid in &threads {
//!         if let Some(slot) = w.slot(tid) {
//!             s += slot;
//!         }
//!     }
//!     s
//! };
//! let before = sum(&waits);
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let after = sum(&waits);
//! // Slots only grow; trust a difference only if the agent was live throughout.
//! if waits.state() == topdeck::waits::State::Live {
//!     println!("waited {} ns for a CPU", after.since(&before).total);
//! }
//! ```

mod bpf;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod tid;

use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use topdeck_format::waits::{self as fmt_waits, header, Waits, ENTRY_BYTES, HEADER_ENTRIES};

use crate::error::{Error, ErrorKind, Result};

pub(crate) use tid::host_tid;

/// Where the array is: the agent's state as its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The agent runs: differences of slots are the waits.
    Live,
    /// The agent has gone: slots stopped advancing, differences mean nothing.
    Gone,
    /// The agent has not finished setting the array up.
    NotSetUp,
}

/// The thread-waits array, mapped read-only (`PROT_READ`, `MAP_SHARED`).
/// Reads are plain loads of memory the probe writes; no system call after
/// [`open`](Self::open). Unmapped when dropped.
pub struct ThreadWaits {
    base: NonNull<u8>,
    len: usize,
    /// Entries the kernel says the array has, header included.
    entries: usize,
    /// The kernel's id of the map: tells a new array from the same one.
    id: u32,
    path: PathBuf,
}

// SAFETY: the mapping is read-only shared memory read through atomics; the
// pointer is never written through and stays valid until drop.
unsafe impl Send for ThreadWaits {}
// SAFETY: as above: shared access is loads of atomics only.
unsafe impl Sync for ThreadWaits {}

/// The pin a writer looks at: `TOPDECK_THREAD_WAITS` if set (`off`: none),
/// else the default. The one place the environment is read.
pub(crate) fn pin_from_env() -> Option<PathBuf> {
    match std::env::var_os(fmt_waits::PIN_ENV) {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => Some(PathBuf::from(fmt_waits::DEFAULT_PIN)),
    }
}

impl ThreadWaits {
    /// Maps the array pinned at `path`. Refuses a pin whose directory is
    /// not root-owned or is writable by group or others (anyone could have
    /// planted it), a map that is not a memory-mappable array of 32-byte
    /// entries, and a header of another magic or version.
    pub fn open(path: &Path) -> Result<ThreadWaits> {
        check_dir(path)?;
        let fd = bpf::obj_get(path).map_err(|e| open_error(path, e))?;
        let info = bpf::map_info(fd.as_raw_fd())
            .map_err(|e| Error::io("cannot ask the kernel what this BPF object is", path, e))?;
        check_info(path, &info)?;
        let entries = info.max_entries as usize;
        let len = entries * ENTRY_BYTES;
        // SAFETY: a new read-only shared mapping of the map's values, whose
        // size the kernel just reported; nothing else is at that address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(Error::io("cannot map the thread-waits array", path, e));
        }
        // The mapping holds the map; the descriptor is not needed any more.
        drop(fd);
        let waits = ThreadWaits {
            base: NonNull::new(p.cast()).expect("mmap does not return NULL on success"),
            len,
            entries,
            id: info.id,
            path: path.to_owned(),
        };
        waits.check_header()?;
        Ok(waits)
    }

    /// The array a writer uses: the pin `TOPDECK_THREAD_WAITS` names, else
    /// `/sys/fs/bpf/topdeck/thread_waits`. `None` when it is `off`, when
    /// no agent has pinned one, or on any other error (which
    /// [`try_from_env`](Self::try_from_env) returns).
    pub fn from_env() -> Option<ThreadWaits> {
        Self::try_from_env().ok().flatten()
    }

    /// As [`from_env`](Self::from_env), with the reason when a pin exists
    /// and cannot be used: `Ok(None)` for `off` or no pin.
    pub fn try_from_env() -> Result<Option<ThreadWaits>> {
        match pin_from_env() {
            None => Ok(None),
            Some(p) => Self::open_if_pinned(&p),
        }
    }

    /// As [`open`](Self::open), `Ok(None)` when nothing is pinned there.
    pub fn open_if_pinned(path: &Path) -> Result<Option<ThreadWaits>> {
        match Self::open(path) {
            Ok(w) => Ok(Some(w)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The pin this array was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The kernel's id of the map (`bpftool map show id N`).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The agent's state, read now.
    pub fn state(&self) -> State {
        match self.state_word().load(Relaxed) {
            fmt_waits::LIVE => State::Live,
            fmt_waits::GONE => State::Gone,
            _ => State::NotSetUp,
        }
    }

    /// `CLOCK_MONOTONIC` ns when the agent created the array.
    pub fn started_ns(&self) -> u64 {
        self.word(header::STARTED_NS).load(Relaxed)
    }

    /// The agent's process id.
    pub fn agent_pid(&self) -> u32 {
        self.word32(header::AGENT_PID).load(Relaxed)
    }

    /// Thread ids with a slot: `0..tids()`.
    pub fn tids(&self) -> u32 {
        (self.entries - HEADER_ENTRIES) as u32
    }

    /// Host thread `tid`'s cumulative waits (four plain loads), or `None`
    /// past the last slot. Slots only grow and a reused id carries on its
    /// predecessor's sum: take differences over a span, while
    /// [`state`](Self::state) stays [`State::Live`].
    pub fn slot(&self, tid: u32) -> Option<Waits> {
        let total = self.slot_total(tid)?;
        let w = |i: usize| {
            // SAFETY: the slot's four words are inside the mapping (checked
            // by slot_total), 8-aligned, and live as long as `self`.
            unsafe { &*(total as *const AtomicU64).add(i) }.load(Relaxed)
        };
        Some(Waits {
            total: w(0),
            own: w(1),
            other: w(2),
            system: w(3),
        })
    }

    /// The word holding host thread `tid`'s total wait, for callers that
    /// load it on a hot path (a timer: one load at start, one at stop).
    #[inline(always)]
    pub fn slot_total(&self, tid: u32) -> Option<&AtomicU64> {
        if (tid as usize) < self.entries - HEADER_ENTRIES {
            Some(self.word(fmt_waits::slot_offset(tid) + fmt_waits::slot::TOTAL))
        } else {
            None
        }
    }

    /// The header's state word (`LIVE`, `GONE`, 0).
    #[inline(always)]
    pub fn state_word(&self) -> &AtomicU64 {
        self.word(header::STATE)
    }

    #[inline(always)]
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= self.len && off % 8 == 0);
        // SAFETY: callers pass 8-aligned offsets inside the mapping (the
        // header, or a slot below `entries`); the mapping is page-aligned
        // and lives as long as `self`; the kernel writes it concurrently,
        // hence atomics.
        unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU64) }
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= self.len && off % 4 == 0);
        // SAFETY: as `word`, 4-aligned.
        unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU32) }
    }

    /// A header not written yet (all zero) is accepted as not set up; one
    /// of another magic or version is refused.
    fn check_header(&self) -> Result<()> {
        let magic = self.word32(header::MAGIC).load(Relaxed);
        let version = self.word32(header::VERSION).load(Relaxed);
        if magic == 0 && version == 0 && self.state_word().load(Relaxed) == 0 {
            return Ok(());
        }
        if magic != fmt_waits::MAGIC {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "{}: not a topdeck thread-waits array (magic {magic:#010x}, want {:#010x}); \
                     point {} at the agent's pin (`topdeck agent --thread-waits`)",
                    self.path.display(),
                    fmt_waits::MAGIC,
                    fmt_waits::PIN_ENV
                ),
            )
            .with_path(&self.path));
        }
        if version != fmt_waits::VERSION {
            return Err(Error::new(
                ErrorKind::UnsupportedVersion,
                format!(
                    "{}: thread-waits array version {version}, this library reads {}; \
                     run an agent and a library of the same release",
                    self.path.display(),
                    fmt_waits::VERSION
                ),
            )
            .with_path(&self.path));
        }
        Ok(())
    }
}

impl Drop for ThreadWaits {
    fn drop(&mut self) {
        // SAFETY: our own mapping, of that length; nothing borrows it past
        // `self` (borrows of its words are tied to `&self`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

impl fmt::Debug for ThreadWaits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadWaits")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("tids", &self.tids())
            .field("state", &self.state())
            .finish()
    }
}

/// The pin's directory must be root's and writable by root only: in any
/// other, another user could have pinned an array of their own there (and
/// fed every timer invented waits). Ancestors must be root's too, or
/// sticky (as bpffs's root is), so the directory cannot be swapped.
fn check_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut strict = true;
    for d in dir.ancestors() {
        let d = if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        };
        let meta = match std::fs::metadata(d) {
            Ok(m) => m,
            Err(e) if strict && e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "{}: no thread-waits array: its directory does not exist",
                        path.display()
                    ),
                )
                .with_path(path))
            }
            Err(e) => {
                return Err(Error::io(
                    "cannot check the thread-waits pin's directory",
                    d,
                    e,
                ))
            }
        };
        let writable_by_others = meta.mode() & 0o022 != 0;
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.uid() != 0 || (writable_by_others && (strict || !sticky)) {
            return Err(Error::new(
                ErrorKind::UnsafeDirectory,
                format!(
                    "{}: refusing the thread-waits array: {} is owned by uid {} with mode {:o}, \
                     so another user could have pinned it; the agent pins it in a root-owned \
                     0755 directory: fix the directory or point {} elsewhere",
                    path.display(),
                    d.display(),
                    meta.uid(),
                    meta.mode() & 0o7777,
                    fmt_waits::PIN_ENV
                ),
            )
            .with_path(path));
        }
        strict = false;
    }
    Ok(())
}

fn open_error(path: &Path, e: io::Error) -> Error {
    let (kind, hint) = match e.raw_os_error() {
        Some(libc::ENOENT) => (
            ErrorKind::NotFound,
            "is the agent running (`topdeck agent`)?",
        ),
        Some(libc::EACCES | libc::EPERM) => (
            ErrorKind::PermissionDenied,
            "the agent pins it with mode 0666: check the pin's mode and any LSM policy",
        ),
        _ => (
            ErrorKind::Io,
            "is it a pin on a bpffs mount, made by `topdeck agent`?",
        ),
    };
    let mut err = Error::io("cannot open the pinned thread-waits array", path, e).with_hint(hint);
    if kind != ErrorKind::Io {
        err = err.with_kind(kind);
    }
    err
}

fn check_info(path: &Path, info: &bpf::MapInfo) -> Result<()> {
    let problem = if info.map_type != bpf::BPF_MAP_TYPE_ARRAY {
        Some(format!("map type {}, not an array", info.map_type))
    } else if info.value_size as usize != ENTRY_BYTES {
        Some(format!(
            "value size {} bytes, not {ENTRY_BYTES}",
            info.value_size
        ))
    } else if info.map_flags & bpf::BPF_F_MMAPABLE == 0 {
        Some("created without BPF_F_MMAPABLE, so it cannot be mapped".to_owned())
    } else if (info.max_entries as usize) <= HEADER_ENTRIES {
        Some(format!(
            "{} entries, too few for the header",
            info.max_entries
        ))
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "{}: not a topdeck thread-waits array: {p}; point {} at the agent's pin \
                 (`topdeck agent --thread-waits`)",
                path.display(),
                fmt_waits::PIN_ENV
            ),
        )
        .with_path(path)),
    }
}

#[cfg(test)]
pub(crate) mod tests;
