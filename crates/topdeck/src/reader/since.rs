// SPDX-License-Identifier: Apache-2.0
//! What each series did between two snapshots: the pairing of a series
//! with its earlier self, and its change over the interval.

use std::collections::HashMap;

use super::series::SeriesKey;
use super::snapshot::{BucketsValue, HistogramValue, MetricInfo, Snapshot, Value};

impl Snapshot {
    /// How each series of this snapshot changed since `before`, an earlier
    /// snapshot of the same registry (or of the file that replaced it):
    /// counters by their increase, gauges by their value now, histograms
    /// by the observations made in between ([`HistogramValue::since`],
    /// [`BucketsValue::since`]), summaries by the count and sum added.
    /// A series registered in between counts from zero; pass
    /// [`Snapshot::default()`] as `before` for everything since start.
    ///
    /// Series are paired by position when both snapshots come from one
    /// reader (a registry only ever appends metrics), with no string
    /// compared; otherwise by position where name and labels agree, and by
    /// [`SeriesKey`] from the first place they do not.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use topdeck::{Change, Registry, RegistryReader};
    /// let registry = Registry::builder().dir(dir.path()).build()?;
    /// let jobs = registry.counter("jobs_total", &[], "", "")?;
    /// let mut reader = RegistryReader::open(registry.path())?;
    /// jobs.add(5);
    /// let before = reader.snapshot()?;
    /// jobs.add(3);
    /// let depth = registry.gauge("queue_depth", &[], "", "")?;
    /// depth.set(4);
    /// let now = reader.snapshot()?;
    /// let changes: Vec<_> = now
    ///     .since(&before)
    ///     .iter()
    ///     .map(|s| (s.info.name.as_str(), s.is_new(), s.change()))
    ///     .collect();
    /// assert_eq!(changes, [
    ///     ("jobs_total", false, Change::Counter(3)),
    ///     ("queue_depth", true, Change::Gauge(4)),
    /// ]);
    /// # Ok::<(), topdeck::Error>(())
    /// ```
    pub fn since<'a>(&'a self, before: &'a Snapshot) -> Changes<'a> {
        Changes {
            before: Some(before),
            now: self,
            was: pair(before, self),
        }
    }

    /// Every series of this snapshot as new: [`since`](Self::since) an
    /// empty snapshot, without one.
    pub(crate) fn since_start(&self) -> Changes<'_> {
        Changes {
            before: None,
            now: self,
            was: None,
        }
    }
}

/// For each metric of `now`, its index in `before`; `None` when every
/// metric of `now` below `before.len()` is at its own index in `before`
/// (and the rest are new).
fn pair(before: &Snapshot, now: &Snapshot) -> Option<Vec<Option<usize>>> {
    if before.is_empty() || (before.reader == now.reader && before.len() <= now.len()) {
        return None;
    }
    let (b, n) = (&before.metrics[..], &now.metrics[..]);
    let same = |i: usize| b.get(i).is_some_and(|p| same_series(p, &n[i]));
    let first = (0..n.len()).find(|&i| !same(i))?;
    let index: HashMap<SeriesKey<'_>, usize> =
        b.iter().enumerate().map(|(j, m)| (m.key(), j)).collect();
    let mut was: Vec<Option<usize>> = (0..first).map(Some).collect();
    was.extend((first..n.len()).map(|i| {
        if same(i) {
            Some(i)
        } else {
            index.get(&n[i].key()).copied()
        }
    }));
    Some(was)
}

/// The names first: they differ far more often than labels.
fn same_series(a: &MetricInfo, b: &MetricInfo) -> bool {
    a.name == b.name && a.labels == b.labels
}

/// Every series of a snapshot beside its value in an earlier one: what
/// [`Snapshot::since`] returns. Nothing is computed until a series'
/// [`change`](SeriesChange::change) is asked for.
#[derive(Debug, Clone)]
pub struct Changes<'a> {
    /// `None`: since start.
    before: Option<&'a Snapshot>,
    now: &'a Snapshot,
    /// Index in `before` of each metric of `now`; `None` for by position.
    was: Option<Vec<Option<usize>>>,
}

impl<'a> Changes<'a> {
    /// Each series of the later snapshot, in its registration order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = SeriesChange<'a>> + '_ {
        let now = self.now;
        let before = self.before.map_or(&[][..], |b| &b.values[..]);
        now.metrics
            .iter()
            .zip(&now.values)
            .enumerate()
            .map(move |(i, (info, value))| {
                let j = match &self.was {
                    None => Some(i).filter(|&i| i < before.len()),
                    Some(was) => was[i],
                };
                // Another kind under the same name and labels is another
                // registry's metric: nothing to subtract.
                let before = j
                    .map(|j| (j, &before[j]))
                    .filter(|(_, b)| std::mem::discriminant(*b) == std::mem::discriminant(value));
                SeriesChange {
                    info,
                    value,
                    before,
                }
            })
    }

    /// Number of series in the later snapshot.
    pub fn len(&self) -> usize {
        self.now.len()
    }

    /// Whether the later snapshot has no series.
    pub fn is_empty(&self) -> bool {
        self.now.is_empty()
    }

    /// Whether every series was paired by position, no name looked up.
    pub fn by_position(&self) -> bool {
        self.was.is_none()
    }
}

/// One series of the later snapshot and its value in the earlier one.
#[derive(Debug, Clone, Copy)]
pub struct SeriesChange<'a> {
    /// The series.
    pub info: &'a MetricInfo,
    /// Its value in the later snapshot.
    pub value: &'a Value,
    /// Its index and value in the earlier snapshot; `None` when it was
    /// registered in between.
    pub before: Option<(usize, &'a Value)>,
}

impl SeriesChange<'_> {
    /// Whether the series was registered between the two snapshots.
    pub fn is_new(&self) -> bool {
        self.before.is_none()
    }

    /// What the series did over the interval.
    pub fn change(&self) -> Change {
        let was = self.before.map(|(_, v)| v);
        match (self.value, was) {
            (Value::Counter(now), Some(Value::Counter(before))) => match now.checked_sub(*before) {
                Some(d) => Change::Counter(d),
                None => Change::CounterReset {
                    before: *before,
                    now: *now,
                },
            },
            (Value::Counter(now), _) => Change::Counter(*now),
            (Value::Gauge(g), _) => Change::Gauge(*g),
            (Value::GaugeF64(g), _) => Change::GaugeF64(*g),
            (Value::Histogram(now), Some(Value::Histogram(before))) => {
                Change::Histogram(now.since(before))
            }
            (Value::Histogram(now), _) => Change::Histogram((**now).clone()),
            (Value::CounterF64(now), Some(Value::CounterF64(before))) => {
                if now < before {
                    Change::CounterF64Reset {
                        before: *before,
                        now: *now,
                    }
                } else {
                    Change::CounterF64(now - before)
                }
            }
            (Value::CounterF64(now), _) => Change::CounterF64(*now),
            (Value::Buckets(now), Some(Value::Buckets(before))) => {
                Change::Buckets(now.since(before))
            }
            (Value::Buckets(now), _) => Change::Buckets((**now).clone()),
            (
                Value::Summary { count, sum },
                Some(Value::Summary {
                    count: count_before,
                    sum: sum_before,
                }),
            ) => Change::Summary {
                // As for buckets: a count that went backwards (a torn
                // read) invents no observations.
                count: (count - count_before).max(0.0),
                sum: sum - sum_before,
            },
            (&Value::Summary { count, sum }, _) => Change::Summary { count, sum },
        }
    }
}

/// What one series did between two snapshots.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A counter's increase (its total, for a series registered in between).
    Counter(u64),
    /// A counter that went backwards: its writer restarted (a new file
    /// with the same series). Its increase over the interval is unknown.
    CounterReset {
        /// Its total in the earlier snapshot.
        before: u64,
        /// Its total now.
        now: u64,
    },
    /// An integer gauge's value now.
    Gauge(i64),
    /// A floating-point gauge's value now.
    GaugeF64(f64),
    /// The observations made in between (all of them, for a series
    /// registered in between).
    Histogram(HistogramValue),
    /// A float counter's increase (its total, for a series registered in
    /// between).
    CounterF64(f64),
    /// A float counter that went backwards: its source restarted. Its
    /// increase over the interval is unknown.
    CounterF64Reset {
        /// Its total in the earlier snapshot.
        before: f64,
        /// Its total now.
        now: f64,
    },
    /// The observations a fixed-bucket histogram made in between (all of
    /// them, for a series registered in between).
    Buckets(BucketsValue),
    /// The observations a summary made in between (all of them, for a
    /// series registered in between).
    Summary {
        /// Observations in the interval.
        count: f64,
        /// Their sum.
        sum: f64,
    },
}

#[cfg(test)]
mod tests {
    use crate::{Registry, RegistryReader};

    use super::*;

    fn registry(dir: &std::path::Path) -> Registry {
        Registry::builder().dir(dir).build().unwrap()
    }

    /// A snapshot through a reader of its own.
    fn read(r: &Registry) -> Snapshot {
        RegistryReader::open(r.path()).unwrap().snapshot().unwrap()
    }

    fn changes(now: &Snapshot, before: &Snapshot) -> Vec<(String, bool, Change)> {
        now.since(before)
            .iter()
            .map(|s| (s.info.key().to_string(), s.is_new(), s.change()))
            .collect()
    }

    #[test]
    fn a_series_registered_in_between_counts_from_zero() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path());
        let a = r.counter("a_total", &[], "", "").unwrap();
        a.add(10);
        let mut reader = RegistryReader::open(r.path()).unwrap();
        let before = reader.snapshot().unwrap();
        a.add(1);
        r.counter("b_total", &[("k", "v")], "", "").unwrap().add(4);
        let h = r.histogram("c_seconds", &[], "", "seconds").unwrap();
        h.record(0.5);
        let now = reader.snapshot().unwrap();
        assert!(now.since(&before).by_position());
        let c = changes(&now, &before);
        assert_eq!(c[0], ("a_total".into(), false, Change::Counter(1)));
        assert_eq!(c[1], (r#"b_total{k="v"}"#.into(), true, Change::Counter(4)));
        let Change::Histogram(d) = &c[2].2 else {
            panic!("{c:?}")
        };
        assert!(c[2].1);
        assert_eq!((d.count, d.sum, d.max), (1, 0.5, Some(0.5)));
        // Nothing before: everything since start.
        let all = changes(&now, &Snapshot::default());
        assert_eq!(all[0], ("a_total".into(), true, Change::Counter(11)));
    }

    #[test]
    fn a_restarted_writer_is_paired_by_name_and_its_counters_reset() {
        let dir = tempfile::tempdir().unwrap();
        let old = registry(dir.path());
        old.counter("a_total", &[], "", "").unwrap().add(100);
        old.gauge("g", &[], "", "").unwrap().set(5);
        let before = read(&old);
        drop(old);
        // The restarted writer registers in another order, and one more.
        let new = registry(dir.path());
        new.counter("z_total", &[], "", "").unwrap().add(2);
        new.gauge("g", &[], "", "").unwrap().set(6);
        new.counter("a_total", &[], "", "").unwrap().add(3);
        let now = read(&new);
        let since = now.since(&before);
        assert!(!since.by_position());
        let paired: Vec<Option<usize>> = since.iter().map(|s| s.before.map(|b| b.0)).collect();
        assert_eq!(paired, [None, Some(1), Some(0)]);
        assert_eq!(
            changes(&now, &before),
            [
                ("z_total".into(), true, Change::Counter(2)),
                ("g".into(), false, Change::Gauge(6)),
                (
                    "a_total".into(),
                    false,
                    Change::CounterReset {
                        before: 100,
                        now: 3
                    }
                ),
            ]
        );
    }

    #[test]
    fn another_readers_snapshot_in_the_same_order_pairs_by_position() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path());
        let c = r.counter("a_total", &[], "", "").unwrap();
        r.gauge("g", &[], "", "").unwrap().set(1);
        let before = read(&r);
        c.add(2);
        let now = read(&r);
        let since = now.since(&before);
        assert!(since.by_position());
        assert_eq!(since.iter().next().unwrap().change(), Change::Counter(2));
        // An earlier snapshot with more series than the later one (another
        // file): the later one's are all at their own index.
        assert!(before.since(&now).by_position());
    }

    #[test]
    fn histograms_of_another_layout_count_since_start() {
        let dir = tempfile::tempdir().unwrap();
        let old = registry(dir.path());
        let schema = topdeck_format::exponential::DEFAULT_SCHEMA;
        let narrow = crate::Buckets::exponential(schema, 1e-9, 10.0).unwrap();
        let h = old
            .histogram_with("wait_seconds", &[], "", "seconds", narrow)
            .unwrap();
        h.record(0.5);
        h.record(0.5);
        let before = read(&old);
        drop(old);
        // The same series from a writer with the default range: more
        // buckets, so nothing can be subtracted.
        let new = registry(dir.path());
        let h = new.histogram("wait_seconds", &[], "", "seconds").unwrap();
        h.record(0.25);
        let now = read(&new);
        let (Some(Value::Histogram(a)), Some(Value::Histogram(b))) = (
            now.get("wait_seconds", &[]),
            before.get("wait_seconds", &[]),
        ) else {
            panic!("histograms missing")
        };
        assert_eq!((a.schema, a.min_index), (b.schema, b.min_index));
        assert!(a.buckets.len() > b.buckets.len());
        let c = changes(&now, &before);
        let Change::Histogram(d) = &c[0].2 else {
            panic!("{c:?}")
        };
        assert!(!c[0].1, "paired, not new");
        assert_eq!((d.count, d.sum), (1, 0.25));
    }

    /// A one-series snapshot of a reader of its own.
    fn foreign(value: Value) -> Snapshot {
        let info = MetricInfo {
            kind: topdeck_format::MetricKind::Counter,
            name: "x".into(),
            labels: vec![],
            help: String::new(),
            unit: String::new(),
        };
        crate::ForeignReader::new().snapshot(std::sync::Arc::new(vec![info]), vec![value])
    }

    #[test]
    fn foreign_values_change_by_their_own_rules() {
        let inf = f64::INFINITY;
        let classic = |c: [f64; 2], sum| {
            Value::Buckets(Box::new(BucketsValue {
                buckets: vec![(0.5, c[0]), (inf, c[1])],
                count: c[1],
                sum,
            }))
        };
        let other_bounds = Value::Buckets(Box::new(BucketsValue {
            buckets: vec![(0.25, 1.0), (inf, 2.0)],
            count: 2.0,
            sum: 1.0,
        }));
        let summary = |count, sum| Value::Summary { count, sum };
        let d_classic = |c: [f64; 2], sum| {
            Change::Buckets(BucketsValue {
                buckets: vec![(0.5, c[0]), (inf, c[1])],
                count: c[1],
                sum,
            })
        };
        let table = [
            // (before, now, change)
            (
                Value::CounterF64(1.5),
                Value::CounterF64(4.0),
                Change::CounterF64(2.5),
            ),
            (
                Value::CounterF64(2.0),
                Value::CounterF64(2.0),
                Change::CounterF64(0.0),
            ),
            (
                Value::CounterF64(9.5),
                Value::CounterF64(0.25),
                Change::CounterF64Reset {
                    before: 9.5,
                    now: 0.25,
                },
            ),
            // Another kind before: since start.
            (
                Value::Counter(1),
                Value::CounterF64(3.0),
                Change::CounterF64(3.0),
            ),
            (
                classic([1.0, 2.0], 1.0),
                classic([1.5, 4.5], 3.5),
                d_classic([0.5, 2.5], 2.5),
            ),
            (
                other_bounds,
                classic([1.5, 4.5], 3.5),
                d_classic([1.5, 4.5], 3.5),
            ),
            (
                summary(2.0, 0.5),
                summary(5.5, 2.0),
                Change::Summary {
                    count: 3.5,
                    sum: 1.5,
                },
            ),
            (
                summary(5.0, 2.0),
                summary(4.0, 2.5),
                Change::Summary {
                    count: 0.0,
                    sum: 0.5,
                },
            ),
            (
                Value::GaugeF64(1.0),
                summary(4.0, 2.5),
                Change::Summary {
                    count: 4.0,
                    sum: 2.5,
                },
            ),
        ];
        for (before, now, want) in table {
            let (b, n) = (foreign(before.clone()), foreign(now.clone()));
            let got = n.since(&b).iter().next().unwrap().change();
            assert_eq!(got, want, "{before:?} -> {now:?}");
            // Nothing before: everything since start.
            let all = n
                .since(&Snapshot::default())
                .iter()
                .next()
                .unwrap()
                .change();
            let start = n
                .since(&foreign(Value::Gauge(0)))
                .iter()
                .next()
                .unwrap()
                .change();
            assert_eq!(all, start, "{now:?}");
        }
    }

    #[test]
    fn the_same_series_of_another_kind_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let old = registry(dir.path());
        old.counter("x", &[], "", "").unwrap().add(9);
        let before = read(&old);
        drop(old);
        let new = registry(dir.path());
        new.gauge("x", &[], "", "").unwrap().set(2);
        let now = read(&new);
        assert_eq!(
            changes(&now, &before),
            [("x".into(), true, Change::Gauge(2))]
        );
    }
}
