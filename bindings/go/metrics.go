// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"
)

// Label is one label of a series; labels keep the order given.
type Label struct{ Name, Value string }

// L is a Label.
func L(name, value string) Label { return Label{name, value} }

// Option describes a series beyond its name and help: a Label, a Unit, Buckets.
type Option interface{ apply(*spec) error }

type spec struct {
	name, help, unit string
	labels           []Label
	buckets          *bucketRange
}

func (l Label) apply(s *spec) error { s.labels = append(s.labels, l); return nil }

// Unit is the series' unit (e.g. "seconds", "bytes"); empty by default.
type Unit string

func (u Unit) apply(s *spec) error { s.unit = string(u); return nil }

type bucketsOption struct {
	schema   int
	min, max float64
}

func (b bucketsOption) apply(s *spec) error {
	if !validSchema(b.schema) {
		return fmt.Errorf("topdeck: Buckets(%d, ...): the schema must be in %d..=%d", b.schema, minSchema, maxSchema)
	}
	if !(b.min > 0) || !(b.max >= b.min) || math.IsInf(b.max, 0) {
		return fmt.Errorf("topdeck: Buckets(%d, %v, %v): give 0 < min <= max, both finite", b.schema, b.min, b.max)
	}
	r := covering(b.schema, b.min, b.max)
	if r.bucketCount > maxBuckets {
		return fmt.Errorf("topdeck: Buckets(%d, %v, %v) needs %d buckets, more than %d; lower the schema or narrow the range", b.schema, b.min, b.max, r.bucketCount, maxBuckets)
	}
	s.buckets = &r
	return nil
}

// Buckets sets a histogram's exponential buckets: schema (-4..=8; bucket
// bounds are 2^(2^-schema) apart) covering (min, max]. The default is the
// Rust library's: schema 3 from 1e-9 to 1e6 (404 buckets).
func Buckets(schema int, min, max float64) Option { return bucketsOption{schema, min, max} }

// series registers one series of kind; it returns its description and
// the offset of its value block.
func (r *Registry) series(kind uint8, name, help string, opts []Option) (*spec, uint64, error) {
	s := &spec{name: name, help: help}
	for _, o := range opts {
		if err := o.apply(s); err != nil {
			return nil, 0, err
		}
	}
	words := uint32(1)
	if kind == kindHistogram {
		if s.buckets == nil {
			b := covering(defaultSchema, 1e-9, 1e6)
			s.buckets = &b
		}
		words = hHead + s.buckets.bucketCount
	} else if s.buckets != nil {
		return nil, 0, fmt.Errorf("topdeck: %q: Buckets is for histograms only", name)
	}
	off, err := r.register(kind, s, words, s.buckets)
	return s, off, err
}

// Counter is a monotonic count: a uint64 word in every shard, summed by readers.
type Counter struct {
	r      *Registry
	off    uint64
	stripe unsafe.Pointer // the word in stripe 0 (or the overflow shard)
	stride uintptr
	mask   uint32
}

// Counter registers a counter.
//
//	requests, err := reg.Counter("requests_total", "Requests served.", topdeck.L("method", "GET"))
//	requests.Inc()
func (r *Registry) Counter(name, help string, opts ...Option) (*Counter, error) {
	_, off, err := r.series(kindCounter, name, help, opts)
	if err != nil {
		return nil, err
	}
	c := &Counter{r: r, off: off}
	c.stripe, c.stride, c.mask = r.stripeBase(off)
	return c, nil
}

// stripeBase is where a block's stripes start, their stride and mask.
func (r *Registry) stripeBase(off uint64) (unsafe.Pointer, uintptr, uint32) {
	if r.stripes == 0 {
		return r.shardWord(r.lay.shardCount, off), 0, 0
	}
	return r.shardWord(0, off), uintptr(r.lay.shardLen), r.stripeMask
}

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Add adds n. A total that would pass 2^64-1 stays at 2^64-1: a counter
// stops rather than wrapping to a small value, backwards (readers sum the
// stripes the same way).
func (c *Counter) Add(n uint64) {
	addSaturating((*atomic.Uint64)(unsafe.Add(c.stripe, uintptr(stripeHint()&c.mask)*c.stride)), n)
}

// addSaturating adds n to a word other goroutines may update too, stopping
// at 2^64-1. Near the top, a compare-and-swap: an atomic add that wrapped
// would show readers the small value until it was put right. Below 2^63
// and for n below 2^56, an atomic add cannot carry past the top unless 2^7
// such adds are in flight at once, so the common case keeps its cost.
func addSaturating(w *atomic.Uint64, n uint64) {
	if n < 1<<56 && w.Load() < 1<<63 {
		w.Add(n)
		return
	}
	for {
		old := w.Load()
		if w.CompareAndSwap(old, saturating(old, n)) {
			return
		}
	}
}

// saturating is a+b, or 2^64-1 where that does not fit (branch-free: a
// carry of 1 makes -carry all ones).
func saturating(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	return s | -carry
}

// Value is the total over all goroutines, as a reader would see it.
func (c *Counter) Value() uint64 { return c.r.sum(c.off) }

// Gauge is an int64 gauge: one word in the shared area.
type Gauge struct {
	w *atomic.Int64
	r *Registry // keeps the mapping alive while the handle is
}

// Gauge registers an integer gauge.
func (r *Registry) Gauge(name, help string, opts ...Option) (*Gauge, error) {
	_, off, err := r.series(kindGaugeI64, name, help, opts)
	if err != nil {
		return nil, err
	}
	return &Gauge{(*atomic.Int64)(unsafe.Add(r.base, uintptr(r.lay.sharedOffset+off))), r}, nil
}

// Set stores v.
func (g *Gauge) Set(v int64) { g.w.Store(v) }

// Add adds d (which may be negative).
func (g *Gauge) Add(d int64) { g.w.Add(d) }

// Inc adds one.
func (g *Gauge) Inc() { g.w.Add(1) }

// Dec subtracts one.
func (g *Gauge) Dec() { g.w.Add(-1) }

// Value is the gauge's value.
func (g *Gauge) Value() int64 { return g.w.Load() }

// GaugeFloat is a float64 gauge: one word in the shared area.
type GaugeFloat struct {
	w *atomic.Uint64
	r *Registry // keeps the mapping alive while the handle is
}

// GaugeFloat registers a floating-point gauge.
func (r *Registry) GaugeFloat(name, help string, opts ...Option) (*GaugeFloat, error) {
	_, off, err := r.series(kindGaugeF64, name, help, opts)
	if err != nil {
		return nil, err
	}
	return &GaugeFloat{r.word(r.lay.sharedOffset + off), r}, nil
}

// Set stores v.
func (g *GaugeFloat) Set(v float64) { g.w.Store(f64bits(v)) }

// Add adds d (a compare-and-swap loop).
func (g *GaugeFloat) Add(d float64) { addFloat(g.w, d) }

// Value is the gauge's value.
func (g *GaugeFloat) Value() float64 { return f64frombits(g.w.Load()) }

func addFloat(w *atomic.Uint64, d float64) {
	for {
		old := w.Load()
		if w.CompareAndSwap(old, f64bits(f64frombits(old)+d)) {
			return
		}
	}
}

// Histogram records observations in exponential buckets (Prometheus native
// histograms, bit for bit): count, sum, max, a zero bucket and the buckets,
// in every shard.
type Histogram struct {
	r      *Registry
	off    uint64
	stripe unsafe.Pointer
	stride uintptr
	mask   uint32
	ix     indexer
	rng    bucketRange
	zt     float64
}

// Histogram registers a histogram; Buckets(schema, min, max) changes its
// buckets, Unit its unit.
//
//	sizes, err := reg.Histogram("payload_bytes", "Sizes.", topdeck.Unit("bytes"))
//	sizes.Observe(1024)
func (r *Registry) Histogram(name, help string, opts ...Option) (*Histogram, error) {
	s, off, err := r.series(kindHistogram, name, help, opts)
	if err != nil {
		return nil, err
	}
	h := &Histogram{r: r, off: off, ix: newIndexer(s.buckets.schema), rng: *s.buckets, zt: s.buckets.zeroThreshold()}
	h.stripe, h.stride, h.mask = r.stripeBase(off)
	return h, nil
}

// Timer registers a histogram of seconds (unit "seconds", default buckets
// unless Buckets says otherwise): time sections with Start and Stop.
//
//	t := reqTime.Start()
//	defer t.Stop()
func (r *Registry) Timer(name, help string, opts ...Option) (*Histogram, error) {
	return r.Histogram(name, help, append(opts, Unit("seconds"))...)
}

// slot is v's word in a block: hZero, hHead+k, or -1 for NaN.
func (h *Histogram) slot(v float64) int {
	if v > h.zt {
		i := h.ix.index(v) - h.rng.minIndex
		if i < 0 {
			i = 0
		} else if uint32(i) >= h.rng.bucketCount {
			i = int32(h.rng.bucketCount - 1)
		}
		return hHead + int(i)
	}
	if v != v {
		return -1
	}
	return hZero
}

// Observe records v (NaN is not recorded; values above the last bucket
// count in the last bucket, and in sum and max).
func (h *Histogram) Observe(v float64) {
	j := h.slot(v)
	if j < 0 {
		return
	}
	p := unsafe.Add(h.stripe, uintptr(stripeHint()&h.mask)*h.stride)
	atomicRecord(p, j, v)
}

func atomicWord(p unsafe.Pointer, i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(p, i*word))
}

// atomicRecord records v in a block several goroutines may update at once.
func atomicRecord(p unsafe.Pointer, j int, v float64) {
	atomicWord(p, j).Add(1)
	addFloat(atomicWord(p, hSum), v)
	o := orderedBits(v)
	m := atomicWord(p, hMax)
	for {
		cur := m.Load()
		if o <= cur || m.CompareAndSwap(cur, o) {
			break
		}
	}
	atomicWord(p, hCount).Add(1)
}

// Count is the number of observations over all goroutines (zero bucket and buckets).
func (h *Histogram) Count() uint64 {
	t := h.r.sum(h.off + hZero*word)
	for k := uint64(0); k < uint64(h.rng.bucketCount); k++ {
		t += h.r.sum(h.off + (hHead+k)*word)
	}
	return t
}

// Timing is one timed section; see Histogram.Start.
type Timing struct {
	h     *Histogram
	start time.Time
}

// Start starts timing a section; Stop records its length in seconds.
func (h *Histogram) Start() Timing { return Timing{h, time.Now()} }

// Stop records the seconds since Start and returns them.
func (t Timing) Stop() time.Duration {
	d := time.Since(t.start)
	t.h.Observe(d.Seconds())
	return d
}
