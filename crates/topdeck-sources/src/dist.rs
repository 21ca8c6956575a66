// SPDX-License-Identifier: Apache-2.0
//! A latency distribution whichever way its runtime keeps it: topdeck's
//! native exponential histogram or a classic one with fixed bounds
//! (prometheus_client's), told apart here once so the join does not.

use topdeck::{BucketsValue, HistogramValue, Value};

/// Observations of seconds, cumulative or over a window.
#[derive(Debug, Clone, PartialEq)]
pub enum Dist {
    /// topdeck's exponential buckets.
    Native(HistogramValue),
    /// Fixed bounds (`le`).
    Classic(BucketsValue),
}

impl Dist {
    /// The distribution a value holds, if it is a histogram.
    pub fn of(value: &Value) -> Option<Self> {
        match value {
            Value::Histogram(h) => Some(Dist::Native((**h).clone())),
            Value::Buckets(b) => Some(Dist::Classic((**b).clone())),
            _ => None,
        }
    }

    /// Observations.
    pub fn count(&self) -> u64 {
        match self {
            Dist::Native(h) => h.count,
            Dist::Classic(b) => b.count.max(0.0) as u64,
        }
    }

    /// Sum of the observations, seconds.
    pub fn sum(&self) -> f64 {
        match self {
            Dist::Native(h) => h.sum,
            Dist::Classic(b) => b.sum,
        }
    }

    /// The `q`-quantile, seconds; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        match self {
            Dist::Native(h) => h.quantile(q),
            Dist::Classic(b) => b.quantile(q),
        }
    }

    /// What was observed since `before` (the same series, read earlier);
    /// a `before` of another shape gives everything since start.
    pub fn since(&self, before: &Dist) -> Dist {
        match (self, before) {
            (Dist::Native(a), Dist::Native(b)) => Dist::Native(a.since(b)),
            (Dist::Classic(a), Dist::Classic(b)) => Dist::Classic(a.since(b)),
            _ => self.clone(),
        }
    }
}
