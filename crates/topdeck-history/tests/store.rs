// SPDX-License-Identifier: Apache-2.0
//! A store written by a Recorder reads back as it was recorded: every
//! moment, across key frames, new and gone sources, renumbered series,
//! a torn tail and a damaged frame; retention and the one-writer rule.

use std::path::Path;
use std::sync::Arc;

use topdeck::{ForeignReader, HistogramValue, Liveness, MetricInfo, MetricKind, Snapshot, Value};
use topdeck_history::{History, Options, Recorder};
use topdeck_sources::{Kind, Source};

const S: u64 = 1_000_000_000;

fn info(kind: MetricKind, name: &str) -> MetricInfo {
    MetricInfo {
        kind,
        name: name.into(),
        labels: vec![("route".into(), "/".into())],
        help: "Help.".into(),
        unit: String::new(),
    }
}

fn hist(n: u64) -> Value {
    let mut h = HistogramValue::empty(3, 0.0, -20, 40);
    h.buckets[(n % 40) as usize] = n;
    h.buckets[3] = 7;
    h.count = h.buckets.iter().sum();
    h.sum = n as f64 * 0.001;
    h.max = Some(0.5);
    Value::Histogram(Box::new(h))
}

/// A synthetic host: a service whose values move with `t`, and a JVM that
/// comes and goes.
struct Host {
    infos: Arc<Vec<MetricInfo>>,
    reader: ForeignReader,
    jvm_reader: ForeignReader,
}

impl Host {
    fn new() -> Self {
        Self {
            infos: Arc::new(vec![
                info(MetricKind::Counter, "requests_total"),
                info(MetricKind::GaugeI64, "queue"),
                info(MetricKind::GaugeF64, "load"),
                info(MetricKind::Histogram, "latency_seconds"),
            ]),
            reader: ForeignReader::new(),
            jvm_reader: ForeignReader::new(),
        }
    }

    fn at(&self, t: u64) -> Vec<(Source, Snapshot)> {
        let mut svc = Source::new(Kind::Topdeck, "/dev/shm/topdeck-0/1-2-3.topdeck", "svc");
        svc.pid = Some(42);
        svc.registry = Some("main".into());
        // The writer dies at t = 100.
        svc.liveness = if t < 100 {
            Liveness::Alive
        } else {
            Liveness::Dead
        };
        let mut infos = (*self.infos).clone();
        let mut values = vec![
            Value::Counter(t * t),
            Value::Gauge(if t % 7 == 0 { -(t as i64) } else { 3 }),
            Value::GaugeF64(t as f64 / 3.0),
            hist(t),
        ];
        // A series appears at t = 30.
        if t >= 30 {
            infos.push(info(MetricKind::Counter, "errors_total"));
            values.push(Value::Counter(t / 10));
        }
        let mut out = vec![(svc, self.reader.snapshot(Arc::new(infos), values))];
        // A JVM from t = 20 to t = 80.
        if (20..80).contains(&t) {
            let jvm = Source::new(Kind::Jvm, "/tmp/hsperfdata_app/7", "Billing");
            let infos = Arc::new(vec![info(MetricKind::Counter, "jvm_gc_seconds")]);
            let snap = self
                .jvm_reader
                .snapshot(infos, vec![Value::CounterF64(t as f64 * 0.25)]);
            out.push((jvm, snap));
        }
        out
    }
}

fn record(
    dir: &Path,
    host: &Host,
    times: impl Iterator<Item = u64>,
    options: &Options,
) -> Recorder {
    let mut r = Recorder::open(dir, options.clone()).unwrap();
    for t in times {
        let now = host.at(t);
        r.record(t * S, now.iter().map(|(s, snap)| (s, snap.clone())))
            .unwrap();
    }
    r
}

/// What a moment shows, in a form two moments compare by.
fn shown(sources: &[(Source, Snapshot)]) -> Vec<String> {
    sources
        .iter()
        .map(|(s, snap)| {
            let values: Vec<String> = snap
                .iter()
                .map(|(m, v)| format!("{}={v:?}", m.key()))
                .collect();
            format!(
                "{:?} {} {:?} {:?} {}",
                s.kind,
                s.path.display(),
                s.pid,
                s.liveness,
                values.join(" ")
            )
        })
        .collect()
}

#[test]
fn every_moment_reads_back_as_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new();
    let options = Options {
        key_every: 10,
        ..Options::default()
    };
    drop(record(dir.path(), &host, 1..=120, &options));
    let history = History::open(dir.path()).unwrap();
    for t in [1, 2, 9, 10, 11, 20, 29, 30, 31, 79, 80, 99, 100, 119, 120] {
        let m = history.at(t * S, &|_| true).unwrap().unwrap();
        assert_eq!(m.unix_ns, t * S);
        assert_eq!(shown(&m.sources), shown(&host.at(t)), "at {t}");
        assert!(m.damage.is_none());
        // Between two frames: the one before.
        let between = history.at(t * S + S / 2, &|_| true).unwrap().unwrap();
        assert_eq!(between.unix_ns, t * S);
    }
    assert!(
        history.at(S / 2, &|_| true).unwrap().is_none(),
        "before the first frame"
    );
    // A replay gives every frame in order, the same as at().
    let replayed: Vec<_> = history
        .replay(25 * S, 45 * S, &|_| true)
        .map(Result::unwrap)
        .collect();
    assert_eq!(replayed.len(), 21);
    for m in &replayed {
        assert_eq!(shown(&m.sources), shown(&host.at(m.unix_ns / S)));
    }
    // A filter keeps only the sources asked for.
    let jvm = history
        .at(50 * S, &|s| s.kind == Kind::Jvm)
        .unwrap()
        .unwrap();
    assert_eq!(jvm.sources.len(), 1);
    assert_eq!(jvm.sources[0].0.process, "Billing");
    let summary = history.summary(true).unwrap();
    assert_eq!(summary.frames, 120);
    assert_eq!(
        (summary.from_unix_ns, summary.to_unix_ns),
        (Some(S), Some(120 * S))
    );
    assert_eq!((summary.sources, summary.series), (1, 5));
    let samples: u64 = (1..=120u64)
        .map(|t| host.at(t).iter().map(|(_, s)| s.len() as u64).sum::<u64>())
        .sum();
    assert_eq!(summary.samples, samples);
    assert!(summary.damage.is_empty());
}

#[test]
fn a_damaged_frame_costs_that_frame_only_and_a_torn_tail_nothing_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new();
    let options = Options {
        key_every: 10,
        ..Options::default()
    };
    drop(record(dir.path(), &host, 1..=40, &options));
    let seg = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tdh"))
        .unwrap();
    let clean = std::fs::read(&seg).unwrap();
    // Frame offsets from the headers: 16-byte segment header, 32-byte frame headers.
    let mut offsets = Vec::new();
    let mut at = 16;
    while at < clean.len() {
        offsets.push(at);
        at += 32 + u32::from_le_bytes(clean[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    assert_eq!(offsets.len(), 40);
    // Damage frame 15 (t = 15), a delta frame, in its payload.
    let mut bytes = clean.clone();
    bytes[offsets[14] + 40] ^= 0x10;
    std::fs::write(&seg, &bytes).unwrap();
    let history = History::open(dir.path()).unwrap();
    for t in [14, 16, 17, 19, 20, 21] {
        let m = history.at(t * S, &|_| true).unwrap().unwrap();
        assert_eq!(shown(&m.sources), shown(&host.at(t)), "at {t}");
    }
    let lost = history.at(15 * S, &|_| true).unwrap().unwrap();
    assert!(lost.damage.unwrap().contains("damaged"));
    let after = history.at(16 * S, &|_| true).unwrap().unwrap();
    assert!(after
        .damage
        .unwrap()
        .contains("rebuilt from the next key frame"));
    let summary = history.summary(true).unwrap();
    assert_eq!(summary.damage.len(), 1, "{:?}", summary.damage);
    let replayed: Vec<_> = history
        .replay(13 * S, 22 * S, &|_| true)
        .map(Result::unwrap)
        .collect();
    assert_eq!(replayed.len(), 10);
    for m in replayed.iter().filter(|m| m.unix_ns != 15 * S) {
        assert_eq!(
            shown(&m.sources),
            shown(&host.at(m.unix_ns / S)),
            "replayed {}",
            m.unix_ns / S
        );
    }
    // Cut anywhere in the last frame: everything before it reads.
    for cut in [clean.len() - 1, offsets[39] + 3, offsets[39] + 40] {
        std::fs::write(&seg, &clean[..cut]).unwrap();
        let history = History::open(dir.path()).unwrap();
        let m = history.at(100 * S, &|_| true).unwrap().unwrap();
        assert_eq!(m.unix_ns, 39 * S);
        assert_eq!(shown(&m.sources), shown(&host.at(39)));
        assert!(history.summary(true).unwrap().damage.is_empty());
    }
}

#[test]
fn one_recorder_per_store_and_a_restart_starts_a_new_segment() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new();
    let first = record(dir.path(), &host, 1..=5, &Options::default());
    let busy = Recorder::open(dir.path(), Options::default()).unwrap_err();
    assert!(
        busy.to_string().contains("another `topdeck record`"),
        "{busy}"
    );
    drop(first);
    drop(record(dir.path(), &host, 10..=12, &Options::default()));
    let history = History::open(dir.path()).unwrap();
    let summary = history.summary(true).unwrap();
    assert_eq!((summary.segments, summary.frames), (2, 8));
    assert_eq!(
        shown(&history.at(5 * S, &|_| true).unwrap().unwrap().sources),
        shown(&host.at(5))
    );
    assert_eq!(
        shown(&history.at(11 * S, &|_| true).unwrap().unwrap().sources),
        shown(&host.at(11))
    );
}

#[test]
fn a_segment_cut_before_its_header_is_never_listed_and_the_next_recorder_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new();
    drop(record(dir.path(), &host, 1..=3, &Options::default()));
    // What a recorder killed between creating a segment and writing its
    // header leaves: a few bytes under the name segments have until then.
    let left = dir.path().join(".00000000000000000009.tdh.new");
    std::fs::write(&left, &b"TDHIST"[..]).unwrap();
    let summary = History::open(dir.path()).unwrap().summary(true).unwrap();
    assert_eq!((summary.segments, summary.frames), (1, 3));
    assert!(summary.damage.is_empty(), "{:?}", summary.damage);
    drop(record(dir.path(), &host, 10..=11, &Options::default()));
    assert!(!left.exists(), "the next recorder left {left:?}");
    // A segment file shorter than its header (not one a recorder leaves
    // now) is damage, said as such, and the rest still reads.
    std::fs::write(dir.path().join("00000000000000000020.tdh"), &b"TD"[..]).unwrap();
    let summary = History::open(dir.path()).unwrap().summary(true).unwrap();
    assert_eq!(summary.frames, 5);
    assert_eq!(summary.damage.len(), 1);
    assert!(
        summary.damage[0].contains("shorter than a segment's 16-byte header"),
        "{:?}",
        summary.damage
    );
}

#[test]
fn retention_removes_the_oldest_segments_first() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new();
    // Tiny segments: a new one each key frame.
    let options = Options {
        key_every: 5,
        segment_bytes: 1,
        max_size: 6_000,
        ..Options::default()
    };
    let r = record(dir.path(), &host, 1..=200, &options);
    assert!(r.stats().removed_segments > 0);
    let history = History::open(dir.path()).unwrap();
    let summary = history.summary(true).unwrap();
    assert!(
        summary.bytes <= 6_000 + 2_000,
        "{} bytes kept",
        summary.bytes
    );
    assert_eq!(summary.to_unix_ns, Some(200 * S), "the newest kept");
    assert!(summary.from_unix_ns.unwrap() > S, "the oldest gone");
    // By age: everything older than a second before the last frame.
    let aged = Options {
        retain: std::time::Duration::from_secs(1),
        ..options
    };
    let dir2 = tempfile::tempdir().unwrap();
    drop(record(dir2.path(), &host, 1..=20, &aged));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut r = Recorder::open(dir2.path(), aged).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let h = host.at(21);
    r.record(now + S, h.iter().map(|(s, n)| (s, n.clone())))
        .unwrap();
    let left = History::open(dir2.path()).unwrap().summary(true).unwrap();
    assert_eq!(left.frames, 1, "only the new segment is left");
}

#[test]
fn a_store_others_may_write_is_refused_and_an_empty_one_says_so() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Recorder::open(dir.path(), Options::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("others may write it"), "{e}");
    let e = History::open(&dir.path().join("none"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nothing is recorded"), "{e}");
    std::fs::write(
        dir.path().join("00000000000000000001.tdh"),
        b"something else entirely",
    )
    .unwrap();
    let summary = History::open(dir.path()).unwrap().summary(false).unwrap();
    assert!(
        summary.damage[0].contains("not a topdeck history segment"),
        "{:?}",
        summary.damage
    );
}
