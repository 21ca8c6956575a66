// SPDX-License-Identifier: Apache-2.0
//! The messages of Prometheus' `io.prometheus.client` package
//! (<https://github.com/prometheus/client_model/blob/master/io/prometheus/client/metrics.proto>),
//! holding only the fields topdeck fills, for reading the protobuf
//! exposition back, and an exposition's families built as such messages.
//!
//! [`Format::Protobuf`](crate::Format::Protobuf) does not go through these
//! types: it writes the same bytes from borrowed strings (the derived
//! messages need nine owned strings per series, and that allocation made a
//! scrape of 100,000 series several times slower, docs/PERFORMANCE.md,
//! "Prometheus endpoint"); its tests hold the two equal.
//!
//! ```
//! use prost::Message;
//! # let dir = tempfile::tempdir().unwrap();
//! let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
//! registry.counter("jobs_total", &[], "Jobs done.", "").unwrap().add(3);
//! let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
//! let snap = reader.snapshot().unwrap();
//! let sources = [topdeck_export::Source::new("worker", 42, "main", snap.iter())];
//! let exposition = topdeck_export::Exposition::group(&sources);
//! let mut out = Vec::new();
//! topdeck_export::Format::Protobuf.encode(&mut out, &exposition).unwrap();
//!
//! let family = topdeck_export::client_model::MetricFamily::decode_length_delimited(&out[..]).unwrap();
//! assert_eq!(family.name, "jobs_total");
//! assert_eq!(family.metric[0].counter.as_ref().unwrap().value, 3.0);
//! ```

use prost::Message;
use topdeck::{BucketsValue, HistogramValue, Value};

use crate::histogram::{for_each_classic_bucket, native_positive};
use crate::model::{Exposition, Family, Kind, Series};
use crate::rules;

/// `io.prometheus.client.LabelPair`.
#[derive(Clone, PartialEq, Message)]
pub struct LabelPair {
    /// Label name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Label value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `io.prometheus.client.MetricType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    /// Uses `Metric.counter`.
    Counter = 0,
    /// Uses `Metric.gauge`.
    Gauge = 1,
    /// Uses `Metric.summary` (other runtimes' summaries, without quantiles).
    Summary = 2,
    /// Uses `Metric.untyped` (never written).
    Untyped = 3,
    /// Uses `Metric.histogram`.
    Histogram = 4,
    /// Uses `Metric.histogram` (never written).
    GaugeHistogram = 5,
}

impl From<Kind> for MetricType {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Counter => Self::Counter,
            Kind::Gauge => Self::Gauge,
            Kind::Histogram => Self::Histogram,
            Kind::Summary => Self::Summary,
        }
    }
}

/// `io.prometheus.client.Gauge`.
#[derive(Clone, PartialEq, Message)]
pub struct Gauge {
    /// Value.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `io.prometheus.client.Counter`.
#[derive(Clone, PartialEq, Message)]
pub struct Counter {
    /// Value.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `io.prometheus.client.Bucket`: one classic bucket.
#[derive(Clone, PartialEq, Message)]
pub struct Bucket {
    /// Observations at or below `upper_bound`.
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    /// Inclusive upper bound.
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
    /// Observations at or below `upper_bound`, for counts that are not
    /// integers (overrides `cumulative_count` if > 0).
    #[prost(double, tag = "4")]
    pub cumulative_count_float: f64,
}

/// `io.prometheus.client.Summary`, without quantiles.
#[derive(Clone, PartialEq, Message)]
pub struct Summary {
    /// Observations.
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    /// Sum of observations.
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
}

/// `io.prometheus.client.BucketSpan`.
#[derive(Clone, PartialEq, Message)]
pub struct BucketSpan {
    /// Gap to the previous span, or the first bucket's index.
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    /// Consecutive buckets in the span.
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// `io.prometheus.client.Histogram`, classic and native fields.
#[derive(Clone, PartialEq, Message)]
pub struct Histogram {
    /// Observations.
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    /// Sum of observations.
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    /// Classic buckets, ascending.
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    /// Observations, for counts that are not integers (overrides
    /// `sample_count` if > 0).
    #[prost(double, tag = "4")]
    pub sample_count_float: f64,
    /// Native schema (−4..=8). Always written, so a reader never mistakes
    /// schema 0 for a classic histogram.
    #[prost(sint32, optional, tag = "5")]
    pub schema: Option<i32>,
    /// Width of the zero bucket.
    #[prost(double, optional, tag = "6")]
    pub zero_threshold: Option<f64>,
    /// Observations in the zero bucket.
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    /// Spans of positive buckets.
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    /// Count deltas of the positive buckets.
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: Vec<i64>,
}

/// `io.prometheus.client.Metric`: one series.
#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    /// Labels.
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    /// Set for gauges.
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Gauge>,
    /// Set for counters.
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Counter>,
    /// Set for summaries.
    #[prost(message, optional, tag = "4")]
    pub summary: Option<Summary>,
    /// Set for histograms.
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

/// `io.prometheus.client.MetricFamily`.
#[derive(Clone, PartialEq, Message)]
pub struct MetricFamily {
    /// Name (for counters, with `_total`).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Help text.
    #[prost(string, tag = "2")]
    pub help: String,
    /// Type.
    #[prost(enumeration = "MetricType", tag = "3")]
    pub r#type: i32,
    /// Series.
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
    /// Unit (newer servers read it; older ones skip the field).
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// The message of one family, as the derived types hold it: the reference
/// the protobuf encoder is tested against, and an API for callers who want
/// messages.
pub fn family_message(exp: &Exposition<'_>, f: &Family<'_>) -> MetricFamily {
    MetricFamily {
        name: f.name.to_string(),
        help: f.help.to_owned(),
        r#type: MetricType::from(f.kind) as i32,
        metric: exp
            .series_of(f)
            .map(|s| match s.value {
                Value::Counter(v) => counter_message(exp, &s, *v),
                Value::Gauge(v) => gauge_message(exp, &s, *v as f64),
                Value::GaugeF64(v) => gauge_message(exp, &s, *v),
                Value::Histogram(h) => histogram_message(exp, &s, h),
                Value::CounterF64(v) => counter_f64_message(exp, &s, *v),
                Value::Buckets(h) => buckets_message(exp, &s, h),
                &Value::Summary { count, sum } => summary_message(exp, &s, count, sum),
            })
            .collect(),
        unit: f.declared_unit().unwrap_or_default().to_owned(),
    }
}

fn labels(exp: &Exposition<'_>, s: &Series<'_>, histogram: bool) -> Vec<LabelPair> {
    let source = &exp.sources[s.source as usize];
    source
        .labels
        .iter()
        .map(|(k, v)| LabelPair {
            name: (*k).to_owned(),
            value: v.to_string(),
        })
        .chain(s.info.labels.iter().map(|(k, v)| LabelPair {
            name: source.own_label_name(k, histogram).into_owned(),
            value: v.clone(),
        }))
        .collect()
}

/// One counter series. Counters are doubles in this format: values above
/// 2^53 lose their last digits, as in every Prometheus client.
pub fn counter_message(exp: &Exposition<'_>, s: &Series<'_>, v: u64) -> Metric {
    counter_f64_message(exp, s, rules::counter_value(v, &s.info.unit).as_f64())
}

/// One counter series another runtime keeps as a float.
pub fn counter_f64_message(exp: &Exposition<'_>, s: &Series<'_>, v: f64) -> Metric {
    Metric {
        label: labels(exp, s, false),
        counter: Some(Counter { value: v }),
        ..Default::default()
    }
}

/// One fixed-bucket histogram series: classic fields only, so that a
/// server reads it as a classic histogram. Counts go in the integer
/// fields; if any count is not whole, every count also goes exactly in
/// the float fields (see `count_fields`).
pub fn buckets_message(exp: &Exposition<'_>, s: &Series<'_>, h: &BucketsValue) -> Metric {
    let split = count_fields(h);
    let (sample_count, sample_count_float) = split(h.count);
    Metric {
        label: labels(exp, s, true),
        histogram: Some(Histogram {
            sample_count,
            sample_count_float,
            sample_sum: h.sum,
            // The +Inf bucket is implied by the sample count in this format.
            bucket: h
                .buckets
                .iter()
                .filter(|(le, _)| le.is_finite())
                .map(|&(upper_bound, c)| {
                    let (cumulative_count, cumulative_count_float) = split(c);
                    Bucket {
                        cumulative_count,
                        upper_bound,
                        cumulative_count_float,
                    }
                })
                .collect(),
            schema: None,
            zero_threshold: None,
            zero_count: 0,
            positive_span: Vec::new(),
            positive_delta: Vec::new(),
        }),
        ..Default::default()
    }
}

/// One summary series: count and sum. This format's count is an integer:
/// a fractional count loses its fraction.
pub fn summary_message(exp: &Exposition<'_>, s: &Series<'_>, count: f64, sum: f64) -> Metric {
    Metric {
        label: labels(exp, s, true),
        summary: Some(Summary {
            sample_count: count as u64,
            sample_sum: sum,
        }),
        ..Default::default()
    }
}

/// How the counts of `h` are written: `(integer field, float field)` of
/// each. The integer field always holds the count, rounded down when it is
/// not whole; the float field, which "overrides the integer one if > 0"
/// (metrics.proto), holds every count exactly when one of them is not
/// whole. Prometheus 2.42 reads only the integer fields of a classic
/// histogram (tried: a float-only count arrived as 0), newer servers the
/// float ones.
pub(crate) fn count_fields(h: &BucketsValue) -> impl Fn(f64) -> (u64, f64) {
    let whole = |c: f64| c.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&c);
    let integral = whole(h.count) && h.buckets.iter().all(|&(_, c)| whole(c));
    move |c| (c as u64, if integral { 0.0 } else { c })
}

/// One gauge series.
pub fn gauge_message(exp: &Exposition<'_>, s: &Series<'_>, v: f64) -> Metric {
    Metric {
        label: labels(exp, s, false),
        gauge: Some(Gauge { value: v }),
        ..Default::default()
    }
}

/// One histogram series: native fields and classic buckets.
pub fn histogram_message(exp: &Exposition<'_>, s: &Series<'_>, h: &HistogramValue) -> Metric {
    let mut bucket = Vec::new();
    let _ = for_each_classic_bucket::<()>(h, &s.info.unit, |upper_bound, cumulative_count| {
        // The +Inf bucket is implied by the sample count in this format.
        if upper_bound.is_finite() {
            bucket.push(Bucket {
                cumulative_count,
                upper_bound,
                cumulative_count_float: 0.0,
            });
        }
        Ok(())
    });
    let (mut spans, mut positive_delta) = (Vec::new(), Vec::new());
    native_positive(h, &mut spans, &mut positive_delta);
    let mut positive_span: Vec<BucketSpan> = spans
        .iter()
        .map(|s| BucketSpan {
            offset: s.offset,
            length: s.length,
        })
        .collect();
    if positive_span.is_empty() {
        // A no-op span marks a histogram without observations as native.
        positive_span.push(BucketSpan {
            offset: 0,
            length: 0,
        });
    }
    Metric {
        label: labels(exp, s, true),
        histogram: Some(Histogram {
            sample_count: h.count,
            sample_count_float: 0.0,
            sample_sum: h.sum,
            bucket,
            schema: Some(i32::from(h.schema)),
            zero_threshold: Some(h.zero_threshold),
            zero_count: h.zero_count,
            positive_span,
            positive_delta,
        }),
        ..Default::default()
    }
}
