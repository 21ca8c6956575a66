// SPDX-License-Identifier: Apache-2.0
//! The scraper behind an endpoint: lists the namespace at every scrape,
//! snapshots each live registry through a reader kept from one scrape to
//! the next (descriptors are decoded once per file, not per scrape), skips
//! and counts what cannot be read, and adds its own cost to the exposition.
//!
//! The endpoint's own metrics, written without source labels:
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `topdeck_scrapes_total{format}` | counter | scrapes answered, by format sent (`text`, `openmetrics`, `protobuf`) |
//! | `topdeck_scrape_duration_seconds` | histogram | time to answer a scrape, as the caller measured it |
//! | `topdeck_scrape_bytes_total` | counter | bytes sent (after compression) |
//! | `topdeck_scrape_errors_total{reason}` | counter | registries skipped, and series dropped for a type clash |
//! | `topdeck_scrape_registries` | gauge | registries exported by this scrape |
//! | `topdeck_scrape_series` | gauge | series read by this scrape (the endpoint's own not included) |
//!
//! Errors and the two gauges describe the scrape that carries them; the
//! duration and bytes of a scrape are known only once it is sent, so they
//! appear from the next one. `reason` is one of [`REASONS`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use topdeck::{
    ErrorKind, HistogramValue, Liveness, MetricInfo, MetricKind, Namespace, RegistryEntry,
    Snapshot, Tracked, Tracker, Value,
};
use topdeck_format::exponential::{BucketRange, Slot};
use topdeck_sources::{Portholes, Reading};

use crate::body::{Body, Buffers};
use crate::format::Format;
use crate::model::{Exposition, Shape};
use crate::source::{Prepared, Source};

/// Every `reason` of `topdeck_scrape_errors_total`; each series exists from
/// the first scrape on, so `rate()` sees its first increase.
pub const REASONS: [&str; 13] = [
    "dead",
    "corrupt",
    "io",
    "not_ready",
    "unsupported_version",
    "shrunk",
    "unsafe_directory",
    "planted",
    "too_large",
    "type_conflict",
    "porthole",
    "private",
    "other",
];

/// Why a registry was skipped, from the library's error kind.
pub fn reason(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Io => "io",
        ErrorKind::Corrupt => "corrupt",
        ErrorKind::UnsupportedVersion => "unsupported_version",
        ErrorKind::NotReady => "not_ready",
        ErrorKind::Shrunk => "shrunk",
        ErrorKind::UnsafeDirectory => "unsafe_directory",
        ErrorKind::Planted => "planted",
        ErrorKind::TooLarge => "too_large",
        _ => "other",
    }
}

/// Default share of a scrape one user's registries may take.
const USER_BUDGET: Duration = Duration::from_millis(250);

/// Schema and range of the scrape duration histogram: 1 µs to 100 s.
const DURATION_SCHEMA: i8 = 3;
const DURATION_MIN_SECONDS: f64 = 1e-6;
const DURATION_MAX_SECONDS: f64 = 100.0;

/// A registry skipped by a scrape, for the caller to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// One of [`REASONS`].
    pub reason: &'static str,
    /// What happened, naming the file.
    pub message: String,
}

/// What one scrape did.
#[derive(Debug, Clone, Default)]
pub struct ScrapeReport {
    /// Registries exported.
    pub registries: usize,
    /// Series read from them.
    pub series: usize,
    /// Registries skipped (dead writers are counted, not listed here).
    pub skipped: Vec<Skipped>,
    /// Series left out for a type clash.
    pub conflicts: u64,
}

/// The series one look at the host found, before any encoding: see
/// [`Scraper::gather`].
#[derive(Debug, Default)]
pub struct Gathered {
    /// Live registries read, each with its namespace entry, in listing
    /// order (by pid, then path).
    pub registries: Vec<(RegistryEntry, Snapshot)>,
    /// Live portholes of other runtimes read.
    pub portholes: Vec<Reading>,
    /// What was read and skipped; `conflicts` is left for the grouping
    /// of an exposition to count.
    pub report: ScrapeReport,
}

/// Reads every registry of a namespace into an exposition, keeping its
/// readers between scrapes.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.gauge("queue_depth", &[], "Jobs waiting.", "").unwrap().set(5);
///
/// let mut scraper = topdeck_export::Scraper::new(topdeck::Namespace::at(dir.path()));
/// let mut out = Vec::new();
/// let report = scraper.scrape(topdeck_export::Format::Text, &mut out).unwrap();
/// assert_eq!(report.registries, 1);
/// let text = String::from_utf8(out).unwrap();
/// assert!(text.contains("queue_depth{process="));
/// assert!(text.contains("topdeck_scrape_registries 1\n"));
/// ```
pub struct Scraper {
    /// A reader per registry (without its descriptor: however many
    /// registries there are, the endpoint holds no fd for each), and what
    /// was prepared for its series.
    tracker: Tracker<Prepared>,
    /// Most time one user's registries may take of a scrape.
    user_budget: Duration,
    own: OwnMetrics,
    buffers: Buffers,
    /// Other runtimes' portholes, read beside the registries when asked
    /// for ([`with_portholes`](Self::with_portholes)).
    portholes: Option<Portholes>,
    /// The last grouping, and the registries and metric counts it was made
    /// from; reused while they stay the same (see [`Exposition::regroup`]).
    shape: Option<(Vec<ShapeKey>, Shape)>,
}

/// One registry or porthole as a grouping saw it: its file, its creation
/// time (a new file at the same path is another registry) or its reader
/// (a porthole whose series were reordered has a new one), and its metric
/// count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShapeKey {
    path: PathBuf,
    created_unix_ns: u64,
    metrics: usize,
}

impl std::fmt::Debug for Scraper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scraper")
            .field("namespace", self.tracker.namespace())
            .field("readers", &self.tracker.len())
            .finish_non_exhaustive()
    }
}

impl Scraper {
    /// A scraper of `namespace` (usually [`Namespace::host`]).
    pub fn new(namespace: Namespace) -> Self {
        Self {
            tracker: Tracker::new(namespace),
            user_budget: USER_BUDGET,
            own: OwnMetrics::new(),
            buffers: Buffers::default(),
            portholes: None,
            shape: None,
        }
    }

    /// Also exports other runtimes' portholes (JVMs, prometheus_client
    /// directories, Aeron drivers) found by `portholes`, each series
    /// labelled with `source` (`jvm`, `python`, `aeron`), `process`, and
    /// `pid` when known. A porthole that cannot be read is skipped and
    /// counted (`porthole`); one whose runtime is gone is counted as `dead`.
    pub fn with_portholes(mut self, portholes: Portholes) -> Self {
        self.portholes = Some(portholes);
        self
    }

    /// Sets the most time one user's registries may take of a scrape
    /// (default 250 ms): the rest of that user's registries are left out
    /// of that scrape and counted (`too_large`), so one user who publishes
    /// too much cannot starve everyone else's series.
    pub fn with_user_budget(mut self, budget: Duration) -> Self {
        self.user_budget = budget;
        self
    }

    /// Reads every live registry and writes the exposition in `format` to
    /// `out`. Only a failure to write to `out` is an error; unreadable
    /// registries are skipped, counted and listed in the report.
    pub fn scrape(
        &mut self,
        format: Format,
        out: &mut impl std::io::Write,
    ) -> std::io::Result<ScrapeReport> {
        let (report, body) = self.scrape_body(format)?;
        body.write_to(out)?;
        Ok(report)
    }

    /// Lists the namespace and reads every live registry (through the
    /// readers kept between calls, within each user's share) and every
    /// live porthole: the series a scrape exports, before any encoding.
    /// What is skipped is counted in the endpoint's own metrics and listed
    /// in the report. Every exporter takes its series from here: `serve`
    /// through [`scrape_body`](Self::scrape_body), `push` through
    /// [`otlp`](crate::otlp).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// registry.counter("jobs_total", &[], "Jobs.", "").unwrap().add(2);
    /// let mut scraper = topdeck_export::Scraper::new(topdeck::Namespace::at(dir.path()));
    /// let gathered = scraper.gather();
    /// assert_eq!(gathered.report.registries, 1);
    /// let (entry, snapshot) = &gathered.registries[0];
    /// assert_eq!(entry.pid, std::process::id());
    /// assert_eq!(snapshot.get("jobs_total", &[]), Some(&topdeck::Value::Counter(2)));
    /// ```
    pub fn gather(&mut self) -> Gathered {
        let mut report = ScrapeReport::default();
        // Readers of files no longer listed, or replaced, are dropped here.
        let listing = self.tracker.refresh();
        for e in &listing.errors {
            report.skipped.push(Skipped {
                reason: reason(e.kind()),
                message: e.to_string(),
            });
        }
        for dir in &listing.private {
            report.skipped.push(Skipped {
                reason: "private",
                message: format!(
                    "{}: private to its owner, and this endpoint may not open it; its registries \
                     are not exported (serving every user's needs root with CAP_DAC_READ_SEARCH)",
                    dir.display()
                ),
            });
        }
        let mut dead = 0;
        let mut read: Vec<(RegistryEntry, Snapshot)> = Vec::with_capacity(listing.entries.len());
        // Time spent reading each user's registries, and those left out
        // once a user has used up its share of this scrape.
        let mut spent: HashMap<u32, (Duration, usize)> = HashMap::new();
        for entry in listing.entries {
            if entry.liveness == Liveness::Dead {
                dead += 1;
                self.tracker.forget(&entry.path);
                continue;
            }
            let (used, left_out) = spent.entry(entry.uid).or_default();
            if *used > self.user_budget {
                *left_out += 1;
                continue;
            }
            let started = Instant::now();
            let snap = self.tracker.open(&entry).and_then(Tracked::snapshot);
            *used += started.elapsed();
            match snap {
                Ok(snap) => read.push((entry, snap)),
                Err(e) => {
                    self.tracker.forget(&entry.path);
                    report.skipped.push(Skipped {
                        reason: reason(e.kind()),
                        message: e.to_string(),
                    });
                }
            }
        }
        let mut over: Vec<(u32, usize)> = spent
            .into_iter()
            .filter(|(_, (_, n))| *n > 0)
            .map(|(uid, (_, n))| (uid, n))
            .collect();
        over.sort_unstable();
        for (uid, n) in over {
            report.skipped.push(Skipped {
                reason: "too_large",
                message: format!(
                    "uid {uid}: {n} registries left out of this scrape: that user's registries \
                     took over {:?} to read, its share of a scrape",
                    self.user_budget
                ),
            });
        }

        let mut foreign: Vec<Reading> = Vec::new();
        if let Some(portholes) = &mut self.portholes {
            let look = portholes.look();
            for message in look.errors {
                report.skipped.push(Skipped {
                    reason: "porthole",
                    message,
                });
            }
            for r in look.readings {
                if r.found.alive {
                    foreign.push(r);
                } else {
                    dead += 1;
                }
            }
        }

        report.registries = read.len() + foreign.len();
        report.series = read.iter().map(|(_, s)| s.len()).sum::<usize>()
            + foreign.iter().map(|r| r.snapshot.len()).sum::<usize>();
        self.own.count_error("dead", dead);
        for s in &report.skipped {
            self.own.count_error(s.reason, 1);
        }
        self.own.set_scrape(report.registries, report.series);
        Gathered {
            registries: read,
            portholes: foreign,
            report,
        }
    }

    /// [`scrape`](Self::scrape), returning the exposition as pieces held
    /// by the scraper until the next scrape, for a server to send without
    /// copying them into one buffer first.
    pub fn scrape_body(&mut self, format: Format) -> std::io::Result<(ScrapeReport, Body<'_>)> {
        let Gathered {
            registries: read,
            portholes: foreign,
            mut report,
        } = self.gather();
        for (entry, snap) in &read {
            if let Some(t) = self.tracker.get_mut(&entry.path) {
                t.state.update(&Source::from_snapshot(entry, snap));
            }
        }
        let tracker = &self.tracker;
        let mut sources: Vec<Source<'_>> = read
            .iter()
            .map(|(entry, snap)| {
                let source = Source::from_snapshot(entry, snap);
                match tracker.get(&entry.path) {
                    Some(t) => source.with_prepared(&t.state),
                    None => source,
                }
            })
            .collect();
        for r in &foreign {
            sources.push(Source::porthole(&r.found, &r.snapshot));
        }
        sources.push(Source::unlabelled(self.own.iter()));
        // The endpoint's own source is last and never changes shape.
        let key: Vec<ShapeKey> = read
            .iter()
            .map(|(entry, snap)| ShapeKey {
                path: entry.path.clone(),
                created_unix_ns: entry.created_unix_ns,
                metrics: snap.len(),
            })
            .chain(foreign.iter().map(|r| ShapeKey {
                path: r.found.path.clone(),
                created_unix_ns: r.snapshot.lineage(),
                metrics: r.snapshot.len(),
            }))
            .collect();
        let exposition = match &self.shape {
            Some((k, shape)) if *k == key => Exposition::regroup(&sources, shape),
            _ => None,
        };
        let exposition = match exposition {
            Some(e) => e,
            None => {
                let e = Exposition::group(&sources);
                self.shape = Some((key, e.shape()));
                e
            }
        };
        report.conflicts = exposition.conflicts();
        format.encode_body(&exposition, &mut self.buffers)?;
        drop(exposition);
        drop(sources);
        // Counted for the next scrape: this one's families are written.
        self.own.count_error("type_conflict", report.conflicts);
        Ok((report, self.buffers.body()))
    }

    /// Records what a scrape in `format` cost, as the caller measured it
    /// (from request to response sent), and the bytes it sent.
    pub fn observe(&mut self, format: Format, elapsed: Duration, bytes: u64) {
        self.own.observe(format, elapsed, bytes);
    }

    /// Readers kept open between scrapes.
    pub fn cached_readers(&self) -> usize {
        self.tracker.len()
    }
}

/// The endpoint's own metrics, as ordinary metric infos and values.
struct OwnMetrics {
    metrics: Vec<(MetricInfo, Value)>,
    range: BucketRange,
}

const DURATION: usize = 0;
const BYTES: usize = 1;
const REGISTRIES: usize = 2;
const SERIES: usize = 3;
/// `topdeck_scrapes_total`, one per entry of [`FORMATS`].
const SCRAPES: usize = 4;
const FORMATS: [Format; 3] = [Format::Text, Format::OpenMetrics, Format::Protobuf];
/// `topdeck_scrape_errors_total`, one per entry of [`REASONS`].
const ERRORS: usize = SCRAPES + FORMATS.len();

impl OwnMetrics {
    fn new() -> Self {
        let info = |kind, name: &str, help: &str, unit: &str| MetricInfo {
            kind,
            name: name.into(),
            labels: Vec::new(),
            help: help.into(),
            unit: unit.into(),
        };
        let range =
            BucketRange::covering(DURATION_SCHEMA, DURATION_MIN_SECONDS, DURATION_MAX_SECONDS);
        let mut metrics = vec![
            (
                info(
                    MetricKind::Histogram,
                    "topdeck_scrape_duration_seconds",
                    "Time to answer a scrape: list, read, encode, compress and send.",
                    "seconds",
                ),
                Value::Histogram(HistogramValue {
                    schema: range.schema,
                    zero_threshold: range.zero_threshold(),
                    zero_count: 0,
                    min_index: range.min_index,
                    buckets: vec![0; range.bucket_count as usize],
                    count: 0,
                    sum: 0.0,
                    max: None,
                }),
            ),
            (
                info(
                    MetricKind::Counter,
                    "topdeck_scrape_bytes_total",
                    "Bytes sent in scrape responses.",
                    "bytes",
                ),
                Value::Counter(0),
            ),
            (
                info(
                    MetricKind::GaugeI64,
                    "topdeck_scrape_registries",
                    "Registries exported by this scrape.",
                    "",
                ),
                Value::Gauge(0),
            ),
            (
                info(
                    MetricKind::GaugeI64,
                    "topdeck_scrape_series",
                    "Series read from registries by this scrape.",
                    "",
                ),
                Value::Gauge(0),
            ),
        ];
        for f in FORMATS {
            let mut i = info(
                MetricKind::Counter,
                "topdeck_scrapes_total",
                "Scrapes answered by this endpoint, by the format sent.",
                "",
            );
            i.labels.push(("format".into(), f.name().into()));
            metrics.push((i, Value::Counter(0)));
        }
        for r in REASONS {
            let mut i = info(
                MetricKind::Counter,
                "topdeck_scrape_errors_total",
                "Registries skipped (dead writer, unreadable file) and series dropped for a type clash.",
                "",
            );
            i.labels.push(("reason".into(), r.into()));
            metrics.push((i, Value::Counter(0)));
        }
        Self { metrics, range }
    }

    fn iter(&self) -> impl Iterator<Item = (&MetricInfo, &Value)> {
        self.metrics.iter().map(|(i, v)| (i, v))
    }

    fn add(&mut self, at: usize, n: u64) {
        if let Value::Counter(c) = &mut self.metrics[at].1 {
            *c = c.wrapping_add(n);
        }
    }

    fn set(&mut self, at: usize, v: usize) {
        self.metrics[at].1 = Value::Gauge(i64::try_from(v).unwrap_or(i64::MAX));
    }

    fn count_error(&mut self, reason: &str, n: u64) {
        let at = REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(REASONS.len() - 1);
        self.add(ERRORS + at, n);
    }

    fn set_scrape(&mut self, registries: usize, series: usize) {
        self.set(REGISTRIES, registries);
        self.set(SERIES, series);
    }

    fn observe(&mut self, format: Format, elapsed: Duration, bytes: u64) {
        let f = FORMATS.iter().position(|&f| f == format).unwrap_or(0);
        self.add(SCRAPES + f, 1);
        self.add(BYTES, bytes);
        let range = self.range;
        if let Value::Histogram(h) = &mut self.metrics[DURATION].1 {
            let v = elapsed.as_secs_f64();
            match range.slot(v, h.zero_threshold) {
                Slot::Bucket(i) => h.buckets[i as usize] += 1,
                Slot::Zero => h.zero_count += 1,
                Slot::Ignore => return,
            }
            h.count += 1;
            h.sum += v;
            h.max = Some(h.max.map_or(v, |m| m.max(v)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape_text(s: &mut Scraper) -> (String, ScrapeReport) {
        let mut out = Vec::new();
        let report = s.scrape(Format::Text, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), report)
    }

    #[test]
    fn registries_are_read_fresh_at_each_scrape_through_kept_readers() {
        let dir = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(dir.path())
            .build()
            .unwrap();
        let c = r.counter("jobs_total", &[], "Jobs.", "").unwrap();
        let mut s = Scraper::new(Namespace::at(dir.path()));
        c.add(5);
        let (t, report) = scrape_text(&mut s);
        assert_eq!((report.registries, report.series), (1, 1));
        assert!(t.contains(" 5\n"), "{t}");
        c.add(2);
        // A metric registered after the first scrape appears too.
        r.gauge("depth", &[], "Depth.", "").unwrap().set(9);
        let (t, _) = scrape_text(&mut s);
        assert!(t.contains(" 7\n") && t.contains("depth{"), "{t}");
        assert_eq!(s.cached_readers(), 1);
        drop(r);
        let (t, report) = scrape_text(&mut s);
        assert_eq!(report.registries, 0);
        assert!(!t.contains("jobs_total"), "{t}");
        assert_eq!(s.cached_readers(), 0);
    }

    #[test]
    fn a_user_past_its_share_of_a_scrape_is_left_out_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let build = || {
            topdeck::Registry::builder()
                .dir(dir.path())
                .build()
                .unwrap()
        };
        let (a, b) = (build(), build());
        a.counter("a_total", &[], "", "").unwrap().inc();
        b.counter("b_total", &[], "", "").unwrap().inc();
        let mut s = Scraper::new(Namespace::at(dir.path())).with_user_budget(Duration::ZERO);
        let (t, report) = scrape_text(&mut s);
        assert_eq!(report.registries, 1, "the first registry used up the share");
        let skipped = &report.skipped[0];
        assert_eq!(skipped.reason, "too_large");
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert!(
            skipped
                .message
                .starts_with(&format!("uid {uid}: 1 registries")),
            "{skipped:?}"
        );
        assert!(t.contains("a_total{") != t.contains("b_total{"), "{t}");
        let mut s = Scraper::new(Namespace::at(dir.path()));
        assert_eq!(scrape_text(&mut s).1.registries, 2);
    }

    #[test]
    fn broken_files_are_skipped_and_counted_by_reason() {
        let dir = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(dir.path())
            .build()
            .unwrap();
        r.counter("ok_total", &[], "Still exported.", "")
            .unwrap()
            .inc();
        std::fs::write(dir.path().join("1-1-0.topdeck"), vec![0x5a; 8192]).unwrap();
        let mut s = Scraper::new(Namespace::at(dir.path()));
        let (t, report) = scrape_text(&mut s);
        assert_eq!(report.registries, 1);
        assert_eq!(report.skipped.len(), 1);
        assert_eq!(report.skipped[0].reason, "corrupt");
        assert!(report.skipped[0].message.contains("1-1-0.topdeck"));
        assert!(
            t.contains("topdeck_scrape_errors_total{reason=\"corrupt\"} 1\n"),
            "{t}"
        );
        assert!(t.contains("ok_total{"), "{t}");
        let (t, _) = scrape_text(&mut s);
        assert!(
            t.contains("topdeck_scrape_errors_total{reason=\"corrupt\"} 2\n"),
            "{t}"
        );
    }

    #[test]
    fn the_endpoint_reports_its_own_cost() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Scraper::new(Namespace::at(dir.path()));
        s.observe(Format::Protobuf, Duration::from_millis(3), 1000);
        s.observe(Format::Protobuf, Duration::from_millis(5), 500);
        let (t, _) = scrape_text(&mut s);
        assert!(
            t.contains("topdeck_scrapes_total{format=\"protobuf\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("topdeck_scrapes_total{format=\"text\"} 0\n"),
            "{t}"
        );
        assert!(t.contains("topdeck_scrape_bytes_total 1500\n"), "{t}");
        assert!(
            t.contains("topdeck_scrape_duration_seconds_count 2\n"),
            "{t}"
        );
        assert!(
            t.contains("topdeck_scrape_duration_seconds_sum 0.008\n"),
            "{t}"
        );
        // Both durations fall below the 0.0055 s... bound nearest above 5 ms.
        let le_5ms = t
            .lines()
            .filter(|l| l.starts_with("topdeck_scrape_duration_seconds_bucket"))
            .map(|l| {
                let le: f64 = l
                    .split("le=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                let n: u64 = l.rsplit(' ').next().unwrap().parse().unwrap();
                (le, n)
            })
            .find(|&(le, _)| le >= 0.005)
            .unwrap();
        assert_eq!(le_5ms.1, 2, "{t}");
        assert!(le_5ms.0 < 0.005 * 1.1);
    }
}
