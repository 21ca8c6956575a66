// SPDX-License-Identifier: Apache-2.0
#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! Update costs side by side: counter increment (1 thread, and 2 threads on
//! one counter), gauge set, histogram record (1 and 2 threads), for topdeck
//! and what users would otherwise pick: the `prometheus` crate,
//! `prometheus-client`, the `metrics` facade with its Prometheus recorder,
//! `hdrhistogram`, and a bare atomic as the floor.
//!
//! Every case times whole loops with `iter_custom` on threads released by
//! a barrier (see [`topdeck_bench::per_thread`]); with 2 threads the time
//! reported is the slower thread's, so it reads as the cost per operation
//! per thread while another thread hammers the same metric.

use std::hint::black_box;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use metrics::Recorder;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use prometheus_client::metrics::{
    counter::Counter as PcCounter, gauge::Gauge as PcGauge, histogram::Histogram as PcHistogram,
};
use topdeck_bench::{latencies, namespace, per_thread, per_thread_loop, LATENCIES};

/// `timed!(threads, n, |i| op)`: the per-thread time of `n` runs of `op`
/// (with `i` the iteration) on `threads` threads, the loop written here so
/// that `op` is inlined into it.
macro_rules! timed {
    ($threads:expr, $n:expr, |$i:pat_param| $op:expr) => {
        per_thread_loop($threads, $n, &|n| {
            for $i in 0..n {
                $op;
            }
        })
    };
}

/// A word on its own cache lines, for the per-thread floor.
#[repr(align(128))]
struct Padded(AtomicU64);

/// The `metrics` facade's Prometheus recorder: a real one, as installed by
/// `PrometheusBuilder::install`, but held directly so no global is set.
fn metrics_recorder() -> PrometheusRecorder {
    PrometheusBuilder::new().build_recorder()
}

fn key(name: &'static str) -> metrics::Key {
    metrics::Key::from_static_name(name)
}

const META: metrics::Metadata<'static> =
    metrics::Metadata::new("bench", metrics::Level::INFO, None);

/// Histogram bounds for the Prometheus crates, as a user timing requests
/// in seconds would set them: exponential from 1 ms, doubling, 15 buckets
/// (to 16.4 s; values above go to +Inf).
const PROM_START: f64 = 1e-3;
const PROM_FACTOR: f64 = 2.0;
const PROM_BUCKETS: u16 = 15;

fn topdeck_registry(dir: &tempfile::TempDir) -> topdeck::Registry {
    topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .expect("a topdeck registry in the benchmark's directory")
}

fn counters(c: &mut Criterion) {
    let dir = namespace();
    let registry = topdeck_registry(&dir);
    let td = registry.counter("c_total", &[], "", "").unwrap();
    let prom = prometheus::IntCounter::new("c_total", "c").unwrap();
    let pc = PcCounter::<u64>::default();
    let rec = metrics_recorder();
    let mc = rec.register_counter(&key("c_total"), &META);
    let atomic = AtomicU64::new(0);

    for threads in [1, 2] {
        let mut g = c.benchmark_group(format!("counter_inc/{threads}_thread"));
        let id = BenchmarkId::from_parameter;
        g.bench_function(id("topdeck"), |b| {
            b.iter_custom(|n| timed!(threads, n, |_| black_box(&td).inc()))
        });
        g.bench_function(id("topdeck_local"), |b| {
            b.iter_custom(|n| {
                per_thread(threads, n, &|| td.local(), &|l, n| {
                    for _ in 0..n {
                        black_box(&*l).inc()
                    }
                })
            })
        });
        g.bench_function(id("prometheus"), |b| {
            b.iter_custom(|n| timed!(threads, n, |_| black_box(&prom).inc()))
        });
        g.bench_function(id("prometheus_client"), |b| {
            b.iter_custom(|n| timed!(threads, n, |_| black_box(black_box(&pc).inc())))
        });
        g.bench_function(id("metrics"), |b| {
            b.iter_custom(|n| timed!(threads, n, |_| black_box(&mc).increment(1)))
        });
        g.bench_function(id("atomic_fetch_add"), |b| {
            b.iter_custom(|n| {
                timed!(threads, n, |_| black_box(
                    black_box(&atomic).fetch_add(1, Ordering::Relaxed)
                ))
            })
        });
        // The floor for topdeck's design: a relaxed load and store of a word
        // only this thread writes, with no handle, lookup or shard in between.
        g.bench_function(id("owned_word_floor"), |b| {
            b.iter_custom(|n| {
                per_thread(
                    threads,
                    n,
                    &|| Box::new(Padded(AtomicU64::new(0))),
                    &|w, n| {
                        for _ in 0..n {
                            let w = &black_box(&**w).0;
                            w.store(w.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                        }
                    },
                )
            })
        });
        g.finish();
    }
    black_box((
        td.get(),
        prom.get(),
        pc.get(),
        atomic.load(Ordering::Relaxed),
    ));
}

fn gauges(c: &mut Criterion) {
    let dir = namespace();
    let registry = topdeck_registry(&dir);
    let td = registry.gauge("g", &[], "", "").unwrap();
    let prom = prometheus::IntGauge::new("g", "g").unwrap();
    let pc = PcGauge::<i64>::default();
    let rec = metrics_recorder();
    let mg = rec.register_gauge(&key("g"), &META);
    let atomic = AtomicI64::new(0);

    let mut g = c.benchmark_group("gauge_set/1_thread");
    g.bench_function("topdeck", |b| {
        b.iter_custom(|n| timed!(1, n, |i| black_box(&td).set(i as i64)))
    });
    g.bench_function("prometheus", |b| {
        b.iter_custom(|n| timed!(1, n, |i| black_box(&prom).set(i as i64)))
    });
    g.bench_function("prometheus_client", |b| {
        b.iter_custom(|n| timed!(1, n, |i| black_box(black_box(&pc).set(i as i64))))
    });
    g.bench_function("metrics", |b| {
        b.iter_custom(|n| timed!(1, n, |i| black_box(&mg).set(i as f64)))
    });
    g.bench_function("atomic_store", |b| {
        b.iter_custom(|n| {
            timed!(1, n, |i| black_box(&atomic)
                .store(i as i64, Ordering::Relaxed))
        })
    });
    g.finish();
    black_box((td.get(), prom.get(), pc.get()));
}

fn histograms(c: &mut Criterion) {
    let vals = latencies();
    let v = |i: u64| vals[i as usize & (LATENCIES - 1)];
    let ns = |i: u64| (v(i) * 1e9) as u64;
    let dir = namespace();
    let registry = topdeck_registry(&dir);
    // Default buckets: schema 3 (≈9% wide), 1 ns to 10^6 s.
    let td = registry.histogram("h_seconds", &[], "", "seconds").unwrap();
    let prom =
        prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("h_seconds", "h").buckets(
            prometheus::exponential_buckets(PROM_START, PROM_FACTOR, PROM_BUCKETS.into()).unwrap(),
        ))
        .unwrap();
    let pc = PcHistogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        PROM_START,
        PROM_FACTOR,
        PROM_BUCKETS,
    ));
    let rec = metrics_recorder();
    let scrape = rec.handle();
    let mh = rec.register_histogram(&key("h_seconds"), &META);
    // 1 ns to 1 hour at 3 significant digits, recording nanoseconds.
    let hdr_new =
        || hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    let hdr_shared = Mutex::new(hdr_new());

    for threads in [1, 2] {
        let mut g = c.benchmark_group(format!("histogram_record/{threads}_thread"));
        let id = BenchmarkId::from_parameter;
        g.bench_function(id("topdeck"), |b| {
            b.iter_custom(|n| timed!(threads, n, |i| black_box(&td).record(v(i))))
        });
        g.bench_function(id("prometheus"), |b| {
            b.iter_custom(|n| timed!(threads, n, |i| black_box(&prom).observe(v(i))))
        });
        g.bench_function(id("prometheus_client"), |b| {
            b.iter_custom(|n| timed!(threads, n, |i| black_box(&pc).observe(v(i))))
        });
        g.bench_function(id("metrics"), |b| {
            b.iter_custom(|n| {
                let t = timed!(threads, n, |i| black_box(&mh).record(v(i)));
                // The recorder queues every value until it is scraped: drain
                // it between samples (untimed), as an exporter would.
                black_box(scrape.render());
                t
            })
        });
        // The floor for any histogram that keeps a sum and a count: a float
        // add and an integer add to words only this thread writes (no
        // bucket, no max, no handle).
        g.bench_function(id("owned_sum_count_floor"), |b| {
            b.iter_custom(|n| {
                per_thread(
                    threads,
                    n,
                    &|| Box::new([Padded(AtomicU64::new(0)), Padded(AtomicU64::new(0))]),
                    &|w, n| {
                        for i in 0..n {
                            let [sum, count] = &**black_box(&*w);
                            let (sum, count) = (&sum.0, &count.0);
                            sum.store(
                                (f64::from_bits(sum.load(Ordering::Relaxed)) + v(i)).to_bits(),
                                Ordering::Relaxed,
                            );
                            count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                        }
                    },
                )
            })
        });
        if threads == 1 {
            // hdrhistogram is single-threaded: alone it needs no lock ...
            g.bench_function(id("hdrhistogram"), |b| {
                b.iter_custom(|n| {
                    per_thread(threads, n, &hdr_new, &|h, n| {
                        for i in 0..n {
                            black_box(&mut *h).saturating_record(ns(i))
                        }
                    })
                })
            });
        } else {
            // ... shared between threads, users put it behind a mutex.
            g.bench_function(id("hdrhistogram_mutex"), |b| {
                b.iter_custom(|n| {
                    timed!(threads, n, |i| black_box(&hdr_shared)
                        .lock()
                        .unwrap()
                        .saturating_record(ns(i)))
                })
            });
        }
        g.finish();
    }
    black_box((td.count(), prom.get_sample_count()));
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = counters, gauges, histograms
}
criterion_main!(benches);
