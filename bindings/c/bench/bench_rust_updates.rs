// SPDX-License-Identifier: Apache-2.0
//! The Rust side of `make -C bindings/c bench`: the loops of
//! `bench_updates.c` on the Rust handles, timed the same way, so the two
//! lines compare what a C caller pays with what a Rust caller pays.

use std::hint::black_box;
use std::time::Instant;

const OPS: u32 = 10_000_000;
const REPEATS: usize = 11;

fn report(what: &str, mut ns: Vec<f64>) {
    ns.sort_by(f64::total_cmp);
    println!(
        "rust {what:<18} median {:6.2} ns/op  min {:6.2}  max {:6.2}  ({REPEATS} x {OPS} ops)",
        ns[REPEATS / 2],
        ns[0],
        ns[REPEATS - 1]
    );
}

fn timed(mut body: impl FnMut()) -> Vec<f64> {
    (0..REPEATS)
        .map(|_| {
            let t0 = Instant::now();
            body();
            t0.elapsed().as_nanos() as f64 / f64::from(OPS)
        })
        .collect()
}

#[inline(never)]
fn inc_out_of_line(c: &topdeck::Counter) {
    black_box(c).inc();
}

#[inline(never)]
fn record_out_of_line(h: &topdeck::Histogram, v: f64) {
    black_box(h).record(v);
}

fn main() -> Result<(), topdeck::Error> {
    let dir = std::env::temp_dir().join(format!("topdeck-rust-bench-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&dir) {
        eprintln!("bench: cannot create {}: {e}", dir.display());
        std::process::exit(1);
    }
    let registry = topdeck::Registry::builder()
        .dir(&dir)
        .name("bench")
        .build()?;
    let c = registry.counter("ops_total", &[], "", "")?;
    let h = registry.histogram("op_seconds", &[], "", "seconds")?;
    report(
        "counter_inc",
        timed(|| {
            for _ in 0..OPS {
                black_box(&c).inc();
            }
        }),
    );
    report(
        "histogram_record",
        timed(|| {
            let mut v = 1e-6;
            for _ in 0..OPS {
                black_box(&h).record(v);
                v = if v < 1.0 { v * 1.25 } else { 1e-6 };
            }
        }),
    );
    // The same updates behind a call the optimiser cannot see through,
    // as a C caller's are: what the ABI itself adds is the difference
    // between these lines and the C ones.
    report(
        "counter_inc_call",
        timed(|| {
            for _ in 0..OPS {
                inc_out_of_line(&c);
            }
        }),
    );
    report(
        "histogram_rec_call",
        timed(|| {
            let mut v = 1e-6;
            for _ in 0..OPS {
                record_out_of_line(&h, v);
                v = if v < 1.0 { v * 1.25 } else { 1e-6 };
            }
        }),
    );
    let expected = 2 * u64::from(OPS) * REPEATS as u64;
    if c.get() != expected || h.count() != expected {
        eprintln!("bench: updates were lost");
        std::process::exit(1);
    }
    drop(registry);
    let _ = std::fs::remove_dir(&dir);
    Ok(())
}
