// SPDX-License-Identifier: Apache-2.0
//! Counters: per-thread shards summed by readers.

use std::fmt;
use std::rc::Rc;
use std::sync::atomic::AtomicU64;

use super::cell::{Adder, Contended, Owned, ShardedBlock};
use super::shard::{self, Lease};

/// A monotonic counter. Updating costs a thread-local load and an add to a
/// word only this thread writes: no lock, no syscall, no shared cache line.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let requests = registry.counter("requests_total", &[("method", "GET")], "Requests served.", "").unwrap();
/// requests.inc();
/// requests.add(2);
/// assert_eq!(requests.get(), 3);
/// ```
#[derive(Clone)]
#[must_use]
pub struct Counter {
    block: ShardedBlock,
}

impl Counter {
    pub(crate) fn new(block: ShardedBlock) -> Self {
        Self { block }
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }

    /// Adds `n`. A total that would pass `u64::MAX` stays there: a counter
    /// stops rather than going backwards (readers sum shards the same way).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// let bytes = registry.counter("bytes_total", &[], "Bytes read.", "bytes").unwrap();
    /// bytes.add(u64::MAX - 1);
    /// bytes.add(5);
    /// assert_eq!(bytes.get(), u64::MAX);
    /// ```
    #[inline]
    pub fn add(&self, n: u64) {
        match self.block.own_shard() {
            Some(s) => Owned::add_saturating(self.block.word(s, 0), n),
            None => Contended::add_saturating(self.block.word(self.block.overflow(), 0), n),
        }
    }

    /// The current total over all threads, as a reader would see it.
    pub fn get(&self) -> u64 {
        self.block.sum(0)
    }

    /// A handle bound to the calling thread: it skips even the thread-local
    /// lookup. It cannot leave the thread (it is neither `Send` nor `Sync`)
    /// and keeps the thread's shard reserved while it lives.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// let bytes = registry.counter("bytes_total", &[], "Bytes read.", "bytes").unwrap();
    /// let local = bytes.local();
    /// for _ in 0..10 { local.add(512); }
    /// assert_eq!(bytes.get(), 5120);
    /// ```
    pub fn local(&self) -> LocalCounter {
        let lease = shard::lease();
        match lease {
            Some(l) if l.index < self.block.shards => LocalCounter {
                word: self.block.word(l.index, 0),
                contended: false,
                _lease: Some(l),
                block: self.block.clone(),
            },
            _ => LocalCounter {
                word: self.block.word(self.block.shards, 0),
                contended: true,
                _lease: None,
                block: self.block.clone(),
            },
        }
    }
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("value", &self.get())
            .finish_non_exhaustive()
    }
}

/// A counter handle bound to one thread; see [`Counter::local`].
#[must_use]
pub struct LocalCounter {
    word: *const AtomicU64,
    contended: bool,
    _lease: Option<Rc<Lease>>,
    block: ShardedBlock,
}

impl LocalCounter {
    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }

    /// Adds `n`, stopping at `u64::MAX` as [`Counter::add`] does.
    #[inline]
    pub fn add(&self, n: u64) {
        // SAFETY: `word` points into the mapping `block` keeps alive; while
        // `_lease` lives no other thread owns this shard (or, when
        // `contended`, the word is only updated atomically).
        let w = unsafe { &*self.word };
        if self.contended {
            Contended::add_saturating(w, n)
        } else {
            Owned::add_saturating(w, n)
        }
    }

    /// The total over all threads.
    pub fn get(&self) -> u64 {
        self.block.sum(0)
    }
}

impl fmt::Debug for LocalCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCounter")
            .field("contended", &self.contended)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::Registry;

    #[test]
    fn threads_that_come_and_go_lose_no_increments() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::builder()
            .dir(dir.path())
            .shards(2)
            .build()
            .unwrap();
        let c = r.counter("events_total", &[], "", "").unwrap();
        std::thread::scope(|s| {
            for _ in 0..16 {
                let c = c.clone();
                s.spawn(move || {
                    for _ in 0..10_000 {
                        c.inc();
                    }
                    let l = c.local();
                    for _ in 0..10_000 {
                        l.inc();
                    }
                });
            }
        });
        assert_eq!(c.get(), 16 * 20_000);
    }

    #[test]
    fn a_total_past_u64_max_stays_there_in_every_shard_and_for_readers() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::builder()
            .dir(dir.path())
            .shards(1)
            .build()
            .unwrap();
        let c = r.counter("bytes_total", &[], "", "bytes").unwrap();
        // Two shards near the top: this thread's own and the overflow one
        // (the second thread finds the only shard taken).
        let near = u64::MAX - 10;
        let local = c.local();
        local.add(near);
        std::thread::scope(|s| {
            s.spawn(|| {
                c.add(near);
                c.add(near);
            });
        });
        local.add(100);
        assert_eq!(c.get(), u64::MAX);
        let mut reader = crate::RegistryReader::open(r.path()).unwrap();
        let snap = reader.snapshot().unwrap();
        assert_eq!(
            snap.get("bytes_total", &[]),
            Some(&crate::Value::Counter(u64::MAX))
        );
    }
}
