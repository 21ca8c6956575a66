// SPDX-License-Identifier: Apache-2.0
//! What one frame costs the recorder for 100 registries of 1,000 series
//! (900 counters, a third of them moving each frame, and 100 histograms
//! moving every frame) in `/dev/shm`: reading the snapshots, and encoding,
//! compressing and appending the frame. 120 frames (two key frames).
//!
//! `cargo run --release -p topdeck-history --example frame_cost`

use std::time::{Duration, Instant};

use topdeck::{Namespace, Registry};
use topdeck_history::{Options, Recorder};

const FRAMES: u32 = 120;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir())?;
    let ns = dir.path().join("ns");
    let mut registries = Vec::new();
    let (mut counters, mut histograms) = (Vec::new(), Vec::new());
    for _ in 0..100 {
        let r = Registry::builder().dir(&ns).build()?;
        for i in 0..900 {
            counters.push(r.counter("jobs_total", &[("i", &i.to_string())], "Jobs.", "")?);
        }
        for i in 0..100 {
            let h = r.histogram("took_seconds", &[("i", &i.to_string())], "Took.", "seconds")?;
            histograms.push(h);
        }
        registries.push(r);
    }
    let mut tracker = topdeck_sources::Tracker::<()>::new(Namespace::at(&ns), None);
    let mut recorder = Recorder::open(&dir.path().join("history"), Options::default())?;
    let sources = tracker.look().sources;
    let (mut read, mut record) = (Duration::ZERO, Duration::ZERO);
    for f in 0..u64::from(FRAMES) {
        for (k, c) in counters.iter().enumerate() {
            if (k as u64 + f) % 3 == 0 {
                c.add(k as u64 % 5 + 1);
            }
        }
        for (k, h) in histograms.iter().enumerate() {
            h.record(((k as u64 * 7 + f) % 1000) as f64 * 1e-5);
        }
        let t0 = Instant::now();
        let snaps = sources
            .iter()
            .map(|s| tracker.open(s)?.snapshot())
            .collect::<Result<Vec<_>, _>>()?;
        let t1 = Instant::now();
        recorder.record(f * 1_000_000_000 + 1, sources.iter().zip(snaps))?;
        read += t1 - t0;
        record += t1.elapsed();
    }
    let s = recorder.stats();
    println!(
        "per frame: read {:?}, record {:?}; {} bytes a frame, {:.3} bytes a sample",
        read / FRAMES,
        record / FRAMES,
        s.bytes / u64::from(FRAMES),
        s.bytes as f64 / s.samples as f64
    );
    Ok(())
}
