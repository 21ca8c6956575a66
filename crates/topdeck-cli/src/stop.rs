// SPDX-License-Identifier: Apache-2.0
//! One way for every long-running command to learn that it must stop:
//! SIGTERM, SIGINT or SIGHUP (through `signal-hook`, no hand-made masks or
//! handlers), or the command itself deciding so (its output is gone, its
//! count is reached).
//!
//! A [`Stop`] is a flag, the signal that raised it, and a socket that
//! becomes readable, and stays readable, once it is raised. The signal
//! handlers only store to atomics and write one byte to that socket, which
//! is all a handler may safely do; nobody reads the byte back, so every
//! waiter sees the stop however late it looks. That makes the same handle
//! usable from a thread that sleeps ([`Stop::wait_timeout`]), from a loop
//! that polls ([`Stop::is_requested`], [`Stop::flag`]), from `poll(2)` next
//! to other descriptors ([`AsFd`]), and from a task of a tokio runtime
//! ([`Stop::stopped`], the descriptor in the runtime's own `epoll`).
//!
//! A signal the command was started with ignored stays ignored: `nohup
//! topdeck agent &` must outlive the terminal, as with any other command.
//!
//! A second stop signal, while the first is still being acted on, ends the
//! process at once with status 128 + signal: a person who presses Ctrl-C
//! twice, or a supervisor that escalates, is never held up by a cleanup
//! that hangs.

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The signals that stop a command: `kill`, Ctrl-C (outside raw mode), and
/// a closed terminal or SSH session.
pub const SIGNALS: [i32; 3] = [SIGTERM, SIGINT, SIGHUP];

/// A request to stop, shared by every clone.
#[derive(Debug, Clone)]
pub struct Stop(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Raised by a stop signal or [`Stop::request`].
    requested: Arc<AtomicBool>,
    /// Raised by a stop signal only: the condition for the second signal
    /// to end the process at once.
    signalled: Arc<AtomicBool>,
    /// The last stop signal received; 0 for none.
    signal: Arc<AtomicUsize>,
    /// Readable once a stop is requested.
    read: UnixStream,
    /// Written to (one byte) for a stop that is not a signal.
    write: UnixStream,
}

/// The process's handle, once [`install`] made it.
static PROCESS: OnceLock<Stop> = OnceLock::new();

/// Turns [`SIGNALS`] into a stop request of the process-wide [`Stop`],
/// which it returns; later calls return the same handle.
pub fn install() -> io::Result<Stop> {
    if let Some(s) = PROCESS.get() {
        return Ok(s.clone());
    }
    let stop = Stop::new()?;
    for sig in SIGNALS {
        if ignored(sig) {
            continue;
        }
        let i = &stop.0;
        // Registration order is the order the handler runs them in: the
        // second-signal exit looks at `signalled` before this signal sets
        // it, and the number is stored before the byte wakes anyone.
        signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, i.signalled.clone())?;
        signal_hook::flag::register(sig, i.signalled.clone())?;
        signal_hook::flag::register_usize(sig, i.signal.clone(), sig as usize)?;
        signal_hook::flag::register(sig, i.requested.clone())?;
        signal_hook::low_level::pipe::register(sig, i.write.try_clone()?)?;
    }
    // A racing caller's handle would have no handlers: use whichever won.
    Ok(PROCESS.get_or_init(|| stop).clone())
}

/// Whether `sig` was ignored when the process started (`nohup`, a
/// shell's `trap '' HUP`, SIGINT for a background job).
pub fn ignored(sig: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one
    // into `old`, a zeroed local (a valid sigaction).
    unsafe {
        let mut old = std::mem::zeroed::<libc::sigaction>();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// The stop signal the process received, if [`install`] was called and one
/// arrived.
pub fn signalled() -> Option<i32> {
    PROCESS.get().and_then(Stop::signal)
}

/// Ends the process as `sig` would have without a handler, so that the
/// shell and whoever sent it see how the command ended (`$?` is 128 +
/// signal). Call it once whatever must be restored is restored.
pub fn die_of(sig: i32) -> ! {
    // Puts the default action back and raises the signal.
    let _ = signal_hook::low_level::emulate_default_handler(sig);
    // Only if the signal did not end the process (ignored by default, or
    // blocked by someone): the same status a shell would show.
    std::process::exit(128 + sig)
}

/// Why [`Stop::sleep`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The whole duration passed.
    Elapsed,
    /// A stop was requested.
    Stop,
    /// The watched output is gone: the reader of a pipe or socket went
    /// away, or the terminal hung up.
    OutputGone,
}

impl Stop {
    /// A handle no signal raises (tests, or a stop of a part of a
    /// program); [`install`] gives the process's.
    pub fn new() -> io::Result<Self> {
        let (read, write) = UnixStream::pair()?;
        // The byte written for a stop may find the buffer full of earlier
        // ones: never block on it, it is readable already.
        write.set_nonblocking(true)?;
        Ok(Self(Arc::new(Inner {
            requested: Arc::new(AtomicBool::new(false)),
            signalled: Arc::new(AtomicBool::new(false)),
            signal: Arc::new(AtomicUsize::new(0)),
            read,
            write,
        })))
    }

    /// Asks every waiter to stop, with no signal involved.
    pub fn request(&self) {
        self.0.requested.store(true, Ordering::SeqCst);
        let _ = (&self.0.write).write(b"x");
    }

    /// Whether a stop was requested.
    pub fn is_requested(&self) -> bool {
        self.0.requested.load(Ordering::SeqCst)
    }

    /// The flag [`Stop::is_requested`] reads, for code that takes an
    /// `&AtomicBool` (the scheduler agent's loop). Setting it by hand
    /// wakes no sleeper: use [`Stop::request`] for that.
    pub fn flag(&self) -> &AtomicBool {
        &self.0.requested
    }

    /// The stop signal received, if the stop came from one.
    pub fn signal(&self) -> Option<i32> {
        match self.0.signal.load(Ordering::SeqCst) {
            0 => None,
            s => i32::try_from(s).ok(),
        }
    }

    /// Waits, in a task of a tokio runtime with I/O enabled, until a stop
    /// is requested; at once if it was. The descriptor joins the runtime's
    /// own `epoll` set, so no thread is spent waiting (`serve`'s runtime
    /// has one thread for every connection). Fails only if the runtime
    /// cannot take the descriptor; panics outside a runtime, as tokio's
    /// I/O types do.
    pub async fn stopped(&self) -> io::Result<()> {
        if self.is_requested() {
            return Ok(());
        }
        // A descriptor of its own, so that any number of waiters can join
        // the runtime's epoll set (it keys on the descriptor), and none
        // outlives the one it waits on.
        let fd = self.0.read.as_fd().try_clone_to_owned()?;
        // SAFETY: the AsyncFd owns `fd`, which stays open, the same
        // descriptor, until the AsyncFd is dropped with it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        // Readable once a stop is requested, and from then on: the guard's
        // readiness is never cleared, nothing is read.
        let _ready = fd.readable().await?;
        // As in `sleep`: whatever made it readable, a stop is the only
        // safe reading.
        self.0.requested.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Sleeps up to `d`; `true` as soon as a stop is (or was) requested.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        self.sleep(d, None) == Woken::Stop
    }

    /// Sleeps until the next tick of a fixed schedule (`next`, advanced by
    /// `every` each time, so that intervals do not drift by the time each
    /// tick's work takes; a tick already late is taken at once and the
    /// schedule starts again from now); `false` when woken for a stop or
    /// because nobody is left to read `output`.
    pub fn tick(
        &self,
        next: &mut Instant,
        every: Duration,
        output: Option<BorrowedFd<'_>>,
    ) -> bool {
        *next += every;
        let now = Instant::now();
        if *next <= now {
            *next = now;
            return !self.is_requested();
        }
        self.sleep(*next - now, output) == Woken::Elapsed
    }

    /// Sleeps up to `d`, waking early for a stop request or, when `output`
    /// is given, for that descriptor's reader going away (a closed pipe,
    /// a hung-up terminal): then writing to it can only fail, and a
    /// command printing to it should stop now rather than at its next
    /// line. A regular file never wakes it.
    pub fn sleep(&self, d: Duration, output: Option<BorrowedFd<'_>>) -> Woken {
        // None: too far to represent, that is, forever.
        let deadline = Instant::now().checked_add(d);
        loop {
            if self.is_requested() {
                return Woken::Stop;
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.0.read.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    // A negative descriptor is skipped by poll.
                    fd: output.map_or(-1, |o| o.as_raw_fd()),
                    // No events asked: poll still reports POLLERR (a pipe
                    // with no reader left) and POLLHUP (a hung-up tty, a
                    // closed socket), and nothing else.
                    events: 0,
                    revents: 0,
                },
            ];
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // Rounded up, so that a sub-millisecond rest does not spin; -1
            // is no timeout.
            let ms = left.map_or(-1, |l| {
                l.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
            });
            // SAFETY: `fds` is a live array of two initialised pollfd.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // Not expected with valid descriptors; sleeping out the
                // rest (a second at most) keeps the caller's pace instead
                // of spinning on the error.
                std::thread::sleep(left.unwrap_or(Duration::MAX).min(Duration::from_secs(1)));
                return Woken::Elapsed;
            }
            if fds[0].revents != 0 {
                // Readable, or (never expected) the socket is broken: in
                // both cases a stop is the only safe reading.
                self.0.requested.store(true, Ordering::SeqCst);
                return Woken::Stop;
            }
            if fds[1].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                return Woken::OutputGone;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Woken::Elapsed;
            }
        }
    }

    /// Starts a thread that requests a stop when `output`'s reader goes
    /// away (see [`Stop::sleep`]), for commands that print only now and
    /// then and would otherwise learn it only at their next line. It
    /// sleeps in `poll(2)` without a timeout, and ends with the stop.
    pub fn stop_when_gone(&self, output: BorrowedFd<'_>) -> io::Result<()> {
        // Its own descriptor, so the thread never outlives the one it polls.
        let output = output.try_clone_to_owned()?;
        let stop = self.clone();
        std::thread::Builder::new()
            .name("topdeck-output".into())
            .spawn(move || {
                if stop.sleep(Duration::MAX, Some(output.as_fd())) == Woken::OutputGone {
                    stop.request();
                }
            })?;
        Ok(())
    }
}

impl AsFd for Stop {
    /// Readable once a stop is requested, and from then on.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.read.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_wakes_a_sleeper_and_stays_visible() {
        let s = Stop::new().unwrap();
        assert!(!s.is_requested());
        assert!(!s.wait_timeout(Duration::from_millis(1)));
        let other = s.clone();
        let t = std::thread::spawn(move || other.wait_timeout(Duration::from_secs(600)));
        s.request();
        assert!(t.join().unwrap(), "the sleeper saw the request");
        // Level, not edge: a later waiter sees it too, and no signal is named.
        assert!(s.wait_timeout(Duration::from_secs(600)));
        assert!(s.is_requested() && s.flag().load(Ordering::SeqCst));
        assert_eq!(s.signal(), None);
    }

    #[test]
    fn a_pipe_whose_reader_is_gone_wakes_a_sleep_on_it() {
        let s = Stop::new().unwrap();
        let (reader, writer) = UnixStream::pair().unwrap();
        assert_eq!(
            s.sleep(Duration::from_millis(1), Some(writer.as_fd())),
            Woken::Elapsed
        );
        drop(reader);
        assert_eq!(
            s.sleep(Duration::from_secs(600), Some(writer.as_fd())),
            Woken::OutputGone
        );
        assert!(!s.is_requested());
        s.stop_when_gone(writer.as_fd()).unwrap();
        assert!(s.wait_timeout(Duration::from_secs(600)));
    }

    #[test]
    fn a_stop_wakes_tasks_of_a_runtime() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .unwrap();
        let s = Stop::new().unwrap();
        runtime.block_on(async {
            let early = tokio::time::timeout(Duration::from_millis(10), s.stopped()).await;
            assert!(early.is_err(), "no stop yet");
            let other = s.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                other.request();
            });
            // Any number of waiters, each on a descriptor of its own.
            let (a, b) = tokio::join!(s.stopped(), s.stopped());
            a.unwrap();
            b.unwrap();
            t.join().unwrap();
        });
        // The byte alone, as a signal handler's pipe writes it, is a stop:
        // the wait sees the descriptor, not only the flag.
        let s = Stop::new().unwrap();
        (&s.0.write).write_all(b"x").unwrap();
        runtime.block_on(s.stopped()).unwrap();
        assert!(s.is_requested());
    }

    #[test]
    fn durations_too_long_for_poll_do_not_overflow() {
        let s = Stop::new().unwrap();
        s.request();
        assert_eq!(s.sleep(Duration::MAX, None), Woken::Stop);
    }
}
