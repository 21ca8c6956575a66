// SPDX-License-Identifier: Apache-2.0
//! Label sets rendered once per registry reader instead of once per
//! scrape. A metric's labels, and those of its source, never change while
//! its registry lives (descriptors are append-only), so an endpoint that
//! keeps its readers can keep their labels rendered too: escaped text for
//! the text formats, encoded `LabelPair` fields for protobuf. On a scrape
//! of 100,000 series, rendering them afresh was about a fifth of the time.

use topdeck::{MetricInfo, MetricKind};

use crate::model::Source;
use crate::rules;

/// The rendered labels of a source's metrics, in registration order.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.counter("jobs_total", &[("queue", "a\"b")], "Jobs.", "").unwrap().inc();
/// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
/// let snap = reader.snapshot().unwrap();
///
/// let mut prepared = topdeck_export::Prepared::default();
/// prepared.update(&topdeck_export::Source::new("w", 1, "main", snap.iter()));
/// let sources = [topdeck_export::Source::new("w", 1, "main", snap.iter()).with_prepared(&prepared)];
/// let mut out = Vec::new();
/// topdeck_export::text::encode(&mut out, &topdeck_export::Exposition::group(&sources)).unwrap();
/// assert!(String::from_utf8(out).unwrap().contains(r#"jobs_total{process="w",pid="1",queue="a\"b"} 1"#));
/// ```
#[derive(Debug, Default, Clone)]
pub struct Prepared {
    text: Vec<u8>,
    text_ends: Vec<u32>,
    proto: Vec<u8>,
    proto_ends: Vec<u32>,
}

impl Prepared {
    /// Metrics rendered so far.
    pub fn len(&self) -> usize {
        self.text_ends.len()
    }

    /// Whether nothing is rendered yet.
    pub fn is_empty(&self) -> bool {
        self.text_ends.is_empty()
    }

    /// Renders the metrics of `source` not rendered yet. Always called with
    /// the same source labels and a metric list that only grows.
    pub fn update(&mut self, source: &Source<'_>) {
        for &(info, _) in source.metrics.iter().skip(self.len()) {
            let histogram = info.kind == MetricKind::Histogram;
            render_text(&source.label_text, info, histogram, &mut self.text);
            self.text_ends.push(self.text.len() as u32);
            render_proto(&source.labels, info, histogram, &mut self.proto);
            self.proto_ends.push(self.proto.len() as u32);
        }
    }

    /// The text labels of metric `i`, if rendered.
    pub(crate) fn text(&self, i: usize) -> Option<&[u8]> {
        let end = *self.text_ends.get(i)? as usize;
        let start = if i == 0 {
            0
        } else {
            self.text_ends[i - 1] as usize
        };
        Some(&self.text[start..end])
    }

    /// The encoded label fields of metric `i`, if rendered.
    pub(crate) fn proto(&self, i: usize) -> Option<&[u8]> {
        let end = *self.proto_ends.get(i)? as usize;
        let start = if i == 0 {
            0
        } else {
            self.proto_ends[i - 1] as usize
        };
        Some(&self.proto[start..end])
    }
}

/// Appends the labels of a series, escaped and comma-separated, without
/// braces: the source's (already rendered), then the metric's own.
pub(crate) fn render_text(source: &[u8], info: &MetricInfo, histogram: bool, out: &mut Vec<u8>) {
    let empty = out.len();
    out.extend_from_slice(source);
    for (k, v) in &info.labels {
        if out.len() > empty {
            out.push(b',');
        }
        out.extend_from_slice(rules::own_label_name(k, histogram).as_bytes());
        out.extend_from_slice(b"=\"");
        // Writing into a Vec cannot fail.
        let _ = rules::write_label_value(out, v);
        out.push(b'"');
    }
}

/// Appends the `Metric.label` fields of a series: the source's, then the
/// metric's own.
pub(crate) fn render_proto(
    source: &[(&'static str, std::borrow::Cow<'_, str>)],
    info: &MetricInfo,
    histogram: bool,
    out: &mut Vec<u8>,
) {
    for (k, v) in source {
        crate::protobuf::label_pair(k, v, out);
    }
    for (k, v) in &info.labels {
        crate::protobuf::label_pair(&rules::own_label_name(k, histogram), v, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture;
    use crate::{Exposition, Format};

    #[test]
    fn prepared_labels_encode_exactly_as_fresh_ones_in_every_format() {
        let f = fixture();
        let plain = f.sources();
        // The first source fully prepared, the second only for its first metric.
        let mut full = Prepared::default();
        full.update(&plain[0]);
        let mut partial = Prepared::default();
        let first_only = Source::new("worker \"b\"", 11, "side", [(&f.b[0].0, &f.b[0].1)]);
        partial.update(&first_only);
        assert_eq!((full.len(), partial.len()), (3, 1));
        let mut with = f.sources();
        let b = with.pop().unwrap().with_prepared(&partial);
        let a = with.pop().unwrap().with_prepared(&full);
        let with = [a, b];
        for format in [Format::Text, Format::OpenMetrics, Format::Protobuf] {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            format.encode(&mut x, &Exposition::group(&plain)).unwrap();
            format.encode(&mut y, &Exposition::group(&with)).unwrap();
            assert_eq!(x, y, "{format:?}");
        }
    }
}
