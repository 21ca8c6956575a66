// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"unicode/utf8"
)

// The file format's constants (docs/FORMAT.md), shared by the writer and the reader.
const (
	magic = "TOPDECK\x00"
	major = 1
	// v1.1: the clock area exists; this writer leaves it zero (it stores
	// seconds, never raw ticks, so readers need no conversion).
	version         = 1<<16 | 1
	headerLen       = 4096
	headerFieldsEnd = 384
	descLen         = 64
	page            = 4096
	word            = 8
	suffix          = ".topdeck"
	tempPrefix      = ".creating-"
	nameFieldLen    = 64

	offVersion     = 8
	offDescCount   = 64
	offShardsInUse = 120

	kindCounter   = 1
	kindGaugeI64  = 2
	kindGaugeF64  = 3
	kindHistogram = 4

	// Histogram words before the buckets: count, sum, max, zero.
	hCount, hSum, hMax, hZero, hHead = 0, 1, 2, 3, 4

	// Section 8, the limits a reader enforces (a writer stays within them).
	maxFileLen      = 1 << 32
	maxDescCapacity = 1 << 20
	maxDescLen      = 256
	maxShardCount   = 1024
	maxShardLen     = 256 << 20
	maxStringsLen   = 256 << 20
	maxSharedLen    = 64 << 20
	maxBuckets      = 1024
	maxAbsIndex     = 1 << 19

	// Section 4: names.
	maxNameLen       = 200
	maxLabelNameLen  = 100
	maxLabelValueLen = 1024
	maxLabels        = 32
	maxLabelsLen     = maxLabels * (2 + maxLabelNameLen + 2 + maxLabelValueLen)
	maxHelpLen       = 1024
	maxUnitLen       = 64
)

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

func alignUp(n uint64) uint64 { return (n + page - 1) / page * page }

// layout is where the sections of a new file go (the Rust Header::new).
type layout struct {
	descOffset, stringsOffset, stringsLen uint64
	sharedOffset, sharedLen, shardsOffset uint64
	shardLen, fileLen                     uint64
	descCapacity, shardCount              uint32
}

func newLayout(c *config) (layout, error) {
	var l layout
	for _, f := range []struct {
		what       string
		value, low uint64
		limit      uint64
	}{
		{"metrics (WithMetrics)", uint64(c.metrics), 1, maxDescCapacity},
		{"shards (WithShards)", uint64(c.shards), 0, maxShardCount},
		{"shard bytes (WithShardBytes)", alignUp(uint64(c.shardBytes)), word, maxShardLen},
		{"string bytes (WithStringBytes)", uint64(c.stringBytes), 0, maxStringsLen},
		{"gauge bytes (WithGaugeBytes)", uint64(c.gaugeBytes), 0, maxSharedLen},
	} {
		if f.value < f.low || f.value > f.limit {
			return l, fmt.Errorf("topdeck: cannot create a registry this large: %s is %d, outside %d..=%d (docs/FORMAT.md section 8); lower it", f.what, f.value, f.low, f.limit)
		}
	}
	l.descOffset = headerLen
	l.descCapacity = uint32(c.metrics)
	l.stringsOffset = alignUp(headerLen + uint64(c.metrics)*descLen)
	l.sharedOffset = alignUp(l.stringsOffset + uint64(c.stringBytes))
	l.shardsOffset = alignUp(l.sharedOffset + uint64(c.gaugeBytes))
	l.shardLen = alignUp(uint64(c.shardBytes))
	l.shardCount = uint32(c.shards)
	l.stringsLen = l.sharedOffset - l.stringsOffset
	l.sharedLen = l.shardsOffset - l.sharedOffset
	l.fileLen = l.shardsOffset + l.shardLen*uint64(c.shards+1)
	if l.stringsLen > maxStringsLen || l.sharedLen > maxSharedLen || l.fileLen > maxFileLen {
		return l, fmt.Errorf("topdeck: cannot create a registry this large: the file would be %d bytes (areas rounded up to pages), above the readers' limits (docs/FORMAT.md section 8); lower WithMetrics, WithStringBytes, WithGaugeBytes, WithShardBytes or WithShards", l.fileLen)
	}
	return l, nil
}

// encodeHeader writes every header field except version, desc_count and
// shards_in_use, which are published separately.
func (l *layout) encodeHeader(out []byte, pid uint32, start, createdNs uint64, process, registry string) {
	le := binary.LittleEndian
	copy(out[0:8], magic)
	le.PutUint32(out[12:], headerLen)
	le.PutUint64(out[16:], l.fileLen)
	le.PutUint32(out[24:], pid)
	le.PutUint64(out[32:], start)
	le.PutUint64(out[40:], createdNs)
	le.PutUint64(out[48:], l.descOffset)
	le.PutUint32(out[56:], l.descCapacity)
	le.PutUint32(out[60:], descLen)
	le.PutUint32(out[68:], l.shardCount)
	le.PutUint64(out[72:], l.stringsOffset)
	le.PutUint64(out[80:], l.stringsLen)
	le.PutUint64(out[88:], l.sharedOffset)
	le.PutUint64(out[96:], l.sharedLen)
	le.PutUint64(out[104:], l.shardsOffset)
	le.PutUint64(out[112:], l.shardLen)
	copy(out[128:128+nameFieldLen-1], truncateUTF8(process, nameFieldLen-1))
	copy(out[192:192+nameFieldLen-1], truncateUTF8(registry, nameFieldLen-1))
}

// truncateUTF8 keeps at most n bytes of s, cut at a character boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func encodeLabels(labels []Label) []byte {
	var out []byte
	for _, l := range labels {
		out = binary.LittleEndian.AppendUint16(out, uint16(len(l.Name)))
		out = append(out, l.Name...)
		out = binary.LittleEndian.AppendUint16(out, uint16(len(l.Value)))
		out = append(out, l.Value...)
	}
	return out
}

// strRef is an (offset, length) pair into the string area.
type strRef struct{ off, len uint32 }

func encodeDescriptor(out []byte, kind uint8, valueLen uint32, valueOffset uint64, refs [4]strRef, b *bucketRange) {
	le := binary.LittleEndian
	out[0] = kind
	le.PutUint32(out[4:], valueLen)
	le.PutUint64(out[8:], valueOffset)
	for i, r := range refs {
		le.PutUint32(out[16+8*i:], r.off)
		le.PutUint32(out[20+8*i:], r.len)
	}
	if b != nil {
		out[1] = byte(int8(b.schema))
		le.PutUint32(out[48:], uint32(b.minIndex))
		le.PutUint32(out[52:], b.bucketCount)
		le.PutUint64(out[56:], f64bits(b.zeroThreshold()))
	}
}

// checkSeries applies section 4's rules, saying what to change when one is broken.
func checkSeries(name string, labels []Label, help, unit string) error {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("topdeck: cannot register %q: %s", name, fmt.Sprintf(why, args...))
	}
	if !metricName.MatchString(name) {
		return bad("a metric name matches [a-zA-Z_:][a-zA-Z0-9_:]*")
	}
	if len(name) > maxNameLen {
		return bad("the name is longer than %d bytes", maxNameLen)
	}
	if len(labels) > maxLabels {
		return bad("%d labels, more than %d", len(labels), maxLabels)
	}
	seen := make(map[string]bool, len(labels))
	for _, l := range labels {
		if !labelName.MatchString(l.Name) || len(l.Name) >= 2 && l.Name[:2] == "__" {
			return bad("label name %q must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __", l.Name)
		}
		if len(l.Name) > maxLabelNameLen {
			return bad("label name %q is longer than %d bytes", l.Name, maxLabelNameLen)
		}
		if seen[l.Name] {
			return bad("label %q given twice", l.Name)
		}
		seen[l.Name] = true
		if len(l.Value) > maxLabelValueLen || !utf8.ValidString(l.Value) {
			return bad("the value of label %q must be UTF-8 of at most %d bytes", l.Name, maxLabelValueLen)
		}
	}
	if len(help) > maxHelpLen || !utf8.ValidString(help) {
		return bad("the help must be UTF-8 of at most %d bytes", maxHelpLen)
	}
	if len(unit) > maxUnitLen || !utf8.ValidString(unit) {
		return bad("the unit must be UTF-8 of at most %d bytes", maxUnitLen)
	}
	return nil
}
