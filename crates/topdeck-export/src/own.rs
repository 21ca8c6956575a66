// SPDX-License-Identifier: Apache-2.0
//! An exporter's own metrics (what `serve` and `push` say of themselves),
//! as ordinary metric infos and values, declared once and then updated by
//! name: a family and, where it has one, its label's value. Both exporters
//! keep theirs in this one table, so what the scraper counts of what it
//! read (skips by reason, type clashes, sources and series) is the same
//! family in both.

use topdeck::{HistogramValue, MetricInfo, MetricKind, Value};
use topdeck_format::exponential::{BucketRange, Slot};

/// An exporter's own metrics.
///
/// ```
/// let mut own = topdeck_export::OwnMetrics::default();
/// own.counter("topdeck_push_dropped_total", "Requests dropped.", "", Some(("reason", &["queue_full", "refused"])));
/// own.gauge("topdeck_push_queued", "Requests waiting.");
/// own.add("topdeck_push_dropped_total", Some("refused"), 2);
/// own.set("topdeck_push_queued", 7);
/// let values: Vec<_> = own.iter().map(|(i, v)| (i.name.as_str(), v.clone())).collect();
/// assert_eq!(values[1], ("topdeck_push_dropped_total", topdeck::Value::Counter(2)));
/// assert_eq!(values[2], ("topdeck_push_queued", topdeck::Value::Gauge(7)));
/// ```
#[derive(Debug, Default, Clone)]
pub struct OwnMetrics {
    metrics: Vec<(MetricInfo, Value)>,
}

impl OwnMetrics {
    /// Declares a counter family `name`, one series per value of its
    /// label when it has one (each exists from the start, so `rate()`
    /// sees its first increase).
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        unit: &str,
        label: Option<(&str, &[&str])>,
    ) -> &mut Self {
        match label {
            None => self.declare(
                MetricKind::Counter,
                name,
                help,
                unit,
                None,
                Value::Counter(0),
            ),
            Some((key, values)) => {
                for v in values {
                    let label = Some((key, *v));
                    self.declare(
                        MetricKind::Counter,
                        name,
                        help,
                        unit,
                        label,
                        Value::Counter(0),
                    );
                }
            }
        }
        self
    }

    /// Declares a gauge `name`.
    pub fn gauge(&mut self, name: &str, help: &str) -> &mut Self {
        self.declare(MetricKind::GaugeI64, name, help, "", None, Value::Gauge(0));
        self
    }

    /// Declares a histogram `name` of seconds, from `min` to `max` at
    /// `schema`.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        (schema, min, max): (i8, f64, f64),
    ) -> &mut Self {
        let range = BucketRange::covering(schema, min, max);
        let value = Value::Histogram(Box::new(HistogramValue::empty(
            range.schema,
            range.zero_threshold(),
            range.min_index,
            range.bucket_count as usize,
        )));
        self.declare(MetricKind::Histogram, name, help, "seconds", None, value);
        self
    }

    fn declare(
        &mut self,
        kind: MetricKind,
        name: &str,
        help: &str,
        unit: &str,
        label: Option<(&str, &str)>,
        value: Value,
    ) {
        let info = MetricInfo {
            kind,
            name: name.into(),
            labels: label
                .map(|(k, v)| vec![(k.into(), v.into())])
                .unwrap_or_default(),
            help: help.into(),
            unit: unit.into(),
        };
        self.metrics.push((info, value));
    }

    /// The series of family `name` whose label has `value` (the family's
    /// only series when `None`); a value not declared counts in the
    /// family's last series (its `other`, by convention).
    fn find(&mut self, name: &str, value: Option<&str>) -> Option<&mut Value> {
        let family = self.metrics.iter().position(|(i, _)| i.name == name)?;
        let len = self.metrics[family..]
            .iter()
            .take_while(|(i, _)| i.name == name)
            .count();
        let members = family..family + len;
        let at = members
            .clone()
            .find(|&at| {
                value.is_none_or(|v| {
                    self.metrics[at]
                        .0
                        .labels
                        .first()
                        .is_some_and(|(_, l)| l == v)
                })
            })
            .unwrap_or(members.end - 1);
        Some(&mut self.metrics[at].1)
    }

    /// Adds `n` to counter `name` (its series of label value `value`).
    pub fn add(&mut self, name: &str, value: Option<&str>, n: u64) {
        if let Some(Value::Counter(c)) = self.find(name, value) {
            *c = c.saturating_add(n);
        }
    }

    /// Adds `n` to counter `name`'s series of exactly `labels`, declared
    /// at its first count (after the family's other series) with `help`:
    /// for labels whose values are not known up front (an owner's uid).
    pub fn add_labelled(&mut self, name: &str, help: &str, labels: &[(&str, &str)], n: u64) {
        let same = |i: &MetricInfo| {
            i.name == name
                && i.labels.len() == labels.len()
                && i.labels
                    .iter()
                    .zip(labels)
                    .all(|((a, b), (c, d))| a == c && b == d)
        };
        if let Some((_, Value::Counter(c))) = self.metrics.iter_mut().find(|(i, _)| same(i)) {
            *c = c.saturating_add(n);
            return;
        }
        // After the family's last series, so that a family stays together.
        let at = self
            .metrics
            .iter()
            .rposition(|(i, _)| i.name == name)
            .map_or(self.metrics.len(), |last| last + 1);
        let info = MetricInfo {
            kind: MetricKind::Counter,
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            help: help.into(),
            unit: String::new(),
        };
        self.metrics.insert(at, (info, Value::Counter(n)));
    }

    /// Sets gauge `name` to `v`.
    pub fn set(&mut self, name: &str, v: usize) {
        if let Some(g) = self.find(name, None) {
            *g = Value::Gauge(i64::try_from(v).unwrap_or(i64::MAX));
        }
    }

    /// Records `seconds` in histogram `name`.
    pub fn record(&mut self, name: &str, seconds: f64) {
        if let Some(Value::Histogram(h)) = self.find(name, None) {
            // The range the histogram was declared with, as it holds it.
            let range = BucketRange {
                schema: h.schema,
                min_index: h.min_index,
                bucket_count: u32::try_from(h.buckets.len()).unwrap_or(u32::MAX),
            };
            match range.slot(seconds, h.zero_threshold) {
                Slot::Bucket(i) => h.buckets[i as usize] += 1,
                Slot::Zero => h.zero_count += 1,
                Slot::Ignore => return,
            }
            h.count += 1;
            h.sum += seconds;
            h.max = Some(h.max.map_or(seconds, |m| m.max(seconds)));
        }
    }

    /// Every series, in the order declared.
    pub fn iter(&self) -> impl Iterator<Item = (&MetricInfo, &Value)> {
        self.metrics.iter().map(|(i, v)| (i, v))
    }

    /// The metrics, in the order declared.
    pub fn metrics(&self) -> &[(MetricInfo, Value)] {
        &self.metrics
    }

    /// `other`'s metrics after these.
    pub fn extend(&mut self, other: &OwnMetrics) {
        self.metrics.extend(other.metrics.iter().cloned());
    }
}
