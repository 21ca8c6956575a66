// SPDX-License-Identifier: Apache-2.0
//! Work for `scripts/syscalls.sh` to trace: metric updates from two threads
//! and snapshots from a third, between a `BEGIN` and an `END` marker.
//!
//! Everything that may legitimately call the kernel happens before `BEGIN`:
//! creating and mapping the registry and the reader, spawning the threads,
//! each thread's first update (which claims its shard under a mutex), the
//! first snapshots (descriptors are read and cached, buffers allocated).
//! The threads are then released by an atomic flag, not a `Barrier`
//! (whose wake-up is a futex call), and every wait inside the window spins.
//! Thread exit and join come after `END`. So under `strace -f` the window
//! must hold the two marker writes and nothing else.
//!
//! With `--control` the probe makes one `getppid` system call inside the
//! window, to show that the tracing would see one.

use std::hint::{black_box, spin_loop};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{ensure, Context, Result};
use topdeck::{Registry, RegistryReader, Value};

/// Counter increments per thread through the shared handle (10 M in all).
const INCS_PER_THREAD: u64 = 5_000_000;
/// Increments per thread through a thread-bound handle.
const LOCAL_INCS_PER_THREAD: u64 = 1_000_000;
/// Histogram records per thread (1 M in all).
const RECORDS_PER_THREAD: u64 = 500_000;
/// Gauge sets per thread.
const SETS_PER_THREAD: u64 = 500_000;
/// Snapshots the main thread takes while the threads update.
const SNAPSHOTS: usize = 1_000;
/// Idle counters that make each snapshot read a 1,000-metric registry.
const FILLER: usize = 996;

/// One `write(2)` straight to stderr: exactly one system call, no buffering.
fn marker(text: &str) {
    // SAFETY: `text` is a valid buffer of `text.len()` bytes for the call.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

fn wait_for(flag: &AtomicBool) {
    while !flag.load(Ordering::Acquire) {
        spin_loop();
    }
}

const USAGE: &str = "usage: syscall_probe [--control]
  Metric updates and snapshots between BEGIN and END markers on stderr,
  for scripts/syscalls.sh to trace; --control makes one system call inside.";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let control = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => false,
        ["--control"] => true,
        ["--help" | "-h"] => {
            println!("{USAGE}");
            return Ok(());
        }
        _ => {
            eprintln!("syscall_probe: unknown arguments {args:?}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm".into()
    } else {
        std::env::temp_dir()
    };
    let tmp = tempfile::Builder::new()
        .prefix("topdeck-syscall-probe-")
        .tempdir_in(&base)
        .with_context(|| format!("creating a temporary directory in {}", base.display()))?;
    let dir = tmp.path().join("ns");
    let registry = Registry::builder()
        .dir(&dir)
        .build()
        .with_context(|| format!("creating a registry in {}", dir.display()))?;
    let path = registry.path().to_path_buf();
    let counter = registry.counter("probe_total", &[], "Increments.", "")?;
    let local_total = registry.counter("probe_local_total", &[], "Thread-bound increments.", "")?;
    let gauge = registry.gauge("probe_gauge", &[], "Last value set.", "")?;
    let hist = registry.histogram("probe_seconds", &[], "Recorded values.", "seconds")?;
    let filler: Vec<_> = (0..FILLER)
        .map(|i| registry.counter(&format!("filler_{i}_total"), &[], "", ""))
        .collect::<Result<_, _>>()?;
    let mut reader =
        RegistryReader::open(&path).with_context(|| format!("opening {}", path.display()))?;

    let go = AtomicBool::new(false);
    let quit = AtomicBool::new(false);
    let ready = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let mut snapshots = 0;
    std::thread::scope(|s| -> Result<()> {
        for t in 0..2u64 {
            let (counter, local_total, gauge, hist) = (&counter, &local_total, &gauge, &hist);
            let (go, quit, ready, done) = (&go, &quit, &ready, &done);
            s.spawn(move || {
                // First uses outside the window: claiming a shard may lock the pool.
                counter.inc();
                let local = local_total.local();
                local.inc();
                gauge.set(0);
                hist.record(1e-3);
                ready.fetch_add(1, Ordering::Release);
                wait_for(go);
                for _ in 0..INCS_PER_THREAD {
                    black_box(counter).inc();
                }
                for _ in 0..LOCAL_INCS_PER_THREAD {
                    black_box(&local).inc();
                }
                for i in 0..RECORDS_PER_THREAD {
                    // 1 µs to 1 s, spread over many buckets.
                    let v = (1 + (i * 7919 + t) % 1_000_000) as f64 * 1e-6;
                    black_box(hist).record(v);
                }
                for i in 0..SETS_PER_THREAD {
                    black_box(gauge).set(i as i64);
                }
                done.fetch_add(1, Ordering::Release);
                // Exiting a thread makes system calls: wait until after END.
                wait_for(quit);
            });
        }
        while ready.load(Ordering::Acquire) < 2 {
            spin_loop();
        }
        for c in &filler {
            c.inc();
        }
        // Warm the reader: descriptors cached, buffers and allocator ready.
        for _ in 0..3 {
            black_box(reader.snapshot()?);
        }

        marker("BEGIN\n");
        go.store(true, Ordering::Release);
        while snapshots < SNAPSHOTS || done.load(Ordering::Acquire) < 2 {
            black_box(reader.snapshot()?);
            snapshots += 1;
        }
        if control {
            // SAFETY: getppid takes no arguments and cannot fail.
            black_box(unsafe { libc::syscall(libc::SYS_getppid) });
        }
        marker("END\n");
        quit.store(true, Ordering::Release);
        Ok(())
    })?;

    // The work really happened, and a reader sees all of it.
    let snap = reader
        .snapshot()
        .with_context(|| format!("reading {}", path.display()))?;
    let expect = |name: &str, want: u64| -> Result<()> {
        let got = match snap.get(name, &[]) {
            Some(Value::Counter(n)) => *n,
            Some(Value::Histogram(h)) => h.count,
            other => anyhow::bail!("{name} in {}: unexpected {other:?}", path.display()),
        };
        ensure!(got == want, "{name}: a reader sees {got}, expected {want}");
        Ok(())
    };
    expect("probe_total", 2 * (INCS_PER_THREAD + 1))?;
    expect("probe_local_total", 2 * (LOCAL_INCS_PER_THREAD + 1))?;
    expect("probe_seconds", 2 * (RECORDS_PER_THREAD + 1))?;
    ensure!(
        snap.len() == FILLER + 4,
        "snapshot has {} metrics",
        snap.len()
    );
    println!(
        "in the window: {} counter increments via shared handles, {} via thread-bound handles, \
         {} histogram records, {} gauge sets (2 threads), {snapshots} snapshots of {} metrics \
         (main thread){}",
        2 * INCS_PER_THREAD,
        2 * LOCAL_INCS_PER_THREAD,
        2 * RECORDS_PER_THREAD,
        2 * SETS_PER_THREAD,
        snap.len(),
        if control {
            ", and 1 getppid (control)"
        } else {
            ""
        },
    );
    Ok(())
}
