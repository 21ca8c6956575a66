// SPDX-License-Identifier: Apache-2.0
//! The series a scrape exports ([`Scraper::gather`](crate::Scraper::gather)),
//! as an OTLP `ExportMetricsServiceRequest`
//! (<https://github.com/open-telemetry/opentelemetry-proto/blob/main/opentelemetry/proto/metrics/v1/metrics.proto>),
//! for `topdeck push`. The messages are `opentelemetry-proto`'s.
//!
//! One `ResourceMetrics` per process (see [`Encoder::request`]), its source labels as
//! resource attributes after the semantic conventions (see
//! [`Encoder::request`]); the metric's own labels are the data point's
//! attributes, unchanged (nothing collides with them in OTLP, so nothing
//! is renamed `exported_`). The mapping:
//!
//! | topdeck value | OTLP |
//! |---|---|
//! | counter (integer or float) | cumulative monotonic `Sum`, named without `_total` (OTLP's own convention; a Prometheus receiver adds it back) |
//! | gauge (integer or float) | `Gauge` |
//! | exponential histogram | cumulative `ExponentialHistogram`: `scale` = schema, zero bucket and threshold, positive buckets from `offset` = the first used bucket's index − 1, `sum`, `count`, `max` when known |
//! | fixed-bucket histogram (other runtimes) | cumulative `Histogram` with explicit bounds, counts per bucket |
//! | summary (other runtimes) | `Summary`, count and sum, no quantiles |
//!
//! The offset: a topdeck (and Prometheus native) bucket `i` covers
//! `(base^(i-1), base^i]`, an OTLP bucket `k` covers `(base^k, base^(k+1)]`,
//! so topdeck's bucket `i` is OTLP's `i - 1`. Only the used range of
//! buckets is sent (first to last non-empty). What a topdeck histogram
//! cannot say is left out: `min` (not kept) and the negative range (the
//! writer counts values at or below the zero threshold, negatives
//! included, in the zero bucket).
//!
//! Start times: a cumulative series starts when its registry was created,
//! so a restarted writer (a new registry) is a new start, and within one
//! start a counter never decreases. Other runtimes' sources carry no
//! creation time: their series start when their process started, or, with
//! no proven process, when the encoder first saw the source (at that
//! path); a new process is a new start.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
//! registry.counter("jobs_total", &[("queue", "a")], "Jobs done.", "").unwrap().add(3);
//!
//! let mut scraper = topdeck_export::Scraper::new(topdeck::Namespace::at(dir.path()));
//! let mut encoder = topdeck_export::otlp::Encoder::new("host-a");
//! let batch = encoder.request(&scraper.gather(), &[], 1_700_000_000_000_000_000);
//! assert_eq!(batch.points, 1);
//! let metric = &batch.request.resource_metrics[0].scope_metrics[0].metrics[0];
//! assert_eq!(metric.name, "jobs");
//! use topdeck_export::otlp::proto::metrics::{metric::Data, number_data_point::Value};
//! let Some(Data::Sum(sum)) = &metric.data else { panic!() };
//! assert!(sum.is_monotonic);
//! assert_eq!(sum.data_points[0].value, Some(Value::AsInt(3)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::path::PathBuf;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
    AggregationTemporality, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use topdeck::{BucketsValue, HistogramValue, MetricInfo, Snapshot, Value};
use topdeck_sources::{Kind, Source};

use crate::rules;
use crate::scrape::Gathered;

/// The OTLP messages, re-exported so that users of this module (and its
/// tests) decode with the same types it encodes with.
pub mod proto {
    pub use opentelemetry_proto::tonic::collector::metrics::v1 as collector;
    pub use opentelemetry_proto::tonic::common::v1 as common;
    pub use opentelemetry_proto::tonic::metrics::v1 as metrics;
    pub use opentelemetry_proto::tonic::resource::v1 as resource;
}

/// Resource attribute naming the registry (always, `main` included):
/// `service.name` takes it only when it is not the default.
pub const REGISTRY_ATTRIBUTE: &str = "topdeck.registry";
/// Resource attribute naming another runtime's porthole kind (`jvm`,
/// `python`, `aeron`, `mmv`), as the `source` label does in Prometheus.
pub const SOURCE_ATTRIBUTE: &str = "topdeck.source";

/// The scope every metric is sent under.
const SCOPE: &str = "topdeck";

/// One request and what it holds.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// The request, ready to encode.
    pub request: ExportMetricsServiceRequest,
    /// Data points in it.
    pub points: usize,
    /// Series left out: a name already used in the same resource by a
    /// metric of another OTLP type.
    pub conflicts: u64,
}

/// Metrics besides the host's: an exporter's own, under their own
/// resource (`service.name` = `service`).
#[derive(Debug, Clone, Copy)]
pub struct Own<'a> {
    /// `service.name` of the resource.
    pub service: &'a str,
    /// When the exporter started, ns since the Unix epoch: the start of
    /// its cumulative series.
    pub start_unix_ns: u64,
    /// The metrics.
    pub metrics: &'a [(MetricInfo, Value)],
}

/// Builds OTLP requests from gathered series; keeps, between requests,
/// when each porthole was first seen (their start time), and the messages
/// of the last request handed back with [`recycle`](Self::recycle).
///
/// A source read through the same reader ([`topdeck::Snapshot::lineage`])
/// with as many metrics as before has the same metrics in the same order,
/// so its recycled resource only needs new values and times: names,
/// descriptions and attributes, a few allocations per series, are built
/// once per reader instead of at every request (on 100,000 series that
/// was most of a request's cost, docs/PERFORMANCE.md, "OTLP push").
///
/// See the [module documentation](self) for the mapping.
#[derive(Debug)]
pub struct Encoder {
    host: String,
    /// First sight of a source with no start of its own (no creation
    /// time, no proven process), by path.
    first_seen: HashMap<PathBuf, u64>,
    /// Resources of the last request, recycled, by their sources'
    /// `(path, lineage)`.
    kept: HashMap<Vec<(PathBuf, u64)>, Kept>,
    /// Where each resource of the last request came from, in its order.
    last: Vec<(Vec<(PathBuf, u64)>, Layout)>,
    /// The boot time, for a process's start from its start ticks.
    boot: Option<i64>,
}

/// A resource built for one source, kept for its next request.
#[derive(Debug)]
struct Kept {
    resource: ResourceMetrics,
    layout: Layout,
}

/// Where each series of a source went in its resource.
#[derive(Debug, Clone, Default)]
struct Layout {
    /// Per series of the snapshot, in order: `(metric, point)`, or `None`
    /// for one left out (a type clash).
    slots: Vec<Option<(u32, u32)>>,
    conflicts: u64,
}

impl Encoder {
    /// An encoder for the host named `host` (`host.name` of every resource).
    pub fn new(host: impl Into<String>) -> Self {
        Self {
            host: host.into(),
            first_seen: HashMap::new(),
            kept: HashMap::new(),
            last: Vec::new(),
            boot: topdeck_procfs::process::boot_time(),
        }
    }

    /// Encodes `batch` as requests of at most `max_bytes` each where it
    /// can (whole resources each: one larger resource is a request of its
    /// own), hands each to `part` with the data points it holds, in
    /// order, and [recycles](Self::recycle) the batch. Receivers cap a
    /// request's size (a collector's otlp receiver at 20 MiB by default),
    /// and a host's series can outgrow any cap.
    ///
    /// The parts are prost's encoding of the resources, each as the
    /// request's repeated field, so each part decodes as a request.
    ///
    /// ```
    /// use prost::Message;
    /// use topdeck_export::otlp::proto::collector::ExportMetricsServiceRequest;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let mut registries = Vec::new();
    /// for n in 0..3 {
    ///     let r = topdeck::Registry::builder().dir(dir.path()).name(format!("r{n}")).build()?;
    ///     r.counter("jobs_total", &[], "", "").unwrap().inc();
    ///     registries.push(r);
    /// }
    /// let mut scraper = topdeck_export::Scraper::new(topdeck::Namespace::at(dir.path()));
    /// let mut encoder = topdeck_export::otlp::Encoder::new("host-a");
    /// let batch = encoder.request(&scraper.gather(), &[], 1);
    /// let mut parts = Vec::new();
    /// encoder.encode_parts(batch, 1, |body, points| parts.push((body, points)));
    /// // One resource per part: each is over 1 byte on its own.
    /// assert_eq!(parts.len(), 3);
    /// for (body, points) in &parts {
    ///     let request = ExportMetricsServiceRequest::decode(&body[..])?;
    ///     assert_eq!((request.resource_metrics.len(), *points), (1, 1));
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn encode_parts(
        &mut self,
        batch: Batch,
        max_bytes: usize,
        mut part: impl FnMut(Vec<u8>, usize),
    ) {
        let mut body = Vec::new();
        let mut points = 0;
        for r in &batch.request.resource_metrics {
            let start = body.len();
            // The request's field 1, `resource_metrics`, one at a time.
            prost::encoding::message::encode(1, r, &mut body);
            if body.len() > max_bytes && start > 0 {
                let rest = body.split_off(start);
                part(std::mem::replace(&mut body, rest), points);
                points = 0;
            }
            points += points_in(r);
        }
        part(body, points);
        self.recycle(batch);
    }

    /// Hands `batch`, the last [`request`](Self::request)'s, back for the
    /// next request to update in place rather than build afresh.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
    /// let jobs = registry.counter("jobs_total", &[], "Jobs.", "").unwrap();
    /// let mut scraper = topdeck_export::Scraper::new(topdeck::Namespace::at(dir.path()));
    /// let mut encoder = topdeck_export::otlp::Encoder::new("host-a");
    /// for n in 1..=3u64 {
    ///     jobs.inc();
    ///     let batch = encoder.request(&scraper.gather(), &[], n);
    ///     let body = prost::Message::encode_to_vec(&batch.request);
    ///     assert!(!body.is_empty()); // sent here
    ///     encoder.recycle(batch);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recycle(&mut self, batch: Batch) {
        // The exporter's own resources come last and are not kept.
        for (resource, (key, layout)) in batch
            .request
            .resource_metrics
            .into_iter()
            .zip(self.last.drain(..))
        {
            self.kept.insert(key, Kept { resource, layout });
        }
    }

    /// The request for `gathered`, read at `now_unix_ns`, and `own`'s
    /// metrics each under its own resource.
    ///
    /// One resource per process, whatever sources it has: a registry's,
    /// with the other runtimes' sources of its process (a JVM's
    /// hsperfdata beside the registry it writes) in it; other runtimes'
    /// sources of a process with no registry share one; a source of no
    /// proven process has one of its own. Its attributes come from its
    /// first source: `service.name` (the registry's name, or the
    /// process's when the registry has the default name `main` or there
    /// is no registry), `service.instance.id` (`<host>/<file stem>` for a
    /// registry: pid, start time and sequence of the writer;
    /// `<host>/<pid>-<start ticks>` for another process;
    /// `<host>:<container>:<path in it>` for no process), `host.name`,
    /// `process.pid` and `process.user.id` when known,
    /// `process.executable.name` (a registry writer's process name, as it
    /// gave it), `container.name` when in one, and `topdeck.registry`, or
    /// `topdeck.source` (the kind) without a registry.
    ///
    /// Start times: a registry's series start when it was created; another
    /// source's when its process started, or when this encoder first saw
    /// it when no process is proven; a new registry or process is a new
    /// start, and within one start a counter never decreases.
    pub fn request(&mut self, gathered: &Gathered, own: &[Own<'_>], now_unix_ns: u64) -> Batch {
        let mut batch = Batch::default();
        let mut resources = Vec::with_capacity(gathered.sources.len() + own.len());
        // What is not used again now is dropped with `kept`.
        let mut kept = std::mem::take(&mut self.kept);
        self.last.clear();
        let mut seen = HashMap::with_capacity(gathered.sources.len());
        let no_more = Vec::new();
        for group in resources_of(&gathered.sources) {
            let members: Vec<&(Source, Snapshot)> =
                group.iter().map(|&i| &gathered.sources[i]).collect();
            // Each member's CPU-wait series, after its own.
            let more: Vec<&Vec<(MetricInfo, Value)>> = group
                .iter()
                .map(|&i| gathered.cpu_wait.get(i).unwrap_or(&no_more))
                .collect();
            let key: Vec<(PathBuf, u64)> = members
                .iter()
                .map(|(s, snap)| (s.path.clone(), snap.lineage()))
                .collect();
            let starts: Vec<u64> = members
                .iter()
                .map(|(s, _)| self.start(s, &mut seen, now_unix_ns))
                .collect();
            let series =
                || {
                    members.iter().zip(&more).zip(&starts).flat_map(
                        |(((_, snap), more), &start)| {
                            snap.iter()
                                .chain(more.iter().map(|(m, v)| (m, v)))
                                .map(move |m| (m, start))
                        },
                    )
                };
            let len = members
                .iter()
                .zip(&more)
                .map(|((_, snap), more)| snap.len() + more.len())
                .sum();
            let (resource, layout) = reuse_or_build(
                kept.remove(&key),
                || attributes(&self.host, &members[0].0),
                (len, series),
                now_unix_ns,
            );
            batch.add(&layout);
            resources.push(resource);
            self.last.push((key, layout));
        }
        // Sources not seen this time are forgotten: a later sight is a new start.
        self.first_seen = seen;
        for o in own {
            let attributes = vec![
                string("service.name", o.service),
                string("host.name", &self.host),
                int("process.pid", i64::from(std::process::id())),
            ];
            let start = o.start_unix_ns.min(now_unix_ns);
            let metrics = o.metrics.iter().map(|(i, v)| ((i, v), start));
            let (resource, layout) = build(attributes, metrics, now_unix_ns);
            batch.add(&layout);
            resources.push(resource);
        }
        batch.request = ExportMetricsServiceRequest {
            resource_metrics: resources,
        };
        batch
    }
}

impl Encoder {
    /// When `s`'s cumulative series start: a registry's creation, else its
    /// process's start, else when this encoder first saw it (kept in
    /// `seen` for the next request). A series restarts with its source:
    /// a new registry, a new process.
    fn start(&self, s: &Source, seen: &mut HashMap<PathBuf, u64>, now: u64) -> u64 {
        let process = s
            .start_ticks
            .filter(|_| s.pid.is_some())
            .zip(self.boot)
            .map(|(ticks, boot)| unix_ns(topdeck_procfs::process::started_at(ticks, boot)));
        match s.created_unix_ns.or(process) {
            Some(start) => start.min(now),
            None => *seen
                .entry(s.path.clone())
                .or_insert_with(|| self.first_seen.get(&s.path).copied().unwrap_or(now)),
        }
    }
}

/// ns since the Unix epoch.
fn unix_ns(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Batch {
    fn add(&mut self, layout: &Layout) {
        self.points += layout.slots.iter().flatten().count();
        self.conflicts += layout.conflicts;
    }
}

/// `kept`, its values and times updated from `series` (`len` of them,
/// each with its start), if it was built from earlier snapshots of the
/// same readers with as many metrics; otherwise a resource built afresh.
fn reuse_or_build<'a, I>(
    kept: Option<Kept>,
    attributes: impl FnOnce() -> Vec<KeyValue>,
    (len, series): (usize, impl Fn() -> I),
    now: u64,
) -> (ResourceMetrics, Layout)
where
    I: Iterator<Item = ((&'a MetricInfo, &'a Value), u64)>,
{
    if let Some(mut k) = kept {
        if k.layout.slots.len() == len
            && update(&mut k.resource, &k.layout, series().map(|(m, _)| m), now)
        {
            return (k.resource, k.layout);
        }
    }
    build(attributes(), series(), now)
}

/// The sources of each resource, by index, in order: a process is one
/// resource, whatever sources it has. Other runtimes' sources of a process
/// that also writes a topdeck registry join that registry's resource (the
/// first, when it has several: each registry names a service of its
/// own); those of a process without one share one; a source with no
/// proven process is one on its own.
fn resources_of(sources: &[(Source, Snapshot)]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::with_capacity(sources.len());
    let mut by_process: HashMap<(u32, Option<u64>), usize> = HashMap::new();
    for (i, (s, _)) in sources.iter().enumerate() {
        let process = s.pid.map(|pid| (pid, s.start_ticks));
        let joined = match (s.kind, process) {
            (Kind::Topdeck, _) | (_, None) => None,
            (_, Some(p)) => by_process.get(&p).copied(),
        };
        match joined {
            Some(g) => groups[g].push(i),
            None => {
                if let Some(p) = process {
                    by_process.entry(p).or_insert(groups.len());
                }
                groups.push(vec![i]);
            }
        }
    }
    groups
}

/// Sets every point of `resource` to the series' new value, at `now`;
/// `false` if a point is not where `layout` says or not of the value's
/// type (then the resource is built afresh).
fn update<'a>(
    resource: &mut ResourceMetrics,
    layout: &Layout,
    metrics: impl Iterator<Item = (&'a MetricInfo, &'a Value)>,
    now: u64,
) -> bool {
    let Some(scope) = resource.scope_metrics.first_mut() else {
        return false;
    };
    for ((info, value), slot) in metrics.zip(&layout.slots) {
        let Some((m, p)) = *slot else { continue };
        let Some(data) = scope
            .metrics
            .get_mut(m as usize)
            .and_then(|m| m.data.as_mut())
        else {
            return false;
        };
        let p = p as usize;
        let ok = match (data, value) {
            (Data::Sum(s), Value::Counter(_) | Value::CounterF64(_)) => {
                set_number(&mut s.data_points, p, value, &info.unit, now)
            }
            (Data::Gauge(g), Value::Gauge(_) | Value::GaugeF64(_)) => {
                set_number(&mut g.data_points, p, value, &info.unit, now)
            }
            (Data::ExponentialHistogram(e), Value::Histogram(h)) => {
                renew(&mut e.data_points, p, |a, start| {
                    exponential(h, a, start, now)
                })
            }
            (Data::Histogram(e), Value::Buckets(b)) => {
                renew(&mut e.data_points, p, |a, start| explicit(b, a, start, now))
            }
            (Data::Summary(s), Value::Summary { count, sum }) => match s.data_points.get_mut(p) {
                Some(point) => {
                    (point.count, point.sum, point.time_unix_nano) = (whole(*count), *sum, now);
                    true
                }
                None => false,
            },
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// A source's resource attributes (see [`Encoder::request`]).
fn attributes(host: &str, s: &Source) -> Vec<KeyValue> {
    let registry = s.registry.as_deref();
    let service = registry
        .filter(|r| *r != rules::DEFAULT_REGISTRY)
        .unwrap_or(&s.process);
    // A registry's file is named by its writer's pid, start and sequence;
    // another source's process by its pid and start; a source of no
    // proven process by where it lies in its container, not by the
    // `/proc/<pid>/root` it was reached through.
    let instance = match (registry, s.path.file_stem(), s.pid, s.start_ticks) {
        (Some(_), Some(stem), _, _) => format!("{host}/{}", stem.to_string_lossy()),
        (None, _, Some(pid), Some(start)) => format!("{host}/{pid}-{start}"),
        _ => {
            let container = s.container.as_deref().unwrap_or("");
            format!("{host}:{container}:{}", s.path_in_its_view().display())
        }
    };
    let mut a = vec![
        string("service.name", service),
        string("service.instance.id", &instance),
        string("host.name", host),
    ];
    if let Some(pid) = s.pid {
        a.push(int("process.pid", i64::from(pid)));
    }
    if registry.is_some() {
        a.push(string("process.executable.name", &s.process));
    }
    if let Some(uid) = s.uid {
        a.push(int("process.user.id", i64::from(uid)));
    }
    if let Some(c) = &s.container {
        a.push(string("container.name", c));
    }
    match registry {
        Some(r) => a.push(string(REGISTRY_ATTRIBUTE, r)),
        None => a.push(string(SOURCE_ATTRIBUTE, s.kind.name())),
    }
    a
}

/// The OTLP type a value is sent as: series of one name in one resource
/// must agree on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Sum,
    Gauge,
    Exponential,
    Explicit,
    Summary,
}

impl Shape {
    fn of(v: &Value) -> Self {
        match v {
            Value::Counter(_) | Value::CounterF64(_) => Self::Sum,
            Value::Gauge(_) | Value::GaugeF64(_) => Self::Gauge,
            Value::Histogram(_) => Self::Exponential,
            Value::Buckets(_) => Self::Explicit,
            Value::Summary { .. } => Self::Summary,
        }
    }

    fn empty(self) -> Data {
        let cumulative = AggregationTemporality::Cumulative as i32;
        match self {
            Self::Sum => Data::Sum(Sum {
                data_points: Vec::new(),
                aggregation_temporality: cumulative,
                is_monotonic: true,
            }),
            Self::Gauge => Data::Gauge(Gauge {
                data_points: Vec::new(),
            }),
            Self::Exponential => Data::ExponentialHistogram(ExponentialHistogram {
                data_points: Vec::new(),
                aggregation_temporality: cumulative,
            }),
            Self::Explicit => Data::Histogram(Histogram {
                data_points: Vec::new(),
                aggregation_temporality: cumulative,
            }),
            Self::Summary => Data::Summary(Summary {
                data_points: Vec::new(),
            }),
        }
    }
}

/// One resource's metrics, series of one name grouped into one metric in
/// the order first seen, and where each series went.
fn build<'a>(
    attributes: Vec<KeyValue>,
    metrics: impl Iterator<Item = ((&'a MetricInfo, &'a Value), u64)>,
    now: u64,
) -> (ResourceMetrics, Layout) {
    let mut out: Vec<Metric> = Vec::new();
    let mut layout = Layout::default();
    let mut index: HashMap<&str, (usize, Shape)> = HashMap::new();
    for ((info, value), start) in metrics {
        let shape = Shape::of(value);
        let name = match shape {
            Shape::Sum => rules::counter_family_name(&info.name),
            _ => info.name.as_str(),
        };
        let at = match index.get(name) {
            Some(&(at, s)) if s == shape => at,
            Some(_) => {
                layout.conflicts += 1;
                layout.slots.push(None);
                continue;
            }
            None => {
                index.insert(name, (out.len(), shape));
                out.push(Metric {
                    name: name.to_owned(),
                    description: info.help.clone(),
                    unit: ucum(rules::exposed_unit(shape == Shape::Sum, &info.unit)).to_owned(),
                    metadata: Vec::new(),
                    data: Some(shape.empty()),
                });
                out.len() - 1
            }
        };
        let attributes: Vec<KeyValue> = info.labels.iter().map(|(k, v)| string(k, v)).collect();
        let point = push_point(&mut out[at], attributes, value, &info.unit, start, now);
        layout.slots.push(Some((at as u32, point as u32)));
    }
    let resource = ResourceMetrics {
        resource: Some(Resource {
            attributes,
            dropped_attributes_count: 0,
            entity_refs: Vec::new(),
        }),
        scope_metrics: vec![ScopeMetrics {
            scope: Some(InstrumentationScope {
                name: SCOPE.into(),
                version: env!("CARGO_PKG_VERSION").into(),
                attributes: Vec::new(),
                dropped_attributes_count: 0,
            }),
            metrics: out,
            schema_url: String::new(),
        }],
        schema_url: String::new(),
    };
    (resource, layout)
}

/// Appends one series' point to its metric (whose data matches its
/// shape); returns its index among the metric's points.
fn push_point(
    metric: &mut Metric,
    attributes: Vec<KeyValue>,
    value: &Value,
    unit: &str,
    start: u64,
    now: u64,
) -> usize {
    let number = |attributes, start| NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: now,
        exemplars: Vec::new(),
        flags: 0,
        value: number_value(value, unit),
    };
    fn pushed<T>(points: &mut Vec<T>, point: T) -> usize {
        points.push(point);
        points.len() - 1
    }
    match (metric.data.as_mut(), value) {
        (Some(Data::Sum(s)), Value::Counter(_) | Value::CounterF64(_)) => {
            pushed(&mut s.data_points, number(attributes, start))
        }
        // A gauge has no start: OTLP ignores it, so it is not sent.
        (Some(Data::Gauge(g)), Value::Gauge(_) | Value::GaugeF64(_)) => {
            pushed(&mut g.data_points, number(attributes, 0))
        }
        (Some(Data::ExponentialHistogram(e)), Value::Histogram(h)) => {
            pushed(&mut e.data_points, exponential(h, attributes, start, now))
        }
        (Some(Data::Histogram(e)), Value::Buckets(b)) => {
            pushed(&mut e.data_points, explicit(b, attributes, start, now))
        }
        (Some(Data::Summary(s)), Value::Summary { count, sum }) => pushed(
            &mut s.data_points,
            SummaryDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: now,
                count: whole(*count),
                sum: *sum,
                quantile_values: Vec::new(),
                flags: 0,
            },
        ),
        // `build` groups by shape, so the data always matches.
        _ => 0,
    }
}

/// A histogram point whose buckets are rebuilt in place keeps its
/// attributes and start.
trait Renew {
    fn keep(&mut self) -> (Vec<KeyValue>, u64);
}

macro_rules! renew_points {
    ($($point:ty),*) => {$(
        impl Renew for $point {
            fn keep(&mut self) -> (Vec<KeyValue>, u64) {
                (std::mem::take(&mut self.attributes), self.start_time_unix_nano)
            }
        }
    )*};
}
renew_points!(ExponentialHistogramDataPoint, HistogramDataPoint);

/// Replaces point `p` with `point(its attributes, its start)`.
fn renew<T: Renew>(
    points: &mut [T],
    p: usize,
    point: impl FnOnce(Vec<KeyValue>, u64) -> T,
) -> bool {
    match points.get_mut(p) {
        Some(old) => {
            let (attributes, start) = old.keep();
            *old = point(attributes, start);
            true
        }
        None => false,
    }
}

/// Data points in a resource.
fn points_in(r: &ResourceMetrics) -> usize {
    r.scope_metrics
        .iter()
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Sum(d)) => d.data_points.len(),
            Some(Data::Gauge(d)) => d.data_points.len(),
            Some(Data::ExponentialHistogram(d)) => d.data_points.len(),
            Some(Data::Histogram(d)) => d.data_points.len(),
            Some(Data::Summary(d)) => d.data_points.len(),
            None => 0,
        })
        .sum()
}

/// A counter's or gauge's value as OTLP's number; `unit` is the one the
/// series was registered with (a counter of nanoseconds goes in seconds,
/// [`rules::counter_value`]).
fn number_value(value: &Value, unit: &str) -> Option<number_data_point::Value> {
    use number_data_point::Value::{AsDouble, AsInt};
    match value {
        Value::Counter(n) => Some(match rules::counter_value(*n, unit) {
            rules::CounterValue::Integer(n) => AsInt(i64::try_from(n).unwrap_or(i64::MAX)),
            rules::CounterValue::Seconds(s) => AsDouble(s),
        }),
        Value::Gauge(n) => Some(AsInt(*n)),
        Value::CounterF64(x) | Value::GaugeF64(x) => Some(AsDouble(*x)),
        _ => None,
    }
}

/// Sets point `p` of `points` to `value` at `now`.
fn set_number(
    points: &mut [NumberDataPoint],
    p: usize,
    value: &Value,
    unit: &str,
    now: u64,
) -> bool {
    match points.get_mut(p) {
        Some(point) => {
            point.value = number_value(value, unit);
            point.time_unix_nano = now;
            true
        }
        None => false,
    }
}

/// A topdeck exponential histogram as an OTLP one: see the module
/// documentation for the bucket offset.
///
/// ```
/// use topdeck::HistogramValue;
/// // Schema 0: topdeck bucket 2 is (2, 4], bucket 3 is (4, 8].
/// let h = HistogramValue {
///     schema: 0, zero_threshold: 0.25, zero_count: 1, min_index: 0,
///     buckets: vec![0, 0, 2, 1, 0], count: 4, sum: 13.0, max: Some(5.0),
/// };
/// let p = topdeck_export::otlp::exponential(&h, Vec::new(), 1, 2);
/// let positive = p.positive.unwrap();
/// // OTLP bucket k is (2^k, 2^(k+1)]: (2, 4] is k = 1.
/// assert_eq!((p.scale, positive.offset), (0, 1));
/// assert_eq!(positive.bucket_counts, [2, 1]);
/// assert_eq!((p.zero_count, p.zero_threshold, p.count), (1, 0.25, 4));
/// assert_eq!((p.sum, p.max, p.min), (Some(13.0), Some(5.0), None));
/// ```
pub fn exponential(
    h: &HistogramValue,
    attributes: Vec<KeyValue>,
    start: u64,
    now: u64,
) -> ExponentialHistogramDataPoint {
    let first = h.buckets.iter().position(|&n| n > 0);
    let last = h.buckets.iter().rposition(|&n| n > 0);
    let positive = match (first, last) {
        (Some(first), Some(last)) => Some(Buckets {
            offset: h.min_index.saturating_add(first as i32).saturating_sub(1),
            bucket_counts: h.buckets[first..=last].to_vec(),
        }),
        _ => None,
    };
    ExponentialHistogramDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: now,
        count: h.count,
        sum: Some(h.sum),
        scale: i32::from(h.schema),
        zero_count: h.zero_count,
        positive,
        negative: None,
        flags: 0,
        exemplars: Vec::new(),
        min: None,
        max: h.max,
        zero_threshold: h.zero_threshold,
    }
}

/// A fixed-bucket histogram's cumulative float counts as OTLP's counts per
/// bucket: every finite bound is an explicit bound, the `+Inf` bucket the
/// last count. A count below the previous one (a torn read) is read as no
/// observations in that bucket.
fn explicit(
    b: &BucketsValue,
    attributes: Vec<KeyValue>,
    start: u64,
    now: u64,
) -> HistogramDataPoint {
    let mut explicit_bounds = Vec::with_capacity(b.buckets.len());
    let mut bucket_counts = Vec::with_capacity(b.buckets.len() + 1);
    let mut below = 0u64;
    for &(le, cumulative) in &b.buckets {
        if le.is_finite() {
            let c = whole(cumulative);
            explicit_bounds.push(le);
            bucket_counts.push(c.saturating_sub(below));
            below = below.max(c);
        }
    }
    let count = whole(b.count);
    bucket_counts.push(count.saturating_sub(below));
    HistogramDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: now,
        count,
        sum: Some(b.sum),
        bucket_counts,
        explicit_bounds,
        exemplars: Vec::new(),
        flags: 0,
        min: None,
        max: None,
    }
}

/// A float count (other runtimes keep them as floats) as OTLP's integer.
fn whole(x: f64) -> u64 {
    if x.is_nan() || x <= 0.0 {
        0
    } else {
        x.round() as u64
    }
}

/// topdeck's unit names (Prometheus' base units) as UCUM, OTLP's units; any
/// other is sent as given.
fn ucum(unit: &str) -> &str {
    match unit {
        "seconds" => "s",
        "milliseconds" => "ms",
        "microseconds" => "us",
        "nanoseconds" => "ns",
        "bytes" => "By",
        "ratio" => "1",
        "percent" => "%",
        "celsius" => "Cel",
        "hertz" => "Hz",
        other => other,
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        key_strindex: 0,
    }
}

#[cfg(test)]
mod tests;
