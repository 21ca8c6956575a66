// SPDX-License-Identifier: Apache-2.0
//! `push`'s own metrics, sent in every batch under their own resource
//! (`service.name` = `topdeck-push`), as they stood when the batch was
//! made:
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `topdeck_push_batches_total` | counter | batches made, one per interval |
//! | `topdeck_push_sent_total` | counter | requests the receiver accepted (a batch is one request, or a few for many series) |
//! | `topdeck_push_dropped_total{reason}` | counter | requests dropped: `queue_full` (the oldest, to bound the queue) or `refused` (the receiver refused them for good) |
//! | `topdeck_push_dropped_points_total` | counter | data points in those requests |
//! | `topdeck_push_rejected_points_total` | counter | data points a receiver refused in a partial success |
//! | `topdeck_push_failed_attempts_total` | counter | attempts that failed and will be retried |
//! | `topdeck_push_bytes_total` | counter | request bytes accepted (as sent, compressed or not) |
//! | `topdeck_push_queued` | gauge | requests waiting, this batch's excluded |
//! | `topdeck_push_series` | gauge | series read for this batch, these excluded |

use topdeck::{MetricInfo, MetricKind, Value};

pub const BATCHES: usize = 0;
pub const SENT: usize = 1;
pub const DROPPED_QUEUE_FULL: usize = 2;
pub const DROPPED_REFUSED: usize = 3;
pub const DROPPED_POINTS: usize = 4;
pub const REJECTED_POINTS: usize = 5;
pub const FAILED_ATTEMPTS: usize = 6;
pub const BYTES: usize = 7;
pub const QUEUED: usize = 8;
pub const SERIES: usize = 9;

/// The metrics, at the positions above.
pub struct Own(Vec<(MetricInfo, Value)>);

impl Own {
    pub fn new() -> Self {
        // At most one label each: the drop's reason.
        let m = |kind, name: &str, label: &[(&str, &str)], help: &str, unit: &str| {
            let value = match kind {
                MetricKind::Counter => Value::Counter(0),
                _ => Value::Gauge(0),
            };
            let labels = label.first().map(|&(k, v)| (k.into(), v.into()));
            let info = MetricInfo {
                kind,
                name: name.into(),
                labels: labels.into_iter().collect(),
                help: help.into(),
                unit: unit.into(),
            };
            (info, value)
        };
        use MetricKind::{Counter, GaugeI64};
        let dropped = "Requests dropped: the oldest when the queue is full, or refused for good.";
        Self(vec![
            m(
                Counter,
                "topdeck_push_batches_total",
                &[],
                "Batches made, one per interval.",
                "",
            ),
            m(
                Counter,
                "topdeck_push_sent_total",
                &[],
                "Requests the receiver accepted.",
                "",
            ),
            m(
                Counter,
                "topdeck_push_dropped_total",
                &[("reason", "queue_full")],
                dropped,
                "",
            ),
            m(
                Counter,
                "topdeck_push_dropped_total",
                &[("reason", "refused")],
                dropped,
                "",
            ),
            m(
                Counter,
                "topdeck_push_dropped_points_total",
                &[],
                "Data points in dropped requests.",
                "",
            ),
            m(
                Counter,
                "topdeck_push_rejected_points_total",
                &[],
                "Data points a receiver refused in a partial success.",
                "",
            ),
            m(
                Counter,
                "topdeck_push_failed_attempts_total",
                &[],
                "Attempts that failed and will be retried.",
                "",
            ),
            m(
                Counter,
                "topdeck_push_bytes_total",
                &[],
                "Request bytes accepted, as sent.",
                "bytes",
            ),
            m(
                GaugeI64,
                "topdeck_push_queued",
                &[],
                "Requests waiting to be sent.",
                "",
            ),
            m(
                GaugeI64,
                "topdeck_push_series",
                &[],
                "Series read for this batch.",
                "",
            ),
        ])
    }

    pub fn metrics(&self) -> &[(MetricInfo, Value)] {
        &self.0
    }

    pub fn add(&mut self, at: usize, n: u64) {
        if let Value::Counter(c) = &mut self.0[at].1 {
            *c = c.saturating_add(n);
        }
    }

    pub fn set(&mut self, at: usize, v: usize) {
        self.0[at].1 = Value::Gauge(i64::try_from(v).unwrap_or(i64::MAX));
    }
}
