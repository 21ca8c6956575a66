// SPDX-License-Identifier: Apache-2.0
//! Requests waiting to be delivered, in a bounded queue, and when to try
//! again after a failure.
//!
//! Every interval makes one batch (a cumulative snapshot of every series),
//! as one request or a few; while the receiver is unreachable they wait
//! here, oldest first. The queue holds at most a number of requests and of
//! bytes: beyond either, the oldest request is dropped, and the caller
//! counts and logs it. Since every series is cumulative, a dropped request
//! loses resolution (the points of those intervals), never a total: the
//! next delivered batch carries every count.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Longest wait between attempts, unless the receiver asks for longer
/// (`Retry-After`) or the interval is longer.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Longest `Retry-After` honoured: a receiver asking for more is asked
/// again after this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// One request body, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// The encoded (and compressed, if asked) request.
    pub body: Vec<u8>,
    /// Data points in it.
    pub points: usize,
}

/// Requests waiting, at most `max_requests` and `max_bytes` of them (a
/// single request larger than `max_bytes` is still kept, alone).
#[derive(Debug)]
pub struct Queue {
    waiting: VecDeque<Pending>,
    bytes: usize,
    max_requests: usize,
    max_bytes: usize,
}

impl Queue {
    pub fn new(max_requests: usize, max_bytes: usize) -> Self {
        Self {
            waiting: VecDeque::new(),
            bytes: 0,
            max_requests: max_requests.max(1),
            max_bytes,
        }
    }

    /// Adds `p` last, and returns the batches dropped to make room for it,
    /// oldest first.
    pub fn push(&mut self, p: Pending) -> Vec<Pending> {
        let mut dropped = Vec::new();
        while !self.waiting.is_empty()
            && (self.waiting.len() >= self.max_requests
                || self.bytes + p.body.len() > self.max_bytes)
        {
            if let Some(old) = self.pop() {
                dropped.push(old);
            }
        }
        self.bytes += p.body.len();
        self.waiting.push_back(p);
        dropped
    }

    /// The oldest batch.
    pub fn front(&self) -> Option<&Pending> {
        self.waiting.front()
    }

    /// Removes the oldest batch (delivered, or refused for good).
    pub fn pop(&mut self) -> Option<Pending> {
        let p = self.waiting.pop_front()?;
        self.bytes -= p.body.len();
        Some(p)
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The most requests it holds.
    pub fn max_requests(&self) -> usize {
        self.max_requests
    }
}

/// A time when requests could not be delivered: since when, and what the
/// queue dropped meanwhile, for the line that says it is over.
#[derive(Debug)]
pub struct Outage {
    since: Instant,
    requests: u64,
    points: u64,
}

impl Outage {
    /// An outage that began at `since`, nothing dropped yet.
    pub fn new(since: Instant) -> Self {
        Self {
            since,
            requests: 0,
            points: 0,
        }
    }

    /// Counts `p`, dropped to make room; returns whether it is the first.
    pub fn dropped(&mut self, p: &Pending) -> bool {
        self.requests += 1;
        self.points += p.points as u64;
        self.requests == 1
    }

    /// How long it lasted, by `now`, and what it cost: `lasted 12.3s (5
    /// failed attempts); 3 requests of 1200 points dropped over it`.
    pub fn summary(&self, now: Instant, failures: u32) -> String {
        // Tenths of a second: enough for a log line.
        let lasted = now.saturating_duration_since(self.since);
        let lasted = Duration::from_millis(lasted.as_millis() as u64 / 100 * 100);
        format!(
            "lasted {} ({failures} failed attempt{}); {} request{} of {} point{} dropped over it",
            humantime::format_duration(lasted),
            plural(u64::from(failures)),
            self.requests,
            plural(self.requests),
            self.points,
            plural(self.points),
        )
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// When the next attempt may be made: exponential from the interval,
/// doubling at each failure up to [`MAX_BACKOFF`] (or the interval, if
/// longer), or after the receiver's `Retry-After`.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
    not_before: Option<Instant>,
}

impl Backoff {
    /// Whether an attempt may be made at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        self.not_before.is_none_or(|t| now >= t)
    }

    /// Consecutive failed attempts.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// An attempt failed at `now`; `retry_after` is the receiver's ask.
    /// Returns the wait before the next attempt.
    pub fn failed(
        &mut self,
        now: Instant,
        interval: Duration,
        retry_after: Option<Duration>,
    ) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let doubling = interval.saturating_mul(1 << (self.failures - 1).min(16));
        let wait = match retry_after {
            Some(d) => d.min(MAX_RETRY_AFTER),
            None => doubling.min(MAX_BACKOFF.max(interval)),
        };
        self.not_before = Some(now + wait);
        wait
    }

    /// An attempt succeeded: the next one may be made at once.
    pub fn succeeded(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize, bytes: usize) -> Pending {
        Pending {
            body: vec![n as u8; bytes],
            points: n,
        }
    }

    #[test]
    fn the_oldest_batches_go_first_when_the_queue_is_full() {
        let mut q = Queue::new(3, 1 << 20);
        for n in 0..3 {
            assert!(q.push(batch(n, 10)).is_empty());
        }
        let dropped = q.push(batch(3, 10));
        assert_eq!(dropped.iter().map(|p| p.points).collect::<Vec<_>>(), [0]);
        assert_eq!(q.len(), 3);
        assert_eq!(q.front().unwrap().points, 1);
        assert_eq!(q.pop().unwrap().points, 1);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn bytes_bound_the_queue_too_but_a_lone_large_batch_is_kept() {
        let mut q = Queue::new(100, 25);
        assert!(q.push(batch(0, 10)).is_empty());
        assert!(q.push(batch(1, 10)).is_empty());
        let dropped = q.push(batch(2, 10));
        assert_eq!(dropped.iter().map(|p| p.points).collect::<Vec<_>>(), [0]);
        let dropped = q.push(batch(3, 100));
        assert_eq!(dropped.iter().map(|p| p.points).collect::<Vec<_>>(), [1, 2]);
        assert_eq!((q.len(), q.front().unwrap().points), (1, 3));
    }

    #[test]
    fn an_outage_says_how_long_it_lasted_and_the_points_it_dropped() {
        let t = Instant::now();
        let mut o = Outage::new(t);
        assert!(o.dropped(&batch(40, 1)));
        assert!(!o.dropped(&batch(2, 1)));
        assert_eq!(
            o.summary(t + Duration::from_millis(12_345), 5),
            "lasted 12s 300ms (5 failed attempts); 2 requests of 42 points dropped over it"
        );
        assert_eq!(
            Outage::new(t).summary(t + Duration::from_secs(1), 1),
            "lasted 1s (1 failed attempt); 0 requests of 0 points dropped over it"
        );
    }

    #[test]
    fn backoff_doubles_from_the_interval_up_to_its_cap_and_honours_retry_after() {
        let mut b = Backoff::default();
        let t = Instant::now();
        let i = Duration::from_secs(10);
        assert!(b.ready(t));
        let waits: Vec<u64> = (0..5).map(|_| b.failed(t, i, None).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 60, 60]);
        assert!(!b.ready(t + Duration::from_secs(59)));
        assert!(b.ready(t + Duration::from_secs(60)));
        assert_eq!(b.failed(t, i, Some(Duration::from_secs(7))).as_secs(), 7);
        assert_eq!(
            b.failed(t, i, Some(Duration::from_secs(7200))),
            MAX_RETRY_AFTER
        );
        assert_eq!(b.failures(), 7);
        b.succeeded();
        assert!(b.ready(t) && b.failures() == 0);
        // An interval longer than the cap is the cap.
        let long = Duration::from_secs(600);
        assert_eq!(b.failed(t, long, None), long);
        assert_eq!(b.failed(t, long, None), long);
    }
}
