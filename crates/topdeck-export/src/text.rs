// SPDX-License-Identifier: Apache-2.0
//! The two text formats from one writer: Prometheus text 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format>)
//! and OpenMetrics 1.0
//! (<https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md>).
//! Their sample lines are the same; where they differ, [`Flavour`] says.
//!
//! Histograms are written as classic buckets at a fixed set of bounds
//! per histogram (see [`crate::histogram`]).

use std::io::{self, Write};

use topdeck::{BucketsValue, HistogramValue, Value};

use crate::body::{Body, Buffers};
use crate::histogram::{for_each_bound, LeCache};
use crate::model::{has_buckets, Exposition, Family, Kind, Run};
use crate::rules::{self, write_f64, write_i64, write_u64, CounterValue};
use crate::source::LabelEncoding;

/// Which text format to write.
///
/// Neither writes exemplars or OpenMetrics' `_created` samples: topdeck
/// keeps neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavour {
    /// Prometheus text 0.0.4: `# HELP` then `# TYPE`, help escaping
    /// backslashes and line feeds; a histogram's `_sum` before its `_count`.
    Prometheus,
    /// OpenMetrics 1.0: counter families named without `_total` (their
    /// samples keep it); `# TYPE`, `# UNIT` (see [`rules::openmetrics_unit`])
    /// and `# HELP`, help escaping quotes too; a histogram's `_count`
    /// before its `_sum`; `# EOF` at the end.
    OpenMetrics,
}

/// Encodes the families of `exp` at positions `run` of its name order into
/// `buffers` and returns them, in pieces; OpenMetrics' `# EOF` ends the run
/// that holds the last family (or an exposition of none).
pub(crate) fn encode_body<'b>(
    flavour: Flavour,
    exp: &Exposition<'_>,
    buffers: &'b mut Buffers,
    run: &Run,
) -> io::Result<Body<'b>> {
    let last = run.ends(exp.len());
    let mut labels = Vec::with_capacity(256);
    let (sink, les) = buffers.split();
    exp.encode_by_family(
        sink,
        run,
        |out, f, s| {
            let labels = exp.labels(s, LabelEncoding::Text, has_buckets(s.value), &mut labels);
            let name = f.name.as_bytes();
            match s.value {
                Value::Counter(v) => match rules::counter_value(*v, &s.info.unit) {
                    CounterValue::Integer(v) => sample(out, name, b"", labels, |w| write_u64(w, v)),
                    CounterValue::Seconds(v) => sample(out, name, b"", labels, |w| write_f64(w, v)),
                },
                Value::Gauge(v) => sample(out, name, b"", labels, |w| write_i64(w, *v)),
                Value::GaugeF64(v) => sample(out, name, b"", labels, |w| write_f64(w, *v)),
                Value::Histogram(h) => {
                    encode_histogram(out, flavour, name, labels, h, &s.info.unit, les)
                }
                Value::CounterF64(v) => sample(out, name, b"", labels, |w| write_f64(w, *v)),
                Value::Buckets(h) => encode_buckets(out, flavour, name, labels, h),
                Value::Summary { count, sum } => {
                    sum_and_count(out, flavour, name, labels, *sum, |w| write_f64(w, *count))
                }
            }
        },
        |sink, index, f, head| {
            if head {
                encode_family_header(sink, flavour, f)?;
            }
            sink.family(index);
            Ok(())
        },
    )?;
    if flavour == Flavour::OpenMetrics && last {
        sink.write_all(b"# EOF\n")?;
    }
    Ok(buffers.body())
}

/// A family's `# TYPE`, `# HELP` and, in OpenMetrics, `# UNIT`.
fn encode_family_header(w: &mut impl Write, flavour: Flavour, f: &Family<'_>) -> io::Result<()> {
    match flavour {
        Flavour::Prometheus => {
            help_line(w, &f.name, f.help, rules::write_help_text)?;
            type_line(w, &f.name, f.kind)
        }
        Flavour::OpenMetrics => {
            let name = f.openmetrics_name();
            type_line(w, name, f.kind)?;
            if let Some(unit) = f.declared_unit() {
                w.write_all(b"# UNIT ")?;
                w.write_all(name.as_bytes())?;
                w.write_all(b" ")?;
                w.write_all(unit.as_bytes())?;
                w.write_all(b"\n")?;
            }
            help_line(w, name, f.help, rules::write_help_openmetrics)
        }
    }
}

fn type_line(w: &mut impl Write, name: &str, kind: Kind) -> io::Result<()> {
    w.write_all(b"# TYPE ")?;
    w.write_all(name.as_bytes())?;
    w.write_all(match kind {
        Kind::Counter => b" counter\n",
        Kind::Gauge => b" gauge\n",
        Kind::Histogram => b" histogram\n",
        Kind::Summary => b" summary\n",
    })
}

/// `# HELP`, unless there is no help; `escape` is the flavour's escaping.
fn help_line<W: Write>(
    w: &mut W,
    name: &str,
    help: &str,
    escape: fn(&mut W, &str) -> io::Result<()>,
) -> io::Result<()> {
    if help.is_empty() {
        return Ok(());
    }
    w.write_all(b"# HELP ")?;
    w.write_all(name.as_bytes())?;
    w.write_all(b" ")?;
    escape(w, help)?;
    w.write_all(b"\n")
}

/// One sample line; `labels` as [`rules::write_sample_start`] takes them.
#[inline]
fn sample<W: Write>(
    w: &mut W,
    name: &[u8],
    suffix: &[u8],
    labels: &[u8],
    value: impl FnOnce(&mut W) -> io::Result<()>,
) -> io::Result<()> {
    rules::write_sample_start(w, name, suffix, labels, None)?;
    value(w)?;
    w.write_all(b"\n")
}

/// One histogram of `unit`: `_bucket` lines at its classic bounds (see
/// [`crate::histogram::ClassicBounds`], `+Inf` last), then `_sum` and
/// `_count` in the flavour's order.
fn encode_histogram<W: Write>(
    w: &mut W,
    flavour: Flavour,
    name: &[u8],
    labels: &[u8],
    h: &HistogramValue,
    unit: &str,
    les: &mut LeCache,
) -> io::Result<()> {
    let mut scratch = Vec::with_capacity(32);
    let mut prefix = Vec::with_capacity(name.len() + labels.len() + 16);
    rules::bucket_prefix(name, labels, &mut prefix);
    for_each_bound(h, unit, |bound, cum| {
        bucket_line(w, &prefix, les.text(bound, &mut scratch), |w| {
            write_u64(w, cum)
        })
    })?;
    sum_and_count(w, flavour, name, labels, h.sum, |w| write_u64(w, h.count))
}

/// One fixed-bucket histogram: `_bucket` lines at its finite bounds, `+Inf`
/// last with the count (so that the two always agree, whatever the source
/// put in its last bucket), then `_sum` and `_count`. Counts are floats.
fn encode_buckets<W: Write>(
    w: &mut W,
    flavour: Flavour,
    name: &[u8],
    labels: &[u8],
    h: &BucketsValue,
) -> io::Result<()> {
    let mut prefix = Vec::with_capacity(name.len() + labels.len() + 16);
    rules::bucket_prefix(name, labels, &mut prefix);
    let mut le = Vec::with_capacity(32);
    let finite = h.buckets.iter().filter(|(bound, _)| bound.is_finite());
    for &(bound, cum) in finite.chain([&(f64::INFINITY, h.count)]) {
        le.clear();
        write_f64(&mut le, bound)?;
        bucket_line(w, &prefix, &le, |w| write_f64(w, cum))?;
    }
    sum_and_count(w, flavour, name, labels, h.sum, |w| write_f64(w, h.count))
}

/// One `_bucket` line: `prefix` from [`rules::bucket_prefix`], the bound's
/// text, and the cumulative count as `count` writes it.
#[inline]
fn bucket_line<W: Write>(
    w: &mut W,
    prefix: &[u8],
    le: &[u8],
    count: impl FnOnce(&mut W) -> io::Result<()>,
) -> io::Result<()> {
    w.write_all(prefix)?;
    w.write_all(le)?;
    w.write_all(b"\"} ")?;
    count(w)?;
    w.write_all(b"\n")
}

/// `_sum` and `_count` (written by `count`), in the flavour's order.
fn sum_and_count<W: Write>(
    w: &mut W,
    flavour: Flavour,
    name: &[u8],
    labels: &[u8],
    sum: f64,
    count: impl FnOnce(&mut W) -> io::Result<()>,
) -> io::Result<()> {
    let sum = |w: &mut W| sample(w, name, b"_sum", labels, |w| write_f64(w, sum));
    let count = |w: &mut W| sample(w, name, b"_count", labels, count);
    match flavour {
        Flavour::Prometheus => {
            sum(w)?;
            count(w)
        }
        Flavour::OpenMetrics => {
            count(w)?;
            sum(w)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fixture, foreign, Fixture};
    use crate::Source;

    fn encode(flavour: Flavour, exp: &Exposition<'_>) -> String {
        let mut out = Vec::new();
        encode_body(
            flavour,
            exp,
            &mut Buffers::default(),
            &Run::whole(0..exp.len()),
        )
        .unwrap()
        .write_to(&mut out)
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    fn encoded(flavour: Flavour, f: &Fixture) -> String {
        let sources = f.sources();
        encode(flavour, &Exposition::group(&sources))
    }

    /// The fixture's sample lines both flavours write alike.
    const JOBS: &str = r#"jobs_total{process="worker",pid="10",queue="fast"} 3
jobs_total{process="worker \"b\"",pid="11",registry="side",queue="fast"} 4
"#;
    const BUCKETS: &str = r#"latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="0.5"} 1
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="1.0"} 3
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="2.0"} 3
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="4.0"} 4
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="+Inf"} 4
"#;
    const SUM: &str = "latency_seconds_sum{process=\"worker\",pid=\"10\",exported_le=\"x\"} 5.25\n";
    const COUNT: &str =
        "latency_seconds_count{process=\"worker\",pid=\"10\",exported_le=\"x\"} 4\n";
    const TEMPERATURES: &str = r#"temperature_celsius{process="worker",pid="10"} -3
temperature_celsius{process="worker \"b\"",pid="11",registry="side"} 21.5
"#;

    #[test]
    fn families_are_grouped_sorted_and_labelled_by_source() {
        let expected = format!(
            r#"# HELP jobs_total Jobs done.
# TYPE jobs_total counter
{JOBS}# HELP latency_seconds Time to serve.
# TYPE latency_seconds histogram
{BUCKETS}{SUM}{COUNT}# HELP temperature_celsius Now, with "quotes" and a \\ backslash\nand a line.
# TYPE temperature_celsius gauge
{TEMPERATURES}"#
        );
        assert_eq!(encoded(Flavour::Prometheus, &fixture()), expected);
    }

    #[test]
    fn a_type_clash_keeps_the_first_type_and_counts_the_rest() {
        let f = fixture();
        let mut sources = f.sources();
        sources.push(Source::new("other", 12, "main", [(&f.clash.0, &f.clash.1)]));
        let exp = Exposition::group(&sources);
        assert_eq!(exp.conflicts(), 1);
        for flavour in [Flavour::Prometheus, Flavour::OpenMetrics] {
            assert!(!encode(flavour, &exp).contains("other"), "{flavour:?}");
        }
    }

    #[test]
    fn unlabelled_sources_have_no_braces() {
        let f = fixture();
        let sources = [Source::unlabelled([(&f.clash.0, &f.clash.1)])];
        let exp = Exposition::group(&sources);
        assert_eq!(
            encode(Flavour::Prometheus, &exp),
            "# TYPE jobs_total gauge\njobs_total 1\n"
        );
    }

    #[test]
    fn openmetrics_counters_lose_total_in_the_family_name_and_units_are_suffixes() {
        let expected = format!(
            r#"# TYPE jobs counter
# HELP jobs Jobs done.
{JOBS}# TYPE latency_seconds histogram
# UNIT latency_seconds seconds
# HELP latency_seconds Time to serve.
{BUCKETS}{COUNT}{SUM}# TYPE temperature_celsius gauge
# UNIT temperature_celsius celsius
# HELP temperature_celsius Now, with \"quotes\" and a \\ backslash\nand a line.
{TEMPERATURES}# EOF
"#
        );
        assert_eq!(encoded(Flavour::OpenMetrics, &fixture()), expected);
    }

    #[test]
    fn a_counter_of_nanoseconds_is_exposed_in_seconds_and_other_counters_as_integers() {
        let snap = crate::testing::busy_nanoseconds(|r| {
            r.counter("jobs_total", &[], "", "").unwrap().add(3);
        });
        let sources = [Source::unlabelled(snap.iter())];
        let exp = Exposition::group(&sources);
        assert_eq!(
            encode(Flavour::Prometheus, &exp),
            "# HELP busy_seconds_total Busy.\n# TYPE busy_seconds_total counter\n\
             busy_seconds_total 1.25\n# TYPE jobs_total counter\njobs_total 3\n"
        );
        assert_eq!(
            encode(Flavour::OpenMetrics, &exp),
            "# TYPE busy_seconds counter\n# UNIT busy_seconds seconds\n# HELP busy_seconds Busy.\n\
             busy_seconds_total 1.25\n# TYPE jobs counter\njobs_total 3\n# EOF\n"
        );
    }

    /// The foreign fixture's sample lines both flavours write alike.
    const PY_BUCKETS: &str = r#"py_latency_seconds_bucket{process="py",pid="20",exported_le="own",le="0.005"} 1.0
py_latency_seconds_bucket{process="py",pid="20",exported_le="own",le="0.1"} 3.0
py_latency_seconds_bucket{process="py",pid="20",exported_le="own",le="1.0"} 3.0
py_latency_seconds_bucket{process="py",pid="20",exported_le="own",le="+Inf"} 4.0
"#;
    const PY_SIZE_BUCKETS: &str = r#"py_size_bytes_bucket{process="py",pid="20",le="1.0"} 0.5
py_size_bytes_bucket{process="py",pid="20",le="+Inf"} 2.5
"#;
    const PY_REQUESTS: &str = "py_requests_total{process=\"py\",pid=\"20\",method=\"GET\"} 12.5\n";

    fn foreign_encoded(flavour: Flavour) -> String {
        let values = foreign();
        let sources = [Source::new(
            "py",
            20,
            "main",
            values.iter().map(|(i, v)| (i, v)),
        )];
        encode(flavour, &Exposition::group(&sources))
    }

    #[test]
    fn foreign_values_are_written_as_prometheus_client_writes_them() {
        let sum_count = |name: &str, sum: &str, count: &str, labels: &str| {
            [
                format!("{name}_sum{{process=\"py\",pid=\"20\"{labels}}} {sum}\n"),
                format!("{name}_count{{process=\"py\",pid=\"20\"{labels}}} {count}\n"),
            ]
        };
        let [lat_sum, lat_count] =
            sum_count("py_latency_seconds", "1.25", "4.0", ",exported_le=\"own\"");
        let [size_sum, size_count] = sum_count("py_size_bytes", "3.0", "2.5", "");
        let [wait_sum, wait_count] = sum_count("py_wait_seconds", "0.75", "3.0", "");
        let text = format!(
            "# TYPE py_latency_seconds histogram\n{PY_BUCKETS}{lat_sum}{lat_count}\
             # HELP py_requests_total Requests.\n# TYPE py_requests_total counter\n{PY_REQUESTS}\
             # TYPE py_size_bytes histogram\n{PY_SIZE_BUCKETS}{size_sum}{size_count}\
             # HELP py_wait_seconds Waits.\n# TYPE py_wait_seconds summary\n{wait_sum}{wait_count}"
        );
        assert_eq!(foreign_encoded(Flavour::Prometheus), text);
        let openmetrics = format!(
            "# TYPE py_latency_seconds histogram\n# UNIT py_latency_seconds seconds\n\
             {PY_BUCKETS}{lat_count}{lat_sum}\
             # TYPE py_requests counter\n# HELP py_requests Requests.\n{PY_REQUESTS}\
             # TYPE py_size_bytes histogram\n# UNIT py_size_bytes bytes\n\
             {PY_SIZE_BUCKETS}{size_count}{size_sum}\
             # TYPE py_wait_seconds summary\n# UNIT py_wait_seconds seconds\n\
             # HELP py_wait_seconds Waits.\n{wait_count}{wait_sum}# EOF\n"
        );
        assert_eq!(foreign_encoded(Flavour::OpenMetrics), openmetrics);
    }

    #[test]
    fn a_bucket_list_without_inf_still_ends_in_inf_with_the_count() {
        let (info, _) = foreign().swap_remove(2);
        let cut = Value::Buckets(Box::new(topdeck::BucketsValue {
            buckets: vec![(f64::NEG_INFINITY, 0.0), (1.0, 0.5), (f64::NAN, 1.0)],
            count: 2.5,
            sum: 3.0,
        }));
        let sources = [Source::new("py", 20, "main", [(&info, &cut)])];
        let text = encode(Flavour::Prometheus, &Exposition::group(&sources));
        assert!(text.contains(PY_SIZE_BUCKETS), "{text}");
    }

    #[test]
    fn foreign_histograms_join_native_ones_and_a_summary_of_their_name_clashes() {
        let f = fixture();
        let mut values = foreign();
        values[1].0.name = "latency_seconds".into();
        values[3].0.name = "latency_seconds".into();
        let mut sources = f.sources();
        sources.push(Source::new(
            "py",
            20,
            "main",
            values.iter().map(|(i, v)| (i, v)),
        ));
        let exp = Exposition::group(&sources);
        assert_eq!(exp.conflicts(), 1, "the summary");
        let text = encode(Flavour::Prometheus, &exp);
        let family: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("latency_seconds_count"))
            .collect();
        assert_eq!(family.len(), 2, "{text}");
        assert!(family[1].ends_with("} 4.0"), "{text}");
        assert!(
            !text.contains("py_wait") && !text.contains("summary"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_exposition_is_just_eof_in_openmetrics_and_nothing_in_text() {
        let exp = Exposition::group(&[]);
        assert_eq!(encode(Flavour::OpenMetrics, &exp), "# EOF\n");
        assert_eq!(encode(Flavour::Prometheus, &exp), "");
    }
}
