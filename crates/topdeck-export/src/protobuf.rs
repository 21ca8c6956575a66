// SPDX-License-Identifier: Apache-2.0
//! The Prometheus protobuf exposition: length-delimited
//! `io.prometheus.client.MetricFamily` messages (see [`crate::client_model`]),
//! the format Prometheus negotiates when native histograms are enabled.
//!
//! Histograms carry both views: the native one (schema, zero threshold,
//! zero count, positive spans and deltas, with the histogram's own bucket
//! scheme, every bucket) and the classic cumulative buckets at the fixed
//! bounds the text formats write, so a server that ingests either finds
//! what it needs, and one that ingests classic buckets stores as many
//! series whichever format it asked for.

use std::io::{self, Write};

use topdeck::{BucketsValue, HistogramValue, Value};

use crate::body::{Body, Buffers};
use crate::client_model::{count_fields, MetricType};
use crate::histogram::{for_each_bound, native_positive, LeCache, Span};
use crate::model::{has_buckets, Exposition, Run, Series};
use crate::rules;
use crate::source::LabelEncoding;
use crate::wire;

/// Encodes every family of `exp` into `buffers`, as a length-delimited
/// `MetricFamily` each, and returns the body, in pieces.
///
/// The bytes are those `prost` writes for
/// [`family_message`](crate::client_model::family_message) (a unit test
/// holds them equal), but written from borrowed strings with prost's wire
/// primitives: the derived messages need nine owned strings per series,
/// and that allocation made a scrape of 100,000 series several times
/// slower (docs/PERFORMANCE.md, "Prometheus endpoint").
///
/// Only the families of `run` are written: a family is one message, so
/// runs of protobuf are never cut out of one.
pub(crate) fn encode_body<'b>(
    exp: &Exposition<'_>,
    buffers: &'b mut Buffers,
    run: &Run,
) -> io::Result<Body<'b>> {
    let mut sc = Scratch::default();
    let mut head = Vec::with_capacity(256);
    let mut tail = Vec::with_capacity(32);
    let mut prefix = Vec::with_capacity(10);
    let (sink, les) = buffers.split();
    exp.encode_by_family(
        sink,
        run,
        |out, _, s| {
            encode_series(out, &mut sc, les, exp, s);
            Ok(())
        },
        |sink, index, f, _| {
            head.clear();
            tail.clear();
            prefix.clear();
            wire::string(1, &f.name, &mut head);
            wire::string(2, f.help, &mut head);
            wire::uint(3, MetricType::from(f.kind) as u64, &mut head);
            wire::string(5, f.declared_unit().unwrap_or_default(), &mut tail);
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
    let labels = exp.labels(
        s,
        LabelEncoding::Protobuf,
        has_buckets(s.value),
        &mut sc.labels,
    );
    let counter = |v: u64| rules::counter_value(v, &s.info.unit).as_f64();
    // The value's field is sized first, so the labels go straight into
    // `out` behind the metric's length instead of through a scratch buffer.
    let value_len = match s.value {
        Value::Counter(v) => 2 + wire::double_len(counter(*v)),
        Value::Gauge(v) => 2 + wire::double_len(*v as f64),
        Value::GaugeF64(v) => 2 + wire::double_len(*v),
        Value::Histogram(h) => {
            let (out, spans, deltas) = (&mut sc.histogram, &mut sc.spans, &mut sc.deltas);
            encode_histogram(out, spans, deltas, les, h, &s.info.unit);
            wire::message_len(sc.histogram.len())
        }
        Value::CounterF64(v) => 2 + wire::double_len(*v),
        Value::Buckets(h) => {
            encode_buckets(&mut sc.histogram, h);
            wire::message_len(sc.histogram.len())
        }
        &Value::Summary { count, sum } => {
            encode_summary(&mut sc.histogram, count, sum);
            wire::message_len(sc.histogram.len())
        }
    };
    wire::message_header(4, labels.len() + value_len, out);
    out.extend_from_slice(labels);
    match s.value {
        Value::Counter(v) => encode_counter(out, counter(*v)),
        Value::Gauge(v) => encode_gauge(out, *v as f64),
        Value::GaugeF64(v) => encode_gauge(out, *v),
        Value::Histogram(_) | Value::Buckets(_) => wire::message(7, &sc.histogram, out),
        Value::CounterF64(v) => wire::double_message(3, *v, out),
        Value::Summary { .. } => wire::message(4, &sc.histogram, out),
    }
}

/// A counter's `Metric.counter` field (a double, as in every Prometheus client).
fn encode_counter(metric: &mut Vec<u8>, v: f64) {
    wire::double_message(3, v, metric);
}

/// A gauge's `Metric.gauge` field.
fn encode_gauge(metric: &mut Vec<u8>, v: f64) {
    wire::double_message(2, v, metric);
}

/// The body of a `Histogram` message into `out`: the native fields with
/// every bucket, and the classic ones at the fixed bounds of a histogram
/// of `unit` (see [`crate::histogram::ClassicBounds`]), for a server that
/// takes protobuf without native histograms.
fn encode_histogram(
    out: &mut Vec<u8>,
    spans: &mut Vec<Span>,
    deltas: &mut Vec<i64>,
    les: &mut LeCache,
    h: &HistogramValue,
    unit: &str,
) {
    out.clear();
    wire::uint(1, h.count, out);
    wire::double(2, h.sum, out);
    let _ = for_each_bound::<()>(h, unit, |bound, cum| {
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

/// The body of a classic-only `Histogram` message into `out`, counts in
/// the integer fields and, unless all are whole, in the float ones too
/// (see [`buckets_message`](crate::client_model::buckets_message)).
fn encode_buckets(out: &mut Vec<u8>, h: &BucketsValue) {
    out.clear();
    let split = count_fields(h);
    let (count, count_float) = split(h.count);
    wire::uint(1, count, out);
    wire::double(2, h.sum, out);
    for &(upper_bound, c) in h.buckets.iter().filter(|(le, _)| le.is_finite()) {
        let (cum, cum_float) = split(c);
        let len = wire::uint_len(cum) + wire::double_len(upper_bound) + wire::double_len(cum_float);
        wire::message_header(3, len, out);
        wire::uint(1, cum, out);
        wire::double(2, upper_bound, out);
        wire::double(4, cum_float, out);
    }
    wire::double(4, count_float, out);
}

/// The body of a `Summary` message (count and sum, no quantiles) into `out`.
fn encode_summary(out: &mut Vec<u8>, count: f64, sum: f64) {
    out.clear();
    wire::uint(1, count as u64, out);
    wire::double(2, sum, out);
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::client_model::{
        family_message, Bucket, BucketSpan, Counter, Gauge, LabelPair, MetricFamily, Summary,
    };
    use crate::testing::{fixture, foreign, latency, TEMPERATURE_HELP};

    fn encode(w: &mut Vec<u8>, exp: &Exposition<'_>) -> io::Result<()> {
        encode_body(exp, &mut Buffers::default(), &Run::whole(0..exp.len()))?.write_to(w)
    }

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
        extra[2].1 = Value::Histogram(Box::new(empty));
        let mut wide = latency();
        wide.min_index = -700;
        wide.buckets = (0..300)
            .map(|i| if i % 7 == 0 { 1000 + i } else { 0 })
            .collect();
        wide.count = wide.buckets.iter().sum::<u64>() + wide.zero_count;
        wide.sum = -2.5;
        extra.push((f.a[2].0.clone(), Value::Histogram(Box::new(wide))));
        let sources = vec![
            crate::Source::new("p", 1, "main", extra.iter().map(|(i, v)| (i, v))),
            crate::Source::unlabelled(f.b.iter().map(|(i, v)| (i, v))),
        ];
        // Other runtimes' values, and their zeros.
        let mut other = foreign();
        other.extend(foreign().into_iter().map(|(mut info, v)| {
            info.name = format!("zero_{}", info.name);
            let v = match v {
                Value::CounterF64(_) => Value::CounterF64(0.0),
                Value::Buckets(mut h) => {
                    h.buckets.iter_mut().for_each(|b| b.1 = 0.0);
                    (h.count, h.sum) = (0.0, 0.0);
                    Value::Buckets(h)
                }
                _ => Value::Summary {
                    count: 0.0,
                    sum: 0.0,
                },
            };
            (info, v)
        }));
        let other = vec![crate::Source::new(
            "py",
            2,
            "main",
            other.iter().map(|(i, v)| (i, v)),
        )];
        for sources in [f.sources(), sources, other] {
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
    fn a_counter_of_nanoseconds_decodes_in_seconds() {
        let snap = crate::testing::busy_nanoseconds(|_| {});
        let sources = [crate::Source::unlabelled(snap.iter())];
        let exp = Exposition::group(&sources);
        let mut out = Vec::new();
        encode(&mut out, &exp).unwrap();
        let busy = &decode_all(&out)[0];
        assert_eq!(busy.r#type, MetricType::Counter as i32);
        assert_eq!(busy.unit, "seconds");
        assert_eq!(busy.metric[0].counter, Some(Counter { value: 1.25 }));
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
    fn foreign_values_are_counters_classic_histograms_and_summaries() {
        let values = foreign();
        let sources = [crate::Source::new(
            "py",
            20,
            "main",
            values.iter().map(|(i, v)| (i, v)),
        )];
        let mut out = Vec::new();
        encode(&mut out, &Exposition::group(&sources)).unwrap();
        let families = decode_all(&out);
        let names: Vec<_> = families.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "py_latency_seconds",
                "py_requests_total",
                "py_size_bytes",
                "py_wait_seconds"
            ]
        );
        let [latency, requests, size, wait] = &families[..] else {
            unreachable!()
        };
        assert_eq!(requests.r#type, MetricType::Counter as i32);
        assert_eq!(requests.metric[0].counter, Some(Counter { value: 12.5 }));

        // Whole counts in the integer fields; no native field, so classic.
        assert_eq!(latency.r#type, MetricType::Histogram as i32);
        assert_eq!(latency.metric[0].label[2], label("exported_le", "own"));
        let h = latency.metric[0].histogram.as_ref().unwrap();
        assert_eq!(
            (h.sample_count, h.sample_count_float, h.sample_sum),
            (4, 0.0, 1.25)
        );
        let bucket = |upper_bound, cumulative_count, cumulative_count_float| Bucket {
            cumulative_count,
            upper_bound,
            cumulative_count_float,
        };
        assert_eq!(
            h.bucket,
            [
                bucket(0.005, 1, 0.0),
                bucket(0.1, 3, 0.0),
                bucket(1.0, 3, 0.0)
            ]
        );
        assert!(h.schema.is_none() && h.zero_threshold.is_none() && h.positive_span.is_empty());

        // A fractional count puts every count in the float fields too,
        // rounded down in the integer ones for servers that read only those.
        let h = size.metric[0].histogram.as_ref().unwrap();
        assert_eq!(
            (h.sample_count, h.sample_count_float, h.sample_sum),
            (2, 2.5, 3.0)
        );
        assert_eq!(h.bucket, [bucket(1.0, 0, 0.5)]);
        assert!(h.schema.is_none());

        assert_eq!(wait.r#type, MetricType::Summary as i32);
        assert_eq!(wait.unit, "seconds");
        assert_eq!(
            wait.metric[0].summary,
            Some(Summary {
                sample_count: 3,
                sample_sum: 0.75
            })
        );
        assert!(wait.metric[0].histogram.is_none());
    }

    #[test]
    fn an_empty_histogram_is_still_native() {
        let f = fixture();
        let mut empty = f.a[2].clone();
        let l = latency();
        empty.1 = Value::Histogram(Box::new(HistogramValue::empty(
            l.schema,
            l.zero_threshold,
            l.min_index,
            3,
        )));
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
        assert!(h.positive_delta.is_empty());
        assert_eq!(h.schema, Some(0));
        // The classic buckets are there, at the bounds they will keep.
        let classic: Vec<_> = h
            .bucket
            .iter()
            .map(|b| (b.upper_bound, b.cumulative_count))
            .collect();
        assert_eq!(classic, [(0.5, 0), (1.0, 0), (2.0, 0), (4.0, 0)]);
    }
}
