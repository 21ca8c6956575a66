// SPDX-License-Identifier: Apache-2.0
//! A real thread-waits array for tests, made without the agent: a
//! `BPF_F_MMAPABLE` array created with raw bpf(2) calls, written through a
//! writable mapping the test holds (so it is not frozen, unlike the
//! agent's), and pinned in a fresh directory of a bpffs mount. Needs root
//! (`CAP_BPF` and `CAP_SYS_ADMIN` to mount bpffs); [`TestArray::create`]
//! returns `None` and says so on stderr otherwise, so tests skip.
//!
//! Built for this crate's tests and, with the `testing` feature, for other
//! crates' (benches, bindings).
//!
//! ```no_run
//! use topdeck::waits::testing::TestArray;
//! let Some(array) = TestArray::create(1 << 16) else { return }; // not root: skipped
//! array.set_total(42, 1_000);
//! let waits = topdeck::ThreadWaits::open(array.pin()).unwrap();
//! assert_eq!(waits.slot(42).unwrap().total, 1_000);
//! ```

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use topdeck_format::waits::{self as fmt_waits, header, ENTRY_BYTES, HEADER_ENTRIES};

use super::bpf;

/// Where bpffs is mounted for tests (mounted there if it is not).
pub const BPFFS: &str = "/sys/fs/bpf";

/// A thread-waits array a test owns; unpinned, its directory removed and
/// its mapping dropped with it.
pub struct TestArray {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    dir: PathBuf,
    pin: PathBuf,
}

// SAFETY: the mapping is written and read through atomics only.
unsafe impl Send for TestArray {}
// SAFETY: as above.
unsafe impl Sync for TestArray {}

impl TestArray {
    /// A live array (magic, version, state LIVE, this process as agent)
    /// with slots for thread ids below `tids`, pinned as `thread_waits` in
    /// a new directory `/sys/fs/bpf/topdeck-unit-<pid>-<n>` (root's, 0755);
    /// `None`, said on stderr, when this process cannot make one.
    pub fn create(tids: u32) -> Option<TestArray> {
        let made = Self::create_raw(
            ENTRY_BYTES as u32,
            tids + HEADER_ENTRIES as u32,
            bpf::BPF_F_MMAPABLE,
        );
        match made {
            Ok(a) => {
                a.write_header();
                a.set_state(fmt_waits::LIVE);
                Some(a)
            }
            Err(why) => {
                eprintln!("skipped: cannot make a real thread-waits array: {why}");
                None
            }
        }
    }

    /// Any array, pinned in a fresh directory, header untouched; a map
    /// without `BPF_F_MMAPABLE` is pinned but not mapped (tests of refusals).
    pub fn create_raw(value_size: u32, entries: u32, flags: u32) -> Result<TestArray, String> {
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        ensure_bpffs()?;
        let fd = bpf::create_array(value_size, entries, flags)
            .map_err(|e| format!("BPF_MAP_CREATE: {e}"))?;
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = PathBuf::from(format!(
            "{BPFFS}/topdeck-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Relaxed)
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // 0755 whatever the umask: readers refuse a pin others could write.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let pin = dir.join("thread_waits");
        let mut a = TestArray {
            fd,
            base: std::ptr::null_mut(),
            len: 0,
            dir,
            pin,
        };
        a.repin().map_err(|e| format!("BPF_OBJ_PIN: {e}"))?;
        if flags & bpf::BPF_F_MMAPABLE != 0 {
            let len = value_size as usize * entries as usize;
            // SAFETY: a new shared writable mapping of the map's values.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    a.fd.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(format!("mmap: {}", std::io::Error::last_os_error()));
            }
            a.base = p.cast();
            a.len = len;
        }
        Ok(a)
    }

    /// The pin: pass it to `ThreadWaits::open` or `RegistryBuilder::thread_waits`.
    pub fn pin(&self) -> &Path {
        &self.pin
    }

    /// The directory holding the pin.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes the pin (the array lives on while mapped).
    pub fn unpin(&self) {
        let _ = std::fs::remove_file(&self.pin);
    }

    /// Pins this array at [`pin`](Self::pin) again (after `unpin`, or
    /// after another array's pin there was removed).
    pub fn repin(&self) -> std::io::Result<()> {
        bpf::pin(self.fd.as_raw_fd(), &self.pin)
    }

    /// Pins this array at another path (which must not exist yet).
    pub fn pin_at(&self, path: &Path) -> std::io::Result<()> {
        bpf::pin(self.fd.as_raw_fd(), path)
    }

    /// Writes magic, version, entries, start time and agent pid.
    pub fn write_header(&self) {
        self.word32(header::MAGIC).store(fmt_waits::MAGIC, Relaxed);
        self.word32(header::VERSION)
            .store(fmt_waits::VERSION, Relaxed);
        let entries = (self.len / ENTRY_BYTES) as u32;
        self.word32(header::ENTRIES).store(entries, Relaxed);
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        self.word(header::STARTED_NS).store(ns, Relaxed);
        self.word32(header::AGENT_PID)
            .store(std::process::id(), Relaxed);
    }

    /// Sets `header.state` (`LIVE`, `GONE`, 0).
    pub fn set_state(&self, state: u64) {
        self.word(header::STATE).store(state, Relaxed);
    }

    /// Sets `header.magic`.
    pub fn set_magic(&self, magic: u32) {
        self.word32(header::MAGIC).store(magic, Relaxed);
    }

    /// Sets `header.version`.
    pub fn set_version(&self, version: u32) {
        self.word32(header::VERSION).store(version, Relaxed);
    }

    /// Sets thread `tid`'s total wait, ns.
    pub fn set_total(&self, tid: u32, ns: u64) {
        self.word(fmt_waits::slot_offset(tid) + fmt_waits::slot::TOTAL)
            .store(ns, Relaxed);
    }

    /// Adds `ns` to thread `tid`'s total wait and, as the probe would
    /// split it, to its `other` part.
    pub fn add_wait(&self, tid: u32, ns: u64) {
        let off = fmt_waits::slot_offset(tid);
        self.word(off + fmt_waits::slot::TOTAL)
            .fetch_add(ns, Relaxed);
        self.word(off + fmt_waits::slot::OTHER)
            .fetch_add(ns, Relaxed);
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(
            off + 8 <= self.len,
            "offset {off} outside the test array's mapping"
        );
        // SAFETY: inside our writable mapping, 8-aligned.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        assert!(
            off + 4 <= self.len,
            "offset {off} outside the test array's mapping"
        );
        // SAFETY: inside our writable mapping, 4-aligned.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }
}

impl Drop for TestArray {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: our own mapping of that length.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
        let _ = std::fs::remove_file(&self.pin);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Mounts bpffs at [`BPFFS`] unless one is there.
fn ensure_bpffs() -> Result<(), String> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _held = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?
        .lines()
        .any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let fstype = f.iter().position(|&x| x == "-").and_then(|i| f.get(i + 1));
            f.get(4) == Some(&BPFFS) && fstype == Some(&"bpf")
        });
    if mounted {
        return Ok(());
    }
    let _ = std::fs::create_dir_all(BPFFS);
    // SAFETY: NUL-terminated literals; no data argument.
    let r = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            c"/sys/fs/bpf".as_ptr(),
            c"bpf".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(format!(
            "mount bpffs at {BPFFS}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The host's `pid_max`: slots for every thread id (32768 unless raised).
pub fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 22)
}
