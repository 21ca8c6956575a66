# SPDX-License-Identifier: Apache-2.0
"""Per-thread shard indices, shared by every registry of the process
(docs/FORMAT.md section 7, as the Rust library does it).

A thread takes the lowest free index the first time it updates a sharded
metric (counter, histogram) and gives it back when it exits; its values
stay in the shard and pass to the next owner, so sums stay exact and never
go backwards. Only the owning thread writes a shard, with a plain load and
an aligned 8-byte store: no update is lost even when a thread switch falls
between the load and the store (which the GIL allows), and on a
free-threaded CPython alike. The hand-over goes through ``_lock``, which
orders the old owner's last store before the new owner's first load.
"""

import heapq
import threading

_lock = threading.Lock()
_free = []
_next = 0
_generation = 0
_tls = threading.local()


class _Lease:
    """Ownership of one index, returned to the pool when the thread's
    local storage is dropped (at thread exit)."""

    __slots__ = ("index", "generation")

    def __init__(self, index, generation):
        self.index = index
        self.generation = generation

    def __del__(self):
        # A lease inherited through fork belongs to the parent's pool.
        try:
            if self.generation == _generation:
                with _lock:
                    heapq.heappush(_free, self.index)
        except (TypeError, AttributeError):
            pass  # interpreter shutdown: the module is gone, and so is the pool


def claim():
    """The calling thread's shard index, taking one if it has none."""
    global _next
    lease = getattr(_tls, "lease", None)
    if lease is None or lease.generation != _generation:
        with _lock:
            if _free:
                index = heapq.heappop(_free)
            else:
                index = _next
                _next += 1
        lease = _Lease(index, _generation)
        _tls.lease = lease
    return lease.index


def before_fork():
    _lock.acquire()


def after_fork_parent():
    _lock.release()


def after_fork_child():
    """Only the forking thread lives on in the child: every index is free
    again, and leases from before the fork are ignored."""
    global _lock, _free, _next, _generation, _tls
    _lock = threading.Lock()
    _free = []
    _next = 0
    _generation += 1
    _tls = threading.local()
