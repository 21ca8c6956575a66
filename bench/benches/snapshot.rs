// SPDX-License-Identifier: Apache-2.0
#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! Reading 1,000 metrics: a topdeck snapshot (from the mapping, as another
//! process would) against what the other crates do when they are read:
//! `prometheus` gathers, `prometheus-client` encodes, the `metrics`
//! Prometheus recorder renders. Only topdeck's read leaves the numbers as
//! numbers; the others also format text, which is the only way they are read.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use topdeck_bench::namespace;

fn topdeck_registry(dir: &tempfile::TempDir) -> topdeck::Registry {
    topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .expect("a topdeck registry in the benchmark's directory")
}

/// Opens a reader and checks, before timing it, that its snapshot holds
/// 1,000 metrics and counter `c0_total` at `c0`.
fn checked_reader(registry: &topdeck::Registry, c0: u64) -> topdeck::RegistryReader {
    let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
    let snap = reader.snapshot().unwrap();
    assert_eq!(snap.len(), 1000);
    assert_eq!(
        snap.get("c0_total", &[]),
        Some(&topdeck::Value::Counter(c0))
    );
    reader
}

fn snapshots(c: &mut Criterion) {
    let dir = namespace();
    let mut g = c.benchmark_group("snapshot_1000");

    // 1,000 counters, updated from two threads so two shards are in use.
    let registry = topdeck_registry(&dir);
    let counters: Vec<_> = (0..1000)
        .map(|i| {
            registry
                .counter(&format!("c{i}_total"), &[], "", "")
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| counters.iter().for_each(topdeck::Counter::inc));
        }
    });
    let mut reader = checked_reader(&registry, 2);
    g.bench_function("topdeck_counters", |b| {
        b.iter(|| black_box(reader.snapshot().unwrap()))
    });

    // 990 counters and 10 histograms.
    let mixed = topdeck_registry(&dir);
    let mut handles = Vec::new();
    for i in 0..990 {
        let c = mixed.counter(&format!("c{i}_total"), &[], "", "").unwrap();
        c.inc();
        handles.push(c);
    }
    let hists: Vec<_> = (0..10)
        .map(|i| {
            mixed
                .histogram(&format!("h{i}_seconds"), &[], "", "seconds")
                .unwrap()
        })
        .collect();
    for (i, h) in hists.iter().enumerate() {
        for v in topdeck_bench::latencies().iter().skip(i).step_by(10) {
            h.record(*v);
        }
    }
    let mut mixed_reader = checked_reader(&mixed, 1);
    g.bench_function("topdeck_counters_and_histograms", |b| {
        b.iter(|| black_box(mixed_reader.snapshot().unwrap()))
    });

    // 1,000 counters updated from 8 threads: a reader sums 8 shards (plus
    // the overflow shard) instead of 2. Shard indices are per process, so
    // this case comes after the others.
    let wide = topdeck_registry(&dir);
    let wide_counters: Vec<_> = (0..1000)
        .map(|i| wide.counter(&format!("c{i}_total"), &[], "", "").unwrap())
        .collect();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| wide_counters.iter().for_each(topdeck::Counter::inc));
        }
    });
    let mut wide_reader = checked_reader(&wide, 8);
    g.bench_function("topdeck_counters_8_threads", |b| {
        b.iter(|| black_box(wide_reader.snapshot().unwrap()))
    });

    let prom = prometheus::Registry::new();
    for i in 0..1000 {
        let c = prometheus::IntCounter::new(format!("c{i}_total"), "c").unwrap();
        c.inc();
        prom.register(Box::new(c)).unwrap();
    }
    g.bench_function("prometheus_gather", |b| b.iter(|| black_box(prom.gather())));

    let mut pc = prometheus_client::registry::Registry::default();
    for i in 0..1000 {
        let c = prometheus_client::metrics::counter::Counter::<u64>::default();
        c.inc();
        pc.register(format!("c{i}"), "c", c);
    }
    g.bench_function("prometheus_client_encode", |b| {
        b.iter(|| {
            let mut out = String::with_capacity(64 << 10);
            prometheus_client::encoding::text::encode(&mut out, &pc).unwrap();
            black_box(out)
        })
    });

    let rec = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let meta = metrics::Metadata::new("bench", metrics::Level::INFO, None);
    for i in 0..1000 {
        let key = metrics::Key::from_name(format!("c{i}_total"));
        metrics::Recorder::register_counter(&rec, &key, &meta).increment(1);
    }
    let handle = rec.handle();
    g.bench_function("metrics_render", |b| b.iter(|| black_box(handle.render())));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(3))
        .sample_size(30);
    targets = snapshots
}
criterion_main!(benches);
