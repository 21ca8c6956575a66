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

use super::app::Key;
use super::collect::Harvest;
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

const ESC: u8 = 0x1b;

/// The longest escape sequence kept while waiting for its end; anything
/// longer is not a key the view knows, and is dropped.
const MAX_SEQUENCE: usize = 32;

/// Turns the bytes a terminal sends into [`Key`]s: printable characters
/// (UTF-8), Control-C, Enter, Tab, Backspace, Escape, and the legacy
/// sequences for arrows, Home/End, Page Up/Down and Shift-Tab (CSI and
/// SS3 forms, modifiers ignored). Alt with a character is that character;
/// anything else is skipped. A sequence cut by the end of a read waits
/// for the next read, except a lone ESC, which is the Escape key: what
/// terminals send for it, and how crossterm reads it too.
#[derive(Debug, Default)]
pub struct KeyParser {
    pending: Vec<u8>,
}

/// One step of [`KeyParser`]: a key and the bytes it took, bytes to
/// skip, or a sequence that needs more bytes.
#[derive(Debug, PartialEq)]
enum Parsed {
    Key(Key, usize),
    Skip(usize),
    Incomplete,
}

impl KeyParser {
    /// The keys of `bytes`, one read's worth.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Key> {
        self.pending.extend_from_slice(bytes);
        let mut keys = Vec::new();
        let mut at = 0;
        while at < self.pending.len() {
            match parse(&self.pending[at..]) {
                Parsed::Key(k, n) => {
                    keys.push(k);
                    at += n;
                }
                Parsed::Skip(n) => at += n,
                Parsed::Incomplete => break,
            }
        }
        self.pending.drain(..at);
        if self.pending == [ESC] {
            keys.push(Key::Esc);
            self.pending.clear();
        }
        if self.pending.len() > MAX_SEQUENCE {
            self.pending.clear();
        }
        keys
    }
}

/// The first key of `b` (not empty).
fn parse(b: &[u8]) -> Parsed {
    match b[0] {
        ESC => escape(b),
        0x03 => Parsed::Key(Key::CtrlC, 1),
        b'\r' | b'\n' => Parsed::Key(Key::Enter, 1),
        b'\t' => Parsed::Key(Key::Tab, 1),
        0x7f | 0x08 => Parsed::Key(Key::Backspace, 1),
        0x00..=0x1f => Parsed::Skip(1),
        first => {
            let len = match first {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                0x80..=0xff => return Parsed::Skip(1),
                _ => 1,
            };
            if b.len() < len {
                return Parsed::Incomplete;
            }
            match std::str::from_utf8(&b[..len])
                .ok()
                .and_then(|s| s.chars().next())
            {
                Some(c) => Parsed::Key(Key::Char(c), len),
                None => Parsed::Skip(1),
            }
        }
    }
}

/// `b` starts with ESC.
fn escape(b: &[u8]) -> Parsed {
    match b.get(1) {
        None => Parsed::Incomplete,
        Some(b'[') => csi(b),
        Some(b'O') => match b.get(2) {
            None => Parsed::Incomplete,
            Some(f) => match cursor_key(*f) {
                Some(k) => Parsed::Key(k, 3),
                None => Parsed::Skip(3),
            },
        },
        // Escape pressed twice: the first is one.
        Some(&ESC) => Parsed::Key(Key::Esc, 1),
        Some(_) => match parse(&b[1..]) {
            Parsed::Key(Key::Char(c), n) => Parsed::Key(Key::Char(c), 1 + n),
            Parsed::Key(_, n) | Parsed::Skip(n) => Parsed::Skip(1 + n),
            Parsed::Incomplete => Parsed::Incomplete,
        },
    }
}

/// `b` starts with ESC `[`: parameters, intermediates, one final byte.
fn csi(b: &[u8]) -> Parsed {
    for (i, &c) in b.iter().enumerate().skip(2) {
        match c {
            0x20..=0x3f => continue,
            0x40..=0x7e => {
                let params = std::str::from_utf8(&b[2..i]).unwrap_or("");
                let first: Option<u32> = params.split(';').next().and_then(|p| p.parse().ok());
                let key = match c {
                    b'~' => match first {
                        Some(1 | 7) => Some(Key::Home),
                        Some(4 | 8) => Some(Key::End),
                        Some(5) => Some(Key::PageUp),
                        Some(6) => Some(Key::PageDown),
                        _ => None,
                    },
                    b'Z' => Some(Key::BackTab),
                    f => cursor_key(f),
                };
                return match key {
                    Some(k) => Parsed::Key(k, i + 1),
                    None => Parsed::Skip(i + 1),
                };
            }
            // Not a CSI byte: the sequence was cut; drop what came before.
            _ => return Parsed::Skip(i),
        }
    }
    Parsed::Incomplete
}

/// The key of a cursor sequence's final byte (CSI or SS3).
fn cursor_key(f: u8) -> Option<Key> {
    match f {
        b'A' => Some(Key::Up),
        b'B' => Some(Key::Down),
        b'H' => Some(Key::Home),
        b'F' => Some(Key::End),
        _ => None,
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

    #[test]
    fn terminal_bytes_become_view_keys() {
        let keys = |b: &[u8]| KeyParser::default().feed(b);
        assert_eq!(keys(b"q"), [Key::Char('q')]);
        assert_eq!(keys(b"\x03"), [Key::CtrlC]);
        assert_eq!(
            keys(b"/al\r"),
            [Key::Char('/'), Key::Char('a'), Key::Char('l'), Key::Enter]
        );
        assert_eq!(
            keys(b"\t\x1b[Z\x7f"),
            [Key::Tab, Key::BackTab, Key::Backspace]
        );
        assert_eq!(
            keys(b"\x1b[A\x1bOB\x1b[5~\x1b[6~\x1b[1~\x1b[F\x1b[1;5A"),
            [
                Key::Up,
                Key::Down,
                Key::PageUp,
                Key::PageDown,
                Key::Home,
                Key::End,
                Key::Up
            ]
        );
        assert_eq!(keys("é".as_bytes()), [Key::Char('é')]);
        // A lone ESC at the end of a read is the Escape key; Alt-x is x.
        assert_eq!(keys(b"\x1b"), [Key::Esc]);
        assert_eq!(keys(b"\x1bx"), [Key::Char('x')]);
        assert_eq!(keys(b"\x1b\x1b"), [Key::Esc, Key::Esc]);
        // Keys the view does not use are skipped, whatever follows them.
        assert_eq!(keys(b"\x1b[C\x1b[15~\x01q"), [Key::Char('q')]);
    }

    #[test]
    fn a_sequence_cut_between_reads_is_completed_by_the_next() {
        let mut p = KeyParser::default();
        assert!(p.feed(b"\x1b[").is_empty());
        assert!(p.feed(b"5").is_empty());
        assert_eq!(p.feed(b"~q"), [Key::PageUp, Key::Char('q')]);
        assert!(p.feed(&"é".as_bytes()[..1]).is_empty());
        assert_eq!(p.feed(&"é".as_bytes()[1..]), [Key::Char('é')]);
        // Garbage that never ends is dropped, not kept forever.
        assert!(p
            .feed(b"\x1b[0000000000000000000000000000000000000000")
            .is_empty());
        assert_eq!(p.feed(b"q"), [Key::Char('q')]);
    }
}
