// SPDX-License-Identifier: Apache-2.0

// Command ticker is seed 001's time cache in its own language: a goroutine
// stores the time in milliseconds, then sleeps 1 ms, forever (the shape of
// sentinel-golang's StartTimeTicker). `topdeck lab idle --also go=<binary>`
// measures what it costs an otherwise idle process. It speaks the lab's
// helper protocol: "ready" on stdout, then it waits for end of input.
package main

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
)

var nowInMs uint64

func main() {
	atomic.StoreUint64(&nowInMs, uint64(time.Now().UnixNano())/1e6)
	go func() {
		for {
			atomic.StoreUint64(&nowInMs, uint64(time.Now().UnixNano())/1e6)
			time.Sleep(time.Millisecond)
		}
	}()
	fmt.Println("ready go-ticker")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
