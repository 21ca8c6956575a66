// SPDX-License-Identifier: Apache-2.0

// Package topdeck writes and reads topdeck metrics files (docs/FORMAT.md)
// in pure Go: a process publishes its counters, gauges and histograms in a
// memory-mapped file that the topdeck CLI and other readers look at
// without asking the process anything.
//
//	reg, err := topdeck.NewRegistry("main")
//	if err != nil { ... }
//	defer reg.Close()
//	requests, _ := reg.Counter("http_requests_total", "Requests served.", topdeck.L("route", "/"))
//	requests.Inc()
package topdeck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// config holds what the RegistryOptions set.
type config struct {
	dir                              string
	group                            int
	metrics, stringBytes, gaugeBytes int
	shardBytes, shards, stripes      int
	shardsSet, stripesSet            bool
}

// RegistryOption configures NewRegistry.
type RegistryOption func(*config) error

// WithDir publishes in dir instead of TOPDECK_DIR or /dev/shm/topdeck-<euid>.
func WithDir(dir string) RegistryOption { return func(c *config) error { c.dir = dir; return nil } }

// WithGroup lets a readers' group (a name or a gid) read the file: 0640 in
// a 0750 directory. Without it, TOPDECK_GROUP decides; by default the file
// is private (0600 in 0700).
func WithGroup(group string) RegistryOption {
	return func(c *config) (err error) { c.group, err = lookupGroup(group); return err }
}

// WithMetrics sets the number of descriptor slots (default 4096).
func WithMetrics(n int) RegistryOption { return func(c *config) error { c.metrics = n; return nil } }

// WithStringBytes sets the size of the string area (default 256 KiB).
func WithStringBytes(n int) RegistryOption {
	return func(c *config) error { c.stringBytes = n; return nil }
}

// WithGaugeBytes sets the size of the gauge area (default 32 KiB).
func WithGaugeBytes(n int) RegistryOption {
	return func(c *config) error { c.gaugeBytes = n; return nil }
}

// WithShardBytes sets the bytes per shard (default 1 MiB).
func WithShardBytes(n int) RegistryOption {
	return func(c *config) error { c.shardBytes = n; return nil }
}

// WithShards sets the number of shards (the overflow shard excluded):
// stripes plus shards for Workers. Default: the stripes plus 8.
func WithShards(n int) RegistryOption {
	return func(c *config) error { c.shards, c.shardsSet = n, true; return nil }
}

// WithStripes sets how many shards concurrent goroutines spread their
// atomic updates over (rounded down to a power of two; 0 puts every
// update in the overflow shard). Default: 8 × GOMAXPROCS rounded up to a
// power of two, at most 256.
func WithStripes(n int) RegistryOption {
	return func(c *config) error { c.stripes, c.stripesSet = n, true; return nil }
}

func defaultConfig() config {
	stripes := 1
	for stripes < 8*runtime.GOMAXPROCS(0) && stripes < 256 {
		stripes <<= 1
	}
	return config{group: -1, metrics: 4096, stringBytes: 256 << 10, gaugeBytes: 32 << 10,
		shardBytes: 1 << 20, stripes: stripes}
}

// fileState is what the registry's cleanup needs, apart from the registry.
type fileState struct {
	mu     sync.Mutex
	mem    []byte
	fd     int
	dfd    int
	file   string
	closed bool
}

func (s *fileState) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := unix.Unlinkat(s.dfd, s.file, 0)
	if err == unix.ENOENT {
		err = nil
	}
	unix.Close(s.fd)
	unix.Close(s.dfd)
	if err != nil {
		return fmt.Errorf("topdeck: cannot remove %s: %w", s.file, err)
	}
	return nil
}

// Registry is one registry file. Registering takes a lock; updating
// through the handles takes none. Close removes the file; a process that
// exits without Close leaves it, marked dead by its released lock, until
// `topdeck gc` removes it.
type Registry struct {
	mu   sync.Mutex
	st   *fileState
	base unsafe.Pointer // the mapping's first byte
	lay  layout
	path string
	name string

	count                              uint32
	stringsUsed, sharedUsed, shardUsed uint64
	seen                               map[string]bool

	stripeMask  uint32 // stripes - 1; stripes == 0 uses the overflow shard
	stripes     uint32
	free        []uint32 // shards for Workers, lowest first
	shardsInUse uint32
}

var fileSeq atomic.Uint64

// NewRegistry creates a registry file named name (the header's
// registry_name, at most 63 bytes) in the namespace directory, as
// docs/FORMAT.md section 1 says.
//
//	reg, err := topdeck.NewRegistry("main", topdeck.WithDir(dir))
func NewRegistry(name string, opts ...RegistryOption) (*Registry, error) {
	c := defaultConfig()
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.stripes < 0 || c.stripes > maxShardCount {
		return nil, fmt.Errorf("topdeck: WithStripes(%d): give 0..=%d", c.stripes, maxShardCount)
	}
	for c.stripes&(c.stripes-1) != 0 {
		c.stripes &= c.stripes - 1
	}
	if !c.shardsSet {
		c.shards = min(c.stripes+8, maxShardCount)
	} else if !c.stripesSet && c.stripes > c.shards {
		for c.stripes > c.shards {
			c.stripes >>= 1
		}
	}
	if c.stripes > c.shards {
		return nil, fmt.Errorf("topdeck: %d stripes but only %d shards; raise WithShards or lower WithStripes", c.stripes, c.shards)
	}
	lay, err := newLayout(&c)
	if err != nil {
		return nil, err
	}
	group := c.group
	if group < 0 {
		if group, err = envGroupID(); err != nil {
			return nil, err
		}
	}
	dfd, dpath, err := prepareDir(c.dir, group)
	if err != nil {
		return nil, err
	}
	r := &Registry{lay: lay, name: name, seen: map[string]bool{}, stripes: uint32(c.stripes)}
	if c.stripes > 0 {
		r.stripeMask = uint32(c.stripes) - 1
	}
	for i := uint32(c.stripes); i < lay.shardCount; i++ {
		r.free = append(r.free, i)
	}
	if err := r.publish(dfd, dpath, group); err != nil {
		unix.Close(dfd)
		return nil, err
	}
	// Like Rust's Drop: an unreachable registry removes its file and
	// unmaps it. Every handle points at the registry, so no handle is left
	// writing to the unmapped pages.
	runtime.AddCleanup(r, func(s *fileState) {
		s.close()
		unix.Munmap(s.mem)
	}, r.st)
	return r, nil
}

func (r *Registry) publish(dfd int, dpath string, group int) error {
	pid := os.Getpid()
	start, err := startTicks()
	if err != nil {
		return err
	}
	var fd int
	var temp, final string
	for tries := 0; ; tries++ {
		if tries == 1000 {
			return fmt.Errorf("topdeck: %s: no free registry file name after 1000 tries; remove dead files with `topdeck gc`", dpath)
		}
		stem := fmt.Sprintf("%d-%d-%d", pid, start, fileSeq.Add(1)-1)
		temp, final = tempPrefix+stem, stem+suffix
		var st unix.Stat_t
		if unix.Fstatat(dfd, final, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			continue // a name taken by an earlier process with our pid and start
		}
		fd, err = unix.Openat(dfd, temp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, privateFile)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return fmt.Errorf("topdeck: cannot create a registry file in %s: %w", dpath, err)
		}
		break
	}
	fail := func(what string, err error) error {
		unix.Unlinkat(dfd, temp, 0)
		unix.Close(fd)
		return fmt.Errorf("topdeck: %s/%s: %s: %w", dpath, temp, what, err)
	}
	if group >= 0 {
		if err := unix.Fchown(fd, -1, group); err != nil {
			return fail("cannot give the file to the readers' group", err)
		}
		if err := unix.Fchmod(fd, groupFile); err != nil {
			return fail("cannot set the file's mode", err)
		}
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail("cannot lock the file", err)
	}
	if err := unix.Ftruncate(fd, int64(r.lay.fileLen)); err != nil {
		return fail("cannot size the file", err)
	}
	mem, err := unix.Mmap(fd, 0, int(r.lay.fileLen), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("cannot map the file", err)
	}
	r.lay.encodeHeader(mem, uint32(pid), start, uint64(time.Now().UnixNano()), processName(), r.name)
	r.base = unsafe.Pointer(&mem[0])
	r.shardsInUse = r.stripes
	r.u32(offShardsInUse).Store(r.stripes)
	r.u32(offVersion).Store(version) // release: the header above is visible first
	if err := renameNoReplace(dfd, temp, final); err != nil {
		unix.Munmap(mem)
		return fail("cannot publish the file", err)
	}
	r.st = &fileState{mem: mem, fd: fd, dfd: dfd, file: final}
	r.path = filepath.Join(dpath, final)
	return nil
}

func (r *Registry) u32(off uintptr) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Add(r.base, off))
}

func (r *Registry) word(off uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(r.base, uintptr(off)))
}

// Path is the file this registry publishes.
func (r *Registry) Path() string { return r.path }

// Close removes the file and releases its lock. Handles go on working on
// the unlinked mapping (their updates are then seen by no one).
func (r *Registry) Close() error { return r.st.close() }

// startTicks is field 22 of /proc/self/stat: this process's start, in ticks since boot.
func startTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, fmt.Errorf("topdeck: cannot read /proc/self/stat for the process's start time: %w", err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return 0, fmt.Errorf("topdeck: /proc/self/stat has no start time")
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("topdeck: /proc/self/stat has no start time")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// processName is the file name of argv[0], else comm.
func processName() string {
	if len(os.Args) > 0 && os.Args[0] != "" {
		return filepath.Base(os.Args[0])
	}
	b, _ := os.ReadFile("/proc/self/comm")
	return strings.TrimSpace(string(b))
}

// register writes one metric's strings and descriptor and publishes it;
// it returns the value block's offset (in each shard, or in the gauge area).
func (r *Registry) register(kind uint8, s *spec, words uint32, b *bucketRange) (uint64, error) {
	if err := checkSeries(s.name, s.labels, s.help, s.unit); err != nil {
		return 0, err
	}
	raw := [4][]byte{[]byte(s.name), encodeLabels(s.labels), []byte(s.help), []byte(s.unit)}
	key := string(raw[0]) + "\x00" + string(raw[1])
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.closed {
		return 0, fmt.Errorf("topdeck: %s: cannot register %q: the registry is closed", r.path, s.name)
	}
	if r.seen[key] {
		return 0, fmt.Errorf("topdeck: %s: metric %q with labels %v is already registered; keep the first handle", r.path, s.name, s.labels)
	}
	need := uint64(0)
	for _, x := range raw {
		need += uint64(len(x))
	}
	valueLen := uint64(words) * word
	sharded := kind == kindCounter || kind == kindHistogram
	used, capacity, area, option := r.sharedUsed, r.lay.sharedLen, "gauge area", "WithGaugeBytes"
	if sharded {
		used, capacity, area, option = r.shardUsed, r.lay.shardLen, "shards", "WithShardBytes"
	}
	for _, c := range []struct {
		what, option string
		used, n, cap uint64
	}{
		{"descriptor table", "WithMetrics", uint64(r.count), 1, uint64(r.lay.descCapacity)},
		{"string area", "WithStringBytes", r.stringsUsed, need, r.lay.stringsLen},
		{area, option, used, valueLen, capacity},
	} {
		if c.used+c.n > c.cap {
			return 0, fmt.Errorf("topdeck: %s: registry full: no room for %q in the %s (%d of %d used, %d more needed); create the registry with a larger %s", r.path, s.name, c.what, c.used, c.cap, c.n, c.option)
		}
	}
	mem := r.st.mem
	var refs [4]strRef
	for i, x := range raw {
		copy(mem[r.lay.stringsOffset+r.stringsUsed:], x)
		refs[i] = strRef{uint32(r.stringsUsed), uint32(len(x))}
		r.stringsUsed += uint64(len(x))
	}
	at := r.lay.descOffset + uint64(r.count)*descLen
	encodeDescriptor(mem[at:at+descLen], kind, uint32(valueLen), used, refs, b)
	if sharded {
		r.shardUsed += valueLen
	} else {
		r.sharedUsed += valueLen
	}
	r.count++
	r.u32(offDescCount).Store(r.count) // release: the descriptor and strings first
	r.seen[key] = true
	return used, nil
}

// leaseShard takes a shard for a Worker, raising shards_in_use before the
// Worker's first store; ok is false when every Worker shard is taken.
func (r *Registry) leaseShard() (uint32, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.free) == 0 {
		return 0, false
	}
	i := r.free[0]
	r.free = r.free[1:]
	if i >= r.shardsInUse {
		r.shardsInUse = i + 1
		r.u32(offShardsInUse).Store(r.shardsInUse)
	}
	return i, true
}

// returnShard gives a Worker's shard back (lowest free first). The lock
// orders the old owner's last store before the next owner's first load.
func (r *Registry) returnShard(i uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := len(r.free)
	for j, f := range r.free {
		if f > i {
			at = j
			break
		}
	}
	r.free = append(r.free, 0)
	copy(r.free[at+1:], r.free[at:])
	r.free[at] = i
}

// shardWord is the address of word w of the block at off in shard i.
func (r *Registry) shardWord(i uint32, off uint64) unsafe.Pointer {
	return unsafe.Add(r.base, uintptr(r.lay.shardsOffset+uint64(i)*r.lay.shardLen+off))
}

// sum adds word w of the block at off over the shards in use and the overflow shard.
func (r *Registry) sum(off uint64) uint64 {
	n := r.u32(offShardsInUse).Load()
	t := (*atomic.Uint64)(r.shardWord(r.lay.shardCount, off)).Load()
	for i := uint32(0); i < n; i++ {
		t = saturating(t, (*atomic.Uint64)(r.shardWord(i, off)).Load())
	}
	return t
}
