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

//!
//! and the scraper's, the same families `serve` exports
//! ([`topdeck_export::Scraper::read_metrics`]): sources, series, and
//! skips by reason, type clashes included.

use topdeck_export::OwnMetrics;

pub const BATCHES: &str = "topdeck_push_batches_total";
pub const SENT: &str = "topdeck_push_sent_total";
pub const DROPPED: &str = "topdeck_push_dropped_total";
pub const QUEUE_FULL: &str = "queue_full";
pub const REFUSED: &str = "refused";
pub const DROPPED_POINTS: &str = "topdeck_push_dropped_points_total";
pub const REJECTED_POINTS: &str = "topdeck_push_rejected_points_total";
pub const FAILED_ATTEMPTS: &str = "topdeck_push_failed_attempts_total";
pub const BYTES: &str = "topdeck_push_bytes_total";
pub const QUEUED: &str = "topdeck_push_queued";

/// `push`'s metrics, declared.
pub fn metrics() -> OwnMetrics {
    let mut own = OwnMetrics::default();
    own.counter(BATCHES, "Batches made, one per interval.", "", None)
        .counter(SENT, "Requests the receiver accepted.", "", None)
        .counter(
            DROPPED,
            "Requests dropped: the oldest when the queue is full, or refused for good.",
            "",
            Some(("reason", &[QUEUE_FULL, REFUSED])),
        )
        .counter(DROPPED_POINTS, "Data points in dropped requests.", "", None)
        .counter(
            REJECTED_POINTS,
            "Data points a receiver refused in a partial success.",
            "",
            None,
        )
        .counter(
            FAILED_ATTEMPTS,
            "Attempts that failed and will be retried.",
            "",
            None,
        )
        .counter(BYTES, "Request bytes accepted, as sent.", "bytes", None)
        .gauge(QUEUED, "Requests waiting to be sent.");
    own
}
