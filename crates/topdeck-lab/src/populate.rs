// SPDX-License-Identifier: Apache-2.0
//! Giving observers work. `/proc/net/unix` costs ~4 ms with 3 sockets and
//! ~90 ms with 50,000 on this machine kind, and `ps` scales with processes
//! and threads, so an observer's weight depends on what the host holds. A
//! [`Population`] is a set of helper children holding Unix sockets, parked
//! threads and sleeping processes for the length of an experiment; ending
//! it frees them all at once, and [`Population::stop`] returns only once
//! every sleeping process is gone (each helper kills and reaps its own), so
//! a run leaves none behind for the next one to count.

use std::os::fd::{FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

use crate::child::{Helper, Running};
use crate::{Error, ErrorKind, Result};

/// Stack of each parked thread: they only park, so the minimum will do.
const PARKED_STACK: usize = 32 * 1024;

/// Threads per helper. Each thread costs a few memory mappings (stack, guard
/// page), and `vm.max_map_count` (65,530 by default) stopped one process
/// at ~16,000 threads here.
const THREADS_PER_HELPER: usize = 10_000;

/// What to hold on the host during an experiment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ask {
    /// Unix sockets.
    pub sockets: usize,
    /// Parked threads.
    pub threads: usize,
    /// Sleeping processes.
    pub processes: usize,
}

/// What a population held, and what the host held while it did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Census {
    /// What was asked for.
    pub asked: Ask,
    /// Processes on the host (numeric entries of `/proc`).
    pub host_processes: usize,
    /// Lines in `/proc/net/unix` (Unix sockets in this network namespace).
    pub host_unix_sockets: usize,
    /// Scheduling entities on the host (`/proc/loadavg` field 4).
    pub host_threads: usize,
}

/// Helper children holding sockets and threads; dropped, they let them go.
#[derive(Debug)]
pub struct Population {
    children: Vec<Running>,
    /// Counts, taken once the child was ready.
    pub census: Census,
}

impl Population {
    /// Starts helpers holding what `ask` says in all and waits until they
    /// hold it. Sockets are spread over as many
    /// helpers as the open-file hard limit requires (raising it needs
    /// CAP_SYS_RESOURCE, which even root may lack in a container), threads
    /// over as many as `THREADS_PER_HELPER` requires; processes are forked
    /// by the first helper. With nothing asked no child is started.
    pub fn start(helper: &Helper, ask: Ask) -> Result<Self> {
        let Ask {
            sockets,
            threads,
            processes,
        } = ask;
        let per_child = (nofile_hard_limit()?.saturating_sub(64) as usize).max(1);
        let n = sockets
            .div_ceil(per_child)
            .max(threads.div_ceil(THREADS_PER_HELPER))
            .max(usize::from(processes > 0));
        let mut children = Vec::with_capacity(n);
        for i in 0..n {
            // Child i takes an equal share; the first ones take the remainders.
            let share = |total: usize| total / n + usize::from(i < total % n);
            children.push(Running::start(
                helper,
                &[
                    "populate".to_string(),
                    share(sockets).to_string(),
                    share(threads).to_string(),
                    if i == 0 { processes } else { 0 }.to_string(),
                ],
            )?);
        }
        Ok(Self {
            children,
            census: Census {
                asked: ask,
                host_processes: host_processes(),
                host_unix_sockets: host_unix_sockets(),
                host_threads: host_threads(),
            },
        })
    }

    /// Ends the helpers and waits for them; each helper first kills and
    /// reaps the processes it forked, so none is left when this returns.
    pub fn stop(self) -> Result<()> {
        for c in self.children {
            c.stop()?;
        }
        Ok(())
    }
}

/// Unix sockets visible in `/proc/net/unix` (0 if unreadable).
pub fn host_unix_sockets() -> usize {
    std::fs::read_to_string("/proc/net/unix")
        .map(|s| s.lines().count().saturating_sub(1))
        .unwrap_or(0)
}

/// Processes on the host: the numeric entries of `/proc` (0 if unreadable).
pub fn host_processes() -> usize {
    std::fs::read_dir("/proc").map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .count()
    })
}

/// Threads on the host, from `/proc/loadavg` ("running/total").
pub fn host_threads() -> usize {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| {
            let f = s.split_whitespace().nth(3)?;
            f.split_once('/')?.1.parse().ok()
        })
        .unwrap_or(0)
}

/// The resources the populate helper holds until dropped.
#[derive(Debug)]
pub struct Held {
    /// Sockets held.
    pub sockets: usize,
    /// Threads parked.
    pub threads: usize,
    /// Processes forked.
    pub processes: usize,
    _fds: Vec<OwnedFd>,
    _sleepers: Sleepers,
}

/// The sleeping children [`hold`] forked. Dropped, it kills them all and
/// then waits for each one, so that they are gone, not merely dying, when
/// the helper exits: were they left to `PR_SET_PDEATHSIG`, they would be
/// killed only as the helper exited and reaped later by init, and the lab
/// would return while thousands of them were still on the host.
#[derive(Debug)]
struct Sleepers(Vec<libc::pid_t>);

impl Drop for Sleepers {
    fn drop(&mut self) {
        // Kill all first, so they exit together, then reap each.
        for &pid in &self.0 {
            // SAFETY: kill(2) on a child of ours that nothing has reaped yet,
            // so the pid is still ours.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for &pid in &self.0 {
            loop {
                // SAFETY: waitpid(2) on our own child, with no status wanted.
                let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                if rc >= 0
                    || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                {
                    break;
                }
            }
        }
    }
}

/// Forks `processes` sleeping children, then creates `sockets` Unix stream
/// sockets (as connected pairs) and `threads` parked threads in this
/// process. Raises the open-file soft limit as needed. Dropping the
/// [`Held`] (or a failure part way) kills the children and reaps every one
/// before it returns; should this process die first, they die with it
/// (`PR_SET_PDEATHSIG`).
pub fn hold(sockets: usize, threads: usize, processes: usize) -> Result<Held> {
    let mut sleepers = Sleepers(Vec::with_capacity(processes));
    // Fork first, while this process has one thread and no sockets to copy.
    for i in 0..processes {
        // SAFETY: fork(2); the child only calls async-signal-safe functions
        // (prctl, getppid, pause, _exit) and never returns into Rust code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Error::last_os(format!(
                "fork sleeping process {} of {processes} (ask for fewer)",
                i + 1
            )));
        }
        if pid == 0 {
            // SAFETY: async-signal-safe calls only, see above.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The parent may have died before prctl took effect.
                if libc::getppid() == 1 {
                    libc::_exit(0);
                }
                loop {
                    libc::pause();
                }
            }
        }
        sleepers.0.push(pid);
    }
    raise_nofile(sockets as u64 + 64)?;
    let mut fds = Vec::with_capacity(sockets);
    while fds.len() < sockets {
        let mut pair = [0; 2];
        // SAFETY: `pair` is a writable array of two ints, as socketpair requires.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(Error::last_os(format!(
                "create Unix socket {} of {sockets}",
                fds.len() + 1
            )));
        }
        for fd in pair {
            // SAFETY: socketpair just returned `fd`, which nothing else owns.
            fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    fds.truncate(sockets);
    for i in 0..threads {
        std::thread::Builder::new()
            .stack_size(PARKED_STACK)
            .spawn(|| loop {
                std::thread::park();
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "started only {i} of {threads} threads: {e} \
                         (ask for fewer, or raise kernel.threads-max and kernel.pid_max)"
                    ),
                )
            })?;
    }
    Ok(Held {
        sockets,
        threads,
        processes,
        _fds: fds,
        _sleepers: sleepers,
    })
}

fn nofile_hard_limit() -> Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(Error::last_os("getrlimit(RLIMIT_NOFILE)"));
    }
    Ok(lim.rlim_max)
}

fn raise_nofile(want: u64) -> Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(Error::last_os("getrlimit(RLIMIT_NOFILE)"));
    }
    if lim.rlim_cur >= want {
        return Ok(());
    }
    // Within the hard limit anyone may raise the soft one; beyond it only
    // CAP_SYS_RESOURCE may, and `Population` splits work so it need not.
    lim.rlim_cur = want;
    lim.rlim_max = lim.rlim_max.max(want);
    // SAFETY: `lim` is a valid rlimit to read.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(Error::last_os(format!(
            "raise the open-file limit to {want} for the sockets \
             (needs CAP_SYS_RESOURCE; ask for fewer sockets per helper)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_sockets_show_in_proc_net_unix() {
        let before = host_unix_sockets();
        let held = hold(200, 3, 0).unwrap();
        // Other processes may open or close sockets meanwhile; 200 of ours dominate.
        assert!(host_unix_sockets() >= before + 150, "{before}");
        assert_eq!(held.sockets, 200);
        drop(held);
    }
}
