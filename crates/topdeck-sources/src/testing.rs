// SPDX-License-Identifier: Apache-2.0
//! What the adapters' tests compare: each series as name, labels, value.

use topdeck::{MetricInfo, Value};

/// `(name, labels, value)` of one series.
pub(crate) type Flat = (String, Vec<(String, String)>, Value);

pub(crate) fn flat(series: Vec<(MetricInfo, Value)>) -> Vec<Flat> {
    series
        .into_iter()
        .map(|(m, v)| (m.name, m.labels, v))
        .collect()
}
