// SPDX-License-Identifier: Apache-2.0

// Package bench compares topdeck's Go writer with prometheus/client_golang
// in one `go test -bench` run (docs/PERFORMANCE.md, "Go module against
// client_golang"): counter Inc and histogram Observe, one goroutine and
// RunParallel. It is its own module so that topdeck's needs only x/sys.
package bench

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"topdeck.dev/topdeck"
)

// Latencies from 10 µs to about 1 s, so that observations spread over
// buckets as a service's would.
var values = func() []float64 {
	v := make([]float64, 1024)
	x := 1e-5
	for i := range v {
		v[i] = x
		x *= 1.0113
	}
	return v
}()

func registry(b *testing.B) *topdeck.Registry {
	dir, err := os.MkdirTemp("", "topdeck-bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	r, err := topdeck.NewRegistry("bench", topdeck.WithDir(dir))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

func BenchmarkCounterInc(b *testing.B) {
	b.Run("client_golang", func(b *testing.B) {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c_total", Help: "C."})
		for b.Loop() {
			c.Inc()
		}
	})
	b.Run("topdeck", func(b *testing.B) {
		c, _ := registry(b).Counter("c_total", "C.")
		for b.Loop() {
			c.Inc()
		}
	})
	b.Run("topdeck_worker", func(b *testing.B) {
		r := registry(b)
		c, _ := r.Counter("c_total", "C.")
		w := r.Worker()
		defer w.Release()
		l := c.Local(w)
		for b.Loop() {
			l.Inc()
		}
	})
}

func BenchmarkCounterIncParallel(b *testing.B) {
	b.Run("client_golang", func(b *testing.B) {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c_total", Help: "C."})
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Inc()
			}
		})
	})
	b.Run("topdeck", func(b *testing.B) {
		c, _ := registry(b).Counter("c_total", "C.")
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Inc()
			}
		})
	})
	b.Run("topdeck_worker", func(b *testing.B) {
		r := registry(b)
		c, _ := r.Counter("c_total", "C.")
		b.RunParallel(func(pb *testing.PB) {
			w := r.Worker()
			defer w.Release()
			l := c.Local(w)
			for pb.Next() {
				l.Inc()
			}
		})
	})
}

func classic() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "H."})
}

func native() prometheus.Histogram {
	// Factor 1.1 is schema 3, topdeck's default; no classic buckets.
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "H.",
		NativeHistogramBucketFactor: 1.1})
}

// observers are the histograms compared; each makes the observe function
// one goroutine uses (a topdeck Worker's is bound to that goroutine).
func observers(b *testing.B) []struct {
	name string
	make func() (observe func(float64), done func())
} {
	cg := func(h prometheus.Histogram) func() (func(float64), func()) {
		return func() (func(float64), func()) { return h.Observe, func() {} }
	}
	r := registry(b)
	h, _ := r.Histogram("h_seconds", "H.")
	return []struct {
		name string
		make func() (func(float64), func())
	}{
		{"client_golang_classic", cg(classic())},
		{"client_golang_native", cg(native())},
		{"topdeck", func() (func(float64), func()) { return h.Observe, func() {} }},
		{"topdeck_worker", func() (func(float64), func()) {
			w := r.Worker()
			return h.Local(w).Observe, w.Release
		}},
	}
}

func BenchmarkHistogramObserve(b *testing.B) {
	for _, o := range observers(b) {
		b.Run(o.name, func(b *testing.B) {
			observe, done := o.make()
			defer done()
			i := 0
			for b.Loop() {
				observe(values[i&1023])
				i++
			}
		})
	}
}

func BenchmarkHistogramObserveParallel(b *testing.B) {
	for _, o := range observers(b) {
		b.Run(o.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				observe, done := o.make()
				defer done()
				i := 0
				for pb.Next() {
					observe(values[i&1023])
					i++
				}
			})
		})
	}
}
