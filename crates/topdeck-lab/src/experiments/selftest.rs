// SPDX-License-Identifier: Apache-2.0
//! `topdeck-lab selftest`: topdeck held to its own standard. Writer threads update a
//! counter and a histogram as fast as they can while 0, 1, 4 and 16 reader
//! threads take real `RegistryReader` snapshots (each reader maps the file
//! itself) at 100 Hz, 1 kHz and flat out. We compare writer throughput and
//! per-update latency with the no-reader run, and charge the readers for the
//! CPU they used: a writer sharing a CPU with readers loses at most their CPU
//! time (physics); anything beyond that is interference. For contrast the
//! same runs use the `prometheus` crate, whose scrapers `gather()` through
//! the registry's lock and each metric's collect lock.
//!
//! Rounds are interleaved (every configuration once per round) so slow
//! drifts of the machine hit all configurations alike; medians and the
//! spread over rounds are reported.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cpu::{self, Pin};
use crate::hist::percentile_sorted;
use crate::table::{Doc, Table};
use crate::timing::{now_ns, secs};
use crate::{Error, ErrorKind, Result};

/// Which metrics library the writers and readers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exporter {
    /// topdeck: writers store into the mapping; readers snapshot the file.
    Topdeck,
    /// The prometheus crate: scrapers `gather()` and text-encode.
    Prometheus,
}

impl Exporter {
    /// Name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Exporter::Topdeck => "topdeck",
            Exporter::Prometheus => "prometheus",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Reader counts (0 is the baseline and is always run).
    pub readers: Vec<usize>,
    /// Reader rates in Hz; `None` is flat out.
    pub rates: Vec<Option<u32>>,
    /// (exporter, placement) pairs to run.
    pub setups: Vec<(Exporter, Pin)>,
    /// Writer threads.
    pub writers: usize,
    /// Length of each run.
    pub duration: Duration,
    /// Interleaved rounds.
    pub rounds: usize,
    /// Updates per timed batch: one clock read per batch, so the clock's
    /// ~20 ns is spread over the batch instead of dwarfing a ~7 ns update.
    pub batch: u64,
    /// 0: each update is a counter increment and a histogram record. N:
    /// each is one increment of N counters in turn, so a snapshot copies
    /// the cache lines the writer is writing (what readers flat out cost a
    /// writer is cache coherence, and this makes the most of it).
    pub counters: usize,
}

impl Default for Config {
    /// The full run: 0/1/4/16 readers at 100 Hz, 1 kHz and flat out; topdeck
    /// with readers on the other CPU, the same CPU and unpinned; prometheus
    /// on the other CPU; one writer; 11 rounds of 250 ms runs (many short
    /// rounds make the median robust to bursts from the rest of the host).
    fn default() -> Self {
        Self {
            readers: vec![0, 1, 4, 16],
            rates: vec![Some(100), Some(1000), None],
            setups: vec![
                (Exporter::Topdeck, Pin::OtherCpu),
                (Exporter::Topdeck, Pin::SameCpu),
                (Exporter::Topdeck, Pin::Free),
                (Exporter::Prometheus, Pin::OtherCpu),
            ],
            writers: 1,
            duration: Duration::from_millis(250),
            rounds: 11,
            batch: 1024,
            counters: 0,
        }
    }
}

impl Config {
    /// Seconds: every reader count and rate, both exporters unpinned, 100 ms runs, one round.
    pub fn quick(mut self) -> Self {
        self.setups = vec![
            (Exporter::Topdeck, Pin::Free),
            (Exporter::Prometheus, Pin::Free),
        ];
        self.duration = Duration::from_millis(100);
        self.rounds = 1;
        self
    }
}

/// One run of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Updates done by all writers.
    pub updates: u64,
    /// Updates per second of wall time, summed over writers.
    pub throughput: f64,
    /// CPU time the writers used, s.
    pub writer_cpu_s: f64,
    /// Updates per second of the writers' own CPU time: what is left when
    /// CPU sharing (with readers or anything else on the host) is taken out.
    pub throughput_cpu: f64,
    /// Time per update within each batch (batch time / batch size):
    /// p50, p99, p99.9, ns. A batch the writer was descheduled in lands in
    /// the tail; the median is the writer's speed while it runs.
    pub per_update_ns: [f64; 3],
    /// Updates per second at the median batch speed (1e9 / p50): throughput
    /// with CPU sharing taken out, robust to bursts from the rest of the host.
    pub running_throughput: f64,
    /// Snapshots (or scrapes) taken by all readers.
    pub snapshots: u64,
    /// CPU time the readers used, s.
    pub readers_cpu_s: f64,
    /// Wall time of the run, s.
    pub wall_s: f64,
    /// CPU time everything else on the host used during the run, as a
    /// fraction of the wall time (1.0 = one CPU): the noise we could not stop.
    pub others_cpu_share: f64,
    /// topdeck only: the counter and histogram count a final snapshot saw
    /// (they must equal `updates`).
    pub final_seen: Option<(u64, u64)>,
    /// Every reader saw the counter never go backwards.
    pub monotonic: bool,
}

/// All rounds of one configuration, summarised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Library.
    pub exporter: Exporter,
    /// Placement.
    pub pin: Pin,
    /// Readers.
    pub readers: usize,
    /// Reader rate in Hz, `None` for flat out.
    pub rate_hz: Option<u32>,
    /// Each round's run.
    pub runs: Vec<Run>,
    /// Median throughput, updates/s.
    pub throughput_median: f64,
    /// Lowest and highest throughput over rounds.
    pub throughput_spread: (f64, f64),
    /// Median throughput relative to the same setup with no readers.
    pub relative: f64,
    /// Median updates per writer-CPU-second.
    pub throughput_cpu_median: f64,
    /// Lowest and highest of those over rounds.
    pub throughput_cpu_spread: (f64, f64),
    /// Median updates per writer-CPU-second relative to no readers.
    pub relative_cpu: f64,
    /// Median reader CPU as a fraction of the run's wall time (1.0 = one CPU).
    pub readers_cpu_share: f64,
    /// Median CPU share of everything else on the host during the runs.
    pub others_cpu_share: f64,
    /// Median snapshots per second, all readers.
    pub snapshots_per_s: f64,
    /// Median per-update p50, p99, p99.9, ns.
    pub per_update_ns: [f64; 3],
    /// Median running throughput (see [`Run::running_throughput`]).
    pub running_median: f64,
    /// Lowest and highest running throughput over rounds.
    pub running_spread: (f64, f64),
    /// Median running throughput relative to no readers: below 1, the
    /// writer is slower while it runs (interference proper).
    pub relative_running: f64,
    /// Writer time lost per snapshot, ns: the writers' running time lost
    /// to the readers (1 - `relative_running`, per second of each writer)
    /// over the snapshots taken in that second. Negative within noise.
    pub lost_ns_per_snapshot: f64,
}

/// The result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelftestResult {
    /// Rows in configuration order.
    pub rows: Vec<Row>,
    /// Writer threads.
    pub writers: usize,
    /// Counters each writer cycles through (0: a counter and a histogram).
    #[serde(default)]
    pub counters: usize,
    /// Seconds per run.
    pub duration_s: f64,
    /// Rounds.
    pub rounds: usize,
    /// Machine description.
    pub machine: String,
    /// When, seconds since the epoch.
    pub unix_time: u64,
}

impl SelftestResult {
    /// The row for this configuration.
    pub fn row(&self, e: Exporter, pin: Pin, readers: usize, rate: Option<u32>) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.exporter == e && r.pin == pin && r.readers == readers && r.rate_hz == rate)
    }
}

type Key = (Exporter, Pin, usize, Option<u32>);

/// Runs the experiment.
pub fn run(cfg: &Config) -> Result<SelftestResult> {
    if cfg.writers == 0 || cfg.rounds == 0 || cfg.setups.is_empty() || cfg.batch == 0 {
        return Err(Error::new(
            ErrorKind::BadInput,
            "writers, rounds, setups and batch must all be at least 1",
        ));
    }
    if cfg.rates.contains(&Some(0)) {
        return Err(Error::new(
            ErrorKind::BadInput,
            "a reader rate of 0 Hz is no rate",
        ));
    }
    let mut keys: Vec<Key> = Vec::new();
    for &(e, pin) in &cfg.setups {
        keys.push((e, pin, 0, None));
        for &n in cfg.readers.iter().filter(|&&n| n > 0) {
            for &rate in &cfg.rates {
                keys.push((e, pin, n, rate));
            }
        }
    }
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); keys.len()];
    for _ in 0..cfg.rounds {
        for (k, key) in keys.iter().enumerate() {
            runs[k].push(one(cfg, *key)?);
        }
    }
    let mut rows: Vec<Row> = keys
        .iter()
        .zip(runs)
        .map(|(&(exporter, pin, readers, rate_hz), runs)| {
            summarise(exporter, pin, readers, rate_hz, runs)
        })
        .collect();
    let baselines: Vec<((Exporter, Pin), f64, f64, f64)> = rows
        .iter()
        .filter(|r| r.readers == 0)
        .map(|r| {
            (
                (r.exporter, r.pin),
                r.throughput_median,
                r.throughput_cpu_median,
                r.running_median,
            )
        })
        .collect();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    for r in &mut rows {
        if let Some((_, wall, cpu, running)) =
            baselines.iter().find(|(k, ..)| *k == (r.exporter, r.pin))
        {
            r.relative = ratio(r.throughput_median, *wall);
            r.relative_cpu = ratio(r.throughput_cpu_median, *cpu);
            r.relative_running = ratio(r.running_median, *running);
            r.lost_ns_per_snapshot = lost_per_snapshot(cfg.writers, r);
        }
    }
    Ok(SelftestResult {
        rows,
        writers: cfg.writers,
        counters: cfg.counters,
        duration_s: cfg.duration.as_secs_f64(),
        rounds: cfg.rounds,
        machine: super::machine(),
        unix_time: super::unix_now(),
    })
}

fn summarise(
    exporter: Exporter,
    pin: Pin,
    readers: usize,
    rate_hz: Option<u32>,
    runs: Vec<Run>,
) -> Row {
    let med = |f: &dyn Fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        super::median(&mut v)
    };
    let spread = |f: fn(&Run) -> f64| {
        let v: Vec<f64> = runs.iter().map(f).collect();
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    let lat = |i: usize| med(&|r: &Run| r.per_update_ns[i]);
    Row {
        exporter,
        pin,
        readers,
        rate_hz,
        throughput_median: med(&|r| r.throughput),
        throughput_spread: spread(|r| r.throughput),
        relative: 1.0,
        throughput_cpu_median: med(&|r| r.throughput_cpu),
        throughput_cpu_spread: spread(|r| r.throughput_cpu),
        relative_cpu: 1.0,
        readers_cpu_share: med(&|r| r.readers_cpu_s / r.wall_s.max(1e-9)).max(0.0),
        others_cpu_share: med(&|r| r.others_cpu_share),
        snapshots_per_s: med(&|r| r.snapshots as f64 / r.wall_s.max(1e-9)),
        per_update_ns: [lat(0), lat(1), lat(2)],
        running_median: med(&|r| r.running_throughput),
        running_spread: spread(|r| r.running_throughput),
        relative_running: 1.0,
        lost_ns_per_snapshot: 0.0,
        runs,
    }
}

/// See [`Row::lost_ns_per_snapshot`]; 0 without snapshots.
fn lost_per_snapshot(writers: usize, r: &Row) -> f64 {
    if r.readers == 0 || r.snapshots_per_s <= 0.0 {
        return 0.0;
    }
    (1.0 - r.relative_running) * writers as f64 * 1e9 / r.snapshots_per_s
}

/// The metrics one writer updates, in either library.
enum Target {
    Topdeck(topdeck::Counter, topdeck::Histogram),
    Prometheus(prometheus::IntCounter, prometheus::Histogram),
    /// [`Config::counters`] counters, incremented in turn.
    TopdeckCounters(Vec<topdeck::Counter>),
    PrometheusCounters(Vec<prometheus::IntCounter>),
}

impl Target {
    #[inline(always)]
    fn update(&self, i: u64) {
        // Values spread over ten buckets so the histogram is not one hot word.
        let v = ((i & 1023) + 1) as f64 * 1e-6;
        match self {
            Target::Topdeck(c, h) => {
                c.inc();
                h.record(v);
            }
            Target::Prometheus(c, h) => {
                c.inc();
                h.observe(v);
            }
            Target::TopdeckCounters(cs) => cs[(i % cs.len() as u64) as usize].inc(),
            Target::PrometheusCounters(cs) => cs[(i % cs.len() as u64) as usize].inc(),
        }
    }
}

/// What the readers read: a topdeck file path or a prometheus registry.
#[derive(Clone)]
enum Source {
    Topdeck(std::path::PathBuf),
    Prometheus(prometheus::Registry),
}

struct WriterOut {
    updates: u64,
    secs: f64,
    cpu_s: f64,
    samples: Vec<u64>,
}

struct ReaderOut {
    snapshots: u64,
    cpu_s: f64,
    monotonic: bool,
}

fn one(cfg: &Config, (exporter, pin, readers, rate): Key) -> Result<Run> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("create a temporary directory", e))?;
    let (target, source, registry) = match exporter {
        Exporter::Topdeck => {
            let r = topdeck::Registry::builder()
                .dir(dir.path())
                .name("lab-selftest")
                .build()?;
            let path = r.path().to_path_buf();
            let target = if cfg.counters == 0 {
                let c = r.counter("lab_updates_total", &[], "Updates.", "")?;
                let h = r.histogram("lab_update_value_seconds", &[], "Values.", "seconds")?;
                Target::Topdeck(c, h)
            } else {
                let cs = (0..cfg.counters)
                    .map(|i| r.counter(&counter_name(i), &[], "Updates.", ""))
                    .collect::<topdeck::Result<_>>()?;
                Target::TopdeckCounters(cs)
            };
            (target, Source::Topdeck(path), Some(r))
        }
        Exporter::Prometheus => {
            let reg = prometheus::Registry::new();
            let c = prometheus::IntCounter::new("lab_updates_total", "Updates.").map_err(prom)?;
            let h = prometheus::Histogram::with_opts(
                prometheus::HistogramOpts::new("lab_update_value_seconds", "Values.")
                    .buckets(prometheus::exponential_buckets(1e-6, 2.0, 12).map_err(prom)?),
            )
            .map_err(prom)?;
            let target = if cfg.counters == 0 {
                reg.register(Box::new(c.clone())).map_err(prom)?;
                reg.register(Box::new(h.clone())).map_err(prom)?;
                Target::Prometheus(c, h)
            } else {
                let mut cs = Vec::with_capacity(cfg.counters);
                for i in 0..cfg.counters {
                    let c =
                        prometheus::IntCounter::new(counter_name(i), "Updates.").map_err(prom)?;
                    reg.register(Box::new(c.clone())).map_err(prom)?;
                    cs.push(c);
                }
                Target::PrometheusCounters(cs)
            };
            (target, Source::Prometheus(reg), None)
        }
    };
    let target = Arc::new(target);
    let placement = pin.cpus()?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(cfg.writers + readers + 1));

    let mut writer_handles = Vec::new();
    for _ in 0..cfg.writers {
        let (target, stop, start) = (target.clone(), stop.clone(), start.clone());
        let cpus = placement.as_ref().map(|p| p.0.clone());
        let batch = cfg.batch;
        writer_handles.push(std::thread::spawn(move || -> Result<WriterOut> {
            if let Some(c) = cpus {
                cpu::pin_thread(&c)?;
            }
            start.wait();
            Ok(write_loop(&target, &stop, batch))
        }));
    }
    let mut reader_handles = Vec::new();
    for _ in 0..readers {
        let (source, stop, start) = (source.clone(), stop.clone(), start.clone());
        let cpus = placement.as_ref().map(|p| p.1.clone());
        reader_handles.push(std::thread::spawn(move || -> Result<ReaderOut> {
            if let Some(c) = cpus {
                cpu::pin_thread(&c)?;
            }
            read_loop(source, &stop, &start, rate)
        }));
    }
    let host0 = cpu::host_busy()?;
    let own0 = cpu::CpuTime::from_rusage(&cpu::rusage(libc::RUSAGE_SELF)?).total();
    start.wait();
    let t0 = now_ns();
    std::thread::sleep(cfg.duration);
    stop.store(true, Ordering::Relaxed);
    let mut writers = Vec::new();
    for h in writer_handles {
        writers.push(join(h)?);
    }
    let wall_s = secs(t0, now_ns());
    let mut reads = Vec::new();
    for h in reader_handles {
        reads.push(join(h)?);
    }
    let others = (cpu::host_busy()? - host0)
        - (cpu::CpuTime::from_rusage(&cpu::rusage(libc::RUSAGE_SELF)?).total() - own0);
    let updates: u64 = writers.iter().map(|w| w.updates).sum();
    let final_seen = match &registry {
        Some(r) => {
            let snap = topdeck::RegistryReader::open(r.path())?.snapshot()?;
            let c = seen_updates(&snap, cfg.counters);
            let h = match snap.get("lab_update_value_seconds", &[]) {
                Some(topdeck::Value::Histogram(h)) => h.count,
                // Without the histogram every update is one increment.
                _ if cfg.counters > 0 => c,
                _ => 0,
            };
            Some((c, h))
        }
        None => None,
    };
    let mut samples: Vec<u64> = writers
        .iter_mut()
        .flat_map(|w| w.samples.drain(..))
        .collect();
    samples.sort_unstable();
    let per_update = |q: f64| percentile_sorted(&samples, q) as f64 / cfg.batch as f64;
    Ok(Run {
        updates,
        throughput: writers
            .iter()
            .map(|w| w.updates as f64 / w.secs.max(1e-9))
            .sum(),
        writer_cpu_s: writers.iter().map(|w| w.cpu_s).sum(),
        throughput_cpu: writers
            .iter()
            .map(|w| w.updates as f64 / w.cpu_s.max(1e-9))
            .sum(),
        per_update_ns: [per_update(0.5), per_update(0.99), per_update(0.999)],
        // A writer the scheduler never ran in the window did no batch at all.
        running_throughput: if samples.is_empty() {
            0.0
        } else {
            cfg.writers as f64 * 1e9 / per_update(0.5).max(1e-9)
        },
        snapshots: reads.iter().map(|r| r.snapshots).sum(),
        readers_cpu_s: reads.iter().map(|r| r.cpu_s).sum(),
        wall_s,
        others_cpu_share: (others / wall_s.max(1e-9)).max(0.0),
        final_seen,
        monotonic: reads.iter().all(|r| r.monotonic),
    })
}

/// The name of counter `i` of a many-counter writer; the first is the
/// single-counter writer's, so readers watch it for going backwards alike.
fn counter_name(i: usize) -> String {
    match i {
        0 => "lab_updates_total".into(),
        _ => format!("lab_updates_{i}_total"),
    }
}

/// Updates a snapshot shows: the counter, or all `counters` summed.
fn seen_updates(snap: &topdeck::Snapshot, counters: usize) -> u64 {
    (0..counters.max(1))
        .map(|i| match snap.get(&counter_name(i), &[]) {
            Some(topdeck::Value::Counter(c)) => *c,
            _ => 0,
        })
        .sum()
}

fn prom(e: prometheus::Error) -> Error {
    Error::new(ErrorKind::Topdeck, format!("prometheus: {e}"))
}

fn join<T>(h: std::thread::JoinHandle<Result<T>>) -> Result<T> {
    h.join()
        .map_err(|_| Error::new(ErrorKind::Child, "a selftest thread panicked"))?
}

/// Updates until told to stop, timing each batch of `batch` updates.
fn write_loop(target: &Target, stop: &AtomicBool, batch: u64) -> WriterOut {
    let mut samples = Vec::with_capacity(1 << 20);
    let cpu0 = cpu::thread_cpu();
    let t0 = now_ns();
    let mut i = 0u64;
    let mut last = t0;
    // The stop flag is checked once per batch: a load of a line nobody writes
    // until the end costs nothing next to the updates. At least one batch
    // runs, so a writer the scheduler starts late still has one to report.
    loop {
        for _ in 0..batch {
            target.update(i);
            i += 1;
        }
        let now = now_ns();
        samples.push(now - last);
        last = now;
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    WriterOut {
        updates: i,
        secs: secs(t0, now_ns()),
        cpu_s: (cpu::thread_cpu() - cpu0).as_secs_f64(),
        samples,
    }
}

/// Snapshots at `rate` (flat out for `None`) until told to stop.
fn read_loop(
    source: Source,
    stop: &AtomicBool,
    start: &Barrier,
    rate: Option<u32>,
) -> Result<ReaderOut> {
    let mut reader = match &source {
        Source::Topdeck(path) => Some(topdeck::RegistryReader::open(path)?),
        Source::Prometheus(_) => None,
    };
    let mut buf = Vec::with_capacity(4096);
    let period = rate.map(|hz| 1_000_000_000 / u64::from(hz));
    start.wait();
    let cpu0 = cpu::thread_cpu();
    let (mut snapshots, mut last, mut monotonic) = (0u64, 0u64, true);
    let mut next = now_ns();
    while !stop.load(Ordering::Relaxed) {
        let seen = match (&mut reader, &source) {
            (Some(r), _) => match r.snapshot()?.get("lab_updates_total", &[]) {
                Some(topdeck::Value::Counter(c)) => *c,
                _ => 0,
            },
            (None, Source::Prometheus(reg)) => {
                use prometheus::Encoder;
                let families = reg.gather();
                buf.clear();
                prometheus::TextEncoder::new()
                    .encode(&families, &mut buf)
                    .map_err(prom)?;
                families
                    .iter()
                    .find(|f| f.name() == "lab_updates_total")
                    .and_then(|f| f.get_metric().first())
                    .map_or(0, |m| m.get_counter().get_value() as u64)
            }
            (None, Source::Topdeck(_)) => 0,
        };
        monotonic &= seen >= last;
        last = seen;
        snapshots += 1;
        if let Some(p) = period {
            // Absolute deadlines keep the rate; a reader that falls behind skips ahead.
            next += p;
            let now = now_ns();
            if next > now {
                std::thread::sleep(Duration::from_nanos(next - now));
            } else {
                next = now;
            }
        }
    }
    Ok(ReaderOut {
        snapshots,
        cpu_s: (cpu::thread_cpu() - cpu0).as_secs_f64(),
        monotonic,
    })
}

fn rate_name(rate: Option<u32>) -> String {
    match rate {
        Some(hz) if hz >= 1000 && hz % 1000 == 0 => format!("{} kHz", hz / 1000),
        Some(hz) => format!("{hz} Hz"),
        None => "flat out".into(),
    }
}

/// One table per (exporter, placement): readers × rate against the baseline.
pub fn table(r: &SelftestResult) -> String {
    doc(r).render()
}

/// The tables of [`table`], with their text, for the terminal or the report.
pub fn doc(r: &SelftestResult) -> Doc {
    let mut out = Doc::default();
    let what = match r.counters {
        0 => "a counter and a histogram".to_string(),
        n => format!("{n} counters in turn"),
    };
    out.text(format!(
        "{} writer(s) updating {what}; {} round(s) of {:.2} s; medians [min–max]\n",
        r.writers, r.rounds, r.duration_s
    ));
    let mut setups: Vec<(Exporter, Pin)> = Vec::new();
    for row in &r.rows {
        if !setups.contains(&(row.exporter, row.pin)) {
            setups.push((row.exporter, row.pin));
        }
    }
    for (e, pin) in setups {
        out.heading(format!("{}, readers {}", e.name(), pin_words(pin)));
        let mut t = Table::new([
            "readers",
            "rate",
            "wall Mupd/s",
            "vs 0",
            "running Mupd/s",
            "vs 0",
            "readers CPU",
            "others CPU",
            "snaps/s",
            "ns/upd p50",
            "p99",
            "p99.9",
            "lost/snap",
            "verdict",
        ]);
        let mupd = |m: f64, (lo, hi): (f64, f64)| {
            format!("{:.1} [{:.1}–{:.1}]", m / 1e6, lo / 1e6, hi / 1e6)
        };
        let pct = |r: f64| format!("{:+.2}%", (r - 1.0) * 100.0);
        for row in r.rows.iter().filter(|x| x.exporter == e && x.pin == pin) {
            t.row([
                row.readers.to_string(),
                if row.readers == 0 {
                    "-".into()
                } else {
                    rate_name(row.rate_hz)
                },
                mupd(row.throughput_median, row.throughput_spread),
                pct(row.relative),
                mupd(row.running_median, row.running_spread),
                pct(row.relative_running),
                format!("{:.2}%", row.readers_cpu_share * 100.0 + 0.0),
                format!("{:.0}%", row.others_cpu_share * 100.0 + 0.0),
                format!("{:.0}", row.snapshots_per_s),
                format!("{:.2}", row.per_update_ns[0]),
                format!("{:.2}", row.per_update_ns[1]),
                format!("{:.2}", row.per_update_ns[2]),
                if row.readers == 0 {
                    "-".into()
                } else {
                    format!("{:.0} ns", row.lost_ns_per_snapshot)
                },
                verdict(row),
            ]);
        }
        out.table(t);
    }
    out.text(
        "\nwall Mupd/s: updates per second of wall time (medians [min–max] over rounds). running Mupd/s:\n\
         at the median batch speed (1e9 / ns/upd p50), i.e. while the writer runs. ns/upd: batch time /\n\
         batch size. readers CPU / others CPU: CPU the readers / the rest of the host used (100% = one CPU).\n\
         lost/snap: writer running time lost per snapshot (the running loss over the snapshots per second).\n\
         verdict: 'interference' if the writer runs >1% slower; else 'within 1%' if the wall throughput is\n\
         within 1%; else 'within budget' if the wall loss is at most the readers' CPU share + 1%; else\n\
         'CPU sharing' (wall time lost to others: readers' wake-ups, the rest of the host).\n",
    );
    out
}

/// `within 1%`, `within budget` or `interference`, per the selftest targets.
pub fn verdict(row: &Row) -> String {
    if row.readers == 0 {
        return "baseline".into();
    }
    let loss = 1.0 - row.relative;
    if 1.0 - row.relative_running > 0.01 {
        "interference".into()
    } else if loss <= 0.01 {
        "within 1%".into()
    } else if loss <= row.readers_cpu_share + 0.01 {
        "within budget".into()
    } else {
        "CPU sharing".into()
    }
}

fn pin_words(pin: Pin) -> &'static str {
    match pin {
        Pin::Free => "and writer unpinned",
        Pin::SameCpu => "on the writer's CPU",
        Pin::OtherCpu => "on another CPU than the writer",
    }
}
