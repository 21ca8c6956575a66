// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The example as another process sees it: the Rust CLI reads the Go
// writer's file live (exact counts), after SIGKILL dead (and `topdeck gc`
// removes it), after SIGTERM gone.

func cli(t *testing.T) string {
	if p := os.Getenv("TOPDECK_CLI"); p != "" {
		return p
	}
	p, _ := filepath.Abs("../../../../target/debug/topdeck")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the topdeck CLI is not built (%v): run `cargo build -p topdeck-cli` at the repository root, or set TOPDECK_CLI", err)
	}
	return p
}

type service struct {
	cmd  *exec.Cmd
	url  string
	file string
}

func start(t *testing.T, bin, dir string) *service {
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "TOPDECK_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	var addr, file string
	if _, err2 := fmt.Sscanf(line, "listening on %s publishing %s", &addr, &file); err != nil || err2 != nil {
		t.Fatalf("the service said %q (%v, %v)", line, err, err2)
	}
	return &service{cmd, "http://" + strings.TrimSuffix(addr, ","), file}
}

func runCLI(t *testing.T, dir string, args ...string) []byte {
	cmd := exec.Command(cli(t), args...)
	cmd.Env = append(os.Environ(), "TOPDECK_DIR="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("topdeck %v: %v\n%s", args, err, out)
	}
	return out
}

type listing struct {
	Registries []struct {
		Path, State, Registry, Process string
		Pid                            int
	}
}

func list(t *testing.T, dir string) listing {
	var l listing
	if err := json.Unmarshal(runCLI(t, dir, "ls", "--json"), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestTheCLIReadsTheServiceLiveThenDeadThenGone(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "httpservice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "ns")
	svc := start(t, bin, dir)
	const n = 37
	for i := range n + 5 {
		path := "/hello"
		if i >= n {
			path = "/"
		}
		resp, err := http.Get(svc.url + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	l := list(t, dir)
	if len(l.Registries) != 1 || l.Registries[0].State != "alive" || l.Registries[0].Pid != svc.cmd.Process.Pid ||
		l.Registries[0].Process != "httpservice" || l.Registries[0].Path != svc.file {
		t.Fatalf("ls: %+v, want the service alive at %s", l, svc.file)
	}
	var show struct {
		State   string
		Metrics []struct {
			Name   string
			Labels map[string]string
			Value  json.RawMessage
		}
	}
	if err := json.Unmarshal(runCLI(t, dir, "show", "--json", fmt.Sprint(svc.cmd.Process.Pid)), &show); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range show.Metrics {
		key := m.Name + m.Labels["route"]
		if m.Name == "http_request_duration_seconds" {
			var h struct{ Count uint64 }
			json.Unmarshal(m.Value, &h)
			got[key] = fmt.Sprint(h.Count)
		} else {
			got[key] = string(m.Value)
		}
	}
	want := map[string]string{
		"http_requests_total/hello": fmt.Sprint(n), "http_requests_total/": "5",
		"http_request_duration_seconds": fmt.Sprint(n + 5), "http_requests_in_flight": "0",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("show: %s = %s, want %s (all: %v)", k, got[k], v, got)
		}
	}

	svc.cmd.Process.Signal(syscall.SIGKILL)
	svc.cmd.Wait()
	if l := list(t, dir); len(l.Registries) != 1 || l.Registries[0].State != "dead" {
		t.Fatalf("after SIGKILL: %+v, want one dead registry", l)
	}
	runCLI(t, dir, "gc")
	if _, err := os.Stat(svc.file); !os.IsNotExist(err) {
		t.Fatalf("topdeck gc left %s (%v)", svc.file, err)
	}

	// SIGTERM: the service closes its registry, which removes the file.
	svc = start(t, bin, dir)
	svc.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- svc.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not stop on SIGTERM")
	}
	if l := list(t, dir); len(l.Registries) != 0 {
		t.Fatalf("after SIGTERM: %+v, want no registry", l)
	}
}
