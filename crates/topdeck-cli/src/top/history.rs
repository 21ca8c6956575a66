// SPDX-License-Identifier: Apache-2.0
//! The history of one series for its sparkline: a bounded ring that the
//! collection thread appends to and every harvest shares (see [`History`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// How many past readings each series keeps for its sparkline: two minutes
/// at the default interval, wider than any sparkline drawn in 80 columns.
pub const HISTORY: usize = 120;

/// A series' past readings, oldest first: counter rates, histogram p99s
/// (0 when nothing was observed), gauge values.
///
/// The collection thread appends one reading per pass to a ring it shares
/// with every harvest, and a harvest holds the ring plus how many readings
/// it had then. Handing over a handle instead of a copy keeps a pass's cost
/// independent of the history's length (a copy of 120 readings of 100,000
/// series would be 96 MB a pass); the view reads only the few it draws, and
/// sees them as of its harvest, not newer.
#[derive(Clone, Default)]
pub struct History {
    ring: Arc<Mutex<Ring>>,
    upto: u64,
}

/// The last [`HISTORY`] readings and how many were ever pushed.
#[derive(Default)]
struct Ring {
    values: VecDeque<f64>,
    pushed: u64,
}

impl History {
    /// A history of these readings.
    #[cfg(test)]
    pub fn of(values: &[f64]) -> Self {
        let h = Self::default();
        for &v in values {
            h.push(v);
        }
        h.current()
    }

    /// Appends a reading; the oldest goes beyond [`HISTORY`].
    pub(super) fn push(&self, v: f64) {
        let mut r = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if r.values.len() == HISTORY {
            r.values.pop_front();
        }
        r.values.push_back(v);
        r.pushed = r.pushed.saturating_add(1);
    }

    /// This ring as of now: what a harvest hands over.
    pub(super) fn current(&self) -> Self {
        let upto = self.ring.lock().unwrap_or_else(|p| p.into_inner()).pushed;
        Self {
            ring: Arc::clone(&self.ring),
            upto,
        }
    }

    /// The last `n` (at most) readings as of this harvest, oldest first.
    pub fn last(&self, n: usize) -> Vec<f64> {
        let r = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        // Readings pushed after this harvest are not its own.
        let newer = usize::try_from(r.pushed.saturating_sub(self.upto)).unwrap_or(usize::MAX);
        let end = r.values.len().saturating_sub(newer);
        r.values
            .range(end.saturating_sub(n)..end)
            .copied()
            .collect()
    }
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("upto", &self.upto)
            .finish_non_exhaustive()
    }
}

impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.last(HISTORY) == other.last(HISTORY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_harvest_sees_its_history_as_it_was_and_the_ring_is_bounded() {
        let ring = History::default();
        ring.push(1.0);
        ring.push(2.0);
        let then = ring.current();
        ring.push(3.0);
        assert_eq!(
            then.last(10),
            [1.0, 2.0],
            "a later reading is not this harvest's"
        );
        assert_eq!(then.last(1), [2.0]);
        assert_eq!(ring.current().last(10), [1.0, 2.0, 3.0]);
        for i in 0..HISTORY * 2 {
            ring.push(i as f64);
        }
        let all = ring.current().last(usize::MAX);
        assert_eq!(all.len(), HISTORY);
        assert_eq!(all.last(), Some(&((HISTORY * 2 - 1) as f64)));
    }
}
