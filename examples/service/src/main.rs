// SPDX-License-Identifier: Apache-2.0
//! An example service: a generator feeds requests (byte buffers of random
//! size) through a bounded queue to worker threads that checksum them with
//! SHA-256. Everything it does is published through one topdeck registry:
//! throughput per worker, bytes, queue depth, requests in flight, latency.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use sha2::{Digest, Sha256};
use topdeck::{Counter, Gauge, Histogram, Registry};

/// A service that hashes requests and publishes its metrics with topdeck.
#[derive(Debug, Parser)]
struct Args {
    /// Worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Requests generated per second.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    rate: u64,
    /// Exit cleanly after this many seconds (default: run until SIGTERM or SIGINT).
    #[arg(long)]
    duration: Option<u64>,
}

struct Request {
    size: usize,
    seed: u64,
    queued: Instant,
}

/// The handles every worker updates.
#[derive(Clone)]
struct Metrics {
    queue_depth: Gauge,
    in_flight: Gauge,
    bytes: Counter,
    latency: Histogram,
    queue_wait: Histogram,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("cannot install signal handlers")?;
    }
    let registry = Registry::new().context("cannot create the topdeck registry")?;
    println!(
        "pid {} registry {}",
        std::process::id(),
        registry.path().display()
    );

    let m = Metrics {
        queue_depth: registry.gauge("queue_depth", &[], "Requests waiting for a worker.", "")?,
        in_flight: registry.gauge("in_flight", &[], "Requests being hashed.", "")?,
        bytes: registry.counter("bytes_processed_total", &[], "Bytes hashed.", "bytes")?,
        latency: registry.histogram(
            "request_duration_seconds",
            &[],
            "Time from enqueue to digest.",
            "seconds",
        )?,
        queue_wait: registry.histogram(
            "queue_wait_seconds",
            &[],
            "Time spent queued.",
            "seconds",
        )?,
    };
    let rejected = registry.counter("rejected_total", &[], "Requests dropped: queue full.", "")?;
    let workers_gauge = registry.gauge("workers", &[], "Worker threads.", "")?;
    workers_gauge.set(i64::from(args.workers));

    let (tx, rx) = sync_channel::<Request>(256);
    let rx = Arc::new(Mutex::new(rx));
    let mut handles = Vec::new();
    for w in 0..args.workers {
        let served = registry.counter(
            "requests_total",
            &[("worker", &w.to_string())],
            "Requests served, per worker.",
            "",
        )?;
        let (rx, m) = (rx.clone(), m.clone());
        handles.push(std::thread::spawn(move || worker(&rx, &m, &served)));
    }

    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs(s));
    let tick = Duration::from_millis(10);
    let per_tick = (args.rate / 100).max(1);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        for _ in 0..per_tick {
            seed = xorshift(seed);
            let req = Request {
                size: 1024 + (seed % (63 * 1024)) as usize,
                seed,
                queued: Instant::now(),
            };
            match tx.try_send(req) {
                Ok(()) => m.queue_depth.inc(),
                Err(TrySendError::Full(_)) => rejected.inc(),
                Err(TrySendError::Disconnected(_)) => break,
            }
        }
        next += tick;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    drop(tx);
    for h in handles {
        let _ = h.join();
    }
    println!("stopped; removing {}", registry.path().display());
    Ok(())
}

fn worker(rx: &Mutex<Receiver<Request>>, m: &Metrics, served: &Counter) {
    let mut buf = Vec::new();
    loop {
        let Ok(req) = rx.lock().map_err(drop).and_then(|r| r.recv().map_err(drop)) else {
            return;
        };
        m.queue_depth.dec();
        m.in_flight.inc();
        m.queue_wait.record(req.queued.elapsed().as_secs_f64());
        buf.clear();
        let mut s = req.seed;
        while buf.len() < req.size {
            s = xorshift(s);
            buf.extend_from_slice(&s.to_le_bytes());
        }
        let digest = Sha256::digest(&buf);
        std::hint::black_box(digest);
        m.bytes.add(buf.len() as u64);
        served.inc();
        m.latency.record(req.queued.elapsed().as_secs_f64());
        m.in_flight.dec();
    }
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}
