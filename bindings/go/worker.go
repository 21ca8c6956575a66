// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"sync/atomic"
	"unsafe"
)

// Worker is a shard held by one goroutine, for its hottest loops: the
// Local handles made from it update with plain loads and stores (no atomic
// instruction, no shared cache line), as Rust's LocalCounter does. While
// the Worker is held no other goroutine writes its shard; Release gives
// the shard back and the next Worker continues from the values left, so
// sums never go backwards. When every Worker shard is taken, a Worker
// (and its handles) falls back to the atomic stripes: still exact.
//
// A Worker and its Local handles belong to one goroutine at a time.
//
//	w := reg.Worker()
//	defer w.Release()
//	jobs := jobsTotal.Local(w)
//	for ... { jobs.Inc() }
type Worker struct {
	r      *Registry
	shard  uint32
	owned  bool
	closed bool
}

// Worker takes a shard for the calling goroutine.
func (r *Registry) Worker() *Worker {
	i, ok := r.leaseShard()
	return &Worker{r: r, shard: i, owned: ok}
}

// Release gives the shard back. Local handles made from w must not be used afterwards.
func (w *Worker) Release() {
	if w.owned && !w.closed {
		w.r.returnShard(w.shard)
	}
	w.closed = true
}

// Owned says whether w holds a shard of its own (else its handles use the atomic stripes).
func (w *Worker) Owned() bool { return w.owned }

// LocalCounter is a Counter bound to a Worker; see Counter.Local.
type LocalCounter struct {
	p     *uint64
	owned bool
	r     *Registry // keeps the mapping alive while the handle is
}

// Local binds c to w: Inc and Add become a plain add to w's shard.
func (c *Counter) Local(w *Worker) LocalCounter {
	if !w.owned {
		return LocalCounter{p: (*uint64)(unsafe.Add(c.stripe, uintptr(stripeHint()&c.mask)*c.stride)), r: c.r}
	}
	return LocalCounter{p: (*uint64)(c.r.shardWord(w.shard, c.off)), owned: true, r: c.r}
}

// Inc adds one.
func (l LocalCounter) Inc() { l.Add(1) }

// Add adds n, stopping at 2^64-1 as Counter.Add does.
func (l LocalCounter) Add(n uint64) {
	if l.owned {
		// One aligned 8-byte store to memory only this goroutine writes:
		// readers in other processes see whole values.
		*l.p = saturating(*l.p, n)
		return
	}
	addSaturating((*atomic.Uint64)(unsafe.Pointer(l.p)), n)
}

// LocalHistogram is a Histogram bound to a Worker; see Histogram.Local.
type LocalHistogram struct {
	h     *Histogram
	p     unsafe.Pointer
	owned bool
}

// Local binds h to w: Observe becomes plain stores to w's shard.
func (h *Histogram) Local(w *Worker) LocalHistogram {
	if !w.owned {
		return LocalHistogram{h: h, p: unsafe.Add(h.stripe, uintptr(stripeHint()&h.mask)*h.stride)}
	}
	return LocalHistogram{h: h, p: h.r.shardWord(w.shard, h.off), owned: true}
}

// Observe records v.
func (l LocalHistogram) Observe(v float64) {
	j := l.h.slot(v)
	if j < 0 {
		return
	}
	if !l.owned {
		atomicRecord(l.p, j, v)
		return
	}
	w := (*[hHead]uint64)(l.p)
	*(*uint64)(unsafe.Add(l.p, j*word)) += 1
	w[hSum] = f64bits(f64frombits(w[hSum]) + v)
	if o := orderedBits(v); o > w[hMax] {
		w[hMax] = o
	}
	w[hCount]++
}
