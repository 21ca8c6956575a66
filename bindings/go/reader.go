// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// The reader: files are untrusted input (docs/FORMAT.md section 8). It
// never maps them: every byte comes from pread into a private buffer, so a
// file truncated while read is an error, never a SIGBUS, and what it reads
// follows the valid descriptors, never what a header claims.

// Kind is a metric's kind.
type Kind uint8

// The kinds of metric.
const (
	KindCounter    Kind = kindCounter
	KindGauge      Kind = kindGaugeI64
	KindGaugeFloat Kind = kindGaugeF64
	KindHistogram  Kind = kindHistogram
)

func (k Kind) String() string {
	switch k {
	case KindCounter:
		return "counter"
	case KindGauge:
		return "gauge"
	case KindGaugeFloat:
		return "gauge_f64"
	case KindHistogram:
		return "histogram"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// State says whether a file's writer still runs.
type State string

// The states of a registry file.
const (
	Alive State = "alive"
	Dead  State = "dead"
)

// Entry is one registry file a listing found.
type Entry struct {
	Path, File        string
	Pid               uint32
	StartTicks        uint64
	Created           time.Time
	Process, Registry string
	State             State
}

// FileError is a file a listing or a read rejected, and why.
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// Listing is what List found: readable registries, sorted by path, and
// the files and directories it rejected.
type Listing struct {
	Registries []Entry
	Errors     []error
}

const (
	maxFilesPerDir = 4096
	listDeadline   = time.Second
	descChunk      = 256
	// What one snapshot may read, as the Rust reader's Limits: a header
	// is a claim, and a sparse file costs its author one page.
	maxSnapshotBytes = 256 << 20
)

// List lists the registry files in dir; with dir empty, in TOPDECK_DIR,
// else in every /dev/shm/topdeck-<uid> and /dev/shm/topdeck-<uid>.<tag>.
// A file that is not a readable registry is in Errors, not an error: the
// error is for a directory given explicitly that cannot be read.
func List(dir string) (*Listing, error) {
	l := &Listing{}
	if dir == "" {
		dir = os.Getenv(envDir)
	}
	if dir != "" {
		if err := l.listDir(dir); err != nil {
			return nil, err
		}
	} else {
		entries, _ := os.ReadDir(shmRoot)
		for _, e := range entries {
			p := shmRoot + "/" + e.Name()
			if namedUID(p) < 0 {
				continue
			}
			if err := l.listDir(p); err != nil {
				if errors.Is(err, unix.EACCES) {
					continue // another user's private directory
				}
				l.Errors = append(l.Errors, err)
			}
		}
	}
	sort.Slice(l.Registries, func(i, j int) bool { return l.Registries[i].Path < l.Registries[j].Path })
	return l, nil
}

// openDirForReading opens and checks a namespace directory: the expected
// owner is the uid its name carries, else whoever owns it.
func openDirForReading(dir string) (int, uint32, error) {
	fd, uid, err := openDirChecked(dir, namedUID(dir))
	if err != nil {
		return -1, 0, err
	}
	return fd, uid, nil
}

func (l *Listing) listDir(dir string) error {
	dfd, owner, err := openDirForReading(dir)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	f := os.NewFile(uintptr(dupOrNeg(dfd)), dir)
	if f == nil {
		return fmt.Errorf("%s: cannot read the directory", dir)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s: cannot read the directory: %w", dir, err)
	}
	sort.Strings(names)
	deadline := time.Now().Add(listDeadline)
	n := 0
	for _, name := range names {
		if !strings.HasSuffix(name, suffix) {
			continue
		}
		if n == maxFilesPerDir || time.Now().After(deadline) {
			l.Errors = append(l.Errors, fmt.Errorf("%s: more registry files than one listing reads (%d, or one second); the rest wait for the next listing", dir, maxFilesPerDir))
			break
		}
		n++
		path := filepath.Join(dir, name)
		rf, err := openAt(dfd, owner, path, name)
		if err != nil {
			l.Errors = append(l.Errors, &FileError{path, err})
			continue
		}
		l.Registries = append(l.Registries, rf.entry())
		rf.Close()
	}
	return nil
}

func dupOrNeg(fd int) int {
	d, err := unix.Dup(fd)
	if err != nil {
		return -1
	}
	unix.CloseOnExec(d)
	return d
}

// header is a validated header.
type header struct {
	fileLen                   uint64
	pid                       uint32
	start, created            uint64
	descOffset                uint64
	descCapacity, descLen     uint32
	shardCount                uint32
	stringsOffset, stringsLen uint64
	sharedOffset, sharedLen   uint64
	shardsOffset, shardLen    uint64
	process, registry         string
	mode                      uint32
}

// File is one registry file opened for reading.
type File struct {
	fd        int
	path      string
	h         header
	st        unix.Stat_t
	lastDescs uint32
	lastShard uint32
}

// Open opens a registry file for reading, checking its directory and the
// file as docs/FORMAT.md sections 1 and 8 say.
func Open(path string) (*File, error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	dfd, owner, err := openDirForReading(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	f, err := openAt(dfd, owner, path, name)
	if err != nil {
		return nil, &FileError{path, err}
	}
	return f, nil
}

func openAt(dfd int, owner uint32, path, name string) (*File, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, errors.New("a symlink where a registry file should be (planted; not followed)")
		}
		return nil, fmt.Errorf("cannot open: %w", err)
	}
	f := &File{fd: fd, path: path}
	if err := f.check(owner); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return f, nil
}

// Close closes the file.
func (f *File) Close() error { return unix.Close(f.fd) }

// Path is the file's path.
func (f *File) Path() string { return f.path }

func (f *File) pread(off, n uint64) ([]byte, error) {
	buf := make([]byte, n)
	got := 0
	for got < len(buf) {
		m, err := unix.Pread(f.fd, buf[got:], int64(off)+int64(got))
		if err != nil {
			return nil, fmt.Errorf("cannot read %d bytes at %d: %w", n, off, err)
		}
		if m == 0 {
			return nil, fmt.Errorf("truncated: %d bytes at %d are past the end of the file", n, off)
		}
		got += m
	}
	return buf, nil
}

func (f *File) check(owner uint32) error {
	if err := unix.Fstat(f.fd, &f.st); err != nil {
		return err
	}
	if f.st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("not a regular file (planted; not read)")
	}
	if f.st.Uid != owner {
		return fmt.Errorf("owned by uid %d, not by the directory's owner %d (planted; not read)", f.st.Uid, owner)
	}
	if f.st.Size < headerFieldsEnd {
		return fmt.Errorf("too short for a header (%d bytes)", f.st.Size)
	}
	b, err := f.pread(0, headerFieldsEnd)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	if string(b[:8]) != magic {
		return errors.New("not a topdeck file (bad magic)")
	}
	v := le.Uint32(b[8:])
	if v == 0 {
		return errors.New("not ready yet (version 0); retry")
	}
	if v>>16 != major {
		return fmt.Errorf("unsupported format version %d.%d (this reader reads %d.x)", v>>16, v&0xffff, major)
	}
	h := header{
		fileLen: le.Uint64(b[16:]), pid: le.Uint32(b[24:]), start: le.Uint64(b[32:]), created: le.Uint64(b[40:]),
		descOffset: le.Uint64(b[48:]), descCapacity: le.Uint32(b[56:]), descLen: le.Uint32(b[60:]),
		shardCount: le.Uint32(b[68:]), stringsOffset: le.Uint64(b[72:]), stringsLen: le.Uint64(b[80:]),
		sharedOffset: le.Uint64(b[88:]), sharedLen: le.Uint64(b[96:]), shardsOffset: le.Uint64(b[104:]),
		shardLen: le.Uint64(b[112:]), mode: f.st.Mode,
	}
	headerLen := uint64(le.Uint32(b[12:]))
	bad := func(why string, args ...any) error {
		return fmt.Errorf("bad header: "+why, args...)
	}
	switch {
	case headerLen < headerFieldsEnd || headerLen > h.descOffset:
		return bad("header_len %d outside %d..=desc_offset", headerLen, headerFieldsEnd)
	case h.fileLen > maxFileLen:
		return bad("file_len %d above the limit %d", h.fileLen, uint64(maxFileLen))
	case uint64(f.st.Size) < h.fileLen:
		return fmt.Errorf("truncated: %d bytes, the header says %d", f.st.Size, h.fileLen)
	case h.descCapacity > maxDescCapacity, h.descLen > maxDescLen, h.shardCount > maxShardCount,
		h.shardLen > maxShardLen, h.stringsLen > maxStringsLen, h.sharedLen > maxSharedLen:
		return bad("a section is larger than the readers' limits (docs/FORMAT.md section 8)")
	case h.descLen < descLen || h.descLen%8 != 0 || h.shardLen%8 != 0 || h.sharedLen%8 != 0:
		return bad("desc_len %d, shard_len %d or shared_len %d is not a multiple of 8 (desc_len at least 64)", h.descLen, h.shardLen, h.sharedLen)
	}
	// The sections, in order and without overlap, inside [header_len, file_len);
	// every value is below 2^32 so no sum here overflows 64 bits.
	end := headerLen
	for _, s := range [][3]uint64{
		{h.descOffset, uint64(h.descCapacity) * uint64(h.descLen)},
		{h.stringsOffset, h.stringsLen},
		{h.sharedOffset, h.sharedLen},
		{h.shardsOffset, h.shardLen * (uint64(h.shardCount) + 1)},
	} {
		if s[0] < end || s[0] > h.fileLen || s[1] > h.fileLen-s[0] {
			return bad("sections out of order, overlapping or past file_len")
		}
		end = s[0] + s[1]
	}
	var err2 error
	if h.process, err2 = nulString(b[128:192]); err2 != nil {
		return bad("process name: %v", err2)
	}
	if h.registry, err2 = nulString(b[192:256]); err2 != nil {
		return bad("registry name: %v", err2)
	}
	f.h = h
	return nil
}

func nulString(b []byte) (string, error) {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	if !utf8.Valid(b) {
		return "", errors.New("not UTF-8")
	}
	return string(b), nil
}

func (f *File) entry() Entry {
	return Entry{
		Path: f.path, File: filepath.Base(f.path), Pid: f.h.pid, StartTicks: f.h.start,
		Created: time.Unix(0, int64(f.h.created)), Process: f.h.process, Registry: f.h.registry,
		State: f.State(),
	}
}

// Entry describes the file as a listing does.
func (f *File) Entry() Entry { return f.entry() }

// HistogramValue is a histogram's totals over the shards.
type HistogramValue struct {
	Schema        int
	ZeroThreshold float64
	ZeroCount     uint64
	MinIndex      int32
	Counts        []uint64 // bucket MinIndex+k holds Counts[k]
	Count         uint64   // ZeroCount plus every bucket
	Sum           float64
	Max           float64
	HasMax        bool
}

// UpperBound is the upper bound of bucket MinIndex+k.
func (h *HistogramValue) UpperBound(k int) float64 {
	return upperBound(h.Schema, h.MinIndex+int32(k))
}

// Metric is one series and its value in a snapshot.
type Metric struct {
	Kind       Kind
	Name       string
	Labels     []Label
	Help, Unit string
	Counter    uint64          // KindCounter
	Gauge      int64           // KindGauge
	GaugeFloat float64         // KindGaugeFloat
	Histogram  *HistogramValue // KindHistogram
}

// Snapshot is every published metric of a file at one read.
type Snapshot struct {
	Entry   Entry
	Metrics []Metric
}

// All iterates over the metrics in registration order.
func (s *Snapshot) All() iter.Seq[Metric] {
	return func(yield func(Metric) bool) {
		for _, m := range s.Metrics {
			if !yield(m) {
				return
			}
		}
	}
}

type desc struct {
	kind          uint8
	schema        int8
	valueLen      uint32
	valueOffset   uint64
	refs          [4][2]uint32
	minIndex      int32
	bucketCount   uint32
	zeroThreshold float64
}

// Snapshot reads every published metric and its value.
func (f *File) Snapshot() (*Snapshot, error) {
	s, err := f.snapshot()
	if err != nil {
		return nil, &FileError{f.path, err}
	}
	return s, nil
}

func (f *File) snapshot() (*Snapshot, error) {
	h := &f.h
	le := binary.LittleEndian
	counts, err := f.pread(offDescCount, offShardsInUse-offDescCount+4)
	if err != nil {
		return nil, err
	}
	nd := le.Uint32(counts[0:])
	inUse := le.Uint32(counts[offShardsInUse-offDescCount:])
	if nd > h.descCapacity || nd < f.lastDescs {
		return nil, fmt.Errorf("desc_count %d outside %d..=desc_capacity %d", nd, f.lastDescs, h.descCapacity)
	}
	if inUse > h.shardCount || inUse < f.lastShard {
		return nil, fmt.Errorf("shards_in_use %d outside %d..=shard_count %d", inUse, f.lastShard, h.shardCount)
	}
	f.lastDescs, f.lastShard = nd, inUse
	snap := &Snapshot{Entry: f.entry()}
	descs := make([]desc, 0, nd)
	var shardEnd, sharedEnd, shardSum, sharedSum uint64
	for first := uint32(0); first < nd; first += descChunk {
		n := min(descChunk, nd-first)
		raw, err := f.pread(h.descOffset+uint64(first)*uint64(h.descLen), uint64(n)*uint64(h.descLen))
		if err != nil {
			return nil, err
		}
		chunk := make([]desc, n)
		lo, hi := uint64(1<<63), uint64(0)
		for i := range chunk {
			b := raw[uint64(i)*uint64(h.descLen):]
			d := &chunk[i]
			d.kind, d.schema = b[0], int8(b[1])
			d.valueLen, d.valueOffset = le.Uint32(b[4:]), le.Uint64(b[8:])
			for j := range d.refs {
				d.refs[j] = [2]uint32{le.Uint32(b[16+8*j:]), le.Uint32(b[20+8*j:])}
			}
			d.minIndex, d.bucketCount = int32(le.Uint32(b[48:])), le.Uint32(b[52:])
			d.zeroThreshold = f64frombits(le.Uint64(b[56:]))
			if err := f.checkDesc(d); err != nil {
				return nil, fmt.Errorf("descriptor %d of %d: %v", first+uint32(i), nd, err)
			}
			for _, r := range d.refs {
				if r[1] > 0 {
					lo, hi = min(lo, uint64(r[0])), max(hi, uint64(r[0])+uint64(r[1]))
				}
			}
			end := d.valueOffset + uint64(d.valueLen)
			if d.kind == kindCounter || d.kind == kindHistogram {
				shardEnd, shardSum = max(shardEnd, end), shardSum+uint64(d.valueLen)
			} else {
				sharedEnd, sharedSum = max(sharedEnd, end), sharedSum+uint64(d.valueLen)
			}
		}
		if shardSum > h.shardLen || sharedSum > h.sharedLen {
			return nil, errors.New("value blocks add up to more than their area (blocks are never shared)")
		}
		// The strings this chunk references, in one read when they lie together.
		var strs []byte
		if hi > lo && hi-lo <= 2*uint64(n)*(maxNameLen+maxHelpLen+maxUnitLen+maxLabelsLen/8) {
			if strs, err = f.pread(h.stringsOffset+lo, hi-lo); err != nil {
				return nil, err
			}
		}
		for i := range chunk {
			d := &chunk[i]
			var text [4]string
			for j, r := range d.refs {
				var sb []byte
				if strs != nil && r[1] > 0 {
					sb = strs[uint64(r[0])-lo : uint64(r[0])-lo+uint64(r[1])]
				} else if r[1] > 0 {
					if sb, err = f.pread(h.stringsOffset+uint64(r[0]), uint64(r[1])); err != nil {
						return nil, err
					}
				}
				if !utf8.Valid(sb) {
					return nil, fmt.Errorf("descriptor %d of %d: a string is not UTF-8", first+uint32(i), nd)
				}
				text[j] = string(sb)
			}
			labels, err := decodeLabels([]byte(text[1]))
			if err == nil {
				err = checkSeries(text[0], labels, text[2], text[3])
			}
			if err != nil {
				return nil, fmt.Errorf("descriptor %d of %d: %v", first+uint32(i), nd, err)
			}
			snap.Metrics = append(snap.Metrics, Metric{Kind: Kind(d.kind), Name: text[0], Labels: labels, Help: text[2], Unit: text[3]})
			descs = append(descs, *d)
		}
	}
	// Values: only the shards in use and the overflow shard; in each, the
	// range up to the end of the last block when the blocks are packed (as
	// a writer allocates them), else block by block.
	shardIDs := append(seq(inUse), h.shardCount)
	shardCost, sharedCost := min(shardEnd, shardSum), min(sharedEnd, sharedSum)
	if total := uint64(len(shardIDs))*shardCost + sharedCost; total > maxSnapshotBytes {
		return nil, fmt.Errorf("too large: one snapshot would read %d bytes of values, more than this reader's %d (the Rust reader's default limit)", total, uint64(maxSnapshotBytes))
	}
	sharded := func(d *desc) bool { return d.kind == kindCounter || d.kind == kindHistogram }
	var shards []region
	if shardEnd > 0 {
		for _, i := range shardIDs {
			r, err := f.readRegion(h.shardsOffset+uint64(i)*h.shardLen, shardEnd, shardSum, descs, sharded)
			if err != nil {
				return nil, err
			}
			shards = append(shards, r)
		}
	}
	var shared region
	if sharedEnd > 0 {
		if shared, err = f.readRegion(h.sharedOffset, sharedEnd, sharedSum, descs, func(d *desc) bool { return !sharded(d) }); err != nil {
			return nil, err
		}
	}
	for i, d := range descs {
		m := &snap.Metrics[i]
		switch d.kind {
		case kindCounter:
			for _, s := range shards {
				// Saturating, as writers stop a counter's word at 2^64-1.
				m.Counter = saturating(m.Counter, le.Uint64(s.at(d.valueOffset)))
			}
		case kindGaugeI64:
			m.Gauge = int64(le.Uint64(shared.at(d.valueOffset)))
		case kindGaugeF64:
			m.GaugeFloat = f64frombits(le.Uint64(shared.at(d.valueOffset)))
		case kindHistogram:
			m.Histogram = sumHistogram(&d, shards)
		}
	}
	return snap, nil
}

func seq(n uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

// region is the value words of one shard (or of the gauge area) that a
// snapshot read: one range when the blocks are packed, else each block.
type region struct {
	whole  []byte
	blocks map[uint64][]byte
}

func (r *region) at(off uint64) []byte {
	if r.blocks != nil {
		return r.blocks[off]
	}
	return r.whole[off:]
}

// readRegion reads the blocks of descs that pick selects, at base: the
// range [0, end) when they fill it (their lengths add up to end), else
// each block alone, so a block at the far end of a sparse area costs its
// own length, not the area's.
func (f *File) readRegion(base, end, sum uint64, descs []desc, pick func(*desc) bool) (region, error) {
	if sum >= end {
		b, err := f.pread(base, end)
		return region{whole: b}, err
	}
	r := region{blocks: map[uint64][]byte{}}
	for i := range descs {
		d := &descs[i]
		if !pick(d) {
			continue
		}
		b, err := f.pread(base+d.valueOffset, uint64(d.valueLen))
		if err != nil {
			return r, err
		}
		r.blocks[d.valueOffset] = b
	}
	return r, nil
}

func sumHistogram(d *desc, shards []region) *HistogramValue {
	le := binary.LittleEndian
	v := &HistogramValue{Schema: int(d.schema), ZeroThreshold: d.zeroThreshold, MinIndex: d.minIndex,
		Counts: make([]uint64, d.bucketCount)}
	var maxBits uint64
	for _, s := range shards {
		w := s.at(d.valueOffset)
		v.Sum += f64frombits(le.Uint64(w[hSum*word:]))
		maxBits = max(maxBits, le.Uint64(w[hMax*word:]))
		v.ZeroCount += le.Uint64(w[hZero*word:])
		for k := range v.Counts {
			v.Counts[k] += le.Uint64(w[(hHead+k)*word:])
		}
	}
	v.Count = v.ZeroCount
	for _, c := range v.Counts {
		v.Count += c
	}
	v.Max, v.HasMax = fromOrderedBits(maxBits)
	return v
}

func (f *File) checkDesc(d *desc) error {
	h := &f.h
	for j, r := range d.refs {
		limit := []uint32{maxNameLen, maxLabelsLen, maxHelpLen, maxUnitLen}[j]
		if r[1] > limit || uint64(r[0])+uint64(r[1]) > h.stringsLen {
			return fmt.Errorf("a string reference (%d, %d) is outside the string area or too long", r[0], r[1])
		}
	}
	if d.valueOffset%8 != 0 {
		return fmt.Errorf("value_offset %d is not 8-aligned", d.valueOffset)
	}
	area := h.shardLen
	want := uint64(word)
	switch d.kind {
	case kindCounter:
	case kindGaugeI64, kindGaugeF64:
		area = h.sharedLen
	case kindHistogram:
		if !validSchema(int(d.schema)) || d.bucketCount < 1 || d.bucketCount > maxBuckets ||
			d.minIndex < -maxAbsIndex || int64(d.minIndex)+int64(d.bucketCount) > maxAbsIndex ||
			!(d.zeroThreshold >= 0) {
			return errors.New("bad histogram (schema, bucket_count, indices or zero_threshold)")
		}
		want = (hHead + uint64(d.bucketCount)) * word
	default:
		return fmt.Errorf("unknown kind %d", d.kind)
	}
	if uint64(d.valueLen) != want {
		return fmt.Errorf("value_len %d, the kind's size is %d", d.valueLen, want)
	}
	if d.valueOffset > area || uint64(d.valueLen) > area-d.valueOffset {
		return fmt.Errorf("value block at %d+%d is outside its area (%d bytes)", d.valueOffset, d.valueLen, area)
	}
	return nil
}

func decodeLabels(b []byte) ([]Label, error) {
	var out []Label
	next := func() (string, error) {
		if len(b) < 2 {
			return "", errors.New("truncated label set")
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return "", errors.New("truncated label set")
		}
		s := string(b[2 : 2+n])
		b = b[2+n:]
		return s, nil
	}
	for len(b) > 0 {
		k, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		out = append(out, Label{k, v})
	}
	return out, nil
}
