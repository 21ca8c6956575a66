// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"math"
	"math/big"
	"sync"
)

// Exponential bucket maths, ported from crates/topdeck-format/src/exponential.rs
// so that buckets merge with the Rust library's and Prometheus's bit for bit
// (held to vectors the Rust library prints: bindings/python/tests/bucket_vectors.txt).

const (
	minSchema     = -4
	maxSchema     = 8
	defaultSchema = 3
	// Mantissa bits looked up in the fast path: 2^12 cells, each narrower
	// than the closest pair of bounds at schema 8, so a cell holds at most one.
	cellBits      = 12
	mantissaBits  = 52
	mantissaMask  = 1<<mantissaBits - 1
	mantissaSlots = 512
)

func f64bits(v float64) uint64     { return math.Float64bits(v) }
func f64frombits(b uint64) float64 { return math.Float64frombits(b) }

// bounds is the lookup for one schema > 0: where the bucket bounds fall in
// the mantissa of a float64.
type bounds struct {
	perOctave uint32
	// Mantissa bits of 2^(k/perOctave), padded with MaxUint64 so that any
	// index the cell table can produce, masked, needs no bounds check.
	mantissas [mantissaSlots]uint64
	// For each cell, how many of mantissas[1:perOctave] lie strictly below its start.
	below [1 << cellBits]uint16
}

func newBounds(schema int) *bounds {
	b := &bounds{perOctave: 1 << schema}
	for i := range b.mantissas {
		b.mantissas[i] = math.MaxUint64
	}
	for k := uint32(0); k < b.perOctave; k++ {
		b.mantissas[k] = f64bits(octaveBound(k, b.perOctave)) & mantissaMask
	}
	for cell := range b.below {
		start := uint64(cell) << (mantissaBits - cellBits)
		n := uint16(0)
		for _, m := range b.mantissas[1:b.perOctave] {
			if m < start {
				n++
			}
		}
		b.below[cell] = n
	}
	return b
}

// rank is the number of bounds 2^(k/n), k >= 0, strictly below 1.mantissa.
func (b *bounds) rank(mantissa uint64) uint32 {
	below := uint32(b.below[mantissa>>(mantissaBits-cellBits)])
	r := below
	if mantissa != 0 {
		r++
	}
	if b.mantissas[(below+1)&(mantissaSlots-1)] < mantissa {
		r++
	}
	return r
}

// octaveBound is 2^(k/n) in [1, 2), correctly rounded: math.Exp2's guess,
// moved to the neighbour whose rounding interval holds the true value
// (decided exactly: a midpoint's n-th power against 2^k).
func octaveBound(k, n uint32) float64 {
	x := math.Exp2(float64(k) / float64(n))
	if k == 0 {
		return 1
	}
	pow2k := new(big.Float).SetMantExp(big.NewFloat(1), int(k))
	// Is the n-th power of the midpoint between a and b below 2^k?
	midBelow := func(a, b float64) bool {
		prec := uint(60*n + 64)
		m := new(big.Float).SetPrec(prec).SetFloat64(a)
		m.Add(m, new(big.Float).SetPrec(prec).SetFloat64(b))
		m.Quo(m, new(big.Float).SetPrec(prec).SetInt64(2))
		p := new(big.Float).SetPrec(prec).SetInt64(1)
		for range n {
			p.Mul(p, m)
		}
		return p.Cmp(pow2k) < 0
	}
	for {
		up := math.Nextafter(x, 2)
		down := math.Nextafter(x, 0)
		switch {
		case midBelow(x, up):
			x = up
		case !midBelow(down, x):
			x = down
		default:
			return x
		}
	}
}

var boundTables [maxSchema]struct {
	once sync.Once
	b    *bounds
}

func boundsFor(schema int) *bounds {
	t := &boundTables[schema-1]
	t.once.Do(func() { t.b = newBounds(schema) })
	return t.b
}

func validSchema(schema int) bool { return schema >= minSchema && schema <= maxSchema }

// indexer computes bucket indices at one schema, its table resolved once.
type indexer struct {
	schema int
	b      *bounds
}

func newIndexer(schema int) indexer {
	ix := indexer{schema: schema}
	if schema > 0 {
		ix.b = boundsFor(schema)
	}
	return ix
}

// index is the bucket index of a finite v > 0, exactly as Prometheus
// computes it (math.Frexp and a search in its bounds table).
func (ix *indexer) index(v float64) int32 {
	bits := f64bits(v)
	biased := int32(bits>>mantissaBits) & 0x7ff
	if biased == 0 {
		return ix.subnormalIndex(v)
	}
	exp := biased - 1023 // v = 1.mantissa * 2^exp
	mantissa := bits & mantissaMask
	if ix.b != nil {
		return int32(ix.b.rank(mantissa)) + exp*int32(ix.b.perOctave)
	}
	key := exp + 1
	if mantissa == 0 {
		key--
	}
	shift := uint(-ix.schema)
	return (key + 1<<shift - 1) >> shift
}

func (ix *indexer) subnormalIndex(v float64) int32 {
	// Scale into the normal range: exact (a power of two), and 2^64 spans
	// a whole number of buckets at every schema.
	octaves := int32(64) << max(ix.schema, 0) >> max(-ix.schema, 0)
	return ix.index(v*0x1p64) - octaves
}

func bucketIndex(schema int, v float64) int32 {
	ix := newIndexer(schema)
	return ix.index(v)
}

// upperBound is base^index at schema, saturating to MaxFloat64 and 0 at
// the ends of the float64 range, as Prometheus does.
func upperBound(schema int, index int32) float64 {
	var frac float64
	var exp int32
	if schema > 0 {
		n := int32(1) << schema
		k := ((index % n) + n) % n
		// The table's bound, 2^(k/n) in [1, 2), rebuilt from its mantissa.
		frac = f64frombits(0x3ff<<mantissaBits | boundsFor(schema).mantissas[k])
		exp = (index - k) / n
	} else {
		frac = 1
		exp = saturatingMul(index, int32(1)<<(-schema))
	}
	if exp >= 1024 {
		return math.MaxFloat64
	}
	half := exp / 2
	return frac * (math.Ldexp(1, int(half)) * math.Ldexp(1, int(exp-half)))
}

func saturatingMul(a, b int32) int32 {
	p := int64(a) * int64(b)
	return int32(max(min(p, math.MaxInt32), math.MinInt32))
}

// bucketRange is one histogram's buckets: bucketCount from minIndex, and a
// zero bucket below them.
type bucketRange struct {
	schema      int
	minIndex    int32
	bucketCount uint32
}

// covering is the range at schema that covers (lo, hi] with whole buckets.
func covering(schema int, lo, hi float64) bucketRange {
	minIndex := bucketIndex(schema, lo)
	maxIndex := max(bucketIndex(schema, hi), minIndex)
	return bucketRange{schema: schema, minIndex: minIndex, bucketCount: uint32(maxIndex - minIndex + 1)}
}

// zeroThreshold is the upper bound of the zero bucket: the lower bound of the first bucket.
func (r *bucketRange) zeroThreshold() float64 { return upperBound(r.schema, r.minIndex-1) }

// orderedBits maps a float64 to a uint64 with the same order, never 0 for
// a non-NaN value, so "no value yet" is 0 and a maximum is an integer max.
func orderedBits(v float64) uint64 {
	b := f64bits(v)
	if b>>63 == 0 {
		return b | 1<<63
	}
	return ^b
}

// fromOrderedBits inverts orderedBits; false for 0 ("no value").
func fromOrderedBits(o uint64) (float64, bool) {
	switch {
	case o == 0:
		return 0, false
	case o>>63 == 1:
		return f64frombits(o &^ (1 << 63)), true
	default:
		return f64frombits(^o), true
	}
}
