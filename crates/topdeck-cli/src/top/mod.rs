// SPDX-License-Identifier: Apache-2.0
//! `topdeck top`: a full-screen live view of the host's whole namespace.
//!
//! Three threads: the collection thread reads every registry each interval
//! (`collect`), the input thread turns key presses, resizes, a stop request
//! (SIGTERM, SIGHUP, SIGINT through [`crate::stop`]) and a lost terminal
//! into events (`event`), and this module's main loop owns the only
//! [`app::App`], applies each event to it and redraws (`draw`). A
//! [`event::Cancel`] flag stops the helpers. The terminal is restored by a
//! `Drop` guard on every way out (a signal included) and by a panic hook
//! before a panic message is printed, so neither is lost on the alternate
//! screen. When the terminal is gone (hung up), restoring it fails and that
//! is ignored; the view ends with an error (exit status 1), or, for a stop
//! signal, `main` dies of the signal.
//!
//! `--once` never touches the terminal: it reads twice, an interval apart
//! (so that rates exist), and prints the second harvest as JSON or as the
//! screen a person would have seen.
//!
//! `--at TIME` shows a recording (`topdeck record`) instead of the host:
//! the same panels, of the frame recorded at TIME, with no collection
//! thread; the main loop moves through the recording when a key asks
//! (`past::Travel`), and at no other time.
//!
//! Dependencies point one way: `harvest` (with `history`) is the data the
//! panels draw and depends on nothing else here; `agent` reads the
//! scheduler agent's registry into it; `key` and `app` (the view state)
//! build on it; `draw` reads `app` and `harvest` only; `event` (the
//! channel, the cancel flag, the input thread) carries keys and harvests;
//! `origin` says where a pass's sources come from (the host, or a
//! recording: `past`); `collect` (diffing, the census, the collection
//! thread) makes harvests of an origin's and sends them as events.

pub mod agent;
pub mod app;
pub mod census;
pub mod collect;
pub mod draw;
pub mod event;
pub mod harvest;
pub mod history;
pub mod key;
pub mod origin;
pub mod past;

use crate::sources::PortholeArgs;
use std::io::{self, IsTerminal, Write};
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Once;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use topdeck::Namespace;

use app::{App, Flow};
use collect::Collector;
use event::{Cancel, Event};
use past::{Moved, Travel};

/// When set, the live view panics on its first harvest: the tests' way to
/// check, in a real terminal, that a panic restores it and its message
/// stays readable.
const TEST_PANIC_ENV: &str = "TOPDECK_TOP_TEST_PANIC";

/// Size of the screen `--once` prints when stdout is not a terminal and
/// `COLUMNS` and `LINES` do not say.
const ONCE_SIZE: (u16, u16) = (80, 24);

/// The screen `--once` prints into a pipe: `COLUMNS` × `LINES` where set
/// (as `ps` and `top -b` take them), else [`ONCE_SIZE`].
fn pipe_size() -> (u16, u16) {
    let var = |name: &str, default: u16| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u16>().ok())
            .filter(|&n| n >= 20)
            .unwrap_or(default)
    };
    (var("COLUMNS", ONCE_SIZE.0), var("LINES", ONCE_SIZE.1))
}

/// Runs the live view until the person quits.
pub fn run(interval: Duration, sources: &PortholeArgs) -> Result<()> {
    let collector = Collector::new(Namespace::host(), sources.portholes());
    view(App::new(interval), Some((collector, interval)), None)
}

/// Shows the recording in `store` (`--history`, else the default) from
/// the frame at `at` until the person quits; it moves only when a key says.
pub fn run_at(store: &Option<PathBuf>, at: u64) -> Result<()> {
    needs_terminal()?;
    let (dir, history) = crate::recording::open(store)?;
    let (travel, harvest, note) = Travel::open(&dir, history, at)?;
    let mut app = App::new(spacing(&harvest));
    app.update(harvest);
    if let Some(n) = note {
        app.set_note(n);
    }
    view(app, None, Some(travel))
}

/// The time between a recorded frame and the one before it, as the
/// title names the interval; a second when there is none before.
fn spacing(h: &harvest::Harvest) -> Duration {
    h.recorded
        .as_ref()
        .and_then(|r| r.unix_ns.checked_sub(r.since_unix_ns?))
        .map_or(Duration::from_secs(1), Duration::from_nanos)
}

fn needs_terminal() -> Result<()> {
    if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        bail!(
            "`topdeck top` needs a terminal on stdin and stdout; \
             for scripts, use `topdeck top --once --json`"
        );
    }
    Ok(())
}

/// The full-screen view of `app`, fed by a collection thread (`live`,
/// the host as it runs) or moved through a recording (`travel`), until
/// the person quits.
fn view(app: App, live: Option<(Collector, Duration)>, travel: Option<Travel>) -> Result<()> {
    needs_terminal()?;
    install_panic_hook();
    let stop = crate::stop::install().context("cannot handle the stop signals")?;
    let guard = TerminalGuard::enter()?;
    // Never dropped: ratatui's Drop shows the cursor and, when that fails,
    // reports it with `eprintln!`, which panics when stderr is the same
    // hung-up terminal. `restore` shows the cursor itself, ignoring errors.
    let mut term = ManuallyDrop::new(
        Terminal::new(CrosstermBackend::new(io::stdout())).context("cannot use the terminal")?,
    );
    let (tx, rx) = mpsc::channel();
    let cancel = Cancel::new();
    let collector = live
        .map(|(collector, interval)| {
            collect::spawn(collector, interval, tx.clone(), cancel.clone())
                .context("cannot start the collection thread")
        })
        .transpose()?;
    let input =
        event::spawn_input(tx, cancel.clone(), stop).context("cannot start the input thread")?;
    let test_panic = std::env::var_os(TEST_PANIC_ENV).is_some();
    let result = main_loop(&mut term, &rx, app, travel, test_panic);
    cancel.cancel();
    // Both threads see the flag within one input poll or at once; a thread
    // that panicked has already been reported through the channel.
    if let Some(c) = collector {
        let _ = c.join();
    }
    let _ = input.join();
    // For a stop signal, `main` dies of it once this returns: the terminal
    // must be restored first.
    drop(guard);
    result
}

/// Applies events to the App and redraws, until a quit key, a stop request
/// or a failure (a lost terminal among them). Keys that move through a
/// recording move `travel`, when there is one.
fn main_loop(
    term: &mut Terminal<CrosstermBackend<io::Stdout>>,
    rx: &mpsc::Receiver<Event>,
    mut app: App,
    mut travel: Option<Travel>,
    test_panic: bool,
) -> Result<()> {
    loop {
        let area = term.size().context("cannot read the terminal size")?;
        let (r, m, c) = draw::viewports(
            ratatui::layout::Rect::new(0, 0, area.width, area.height),
            &app,
        );
        app.fit(r, m, c);
        term.draw(|f| draw::draw(f, &app))
            .context("cannot draw on the terminal")?;
        // Everything queued is applied before the next frame, so a burst of
        // keys costs one redraw.
        // Every thread says why before it ends; should none be left anyway,
        // waiting again would spin.
        let mut next = Some(rx.recv().context("the view's threads ended")?);
        while let Some(ev) = next {
            match ev {
                Event::Key(k) => match app.key(k) {
                    Flow::Quit => return Ok(()),
                    Flow::Step(step) => {
                        if let Some(t) = travel.as_mut() {
                            match t.step(step)? {
                                Moved::To(h) => app.update(*h),
                                Moved::Stay(why) => app.set_note(why),
                            }
                        }
                    }
                    Flow::Continue => {}
                },
                Event::Resize => {}
                Event::Harvest(_) if test_panic => panic!("panic requested by {TEST_PANIC_ENV}"),
                Event::Harvest(h) => app.update(*h),
                Event::Failed(why) => bail!("{why}"),
                Event::Stop => return Ok(()),
            }
            next = rx.try_recv().ok();
        }
    }
}

/// Prints one harvest, taken an interval after a first one, as JSON or as
/// the screen; the terminal is left alone.
pub fn once(
    out: &mut impl Write,
    interval: Duration,
    sources: &PortholeArgs,
    json: bool,
) -> Result<()> {
    let mut collector = Collector::new(Namespace::host(), sources.portholes());
    collector.harvest();
    std::thread::sleep(interval);
    let harvest = collector.harvest();
    for r in &harvest.registries {
        if let Some(e) = &r.error {
            crate::select::warn(e);
        }
    }
    print(out, App::new(interval), harvest, json)
}

/// Prints the harvest of the frame recorded at `at` in `store`, as
/// JSON or as the screen, at once: its rates are from the frame before.
pub fn once_at(out: &mut impl Write, store: &Option<PathBuf>, at: u64, json: bool) -> Result<()> {
    let (dir, history) = crate::recording::open(store)?;
    let (_, harvest, note) = Travel::open(&dir, history, at)?;
    if let Some(n) = note {
        crate::select::warn(n);
    }
    if let Some(d) = harvest.recorded.as_ref().and_then(|r| r.damage.as_ref()) {
        crate::select::warn(d);
    }
    print(out, App::new(spacing(&harvest)), harvest, json)
}

/// `harvest` as JSON, or as `app` would show it.
fn print(out: &mut impl Write, mut app: App, harvest: harvest::Harvest, json: bool) -> Result<()> {
    if json {
        // Buffered: stdout flushes at every newline, and pretty JSON of a
        // busy host has millions of them.
        let mut buf = io::BufWriter::new(&mut *out);
        serde_json::to_writer_pretty(&mut buf, &harvest).context("cannot write JSON")?;
        writeln!(buf)?;
        buf.flush()?;
        return Ok(());
    }
    let (w, h) = if io::stdout().is_terminal() {
        terminal::size().unwrap_or(ONCE_SIZE)
    } else {
        pipe_size()
    };
    app.update(harvest);
    for line in draw::to_text(&app, w, h) {
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Raw mode and the alternate screen while alive; the terminal as it was after.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> Result<Self> {
        terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
        // From here on, Drop restores whatever was done.
        ACTIVE.store(true, Ordering::SeqCst);
        let guard = Self;
        execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)
            .context("cannot switch to the alternate screen")?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Whether the terminal is in the view's mode (raw, alternate screen).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Leaves the alternate screen and raw mode, once: the panic hook and the
/// guard both call it, and a second "leave alternate screen" is not
/// harmless: terminals restore the cursor saved on entry with it, moving
/// it back over whatever was printed since (the panic message).
fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
        let _ = terminal::disable_raw_mode();
    }
}

/// Restores the terminal before the default hook prints a panic, so the
/// message lands on the normal screen where it can be read.
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
