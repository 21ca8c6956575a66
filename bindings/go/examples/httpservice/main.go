// SPDX-License-Identifier: Apache-2.0

// Command httpservice is a net/http server that counts its requests and
// times them in a topdeck registry; `topdeck ls` and `topdeck show
// httpservice` read them live from another process.
//
//	go run ./examples/httpservice -addr 127.0.0.1:8080
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"topdeck.dev/topdeck"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on (port 0: any free port)")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "httpservice:", err)
		os.Exit(1)
	}
}

type metrics struct {
	requests map[string]*topdeck.Counter
	latency  *topdeck.Histogram
	inFlight *topdeck.Gauge
}

func run(addr string) error {
	reg, err := topdeck.NewRegistry("main")
	if err != nil {
		return err
	}
	defer reg.Close() // a clean exit removes the file; SIGKILL leaves it for `topdeck gc`
	m := metrics{requests: map[string]*topdeck.Counter{}}
	for _, route := range []string{"/", "/hello"} {
		if m.requests[route], err = reg.Counter("http_requests_total", "Requests served.", topdeck.L("route", route)); err != nil {
			return err
		}
	}
	if m.latency, err = reg.Timer("http_request_duration_seconds", "Time to serve a request."); err != nil {
		return err
	}
	if m.inFlight, err = reg.Gauge("http_requests_in_flight", "Requests being served."); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", m.instrument("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))
	mux.HandleFunc("/", m.instrument("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "topdeck example service: try /hello")
	}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// Handled before saying we listen, so that a SIGTERM right after is clean.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	fmt.Printf("listening on %s, publishing %s\n", ln.Addr(), reg.Path())
	srv := &http.Server{Handler: mux}
	go func() { <-stop; srv.Close() }()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

func (m *metrics) instrument(route string, h http.HandlerFunc) http.HandlerFunc {
	requests := m.requests[route]
	return func(w http.ResponseWriter, r *http.Request) {
		t := m.latency.Start()
		defer t.Stop()
		m.inFlight.Inc()
		defer m.inFlight.Dec()
		requests.Inc()
		h(w, r)
	}
}
