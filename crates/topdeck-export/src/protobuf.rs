// SPDX-License-Identifier: Apache-2.0
//! The Prometheus protobuf exposition: length-delimited
//! `io.prometheus.client.MetricFamily` messages
//! (<https://github.com/prometheus/client_model/blob/master/io/prometheus/client/metrics.proto>),
//! the format Prometheus negotiates when native histograms are enabled.
//!
//! Histograms carry both views: the native one (schema, zero threshold,
//! zero count, positive spans and deltas, with the histogram's own bucket
//! scheme) and the classic cumulative buckets, so a server that ingests
//! either finds what it needs. The messages are written out below with
//! `prost` derives, holding only the fields topdeck fills.

use std::io::{self, Write};

use prost::Message;
use topdeck::{HistogramValue, Value};

use crate::body::{Body, Buffers};
use crate::histogram::{for_each_bound, for_each_classic_bucket, native_positive, LeCache, Span};
use crate::model::{Exposition, Family, Kind, Series};
use crate::rules;

/// The `Content-Type` of this format.
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

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
    /// Uses `Metric.summary` (never written).
    Summary = 2,
    /// Uses `Metric.untyped` (never written).
    Untyped = 3,
    /// Uses `Metric.histogram`.
    Histogram = 4,
    /// Uses `Metric.histogram` (never written).
    GaugeHistogram = 5,
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

/// Writes every family of `exp` as a length-delimited `MetricFamily`.
///
/// The bytes are those `prost` writes for [`family_message`] (a unit test
/// holds them equal), but written from borrowed strings with prost's wire
/// primitives: the derived messages need nine owned strings per series,
/// and that allocation made a scrape of 100,000 series several times
/// slower (docs/PERFORMANCE.md, "Prometheus endpoint").
pub fn encode(w: &mut impl Write, exp: &Exposition<'_>) -> io::Result<()> {
    encode_with(w, exp, &mut Buffers::default())
}

/// [`encode`] with buffers kept from a previous encoding.
pub fn encode_with(
    w: &mut impl Write,
    exp: &Exposition<'_>,
    buffers: &mut Buffers,
) -> io::Result<()> {
    encode_body(exp, buffers)?.write_to(w)
}

/// Encodes into `buffers` and returns the body, in pieces.
pub fn encode_body<'b>(exp: &Exposition<'_>, buffers: &'b mut Buffers) -> io::Result<Body<'b>> {
    let mut sc = Scratch::default();
    let mut head = Vec::with_capacity(256);
    let mut tail = Vec::with_capacity(32);
    let mut prefix = Vec::with_capacity(10);
    let (sink, les) = buffers.split();
    exp.encode_by_family(
        sink,
        |out, _, s| {
            encode_series(out, &mut sc, les, exp, s);
            Ok(())
        },
        |sink, index, f| {
            head.clear();
            tail.clear();
            prefix.clear();
            wire::string(1, &f.name, &mut head);
            wire::string(2, f.help, &mut head);
            wire::uint(3, metric_type(f.kind) as u64, &mut head);
            wire::string(5, unit_of(f), &mut tail);
            let len = head.len() + sink.families[index].len() + tail.len();
            wire::varint(len as u64, &mut prefix);
            sink.write_all(&prefix)?;
            sink.write_all(&head)?;
            sink.family(index);
            sink.write_all(&tail)
        },
    )?;
    Ok(buffers.body())
}

/// Buffers reused across series: nested messages are written into their
/// own buffer first, so that their length can prefix them.
#[derive(Default)]
struct Scratch {
    labels: Vec<u8>,
    histogram: Vec<u8>,
    spans: Vec<Span>,
    deltas: Vec<i64>,
}

/// One series as a `MetricFamily.metric` field.
fn encode_series(
    out: &mut Vec<u8>,
    sc: &mut Scratch,
    les: &mut LeCache,
    exp: &Exposition<'_>,
    s: &Series<'_>,
) {
    let histogram = matches!(s.value, Value::Histogram(_));
    let labels = exp.proto_labels(s, histogram, &mut sc.labels);
    // The value's field is sized first, so the labels go straight into
    // `out` behind the metric's length instead of through a scratch buffer.
    let value_len = match s.value {
        Value::Counter(v) => 2 + wire::double_len(*v as f64),
        Value::Gauge(v) => 2 + wire::double_len(*v as f64),
        Value::GaugeF64(v) => 2 + wire::double_len(*v),
        Value::Histogram(h) => {
            encode_histogram(&mut sc.histogram, &mut sc.spans, &mut sc.deltas, les, h);
            wire::message_len(sc.histogram.len())
        }
    };
    wire::message_header(4, labels.len() + value_len, out);
    out.extend_from_slice(labels);
    match s.value {
        Value::Counter(v) => encode_counter(out, *v),
        Value::Gauge(v) => encode_gauge(out, *v as f64),
        Value::GaugeF64(v) => encode_gauge(out, *v),
        Value::Histogram(_) => wire::message(7, &sc.histogram, out),
    }
}

/// One `Metric.label` field.
pub(crate) fn label_pair(name: &str, value: &str, metric: &mut Vec<u8>) {
    wire::label_pair(name, value, metric);
}

/// A counter's `Metric.counter` field (a double, as in every Prometheus client).
pub fn encode_counter(metric: &mut Vec<u8>, v: u64) {
    wire::double_message(3, v as f64, metric);
}

/// A gauge's `Metric.gauge` field.
pub fn encode_gauge(metric: &mut Vec<u8>, v: f64) {
    wire::double_message(2, v, metric);
}

/// The body of a `Histogram` message (native and classic fields) into `out`.
fn encode_histogram(
    out: &mut Vec<u8>,
    spans: &mut Vec<Span>,
    deltas: &mut Vec<i64>,
    les: &mut LeCache,
    h: &HistogramValue,
) {
    out.clear();
    wire::uint(1, h.count, out);
    wire::double(2, h.sum, out);
    let _ = for_each_bound::<()>(h, |bound, cum| {
        let upper_bound = les.value(bound);
        if upper_bound.is_finite() {
            wire::message_header(3, wire::uint_len(cum) + wire::double_len(upper_bound), out);
            wire::uint(1, cum, out);
            wire::double(2, upper_bound, out);
        }
        Ok(())
    });
    wire::sint32_always(5, i32::from(h.schema), out);
    wire::double_always(6, h.zero_threshold, out);
    wire::uint(7, h.zero_count, out);
    native_positive(h, spans, deltas);
    if spans.is_empty() {
        // A no-op span marks a histogram without observations as native.
        wire::message(12, &[], out);
    }
    for s in spans.iter() {
        let length = u64::from(s.length);
        wire::message_header(12, wire::sint32_len(s.offset) + wire::uint_len(length), out);
        wire::sint32(1, s.offset, out);
        wire::uint(2, length, out);
    }
    wire::packed_sint64(13, deltas, out);
}

fn metric_type(kind: Kind) -> MetricType {
    match kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
        Kind::Histogram => MetricType::Histogram,
    }
}

/// The unit written for a family: the same rule as OpenMetrics's `# UNIT`.
fn unit_of<'a>(f: &Family<'a>) -> &'a str {
    let family = match f.kind {
        Kind::Counter => rules::counter_family_name(&f.name),
        _ => &f.name,
    };
    rules::openmetrics_unit(family, f.unit).unwrap_or_default()
}

/// Protobuf fields as `prost` writes them for proto3 messages: scalars at
/// their default value are left out, repeated scalars are packed. Keys and
/// varints are pushed straight onto the `Vec` (prost's generic `BufMut`
/// versions were a sixth of a scrape); lengths come from prost.
mod wire {
    use prost::encoding::{encoded_len_varint, WireType};

    #[inline]
    pub fn varint(mut v: u64, buf: &mut Vec<u8>) {
        while v >= 0x80 {
            buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }

    #[inline]
    fn key(tag: u32, wire_type: WireType, buf: &mut Vec<u8>) {
        varint(u64::from(tag << 3 | wire_type as u32), buf);
    }

    /// Bytes of a non-default `uint` field with a one-byte key.
    pub fn uint_len(v: u64) -> usize {
        if v == 0 {
            0
        } else {
            1 + encoded_len_varint(v)
        }
    }

    /// Bytes of a non-default `sint32` field with a one-byte key.
    pub fn sint32_len(v: i32) -> usize {
        if v == 0 {
            0
        } else {
            1 + encoded_len_varint(zigzag32(v))
        }
    }

    /// Bytes of a non-default `double` field with a one-byte key.
    pub fn double_len(v: f64) -> usize {
        if v == 0.0 {
            0
        } else {
            9
        }
    }

    #[inline]
    pub fn uint(tag: u32, v: u64, buf: &mut Vec<u8>) {
        if v != 0 {
            key(tag, WireType::Varint, buf);
            varint(v, buf);
        }
    }

    fn zigzag32(v: i32) -> u64 {
        u64::from(((v << 1) ^ (v >> 31)) as u32)
    }

    fn zigzag64(v: i64) -> u64 {
        ((v << 1) ^ (v >> 63)) as u64
    }

    pub fn sint32(tag: u32, v: i32, buf: &mut Vec<u8>) {
        if v != 0 {
            sint32_always(tag, v, buf);
        }
    }

    pub fn sint32_always(tag: u32, v: i32, buf: &mut Vec<u8>) {
        key(tag, WireType::Varint, buf);
        varint(zigzag32(v), buf);
    }

    #[inline]
    pub fn double(tag: u32, v: f64, buf: &mut Vec<u8>) {
        if v != 0.0 {
            double_always(tag, v, buf);
        }
    }

    #[inline]
    pub fn double_always(tag: u32, v: f64, buf: &mut Vec<u8>) {
        key(tag, WireType::SixtyFourBit, buf);
        buf.extend_from_slice(&v.to_le_bytes());
    }

    #[inline]
    pub fn string(tag: u32, s: &str, buf: &mut Vec<u8>) {
        if !s.is_empty() {
            message(tag, s.as_bytes(), buf);
        }
    }

    #[inline]
    pub fn message_header(tag: u32, len: usize, buf: &mut Vec<u8>) {
        key(tag, WireType::LengthDelimited, buf);
        varint(len as u64, buf);
    }

    /// Bytes of a length-delimited field of `len` bytes with a one-byte key.
    pub fn message_len(len: usize) -> usize {
        1 + encoded_len_varint(len as u64) + len
    }

    #[inline]
    pub fn message(tag: u32, body: &[u8], buf: &mut Vec<u8>) {
        message_header(tag, body.len(), buf);
        buf.extend_from_slice(body);
    }

    /// A message holding one double in field 1 (`Gauge`, `Counter`).
    #[inline]
    pub fn double_message(tag: u32, v: f64, buf: &mut Vec<u8>) {
        message_header(tag, double_len(v), buf);
        double(1, v, buf);
    }

    fn string_len(s: &str) -> usize {
        if s.is_empty() {
            0
        } else {
            1 + encoded_len_varint(s.len() as u64) + s.len()
        }
    }

    /// `Metric.label`: a `LabelPair` in field 1.
    pub fn label_pair(name: &str, value: &str, buf: &mut Vec<u8>) {
        message_header(1, string_len(name) + string_len(value), buf);
        string(1, name, buf);
        string(2, value, buf);
    }

    pub fn packed_sint64(tag: u32, vs: &[i64], buf: &mut Vec<u8>) {
        if vs.is_empty() {
            return;
        }
        let len: usize = vs.iter().map(|&v| encoded_len_varint(zigzag64(v))).sum();
        message_header(tag, len, buf);
        for &v in vs {
            varint(zigzag64(v), buf);
        }
    }
}

/// The message of one family, as the derived types hold it: the reference
/// that [`encode`] is tested against, and an API for callers who want messages.
pub fn family_message(exp: &Exposition<'_>, f: &Family<'_>) -> MetricFamily {
    let r#type = match f.kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
        Kind::Histogram => MetricType::Histogram,
    };
    let unit_family = match f.kind {
        Kind::Counter => rules::counter_family_name(&f.name),
        _ => &f.name,
    };
    MetricFamily {
        name: f.name.to_string(),
        help: f.help.to_owned(),
        r#type: r#type as i32,
        metric: exp
            .series_of(f)
            .map(|s| match s.value {
                Value::Counter(v) => counter_message(exp, &s, *v),
                Value::Gauge(v) => gauge_message(exp, &s, *v as f64),
                Value::GaugeF64(v) => gauge_message(exp, &s, *v),
                Value::Histogram(h) => histogram_message(exp, &s, h),
            })
            .collect(),
        unit: rules::openmetrics_unit(unit_family, f.unit)
            .unwrap_or_default()
            .to_owned(),
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
            name: rules::own_label_name(k, histogram).into_owned(),
            value: v.clone(),
        }))
        .collect()
}

/// One counter series. Counters are doubles in this format: values above
/// 2^53 lose their last digits, as in every Prometheus client.
pub fn counter_message(exp: &Exposition<'_>, s: &Series<'_>, v: u64) -> Metric {
    Metric {
        label: labels(exp, s, false),
        counter: Some(Counter { value: v as f64 }),
        ..Default::default()
    }
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
    let _ = for_each_classic_bucket::<()>(h, |upper_bound, cumulative_count| {
        // The +Inf bucket is implied by the sample count in this format.
        if upper_bound.is_finite() {
            bucket.push(Bucket {
                cumulative_count,
                upper_bound,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fixture, latency, TEMPERATURE_HELP};

    fn decode_all(mut bytes: &[u8]) -> Vec<MetricFamily> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            out.push(MetricFamily::decode_length_delimited(&mut bytes).unwrap());
        }
        out
    }

    fn label(name: &str, value: &str) -> LabelPair {
        LabelPair {
            name: name.into(),
            value: value.into(),
        }
    }

    /// The reference: every family as the derived messages encode it.
    fn derived(exp: &Exposition<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        for f in exp.families() {
            family_message(exp, f)
                .encode_length_delimited(&mut out)
                .unwrap();
        }
        out
    }

    #[test]
    fn the_wire_writer_matches_the_derived_messages_byte_for_byte() {
        let f = fixture();
        let mut extra = f.a.clone();
        // Zeros everywhere a proto3 writer leaves fields out.
        extra.push((f.clash.0.clone(), Value::Gauge(0)));
        extra[0].1 = Value::Counter(0);
        let mut empty = latency();
        empty.buckets = vec![0; 3];
        empty.zero_count = 0;
        empty.count = 0;
        empty.sum = 0.0;
        extra[2].1 = Value::Histogram(empty);
        let mut wide = latency();
        wide.min_index = -700;
        wide.buckets = (0..300)
            .map(|i| if i % 7 == 0 { 1000 + i } else { 0 })
            .collect();
        wide.count = wide.buckets.iter().sum::<u64>() + wide.zero_count;
        wide.sum = -2.5;
        extra.push((f.a[2].0.clone(), Value::Histogram(wide)));
        let sources = vec![
            crate::Source::new("p", 1, "main", extra.iter().map(|(i, v)| (i, v))),
            crate::Source::unlabelled(f.b.iter().map(|(i, v)| (i, v))),
        ];
        for sources in [f.sources(), sources] {
            let exp = Exposition::group(&sources);
            let mut fast = Vec::new();
            encode(&mut fast, &exp).unwrap();
            assert_eq!(fast, derived(&exp));
        }
    }

    #[test]
    fn families_decode_back_with_labels_types_and_values() {
        let f = fixture();
        let sources = f.sources();
        let exp = Exposition::group(&sources);
        let mut out = Vec::new();
        encode(&mut out, &exp).unwrap();
        let families = decode_all(&out);
        let names: Vec<_> = families.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["jobs_total", "latency_seconds", "temperature_celsius"]
        );

        let jobs = &families[0];
        assert_eq!(jobs.r#type, MetricType::Counter as i32);
        assert_eq!(jobs.help, "Jobs done.");
        assert_eq!(
            jobs.metric[1].label,
            [
                label("process", "worker \"b\""),
                label("pid", "11"),
                label("registry", "side"),
                label("queue", "fast")
            ]
        );
        assert_eq!(jobs.metric[1].counter, Some(Counter { value: 4.0 }));

        let temp = &families[2];
        assert_eq!(temp.r#type, MetricType::Gauge as i32);
        assert_eq!(temp.help, TEMPERATURE_HELP);
        assert_eq!(temp.unit, "celsius");
        assert_eq!(temp.metric[0].gauge, Some(Gauge { value: -3.0 }));
        assert_eq!(temp.metric[1].gauge, Some(Gauge { value: 21.5 }));
    }

    #[test]
    fn histograms_carry_native_and_classic_buckets() {
        let f = fixture();
        let sources = f.sources();
        let exp = Exposition::group(&sources);
        let mut out = Vec::new();
        encode(&mut out, &exp).unwrap();
        let lat = &decode_all(&out)[1];
        assert_eq!(lat.r#type, MetricType::Histogram as i32);
        assert_eq!(lat.unit, "seconds");
        let m = &lat.metric[0];
        assert_eq!(m.label[2], label("exported_le", "x"));
        let h = m.histogram.as_ref().unwrap();
        let want = latency();
        assert_eq!((h.sample_count, h.sample_sum), (want.count, want.sum));
        assert_eq!(h.schema, Some(0));
        assert_eq!(h.zero_threshold, Some(0.5));
        assert_eq!(h.zero_count, 1);
        // Buckets [2, 0, 1] from index 0: one span, the empty bucket inside.
        assert_eq!(
            h.positive_span,
            [BucketSpan {
                offset: 0,
                length: 3
            }]
        );
        assert_eq!(h.positive_delta, [2, -2, 1]);
        let classic: Vec<_> = h
            .bucket
            .iter()
            .map(|b| (b.upper_bound, b.cumulative_count))
            .collect();
        assert_eq!(classic, [(0.5, 1), (1.0, 3), (2.0, 3), (4.0, 4)]);
    }

    #[test]
    fn an_empty_histogram_is_still_native() {
        let f = fixture();
        let mut empty = f.a[2].clone();
        empty.1 = Value::Histogram(HistogramValue {
            zero_count: 0,
            buckets: vec![0; 3],
            count: 0,
            sum: 0.0,
            max: None,
            ..latency()
        });
        let sources = [crate::Source::new("p", 1, "main", [(&empty.0, &empty.1)])];
        let exp = Exposition::group(&sources);
        let mut out = Vec::new();
        encode(&mut out, &exp).unwrap();
        let h = decode_all(&out)[0].metric[0].histogram.clone().unwrap();
        assert_eq!(
            h.positive_span,
            [BucketSpan {
                offset: 0,
                length: 0
            }]
        );
        assert!(h.positive_delta.is_empty() && h.bucket.is_empty());
        assert_eq!(h.schema, Some(0));
    }
}
