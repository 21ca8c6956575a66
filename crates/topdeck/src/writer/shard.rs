// SPDX-License-Identifier: Apache-2.0
//! Per-thread shard indices, shared by every registry of the process.
//!
//! A thread takes the lowest free index the first time it updates a sharded
//! metric and gives it back when it exits, so a handful of indices serve
//! any number of short-lived threads. The values a thread left in its shard
//! stay there and pass to the next owner: sums stay exact and never go
//! backwards. The hand-over goes through the pool's mutex, which orders the
//! old owner's last store before the new owner's first load.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;
use std::sync::{Mutex, MutexGuard, Weak};

use super::mapping::Mapping;

/// This thread has no index yet.
pub(crate) const UNSET: u32 = u32::MAX;
/// This thread is exiting and has given its index back: use the overflow shard.
pub(crate) const RETIRED: u32 = u32::MAX - 1;

thread_local! {
    // `const` and no destructor: reading it compiles to one TLS load.
    static INDEX: Cell<u32> = const { Cell::new(UNSET) };
    static LEASE: LeaseSlot = const { LeaseSlot(RefCell::new(None)) };
}

/// Holds the thread's lease; dropping it at thread exit retires the thread.
struct LeaseSlot(RefCell<Option<Rc<Lease>>>);

impl Drop for LeaseSlot {
    fn drop(&mut self) {
        // Later updates from this thread's other destructors go to the
        // overflow shard; handles bound to the thread keep their own lease.
        let _ = INDEX.try_with(|i| i.set(RETIRED));
    }
}

/// Ownership of one shard index; the index is free again when the last
/// holder drops it.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) index: u32,
}

impl Drop for Lease {
    fn drop(&mut self) {
        pool().free.push(Reverse(self.index));
    }
}

struct Pool {
    free: BinaryHeap<Reverse<u32>>,
    /// Indices handed out so far (the high-water mark).
    next: u32,
    registries: Vec<Weak<Mapping>>,
}

fn pool() -> MutexGuard<'static, Pool> {
    static POOL: Mutex<Pool> = Mutex::new(Pool {
        free: BinaryHeap::new(),
        next: 0,
        registries: Vec::new(),
    });
    // A panic while holding the pool lock leaves it consistent (each
    // operation is a single push, pop or increment), so poison is ignored.
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The calling thread's shard index: [`UNSET`], [`RETIRED`] or an index.
#[inline(always)]
pub(crate) fn current() -> u32 {
    INDEX.with(Cell::get)
}

/// Gives the calling thread an index if it has none; returns its index or [`RETIRED`].
#[cold]
pub(crate) fn claim() -> u32 {
    lease().map_or(RETIRED, |l| l.index)
}

/// The calling thread's lease, taken now if needed; `None` while the thread exits.
pub(crate) fn lease() -> Option<Rc<Lease>> {
    if current() == RETIRED {
        return None;
    }
    LEASE
        .try_with(|slot| {
            let mut slot = slot.0.borrow_mut();
            let lease = slot.get_or_insert_with(|| Rc::new(Lease { index: acquire() }));
            INDEX.with(|i| i.set(lease.index));
            Rc::clone(lease)
        })
        .ok()
}

fn acquire() -> u32 {
    let mut pool = pool();
    if let Some(Reverse(i)) = pool.free.pop() {
        return i;
    }
    let i = pool.next;
    pool.next += 1;
    let in_use = pool.next;
    pool.registries.retain(|r| match r.upgrade() {
        Some(m) => {
            m.publish_shards_in_use(in_use);
            true
        }
        None => false,
    });
    i
}

/// Announces a new registry: its readers must look at every index handed out so far.
pub(crate) fn register(mapping: &std::sync::Arc<Mapping>) {
    let mut pool = pool();
    mapping.publish_shards_in_use(pool.next);
    pool.registries.push(std::sync::Arc::downgrade(mapping));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exited_threads_give_their_index_to_the_next_thread() {
        let first = std::thread::spawn(claim).join().unwrap();
        let second = std::thread::spawn(claim).join().unwrap();
        // Other tests run threads too, so only the reuse of low indices is certain.
        assert!(first < 64 && second < 64, "{first} {second}");
        assert_ne!(claim(), RETIRED);
        assert_eq!(claim(), current());
    }

    #[test]
    fn live_threads_hold_distinct_indices() {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let b = barrier.clone();
                std::thread::spawn(move || {
                    let i = claim();
                    b.wait();
                    i
                })
            })
            .collect();
        let mut got: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 8);
    }
}
