// SPDX-License-Identifier: Apache-2.0
//! What reaches the main loop of `topdeck top`: one [`Event`] enum over one
//! channel, fed by the input thread (keys, resizes), the collection thread
//! (harvests) and the signal thread (SIGTERM, SIGHUP, SIGINT: quit with the
//! terminal restored), and the [`Cancel`] flag that stops them.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ratatui::crossterm::event::{self as term, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::app::Key;
use super::collect::Harvest;

/// How long the input thread waits for a key before it looks at the
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
    /// A signal asked the view to stop (its number).
    Signal(i32),
}

/// The signals that stop the view: `kill`, a closed SSH session, `kill -INT`
/// (Ctrl-C itself arrives as a key in raw mode).
const STOP_SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGHUP, libc::SIGINT];

/// Signals blocked in the calling thread, and in every thread it starts
/// afterwards, so that only the signal thread receives them.
pub struct BlockedSignals {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl BlockedSignals {
    /// Blocks [`STOP_SIGNALS`]; call before starting any other thread.
    pub fn block() -> std::io::Result<Self> {
        // SAFETY: sigset_t is plain data that sigemptyset initialises; the
        // pointers are to locals that outlive the calls.
        unsafe {
            let mut set = std::mem::zeroed::<libc::sigset_t>();
            let mut old = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut set);
            for s in STOP_SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            match libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) {
                0 => Ok(Self { set, old }),
                e => Err(std::io::Error::from_raw_os_error(e)),
            }
        }
    }

    /// Starts the signal thread: each stop signal becomes [`Event::Signal`],
    /// until `cancel` is raised (looked at every [`INPUT_POLL`]).
    pub fn spawn(&self, tx: Sender<Event>, cancel: Cancel) -> std::io::Result<JoinHandle<()>> {
        let set = self.set;
        std::thread::Builder::new()
            .name("topdeck-signal".into())
            .spawn(move || {
                let timeout = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: INPUT_POLL.as_nanos() as libc::c_long,
                };
                while !cancel.is_cancelled() {
                    // SAFETY: `set` and `timeout` are initialised locals; a
                    // null siginfo pointer is allowed.
                    let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
                    if sig > 0 && tx.send(Event::Signal(sig)).is_err() {
                        return;
                    }
                }
            })
    }
}

impl Drop for BlockedSignals {
    /// Puts the mask back: a stop signal still pending is delivered then,
    /// with the terminal already restored.
    fn drop(&mut self) {
        // SAFETY: `old` is the mask pthread_sigmask filled in `block`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
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

/// Our key for a terminal key press; `None` for keys the view ignores.
pub fn key(k: KeyEvent) -> Option<Key> {
    if k.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
    Some(match k.code {
        KeyCode::Char('c') if ctrl => Key::CtrlC,
        KeyCode::Char(c) if !ctrl => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Tab => Key::Tab,
        KeyCode::BackTab => Key::BackTab,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// Starts the input thread: terminal events become [`Event`]s until
/// `cancel` is raised or the receiver is gone.
pub fn spawn_input(tx: Sender<Event>, cancel: Cancel) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("topdeck-input".into())
        .spawn(move || {
            while !cancel.is_cancelled() {
                let event = match term::poll(INPUT_POLL) {
                    Ok(false) => continue,
                    Ok(true) => match term::read() {
                        Ok(term::Event::Key(k)) => match key(k) {
                            Some(k) => Event::Key(k),
                            None => continue,
                        },
                        Ok(term::Event::Resize(..)) => Event::Resize,
                        Ok(_) => continue,
                        Err(e) => Event::Failed(format!("cannot read the terminal: {e}")),
                    },
                    Err(e) => Event::Failed(format!("cannot read the terminal: {e}")),
                };
                let failed = matches!(event, Event::Failed(_));
                if tx.send(event).is_err() || failed {
                    return;
                }
            }
        })
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
    fn terminal_keys_map_to_view_keys() {
        let press = |code, mods| key(KeyEvent::new(code, mods));
        assert_eq!(
            press(KeyCode::Char('c'), KeyModifiers::CONTROL),
            Some(Key::CtrlC)
        );
        assert_eq!(
            press(KeyCode::Char('q'), KeyModifiers::NONE),
            Some(Key::Char('q'))
        );
        assert_eq!(press(KeyCode::Tab, KeyModifiers::NONE), Some(Key::Tab));
        assert_eq!(press(KeyCode::F(5), KeyModifiers::NONE), None);
        let mut release = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::NONE);
        release.kind = KeyEventKind::Release;
        assert_eq!(key(release), None);
    }
}
