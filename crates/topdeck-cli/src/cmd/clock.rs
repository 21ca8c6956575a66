// SPDX-License-Identifier: Apache-2.0
//! `topdeck clock`: which clock timers use on this host and why, its
//! calibration, the TSC skew measured between CPUs, and a short benchmark
//! of its reads against clock_gettime, all from this process's own clock.

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use serde::Serialize;
use topdeck::clock;

/// Reads per benchmark batch.
const BATCH: u32 = 200_000;
/// Batches per read; the fastest counts (the others were interrupted).
const BATCHES: u32 = 5;
/// How long to wait for the skew measurement, which the clock's thread
/// runs right after first use.
const SKEW_WAIT: Duration = Duration::from_secs(2);

/// The `--json` shape.
#[derive(Serialize)]
struct Report {
    source: &'static str,
    reason: String,
    kernel_clocksource: Option<String>,
    calibration: Option<CalibrationJson>,
    bound: BoundJson,
    skew: Option<SkewJson>,
    benchmark: Bench,
    stats: StatsJson,
}

#[derive(Serialize)]
struct CalibrationJson {
    ticks_per_sec: u64,
    mult: u64,
    shift: u32,
    last_error_ns: i64,
    last_bracket_ns: u64,
    window_ns: u64,
}

/// What the clock promises in its current mode (`topdeck_clock::Bound`).
#[derive(Serialize)]
struct BoundJson {
    max_error_ns: u64,
    ordered_cross_thread_ns: u64,
    text: String,
}

#[derive(Serialize)]
struct SkewJson {
    reference_cpu: usize,
    significant: bool,
    cpus: Vec<CpuJson>,
    unmeasured: Vec<usize>,
}

#[derive(Serialize)]
struct CpuJson {
    cpu: usize,
    offset_ns: f64,
    error_ns: f64,
    rounds: u64,
}

/// ns per read, fastest batch.
#[derive(Serialize)]
struct Bench {
    now_ns: f64,
    now_ordered_ns: f64,
    wall_ns: f64,
    clock_gettime_monotonic_ns: f64,
    clock_gettime_realtime_ns: f64,
    /// `now_ns / clock_gettime_monotonic_ns`.
    now_vs_monotonic: f64,
}

#[derive(Serialize)]
struct StatsJson {
    recalibrations: u64,
    resets: u64,
    clamps: u64,
    fallbacks: u64,
}

/// ns per call of `f`, fastest of [`BATCHES`].
fn per_call(f: &dyn Fn() -> u64) -> f64 {
    (0..BATCHES)
        .map(|_| {
            let t = Instant::now();
            let mut acc = 0u64;
            for _ in 0..BATCH {
                acc = acc.wrapping_add(black_box(f()));
            }
            black_box(acc);
            t.elapsed().as_nanos() as f64 / f64::from(BATCH)
        })
        .fold(f64::INFINITY, f64::min)
}

fn bench() -> Bench {
    // std's Instant and SystemTime are clock_gettime(MONOTONIC / REALTIME).
    let mono = || {
        black_box(Instant::now());
        0
    };
    let real = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos().into())
    };
    let now_ns = per_call(&clock::now);
    let b = Bench {
        now_ns,
        now_ordered_ns: per_call(&clock::now_ordered),
        wall_ns: per_call(&clock::wall),
        clock_gettime_monotonic_ns: per_call(&mono),
        clock_gettime_realtime_ns: per_call(&real),
        now_vs_monotonic: 0.0,
    };
    Bench {
        now_vs_monotonic: b.now_ns / b.clock_gettime_monotonic_ns,
        ..b
    }
}

/// Reports this process's clock; `wait` first lets the clock's thread
/// recalibrate over a longer window.
pub fn run(out: &mut impl Write, json: bool, wait: Duration) -> Result<()> {
    let _ = clock::now();
    let deadline = Instant::now() + SKEW_WAIT;
    while clock::source().kind != clock::SourceKind::Os
        && clock::skew().is_none()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(wait);
    let benchmark = bench();
    let source = clock::source();
    let params = clock::params();
    let hz = params.ticks_per_sec.max(1) as f64;
    let ns = |ticks: f64| ticks * 1e9 / hz;
    let calibration = clock::calibration().map(|c| CalibrationJson {
        ticks_per_sec: params.ticks_per_sec,
        mult: params.mult,
        shift: params.shift,
        last_error_ns: c.last_error_ns,
        last_bracket_ns: c.last_bracket_ns,
        window_ns: c.window_ns,
    });
    let skew = clock::skew().map(|s| SkewJson {
        reference_cpu: s.reference_cpu,
        significant: s.significant(),
        cpus: s
            .cpus
            .iter()
            .map(|c| CpuJson {
                cpu: c.cpu,
                offset_ns: ns(c.offset_ticks as f64),
                error_ns: ns(c.error_ticks as f64),
                rounds: c.rounds,
            })
            .collect(),
        unmeasured: s.unmeasured.clone(),
    });
    let st = clock::stats();
    let b = clock::bound();
    let bound = BoundJson {
        max_error_ns: b.max_error_ns,
        ordered_cross_thread_ns: b.ordered_cross_thread_ns,
        text: b.to_string(),
    };
    let report = Report {
        bound,
        source: source.kind.name(),
        reason: source.reason,
        kernel_clocksource: clock::kernel_clocksource(),
        calibration,
        skew,
        benchmark,
        stats: StatsJson {
            recalibrations: st.recalibrations,
            resets: st.resets,
            clamps: st.clamps,
            fallbacks: st.fallbacks,
        },
    };
    if json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    print_text(out, &report)
}

fn print_text(out: &mut impl Write, r: &Report) -> Result<()> {
    writeln!(out, "source       {}", r.source)?;
    writeln!(out, "why          {}", r.reason)?;
    writeln!(
        out,
        "kernel       clocksource {}",
        r.kernel_clocksource.as_deref().unwrap_or("unknown")
    )?;
    match &r.calibration {
        Some(c) => writeln!(
            out,
            "calibration  {:.3} MHz, mult {} shift {} ({:.6} ns/tick); last error {} ns \
             (bracket {} ns) over a {:.3} s window",
            c.ticks_per_sec as f64 / 1e6,
            c.mult,
            c.shift,
            c.mult as f64 / (1u128 << c.shift) as f64,
            c.last_error_ns,
            c.last_bracket_ns,
            c.window_ns as f64 / 1e9
        )?,
        None => writeln!(out, "calibration  none (OS clock)")?,
    }
    writeln!(out, "bound        {}", r.bound.text)?;
    match &r.skew {
        Some(s) => {
            writeln!(
                out,
                "skew         against CPU {}: {}",
                s.reference_cpu,
                if s.significant {
                    "real, per-CPU offsets needed"
                } else {
                    "within measurement error"
                }
            )?;
            for c in &s.cpus {
                writeln!(
                    out,
                    "             CPU {}: {:+.0} ns ± {:.0} ns ({} round trips)",
                    c.cpu, c.offset_ns, c.error_ns, c.rounds
                )?;
            }
            if !s.unmeasured.is_empty() {
                writeln!(out, "             not measured: CPUs {:?}", s.unmeasured)?;
            }
        }
        None => writeln!(out, "skew         not measured")?,
    }
    let b = &r.benchmark;
    writeln!(
        out,
        "benchmark    ns/read: now() {:.1}, now_ordered() {:.1}, wall() {:.1}, \
         clock_gettime MONOTONIC {:.1}, REALTIME {:.1}; now() = {:.2}x MONOTONIC",
        b.now_ns,
        b.now_ordered_ns,
        b.wall_ns,
        b.clock_gettime_monotonic_ns,
        b.clock_gettime_realtime_ns,
        b.now_vs_monotonic
    )?;
    let s = &r.stats;
    writeln!(
        out,
        "stats        recalibrations {}, resets {}, clamps {}, fallbacks {}",
        s.recalibrations, s.resets, s.clamps, s.fallbacks
    )?;
    Ok(())
}
