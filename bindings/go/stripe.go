// SPDX-License-Identifier: Apache-2.0

package topdeck

import "unsafe"

// stripeHint picks the stripe a goroutine's atomic updates go to, from the
// address of its stack: goroutines running at the same time have different
// stacks, so they mostly land in different shards (different cache lines),
// and one goroutine keeps landing in the same one. It is only a hint: any
// stripe is correct, because stripes are updated with atomic adds. Cost:
// a multiply and a shift, no call, no load (README.md "Sharding" compares
// it with a per-P sync.Pool token, random stripes and one shared word).
//
//go:nosplit
func stripeHint() uint32 {
	var x byte
	// Goroutine stacks start at 2 KiB, so 1 KiB steps tell apart the
	// stacks of goroutines that run at once; one goroutine calling from
	// the same depth gets the same stripe every time.
	p := uint64(uintptr(unsafe.Pointer(&x))) >> 10
	return uint32((p * 0x9E3779B97F4A7C15) >> 32)
}
