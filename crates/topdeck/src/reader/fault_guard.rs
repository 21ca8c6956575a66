// SPDX-License-Identifier: Apache-2.0
//! Copies out of a mapping that another process may truncate underneath us.
//!
//! Readers map other processes' registry files `MAP_SHARED`, `PROT_READ`. If
//! the owner (or anyone who can write the file) shrinks it while it is
//! mapped, touching a page past the new end raises `SIGBUS`, whose default
//! action kills the reader: one bad file would take down, say, a root
//! exporter reading everyone's metrics. [`guarded_copy`] copies from the
//! mapping into a private buffer with a `SIGBUS` handler armed for this
//! thread and this source range (`csrc/fault_guard.c`), so the fault becomes
//! an error for that one file. Any other `SIGBUS` still goes to the previous
//! disposition. The handler is installed once per process, on first use;
//! after that a successful copy makes no system call, and it reads each
//! aligned 8-byte source word with one load, so no value is ever torn
//! (docs/FORMAT.md, section 7).

use std::fmt;
use std::io;
use std::sync::OnceLock;

extern "C" {
    /// Installs the `SIGBUS` handler once per process; 0 or `-errno`.
    fn td_fault_guard_install() -> libc::c_int;
    /// Copies `len` bytes; 0, or 1 if `src` faulted.
    fn td_guarded_copy(
        dst: *mut libc::c_void,
        src: *const libc::c_void,
        len: libc::size_t,
    ) -> libc::c_int;
}

/// Why a guarded copy failed.
#[derive(Debug)]
pub(crate) enum GuardError {
    /// The mapped source vanished under the copy: another process truncated
    /// the file. The destination holds an unspecified prefix of the copy.
    Fault,
    /// The `SIGBUS` handler could not be installed, so nothing was copied.
    Install(io::Error),
}

impl fmt::Display for GuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fault => f.write_str("SIGBUS while copying from the mapping"),
            Self::Install(e) => write!(f, "cannot install the SIGBUS guard: {e}"),
        }
    }
}

impl std::error::Error for GuardError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Fault => None,
            Self::Install(e) => Some(e),
        }
    }
}

/// Installs the handler on first call; later calls cost one atomic load.
fn install() -> Result<(), GuardError> {
    static RESULT: OnceLock<libc::c_int> = OnceLock::new();
    // SAFETY: installs a process-wide SIGBUS handler that acts only on
    // faults inside `td_guarded_copy`'s source range on the faulting thread
    // and hands every other SIGBUS to the disposition it replaced.
    let rc = *RESULT.get_or_init(|| unsafe { td_fault_guard_install() });
    match rc {
        0 => Ok(()),
        e => Err(GuardError::Install(io::Error::from_raw_os_error(-e))),
    }
}

/// Copies `dst.len()` bytes from `src` into `dst`; a `SIGBUS` during the
/// copy (the file was truncated under the mapping) yields
/// [`GuardError::Fault`] instead of killing the process. Each aligned 8-byte
/// word of the source is read with one load; `dst` may have any alignment.
///
/// # Safety
/// `src..src + dst.len()` must lie inside a live mapping (which may be
/// truncated underneath: that is the point), and must not overlap `dst`.
pub(crate) unsafe fn guarded_copy(dst: &mut [u8], src: *const u8) -> Result<(), GuardError> {
    install()?;
    // SAFETY: `dst` is valid for writes of `dst.len()` bytes (a unique
    // borrow); the caller guarantees `src` is mapped for as many, and a fault
    // on it is caught because `install` succeeded above.
    match unsafe { td_guarded_copy(dst.as_mut_ptr().cast(), src.cast(), dst.len()) } {
        0 => Ok(()),
        _ => Err(GuardError::Fault),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::io::AsRawFd;
    use std::os::unix::process::ExitStatusExt;

    const KIB: usize = 1024;

    /// A read-only shared mapping, unmapped on drop.
    struct Map {
        ptr: *const u8,
        len: usize,
    }

    // SAFETY: the mapping is only read, through guarded copies.
    unsafe impl Sync for Map {}

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly what `map` mapped, which nothing uses now.
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
        }
    }

    /// Maps `len` bytes of `file` shared, `PROT_READ` the way readers do
    /// unless `prot` says otherwise.
    fn map_prot(file: &File, len: usize, prot: libc::c_int) -> Map {
        // SAFETY: a fresh mapping of an open file; it aliases no Rust object.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "{}", io::Error::last_os_error());
        Map {
            ptr: ptr.cast(),
            len,
        }
    }

    fn map(file: &File, len: usize) -> Map {
        map_prot(file, len, libc::PROT_READ)
    }

    fn pattern(i: usize) -> u8 {
        (i % 251) as u8
    }

    /// An unlinked file of `len` pattern bytes, in /dev/shm like real registries.
    fn file_of(len: usize) -> File {
        let mut f = tempfile::tempfile_in("/dev/shm")
            .or_else(|_| tempfile::tempfile())
            .unwrap();
        let data: Vec<u8> = (0..len).map(pattern).collect();
        io::Write::write_all(&mut f, &data).unwrap();
        f
    }

    fn truncate(file: &File, len: usize) {
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe { libc::ftruncate(file.as_raw_fd(), len as libc::off_t) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
    }

    fn sigbus_blocked() -> bool {
        // SAFETY: an all-zero sigset_t is a valid (empty) set to fill in.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: queries this thread's mask only (`set` NULL), into `set`.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set) };
        assert_eq!(rc, 0);
        // SAFETY: `set` was initialised by pthread_sigmask.
        unsafe { libc::sigismember(&set, libc::SIGBUS) == 1 }
    }

    #[test]
    fn a_healthy_mapping_copies_exactly() {
        let f = file_of(64 * KIB);
        let m = map(&f, 64 * KIB);
        let mut out = vec![0u8; 64 * KIB];
        // SAFETY: the whole range is mapped and backed by the file.
        unsafe { guarded_copy(&mut out, m.ptr) }.unwrap();
        assert!(out.iter().enumerate().all(|(i, &b)| b == pattern(i)));

        // Every alignment of source and destination, short and long.
        let mut buf = [0u8; 200];
        for off in 0..17 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 64, 129] {
                for dst_off in [0, 1, 3, 8] {
                    let dst = &mut buf[dst_off..dst_off + len];
                    // SAFETY: `off + len` is far inside the mapping.
                    unsafe { guarded_copy(dst, m.ptr.add(off)) }.unwrap();
                    assert!(
                        dst.iter().enumerate().all(|(i, &b)| b == pattern(off + i)),
                        "off {off} len {len} dst_off {dst_off}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_truncated_mapping_is_an_error_and_the_guard_rearms() {
        let f = file_of(64 * KIB);
        let m = map(&f, 64 * KIB);
        truncate(&f, 4 * KIB);
        let mut out = vec![0u8; 64 * KIB];
        for _ in 0..3 {
            // SAFETY: mapped range; all but its first page are past the end of file.
            let r = unsafe { guarded_copy(&mut out, m.ptr) };
            assert!(matches!(r, Err(GuardError::Fault)), "{r:?}");
            assert!(!sigbus_blocked(), "SIGBUS left blocked after the jump");
            // SAFETY: mapped range, entirely past the end of file.
            let r = unsafe { guarded_copy(&mut out[..8], m.ptr.add(40 * KIB)) };
            assert!(matches!(r, Err(GuardError::Fault)), "{r:?}");
            // The same thread copies again: the signal is not left blocked.
            let mut head = vec![0u8; 4 * KIB];
            // SAFETY: the first page is still backed by the file.
            unsafe { guarded_copy(&mut head, m.ptr) }.unwrap();
            assert!(head.iter().enumerate().all(|(i, &b)| b == pattern(i)));
        }
    }

    #[test]
    fn threads_fault_and_recover_concurrently() {
        let shared_file = file_of(64 * KIB);
        let shared = map(&shared_file, 64 * KIB);
        truncate(&shared_file, 4 * KIB);
        std::thread::scope(|s| {
            for t in 0..4 {
                let shared = &shared;
                s.spawn(move || {
                    let own_file = file_of(16 * KIB);
                    let own = map(&own_file, 16 * KIB);
                    truncate(&own_file, if t % 2 == 0 { 0 } else { 8 * KIB });
                    let mut out = vec![0u8; 64 * KIB];
                    for _ in 0..200 {
                        // SAFETY: mapped ranges; the truncated parts fault.
                        let r = unsafe { guarded_copy(&mut out, shared.ptr) };
                        assert!(matches!(r, Err(GuardError::Fault)), "{r:?}");
                        // SAFETY: as above.
                        let r = unsafe { guarded_copy(&mut out[..16 * KIB], own.ptr) };
                        assert!(matches!(r, Err(GuardError::Fault)), "{r:?}");
                        // SAFETY: the first page of the shared file is still there.
                        unsafe { guarded_copy(&mut out[..4 * KIB], shared.ptr) }.unwrap();
                        assert!(out[..4 * KIB]
                            .iter()
                            .enumerate()
                            .all(|(i, &b)| b == pattern(i)));
                    }
                });
            }
        });
    }

    /// What a child process does, after one caught fault, to a truncated
    /// mapping outside any guarded copy; and how it must end.
    const CHILD_MODES: &[(&str, Ending)] = &[
        // Rust's own (stack overflow) SIGBUS handler was there before us.
        ("rust", Ending::Signal(libc::SIGBUS)),
        ("default", Ending::Signal(libc::SIGBUS)),
        // The kernel overrides SIG_IGN for a fault.
        ("ignore", Ending::Signal(libc::SIGBUS)),
        // A handler of the program's own, which exits 42.
        ("chain", Ending::Exit(42)),
        // Not a fault: a SIGBUS sent with raise() under SIG_DFL.
        ("sent", Ending::Signal(libc::SIGBUS)),
        // A fault inside a guarded copy, but on its destination, not its source.
        ("destination", Ending::Signal(libc::SIGBUS)),
    ];

    #[derive(Debug, PartialEq)]
    enum Ending {
        Signal(i32),
        Exit(i32),
    }

    const CHILD_ENV: &str = "TOPDECK_FAULT_GUARD_CHILD";

    #[test]
    fn a_sigbus_outside_a_guarded_copy_is_not_swallowed() {
        if let Ok(mode) = std::env::var(CHILD_ENV) {
            child(&mode);
        }
        // The harness names this test by its module path without the crate.
        let path = module_path!();
        let name = format!(
            "{}::a_sigbus_outside_a_guarded_copy_is_not_swallowed",
            &path[path.find("::").unwrap() + 2..]
        );
        for (mode, ending) in CHILD_MODES {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", &name, "--test-threads=1", "--nocapture"])
                .env(CHILD_ENV, mode)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("caught the first fault"), "{mode}: {out:?}");
            let got = match (out.status.signal(), out.status.code()) {
                (Some(sig), _) => Ending::Signal(sig),
                (None, Some(code)) => Ending::Exit(code),
                (None, None) => unreachable!(),
            };
            assert_eq!(&got, ending, "{mode}: {out:?}");
        }
    }

    /// In the child: set up `mode`, catch one fault, then fault unguarded.
    fn child(mode: &str) -> ! {
        extern "C" fn exit_42(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(42) }
        }
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: lowers this process's own core limit: no core files from the test.
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
        let previous = match mode {
            "rust" => None,
            "default" | "sent" | "destination" => Some((libc::SIG_DFL, 0)),
            "ignore" => Some((libc::SIG_IGN, 0)),
            "chain" => Some((exit_42 as *const () as libc::sighandler_t, libc::SA_SIGINFO)),
            _ => panic!("unknown mode {mode}"),
        };
        if let Some((handler, flags)) = previous {
            // SAFETY: an all-zero sigaction is valid: no flags, empty mask.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = handler;
            sa.sa_flags = flags;
            // SAFETY: sets the disposition our guard will find and chain to.
            let rc = unsafe { libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) };
            assert_eq!(rc, 0);
        }

        let f = file_of(8 * KIB);
        let m = map(&f, 8 * KIB);
        truncate(&f, 0);
        let mut out = [0u8; 8];
        // SAFETY: mapped range past the end of file.
        let r = unsafe { guarded_copy(&mut out, m.ptr) };
        assert!(matches!(r, Err(GuardError::Fault)), "{r:?}");
        println!("caught the first fault");

        match mode {
            // SAFETY: sends SIGBUS to this thread; it must kill the process.
            "sent" => unsafe {
                libc::raise(libc::SIGBUS);
            },
            "destination" => {
                let g = file_of(8 * KIB);
                let w = map_prot(&g, 8 * KIB, libc::PROT_READ | libc::PROT_WRITE);
                truncate(&g, 0);
                // SAFETY: 8 mapped bytes, writable, aliased by nothing else;
                // writing them faults, which must kill the process.
                let dst = unsafe { std::slice::from_raw_parts_mut(w.ptr as *mut u8, 8) };
                let src = [7u8; 8];
                // SAFETY: `src` is a live local array of 8 bytes.
                let r = unsafe { guarded_copy(dst, src.as_ptr()) };
                println!("destination fault returned {r:?}");
            }
            // SAFETY: deliberately touches a vanished page with no guard: it
            // must end the process through the previous disposition.
            _ => unsafe {
                std::ptr::read_volatile(m.ptr);
            },
        }
        println!("survived an unguarded SIGBUS");
        std::process::exit(0);
    }
}
