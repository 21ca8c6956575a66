// SPDX-License-Identifier: Apache-2.0
//! Proof that updating metrics and taking snapshots make no system call.
//!
//! Everything that may legitimately call the kernel (creating the file,
//! mapping it, starting threads, the first update of each thread, the first
//! snapshot, allocations for its buffers) happens before a `BEGIN` marker
//! written straight to stderr. Between `BEGIN` and `END`, two threads
//! update a counter and a histogram while the main thread snapshots the
//! registry; all waiting is spinning, so under `strace -f` the window must
//! hold the two marker writes and nothing else (`scripts/syscalls.sh`).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use topdeck::{Registry, RegistryReader};

const UPDATES_PER_THREAD: u64 = 5_000_000;
const RECORDS_PER_THREAD: u64 = 500_000;
const SNAPSHOTS: usize = 1_000;

fn marker(text: &str) {
    // SAFETY: writes a valid buffer to stderr; one system call, on purpose.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: td-syscall-probe <namespace dir>");
    let registry = Registry::builder().dir(&dir).build().expect("registry");
    let counter = registry
        .counter("probe_total", &[], "", "")
        .expect("counter");
    let hist = registry
        .histogram("probe_seconds", &[], "", "seconds")
        .expect("histogram");
    let mut reader = RegistryReader::open(registry.path()).expect("reader");
    black_box(reader.snapshot().expect("snapshot"));

    let go = Arc::new(AtomicBool::new(false));
    let quit = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (c, h) = (counter.clone(), hist.clone());
            let (go, quit) = (go.clone(), quit.clone());
            let (ready, done) = (ready.clone(), done.clone());
            std::thread::spawn(move || {
                c.inc(); // takes this thread's shard: may lock the pool
                h.record(1e-3);
                ready.fetch_add(1, Ordering::Release);
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                for i in 0..UPDATES_PER_THREAD {
                    c.inc();
                    if i % 10 == 0 {
                        h.record((1 + (i + t) % 1000) as f64 * 1e-6);
                    }
                }
                done.fetch_add(1, Ordering::Release);
                // Exiting a thread makes system calls: wait for END first.
                while !quit.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    while ready.load(Ordering::Acquire) < 2 {
        std::hint::spin_loop();
    }
    black_box(reader.snapshot().expect("snapshot"));

    marker("BEGIN\n");
    go.store(true, Ordering::Release);
    let mut snapshots = 0;
    while done.load(Ordering::Acquire) < 2 || snapshots < SNAPSHOTS {
        black_box(reader.snapshot().expect("snapshot"));
        snapshots += 1;
    }
    marker("END\n");
    quit.store(true, Ordering::Release);

    for t in threads {
        t.join().expect("thread");
    }
    let expected = 2 * (UPDATES_PER_THREAD + 1);
    assert_eq!(counter.get(), expected, "increments lost");
    assert_eq!(hist.count(), 2 * (RECORDS_PER_THREAD + 1), "records lost");
    println!("{snapshots} snapshots and {expected} increments, no syscall expected in between");
}
