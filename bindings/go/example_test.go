// SPDX-License-Identifier: Apache-2.0

package topdeck_test

import (
	"fmt"
	"os"

	"topdeck.dev/topdeck"
)

func Example() {
	dir, _ := os.MkdirTemp("", "topdeck-example")
	defer os.RemoveAll(dir)
	reg, err := topdeck.NewRegistry("main", topdeck.WithDir(dir))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()
	requests, _ := reg.Counter("http_requests_total", "Requests served.", topdeck.L("route", "/"))
	latency, _ := reg.Timer("http_request_duration_seconds", "Time to serve.")
	for range 3 {
		t := latency.Start()
		requests.Inc()
		t.Stop()
	}

	// Any process can read the file; here, this one.
	f, _ := topdeck.Open(reg.Path())
	defer f.Close()
	snap, _ := f.Snapshot()
	for m := range snap.All() {
		switch m.Kind {
		case topdeck.KindCounter:
			fmt.Println(m.Name, m.Labels, m.Counter)
		case topdeck.KindHistogram:
			fmt.Println(m.Name, m.Unit, m.Histogram.Count)
		}
	}
	fmt.Println(snap.Entry.State)
	// Output:
	// http_requests_total [{route /}] 3
	// http_request_duration_seconds seconds 3
	// alive
}

func ExampleWorker() {
	dir, _ := os.MkdirTemp("", "topdeck-example")
	defer os.RemoveAll(dir)
	reg, _ := topdeck.NewRegistry("main", topdeck.WithDir(dir))
	defer reg.Close()
	bytesRead, _ := reg.Counter("bytes_read_total", "Bytes read.", topdeck.Unit("bytes"))

	w := reg.Worker() // a shard for this goroutine's loop
	defer w.Release()
	local := bytesRead.Local(w)
	for range 10 {
		local.Add(512)
	}
	fmt.Println(bytesRead.Value())
	// Output: 5120
}
