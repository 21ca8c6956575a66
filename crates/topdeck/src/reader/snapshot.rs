// SPDX-License-Identifier: Apache-2.0
//! What a reader sees: one registry's metrics at one moment.

use std::sync::Arc;

use topdeck_format::exponential::upper_bound;
use topdeck_format::MetricKind;

/// The fixed facts about one metric, decoded once per reader.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricInfo {
    /// Kind.
    pub kind: MetricKind,
    /// Name, Prometheus-style.
    pub name: String,
    /// Label pairs in registration order.
    pub labels: Vec<(String, String)>,
    /// Help text.
    pub help: String,
    /// Unit (may be empty).
    pub unit: String,
}

/// A metric's value in a snapshot.
///
/// A registry's snapshots hold the first four; the last three come from
/// other runtimes' metrics (see [`ForeignReader`](crate::ForeignReader)),
/// whose [`MetricInfo::kind`] is the nearest [`MetricKind`]: tell them
/// apart by the value.
///
/// Histograms are boxed so that a value is 24 bytes: a snapshot of
/// counters is a dense array a reader fills and frees at memory speed.
///
/// ```
/// assert_eq!(std::mem::size_of::<topdeck::Value>(), 24);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Counter total over all shards.
    Counter(u64),
    /// Integer gauge.
    Gauge(i64),
    /// Floating-point gauge.
    GaugeF64(f64),
    /// Histogram summed over all shards.
    Histogram(Box<HistogramValue>),
    /// A counter another runtime keeps as a float (prometheus_client's counters; JVM times converted to seconds).
    CounterF64(f64),
    /// A histogram with fixed buckets (prometheus_client's).
    Buckets(Box<BucketsValue>),
    /// Count and sum of observations, without buckets (prometheus_client's summary).
    Summary {
        /// Observations.
        count: f64,
        /// Sum of observations.
        sum: f64,
    },
}

/// A histogram summed over shards. `count` is the sum of the bucket counts,
/// so buckets and count always agree; `sum` and `max` are read separately and
/// may be a few observations apart from them.
///
/// ```
/// use topdeck::HistogramValue;
/// let h = HistogramValue {
///     schema: 0, zero_threshold: 0.0, zero_count: 0, min_index: 0,
///     buckets: vec![0, 10, 10], count: 20, sum: 50.0, max: Some(4.0),
/// };
/// // Bucket 1 is (1, 2], bucket 2 is (2, 4]: the median is the top of bucket 1.
/// assert_eq!(h.quantile(0.5), Some(2.0));
/// assert_eq!(h.quantile(1.0), Some(4.0));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramValue {
    /// Bucket schema.
    pub schema: i8,
    /// Upper bound of the zero bucket.
    pub zero_threshold: f64,
    /// Observations in the zero bucket.
    pub zero_count: u64,
    /// Index of `buckets[0]`; bucket `i` covers `(base^(i-1), base^i]`.
    pub min_index: i32,
    /// Observations per bucket.
    pub buckets: Vec<u64>,
    /// Total observations (zero bucket included).
    pub count: u64,
    /// Sum of observations.
    pub sum: f64,
    /// Largest observation, if any.
    pub max: Option<f64>,
}

impl HistogramValue {
    /// A histogram with no observations, in the layout given: `buckets`
    /// buckets from `min_index`, of `schema`, above a zero bucket up to
    /// `zero_threshold`. What a histogram reads before its first record.
    ///
    /// ```
    /// use topdeck::HistogramValue;
    /// let h = HistogramValue::empty(0, 0.0, -1, 3);
    /// assert_eq!(h.buckets, [0, 0, 0]);
    /// assert_eq!((h.zero_count, h.count, h.sum, h.max), (0, 0, 0.0, None));
    /// assert_eq!((h.quantile(0.5), h.mean()), (None, None));
    /// ```
    #[inline]
    pub fn empty(schema: i8, zero_threshold: f64, min_index: i32, buckets: usize) -> Self {
        HistogramValue {
            schema,
            zero_threshold,
            zero_count: 0,
            min_index,
            buckets: vec![0; buckets],
            count: 0,
            sum: 0.0,
            max: None,
        }
    }

    /// The observations made between `before` (an earlier snapshot of the
    /// same histogram) and this one. Counts are subtracted bucket by
    /// bucket, saturating (buckets only grow: a torn read must not invent
    /// counts); `max` is unknown for the interval, so `None`. A `before`
    /// with another layout (a different registry at the same name) is not
    /// comparable: everything since start is returned.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// let h = registry.histogram("wait_seconds", &[], "", "seconds").unwrap();
    /// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
    /// h.record(0.5);
    /// let before = reader.snapshot().unwrap();
    /// h.record(2.0);
    /// let after = reader.snapshot().unwrap();
    /// let (Some(topdeck::Value::Histogram(a)), Some(topdeck::Value::Histogram(b))) =
    ///     (after.get("wait_seconds", &[]), before.get("wait_seconds", &[])) else { panic!() };
    /// let d = a.since(b);
    /// assert_eq!((d.count, d.sum, d.max), (1, 2.0, None));
    /// ```
    pub fn since(&self, before: &HistogramValue) -> HistogramValue {
        let comparable = self.schema == before.schema
            && self.min_index == before.min_index
            && self.buckets.len() == before.buckets.len();
        if !comparable {
            return self.clone();
        }
        let zero_count = self.zero_count.saturating_sub(before.zero_count);
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .zip(&before.buckets)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        HistogramValue {
            schema: self.schema,
            zero_threshold: self.zero_threshold,
            count: buckets.iter().fold(zero_count, |a, &b| a.saturating_add(b)),
            zero_count,
            min_index: self.min_index,
            buckets,
            sum: self.sum - before.sum,
            max: None,
        }
    }

    /// Estimates the `q`-quantile (0..=1): the rank's bucket, interpolated
    /// exponentially inside it (as Prometheus does for native histograms),
    /// capped at the recorded maximum. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * self.count as f64;
        let mut seen = self.zero_count as f64;
        if rank <= seen {
            return Some(0.0);
        }
        for (i, &n) in self.buckets.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let before = seen;
            seen += n as f64;
            if rank <= seen {
                let index = self.min_index + i as i32;
                let (lo, hi) = (
                    upper_bound(self.schema, index - 1),
                    upper_bound(self.schema, index),
                );
                let frac = (rank - before) / n as f64;
                let v = lo * (hi / lo).powf(frac);
                return Some(self.max.map_or(v, |m| v.min(m)));
            }
        }
        self.max
    }

    /// Mean of the observations.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// `(upper bound, count)` of each non-empty bucket, zero bucket first.
    pub fn nonzero_buckets(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        std::iter::once((self.zero_threshold, self.zero_count))
            .chain(
                self.buckets
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (upper_bound(self.schema, self.min_index + i as i32), n)),
            )
            .filter(|&(_, n)| n > 0)
    }
}

/// A histogram with fixed bounds, as another runtime keeps it (Prometheus'
/// classic histogram): cumulative counts, kept as floats as
/// prometheus_client keeps them.
///
/// ```
/// use topdeck::BucketsValue;
/// let h = BucketsValue {
///     buckets: vec![(0.5, 2.0), (1.0, 6.0), (f64::INFINITY, 8.0)],
///     count: 8.0,
///     sum: 5.5,
/// };
/// // Rank 4 of 8 is halfway through the 4 observations in (0.5, 1].
/// assert_eq!(h.quantile(0.5), Some(0.75));
/// // Ranks in the +Inf bucket read as the highest finite bound.
/// assert_eq!(h.quantile(0.99), Some(1.0));
/// assert_eq!(h.mean(), Some(5.5 / 8.0));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BucketsValue {
    /// `(upper bound, cumulative count)`, ascending by bound, the last
    /// bound `f64::INFINITY`.
    pub buckets: Vec<(f64, f64)>,
    /// Total observations (the `+Inf` bucket's count).
    pub count: f64,
    /// Sum of observations.
    pub sum: f64,
}

impl BucketsValue {
    /// The observations made between `before` (an earlier snapshot of the
    /// same histogram) and this one: counts subtracted bucket by bucket,
    /// never below zero (counts only grow: a torn read must not invent
    /// observations). A `before` with other bounds is not comparable:
    /// everything since start is returned.
    ///
    /// ```
    /// use topdeck::BucketsValue;
    /// let before = BucketsValue { buckets: vec![(1.0, 3.0), (f64::INFINITY, 4.0)], count: 4.0, sum: 2.0 };
    /// let now = BucketsValue { buckets: vec![(1.0, 5.0), (f64::INFINITY, 7.0)], count: 7.0, sum: 6.5 };
    /// let d = now.since(&before);
    /// assert_eq!(d.buckets, [(1.0, 2.0), (f64::INFINITY, 3.0)]);
    /// assert_eq!((d.count, d.sum), (3.0, 4.5));
    /// ```
    pub fn since(&self, before: &BucketsValue) -> BucketsValue {
        let comparable = self.buckets.len() == before.buckets.len()
            && self
                .buckets
                .iter()
                .zip(&before.buckets)
                .all(|((a, _), (b, _))| a == b);
        if !comparable {
            return self.clone();
        }
        BucketsValue {
            buckets: self
                .buckets
                .iter()
                .zip(&before.buckets)
                .map(|(&(le, a), &(_, b))| (le, (a - b).max(0.0)))
                .collect(),
            count: (self.count - before.count).max(0.0),
            sum: self.sum - before.sum,
        }
    }

    /// Estimates the `q`-quantile (0..=1) as Prometheus' `histogram_quantile`
    /// does for classic buckets: the rank's bucket, interpolated linearly
    /// between its bounds (from 0 for the first bucket if its bound is
    /// positive); a rank in the `+Inf` bucket reads as the highest finite
    /// bound. `None` when empty, or without a finite bound and `+Inf`.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let b = &self.buckets;
        let total = b.last().filter(|(le, _)| *le == f64::INFINITY)?.1;
        if b.len() < 2 || total.is_nan() || total <= 0.0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * total;
        // Counts that went down (a torn read) are read as flat, as
        // Prometheus does.
        let mut floor = 0.0f64;
        let cum: Vec<f64> = b
            .iter()
            .map(|&(_, c)| {
                floor = floor.max(c);
                floor
            })
            .collect();
        let i = cum.iter().position(|&c| c >= rank)?;
        if i == b.len() - 1 {
            return Some(b[i - 1].0);
        }
        if i == 0 && b[0].0 <= 0.0 {
            return Some(b[0].0);
        }
        let (start, below) = if i == 0 {
            (0.0, 0.0)
        } else {
            (b[i - 1].0, cum[i - 1])
        };
        let n = cum[i] - below;
        if n <= 0.0 {
            // Rank 0 in an empty first bucket.
            return Some(start);
        }
        Some(start + (b[i].0 - start) * ((rank - below) / n))
    }

    /// Mean of the observations.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }
}

/// One registry's metrics as read at one moment; [`Snapshot::default()`]
/// has none.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub(crate) metrics: Arc<Vec<MetricInfo>>,
    pub(crate) values: Vec<Value>,
    /// The reader that took it (never 0): a reader's metrics only grow,
    /// so its earlier snapshots hold a prefix of its later ones.
    pub(crate) reader: u64,
}

impl Snapshot {
    /// Metrics and their values, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = (&MetricInfo, &Value)> {
        self.metrics.iter().zip(&self.values)
    }

    /// The reader that took it. Two snapshots of one lineage list their
    /// metrics in one order, the earlier's a prefix of the later's; a
    /// consumer that laid out an earlier snapshot's metrics (an exporter's
    /// grouping) may reuse the layout for a later one of the same lineage
    /// and length.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
    /// let mut other = topdeck::RegistryReader::open(registry.path()).unwrap();
    /// let (a, b) = (reader.snapshot().unwrap(), reader.snapshot().unwrap());
    /// assert_eq!(a.lineage(), b.lineage());
    /// assert_ne!(a.lineage(), other.snapshot().unwrap().lineage());
    /// ```
    pub fn lineage(&self) -> u64 {
        self.reader
    }

    /// Keeps the metrics `keep` accepts, called once per metric in order
    /// (an exporter's allow lists and caps). The lineage stays: a consumer
    /// that decides by each metric alone, or cuts a prefix, still sees
    /// each later snapshot's kept metrics extend an earlier one's. Cutting
    /// a prefix costs nothing; leaving out metrics in the middle copies
    /// the descriptors of those kept.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// for name in ["a_total", "secret_total", "b_total"] {
    ///     registry.counter(name, &[], "", "").unwrap();
    /// }
    /// let mut snap = topdeck::RegistryReader::open(registry.path()).unwrap().snapshot().unwrap();
    /// snap.retain(|m, _| !m.name.starts_with("secret"));
    /// let names: Vec<_> = snap.iter().map(|(m, _)| m.name.as_str()).collect();
    /// assert_eq!(names, ["a_total", "b_total"]);
    /// ```
    pub fn retain(&mut self, mut keep: impl FnMut(&MetricInfo, &Value) -> bool) {
        let kept: Vec<bool> = self.iter().map(|(m, v)| keep(m, v)).collect();
        let prefix = kept.iter().take_while(|&&k| k).count();
        if kept[prefix..].iter().all(|&k| !k) {
            self.values.truncate(prefix);
            return;
        }
        let mut keep = kept.iter();
        self.values.retain(|_| *keep.next().unwrap_or(&false));
        self.metrics = Arc::new(
            self.metrics
                .iter()
                .zip(&kept)
                .filter(|(_, &k)| k)
                .map(|(m, _)| m.clone())
                .collect(),
        );
    }

    /// Number of metrics.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the registry had no metrics.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value of the metric with this name and exactly these labels.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Value> {
        self.iter()
            .find(|(m, _)| {
                m.name == name
                    && m.labels.len() == labels.len()
                    && m.labels
                        .iter()
                        .zip(labels)
                        .all(|((a, b), (c, d))| a == c && b == d)
            })
            .map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(buckets: Vec<u64>, max: f64) -> HistogramValue {
        let count = buckets.iter().sum();
        HistogramValue {
            schema: 3,
            zero_threshold: 0.0,
            zero_count: 0,
            min_index: 0,
            buckets,
            count,
            sum: 0.0,
            max: Some(max),
        }
    }

    #[test]
    fn quantiles_stay_inside_their_bucket_and_below_max() {
        let h = hist(vec![0, 0, 0, 100], 1.2);
        let (lo, hi) = (upper_bound(3, 2), upper_bound(3, 3));
        for q in [0.01, 0.5, 0.99] {
            let v = h.quantile(q).unwrap();
            assert!(v > lo && v <= hi, "{q} {v}");
        }
        let capped = hist(vec![0, 0, 0, 100], lo * 1.01);
        assert_eq!(capped.quantile(0.99), Some(lo * 1.01));
    }

    #[test]
    fn an_interval_holds_only_the_new_observations_and_no_max() {
        // Since start, most observations are in bucket 0; during the
        // interval, all 10 new ones fell in bucket 2.
        let d = hist(vec![50, 1, 10], 1e9).since(&hist(vec![50, 1, 0], 1e9));
        assert_eq!((d.count, d.max), (10, None));
        assert_eq!(d.buckets, [0, 0, 10]);
        let v = d.quantile(0.5).unwrap();
        assert!(v > upper_bound(3, 1) && v <= upper_bound(3, 2), "{v}");
        // Counts that went backwards (a torn read) invent nothing.
        assert_eq!(
            hist(vec![5, 0, 0], 1.0)
                .since(&hist(vec![6, 0, 0], 1.0))
                .count,
            0
        );
        // Another layout is not comparable: everything since start.
        let mut other = hist(vec![1, 2], 1.0);
        other.min_index = 4;
        assert_eq!(hist(vec![50, 1, 10], 1.0).since(&other).count, 61);
    }

    fn classic(buckets: &[(f64, f64)]) -> BucketsValue {
        BucketsValue {
            buckets: buckets.to_vec(),
            count: buckets.last().map_or(0.0, |b| b.1),
            sum: 0.0,
        }
    }

    #[test]
    fn classic_quantiles_interpolate_linearly_as_prometheus_does() {
        let inf = f64::INFINITY;
        let h = classic(&[(1.0, 10.0), (2.0, 30.0), (4.0, 40.0), (inf, 40.0)]);
        // (rank, want): inside the first bucket from 0, inside the second
        // between its bounds, at a bound.
        for (q, want) in [
            (0.125, 0.5),
            (0.5, 1.5),
            (0.75, 2.0),
            (0.875, 3.0),
            (0.0, 0.0),
        ] {
            assert_eq!(h.quantile(q), Some(want), "q {q}");
        }
        // Ranks past the last finite bound read as that bound.
        let over = classic(&[(1.0, 1.0), (inf, 3.0)]);
        assert_eq!(over.quantile(0.9), Some(1.0));
        // A first bound at or below zero is returned as it is.
        let negative = classic(&[(-1.0, 5.0), (0.0, 6.0), (inf, 6.0)]);
        assert_eq!(negative.quantile(0.5), Some(-1.0));
        // Fractional counts, as prometheus_client may keep them.
        let fractional = classic(&[(2.0, 0.5), (inf, 0.5)]);
        assert_eq!(fractional.quantile(0.5), Some(1.0));
        // A count that went down is read as flat.
        let torn = classic(&[(1.0, 4.0), (2.0, 3.0), (3.0, 8.0), (inf, 8.0)]);
        assert_eq!(torn.quantile(0.5), Some(1.0));
    }

    #[test]
    fn classic_quantiles_need_observations_and_an_inf_bucket() {
        let inf = f64::INFINITY;
        assert_eq!(classic(&[(1.0, 0.0), (inf, 0.0)]).quantile(0.5), None);
        assert_eq!(classic(&[(1.0, 2.0), (2.0, 3.0)]).quantile(0.5), None);
        assert_eq!(classic(&[(inf, 3.0)]).quantile(0.5), None);
        assert_eq!(classic(&[]).quantile(0.5), None);
        assert_eq!(classic(&[(1.0, 2.0), (inf, 3.0)]).quantile(1.5), None);
        assert_eq!(classic(&[(1.0, 2.0), (inf, 3.0)]).mean(), Some(0.0));
        assert_eq!(classic(&[(inf, 0.0)]).mean(), None);
    }

    #[test]
    fn a_classic_interval_subtracts_bucket_by_bucket_or_counts_since_start() {
        let inf = f64::INFINITY;
        let before = classic(&[(1.0, 3.0), (2.0, 3.5), (inf, 4.0)]);
        let now = classic(&[(1.0, 3.0), (2.0, 6.0), (inf, 6.5)]);
        let d = now.since(&before);
        assert_eq!(d.buckets, [(1.0, 0.0), (2.0, 2.5), (inf, 2.5)]);
        assert_eq!(d.count, 2.5);
        // Counts that went backwards invent nothing.
        let d = before.since(&now);
        assert_eq!(d.buckets, [(1.0, 0.0), (2.0, 0.0), (inf, 0.0)]);
        assert_eq!(d.count, 0.0);
        // Other bounds: everything since start.
        let other = classic(&[(1.0, 1.0), (5.0, 2.0), (inf, 2.0)]);
        assert_eq!(now.since(&other), now);
        let fewer = classic(&[(1.0, 1.0), (inf, 2.0)]);
        assert_eq!(now.since(&fewer), now);
    }

    #[test]
    fn empty_histograms_have_no_quantiles() {
        assert_eq!(hist(vec![0; 4], 0.0).quantile(0.5), None);
        assert_eq!(hist(vec![1; 4], 1.0).quantile(1.5), None);
    }
}
