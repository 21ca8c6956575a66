// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"os"
	"path/filepath"
	"testing"
)

// The reader on any bytes: an error or a snapshot, never a panic. `go
// test` runs the seeds (the Rust fuzz corpus: real registries and the
// hostile files of the bad-input tests); `go test -fuzz FuzzReader` mutates them.
func FuzzReader(f *testing.F) {
	seeds, _ := filepath.Glob("../../fuzz/corpus/reader/seed-*")
	if len(seeds) == 0 {
		f.Fatal("no seeds in ../../fuzz/corpus/reader: run from bindings/go in the repository")
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "x.topdeck")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path)
		if err != nil {
			return
		}
		defer r.Close()
		if s, err := r.Snapshot(); err == nil {
			for m := range s.All() {
				if m.Kind == KindHistogram && len(m.Histogram.Counts) == 0 {
					t.Fatal("a valid histogram has at least one bucket")
				}
			}
		}
	})
}
