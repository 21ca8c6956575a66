// SPDX-License-Identifier: Apache-2.0
//! The clock lab: long-running measurements of `topdeck-clock` that are
//! claims, not tests.
//!
//! - `deviation SECS`: every ms, the error of `now()` (and of quanta and
//!   minstant) against a tight `CLOCK_MONOTONIC` bracket; max |error| over
//!   the whole run and in steady state (after the first 5 s), and the
//!   largest change of error between consecutive samples next to a
//!   recalibration (a step would show there) and elsewhere.
//! - `warp SECS`: one thread pinned per CPU; under a spin lock each reads
//!   the clock and compares with the last value any thread read; counts
//!   backward steps of `now()` and `now_ordered()` separately.
//! - `idle SECS`: a process that has used the clock sleeps; counts the
//!   voluntary context switches of all its threads over the interval.
//!
//! Output: one JSON object per experiment on stdout.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;
use topdeck::clock;

fn mono() -> u64 {
    topdeck_bench::clock_ns(libc::CLOCK_MONOTONIC)
}

/// `f() - CLOCK_MONOTONIC` at the tightest of 20 brackets, and its width.
fn error_of(f: &dyn Fn() -> u64) -> (i64, u64) {
    let mut best = (0i64, u64::MAX);
    for _ in 0..20 {
        let a = mono();
        let v = f();
        let b = mono();
        let w = b.saturating_sub(a);
        if w < best.1 {
            best = (v as i64 - (a + w / 2) as i64, w);
        }
    }
    best
}

/// Per-contender tracking of error and its changes.
#[derive(Default)]
struct Track {
    max_abs: u64,
    max_abs_steady: u64,
    first: Option<i64>,
    last: Option<i64>,
    max_jump_at_recal: u64,
    max_jump_elsewhere: u64,
}

impl Track {
    /// Errors are reported relative to the first sample for clocks with an
    /// arbitrary epoch (quanta, minstant), absolute for topdeck.
    fn add(&mut self, e: i64, steady: bool, recal: bool, relative: bool) {
        let base = *self.first.get_or_insert(e);
        let e = if relative { e - base } else { e };
        self.max_abs = self.max_abs.max(e.unsigned_abs());
        if steady {
            self.max_abs_steady = self.max_abs_steady.max(e.unsigned_abs());
        }
        if let Some(prev) = self.last {
            let jump = e.abs_diff(prev);
            if recal {
                self.max_jump_at_recal = self.max_jump_at_recal.max(jump);
            } else {
                self.max_jump_elsewhere = self.max_jump_elsewhere.max(jump);
            }
        }
        self.last = Some(e);
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "max_abs_error_ns": self.max_abs,
            "max_abs_error_steady_ns": self.max_abs_steady,
            "max_error_change_across_recalibration_ns": self.max_jump_at_recal,
            "max_error_change_elsewhere_ns": self.max_jump_elsewhere,
        })
    }
}

fn deviation(secs: u64) -> serde_json::Value {
    let _ = clock::now();
    let q = quanta::Clock::new();
    let q_origin = q.now();
    let m_origin = minstant::Instant::now();
    let start = mono();
    let end = start + secs * 1_000_000_000;
    let (mut td, mut tq, mut tm) = (Track::default(), Track::default(), Track::default());
    let mut widths = Vec::new();
    let mut recals_seen = clock::stats().recalibrations;
    let mut samples = 0u64;
    while mono() < end {
        std::thread::sleep(Duration::from_millis(1));
        let recals = clock::stats().recalibrations;
        let recal = recals != recals_seen;
        recals_seen = recals;
        let steady = mono() - start > 5_000_000_000;
        let (e, w) = error_of(&clock::now);
        widths.push(w);
        td.add(e, steady, recal, false);
        let (e, _) = error_of(&|| q.now().duration_since(q_origin).as_nanos() as u64);
        tq.add(e, steady, recal, true);
        let (e, _) = error_of(&|| m_origin.elapsed().as_nanos() as u64);
        tm.add(e, steady, recal, true);
        samples += 1;
    }
    widths.sort_unstable();
    json!({
        "experiment": "deviation",
        "seconds": secs,
        "samples": samples,
        "median_bracket_ns": widths.get(widths.len() / 2),
        "recalibrations": clock::stats().recalibrations,
        "resets": clock::stats().resets,
        "source": clock::source().kind.name(),
        "topdeck": td.json(),
        "quanta_relative_to_start": tq.json(),
        "minstant_relative_to_start": tm.json(),
    })
}

/// A test-and-set spin lock around the shared last value: a futex-free
/// hand-off, so the threads interleave as tightly as the CPUs allow.
struct Shared {
    lock: AtomicBool,
    last: AtomicU64,
}

fn warp(secs: u64) -> Result<serde_json::Value> {
    let cpus = allowed_cpus()?;
    let _ = clock::now();
    let shared = Shared {
        lock: AtomicBool::new(false),
        last: AtomicU64::new(0),
    };
    let stop = AtomicBool::new(false);
    let results: Vec<[u64; 5]> = std::thread::scope(|s| {
        let handles: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                let (shared, stop) = (&shared, &stop);
                s.spawn(move || {
                    pin(cpu);
                    // reads, back(now), worst(now), back(ordered), worst(ordered)
                    let mut r = [0u64; 5];
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        while shared.lock.swap(true, Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                        let ordered = i % 2 == 1;
                        let v = if ordered {
                            clock::now_ordered()
                        } else {
                            clock::now()
                        };
                        let last = shared.last.load(Ordering::Relaxed);
                        if v < last {
                            let k = if ordered { 3 } else { 1 };
                            r[k] += 1;
                            r[k + 1] = r[k + 1].max(last - v);
                        }
                        shared.last.store(v.max(last), Ordering::Relaxed);
                        shared.lock.store(false, Ordering::Release);
                        i += 1;
                    }
                    r[0] = i;
                    r
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("warp thread"))
            .collect()
    });
    let sum = |k: usize| results.iter().map(|r| r[k]).sum::<u64>();
    let max = |k: usize| results.iter().map(|r| r[k]).max().unwrap_or(0);
    Ok(json!({
        "experiment": "warp",
        "seconds": secs,
        "cpus": cpus,
        "reads": sum(0),
        "now_backward_steps": sum(1),
        "now_worst_backward_ns": max(2),
        "now_ordered_backward_steps": sum(3),
        "now_ordered_worst_backward_ns": max(4),
        "clamps": clock::stats().clamps,
        "source": clock::source().kind.name(),
    }))
}

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

fn pin(cpu: usize) {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu came from the affinity mask, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: valid set of the size passed; 0 = this thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: clock_lab deviation|warp|idle [SECONDS]";
    let what = args.first().context(usage)?;
    let secs = |default: u64| -> Result<u64> {
        args.get(1).map_or(Ok(default), |s| {
            s.parse().with_context(|| format!("seconds {s:?}: {usage}"))
        })
    };
    let report = match what.as_str() {
        "deviation" => deviation(secs(60)?),
        "warp" => warp(secs(10)?)?,
        "idle" => idle(secs(30)?)?,
        other => bail!("unknown experiment {other:?}; {usage}"),
    };
    println!("{report}");
    Ok(())
}
