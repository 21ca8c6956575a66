// SPDX-License-Identifier: Apache-2.0
//! A source's series in a stable order, so that its snapshots behave as a
//! registry's do: the metric list only grows, each snapshot's list a prefix
//! of the next, and `since` pairs series by position instead of by name.
//! Other runtimes do not promise that order (prometheus_client sorts its
//! merge, Aeron reuses counter ids), so the order is kept here: a series
//! seen before keeps its place, a new one goes to the end, and a series
//! that vanished starts a new list (and a new reader, paired by name).

use std::collections::HashMap;
use std::sync::Arc;

use topdeck::{ForeignReader, MetricInfo, SeriesKey, Snapshot, Value};

/// The kept order of one source's series.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    metrics: Arc<Vec<MetricInfo>>,
    index: HashMap<SeriesKey<'static>, usize>,
    reader: Option<ForeignReader>,
}

impl Assembly {
    /// A snapshot of `series` in the kept order.
    pub(crate) fn snapshot(&mut self, series: Vec<(MetricInfo, Value)>) -> Snapshot {
        let mut values: Vec<Option<Value>> = vec![None; self.metrics.len()];
        let mut fresh = Vec::new();
        for (info, value) in series {
            let key = SeriesKey::new(info.name.as_str(), info.labels.as_slice());
            match self.index.get(&key) {
                // A kind that changed is another series for every view.
                Some(&i) if self.metrics[i].kind == info.kind => values[i] = Some(value),
                _ => fresh.push((info, value)),
            }
        }
        let complete = values.iter().all(Option::is_some);
        if !complete || self.reader.is_none() {
            // A series vanished (or this is the first look): a new list, in
            // the order given, under a new reader.
            let kept = std::mem::take(&mut self.metrics);
            let mut all: Vec<(MetricInfo, Value)> = Vec::with_capacity(values.len() + fresh.len());
            for (info, value) in kept.iter().zip(values) {
                if let Some(value) = value {
                    all.push((info.clone(), value));
                }
            }
            all.extend(fresh);
            return self.restart(all);
        }
        let mut values: Vec<Value> = values.into_iter().flatten().collect();
        if !fresh.is_empty() {
            let metrics = Arc::make_mut(&mut self.metrics);
            for (info, value) in fresh {
                self.index.insert(key_of(&info), metrics.len());
                metrics.push(info);
                values.push(value);
            }
        }
        let reader = self.reader.as_ref().expect("checked above");
        reader.snapshot(Arc::clone(&self.metrics), values)
    }

    fn restart(&mut self, all: Vec<(MetricInfo, Value)>) -> Snapshot {
        let (metrics, values): (Vec<MetricInfo>, Vec<Value>) = all.into_iter().unzip();
        self.index = metrics
            .iter()
            .enumerate()
            .map(|(i, m)| (key_of(m), i))
            .collect();
        self.metrics = Arc::new(metrics);
        let reader = self.reader.insert(ForeignReader::new());
        reader.snapshot(Arc::clone(&self.metrics), values)
    }
}

fn key_of(info: &MetricInfo) -> SeriesKey<'static> {
    SeriesKey::new(info.name.clone(), info.labels.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck::{Change, MetricKind};

    fn gauge(name: &str, v: f64) -> (MetricInfo, Value) {
        let info = MetricInfo {
            kind: MetricKind::GaugeF64,
            name: name.into(),
            labels: Vec::new(),
            help: String::new(),
            unit: String::new(),
        };
        (info, Value::GaugeF64(v))
    }

    fn names(s: &Snapshot) -> Vec<String> {
        s.iter().map(|(m, _)| m.name.clone()).collect()
    }

    #[test]
    fn series_keep_their_place_and_new_ones_go_last() {
        let mut a = Assembly::default();
        let first = a.snapshot(vec![gauge("b", 1.0), gauge("a", 2.0)]);
        // Sorted differently and with one more: the kept order wins.
        let second = a.snapshot(vec![gauge("a", 3.0), gauge("b", 4.0), gauge("c", 5.0)]);
        assert_eq!(names(&first), ["b", "a"]);
        assert_eq!(names(&second), ["b", "a", "c"]);
        let changes: Vec<Change> = second.since(&first).iter().map(|c| c.change()).collect();
        assert_eq!(
            changes,
            [
                Change::GaugeF64(4.0),
                Change::GaugeF64(3.0),
                Change::GaugeF64(5.0)
            ]
        );
    }

    #[test]
    fn a_vanished_series_starts_a_new_list_still_paired_by_name() {
        let mut a = Assembly::default();
        let first = a.snapshot(vec![gauge("a", 1.0), gauge("b", 2.0)]);
        let second = a.snapshot(vec![gauge("b", 7.0)]);
        assert_eq!(names(&second), ["b"]);
        let changes: Vec<Change> = second.since(&first).iter().map(|c| c.change()).collect();
        assert_eq!(changes, [Change::GaugeF64(7.0)]);
        // And the new list is kept from there on.
        let third = a.snapshot(vec![gauge("c", 1.0), gauge("b", 8.0)]);
        assert_eq!(names(&third), ["b", "c"]);
    }
}
