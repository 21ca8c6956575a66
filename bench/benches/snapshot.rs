// SPDX-License-Identifier: Apache-2.0
#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! Reading 1,000 metrics: a topdeck snapshot (from the mapping, as another
//! process would) against what the other crates do when they are read:
//! `prometheus` gathers, `prometheus-client` encodes, the `metrics`
//! Prometheus recorder renders. Only topdeck's read leaves the numbers as
//! numbers; the others also format text, which is the only way they are read.
//!
//! `plain_8kb_copy` is the floor: one copy of the 8 KB of value words.
//!
//! Then `since_1000`: what each of 1,000 series did between two snapshots
//! (`Snapshot::since`, every series' change computed): two snapshots of
//! one reader, paired by position without a string compared; two readers'
//! snapshots in the same order, paired by position after comparing names;
//! and a writer that registered in the reverse order, paired by name.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use topdeck::{Registry, RegistryReader, Snapshot};
use topdeck_bench::{latencies, namespace};

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

    // The floor: copying the value words of 1,000 counters (8 KB) once,
    // into a buffer kept between copies, as a snapshot's shard copy is.
    let words = vec![1u8; 8000];
    let mut copy = vec![0u8; 8000];
    g.bench_function("plain_8kb_copy", |b| {
        b.iter(|| {
            copy.copy_from_slice(black_box(&words));
            black_box(&copy);
        })
    });

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

/// 990 counters and 10 histograms, as in `snapshot.rs`, registered in
/// reverse order when `reversed`, each counter at `base + i` and each
/// histogram with its share of the latencies from `skip` on.
fn since_registry(dir: &tempfile::TempDir, reversed: bool, base: u64, skip: usize) -> Registry {
    let r = Registry::builder()
        .dir(dir.path())
        .build()
        .expect("a registry in the benchmark's directory");
    let mut order: Vec<usize> = (0..1000).collect();
    if reversed {
        order.reverse();
    }
    for i in order {
        if i < 990 {
            let c = r
                .counter(&format!("c{i}_total"), &[("shard", "a")], "", "")
                .unwrap();
            c.add(base + i as u64);
        } else {
            let h = r
                .histogram(&format!("h{i}_seconds"), &[], "", "seconds")
                .unwrap();
            for v in latencies().iter().skip(skip + i).step_by(40) {
                h.record(*v);
            }
        }
    }
    r
}

fn snapshot_of(r: &Registry) -> Snapshot {
    RegistryReader::open(r.path()).unwrap().snapshot().unwrap()
}

/// Every change of `now` since `before`, computed and dropped.
fn changes(now: &Snapshot, before: &Snapshot) {
    for s in now.since(before).iter() {
        black_box(s.change());
    }
}

/// Checks, before timing, how the pair is matched and that every series
/// found its earlier self.
fn check(now: &Snapshot, before: &Snapshot, by_position: bool) {
    let since = now.since(before);
    assert_eq!(since.by_position(), by_position);
    assert_eq!(since.len(), 1000);
    assert!(since.iter().all(|s| !s.is_new()));
}

fn since(c: &mut Criterion) {
    let dir = namespace();
    let mut g = c.benchmark_group("since_1000");

    let writer = since_registry(&dir, false, 0, 0);
    let mut reader = RegistryReader::open(writer.path()).unwrap();
    let before = reader.snapshot().unwrap();
    let now = reader.snapshot().unwrap();
    check(&now, &before, true);
    g.bench_function("same_reader", |b| b.iter(|| changes(&now, &before)));

    let other = snapshot_of(&since_registry(&dir, false, 5, 1));
    check(&other, &before, true);
    g.bench_function("other_reader_same_order", |b| {
        b.iter(|| changes(&other, &before))
    });

    let reversed = snapshot_of(&since_registry(&dir, true, 5, 1));
    check(&reversed, &before, false);
    g.bench_function("by_name", |b| b.iter(|| changes(&reversed, &before)));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(3))
        .sample_size(30);
    targets = snapshots, since
}
criterion_main!(benches);
