// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The Rust library's own answers (bindings/python/tools/bucket_vectors.sh
// prints them from topdeck-format): every bound of one octave and its
// neighbouring doubles at every schema, sweeps, subnormals, extremes, ranges.
const vectorFile = "../python/tests/bucket_vectors.txt"

func parseBits(t *testing.T, s string) float64 {
	b, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f64frombits(b)
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBucketMathsMatchesTheRustVectors(t *testing.T) {
	f, err := os.Open(vectorFile)
	if err != nil {
		t.Fatalf("%v: the vectors live in the Python binding; run from bindings/go", err)
	}
	defer f.Close()
	kinds := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		schema := atoi(t, w[1])
		kinds[w[0]]++
		switch w[0] {
		case "index":
			v := parseBits(t, w[2])
			if got, want := bucketIndex(schema, v), int32(atoi(t, w[3])); got != want {
				t.Errorf("bucketIndex(%d, %v [%s]) = %d, Rust says %d", schema, v, w[2], got, want)
			}
		case "bound":
			got := upperBound(schema, int32(atoi(t, w[2])))
			if want := parseBits(t, w[3]); f64bits(got) != f64bits(want) {
				t.Errorf("upperBound(%d, %s) = %v, Rust says %v", schema, w[2], got, want)
			}
		case "range":
			r := covering(schema, parseBits(t, w[2]), parseBits(t, w[3]))
			if r.minIndex != int32(atoi(t, w[4])) || r.bucketCount != uint32(atoi(t, w[5])) ||
				f64bits(r.zeroThreshold()) != f64bits(parseBits(t, w[6])) {
				t.Errorf("covering(%d, %s, %s) = %+v zero %v, Rust says %v", schema, w[2], w[3], r, r.zeroThreshold(), w[4:])
			}
		default:
			t.Fatalf("unknown vector line %q", sc.Text())
		}
	}
	if kinds["index"] < 6000 || kinds["bound"] < 300 || kinds["range"] < 50 {
		t.Fatalf("too few vectors read: %v", kinds)
	}
}

func TestOrderedBitsKeepOrderAndRoundTrip(t *testing.T) {
	vals := []float64{-3, -0.5, 0, 1e-300, 0.5, 3}
	for i := 1; i < len(vals); i++ {
		if orderedBits(vals[i-1]) >= orderedBits(vals[i]) {
			t.Errorf("%v !< %v", vals[i-1], vals[i])
		}
	}
	for _, v := range vals {
		if got, ok := fromOrderedBits(orderedBits(v)); !ok || got != v {
			t.Errorf("round trip of %v gave %v", v, got)
		}
	}
	if _, ok := fromOrderedBits(0); ok {
		t.Error("0 must mean no value")
	}
}
