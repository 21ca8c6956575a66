// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func newTestRegistry(t *testing.T, opts ...RegistryOption) (*Registry, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ns")
	r, err := NewRegistry("test", append([]RegistryOption{WithDir(dir)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

func snapshot(t *testing.T, r *Registry) *Snapshot {
	t.Helper()
	f, err := Open(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCreationFollowsTheFormat(t *testing.T) {
	r, dir := newTestRegistry(t)
	name := filepath.Base(r.Path())
	if !regexp.MustCompile(`^\d+-\d+-\d+\.topdeck$`).MatchString(name) {
		t.Fatalf("file name %q is not <pid>-<start>-<seq>.topdeck", name)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("want only the published file, found %v", entries)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, r.Path(): 0o600} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %o (%v)", path, st.Mode().Perm(), want, err)
		}
	}
	// Another descriptor's shared probe must find the writer's exclusive lock.
	fd, err := unix.Open(r.Path(), unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != unix.EWOULDBLOCK {
		t.Errorf("shared probe on a live file: %v, want EWOULDBLOCK", err)
	}
	unix.Close(fd)
	s := snapshot(t, r)
	if s.Entry.State != Alive || s.Entry.Registry != "test" || s.Entry.Pid != uint32(os.Getpid()) {
		t.Errorf("entry %+v", s.Entry)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left the file: %v", err)
	}
}

func TestAnUnsafeExplicitDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	_, err := NewRegistry("x", WithDir(dir))
	if err == nil || !strings.Contains(err.Error(), "lets others write") {
		t.Fatalf("a world-writable directory: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(t.TempDir(), link)
	if _, err := NewRegistry("x", WithDir(link)); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("a symlink: %v", err)
	}
}

func TestEveryKindReadsBackExactly(t *testing.T) {
	r, _ := newTestRegistry(t)
	c, _ := r.Counter("jobs_total", "Jobs.", L("queue", "fast"))
	g, _ := r.Gauge("depth", "Depth.")
	gf, _ := r.GaugeFloat("temp", "T.", Unit("celsius"))
	h, err := r.Histogram("size_bytes", "Sizes.", Unit("bytes"), Buckets(0, 1, 1024))
	if err != nil {
		t.Fatal(err)
	}
	c.Add(5)
	g.Set(-3)
	g.Add(10)
	gf.Set(1.5)
	gf.Add(0.25)
	for _, v := range []float64{0, -1, 1, 3, 4, 5, 1e9} {
		h.Observe(v)
	}
	h.Observe(nan())
	s := snapshot(t, r)
	if len(s.Metrics) != 4 {
		t.Fatalf("%d metrics", len(s.Metrics))
	}
	m := s.Metrics
	if m[0].Counter != 5 || m[0].Labels[0] != L("queue", "fast") || m[1].Gauge != 7 || m[2].GaugeFloat != 1.75 || m[2].Unit != "celsius" {
		t.Errorf("values %+v", m[:3])
	}
	hv := m[3].Histogram
	// Schema 0: buckets (1,2], (2,4], (4,8] ... from index 0 (bound 1);
	// 0 and -1 go to the zero bucket (<= 0.5), 1e9 to the last one.
	want := []uint64{1, 0, 2, 1, 0, 0, 0, 0, 0, 0, 1}
	if hv.ZeroCount != 2 || hv.Count != 7 || hv.Sum != 1e9+12 || hv.Max != 1e9 || hv.MinIndex != 0 || hv.ZeroThreshold != 0.5 {
		t.Errorf("histogram %+v", hv)
	}
	for k, n := range want {
		if hv.Counts[k] != n {
			t.Errorf("bucket %d (upper bound %v): %d, want %d", k, hv.UpperBound(k), hv.Counts[k], n)
		}
	}
	if h.Count() != 7 || c.Value() != 5 {
		t.Errorf("writer-side totals %d %d", h.Count(), c.Value())
	}
}

func nan() float64 { var z float64; return z / z }

func TestConcurrentUpdatesStayExact(t *testing.T) {
	r, _ := newTestRegistry(t, WithShards(6), WithStripes(4))
	c, _ := r.Counter("hits_total", "Hits.")
	h, _ := r.Histogram("lat_seconds", "Latency.")
	const goroutines, each = 16, 20000
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			if i%2 == 0 { // half through Workers: two get shards, the rest fall back
				w := r.Worker()
				defer w.Release()
				lc, lh := c.Local(w), h.Local(w)
				for range each {
					lc.Inc()
					lh.Observe(0.001)
				}
				return
			}
			for range each {
				c.Inc()
				h.Observe(0.001)
			}
		})
	}
	wg.Wait()
	s := snapshot(t, r)
	if got := s.Metrics[0].Counter; got != goroutines*each {
		t.Errorf("counter %d, want %d", got, goroutines*each)
	}
	hv := s.Metrics[1].Histogram
	if hv.Count != goroutines*each || hv.Max != 0.001 {
		t.Errorf("histogram count %d max %v, want %d 0.001", hv.Count, hv.Max, goroutines*each)
	}
}

func TestWorkersShareNoShardAndReturnTheirs(t *testing.T) {
	r, _ := newTestRegistry(t, WithShards(3), WithStripes(1))
	c, _ := r.Counter("n_total", "N.")
	a, b, full := r.Worker(), r.Worker(), r.Worker()
	if !a.Owned() || !b.Owned() || full.Owned() || a.shard == b.shard {
		t.Fatalf("owned %v %v %v, shards %d %d", a.Owned(), b.Owned(), full.Owned(), a.shard, b.shard)
	}
	c.Local(a).Add(2)
	c.Local(full).Add(3)
	a.Release()
	d := r.Worker()
	if d.shard != a.shard {
		t.Errorf("the lowest free shard %d was not reused (got %d)", a.shard, d.shard)
	}
	c.Local(d).Add(4) // continues from the 2 left there
	if got := snapshot(t, r).Metrics[0].Counter; got != 9 {
		t.Errorf("counter %d, want 9", got)
	}
}

func TestRegistrationErrorsSayWhatToDo(t *testing.T) {
	r, _ := newTestRegistry(t, WithMetrics(2))
	if _, err := r.Counter("a_total", "A."); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{second(r.Counter("a_total", "again")), "already registered"},
		{second(r.Counter("1bad", "")), "[a-zA-Z_:]"},
		{second(r.Counter("ok", "", L("__x", "y"))), "not start with __"},
		{second(r.Counter("ok", "", L("a", "1"), L("a", "2"))), "given twice"},
		{second(r.Histogram("h", "", Buckets(9, 1, 2))), "schema"},
		{second(r.Histogram("h", "", Buckets(8, 1e-300, 1e300))), "more than 1024"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want one saying %q", tc.err, tc.want)
		}
	}
	r.Gauge("b", "")
	if _, err := r.Gauge("c", ""); err == nil || !strings.Contains(err.Error(), "WithMetrics") {
		t.Errorf("a full table: %v", err)
	}
	if _, err := NewRegistry("x", WithDir(t.TempDir()), WithShards(5000)); err == nil || !strings.Contains(err.Error(), "WithShards") {
		t.Errorf("too many shards: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestAKilledWritersFileReadsDead(t *testing.T) {
	r, _ := newTestRegistry(t)
	c, _ := r.Counter("x_total", "")
	c.Add(3)
	// Releasing the writer's lock is what a dying process does.
	if err := unix.Flock(r.st.fd, unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	l, err := List(filepath.Dir(r.Path()))
	if err != nil || len(l.Registries) != 1 || l.Registries[0].State != Dead {
		t.Fatalf("listing %+v %v", l, err)
	}
	if got := snapshot(t, r).Metrics[0].Counter; got != 3 {
		t.Errorf("a dead file keeps its values: %d", got)
	}
}

func TestManyMetricsReadInChunks(t *testing.T) {
	r, _ := newTestRegistry(t)
	const n = 600 // more than two chunks of 256 descriptors
	for i := range n {
		c, err := r.Counter("c_total", "", L("i", strings.Repeat("x", i%7)+string(rune('a'+i%26))), L("n", itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		c.Add(uint64(i))
	}
	s := snapshot(t, r)
	if len(s.Metrics) != n {
		t.Fatalf("%d metrics, want %d", len(s.Metrics), n)
	}
	for i, m := range s.Metrics {
		if m.Counter != uint64(i) || m.Labels[1].Value != itoa(i) {
			t.Fatalf("metric %d: %+v", i, m)
		}
	}
}

func itoa(i int) string { return fmt.Sprint(i) }

func TestHandlesOutliveTheirRegistryVariable(t *testing.T) {
	dir := t.TempDir()
	var g *Gauge
	var lc LocalCounter
	func() {
		r, err := NewRegistry("t", WithDir(dir))
		if err != nil {
			t.Fatal(err)
		}
		g, _ = r.Gauge("g", "")
		c, _ := r.Counter("c_total", "")
		lc = c.Local(r.Worker())
	}()
	for range 3 {
		runtime.GC() // a cleanup that unmapped the file under the handles would crash here
	}
	g.Set(4)
	lc.Add(2)
	if g.Value() != 4 {
		t.Fatal("the gauge lost its value")
	}
}

// A counter past 2^64-1 stays there, in a stripe, in a Worker's own shard
// and in the sum over both: it never wraps to a small value, backwards.
func TestACounterPastTheTopStaysThere(t *testing.T) {
	r, _ := newTestRegistry(t, WithShards(2), WithStripes(1))
	c, _ := r.Counter("bytes_total", "Bytes.", Unit("bytes"))
	const near = math.MaxUint64 - 10
	c.Add(near)
	c.Add(near) // the stripe (shard 0) alone passes the top
	w := r.Worker()
	defer w.Release()
	if !w.Owned() {
		t.Fatal("the worker got no shard of its own")
	}
	lc := c.Local(w)
	lc.Add(near)
	lc.Add(100) // the worker's own shard passes it too
	if got := c.Value(); got != math.MaxUint64 {
		t.Errorf("Value() = %d, want 2^64-1", got)
	}
	if got := snapshot(t, r).Metrics[0].Counter; got != math.MaxUint64 {
		t.Errorf("the reader's sum = %d, want 2^64-1", got)
	}
	// Below the top, two shards whose sum passes it: the sum stops too.
	d, _ := r.Counter("half_total", "Half.")
	d.Add(1 << 63)
	d.Local(w).Add(1 << 63)
	if got := snapshot(t, r).Metrics[1].Counter; got != math.MaxUint64 {
		t.Errorf("the reader's sum of two halves = %d, want 2^64-1", got)
	}
}
