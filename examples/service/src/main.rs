// SPDX-License-Identifier: Apache-2.0
//! An example service for topdeck to look at. A generator thread makes
//! "requests" (byte buffers of random size from a seeded PRNG) at a steady
//! rate and queues them on a bounded channel; worker threads take them off
//! and compute their SHA-256. Everything it does is published through one
//! registry: requests per worker, bytes, errors, queue depth, requests in
//! flight, latency, and the hashing alone (a timer). SIGTERM or SIGINT (or
//! `--duration`) stops it cleanly, and dropping the registry removes its
//! file.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use sha2::{Digest, Sha256};
use topdeck::{Counter, Gauge, GaugeF64, Histogram, Registry, Timer};

/// A service that hashes requests and publishes its metrics with topdeck.
///
/// Prints `pid <pid> registry <path>` on its first line, runs until SIGTERM
/// or SIGINT (or for `--duration`), then removes its registry file.
#[derive(Debug, Parser)]
#[command(name = "topdeck-example-service")]
struct Args {
    /// Worker threads hashing requests.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Requests generated per second.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    rate: u64,
    /// Stop cleanly after this many seconds (default: run until SIGTERM or SIGINT).
    #[arg(long, value_parser = parse_seconds)]
    duration: Option<Duration>,
    /// Seed of the request generator; the same seed makes the same requests.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|x| Duration::try_from_secs_f64(x).ok())
        .ok_or_else(|| format!("{s:?} is not a number of seconds (try `10` or `2.5`)"))
}

/// Requests waiting for a worker, at most.
const QUEUE_CAPACITY: usize = 256;
/// Payload sizes: uniform in this range, so about 32 KiB on average.
const PAYLOAD_BYTES: std::ops::RangeInclusive<usize> = 256..=64 * 1024;
/// Largest payload a worker accepts; larger ones are refused as errors.
const MAX_PAYLOAD: usize = 64 * 1024;
/// One request in this many is too large, so that `errors_total` moves.
const OVERSIZE_ONE_IN: u32 = 500;
/// How often the generator wakes up to queue what is due.
const TICK: Duration = Duration::from_millis(5);
/// How often the main thread checks for a stop request.
const POLL: Duration = Duration::from_millis(50);

struct Request {
    payload: Vec<u8>,
    queued: Instant,
}

/// The handles the threads update; each is a pointer into the mapping.
#[derive(Clone)]
struct Metrics {
    queue_depth: Gauge,
    in_flight: Gauge,
    bytes: Counter,
    queue_full: Counter,
    too_large: Counter,
    latency: Histogram,
    queue_wait: Histogram,
    /// The hashing alone, on the worker's thread: with the topdeck agent
    /// running, each request's CPU wait is recorded beside it.
    hash: Timer,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io::stderr(), "error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a line on stdout; a reader that went away is no reason to fail.
fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stdout(), "{line}");
}

fn run(args: &Args) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // A second signal while stopping exits at once; the first only asks.
        // The order matters: the conditional exit must be registered first.
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())
            .context("cannot install signal handlers")?;
        signal_hook::flag::register(sig, stop.clone()).context("cannot install signal handlers")?;
    }
    let registry = Registry::new().context("cannot create the topdeck registry")?;
    let path = registry.path().to_owned();
    let context = || format!("cannot register metrics in {}", path.display());
    say(format_args!(
        "pid {} registry {}",
        std::process::id(),
        path.display()
    ));

    let m = Metrics {
        queue_depth: registry
            .gauge("queue_depth", &[], "Requests waiting for a worker.", "")
            .with_context(context)?,
        in_flight: registry
            .gauge("in_flight", &[], "Requests being hashed.", "")
            .with_context(context)?,
        bytes: registry
            .counter("bytes_processed_total", &[], "Bytes hashed.", "bytes")
            .with_context(context)?,
        queue_full: registry
            .counter(
                "errors_total",
                &[("reason", "queue_full")],
                "Requests refused.",
                "",
            )
            .with_context(context)?,
        too_large: registry
            .counter(
                "errors_total",
                &[("reason", "too_large")],
                "Requests refused.",
                "",
            )
            .with_context(context)?,
        latency: registry
            .histogram(
                "request_duration_seconds",
                &[],
                "Time from queueing a request to its digest.",
                "seconds",
            )
            .with_context(context)?,
        queue_wait: registry
            .histogram(
                "queue_wait_seconds",
                &[],
                "Time a request waited in the queue.",
                "seconds",
            )
            .with_context(context)?,
        hash: registry
            .timer("hash_duration_seconds", &[], "Time to hash one request.")
            .with_context(context)?,
    };
    registry
        .gauge("workers", &[], "Worker threads.", "")
        .with_context(context)?
        .set(i64::from(args.workers));
    let uptime: GaugeF64 = registry
        .gauge_f64("uptime_seconds", &[], "Time since start.", "seconds")
        .with_context(context)?;

    let (tx, rx) = bounded::<Request>(QUEUE_CAPACITY);
    let mut threads = Vec::new();
    for w in 0..args.workers {
        let served = registry
            .counter(
                "requests_total",
                &[("worker", &w.to_string())],
                "Requests hashed, per worker.",
                "",
            )
            .with_context(context)?;
        let (rx, m) = (rx.clone(), m.clone());
        threads.push(
            thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || work(&rx, &m, &served))
                .context("cannot start a worker thread")?,
        );
    }
    drop(rx);
    let generator = {
        let (stop, m, rate, seed) = (stop.clone(), m.clone(), args.rate, args.seed);
        thread::Builder::new()
            .name("generator".into())
            .spawn(move || generate(&tx, rate, seed, &stop, &m))
            .context("cannot start the generator thread")?
    };

    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        uptime.set(started.elapsed().as_secs_f64());
        thread::sleep(POLL);
    }
    // The generator drops its sender; the workers drain the queue and end.
    let queued = generator.join().unwrap_or(0);
    for t in threads {
        let _ = t.join();
    }
    drop(registry);
    say(format_args!(
        "stopped after {:.1}s and {queued} requests; removed {}",
        started.elapsed().as_secs_f64(),
        path.display()
    ));
    Ok(())
}

/// Queues `rate` requests per second until `stop`; returns how many it queued.
fn generate(tx: &Sender<Request>, rate: u64, seed: u64, stop: &AtomicBool, m: &Metrics) -> u64 {
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    // Catching up after a stall is capped at a tenth of a second's worth.
    let max_burst = (rate / 10).max(1);
    let (mut made, mut queued) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        made = made.max(due.saturating_sub(max_burst));
        while made < due {
            made += 1;
            let size = if rng.u32(..OVERSIZE_ONE_IN) == 0 {
                MAX_PAYLOAD + rng.usize(1..=1024)
            } else {
                rng.usize(PAYLOAD_BYTES)
            };
            let mut payload = vec![0u8; size];
            rng.fill(&mut payload);
            // Counted before sending so that a fast worker never takes the
            // gauge below zero.
            m.queue_depth.inc();
            let req = Request {
                payload,
                queued: Instant::now(),
            };
            match tx.try_send(req) {
                Ok(()) => queued += 1,
                Err(TrySendError::Full(_)) => {
                    m.queue_depth.dec();
                    m.queue_full.inc();
                }
                Err(TrySendError::Disconnected(_)) => return queued,
            }
        }
        thread::sleep(TICK);
    }
    queued
}

/// Hashes requests until the channel is empty and closed.
fn work(rx: &Receiver<Request>, m: &Metrics, served: &Counter) {
    for req in rx {
        m.queue_depth.dec();
        m.in_flight.inc();
        m.queue_wait.record(req.queued.elapsed().as_secs_f64());
        if req.payload.len() > MAX_PAYLOAD {
            m.too_large.inc();
        } else {
            let digest = m.hash.time(|| Sha256::digest(&req.payload));
            std::hint::black_box(digest);
            m.bytes.add(req.payload.len() as u64);
            served.inc();
            m.latency.record(req.queued.elapsed().as_secs_f64());
        }
        m.in_flight.dec();
    }
}
