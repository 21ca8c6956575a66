// SPDX-License-Identifier: Apache-2.0
//! Snapshots of metrics read elsewhere (another runtime's files), so that
//! every observer shows them as it shows a registry's.

use std::sync::Arc;

use super::registry_reader::next_reader_id;
use super::snapshot::{MetricInfo, Snapshot, Value};

/// Makes [`Snapshot`]s of metrics that some other reader decoded (the
/// JVM's hsperfdata, prometheus_client's files, Aeron's counters), for
/// [`Snapshot::since`], the exporters and the views.
///
/// Each `ForeignReader` has a reader id of its own, distinct from every
/// other `ForeignReader`'s and [`RegistryReader`](crate::RegistryReader)'s,
/// and [`Snapshot::since`] pairs two snapshots of one reader by position,
/// comparing no name. So the contract is a registry's: the metric lists
/// of successive snapshots of one `ForeignReader` only grow, each a prefix
/// of the next. A source whose list changes otherwise (a metric gone,
/// reordered or relabelled) takes a new `ForeignReader` for the snapshot
/// after the change; `since` then pairs series by name and labels.
///
/// [`MetricInfo::kind`] holds the nearest [`MetricKind`](crate::MetricKind):
/// `Counter` for [`Value::CounterF64`], `Histogram` for [`Value::Buckets`]
/// and [`Value::Summary`], `GaugeF64` for float gauges. Whatever must tell
/// them apart looks at the value.
///
/// ```
/// use std::sync::Arc;
/// use topdeck::{Change, ForeignReader, MetricInfo, MetricKind, Value};
///
/// let info = |kind, name: &str| MetricInfo {
///     kind, name: name.into(), labels: vec![], help: String::new(), unit: "seconds".into(),
/// };
/// let metrics = Arc::new(vec![info(MetricKind::Counter, "gc_seconds_total")]);
/// let reader = ForeignReader::new();
/// let before = reader.snapshot(Arc::clone(&metrics), vec![Value::CounterF64(1.5)]);
/// // A metric appears: the list grows, the first is still first.
/// let mut grown = (*metrics).clone();
/// grown.push(info(MetricKind::Histogram, "wait_seconds"));
/// let now = reader.snapshot(
///     Arc::new(grown),
///     vec![Value::CounterF64(2.25), Value::Summary { count: 3.0, sum: 0.5 }],
/// );
/// let changes: Vec<Change> = now.since(&before).iter().map(|s| s.change()).collect();
/// assert_eq!(changes, [Change::CounterF64(0.75), Change::Summary { count: 3.0, sum: 0.5 }]);
/// ```
#[derive(Debug)]
pub struct ForeignReader {
    id: u64,
}

impl ForeignReader {
    /// A reader with an id of its own.
    pub fn new() -> Self {
        Self {
            id: next_reader_id(),
        }
    }

    /// A snapshot of `metrics` with `values`, one for each, in the same
    /// order. If the lengths differ, the longer is cut to the shorter.
    pub fn snapshot(&self, metrics: Arc<Vec<MetricInfo>>, mut values: Vec<Value>) -> Snapshot {
        let metrics = if metrics.len() > values.len() {
            Arc::new(metrics[..values.len()].to_vec())
        } else {
            values.truncate(metrics.len());
            metrics
        };
        Snapshot {
            metrics,
            values,
            reader: self.id,
        }
    }
}

impl Default for ForeignReader {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use topdeck_format::MetricKind;

    use super::*;

    fn infos(names: &[&str]) -> Arc<Vec<MetricInfo>> {
        Arc::new(
            names
                .iter()
                .map(|n| MetricInfo {
                    kind: MetricKind::GaugeF64,
                    name: (*n).into(),
                    labels: vec![],
                    help: String::new(),
                    unit: String::new(),
                })
                .collect(),
        )
    }

    #[test]
    fn lengths_that_differ_are_cut_to_the_shorter() {
        let r = ForeignReader::new();
        let more_values = r.snapshot(infos(&["a"]), vec![Value::GaugeF64(1.0); 3]);
        assert_eq!(more_values.len(), 1);
        assert_eq!(more_values.get("a", &[]), Some(&Value::GaugeF64(1.0)));
        let more_metrics = r.snapshot(infos(&["a", "b", "c"]), vec![Value::GaugeF64(2.0)]);
        assert_eq!(more_metrics.len(), 1);
        assert_eq!(more_metrics.iter().count(), 1);
        assert!(more_metrics.get("b", &[]).is_none());
    }

    #[test]
    fn every_reader_has_its_own_id_never_zero() {
        let dir = tempfile::tempdir().unwrap();
        let registry = crate::Registry::builder().dir(dir.path()).build().unwrap();
        let mut registry_reader = crate::RegistryReader::open(registry.path()).unwrap();
        let (a, b) = (ForeignReader::new(), ForeignReader::default());
        let ids = [
            a.snapshot(infos(&[]), vec![]).reader,
            b.snapshot(infos(&[]), vec![]).reader,
            registry_reader.snapshot().unwrap().reader,
        ];
        assert!(ids.iter().all(|&id| id != 0), "{ids:?}");
        assert!(
            ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
            "{ids:?}"
        );
    }

    #[test]
    fn a_new_reader_after_a_change_pairs_by_name() {
        let before = ForeignReader::new().snapshot(
            infos(&["a", "b"]),
            vec![Value::CounterF64(1.0), Value::CounterF64(10.0)],
        );
        // "a" is gone: the list is no longer a prefix, so a new reader.
        let now = ForeignReader::new().snapshot(infos(&["b"]), vec![Value::CounterF64(12.5)]);
        let since = now.since(&before);
        assert!(!since.by_position());
        let c: Vec<_> = since
            .iter()
            .map(|s| (s.before.map(|b| b.0), s.change()))
            .collect();
        assert_eq!(c, [(Some(1), crate::Change::CounterF64(2.5))]);
    }
}
