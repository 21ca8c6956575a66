// SPDX-License-Identifier: Apache-2.0
//! Sources of series: one registry's metrics with the labels that say
//! where they come from, and those labels rendered once per registry
//! reader ([`Prepared`]) instead of once per scrape. A metric's labels,
//! and those of its source, never change while its registry lives
//! (descriptors are append-only), so an endpoint that keeps its readers can
//! keep their labels rendered too: escaped text for the text formats,
//! encoded `LabelPair` fields for protobuf. On a scrape of 100,000 series,
//! rendering them afresh was about a fifth of the time.

use std::borrow::Cow;

use topdeck::{MetricInfo, MetricKind, Snapshot, Value};

use crate::rules;
use crate::wire;

/// One registry's metrics (or any other set of metrics, such as the
/// endpoint's own), with the labels every one of its series carries.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.counter("jobs_total", &[], "Jobs done.", "").unwrap().add(3);
/// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
/// let snap = reader.snapshot().unwrap();
///
/// let sources = [topdeck_export::Source::new("worker", 42, "main", snap.iter())];
/// let exposition = topdeck_export::Exposition::group(&sources);
/// let mut out = Vec::new();
/// topdeck_export::Format::Text.encode(&mut out, &exposition).unwrap();
/// assert!(String::from_utf8(out).unwrap()
///     .contains("jobs_total{process=\"worker\",pid=\"42\"} 3\n"));
/// ```
#[derive(Debug)]
pub struct Source<'a> {
    /// `(name, value)` of the source labels, unescaped (for protobuf).
    pub(crate) labels: Vec<(&'static str, Cow<'a, str>)>,
    /// The same labels as text, escaped, comma-separated, without braces.
    label_text: Vec<u8>,
    pub(crate) metrics: Vec<(&'a MetricInfo, &'a Value)>,
    /// How many of `metrics` are the source's own (the rest were added by
    /// [`with_more`](Self::with_more)): only those have prepared labels.
    own: usize,
    prepared: Option<&'a Prepared>,
}

impl<'a> Source<'a> {
    /// The metrics of a registry written by `process` (`pid`), in the
    /// registry named `registry`.
    pub fn new(
        process: &'a str,
        pid: u32,
        registry: &'a str,
        metrics: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>,
    ) -> Self {
        Self::with_labels(Self::source_labels(process, pid, registry), metrics)
    }

    fn source_labels(
        process: &'a str,
        pid: u32,
        registry: &'a str,
    ) -> Vec<(&'static str, Cow<'a, str>)> {
        let mut labels = vec![
            (rules::PROCESS_LABEL, Cow::Borrowed(process)),
            (rules::PID_LABEL, Cow::Owned(pid.to_string())),
        ];
        if registry != rules::DEFAULT_REGISTRY {
            labels.push((rules::REGISTRY_LABEL, Cow::Borrowed(registry)));
        }
        labels
    }

    /// A source's snapshot, labelled with what a look found of it:
    /// `source` (its kind: `jvm`, `python`, `aeron`; topdeck's own
    /// registries have none, as their series always had), `process`,
    /// `pid` when proven, the file owner's `uid`, `container` when its
    /// writer runs in one ([`rules::CONTAINER_LABEL`]: a metric's own
    /// `container` label then becomes `exported_container`), and
    /// `registry` unless it is the default.
    pub fn of(origin: &'a topdeck_sources::Source, snapshot: &'a Snapshot) -> Self {
        let mut labels = Vec::with_capacity(6);
        if origin.kind != topdeck_sources::Kind::Topdeck {
            labels.push((rules::SOURCE_LABEL, Cow::Borrowed(origin.kind.name())));
        }
        labels.push((rules::PROCESS_LABEL, Cow::Borrowed(origin.process.as_str())));
        if let Some(pid) = origin.pid {
            labels.push((rules::PID_LABEL, Cow::Owned(pid.to_string())));
        }
        if let Some(uid) = origin.uid {
            labels.push((rules::UID_LABEL, Cow::Owned(uid.to_string())));
        }
        if let Some(container) = &origin.container {
            labels.push((rules::CONTAINER_LABEL, Cow::Borrowed(container.as_str())));
        }
        if let Some(registry) = origin
            .registry
            .as_deref()
            .filter(|r| *r != rules::DEFAULT_REGISTRY)
        {
            labels.push((rules::REGISTRY_LABEL, Cow::Borrowed(registry)));
        }
        Self::with_labels(labels, snapshot.iter())
    }

    /// Metrics with no source labels (the endpoint's own, for instance).
    pub fn unlabelled(metrics: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>) -> Self {
        Self::with_labels(Vec::new(), metrics)
    }

    fn with_labels(
        labels: Vec<(&'static str, Cow<'a, str>)>,
        metrics: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>,
    ) -> Self {
        let mut label_text = Vec::new();
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                label_text.push(b',');
            }
            label_text.extend_from_slice(k.as_bytes());
            label_text.extend_from_slice(b"=\"");
            // Writing into a Vec cannot fail.
            let _ = rules::write_label_value(&mut label_text, v);
            label_text.push(b'"');
        }
        let metrics: Vec<_> = metrics.into_iter().collect();
        Self {
            labels,
            label_text,
            own: metrics.len(),
            metrics,
            prepared: None,
        }
    }

    /// Adds series derived from the source's own (its CPU-wait series),
    /// after them, labelled as they are.
    pub fn with_more(
        mut self,
        more: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>,
    ) -> Self {
        self.metrics.extend(more);
        self
    }

    /// Bytes of the source's own labels as text, for estimates.
    pub(crate) fn label_text_len(&self) -> usize {
        self.label_text.len()
    }

    /// Uses labels rendered earlier for this source (see [`Prepared`]).
    /// Metrics beyond what `prepared` holds are rendered as usual.
    pub fn with_prepared(mut self, prepared: &'a Prepared) -> Self {
        self.prepared = Some(prepared);
        self
    }

    /// The labels of metric `pos` (`info`) as `encoding` writes them:
    /// prepared ones if there are, else rendered into `scratch`.
    pub(crate) fn labels<'s>(
        &'s self,
        encoding: LabelEncoding,
        pos: usize,
        info: &MetricInfo,
        histogram: bool,
        scratch: &'s mut Vec<u8>,
    ) -> &'s [u8] {
        // Prepared labels past the source's own metrics are those of
        // metrics a policy left out of this look, not of derived ones.
        let prepared = self.prepared.filter(|_| pos < self.own);
        if let Some(kept) = prepared.and_then(|p| p.get(encoding).get(pos)) {
            return kept;
        }
        scratch.clear();
        self.render(encoding, info, histogram, scratch);
        scratch
    }

    /// Appends the labels of a series, the source's then the metric's own:
    /// for text, escaped and comma-separated, without braces; for protobuf,
    /// as `Metric.label` fields.
    fn render(
        &self,
        encoding: LabelEncoding,
        info: &MetricInfo,
        histogram: bool,
        out: &mut Vec<u8>,
    ) {
        match encoding {
            LabelEncoding::Text => {
                let empty = out.len();
                out.extend_from_slice(&self.label_text);
                for (k, v) in &info.labels {
                    if out.len() > empty {
                        out.push(b',');
                    }
                    out.extend_from_slice(self.own_label_name(k, histogram).as_bytes());
                    out.extend_from_slice(b"=\"");
                    // Writing into a Vec cannot fail.
                    let _ = rules::write_label_value(out, v);
                    out.push(b'"');
                }
            }
            LabelEncoding::Protobuf => {
                for (k, v) in &self.labels {
                    wire::label_pair(k, v, out);
                }
                for (k, v) in &info.labels {
                    wire::label_pair(&self.own_label_name(k, histogram), v, out);
                }
            }
        }
    }
}

impl Source<'_> {
    /// A metric's own label name as exposed: prefixed when it collides
    /// with a source label, the ones every source carries
    /// ([`rules::own_label_name`]) or one this source carries besides
    /// (`container`, `source`).
    pub(crate) fn own_label_name<'k>(&self, name: &'k str, histogram: bool) -> Cow<'k, str> {
        let carried = (name == rules::CONTAINER_LABEL || name == rules::SOURCE_LABEL)
            && self.labels.iter().any(|(k, _)| *k == name);
        rules::own_label_name_beside(name, histogram, carried)
    }
}

/// How an encoder writes labels: the text formats share one rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LabelEncoding {
    /// Escaped, comma-separated, without braces.
    Text,
    /// Encoded `Metric.label` fields.
    Protobuf,
}

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
/// topdeck_export::Format::Text.encode(&mut out, &topdeck_export::Exposition::group(&sources)).unwrap();
/// assert!(String::from_utf8(out).unwrap().contains(r#"jobs_total{process="w",pid="1",queue="a\"b"} 1"#));
/// ```
#[derive(Debug, Default, Clone)]
pub struct Prepared {
    text: Rendered,
    protobuf: Rendered,
}

impl Prepared {
    /// Metrics rendered so far.
    pub fn len(&self) -> usize {
        self.text.ends.len()
    }

    /// Whether nothing is rendered yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Renders the metrics of `source` not rendered yet. Always called with
    /// the same source labels and a metric list that only grows.
    pub fn update(&mut self, source: &Source<'_>) {
        for &(info, _) in source.metrics.iter().skip(self.len()) {
            let histogram = info.kind == MetricKind::Histogram;
            self.text
                .push(|out| source.render(LabelEncoding::Text, info, histogram, out));
            self.protobuf
                .push(|out| source.render(LabelEncoding::Protobuf, info, histogram, out));
        }
    }

    fn get(&self, encoding: LabelEncoding) -> &Rendered {
        match encoding {
            LabelEncoding::Text => &self.text,
            LabelEncoding::Protobuf => &self.protobuf,
        }
    }
}

/// Label sets of one encoding, end to end.
#[derive(Debug, Default, Clone)]
struct Rendered {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Rendered {
    /// The labels of metric `i`, if rendered.
    fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        Some(&self.bytes[start..end])
    }

    /// Appends the labels of the next metric.
    fn push(&mut self, render: impl FnOnce(&mut Vec<u8>)) {
        render(&mut self.bytes);
        self.ends.push(self.bytes.len() as u32);
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

    #[test]
    fn a_portholes_series_carry_its_file_owners_uid_and_a_pid_only_when_known() {
        let (infos, values): (Vec<MetricInfo>, Vec<Value>) =
            crate::testing::foreign().into_iter().unzip();
        let snapshot = topdeck::ForeignReader::new().snapshot(std::sync::Arc::new(infos), values);
        let found = |pid, container: Option<&str>| {
            let mut f = topdeck_sources::Source::new(
                topdeck_sources::Kind::Aeron,
                "/dev/shm/aeron-app/cnc.dat",
                "driver",
            );
            (f.pid, f.uid, f.container) = (pid, Some(1000), container.map(Into::into));
            f
        };
        let labels = |f: &topdeck_sources::Source| {
            String::from_utf8(Source::of(f, &snapshot).label_text).unwrap()
        };
        assert_eq!(
            labels(&found(Some(7), Some("web"))),
            r#"source="aeron",process="driver",pid="7",uid="1000",container="web""#
        );
        // A file no process can be shown to have written: its owner only.
        assert_eq!(
            labels(&found(None, None)),
            r#"source="aeron",process="driver",uid="1000""#
        );
    }
}
