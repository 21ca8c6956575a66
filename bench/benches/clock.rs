// SPDX-License-Identifier: Apache-2.0
#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! Clock reads side by side: topdeck's `now()`, `wall()` and ordered read
//! against `clock_gettime` (MONOTONIC, REALTIME), `std::time::Instant`,
//! quanta, minstant, and the raw instructions (`rdtsc`, `rdtscp`) as
//! floors; then a timed (empty) section recorded several ways: a topdeck
//! `Timer`; quanta's raw reads, quanta's `Instant`, minstant and `Instant`
//! each with hdrhistogram; `Instant` with the prometheus crate's
//! histogram; and the records alone (topdeck's histogram, hdrhistogram).
//! Each case is one call per criterion iteration.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use topdeck_bench::namespace;

fn clock_gettime(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn reads(c: &mut Criterion) {
    let _ = topdeck::clock::now(); // calibrate and race outside the timing
    let q = quanta::Clock::new();
    let _ = quanta::Instant::now();
    let _ = minstant::Instant::now();
    eprintln!("topdeck clock source: {:?}", topdeck::clock::source());
    let mut g = c.benchmark_group("clock_read");
    g.bench_function("topdeck", |b| b.iter(topdeck::clock::now));
    g.bench_function("topdeck_wall", |b| b.iter(topdeck::clock::wall));
    g.bench_function("topdeck_ordered", |b| b.iter(topdeck::clock::now_ordered));
    g.bench_function("clock_gettime_monotonic", |b| {
        b.iter(|| clock_gettime(libc::CLOCK_MONOTONIC))
    });
    g.bench_function("clock_gettime_realtime", |b| {
        b.iter(|| clock_gettime(libc::CLOCK_REALTIME))
    });
    g.bench_function("std_instant", |b| b.iter(Instant::now));
    g.bench_function("quanta_clock_now", |b| b.iter(|| q.now()));
    g.bench_function("quanta_instant_now", |b| b.iter(quanta::Instant::now));
    g.bench_function("minstant", |b| b.iter(minstant::Instant::now));
    #[cfg(target_arch = "x86_64")]
    {
        g.bench_function("rdtsc", |b| {
            b.iter(|| {
                // SAFETY: RDTSC is baseline x86_64.
                unsafe { core::arch::x86_64::_rdtsc() }
            })
        });
        g.bench_function("rdtscp", |b| {
            b.iter(|| {
                let mut aux = 0u32;
                // SAFETY: this machine has RDTSCP (/proc/cpuinfo flag rdtscp).
                unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
            })
        });
    }
    g.finish();
    #[cfg(target_arch = "x86_64")]
    serial_reads(c);
}

/// The same reads, each waited for before the next starts (`lfence` after
/// it): the work after the counter read then adds to the time instead of
/// overlapping the next read, as it does on CPUs whose `rdtsc` is fast
/// (the Intel gap in docs/PERFORMANCE.md). `x - rdtsc` is the latency a
/// read adds to the counter.
#[cfg(target_arch = "x86_64")]
fn serial_reads(c: &mut Criterion) {
    use core::arch::x86_64::{_mm_lfence, _rdtsc};
    fn serial<T>(f: impl Fn() -> T) -> impl FnMut() -> T {
        move || {
            let v = black_box(f());
            // SAFETY: LFENCE is SSE2, part of the x86_64 baseline.
            unsafe { _mm_lfence() };
            v
        }
    }
    let mut g = c.benchmark_group("clock_read_serial");
    g.bench_function("topdeck", |b| b.iter(serial(topdeck::clock::now)));
    g.bench_function("topdeck_ticks", |b| b.iter(serial(topdeck::clock::ticks)));
    g.bench_function("minstant", |b| b.iter(serial(minstant::Instant::now)));
    let q = quanta::Clock::new();
    g.bench_function("quanta_clock_now", |b| b.iter(serial(|| q.now())));
    // SAFETY: RDTSC is baseline x86_64.
    g.bench_function("rdtsc", |b| b.iter(serial(|| unsafe { _rdtsc() })));
    g.finish();
}

fn timed_section(c: &mut Criterion) {
    let dir = namespace();
    // The timer as before the CPU wait: no array, whatever the agent pinned.
    let registry = topdeck::Registry::builder()
        .dir(dir.path())
        .no_thread_waits()
        .build()
        .expect("a registry");
    let timer = registry
        .timer("section_seconds", &[], "A timed section.")
        .unwrap();
    // The same with a real thread-waits array (made here, as root: the
    // agent's probe is not needed to read a slot), so each section also
    // loads the thread's slot twice and records a wait of 0.
    let array = topdeck::waits::testing::TestArray::create(topdeck::waits::testing::pid_max());
    let waits_registry = array.as_ref().map(|a| {
        topdeck::Registry::builder()
            .dir(dir.path())
            .name("waits")
            .thread_waits(a.pin())
            .build()
            .expect("a registry")
    });
    let waits_timer = waits_registry.as_ref().map(|r| {
        let t = r.timer("section_seconds", &[], "A timed section.").unwrap();
        assert!(
            t.cpu_wait_histogram().is_some(),
            "{:?}",
            r.thread_waits_problem()
        );
        t
    });
    let mut hdr = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    let prom = prometheus::Histogram::with_opts(
        prometheus::HistogramOpts::new("section_seconds", "A timed section.")
            .buckets(prometheus::exponential_buckets(1e-6, 2.0, 24).unwrap()),
    )
    .unwrap();
    let mut g = c.benchmark_group("timed_section");
    g.bench_function("topdeck", |b| b.iter(|| drop(black_box(timer.start()))));
    if let Some(timer) = &waits_timer {
        g.bench_function("topdeck_cpu_wait", |b| {
            b.iter(|| drop(black_box(timer.start())))
        });
    }
    g.bench_function("topdeck_time_closure", |b| {
        b.iter(|| timer.time(|| black_box(0)))
    });
    // Its parts, to see where the time goes: the two counter reads alone,
    // and the record of a value that does not wait for them.
    g.bench_function("part_ticks_pair", |b| {
        b.iter(|| {
            let t = topdeck::clock::ticks();
            black_box(topdeck::clock::ticks().wrapping_sub(t))
        })
    });
    // The floor of any timer that stores to a bucket picked from the
    // second read: one add at an address computed from it by a bit scan
    // (no table, no histogram), against the same add one section late,
    // at the address the previous section picked.
    let mut words = [0u64; 64];
    g.bench_function("part_ticks_pair_add_at_its_address", |b| {
        b.iter(|| {
            let t = topdeck::clock::ticks();
            let d = topdeck::clock::ticks().wrapping_sub(t);
            words[d.leading_zeros() as usize & 63] += 1;
        })
    });
    let mut previous = 0usize;
    g.bench_function("part_ticks_pair_add_at_the_previous_address", |b| {
        b.iter(|| {
            let t = topdeck::clock::ticks();
            let d = topdeck::clock::ticks().wrapping_sub(t);
            words[previous] += 1;
            previous = d.leading_zeros() as usize & 63;
        })
    });
    black_box(&words);
    let histogram = timer.histogram().clone();
    g.bench_function("part_record", |b| {
        b.iter(|| histogram.record(black_box(2.5e-8)))
    });
    g.bench_function("part_record_hdrhistogram", |b| {
        b.iter(|| hdr.saturating_record(black_box(25)))
    });
    hdr.reset();
    // quanta's cheapest use: two raw counter reads, converted once.
    let q = quanta::Clock::new();
    g.bench_function("quanta_raw_hdrhistogram", |b| {
        b.iter(|| {
            let t = q.raw();
            black_box(0);
            hdr.saturating_record(q.delta_as_nanos(t, q.raw()));
        })
    });
    // The same, shareable: a histogram that more than one thread records
    // into needs a lock (uncontended here), as topdeck's timer does not.
    let shared = std::sync::Mutex::new(hdr.clone());
    g.bench_function("quanta_raw_hdrhistogram_mutex", |b| {
        b.iter(|| {
            let t = q.raw();
            black_box(0);
            let ns = q.delta_as_nanos(t, q.raw());
            shared.lock().unwrap().saturating_record(ns);
        })
    });
    g.bench_function("quanta_instant_hdrhistogram", |b| {
        b.iter(|| {
            let t = quanta::Instant::now();
            black_box(0);
            hdr.saturating_record(t.elapsed().as_nanos() as u64);
        })
    });
    g.bench_function("minstant_hdrhistogram", |b| {
        b.iter(|| {
            let t = minstant::Instant::now();
            black_box(0);
            hdr.saturating_record(t.elapsed().as_nanos() as u64);
        })
    });
    g.bench_function("instant_hdrhistogram", |b| {
        b.iter(|| {
            let t = Instant::now();
            black_box(0);
            hdr.saturating_record(t.elapsed().as_nanos() as u64);
        })
    });
    g.bench_function("instant_prometheus", |b| {
        b.iter(|| {
            let t = Instant::now();
            black_box(0);
            prom.observe(t.elapsed().as_secs_f64());
        })
    });
    g.finish();
}

criterion_group!(benches, reads, timed_section);
criterion_main!(benches);
