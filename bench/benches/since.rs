// SPDX-License-Identifier: Apache-2.0
#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! What each of 1,000 series did between two snapshots
//! (`Snapshot::since`, every series' change computed): two snapshots of
//! one reader, paired by position without a string compared; two readers'
//! snapshots in the same order, paired by position after comparing names;
//! and a writer that registered in the reverse order, paired by name.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use topdeck::{Registry, RegistryReader, Snapshot};
use topdeck_bench::{latencies, namespace};

/// 990 counters and 10 histograms, as in `snapshot.rs`, registered in
/// reverse order when `reversed`, each counter at `base + i` and each
/// histogram with its share of the latencies from `skip` on.
fn registry(dir: &tempfile::TempDir, reversed: bool, base: u64, skip: usize) -> Registry {
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

fn snapshot(r: &Registry) -> Snapshot {
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

    let writer = registry(&dir, false, 0, 0);
    let mut reader = RegistryReader::open(writer.path()).unwrap();
    let before = reader.snapshot().unwrap();
    let now = reader.snapshot().unwrap();
    check(&now, &before, true);
    g.bench_function("same_reader", |b| b.iter(|| changes(&now, &before)));

    let other = snapshot(&registry(&dir, false, 5, 1));
    check(&other, &before, true);
    g.bench_function("other_reader_same_order", |b| {
        b.iter(|| changes(&other, &before))
    });

    let reversed = snapshot(&registry(&dir, true, 5, 1));
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
    targets = since
}
criterion_main!(benches);
