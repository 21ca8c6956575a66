// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
)

// The two drivers against each other and against the protocol's script
// (conformance/PROTOCOL.md): late mode alive, then crash mode dead.
func TestTheDriversAgreeOnTheScript(t *testing.T) {
	tmp := t.TempDir()
	writer := filepath.Join(tmp, "conformance-writer")
	if out, err := exec.Command("go", "build", "-o", writer, "../conformance-writer").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, mode := range []string{"late", "crash"} {
		dir := filepath.Join(tmp, mode)
		cmd := exec.Command(writer, dir, mode)
		in, _ := cmd.StdinPipe()
		outPipe, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		out := bufio.NewReader(outPipe)
		if line, _ := out.ReadString('\n'); line != "ready\n" {
			t.Fatalf("%s: the writer said %q", mode, line)
		}
		if mode == "late" {
			in.Write([]byte("more\n"))
			if line, _ := out.ReadString('\n'); line != "more-done\n" {
				t.Fatalf("the writer said %q after more", line)
			}
		}
		alive := readJSON(t, dir)
		in.Close()
		cmd.Wait()
		after := readJSON(t, dir)
		if len(alive.Registries) != 1 || alive.Registries[0].State != "alive" {
			t.Fatalf("%s: %+v, want one live registry", mode, alive)
		}
		checkScript(t, alive.Registries[0].Metrics, mode == "late")
		switch {
		case mode == "late" && len(after.Registries) != 0:
			t.Errorf("after a clean exit the file stays: %+v", after)
		case mode == "crash" && (len(after.Registries) != 1 || after.Registries[0].State != "dead"):
			t.Errorf("after SIGKILL: %+v, want one dead registry", after)
		}
	}
}

func readJSON(t *testing.T, dir string) *document {
	doc, err := read(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Through the encoder, as the runner sees it.
	b, _ := json.Marshal(doc)
	var back document
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("the document does not parse back: %v\n%s", err, b)
	}
	return doc
}

func checkScript(t *testing.T, ms []metric, late bool) {
	want := []struct {
		name  string
		value string
	}{
		{"jobs_total", "100000"},
		{"jobs_total", "7"},
		{"queue_depth", "-42"},
		{"temperature_celsius", "-0.125"},
		{"request_duration_seconds", `{"schema":3,"zero_threshold":9.313225746154785e-10,"zero_count":0,"min_index":-79,"count":1000,"sum":500.5,"max":1.0}`},
		{"payload_bytes", `{"schema":3,"zero_threshold":9.313225746154785e-10,"zero_count":3,"min_index":80,"count":6,"sum":1.000002048e+09,"max":1e+09}`},
		{"db_query_seconds", ""},
	}
	if late {
		want = append(want, struct{ name, value string }{"late_total", "3"})
	}
	if len(ms) != len(want) {
		t.Fatalf("%d metrics, want %d", len(ms), len(want))
	}
	for i, w := range want {
		m := ms[i]
		got, _ := json.Marshal(m.Value)
		if h, ok := m.Value.(histogram); ok {
			if w.value == "" { // the timer: only its count is fixed
				if h.Count != 10 {
					t.Errorf("%s: count %d, want 10", w.name, h.Count)
				}
				continue
			}
			h.Buckets = nil
			got, _ = json.Marshal(struct {
				histogram
				Buckets []uint64 `json:"buckets,omitempty"`
			}{h, nil})
		}
		if m.Name != w.name || string(got) != w.value {
			t.Errorf("metric %d: %s = %s, want %s = %s", i+1, m.Name, got, w.name, w.value)
		}
	}
}
