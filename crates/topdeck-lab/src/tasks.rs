// SPDX-License-Identifier: Apache-2.0
//! The helper side of [`crate::child`]: the tasks a helper process runs
//! for the lab, each until the lab closes its stdin.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{timing, Error, ErrorKind, Result};

/// Period of the time-cache ticker, as in seed 001's `StartTimeTicker`.
pub const TICKER_PERIOD: Duration = Duration::from_millis(1);

/// The time cache the ticker keeps fresh; readers would load it instead of
/// reading the clock.
static CACHED_NS: AtomicU64 = AtomicU64::new(0);

/// The child side: runs the task named by `args[0]` and returns when stdin
/// reaches end of file. Tasks:
/// - `populate SOCKETS THREADS [PROCESSES]`: hold that many Unix sockets,
///   parked threads and sleeping processes;
/// - `idle-topdeck DIR`: a registry in DIR with a counter and a histogram
///   updated once, the clock read once, then nothing;
/// - `idle-ticker`: a thread storing the time every 1 ms, then nothing.
pub fn run(args: &[String]) -> Result<()> {
    let bad = || {
        Error::new(
            ErrorKind::BadInput,
            format!(
                "unknown helper task {args:?}: expected `populate SOCKETS THREADS [PROCESSES]`, \
                 `idle-topdeck DIR` or `idle-ticker`"
            ),
        )
    };
    let num =
        |s: Option<&String>| -> Result<usize> { s.and_then(|v| v.parse().ok()).ok_or_else(bad) };
    match args.first().map(String::as_str) {
        Some("populate") => {
            let sockets = num(args.get(1))?;
            let threads = num(args.get(2))?;
            let processes = args.get(3).map_or(Ok(0), |p| num(Some(p)))?;
            let held = crate::populate::hold(sockets, threads, processes)?;
            ready(&format!(
                "sockets={} threads={} processes={}",
                held.sockets, held.threads, held.processes
            ))?;
            wait_for_eof();
            drop(held);
            Ok(())
        }
        Some("idle-topdeck") => {
            let dir = args.get(1).ok_or_else(bad)?;
            let registry = topdeck::Registry::builder()
                .dir(dir)
                .name("lab-idle")
                .build()?;
            let c = registry.counter("lab_idle_events_total", &[], "Events.", "")?;
            let h = registry.histogram("lab_idle_seconds", &[], "Durations.", "seconds")?;
            let t0 = timing::now_ns();
            c.inc();
            h.record(timing::secs(t0, timing::now_ns()));
            ready(&registry.path().display().to_string())?;
            wait_for_eof();
            Ok(())
        }
        Some("idle-ticker") => {
            std::thread::Builder::new()
                .name("time-ticker".into())
                .spawn(|| loop {
                    CACHED_NS.store(timing::now_ns(), Ordering::Relaxed);
                    std::thread::sleep(TICKER_PERIOD);
                })
                .map_err(|e| Error::io("start the ticker thread", e))?;
            ready("ticker")?;
            wait_for_eof();
            Ok(())
        }
        _ => Err(bad()),
    }
}

fn ready(what: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {what}")
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("tell the parent we are ready", e))
}

/// Blocks in read(2) on stdin until the parent closes it: no wake-ups.
fn wait_for_eof() {
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
}
