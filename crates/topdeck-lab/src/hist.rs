// SPDX-License-Identifier: Apache-2.0
//! Victim latency: every sample is kept (a few hundred thousand u64s at
//! most), so percentiles are exact, and a logarithmic table with one bucket
//! per decade (<1µs, <10µs, … <1s, >1s, and the max) is printed like the
//! article's `socket`/`close` rows.

use serde::{Deserialize, Serialize};

use crate::table::{self, Table};

/// Upper bounds (exclusive, in ns) of the decade buckets; the last bucket
/// holds everything at or above one second.
pub const DECADE_BOUNDS_NS: [u64; 7] = [
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// Column headers of the decade table, as in the article.
pub const DECADE_LABELS: [&str; 8] = [
    "<1us", "<10us", "<100us", "<1ms", "<10ms", "<100ms", "<1sec", ">1sec",
];

/// The percentiles every summary carries.
pub const PERCENTILES: [f64; 5] = [0.5, 0.9, 0.99, 0.999, 0.9999];

/// One series of samples (e.g. `socket` or `close`), summarised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// What was timed.
    pub name: String,
    /// Samples.
    pub count: u64,
    /// Samples per decade bucket, [`DECADE_LABELS`] order.
    pub decades: [u64; 8],
    /// `(q, ns)` for each of [`PERCENTILES`].
    pub percentiles: Vec<(f64, u64)>,
    /// Slowest sample, ns.
    pub max_ns: u64,
    /// Mean, ns.
    pub mean_ns: f64,
}

impl Summary {
    /// Summarises `samples` (ns); sorts them in place.
    ///
    /// ```
    /// let mut s = vec![500, 5_000, 5_000, 2_000_000];
    /// let h = topdeck_lab::hist::Summary::of("close", &mut s);
    /// assert_eq!(h.count, 4);
    /// assert_eq!(h.decades, [1, 2, 0, 0, 1, 0, 0, 0]);
    /// assert_eq!(h.max_ns, 2_000_000);
    /// ```
    pub fn of(name: &str, samples: &mut [u64]) -> Self {
        samples.sort_unstable();
        let mut decades = [0u64; 8];
        for &s in samples.iter() {
            decades[decade(s)] += 1;
        }
        let n = samples.len();
        let percentiles = PERCENTILES
            .iter()
            .map(|&q| (q, percentile_sorted(samples, q)))
            .collect();
        let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
        Self {
            name: name.to_owned(),
            count: n as u64,
            decades,
            percentiles,
            max_ns: samples.last().copied().unwrap_or(0),
            mean_ns: if n == 0 { 0.0 } else { sum as f64 / n as f64 },
        }
    }

    /// The `q` percentile in ns (nearest rank), 0 when `q` was not kept.
    pub fn p(&self, q: f64) -> u64 {
        self.percentiles
            .iter()
            .find(|(k, _)| (k - q).abs() < 1e-12)
            .map_or(0, |&(_, v)| v)
    }
}

/// Index of the decade bucket `ns` falls in.
pub fn decade(ns: u64) -> usize {
    DECADE_BOUNDS_NS
        .iter()
        .position(|&b| ns < b)
        .unwrap_or(DECADE_BOUNDS_NS.len())
}

/// Nearest-rank percentile of sorted samples; 0 for no samples.
pub fn percentile_sorted(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The article's table: one row per series, decade counts, then the max.
pub fn decade_table<'a>(rows: impl IntoIterator<Item = (String, &'a Summary)>) -> Table {
    let mut header: Vec<String> = vec![String::new()];
    header.extend(DECADE_LABELS.iter().map(|s| s.to_string()));
    header.push("max".into());
    let mut t = Table::new(header);
    for (label, s) in rows {
        let mut cells = vec![label];
        cells.extend(s.decades.iter().map(u64::to_string));
        cells.push(format!("{}ns", s.max_ns));
        t.row(cells);
    }
    t
}

/// Percentiles of `base` and `other` side by side with the shift of each.
pub fn shift_table(base: &Summary, other: &Summary, other_label: &str) -> Table {
    let mut t = Table::new(["", "alone", other_label, "shift"]);
    let mut row = |name: String, a: f64, b: f64| {
        let shift = if a > 0.0 { b / a } else { f64::NAN };
        t.row([name, table::ns(a), table::ns(b), table::ratio(shift)]);
    };
    for &(q, a) in &base.percentiles {
        row(format!("p{}", q * 100.0), a as f64, other.p(q) as f64);
    }
    row("max".into(), base.max_ns as f64, other.max_ns as f64);
    row("mean".into(), base.mean_ns, other.mean_ns);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decades_split_at_powers_of_ten() {
        assert_eq!(decade(0), 0);
        assert_eq!(decade(999), 0);
        assert_eq!(decade(1_000), 1);
        assert_eq!(decade(999_999_999), 6);
        assert_eq!(decade(1_000_000_000), 7);
        assert_eq!(decade(u64::MAX), 7);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_sorted(&s, 0.5), 50);
        assert_eq!(percentile_sorted(&s, 0.99), 99);
        assert_eq!(percentile_sorted(&s, 1.0), 100);
        assert_eq!(percentile_sorted(&[], 0.5), 0);
    }

    #[test]
    fn the_table_counts_every_sample() {
        let mut s: Vec<u64> = (0..1000).map(|i| i * 1_000_003).collect();
        let h = Summary::of("x", &mut s);
        assert_eq!(h.decades.iter().sum::<u64>(), 1000);
        let text = decade_table([("x".to_string(), &h)]).render();
        assert!(text.starts_with("  | <1us |"), "{text}");
        assert!(text.contains(&format!("{}ns", h.max_ns)));
    }
}
