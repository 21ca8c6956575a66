// SPDX-License-Identifier: Apache-2.0

// Command conformance-reader is the Go reader driver of
// conformance/PROTOCOL.md: conformance-reader <dir> prints the canonical JSON.
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"topdeck.dev/topdeck"
)

// number is a float64 printed shortest round-trip; JSON has no inf or
// NaN, which a registry cannot hold in these fields anyway: null, as the C
// driver prints them.
type number float64

func (n number) MarshalJSON() ([]byte, error) {
	v := float64(n)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	// Always with a point or an exponent, so that -0.0 stays a float.
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return []byte(s), nil
}

type histogram struct {
	Schema        int      `json:"schema"`
	ZeroThreshold number   `json:"zero_threshold"`
	ZeroCount     uint64   `json:"zero_count"`
	MinIndex      int32    `json:"min_index"`
	Buckets       []uint64 `json:"buckets"`
	Count         uint64   `json:"count"`
	Sum           number   `json:"sum"`
	Max           *number  `json:"max"`
}

type metric struct {
	Kind   string      `json:"kind"`
	Name   string      `json:"name"`
	Labels [][2]string `json:"labels"`
	Help   string      `json:"help"`
	Unit   string      `json:"unit"`
	Value  any         `json:"value"`
}

type registry struct {
	File     string   `json:"file"`
	Registry string   `json:"registry"`
	State    string   `json:"state"`
	Metrics  []metric `json:"metrics"`
}

type document struct {
	Registries []registry `json:"registries"`
	Rejected   []string   `json:"rejected"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: conformance-reader <dir>")
		os.Exit(2)
	}
	doc, err := read(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-reader:", err)
		os.Exit(1)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	out.SetIndent("", " ")
	if err := out.Encode(doc); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-reader:", err)
		os.Exit(1)
	}
}

func read(dir string) (*document, error) {
	if _, err := os.ReadDir(dir); err != nil {
		return nil, err
	}
	l, err := topdeck.List(dir)
	if err != nil {
		return nil, err
	}
	doc := &document{Registries: []registry{}, Rejected: []string{}}
	for _, e := range l.Errors {
		if fe, ok := e.(*topdeck.FileError); ok {
			doc.Rejected = append(doc.Rejected, filepath.Base(fe.Path))
		}
	}
	for _, e := range l.Registries {
		f, err := topdeck.Open(e.Path)
		var snap *topdeck.Snapshot
		if err == nil {
			snap, err = f.Snapshot()
			f.Close()
		}
		if err != nil {
			doc.Rejected = append(doc.Rejected, e.File)
			continue
		}
		r := registry{File: e.File, Registry: e.Registry, State: string(snap.Entry.State), Metrics: []metric{}}
		for m := range snap.All() {
			out := metric{Kind: m.Kind.String(), Name: m.Name, Labels: [][2]string{}, Help: m.Help, Unit: m.Unit}
			for _, l := range m.Labels {
				out.Labels = append(out.Labels, [2]string{l.Name, l.Value})
			}
			switch m.Kind {
			case topdeck.KindCounter:
				out.Value = m.Counter
			case topdeck.KindGauge:
				out.Value = m.Gauge
			case topdeck.KindGaugeFloat:
				out.Value = number(m.GaugeFloat)
			case topdeck.KindHistogram:
				out.Value = trimmed(m.Histogram)
			}
			r.Metrics = append(r.Metrics, out)
		}
		doc.Registries = append(doc.Registries, r)
	}
	sort.Strings(doc.Rejected)
	return doc, nil
}

// trimmed drops leading and trailing zero buckets (moving min_index), so
// that equal histograms print equally.
func trimmed(h *topdeck.HistogramValue) histogram {
	out := histogram{Schema: h.Schema, ZeroThreshold: number(h.ZeroThreshold), ZeroCount: h.ZeroCount,
		Buckets: []uint64{}, Count: h.Count, Sum: number(h.Sum)}
	lo, hi := 0, len(h.Counts)
	for lo < hi && h.Counts[lo] == 0 {
		lo++
	}
	for hi > lo && h.Counts[hi-1] == 0 {
		hi--
	}
	if lo < hi {
		out.MinIndex = h.MinIndex + int32(lo)
		out.Buckets = append(out.Buckets, h.Counts[lo:hi]...)
	}
	if h.HasMax {
		m := number(h.Max)
		out.Max = &m
	}
	return out
}
