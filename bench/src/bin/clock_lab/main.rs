// SPDX-License-Identifier: Apache-2.0
//! The clock lab: long-running measurements of `topdeck-clock` that are
//! claims, not tests.
//!
//! - `drift SECS [MAX_BRACKET_NS]`: topdeck's `now()`, minstant and
//!   quanta against tight `CLOCK_MONOTONIC` brackets from the first
//!   millisecond after start, per time bin (see `drift.rs`).
//! - `load HOG_SECS AFTER_SECS [QUIET_SECS [MAX_BRACKET_NS]]`: the same
//!   while one thread per CPU spins for `HOG_SECS`, from the start (the
//!   clocks start and recalibrate under saturation) or after `QUIET_SECS`
//!   quiet, then `AFTER_SECS` quiet; drift reported from the first sample
//!   and from the end of the load.
//! - `cross SECS`: backward steps across threads through a contended
//!   shared word, for topdeck's `now()` and `now_ordered()`, minstant,
//!   quanta and the raw counter (see `cross.rs`).
//! - `warp SECS`: as `cross`, each hand-off under a spin lock.
//! - `idle SECS`: a process that has used the clock sleeps; counts the
//!   voluntary context switches of all its threads over the interval.
//!
//! Output: one JSON object per experiment on stdout; `drift`, `load` and
//! `cross` also print a Markdown table on stderr.

mod contenders;
mod cross;
mod drift;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drift::Recorder;

use anyhow::{bail, Context, Result};
use serde_json::json;
use topdeck::clock;

/// Voluntary context switches per thread of this process.
fn switches() -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    let dir = "/proc/self/task";
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {dir}"))? {
        let p = e?.path().join("status");
        let s = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let field = |k: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(str::trim)
                .unwrap_or("")
        };
        out.push((
            field("Name:").to_owned(),
            field("voluntary_ctxt_switches:").parse().unwrap_or(0),
        ));
    }
    Ok(out)
}

fn idle(secs: u64) -> Result<serde_json::Value> {
    let _ = clock::now();
    // Let start-up (skew check, first recalibration) finish first.
    std::thread::sleep(Duration::from_millis(1_200));
    let before = switches()?;
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let elapsed = t.elapsed().as_secs_f64();
    let after = switches()?;
    let per_thread: Vec<_> = after
        .iter()
        .map(|(name, n)| {
            let b = before.iter().find(|(bn, _)| bn == name).map_or(0, |x| x.1);
            json!({"thread": name, "voluntary_switches": n - b})
        })
        .collect();
    let total: u64 =
        after.iter().map(|x| x.1).sum::<u64>() - before.iter().map(|x| x.1).sum::<u64>();
    // The main thread's own sleep is one switch; the rest are wakeups of
    // the process while it had nothing to do.
    let wakeups = total.saturating_sub(1);
    Ok(json!({
        "experiment": "idle",
        "seconds": elapsed,
        "voluntary_switches_all_threads": total,
        "wakeups_excluding_main_sleep": wakeups,
        "wakeups_per_2s": wakeups as f64 * 2.0 / elapsed,
        "per_thread": per_thread,
        "source": clock::source().kind.name(),
    }))
}

fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid set of the size passed; pid 0 = this process.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
    }
    // SAFETY: every index is below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

fn drift(secs: u64, max_bracket: u64) -> serde_json::Value {
    let mut rec = Recorder::new(max_bracket);
    rec.run_until(secs * 1_000_000_000);
    let (table, mut report) = rec.report(0);
    eprint!("{table}");
    report["experiment"] = json!("drift");
    report["seconds"] = json!(secs);
    finish(report)
}

/// Adds the clock's own counters and source to a report.
fn finish(mut report: serde_json::Value) -> serde_json::Value {
    let stats = clock::stats();
    report["recalibrations"] = json!(stats.recalibrations);
    report["resets"] = json!(stats.resets);
    report["clamps"] = json!(stats.clamps);
    report["source"] = json!(clock::source().kind.name());
    report["load_average"] = json!(std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim());
    report
}

/// Runs `f` while one thread per CPU spins.
fn with_hogs<T>(cpus: &[usize], f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for &cpu in cpus {
            let stop = &stop;
            s.spawn(move || {
                pin(cpu);
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            });
        }
        let out = f();
        stop.store(true, Ordering::Relaxed);
        out
    })
}

fn load(
    hog_secs: u64,
    after_secs: u64,
    quiet_secs: u64,
    max_bracket: u64,
) -> Result<serde_json::Value> {
    let cpus = allowed_cpus()?;
    let secs = |s: u64| s * 1_000_000_000;
    let mut rec = if quiet_secs == 0 {
        // The clocks start under load.
        with_hogs(&cpus, || {
            let mut rec = Recorder::new(max_bracket);
            rec.run_until(secs(hog_secs));
            rec
        })
    } else {
        let mut rec = Recorder::new(max_bracket);
        rec.run_until(secs(quiet_secs));
        with_hogs(&cpus, || rec.run_until(secs(quiet_secs + hog_secs)));
        rec
    };
    let load_end = rec.elapsed();
    rec.run_until(load_end + secs(after_secs));
    let (table, whole) = rec.report(0);
    eprintln!(
        "from the start (hogs from {quiet_secs} s until {:.1} s):\n{table}",
        load_end as f64 / 1e9
    );
    let (table, after) = rec.report(load_end);
    eprintln!("from the end of the load:\n{table}");
    Ok(finish(json!({
        "experiment": "load",
        "hog_threads": cpus.len(),
        "quiet_seconds_before": quiet_secs,
        "hog_seconds": hog_secs,
        "after_seconds": after_secs,
        "from_start": whole,
        "from_end_of_load": after,
    })))
}

fn cross(secs: u64, lock: bool) -> Result<serde_json::Value> {
    let cpus = allowed_cpus()?;
    let (table, report) = cross::run(secs, &cpus, lock);
    eprint!("{table}");
    Ok(finish(report))
}

/// Pins the calling thread to `cpu`, from the affinity mask (best effort,
/// as before: an unpinned thread only makes a run noisier).
fn pin(cpu: usize) {
    let _ = topdeck_bench::pin_to([cpu]);
}

const USAGE: topdeck_bench::Usage = topdeck_bench::Usage::new(
    "clock_lab",
    "drift [SECONDS [MAX_BRACKET_NS]] | load [HOG_SECONDS [AFTER_SECONDS [QUIET_SECONDS [MAX_BRACKET_NS]]]] | cross|warp|idle [SECONDS]
  drift: the clocks against CLOCK_MONOTONIC brackets (60 s, brackets up to 50 ns)
  load:  the same while one thread per CPU spins (6 s of load, then 20 s quiet)
  cross: backward steps across threads (6 s); warp: each hand-off under a spin lock (10 s)
  idle:  the clock's wake-ups of an idle process (30 s)",
);

fn main() -> Result<()> {
    let args = USAGE.args();
    let Some(what) = args.first() else {
        USAGE.fail("no experiment given")
    };
    // How many numbers each experiment takes.
    let most = match what.as_str() {
        "drift" => 2,
        "load" => 4,
        "cross" | "warp" | "idle" => 1,
        other => USAGE.fail(format_args!("unknown experiment {other:?}")),
    };
    if args.len() > 1 + most {
        USAGE.fail(format_args!(
            "{what} takes at most {most} number(s), not {:?}",
            &args[1..]
        ));
    }
    let arg = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |s| {
            USAGE.parse(&format!("{what}'s argument {i}"), Some(s))
        })
    };
    let secs = |default: u64| arg(1, default);
    let report = match what.as_str() {
        "drift" => drift(secs(60), arg(2, 50)),
        "load" => load(secs(6), arg(2, 20), arg(3, 0), arg(4, 50))?,
        "cross" => cross(secs(6), false)?,
        "warp" => cross(secs(10), true)?,
        "idle" => idle(secs(30))?,
        _ => unreachable!("checked above"),
    };
    println!("{report}");
    Ok(())
}
