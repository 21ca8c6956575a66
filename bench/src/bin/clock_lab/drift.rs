// SPDX-License-Identifier: Apache-2.0
//! Drift of each clock against `CLOCK_MONOTONIC` from its first
//! millisecond (the median of its errors then: one sample alone is up to
//! half a 10 ns TSC step off, for every clock):
//! samples every 100 µs for the first 20 ms, then every ms; each sample is
//! the tightest of 20 brackets, kept only if that bracket is at most
//! `max_bracket` ns wide. Results per time bin (edges from 1 ms to 10 min),
//! so a step in the first milliseconds is not averaged away by the minutes.

use std::time::Duration;

use serde_json::json;

use super::contenders::{error_of, mono, Contenders, NAMES};
use topdeck::clock;

/// A recalibration as topdeck reported it: ns since start, the error it
/// measured, its bracket, and its rate window.
type Recal = (u64, i64, u64, u64);

/// Bin edges, ms since start.
const EDGES_MS: [u64; 22] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 3_000, 5_000, 10_000, 20_000, 30_000, 60_000,
    120_000, 180_000, 300_000, 450_000, 600_000,
];

/// One kept sample: ns since start, each clock's error, each bracket.
struct Sample {
    at: u64,
    err: [i64; 3],
    width: [u64; 3],
}

/// Bracketed samples of every clock over `phases`: `(label, seconds, work)`,
/// where `work` runs on its own threads for the phase (None: quiet).
pub struct Recorder {
    clocks: Contenders,
    start: u64,
    max_bracket: u64,
    samples: Vec<Sample>,
    rejected: u64,
    recals: Vec<Recal>,
    recals_seen: u64,
}

impl Recorder {
    /// Starts every clock now; time counts from when all three are ready.
    pub fn new(max_bracket: u64) -> Self {
        let clocks = Contenders::new();
        let start = mono();
        Self {
            clocks,
            start,
            recals: Vec::new(),
            recals_seen: 0,
            max_bracket,
            samples: Vec::new(),
            rejected: 0,
        }
    }

    /// Samples until `until` ns since start: every 100 µs before 20 ms,
    /// then every ms.
    pub fn run_until(&mut self, until: u64) {
        loop {
            let at = mono().saturating_sub(self.start);
            if at >= until {
                return;
            }
            self.sample(at);
            let gap = if at < 20_000_000 { 100_000 } else { 1_000_000 };
            let next = self.start + at + gap;
            // Sleep for long gaps, spin for short ones (a sleep overshoots
            // ~60 µs).
            if gap >= 1_000_000 {
                std::thread::sleep(Duration::from_nanos(gap - 100_000));
            }
            while mono() < next {
                std::hint::spin_loop();
            }
        }
    }

    fn sample(&mut self, at: u64) {
        // A recalibration since the last sample (seen within ~1 ms).
        let n = clock::stats().recalibrations;
        if n != self.recals_seen {
            self.recals_seen = n;
            if let Some(c) = clock::calibration() {
                self.recals
                    .push((at, c.last_error_ns, c.last_bracket_ns, c.window_ns));
            }
        }
        let mut s = Sample {
            at,
            err: [0; 3],
            width: [0; 3],
        };
        for i in 0..3 {
            let (e, w) = error_of(20, || self.clocks.read(i));
            s.err[i] = e;
            s.width[i] = w;
        }
        if s.width.iter().all(|&w| w <= self.max_bracket) {
            self.samples.push(s);
        } else {
            self.rejected += 1;
        }
    }

    /// Ns since start now.
    pub fn elapsed(&self) -> u64 {
        mono().saturating_sub(self.start)
    }

    /// Per-bin drift (error minus the median error over the first ms from
    /// `base_at`), for samples from `base_at` on; topdeck's absolute error
    /// too. `(table rows for stderr, JSON)`.
    pub fn report(&self, base_at: u64) -> (String, serde_json::Value) {
        let kept: Vec<&Sample> = self.samples.iter().filter(|s| s.at >= base_at).collect();
        let Some(first) = kept.first() else {
            return (
                "no samples kept\n".into(),
                json!({"error": "no samples kept"}),
            );
        };
        let base: [i64; 3] = std::array::from_fn(|i| {
            let mut e: Vec<i64> = kept
                .iter()
                .filter(|s| s.at < first.at + 1_000_000)
                .map(|s| s.err[i])
                .collect();
            e.sort_unstable();
            e[e.len() / 2]
        });
        let mut rows = Vec::new();
        let mut table = String::from(
            "| until | samples | topdeck max abs drift / at end | minstant | quanta | topdeck abs error max |\n|---|---:|---:|---:|---:|---:|\n",
        );
        let mut lo = base_at;
        let mut running = [0u64; 3];
        for &edge_ms in &EDGES_MS {
            let hi = base_at + edge_ms * 1_000_000;
            let bin: Vec<&&Sample> = kept.iter().filter(|s| s.at >= lo && s.at < hi).collect();
            lo = hi;
            let Some(last) = bin.last() else { continue };
            let mut max = [0u64; 3];
            let mut end = [0i64; 3];
            for i in 0..3 {
                max[i] = bin
                    .iter()
                    .map(|s| (s.err[i] - base[i]).unsigned_abs())
                    .max()
                    .unwrap_or(0);
                end[i] = last.err[i] - base[i];
                running[i] = running[i].max(max[i]);
            }
            let abs = bin
                .iter()
                .map(|s| s.err[0].unsigned_abs())
                .max()
                .unwrap_or(0);
            let label = if edge_ms < 1_000 {
                format!("{edge_ms} ms")
            } else {
                format!("{} s", edge_ms / 1_000)
            };
            table.push_str(&format!(
                "| {label} | {} | {} / {:+} | {} / {:+} | {} / {:+} | {abs} |\n",
                bin.len(),
                max[0],
                end[0],
                max[1],
                end[1],
                max[2],
                end[2]
            ));
            rows.push(json!({
                "until_ms": edge_ms,
                "samples": bin.len(),
                "max_abs_drift_ns": {NAMES[0]: max[0], NAMES[1]: max[1], NAMES[2]: max[2]},
                "drift_at_end_ns": {NAMES[0]: end[0], NAMES[1]: end[1], NAMES[2]: end[2]},
                "topdeck_max_abs_error_ns": abs,
            }));
            if last.at >= self.samples.last().map_or(0, |s| s.at) {
                break;
            }
        }
        let mut widths: Vec<u64> = kept.iter().flat_map(|s| s.width).collect();
        widths.sort_unstable();
        table.push_str(&format!(
            "\nwhole span, max |drift| ns: topdeck {}, minstant {}, quanta {}; brackets median {} ns, max kept {} ns, {} samples kept, {} rejected (a bracket over the limit)\n",
            running[0], running[1], running[2],
            widths[widths.len() / 2], widths[widths.len() - 1], kept.len(), self.rejected
        ));
        let recals: Vec<Recal> = self
            .recals
            .iter()
            .copied()
            .filter(|r| r.0 >= base_at)
            .collect();
        table.push_str("topdeck recalibrations (ms since start: measured error ns, bracket ns):");
        for r in &recals {
            table.push_str(&format!(" {:.0}: {:+}/{}", r.0 as f64 / 1e6, r.1, r.2));
        }
        table.push('\n');
        (
            table,
            json!({
                "recalibration_log": recals.iter().map(|r| json!({"at_ms": r.0 as f64 / 1e6, "error_ns": r.1, "bracket_ns": r.2, "window_ns": r.3})).collect::<Vec<_>>(),
                "bins": rows,
                "max_abs_drift_ns": {NAMES[0]: running[0], NAMES[1]: running[1], NAMES[2]: running[2]},
                "median_bracket_ns": widths[widths.len() / 2],
                "max_kept_bracket_ns": widths[widths.len() - 1],
                "max_bracket_limit_ns": self.max_bracket,
                "samples_kept": kept.len(),
                "samples_rejected": self.rejected,
            }),
        )
    }
}
