// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// The ways a goroutine could pick its stripe, measured against each other
// (README.md, "Sharding"): run with -cpu 1,2. The Worker, which needs no
// stripe, is in bench/ beside client_golang.

type token struct{ idx uint32 }

var tokens = sync.Pool{New: func() any { return &token{idx: nextToken.Add(1)} }}
var nextToken atomic.Uint32

func (c *Counter) addPool(n uint64) {
	t := tokens.Get().(*token)
	(*atomic.Uint64)(unsafe.Add(c.stripe, uintptr(t.idx&c.mask)*c.stride)).Add(n)
	tokens.Put(t)
}

func (c *Counter) addRandom(n uint64) {
	(*atomic.Uint64)(unsafe.Add(c.stripe, uintptr(uint32(rand.Uint64())&c.mask)*c.stride)).Add(n)
}

func benchRegistry(b *testing.B, opts ...RegistryOption) *Registry {
	r, err := NewRegistry("bench", append([]RegistryOption{WithDir(b.TempDir())}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

func BenchmarkStripeChoice(b *testing.B) {
	for _, alt := range []struct {
		name string
		opts []RegistryOption
		add  func(*Counter)
	}{
		{"one_shared_word", []RegistryOption{WithStripes(0)}, func(c *Counter) { c.Add(1) }},
		{"stack_hash", nil, func(c *Counter) { c.Add(1) }},
		{"sync_pool_token", nil, func(c *Counter) { c.addPool(1) }},
		{"random", nil, func(c *Counter) { c.addRandom(1) }},
	} {
		b.Run(alt.name, func(b *testing.B) {
			c, _ := benchRegistry(b, alt.opts...).Counter("c_total", "")
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					alt.add(c)
				}
			})
		})
	}
}
