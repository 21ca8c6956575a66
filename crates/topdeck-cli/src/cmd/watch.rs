// SPDX-License-Identifier: Apache-2.0
//! `topdeck watch`: re-read one registry each interval and print what
//! changed: counters as rates, gauges as values, histograms over the
//! interval (from the difference of bucket counts, not since start).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use topdeck::{HistogramValue, Liveness, Snapshot, Value};

use super::show::histogram_line;
use crate::{render, select};

pub fn run(target: &str, filters: &[String], interval: Duration, count: Option<u64>) -> Result<()> {
    let mut reader = select::open(target)?;
    let read = |r: &mut topdeck::RegistryReader| {
        r.snapshot()
            .with_context(|| format!("cannot read the metrics of {}", r.path().display()))
    };
    let h = reader.header();
    println!(
        "watching {} (pid {}), registry {}, every {}",
        h.process_name,
        h.pid,
        h.registry_name,
        humantime::format_duration(interval)
    );
    let mut prev = read(&mut reader)?;
    let mut prev_at = Instant::now();
    let started = prev_at;
    let mut n = 0;
    while count.is_none_or(|c| n < c) {
        std::thread::sleep(interval);
        let snap = read(&mut reader)?;
        let now = Instant::now();
        n += 1;
        println!("--- +{:.1}s", now.duration_since(started).as_secs_f64());
        print_changes(
            &prev,
            &snap,
            now.duration_since(prev_at).as_secs_f64(),
            filters,
        );
        if reader.liveness() == Liveness::Dead {
            println!("the writer is gone; stopping");
            break;
        }
        (prev, prev_at) = (snap, now);
    }
    Ok(())
}

fn print_changes(prev: &Snapshot, snap: &Snapshot, secs: f64, filters: &[String]) {
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.starts_with(f.as_str()));
    // One reader's snapshots only grow: the earlier one is a prefix of the later.
    let before: Vec<&Value> = prev.iter().map(|(_, v)| v).collect();
    for (i, (m, v)) in snap.iter().enumerate() {
        if !wanted(&m.name) {
            continue;
        }
        let line = match (v, before.get(i)) {
            (Value::Counter(c), Some(Value::Counter(p))) => {
                render::rate(c.wrapping_sub(*p) as f64 / secs, &m.unit)
            }
            (Value::Counter(c), _) => render::rate(*c as f64 / secs, &m.unit),
            (Value::Histogram(h), Some(Value::Histogram(p))) => {
                interval_line(&delta(h, p), secs, &m.unit)
            }
            (Value::Histogram(h), _) => interval_line(h, secs, &m.unit),
            (v, _) => super::show::value_text(m, v),
        };
        println!("  {:<50} {line}", render::series(m));
    }
}

fn interval_line(h: &HistogramValue, secs: f64, unit: &str) -> String {
    let rate = render::rate(h.count as f64 / secs, "");
    format!("{rate}  {}", histogram_line(h, unit))
}

/// Observations between two snapshots of one histogram.
fn delta(now: &HistogramValue, before: &HistogramValue) -> HistogramValue {
    HistogramValue {
        zero_count: now.zero_count.wrapping_sub(before.zero_count),
        buckets: now
            .buckets
            .iter()
            .zip(before.buckets.iter().chain(std::iter::repeat(&0)))
            .map(|(a, b)| a.wrapping_sub(*b))
            .collect(),
        count: now.count.wrapping_sub(before.count),
        sum: now.sum - before.sum,
        // The largest value of the interval is not known, only since start.
        max: None,
        ..now.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_histograms_hold_only_the_new_observations() {
        let h = |buckets: Vec<u64>| HistogramValue {
            schema: 0,
            zero_threshold: 0.0,
            zero_count: 0,
            min_index: 0,
            count: buckets.iter().sum(),
            buckets,
            sum: 0.0,
            max: None,
        };
        let d = delta(&h(vec![5, 1, 10]), &h(vec![5, 1, 0]));
        assert_eq!(d.count, 10);
        assert_eq!(d.quantile(0.5), Some(2f64.powf(1.5)));
    }
}
