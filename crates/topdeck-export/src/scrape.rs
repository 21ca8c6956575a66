// SPDX-License-Identifier: Apache-2.0
//! The scraper behind an endpoint: lists the namespace at every scrape,
//! snapshots each live registry through a reader kept from one scrape to
//! the next (descriptors are decoded once per file, not per scrape), skips
//! and counts what cannot be read, and adds its own cost to the exposition.
//!
//! The scraper's own metrics, written without source labels. What it
//! read and skipped ([`Scraper::read_metrics`]), which every exporter
//! sends (`serve` in its exposition, `push` beside its own):
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `topdeck_scrape_registries` | gauge | sources (registries and other runtimes') exported by this look |
//! | `topdeck_scrape_series` | gauge | series read by this look (the exporter's own not included) |
//! | `topdeck_scrape_errors_total{reason}` | counter | sources skipped, and series dropped for a type clash |
//! | `topdeck_export_dropped_series_total{reason,owner_uid}` | counter | series the [`Policy`] left out, by why and whose (from the first drop on) |
//!
//! and what an endpoint answered, which only `serve` has:
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `topdeck_scrapes_total{format}` | counter | scrapes answered, by format sent (`text`, `openmetrics`, `protobuf`) |
//! | `topdeck_scrape_duration_seconds` | histogram | time to answer a scrape, as the caller measured it |
//! | `topdeck_scrape_bytes_total` | counter | bytes sent (after compression) |
//!
//! Errors and the two gauges describe the look that carries them; the
//! duration and bytes of a scrape are known only once it is sent, so they
//! appear from the next one. `reason` is one of [`REASONS`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use topdeck::{ErrorKind, Liveness, MetricInfo, Namespace, Snapshot, Value};
use topdeck_sources::{Portholes, Source as Origin, Tracked, Tracker};

use crate::body::{Body, Buffers};
use crate::format::Format;
use crate::model::{Exposition, Run, Shape};
use crate::own::OwnMetrics;
use crate::policy::{DropReason, Drops, Policy, DROPPED};
use crate::source::{Prepared, Source};

/// Every `reason` of `topdeck_scrape_errors_total`; each series exists from
/// the first scrape on, so `rate()` sees its first increase.
pub const REASONS: [&str; 12] = [
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
    /// What the [`Policy`] left out, one notice per cause and owner
    /// (counted in [`DROPPED`], not in the errors).
    pub dropped: Vec<Skipped>,
}

impl ScrapeReport {
    /// Everything to tell the operator: what was skipped, then what the
    /// policy left out.
    pub fn notices(&self) -> Vec<Skipped> {
        self.skipped.iter().chain(&self.dropped).cloned().collect()
    }
}

/// The series one look at the host found, before any encoding: see
/// [`Scraper::gather`].
#[derive(Debug, Default)]
pub struct Gathered {
    /// Live sources read, each with its snapshot, in the look's order
    /// (registries by pid then path, then other runtimes' by kind then
    /// path).
    pub sources: Vec<(Origin, Snapshot)>,
    /// Each source's CPU-wait series ([`crate::cpu_wait`]), by position
    /// in `sources`.
    pub cpu_wait: Vec<Vec<(MetricInfo, Value)>>,
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
    /// A reader per source (a registry's without its descriptor: however
    /// many there are, the endpoint holds no fd for each), and what was
    /// prepared for its series.
    tracker: Tracker<Arc<Prepared>>,
    /// Most time one user's registries may take of a scrape.
    user_budget: Duration,
    /// Who and how much is exported.
    policy: Policy,
    /// What it read and skipped: every exporter's.
    reads: OwnMetrics,
    /// What an endpoint answered: `serve`'s.
    endpoint: OwnMetrics,
    buffers: Buffers,
    /// The last grouping, and the registries and metric counts it was made
    /// from; reused while they stay the same (see [`Exposition::regroup`]).
    shape: Option<(Vec<ShapeKey>, Shape)>,
}

/// One source as a grouping saw it: its path, its snapshots' lineage (a
/// new file at the same path, or a porthole whose series were reordered,
/// is read by another reader), and its metric count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShapeKey {
    path: PathBuf,
    lineage: u64,
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
        Self::of(namespace, None)
    }

    /// A scraper of `namespace` and, when given, other runtimes'
    /// `portholes` (JVMs, prometheus_client directories, Aeron drivers,
    /// PCP MMV files), each of their series labelled with `source` (`jvm`,
    /// `python`, `aeron`, `mmv`), `process`, and `pid` when known.
    pub fn of(namespace: Namespace, portholes: Option<Portholes>) -> Self {
        Self {
            tracker: Tracker::new(namespace, portholes),
            user_budget: USER_BUDGET,
            policy: Policy::default(),
            reads: read_metrics(),
            endpoint: endpoint_metrics(),
            buffers: Buffers::default(),
            shape: None,
        }
    }

    /// Sets the most time one user's registries may take of a scrape
    /// (default 250 ms): the rest of that user's registries are left out
    /// of that scrape and counted (`too_large`), so one user who publishes
    /// too much cannot starve everyone else's series.
    pub fn with_user_budget(mut self, budget: Duration) -> Self {
        self.user_budget = budget;
        self
    }

    /// Exports what `policy` lets through (everything, by default); what
    /// it leaves out is counted in `topdeck_export_dropped_series_total`
    /// and noticed in each look's report.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
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
    /// let (source, snapshot) = &gathered.sources[0];
    /// assert_eq!(source.pid, Some(std::process::id()));
    /// assert_eq!(snapshot.get("jobs_total", &[]), Some(&topdeck::Value::Counter(2)));
    /// ```
    pub fn gather(&mut self) -> Gathered {
        let mut report = ScrapeReport::default();
        // Readers of sources no longer found, or replaced, are dropped here.
        let look = self.tracker.look();
        for e in &look.errors {
            report.skipped.push(Skipped {
                reason: reason(e.kind()),
                message: e.to_string(),
            });
        }
        for dir in &look.private {
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
        let mut drops = Drops::new();
        let mut read: Vec<(Origin, Snapshot)> = Vec::with_capacity(look.sources.len());
        // Time spent reading each user's sources, and those left out once
        // a user has used up its share of this scrape.
        let mut spent: HashMap<Option<u32>, (Duration, usize)> = HashMap::new();
        for source in look.sources {
            if source.liveness == Liveness::Dead {
                dead += 1;
                self.tracker.forget(&source.path);
                continue;
            }
            // Denied as a whole before it is opened: nothing of it is read.
            if !self.policy.admits(&source) {
                *drops.entry((DropReason::Denied, source.uid)).or_default() +=
                    source.metrics as u64;
                continue;
            }
            let (used, left_out) = spent.entry(source.uid).or_default();
            if *used > self.user_budget {
                *left_out += 1;
                continue;
            }
            let started = Instant::now();
            let snap = self.tracker.open(&source).and_then(Tracked::snapshot);
            *used += started.elapsed();
            match snap {
                Ok(snap) => read.push((source, snap)),
                Err(e) => {
                    self.tracker.forget(&source.path);
                    report.skipped.push(Skipped {
                        reason: reason(e.kind()),
                        message: e.to_string(),
                    });
                }
            }
        }
        let mut over: Vec<(Option<u32>, usize)> = spent
            .into_iter()
            .filter(|(_, (_, n))| *n > 0)
            .map(|(uid, (_, n))| (uid, n))
            .collect();
        over.sort_unstable();
        for (uid, n) in over {
            let whose = uid.map_or_else(|| "an unknown owner".to_owned(), |u| format!("uid {u}"));
            report.skipped.push(Skipped {
                reason: "too_large",
                message: format!(
                    "{whose}: {n} registries left out of this scrape: that user's registries \
                     took over {:?} to read, its share of a scrape",
                    self.user_budget
                ),
            });
        }
        for (k, n) in self.policy.apply(&mut read) {
            *drops.entry(k).or_default() += n;
        }
        report.dropped = self.policy.notices(&drops);
        for ((why, uid), n) in drops {
            let uid = uid.map_or_else(|| "unknown".to_owned(), |u| u.to_string());
            self.reads.add_labelled(
                DROPPED,
                DROPPED_HELP,
                &[("reason", why.name()), ("owner_uid", &uid)],
                n,
            );
        }
        report.registries = read.len();
        report.series = read.iter().map(|(_, s)| s.len()).sum::<usize>();
        self.reads.add(ERRORS, Some("dead"), dead);
        for s in &report.skipped {
            self.reads.add(ERRORS, Some(s.reason), 1);
        }
        self.reads.set(SOURCES, report.registries);
        self.reads.set(SERIES, report.series);
        Gathered {
            cpu_wait: read
                .iter()
                .map(|(_, s)| crate::cpu_wait::series(s))
                .collect(),
            sources: read,
            report,
        }
    }

    /// [`scrape`](Self::scrape), returning the exposition as pieces held
    /// by the scraper until the next scrape, for a server to send without
    /// copying them into one buffer first.
    pub fn scrape_body(&mut self, format: Format) -> std::io::Result<(ScrapeReport, Body<'_>)> {
        let (report, chunks) = self.scrape_chunks(format, usize::MAX);
        let buffers = &mut self.buffers;
        chunks.with_exposition(|exp| format.encode_body(exp, buffers).map(drop))?;
        Ok((report, self.buffers.body()))
    }

    /// Reads every live registry now, as [`scrape`](Self::scrape) does,
    /// and returns the exposition to be encoded later, a run of families
    /// of about `window` bytes at a time ([`Chunks`]), apart from the
    /// scraper: every snapshot is taken here, at one moment, and what
    /// the chunks hold is those snapshots (and the labels rendered for
    /// them, shared with the scraper), never more than one run encoded.
    pub fn scrape_chunks(&mut self, format: Format, window: usize) -> (ScrapeReport, Chunks) {
        let Gathered {
            sources: read,
            cpu_wait,
            mut report,
        } = self.gather();
        for (source, snap) in &read {
            if let Some(t) = self.tracker.get_mut(&source.path) {
                // Copied only if a body still being sent shares it.
                if t.state.len() < snap.len() {
                    Arc::make_mut(&mut t.state).update(&Source::of(source, snap));
                }
            }
        }
        let prepared: Vec<Option<Arc<Prepared>>> = read
            .iter()
            .map(|(origin, _)| self.tracker.get(&origin.path).map(|t| t.state.clone()))
            .collect();
        let mut chunks = Chunks {
            format,
            read,
            cpu_wait,
            prepared,
            own: self.reads.clone(),
            endpoint: self.endpoint.clone(),
            shape: Shape::default(),
            runs: Vec::new().into_iter(),
            buffers: Buffers::default(),
        };
        // The endpoint's own source is last and never changes shape.
        let key: Vec<ShapeKey> = chunks
            .read
            .iter()
            .zip(&chunks.cpu_wait)
            .map(|((origin, snap), derived)| ShapeKey {
                path: origin.path.clone(),
                lineage: snap.lineage(),
                metrics: snap.len() + derived.len(),
            })
            .collect();
        let cached = match &self.shape {
            Some((k, shape)) if *k == key => Some(shape),
            _ => None,
        };
        let (shape, runs) = chunks.group(cached, window);
        report.conflicts = shape.conflicts();
        if cached.is_none() {
            self.shape = Some((key, shape.clone()));
        }
        chunks.shape = shape;
        chunks.runs = runs.into_iter();
        // Counted for the next scrape: this one's families are written
        // with the counts taken above.
        self.count_conflicts(report.conflicts);
        (report, chunks)
    }

    /// Records what a scrape in `format` cost, as the caller measured it
    /// (from request to response sent), and the bytes it sent.
    pub fn observe(&mut self, format: Format, elapsed: Duration, bytes: u64) {
        self.endpoint.add(SCRAPES, Some(format.name()), 1);
        self.endpoint.add(BYTES, None, bytes);
        self.endpoint.record(DURATION, elapsed.as_secs_f64());
    }

    /// Counts `n` series an encoding left out for a type clash (an
    /// exporter other than [`scrape`](Self::scrape)'s own, which counts
    /// its own).
    pub fn count_conflicts(&mut self, n: u64) {
        self.reads.add(ERRORS, Some("type_conflict"), n);
    }

    /// What this scraper says of what it read and skipped (sources,
    /// series, and skips by reason), for an exporter to send with its own.
    pub fn read_metrics(&self) -> &OwnMetrics {
        &self.reads
    }

    /// Readers kept open between scrapes.
    pub fn cached_readers(&self) -> usize {
        self.tracker.len()
    }
}

/// One scrape's exposition, encoded a run of families at a time: see
/// [`Scraper::scrape_chunks`]. Each item is the next run's bytes, in
/// order; all of them together are, byte for byte, the whole encoding of
/// the same snapshots ([`Scraper::scrape`]'s). It owns everything it
/// encodes from, so a server can send one chunk and encode the next
/// while the scraper serves other scrapes.
pub struct Chunks {
    format: Format,
    read: Vec<(Origin, Snapshot)>,
    cpu_wait: Vec<Vec<(MetricInfo, Value)>>,
    /// Labels rendered earlier for each source, shared with the scraper.
    prepared: Vec<Option<Arc<Prepared>>>,
    /// The scraper's own metrics as they were at the scrape.
    own: OwnMetrics,
    endpoint: OwnMetrics,
    shape: Shape,
    runs: std::vec::IntoIter<Run>,
    buffers: Buffers,
}

impl std::fmt::Debug for Chunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunks")
            .field("format", &self.format)
            .field("sources", &self.read.len())
            .field("runs_left", &self.runs.len())
            .finish_non_exhaustive()
    }
}

impl Chunks {
    /// The sources as the encoders take them, borrowed from `self`.
    fn sources(&self) -> Vec<Source<'_>> {
        let mut sources: Vec<Source<'_>> = self
            .read
            .iter()
            .zip(&self.cpu_wait)
            .zip(&self.prepared)
            .map(|(((origin, snap), derived), prepared)| {
                let source =
                    Source::of(origin, snap).with_more(derived.iter().map(|(m, v)| (m, v)));
                match prepared {
                    Some(p) => source.with_prepared(p),
                    None => source,
                }
            })
            .collect();
        sources.push(Source::unlabelled(
            self.own.iter().chain(self.endpoint.iter()),
        ));
        sources
    }

    /// Groups the sources (as `cached` says, if it fits them) and cuts
    /// the families into runs of about `window` bytes.
    fn group(&self, cached: Option<&Shape>, window: usize) -> (Shape, Vec<Run>) {
        let sources = self.sources();
        let exposition = cached
            .and_then(|shape| Exposition::regroup(&sources, shape))
            .unwrap_or_else(|| Exposition::group(&sources));
        let split = self.format != Format::Protobuf;
        (exposition.shape(), exposition.runs(window, split))
    }

    /// Calls `f` with the exposition of the scrape's sources.
    fn with_exposition<T>(&self, f: impl FnOnce(&Exposition<'_>) -> T) -> T {
        let sources = self.sources();
        let exposition = Exposition::regroup(&sources, &self.shape)
            .unwrap_or_else(|| Exposition::group(&sources));
        f(&exposition)
    }

    /// Cuts the exposition into runs of about `window` bytes instead,
    /// from the start (for tests: what is encoded stays the same).
    #[cfg(test)]
    fn with_window(mut self, window: usize) -> Self {
        let split = self.format != Format::Protobuf;
        let runs = self.with_exposition(|exp| exp.runs(window, split));
        self.runs = runs.into_iter();
        self
    }

    /// Runs of families left to encode.
    pub fn runs_left(&self) -> usize {
        self.runs.len()
    }

    /// The format the chunks are in.
    pub fn format(&self) -> Format {
        self.format
    }
}

impl Iterator for Chunks {
    type Item = std::io::Result<Vec<u8>>;

    /// Encodes the next run of families; its bytes are copied out, and the
    /// buffers it used given back, so that a chunk waiting to be sent is
    /// all that is held of it.
    fn next(&mut self) -> Option<Self::Item> {
        let run = self.runs.next()?;
        let mut buffers = std::mem::take(&mut self.buffers);
        let format = self.format;
        let encoded = self.with_exposition(|exp| {
            let body = format.encode_families(exp, &mut buffers, &run)?;
            let mut chunk = Vec::with_capacity(body.len());
            body.write_to(&mut chunk)?;
            Ok(chunk)
        });
        buffers.clear_sink();
        self.buffers = buffers;
        Some(encoded)
    }
}

/// `topdeck_scrape_errors_total`: what was skipped, by reason.
const ERRORS: &str = "topdeck_scrape_errors_total";
const SOURCES: &str = "topdeck_scrape_registries";
const SERIES: &str = "topdeck_scrape_series";
const DURATION: &str = "topdeck_scrape_duration_seconds";
const BYTES: &str = "topdeck_scrape_bytes_total";
const SCRAPES: &str = "topdeck_scrapes_total";
const DROPPED_HELP: &str =
    "Series left out by the export policy (allow and deny lists, caps), by reason and owner.";
const FORMATS: [Format; 3] = [Format::Text, Format::OpenMetrics, Format::Protobuf];

/// What a scraper says of what it read, whichever exporter sends it.
fn read_metrics() -> OwnMetrics {
    let mut own = OwnMetrics::default();
    own.gauge(
        SOURCES,
        "Sources (registries and other runtimes') exported by this look.",
    )
    .gauge(SERIES, "Series read from them by this look.")
    .counter(
        ERRORS,
        "Sources skipped (dead writer, unreadable file) and series dropped for a type clash.",
        "",
        Some(("reason", &REASONS)),
    );
    own
}

/// What an endpoint says of the scrapes it answered.
fn endpoint_metrics() -> OwnMetrics {
    let formats = FORMATS.map(Format::name);
    let mut own = OwnMetrics::default();
    own.histogram(
        DURATION,
        "Time to answer a scrape: list, read, encode, compress and send.",
        (DURATION_SCHEMA, DURATION_MIN_SECONDS, DURATION_MAX_SECONDS),
    )
    .counter(BYTES, "Bytes sent in scrape responses.", "bytes", None)
    .counter(
        SCRAPES,
        "Scrapes answered by this endpoint, by the format sent.",
        "",
        Some(("format", &formats)),
    );
    own
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry of this process in `dir`, as a writer opens one.
    fn registry_in(dir: &tempfile::TempDir) -> topdeck::Registry {
        topdeck::Registry::builder()
            .dir(dir.path())
            .build()
            .unwrap()
    }

    fn scrape_text(s: &mut Scraper) -> (String, ScrapeReport) {
        let mut out = Vec::new();
        let report = s.scrape(Format::Text, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), report)
    }

    #[test]
    fn a_timer_that_measured_cpu_wait_is_exported_under_the_shared_names_too() {
        let dir = tempfile::tempdir().unwrap();
        let registry = topdeck::Registry::builder()
            .dir(dir.path())
            .build()
            .unwrap();
        let route = [("route", "/a")];
        let latency = registry
            .histogram("req_seconds", &route, "", "seconds")
            .unwrap();
        let wait = registry
            .histogram("req_cpu_wait_seconds", &route, "", "seconds")
            .unwrap();
        let unknown = registry
            .histogram("req_cpu_wait_unknown_seconds", &route, "", "seconds")
            .unwrap();
        for _ in 0..4 {
            latency.record(0.5);
            wait.record(0.25);
        }
        // One request whose wait was unknown: its latency is not in the share.
        latency.record(2.0);
        unknown.record(2.0);
        let mut scraper = Scraper::new(Namespace::at(dir.path()));
        let (text, _) = scrape_text(&mut scraper);
        let line = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name) && l.contains("histogram=\"req_seconds\""))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"))
                .to_string()
        };
        let latency_line = line(crate::cpu_wait::LATENCY);
        assert!(latency_line.contains("route=\"/a\""), "{latency_line}");
        assert!(latency_line.ends_with(" 2.0"), "{latency_line}");
        assert!(line(crate::cpu_wait::CPU_WAIT).ends_with(" 1.0"), "{text}");
        // Twice: the shape kept from the first scrape serves the second.
        let (again, _) = scrape_text(&mut scraper);
        assert!(again.contains(crate::cpu_wait::CPU_WAIT));
    }

    #[test]
    fn chunks_of_any_window_are_byte_for_byte_the_whole_encoding_of_the_same_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (registry_in(&dir), registry_in(&dir));
        for (i, r) in [&a, &b].into_iter().enumerate() {
            for n in 0..40 {
                let k = format!("k{n}");
                let labels = [("shard", k.as_str()), ("quote", "a\"b\nc")];
                r.counter(&format!("jobs_{}_total", n % 7), &labels, "Jobs.", "")
                    .unwrap()
                    .add((n * (i + 1)) as u64);
                r.gauge(&format!("depth_{}", n % 5), &labels, "Depth.", "")
                    .unwrap()
                    .set(n as i64 - 20);
                let h = r
                    .histogram(
                        &format!("latency_{}_seconds", n % 3),
                        &labels,
                        "Latency.",
                        "seconds",
                    )
                    .unwrap();
                for v in 0..n {
                    h.record(v as f64 * 1e-3);
                }
            }
        }
        let mut s = Scraper::new(Namespace::at(dir.path()));
        for format in FORMATS {
            for window in [1, 4 << 10, 64 << 10, usize::MAX] {
                let (_, chunks) = s.scrape_chunks(format, window);
                // The whole encoding of the same snapshots, as `scrape` writes it.
                let whole = chunks.with_exposition(|exp| {
                    let mut w = Vec::new();
                    format.encode(&mut w, exp).unwrap();
                    w
                });
                let runs = chunks.runs_left();
                let streamed: Vec<u8> = chunks.flat_map(Result::unwrap).collect();
                assert_eq!(streamed, whole, "{format:?} in runs of {window} bytes");
                match window {
                    1 if format == Format::Protobuf => assert!(runs > 10, "a family a run: {runs}"),
                    1 => assert!(runs > 100, "a series a run: {runs}"),
                    usize::MAX => assert_eq!(runs, 1),
                    _ => assert!(runs > 1 && runs < 200, "{runs}"),
                }
            }
        }
        // Runs of one series each (text) or one family each (protobuf),
        // planned again over the same snapshots.
        for format in FORMATS {
            let (_, chunks) = s.scrape_chunks(format, usize::MAX);
            let whole = chunks.with_exposition(|exp| {
                let mut w = Vec::new();
                format.encode(&mut w, exp).unwrap();
                w
            });
            let small = chunks.with_window(1);
            assert!(small.runs_left() > 10);
            let streamed: Vec<u8> = small.flat_map(Result::unwrap).collect();
            assert_eq!(streamed, whole, "{format:?}");
        }
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
        let (a, b) = (registry_in(&dir), registry_in(&dir));
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
        // Both durations fall below the classic bound nearest above 5 ms:
        // for seconds, the powers of two (crate::histogram::ClassicBounds).
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
        assert_eq!(le_5ms.0, 0.0078125);
    }
}
