// SPDX-License-Identifier: Apache-2.0
//! Copies out of a shared mapping that another process may truncate: a
//! SIGBUS during the copy becomes an error instead of killing the reader.
//! The handler is installed once, on first use; a successful copy makes no
//! system call.

use std::fmt;
use std::sync::OnceLock;

extern "C" {
    fn td_fault_guard_install() -> libc::c_int;
    fn td_guarded_copy(
        dst: *mut libc::c_void,
        src: *const libc::c_void,
        len: libc::size_t,
    ) -> libc::c_int;
}

/// Why a guarded copy failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyError {
    /// The source pages vanished: the file was truncated under the mapping.
    Fault,
    /// The SIGBUS handler could not be installed (errno).
    Install(i32),
}

impl fmt::Display for CopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fault => f.write_str("SIGBUS while copying from the mapping"),
            Self::Install(errno) => write!(
                f,
                "cannot install the SIGBUS guard: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

fn install() -> Result<(), CopyError> {
    static INSTALLED: OnceLock<Result<(), CopyError>> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: installs a process-wide handler that only acts on faults
        // inside `td_guarded_copy` and otherwise defers to the previous one.
        match unsafe { td_fault_guard_install() } {
            0 => Ok(()),
            e => Err(CopyError::Install(-e)),
        }
    })
}

/// Copies `dst.len()` bytes from `src` into `dst`; from an 8-aligned `src`,
/// each whole word with one aligned 8-byte load (never torn).
///
/// # Safety
/// `src..src + dst.len()` must lie inside a live mapping (which may be
/// truncated underneath: that is the point).
pub(crate) unsafe fn guarded_copy(dst: &mut [u8], src: *const u8) -> Result<(), CopyError> {
    install()?;
    // `dst` may be unaligned as a byte slice: copy through an aligned buffer then.
    if dst.as_ptr() as usize % 8 != 0 {
        let mut words = vec![0u64; dst.len().div_ceil(8)];
        // SAFETY: `words` is aligned and as long as `dst`; the caller's contract covers `src`.
        unsafe { guarded_copy(&mut bytes_of(&mut words)[..dst.len()], src)? };
        dst.copy_from_slice(&bytes_of(&mut words)[..dst.len()]);
        return Ok(());
    }
    // SAFETY: `dst` is writable for its length and 8-aligned; the caller
    // guarantees `src` is readable (or faults, which the guard catches).
    match unsafe { td_guarded_copy(dst.as_mut_ptr().cast(), src.cast(), dst.len()) } {
        0 => Ok(()),
        _ => Err(CopyError::Fault),
    }
}

fn bytes_of(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no invalid bit patterns and no padding; the byte view
    // covers exactly the same memory with a weaker alignment.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), words.len() * 8) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::AsRawFd;

    struct Map {
        ptr: *mut libc::c_void,
        len: usize,
    }

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly what `map` mapped.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }

    fn map(file: &std::fs::File, len: usize) -> Map {
        // SAFETY: a fresh read-only shared mapping of a file we hold open.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Map { ptr, len }
    }

    fn file_of(len: usize) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::io::Write::write_all(&mut f, &data).unwrap();
        f
    }

    #[test]
    fn a_healthy_mapping_copies_exactly() {
        let f = file_of(64 << 10);
        let m = map(&f, 64 << 10);
        let mut out = vec![0u64; 8 << 10];
        // SAFETY: the whole range is mapped.
        unsafe { guarded_copy(bytes_of(&mut out), m.ptr.cast()) }.unwrap();
        let bytes = bytes_of(&mut out);
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }

    #[test]
    fn a_truncated_mapping_is_an_error_and_the_guard_rearms() {
        let f = file_of(64 << 10);
        let m = map(&f, 64 << 10);
        f.set_len(4096).unwrap();
        let mut out = vec![0u8; 64 << 10];
        for _ in 0..3 {
            // SAFETY: the range is mapped; its tail is past the new end of file.
            let r = unsafe { guarded_copy(&mut out, m.ptr.cast()) };
            assert_eq!(r, Err(CopyError::Fault));
            let mut head = vec![0u8; 4096];
            // SAFETY: the first page is still backed by the file.
            unsafe { guarded_copy(&mut head, m.ptr.cast()) }.unwrap();
            assert_eq!(head[1], 1);
        }
    }

    #[test]
    fn threads_fault_independently() {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let f = file_of(16 << 10);
                    let m = map(&f, 16 << 10);
                    f.set_len(0).unwrap();
                    let mut out = vec![0u8; 16 << 10];
                    for _ in 0..100 {
                        // SAFETY: mapped range, truncated file.
                        let r = unsafe { guarded_copy(&mut out, m.ptr.cast()) };
                        assert_eq!(r, Err(CopyError::Fault));
                    }
                });
            }
        });
    }

    #[test]
    fn a_fault_outside_a_guarded_copy_still_kills() {
        if std::env::var_os("TOPDECK_FAULT_CHILD").is_some() {
            install().unwrap();
            let f = file_of(8192);
            let m = map(&f, 8192);
            f.set_len(0).unwrap();
            // SAFETY: deliberately touches a page past the end of the file.
            let v = unsafe { std::ptr::read_volatile(m.ptr.cast::<u8>()) };
            std::process::exit(i32::from(v));
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "reader::fault_guard::tests::a_fault_outside_a_guarded_copy_still_kills",
            ])
            .env("TOPDECK_FAULT_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{out:?}");
    }
}
