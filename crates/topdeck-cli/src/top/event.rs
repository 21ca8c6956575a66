// SPDX-License-Identifier: Apache-2.0
//! What reaches the main loop of `topdeck top`: one [`Event`] enum over one
//! channel, fed by the input thread (keys, resizes, a stop request, a lost
//! terminal) and the collection thread (harvests), and the [`Cancel`] flag
//! that stops them.
//!
//! The input thread reads the terminal itself, with `poll(2)` and
//! `read(2)`, instead of through crossterm's event reader: on a terminal
//! that hung up (a dropped SSH session, a killed tmux server) every read
//! returns 0 bytes, or EIO, and crossterm 0.28's reader retries such reads
//! in a loop that only a parsed key or EAGAIN ends, never its timeout. The
//! thread then spun at full speed inside `crossterm::event::poll` and never
//! looked at its cancel flag again, so the view could not join it and
//! never exited. Here an end of input, a read error, and POLLHUP/POLLERR
//! all end the thread with [`Event::Failed`], and the keys the view uses
//! (a few legacy escape sequences, the ones terminals send without
//! special modes) are parsed by [`KeyParser`].

use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::harvest::Harvest;
use super::key::{Key, KeyParser};
use crate::stop::Stop;

/// How long the input thread waits in `poll(2)` before it looks at the
/// cancellation flag again: the longest a quit waits for that thread.
const INPUT_POLL: Duration = Duration::from_millis(50);

/// Something the main loop must react to.
#[derive(Debug)]
pub enum Event {
    /// A key a person pressed.
    Key(Key),
    /// The terminal changed size: redraw.
    Resize,
    /// A collection pass finished.
    Harvest(Box<Harvest>),
    /// A thread cannot go on; the view stops with this message.
    Failed(String),
    /// A stop was requested (SIGTERM, SIGHUP, SIGINT: see [`crate::stop`]).
    Stop,
}

/// A cancellation flag that sleeping threads wake up for.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<(Mutex<bool>, Condvar)>);

impl Cancel {
    /// A flag not yet raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the flag and wakes every waiter.
    pub fn cancel(&self) {
        let (flag, cv) = &*self.0;
        *flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }

    /// Whether the flag is raised.
    pub fn is_cancelled(&self) -> bool {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps up to `d`; returns `true` at once when the flag is (or gets) raised.
    pub fn wait(&self, d: Duration) -> bool {
        let (flag, cv) = &*self.0;
        let guard = flag.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = cv
            .wait_timeout_while(guard, d, |raised| !*raised)
            .unwrap_or_else(|p| p.into_inner());
        *guard
    }
}

/// Starts the input thread: the terminal's keys and resizes, and the stop
/// request, become [`Event`]s until `cancel` is raised, the receiver is
/// gone, a stop is requested or the terminal is lost. The terminal is
/// stdin, in raw mode.
pub fn spawn_input(tx: Sender<Event>, cancel: Cancel, stop: Stop) -> io::Result<JoinHandle<()>> {
    // SIGWINCH writes a byte here (signal-hook's self-pipe), so a resize
    // wakes the same poll as a key.
    let (winch, winch_write) = UnixStream::pair()?;
    winch.set_nonblocking(true)?;
    let winch_id = signal_hook::low_level::pipe::register(libc::SIGWINCH, winch_write)?;
    let spawned = std::thread::Builder::new()
        .name("topdeck-input".into())
        .spawn(move || {
            read_input(io::stdin().as_fd(), &winch, &tx, &cancel, &stop);
            signal_hook::low_level::unregister(winch_id);
        });
    if spawned.is_err() {
        signal_hook::low_level::unregister(winch_id);
    }
    spawned
}

/// The input thread's loop; returns when it must stop, after sending why.
fn read_input(
    tty: BorrowedFd,
    winch: &UnixStream,
    tx: &Sender<Event>,
    cancel: &Cancel,
    stop: &Stop,
) {
    let mut parser = KeyParser::default();
    let mut buf = [0u8; 1024];
    while !cancel.is_cancelled() {
        let mut fds =
            [tty.as_raw_fd(), winch.as_raw_fd(), stop.as_fd().as_raw_fd()].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        // SAFETY: `fds` is a live array of three initialised pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, INPUT_POLL.as_millis() as i32) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let _ = tx.send(Event::Failed(format!("cannot wait for the terminal: {e}")));
            return;
        }
        if fds[2].revents != 0 {
            let _ = tx.send(Event::Stop);
            return;
        }
        if fds[1].revents != 0 {
            // Several resizes between two polls are one redraw.
            while (&*winch).read(&mut buf).is_ok_and(|n| n > 0) {}
            if tx.send(Event::Resize).is_err() {
                return;
            }
        }
        let revents = fds[0].revents;
        if revents & libc::POLLIN == 0 {
            if revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                let _ = tx.send(Event::Failed("the terminal is gone (hung up)".into()));
                return;
            }
            continue;
        }
        // SAFETY: `buf` is a live buffer of `buf.len()` bytes.
        let got = unsafe { libc::read(tty.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        let why = match got {
            // In raw mode a read waits for at least one byte: none is the
            // end of input, which only a hang-up makes.
            0 => "the terminal is gone (end of input)".to_string(),
            n if n > 0 => {
                for k in parser.feed(&buf[..n as usize]) {
                    if tx.send(Event::Key(k)).is_err() {
                        return;
                    }
                }
                continue;
            }
            _ => {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) {
                    continue;
                }
                // EIO after a hang-up, or when the view is no longer in
                // the terminal's foreground: retrying cannot help.
                format!("the terminal is gone ({e})")
            }
        };
        let _ = tx.send(Event::Failed(why));
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_raised_flag_ends_a_wait_early() {
        let c = Cancel::new();
        assert!(!c.wait(Duration::from_millis(1)));
        let other = c.clone();
        let t = std::thread::spawn(move || other.wait(Duration::from_secs(600)));
        c.cancel();
        assert!(t.join().unwrap(), "the waiter saw the flag");
        let started = Instant::now();
        assert!(c.wait(Duration::from_secs(600)));
        assert!(started.elapsed() < Duration::from_secs(600));
    }
}
