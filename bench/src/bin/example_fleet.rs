// SPDX-License-Identifier: Apache-2.0
//! A fleet of example services without their work: `--registries`
//! registries (100) of `--series` series (1,000) each, in the example
//! service's mix and moving at its rates, written by one thread, for
//! measuring what recording and scraping such a host costs
//! (bench/record_vs_prometheus.sh, scenario b).
//!
//! The mix is the example's (examples/service, `--workers 2 --rate
//! 3000`): per 12 series, 5 counters, 4 gauges and 3 histograms, repeated
//! (each copy labelled `copy="<n>"`) until a registry holds `--series`.
//! The rates are what `topdeck show --json` read from it once a second for
//! 15 s:
//! - `requests_total` (two workers): about 1,500 a second each;
//!   `bytes_processed_total`: about 100 MB a second; `errors_total
//!   {reason="too_large"}`: about 6 a second; all four changed at every
//!   read;
//! - `errors_total{reason="queue_full"}`: 0 at every read;
//! - `uptime_seconds`: a float that changed at every read; `workers`: 2,
//!   unchanged; `queue_depth` and `in_flight`: 0 at every read (they move
//!   within a request, not from one second to the next);
//! - three histograms (`request_duration_seconds`, `queue_wait_seconds`,
//!   `hash_duration_seconds`): 3,000 observations a second each, which
//!   changed 40 to 70 of their 50 to 80 populated buckets a second. Here
//!   each gets `--observations` (100) a second from
//!   [`topdeck_bench::latencies`], a wider spread, which changes about 50
//!   buckets a second at a thirtieth of the recording work.
//!
//! Every series is updated ten times a second (a tenth of its rate each
//! time), so a reader that looks once a second sees each change as the
//! example's readers do, whatever its phase. Registries are named
//! `fleet<n>` and go where `TOPDECK_DIR` says (else the user's namespace).
//! Prints `ready <registries> registries of <series> series` once all are
//! published, and runs until SIGTERM or SIGINT (or `--seconds`); the
//! registries' files are removed on the way out.
//!
//! `example_fleet [--registries N] [--series N] [--observations N] [--seconds N]`

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use topdeck::{Counter, Gauge, GaugeF64, Histogram, Registry};

const USAGE: topdeck_bench::Usage = topdeck_bench::Usage::new(
    "example_fleet",
    "[--registries N] [--series N] [--observations N] [--seconds N]
  --registries N:   registries, each its own file, all written by this process (100)
  --series N:       series per registry, in the example service's mix (1000)
  --observations N: observations a second per histogram (100)
  --seconds N:      stop after N seconds (default: at SIGTERM or SIGINT)
Registries go where TOPDECK_DIR says; prints `ready ...` once they are published.",
);

/// How often every series is updated, with this fraction of its rate.
const TICK: Duration = Duration::from_millis(100);
const TICKS_PER_SECOND: u64 = 10;
/// The example's rates, a second: requests per worker, bytes per request
/// (uniform in 256..=64 KiB, as its generator makes them), oversized
/// requests (one in 500 of 3,000).
const REQUESTS_PER_WORKER: u64 = 1_500;
const MEAN_REQUEST_BYTES: u64 = (256 + 64 * 1024) / 2;
const TOO_LARGE_PER_SECOND: u64 = 6;
/// Series in one copy of the example's set.
const ROLES: usize = 12;
/// The three histograms' scales, so that each covers other buckets:
/// request latency around 1 ms, queue wait and hashing below it.
const HISTOGRAM_SCALES: [f64; 3] = [1.0, 0.3, 0.1];

/// Set by SIGTERM and SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

struct Args {
    registries: usize,
    series: usize,
    observations: u64,
    seconds: Option<u64>,
}

fn args() -> Args {
    let mut a = Args {
        registries: 100,
        series: 1000,
        observations: 100,
        seconds: None,
    };
    let mut it = USAGE.args().into_iter();
    while let Some(flag) = it.next() {
        let value = it.next();
        let at_least_1 = |n: u64| {
            if n == 0 {
                USAGE.fail(format_args!("{flag}: give at least 1"))
            }
            n
        };
        match flag.as_str() {
            "--registries" => {
                a.registries = at_least_1(USAGE.parse(&flag, value.as_deref())) as usize
            }
            "--series" => a.series = at_least_1(USAGE.parse(&flag, value.as_deref())) as usize,
            "--observations" => a.observations = USAGE.parse(&flag, value.as_deref()),
            "--seconds" => a.seconds = Some(at_least_1(USAGE.parse(&flag, value.as_deref()))),
            _ => USAGE.fail(format_args!("unknown argument {flag:?}")),
        }
    }
    if a.series > 65_536 {
        USAGE.fail("--series: at most 65536 a registry");
    }
    a
}

/// One series of the example's set, with what moves it.
enum Series {
    /// `requests_total{worker}`: about `REQUESTS_PER_WORKER` a second.
    Requests(Counter),
    /// `bytes_processed_total`.
    Bytes(Counter),
    /// `errors_total{reason="too_large"}`: a few a second.
    TooLarge(Counter),
    /// `errors_total{reason="queue_full"}`, `queue_depth`, `in_flight`,
    /// `workers`: set once, unchanged from one second to the next.
    Still,
    /// `uptime_seconds`.
    Uptime(GaugeF64),
    /// A histogram and the scale of its values.
    Latency(Histogram, f64),
}

/// Registers series `i` of a registry: role `i % ROLES` of copy `i / ROLES`.
fn register(registry: &Registry, i: usize) -> Result<Series> {
    let copy = (i / ROLES).to_string();
    let copy = ("copy", copy.as_str());
    let counter = |name, label: Option<(&str, &str)>, help, unit| -> Result<Counter> {
        let labels: Vec<(&str, &str)> = label.into_iter().chain([copy]).collect();
        Ok(registry.counter(name, &labels, help, unit)?)
    };
    let gauge = |name, help, v| -> Result<Series> {
        let g: Gauge = registry.gauge(name, &[copy], help, "")?;
        g.set(v);
        Ok(Series::Still)
    };
    let histogram = |name, help, k: usize| -> Result<Series> {
        let h = registry.histogram(name, &[copy], help, "seconds")?;
        Ok(Series::Latency(h, HISTOGRAM_SCALES[k]))
    };
    Ok(match i % ROLES {
        0 => gauge("queue_depth", "Requests waiting for a worker.", 0)?,
        1 => gauge("in_flight", "Requests being hashed.", 0)?,
        2 => Series::Bytes(counter(
            "bytes_processed_total",
            None,
            "Bytes hashed.",
            "bytes",
        )?),
        3 => {
            // Registered and never moved; the handle is not needed.
            let _ = counter(
                "errors_total",
                Some(("reason", "queue_full")),
                "Requests refused.",
                "",
            )?;
            Series::Still
        }
        4 => Series::TooLarge(counter(
            "errors_total",
            Some(("reason", "too_large")),
            "Requests refused.",
            "",
        )?),
        5 => histogram(
            "request_duration_seconds",
            "Time from queueing a request to its digest.",
            0,
        )?,
        6 => histogram(
            "queue_wait_seconds",
            "Time a request waited in the queue.",
            1,
        )?,
        7 => histogram("hash_duration_seconds", "Time to hash one request.", 2)?,
        8 => gauge("workers", "Worker threads.", 2)?,
        9 => Series::Uptime(registry.gauge_f64(
            "uptime_seconds",
            &[copy],
            "Time since start.",
            "seconds",
        )?),
        w => Series::Requests(counter(
            "requests_total",
            Some(("worker", &(w - 10).to_string())),
            "Requests hashed, per worker.",
            "",
        )?),
    })
}

/// A small, fast PRNG (xorshift64) for the jitter of the rates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `mean`, give or take a tenth, at least 0.
    fn about(&mut self, mean: u64) -> u64 {
        let spread = mean / 10;
        if spread == 0 {
            return mean;
        }
        mean - spread + self.next() % (2 * spread + 1)
    }
}

fn main() -> Result<()> {
    let args = args();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; it is a valid `extern "C" fn(c_int)`.
        if unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) }
            == libc::SIG_ERR
        {
            return Err(std::io::Error::last_os_error()).context("cannot install a signal handler");
        }
    }
    let histograms = args.series.div_ceil(ROLES) * 3;
    // A shard holds 8 bytes per counter and 8 × (4 + 404) per histogram
    // of seconds; the default (1 MiB) holds about 250 histograms.
    let shard_bytes = ((histograms * 8 * 408 + args.series * 8) as u64 * 5 / 4).max(1 << 20);
    let mut fleet = Vec::with_capacity(args.registries);
    for n in 0..args.registries {
        let registry = Registry::builder()
            .name(format!("fleet{n}"))
            .metrics((args.series as u32).max(4096))
            .shard_bytes(shard_bytes)
            .gauge_bytes(((args.series * 8) as u64).max(32 << 10))
            .string_bytes(((args.series * 160) as u64).max(256 << 10))
            .build()
            .with_context(|| format!("cannot create registry fleet{n}"))?;
        let series = (0..args.series)
            .map(|i| register(&registry, i))
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("cannot register series in {}", registry.path().display()))?;
        fleet.push((registry, series));
    }
    println!(
        "ready {} registries of {} series",
        args.registries, args.series
    );

    let latencies = topdeck_bench::latencies();
    let mut next_latency = 0usize;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    let mut next = started;
    let mut tick = 0u64;
    let deadline = args.seconds.map(|s| started + Duration::from_secs(s));
    // Observations a tick: the remainder is spread over the second's ticks.
    let per_tick = |tick: u64, per_second: u64| {
        per_second / TICKS_PER_SECOND
            + u64::from(tick % TICKS_PER_SECOND < per_second % TICKS_PER_SECOND)
    };
    while !STOP.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        let uptime = started.elapsed().as_secs_f64();
        let observations = per_tick(tick, args.observations);
        let too_large = per_tick(tick, TOO_LARGE_PER_SECOND);
        for (_, series) in &fleet {
            for s in series {
                match s {
                    Series::Requests(c) => c.add(rng.about(REQUESTS_PER_WORKER / TICKS_PER_SECOND)),
                    Series::Bytes(c) => c.add(
                        rng.about(2 * REQUESTS_PER_WORKER / TICKS_PER_SECOND * MEAN_REQUEST_BYTES),
                    ),
                    Series::TooLarge(c) => c.add(too_large),
                    Series::Still => {}
                    Series::Uptime(g) => g.set(uptime),
                    Series::Latency(h, scale) => {
                        for _ in 0..observations {
                            h.record(latencies[next_latency] * scale);
                            next_latency = (next_latency + 1) & (topdeck_bench::LATENCIES - 1);
                        }
                    }
                }
            }
        }
        tick += 1;
        next += TICK;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Behind: start again from now rather than rush to catch up.
            next = now;
        }
    }
    // Dropping the registries removes their files.
    drop(fleet);
    Ok(())
}
