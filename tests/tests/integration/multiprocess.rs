// SPDX-License-Identifier: Apache-2.0
//! One writer process, several reader processes: totals are exact, no
//! reader ever sees a count go backwards, and a reader that arrives while
//! metrics are being registered sees only complete ones.

use topdeck::{Liveness, Namespace, Value};
use topdeck_tests::{field, namespace_dir, num, Done};

use super::{counter, reader, snapshot, writer};

/// Reader processes per test.
const READERS: usize = 3;

/// How a `td-writer run` is asked to work.
struct Load {
    workers: u32,
    shards: u32,
    min_per_worker: u64,
    batch: u64,
    churn: bool,
}

/// Runs a writer under `load` while [`READERS`] reader processes snapshot
/// it; checks the totals against the writer's own count. Returns the count.
fn run_watched(load: &Load) -> Done {
    let ns = namespace_dir();
    let (workers, shards, min, batch) = (
        load.workers.to_string(),
        load.shards.to_string(),
        load.min_per_worker.to_string(),
        load.batch.to_string(),
    );
    let mut args = vec![
        "run",
        "--workers",
        &workers,
        "--shards",
        &shards,
        "--min-per-worker",
        &min,
        "--batch",
        &batch,
    ];
    if load.churn {
        args.push("--churn");
    }
    let mut w = writer(ns.path(), &args);
    let path = w.path.to_str().expect("a UTF-8 path").to_owned();
    let mut readers: Vec<_> = (0..READERS).map(|_| reader(&["watch", &path])).collect();
    for r in &mut readers {
        r.expect("opened");
    }
    w.proc.send("go");
    // The writer keeps going until every reader has watched the counter
    // take 100 different values, so reads and writes really overlap.
    for r in &mut readers {
        r.expect("progress");
    }
    w.proc.send("stop");
    let done = Done::parse(&w.proc.expect("done "));
    eprintln!("writer: {done:?}");
    assert!(
        done.ops >= load.min_per_worker * u64::from(load.workers),
        "{done:?}"
    );

    // The writer now waits for `exit`: its file is still there for the final reads.
    for r in &mut readers {
        r.send("stop");
    }
    for (i, r) in readers.iter_mut().enumerate() {
        let last = r.expect("final ");
        eprintln!("reader {i}: {last}");
        let context = format!("reader {i}: {last}\n{}", r.transcript().join("\n"));
        assert_eq!(num(&last, "violations"), 0, "{context}");
        assert_eq!(num(&last, "ops"), done.ops, "{context}");
        assert_eq!(num(&last, "hist_count"), done.records, "{context}");
        assert_eq!(
            field(&last, "hist_sum").parse::<f64>().unwrap(),
            done.sum as f64,
            "{context}"
        );
        assert!(
            num(&last, "distinct") >= 100 && num(&last, "snapshots") >= 100,
            "{context}"
        );
        assert!(r.wait().success(), "{context}");
    }

    let snap = snapshot(&w.path);
    assert_eq!(counter(&snap, "ops_total", &[]), done.ops);
    for (k, n) in done.per_worker.iter().enumerate() {
        assert_eq!(
            counter(&snap, "worker_ops_total", &[("worker", &k.to_string())]),
            *n,
            "worker {k}"
        );
    }
    match snap.get("op_value", &[]) {
        Some(Value::Histogram(h)) => {
            assert_eq!(h.count, done.records);
            assert_eq!(h.sum, done.sum as f64);
            assert_eq!(h.max, Some(done.max as f64));
        }
        other => panic!("op_value is not a histogram: {other:?}"),
    }
    assert_eq!(snap.get("workers_running", &[]), Some(&Value::Gauge(0)));
    assert_eq!(snap.get("finished_ratio", &[]), Some(&Value::GaugeF64(1.0)));

    // A clean exit removes the file.
    w.proc.send("exit");
    assert!(
        w.proc.wait().success(),
        "the writer failed: {:?}",
        w.proc.transcript()
    );
    assert!(
        !w.path.exists(),
        "{} is left after a clean exit",
        w.path.display()
    );
    done
}

#[test]
fn counters_and_histograms_are_exact_while_reader_processes_watch() {
    run_watched(&Load {
        workers: 4,
        shards: 16,
        min_per_worker: 3_000_000,
        batch: 10_000,
        churn: false,
    });
}

#[test]
fn threads_beyond_the_shards_share_the_overflow_shard_exactly() {
    // Four workers, two shards: two workers add atomically to the overflow shard.
    run_watched(&Load {
        workers: 4,
        shards: 2,
        min_per_worker: 2_000_000,
        batch: 10_000,
        churn: false,
    });
}

#[test]
fn short_lived_threads_hand_shards_over_without_losing_increments() {
    let done = run_watched(&Load {
        workers: 4,
        shards: 3,
        min_per_worker: 1_000_000,
        batch: 2_500,
        churn: true,
    });
    assert!(
        done.threads >= 1600,
        "only {} short-lived threads ran",
        done.threads
    );
}

#[test]
fn a_reader_arriving_during_registration_sees_only_complete_metrics() {
    const COUNT: u32 = 3000;
    let ns = namespace_dir();
    let dir = ns.path().to_str().expect("a UTF-8 path").to_owned();
    let expect = COUNT.to_string();
    let watch = ["registrations", dir.as_str(), "--expect", expect.as_str()];
    // The first reader waits for the file to appear.
    let mut early = reader(&watch);
    let mut w = writer(
        ns.path(),
        &["register", "--count", &expect, "--checkpoint", "1000"],
    );
    w.proc.send("go");
    assert_eq!(w.proc.expect("progress "), "1000");
    // The writer is paused after 1000 metrics: this reader's first view is partial.
    let mut middle = reader(&watch);
    assert_eq!(middle.expect("opened len="), "1000");
    w.proc.send("continue");
    assert_eq!(w.proc.expect("progress "), "2000");
    // This one opens while registrations go on.
    let mut late = reader(&watch);
    w.proc.send("continue");
    assert_eq!(w.proc.expect("done "), expect);
    let opened: usize = late.expect("opened len=").parse().unwrap();
    assert!(opened >= 2000, "the late reader saw {opened} metrics");

    for r in [&mut early, &mut middle, &mut late] {
        r.send("stop");
        let last = r.expect("final ");
        let context = format!("{last}\n{}", r.transcript().join("\n"));
        assert_eq!(num(&last, "violations"), 0, "{context}");
        assert_eq!(num(&last, "len"), u64::from(COUNT), "{context}");
        assert!(r.wait().success(), "{context}");
    }

    let listing = Namespace::at(ns.path()).list();
    assert!(listing.errors.is_empty(), "{:?}", listing.errors);
    assert_eq!(listing.entries.len(), 1);
    assert_eq!(listing.entries[0].metrics, COUNT);
    assert_eq!(listing.entries[0].liveness, Liveness::Alive);
    let snap = snapshot(&w.path);
    assert_eq!(snap.len(), COUNT as usize);
    assert_eq!(
        snap.get("m_2998", &[("i", "2998")]),
        Some(&Value::Gauge(2998))
    );
    w.proc.send("exit");
    assert!(w.proc.wait().success());
}
