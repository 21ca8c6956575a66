// SPDX-License-Identifier: Apache-2.0
//! OpenMetrics 1.0 text:
//! <https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md>.
//!
//! Differences from the 0.0.4 text format that matter here: counter
//! families are named without `_total` while their samples keep it,
//! `# UNIT` may be declared (see [`crate::rules::openmetrics_unit`]), help
//! escapes quotes too, and the exposition ends with `# EOF`.

use std::io::{self, Write};

use topdeck::{HistogramValue, Value};

use crate::body::{Body, Buffers};
use crate::histogram::{for_each_bound, LeCache};
use crate::model::{Exposition, Family, Kind};
use crate::rules::{self, write_f64, write_i64, write_u64};

/// The `Content-Type` of this format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Writes every family of `exp`, then `# EOF`.
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
    let mut labels = Vec::with_capacity(256);
    let (sink, les) = buffers.split();
    exp.encode_by_family(
        sink,
        |out, f, s| {
            let histogram = matches!(s.value, Value::Histogram(_));
            let labels = exp.text_labels(s, histogram, &mut labels);
            let name = f.name.as_bytes();
            match s.value {
                Value::Counter(v) => encode_counter(out, name, labels, *v),
                Value::Gauge(v) => encode_gauge(out, name, labels, *v),
                Value::GaugeF64(v) => encode_gauge_f64(out, name, labels, *v),
                Value::Histogram(h) => encode_histogram(out, name, labels, h, les),
            }
        },
        |sink, index, f| {
            encode_family_header(sink, f)?;
            sink.family(index);
            Ok(())
        },
    )?;
    sink.write_all(b"# EOF\n")?;
    Ok(buffers.body())
}

/// `# TYPE`, `# UNIT` and `# HELP` of a family.
fn encode_family_header(w: &mut impl Write, f: &Family<'_>) -> io::Result<()> {
    let family = match f.kind {
        Kind::Counter => rules::counter_family_name(&f.name),
        _ => &f.name,
    };
    w.write_all(b"# TYPE ")?;
    w.write_all(family.as_bytes())?;
    w.write_all(match f.kind {
        Kind::Counter => b" counter\n",
        Kind::Gauge => b" gauge\n",
        Kind::Histogram => b" histogram\n",
    })?;
    if let Some(unit) = rules::openmetrics_unit(family, f.unit) {
        w.write_all(b"# UNIT ")?;
        w.write_all(family.as_bytes())?;
        w.write_all(b" ")?;
        w.write_all(unit.as_bytes())?;
        w.write_all(b"\n")?;
    }
    if !f.help.is_empty() {
        w.write_all(b"# HELP ")?;
        w.write_all(family.as_bytes())?;
        w.write_all(b" ")?;
        rules::write_help_openmetrics(w, f.help)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// One counter sample; `labels` as [`rules::write_sample_start`] takes them.
pub fn encode_counter(w: &mut impl Write, name: &[u8], labels: &[u8], v: u64) -> io::Result<()> {
    rules::write_sample_start(w, name, b"", labels, None)?;
    write_u64(w, v)?;
    w.write_all(b"\n")
}

/// One integer gauge sample.
pub fn encode_gauge(w: &mut impl Write, name: &[u8], labels: &[u8], v: i64) -> io::Result<()> {
    rules::write_sample_start(w, name, b"", labels, None)?;
    write_i64(w, v)?;
    w.write_all(b"\n")
}

/// One float gauge sample.
pub fn encode_gauge_f64(w: &mut impl Write, name: &[u8], labels: &[u8], v: f64) -> io::Result<()> {
    rules::write_sample_start(w, name, b"", labels, None)?;
    write_f64(w, v)?;
    w.write_all(b"\n")
}

/// One histogram: `_bucket` lines (`+Inf` last), then `_count` and `_sum`.
pub fn encode_histogram(
    w: &mut impl Write,
    name: &[u8],
    labels: &[u8],
    h: &HistogramValue,
    les: &mut LeCache,
) -> io::Result<()> {
    let mut scratch = Vec::with_capacity(32);
    let mut prefix = Vec::with_capacity(name.len() + labels.len() + 16);
    rules::bucket_prefix(name, labels, &mut prefix);
    for_each_bound(h, |bound, cum| {
        w.write_all(&prefix)?;
        w.write_all(les.text(bound, &mut scratch))?;
        w.write_all(b"\"} ")?;
        write_u64(w, cum)?;
        w.write_all(b"\n")
    })?;
    rules::write_sample_start(w, name, b"_count", labels, None)?;
    write_u64(w, h.count)?;
    w.write_all(b"\n")?;
    rules::write_sample_start(w, name, b"_sum", labels, None)?;
    write_f64(w, h.sum)?;
    w.write_all(b"\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture;

    #[test]
    fn counters_lose_total_in_the_family_name_and_units_are_suffixes() {
        let f = fixture();
        let sources = f.sources();
        let exp = Exposition::group(&sources);
        let mut out = Vec::new();
        encode(&mut out, &exp).unwrap();
        let expected = r#"# TYPE jobs counter
# HELP jobs Jobs done.
jobs_total{process="worker",pid="10",queue="fast"} 3
jobs_total{process="worker \"b\"",pid="11",registry="side",queue="fast"} 4
# TYPE latency_seconds histogram
# UNIT latency_seconds seconds
# HELP latency_seconds Time to serve.
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="0.5"} 1
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="1.0"} 3
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="2.0"} 3
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="4.0"} 4
latency_seconds_bucket{process="worker",pid="10",exported_le="x",le="+Inf"} 4
latency_seconds_count{process="worker",pid="10",exported_le="x"} 4
latency_seconds_sum{process="worker",pid="10",exported_le="x"} 5.25
# TYPE temperature_celsius gauge
# UNIT temperature_celsius celsius
# HELP temperature_celsius Now, with \"quotes\" and a \\ backslash\nand a line.
temperature_celsius{process="worker",pid="10"} -3
temperature_celsius{process="worker \"b\"",pid="11",registry="side"} 21.5
# EOF
"#;
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn an_empty_exposition_is_just_eof() {
        let exp = Exposition::group(&[]);
        let mut out = Vec::new();
        encode(&mut out, &exp).unwrap();
        assert_eq!(out, b"# EOF\n");
    }
}
