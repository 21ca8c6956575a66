// SPDX-License-Identifier: Apache-2.0
//! What going back in time costs over an hour of recording. Builds a
//! store as `topdeck record` would write it, with the recorder's own API:
//! `--registries` real registries of `--series` series each (70%
//! counters, 20% gauges, 10% histograms), every value changing every
//! frame, `--seconds` frames 1 s apart ending now. Then times the
//! `topdeck` binary: `show --at` an hour back and at the end, and `watch
//! --from` over the whole hour (all of one registry's series, and one
//! series). Prints one JSON line: each command, its best and median wall
//! time of `--rounds`, and a replay's speed as recorded seconds per
//! second.
//!
//! `cargo build --release -p topdeck-cli && cargo run --release -p topdeck-bench --bin history_budget`

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use topdeck::{Registry, RegistryReader};
use topdeck_history::{format_time, Options, Recorder};
use topdeck_sources::Tracked;

const USAGE: topdeck_bench::Usage = topdeck_bench::Usage::new(
    "history_budget",
    "[--registries N] [--series N] [--seconds N] [--rounds N] [--topdeck PATH]
  --registries N: registries recorded (10)
  --series N:     series in each (1000)
  --seconds N:    frames, 1 s apart (3600)
  --rounds N:     runs of each command timed (5)
  --topdeck PATH: the binary timed (the release build beside this one)",
);

/// The registry the commands look at.
const TARGET: &str = "svc3";

fn main() -> Result<()> {
    let (mut registries, mut series, mut seconds, mut rounds) = (10usize, 1000usize, 3600u64, 5);
    let mut topdeck = std::env::current_exe()?.with_file_name("topdeck");
    let mut args = USAGE.args().into_iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--registries" => registries = USAGE.parse(&a, args.next().as_deref()),
            "--series" => series = USAGE.parse(&a, args.next().as_deref()),
            "--seconds" => seconds = USAGE.parse(&a, args.next().as_deref()),
            "--rounds" => rounds = USAGE.parse(&a, args.next().as_deref()),
            "--topdeck" => {
                topdeck = PathBuf::from(USAGE.parse::<String>(&a, args.next().as_deref()))
            }
            other => USAGE.fail(format_args!("unknown argument {other:?}")),
        }
    }
    if !topdeck.is_file() {
        bail!(
            "no {} (build it: cargo build --release -p topdeck-cli)",
            topdeck.display()
        );
    }
    let store = tempfile::Builder::new().prefix("td-history-").tempdir()?;
    let t = Instant::now();
    let (from, to) = build(store.path(), registries, series, seconds)?;
    let built_s = t.elapsed().as_secs_f64();
    let bytes: u64 = std::fs::read_dir(store.path())?
        .map(|e| Ok(e?.metadata()?.len()))
        .sum::<std::io::Result<u64>>()?;

    let dir = store.path().to_str().context("a UTF-8 store path")?;
    let (hour_back, end) = (format_time(from + 1_000_000_000), format_time(to));
    let start = format_time(from);
    let commands: Vec<(&str, Vec<&str>)> = vec![
        (
            "show_at_hour_back",
            vec![
                "show",
                TARGET,
                "--at",
                &hour_back,
                "--history",
                dir,
                "--json",
            ],
        ),
        (
            "show_at_end",
            vec!["show", TARGET, "--at", &end, "--history", dir, "--json"],
        ),
        (
            "watch_hour_all_series",
            vec!["watch", TARGET, "--from", &start, "--history", dir],
        ),
        (
            "watch_hour_one_series",
            vec![
                "watch",
                TARGET,
                "c0007_total",
                "--from",
                &start,
                "--history",
                dir,
            ],
        ),
    ];
    // Untimed: the replay is whole, an interval per frame after the first.
    let one = &commands[3].1;
    let out = Command::new(&topdeck).args(one).output()?;
    let blocks = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("--- "))
        .count() as u64;
    if blocks != seconds - 1 {
        bail!(
            "`topdeck {}` printed {blocks} intervals, not {}",
            one.join(" "),
            seconds - 1
        );
    }
    let mut timed = serde_json::Map::new();
    for (name, args) in &commands {
        let mut times: Vec<f64> = (0..rounds)
            .map(|_| run(&topdeck, args))
            .collect::<Result<_>>()?;
        times.sort_by(f64::total_cmp);
        let (best, median) = (times[0], times[times.len() / 2]);
        let mut entry = serde_json::json!({
            "command": format!("topdeck {}", args.join(" ")),
            "best_s": best,
            "median_s": median,
        });
        if name.starts_with("watch") {
            entry["recorded_seconds_per_second"] = ((seconds - 1) as f64 / median).into();
        }
        timed.insert((*name).into(), entry);
    }
    println!(
        "{}",
        serde_json::json!({
            "registries": registries,
            "series_each": series,
            "frames": seconds,
            "store_bytes": bytes,
            "build_s": built_s,
            "timed": timed,
        })
    );
    Ok(())
}

/// Records `seconds` frames 1 s apart, ending at the last whole second,
/// of `registries` registries of `series` series each; the first and
/// last frames' times.
fn build(store: &Path, registries: usize, series: usize, seconds: u64) -> Result<(u64, u64)> {
    let ns = tempfile::Builder::new()
        .prefix("td-history-ns-")
        .tempdir()?;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        // xorshift64: the same values every run.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let latencies = topdeck_bench::latencies();
    let mut made = Vec::with_capacity(registries);
    for r in 0..registries {
        let reg = Registry::builder()
            .dir(ns.path())
            .name(format!("svc{r}"))
            .build()?;
        let (mut counters, mut gauges, mut histograms) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..series {
            match i % 10 {
                0..=6 => counters.push(reg.counter(
                    &format!("c{i:04}_total"),
                    &[("r", "x")],
                    "A counter.",
                    "",
                )?),
                7 | 8 => gauges.push(reg.gauge(&format!("g{i:04}"), &[], "A gauge.", "bytes")?),
                _ => histograms.push(reg.histogram(
                    &format!("h{i:04}_seconds"),
                    &[],
                    "A histogram.",
                    "seconds",
                )?),
            }
        }
        let (source, tracked) = Tracked::<()>::of_reader(RegistryReader::open(reg.path())?);
        made.push((reg, counters, gauges, histograms, source, tracked));
    }
    let now_s = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let first = (now_s + 1 - seconds) * 1_000_000_000;
    let mut recorder = Recorder::open(store, Options::default())?;
    for k in 0..seconds {
        let mut frame = Vec::with_capacity(registries);
        for (_, counters, gauges, histograms, source, tracked) in &mut made {
            for c in counters.iter() {
                c.add(next() % 100);
            }
            for g in gauges.iter() {
                g.set((next() % 1_000_000) as i64);
            }
            for h in histograms.iter() {
                for _ in 0..5 {
                    h.record(latencies[next() as usize % latencies.len()]);
                }
            }
            frame.push((source.clone(), tracked.snapshot()?));
        }
        recorder.record(
            first + k * 1_000_000_000,
            frame.iter().map(|(s, snap)| (s, snap.clone())),
        )?;
    }
    Ok((first, first + (seconds - 1) * 1_000_000_000))
}

/// Runs `topdeck args` with its output thrown away; its wall time.
fn run(topdeck: &Path, args: &[&str]) -> Result<f64> {
    let t = Instant::now();
    let status = Command::new(topdeck)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let took = t.elapsed();
    if !status.success() {
        bail!("`topdeck {}` failed: {status}", args.join(" "));
    }
    Ok(Duration::as_secs_f64(&took))
}
