// SPDX-License-Identifier: Apache-2.0
//! The calling thread's host thread id: the index of its slot. Found once
//! per thread (two or three system calls) and kept in a thread-local that
//! costs one TLS load afterwards.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// `PROC_PID_INIT_INO`: the inode of the initial pid namespace.
const INIT_PID_NS_INO: u64 = 0xEFFF_FFFC;

/// No thread of user space has id 0 (the idle task's), so 0 says "not
/// looked up yet" and the thread-local can be const-initialised.
const UNSET: u32 = 0;
/// The thread has no host id this process can learn.
pub(crate) const NO_TID: u32 = u32::MAX;

/// Whether the process is in the initial pid namespace: 0 unknown, 1 yes, 2 no.
static IN_INITIAL_PID_NS: AtomicU8 = AtomicU8::new(0);

thread_local! {
    // `const` and no destructor: reading it compiles to one TLS load.
    static HOST_TID: Cell<u32> = const { Cell::new(UNSET) };
}

/// The calling thread's host thread id, or [`NO_TID`].
#[inline(always)]
pub(crate) fn host_tid() -> u32 {
    let t = HOST_TID.with(Cell::get);
    if t != UNSET {
        t
    } else {
        look_up()
    }
}

#[cold]
#[inline(never)]
fn look_up() -> u32 {
    // A forked child's one thread inherits the forking thread's cached id
    // (and the pid namespace answer, which `unshare` may have changed for
    // children): forget both in the child, so it looks its own up.
    static AT_FORK: std::sync::Once = std::sync::Once::new();
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only stores to a const-initialised
        // thread-local and an atomic: async-signal-safe, as a fork child
        // handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(forget_after_fork)) };
    });
    let t = find().unwrap_or(NO_TID);
    HOST_TID.with(|c| c.set(t));
    t
}

extern "C" fn forget_after_fork() {
    HOST_TID.with(|c| c.set(UNSET));
    IN_INITIAL_PID_NS.store(0, Relaxed);
}

/// The host id: `gettid()` in the initial pid namespace; else the first
/// field of `NSpid` when the kernel lists more than one (the outermost
/// namespace `/proc` shows); else none.
fn find() -> Option<u32> {
    if in_initial_pid_ns() {
        // SAFETY: gettid has no arguments and cannot fail.
        return u32::try_from(unsafe { libc::gettid() }).ok();
    }
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    nspid_outermost(&status)
}

/// Whether this process lives in the initial pid namespace; the same for
/// every thread, so asked once.
fn in_initial_pid_ns() -> bool {
    match IN_INITIAL_PID_NS.load(Relaxed) {
        1 => true,
        2 => false,
        _ => {
            use std::os::unix::fs::MetadataExt;
            let yes =
                std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == INIT_PID_NS_INO);
            IN_INITIAL_PID_NS.store(if yes { 1 } else { 2 }, Relaxed);
            yes
        }
    }
}

/// The first id on the `NSpid:` line of a status file, when it has more
/// than one (one id means `/proc` shows only the thread's own namespace).
pub(crate) fn nspid_outermost(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let mut ids = line.split_whitespace();
    let first = ids.next()?.parse().ok()?;
    ids.next().map(|_| first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_gives_the_outermost_id_only_when_nested() {
        assert_eq!(nspid_outermost("Name:\tx\nNSpid:\t4242\t7\n"), Some(4242));
        assert_eq!(nspid_outermost("NSpid:\t4242\n"), None);
        assert_eq!(nspid_outermost("Pid:\t1\n"), None);
        assert_eq!(nspid_outermost("NSpid:\tx\t7\n"), None);
    }

    #[test]
    fn a_thread_of_the_initial_namespace_is_its_own_gettid() {
        if !in_initial_pid_ns() {
            eprintln!("skipped: this test runs in a nested pid namespace");
            return;
        }
        // SAFETY: gettid has no arguments and cannot fail.
        let me = unsafe { libc::gettid() } as u32;
        assert_eq!(host_tid(), me);
        let other = std::thread::spawn(host_tid).join().unwrap();
        assert_ne!(other, me);
        assert_ne!(other, NO_TID);
    }

    #[test]
    fn a_forked_child_looks_its_own_id_up() {
        if !in_initial_pid_ns() {
            eprintln!("skipped: this test runs in a nested pid namespace");
            return;
        }
        let parent = host_tid();
        // SAFETY: the child only reads its id and exits without unwinding.
        match unsafe { libc::fork() } {
            0 => {
                // SAFETY: gettid cannot fail.
                let ok = host_tid() == unsafe { libc::gettid() } as u32 && host_tid() != parent;
                // SAFETY: leaves the child at once, running nothing of the parent's.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            -1 => panic!("fork: {}", std::io::Error::last_os_error()),
            child => {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "{status}"
                );
            }
        }
    }
}
