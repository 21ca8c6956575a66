// SPDX-License-Identifier: Apache-2.0

// Command conformance-writer is the Go writer driver of
// conformance/PROTOCOL.md: conformance-writer <dir> exit|crash|late.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	"topdeck.dev/topdeck"
)

func main() {
	if len(os.Args) != 3 || !strings.Contains("exit crash late", os.Args[2]) {
		fmt.Fprintln(os.Stderr, "usage: conformance-writer <dir> exit|crash|late")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-writer:", err)
		os.Exit(1)
	}
}

func run(dir, mode string) error {
	reg, err := topdeck.NewRegistry("conformance", topdeck.WithDir(dir))
	if err != nil {
		return err
	}
	if err := script(reg); err != nil {
		return err
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	for {
		line, err := in.ReadString('\n')
		if mode == "late" && strings.TrimSpace(line) == "more" {
			late, err := reg.Counter("late_total", "Registered late.")
			if err != nil {
				return err
			}
			late.Add(3)
			fmt.Println("more-done")
		}
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	if mode == "crash" {
		return syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	return reg.Close()
}

func script(reg *topdeck.Registry) error {
	fast, err := reg.Counter("jobs_total", "Jobs done.", topdeck.L("queue", "fast"))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25000 {
				fast.Inc()
			}
		})
	}
	wg.Wait()
	slow, err := reg.Counter("jobs_total", "Jobs done.", topdeck.L("queue", "slow"))
	if err != nil {
		return err
	}
	slow.Add(7)
	depth, err := reg.Gauge("queue_depth", "Jobs waiting — ünïcödé ✓")
	if err != nil {
		return err
	}
	depth.Set(-42)
	temp, err := reg.GaugeFloat("temperature_celsius", "Temperature.", topdeck.L("room", `a"b\c`), topdeck.Unit("celsius"))
	if err != nil {
		return err
	}
	temp.Set(21.5)
	temp.Set(-0.125)
	dur, err := reg.Histogram("request_duration_seconds", "Time to serve.", topdeck.L("route", "/"), topdeck.Unit("seconds"))
	if err != nil {
		return err
	}
	for i := 1; i <= 1000; i++ {
		dur.Observe(float64(i) / 1000)
	}
	sizes, err := reg.Histogram("payload_bytes", "Sizes.", topdeck.Unit("bytes"))
	if err != nil {
		return err
	}
	for _, v := range []float64{0, 0, 0, 1024, 1024, 1e9} {
		sizes.Observe(v)
	}
	db, err := reg.Timer("db_query_seconds", "Time in the database.")
	if err != nil {
		return err
	}
	for range 10 {
		t := db.Start()
		t.Stop()
	}
	return nil
}
