// SPDX-License-Identifier: Apache-2.0
//! The prommp reader against the real prometheus_client 0.26.0 (installed by
//! scripts/reach/prommp.sh): worker processes write every kind of metric and
//! every gauge mode, some exit, and topdeck's merge must print exactly what
//! the library's own `MultiProcessCollector` prints. Then hostile files.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use topdeck_portholes::prommp::{
    file_of, parse, read_dir, read_dir_with, DeadWorkers, DirError, Kind, ParseError,
    MAX_BYTES_PER_DIR, MAX_KEYS_PER_DIR,
};
use topdeck_procfs::budget::MAX_FILES_PER_DIR;

const WORKER: &str = r#"
import os, sys, time
from prometheus_client import Counter, Gauge, Histogram, Summary

n = int(sys.argv[1])
reqs = Counter("http_requests", "Requests served,\nby route \\ code", ["route", "code"])
reqs.labels("/api", "200").inc(n + 1)
reqs.labels('/we"ird\\path\n', "500").inc(0.25 * n)
reqs.labels("/caf\u00e9", "200").inc()
Counter("jobs", "Jobs done").inc(10 ** n)
# Enough keys that the counter file outgrows 64 KiB and doubles, twice.
many = Counter("items", "Items by id", ["id"])
for i in range(3000):
    many.labels(str(i)).inc(i % (n + 2))
for mode in ("all", "liveall", "min", "livemin", "max", "livemax",
             "sum", "livesum", "mostrecent", "livemostrecent"):
    g = Gauge("g_" + mode, "A gauge in mode " + mode, ["shard"], multiprocess_mode=mode)
    g.labels("a").set(n * 1.5 - 2)
    time.sleep(0.002)
    g.labels("b").set(1e-5 * (n + 1))
h = Histogram("latency_seconds", "Latency", ["route"],
              buckets=(0.005, 0.1, 1, 2.5, 1234567, float("inf")))
for v in (0.001, 0.05 * n, 2, 3e6):
    h.labels("/api").observe(v)
h.labels("/slow").observe(n)
Histogram("sizes", "Sizes").observe(100 * n)
s = Summary("payload_bytes", "Payload", ["kind"])
s.labels("json").observe(512 + n)
s.labels("proto").observe(0.1)
if sys.argv[2] == "stay":
    print("ready", flush=True)
    sys.stdin.read()
"#;

const READER: &str = r#"
import sys
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
for pid in sys.argv[2:]:
    mark_process_dead(int(pid), sys.argv[1])
registry = CollectorRegistry()
MultiProcessCollector(registry, path=sys.argv[1])
sys.stdout.write(generate_latest(registry).decode("utf-8"))
"#;

/// The venv's python, or `None` (with the reason printed) when it is
/// missing outside CI; in CI a missing producer fails the test.
fn python() -> Option<PathBuf> {
    let py = std::env::var_os("TOPDECK_PROMMP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
                });
            cache.join("topdeck/prommp/venv-prometheus_client-0.26.0/bin/python")
        });
    let ok = Command::new(&py)
        .args([
            "-c",
            "import importlib.metadata as m; assert m.version('prometheus_client') == '0.26.0'",
        ])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    let why = format!(
        "no python with prometheus_client 0.26.0 at {}",
        py.display()
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}; run scripts/reach/prommp.sh"
    );
    eprintln!("SKIPPED: {why}; run scripts/reach/prommp.sh");
    None
}

fn worker(py: &Path, dir: &Path, script: &Path, n: u32, stay: bool) -> Child {
    Command::new(py)
        .arg(script)
        .arg(n.to_string())
        .arg(if stay { "stay" } else { "exit" })
        .env("PROMETHEUS_MULTIPROC_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a python worker")
}

fn upstream(py: &Path, reader: &Path, dir: &Path, mark_dead: &[u32]) -> String {
    let out = Command::new(py)
        .arg(reader)
        .arg(dir)
        .args(mark_dead.iter().map(u32::to_string))
        .output()
        .expect("run the python reader");
    assert!(
        out.status.success(),
        "python reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 exposition")
}

fn assert_same_lines(ours: &str, theirs: &str, what: &str) {
    let (a, b): (Vec<_>, Vec<_>) = (ours.lines().collect(), theirs.lines().collect());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(
            x,
            y,
            "{what}: line {} differs\n--- topdeck\n{ours}\n--- prometheus_client\n{theirs}",
            i + 1
        );
    }
    assert_eq!(
        a.len(),
        b.len(),
        "{what}: line counts differ\n--- topdeck\n{ours}\n--- prometheus_client\n{theirs}"
    );
    assert_eq!(ours, theirs, "{what}: same lines, different bytes");
}

#[test]
fn merge_equals_prometheus_client_multiprocess_collector_with_live_and_dead_workers() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mp");
    std::fs::create_dir(&dir).unwrap();
    let (script, reader) = (tmp.path().join("worker.py"), tmp.path().join("reader.py"));
    std::fs::write(&script, WORKER).unwrap();
    std::fs::write(&reader, READER).unwrap();

    let mut dead = Vec::new();
    for n in 0..3 {
        let mut child = worker(&py, &dir, &script, n, false);
        dead.push(child.id());
        assert!(child.wait().unwrap().success(), "worker {n} failed");
    }
    let mut alive: Vec<Child> = (3..5)
        .map(|n| worker(&py, &dir, &script, n, true))
        .collect();
    for child in &mut alive {
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n", "a staying worker did not get ready");
    }

    // Nobody called mark_process_dead: upstream merges every file.
    let keep_all = read_dir_with(&dir, DeadWorkers::KeepAll).unwrap();
    assert!(keep_all.errors.is_empty(), "{:?}", keep_all.errors);
    // counter, histogram, summary and 10 gauge modes per worker.
    assert_eq!(keep_all.files.len(), 5 * 13, "{:?}", keep_all.files);
    for f in &keep_all.files {
        assert_eq!(f.alive, !dead.contains(&f.pid), "{}", f.path.display());
        assert!(f.merged && f.entries > 0);
        if f.kind == Kind::Counter {
            let len = std::fs::metadata(&f.path).unwrap().len();
            assert!(len >= 256 << 10, "{}: {len} bytes", f.path.display());
        }
    }
    assert_same_lines(
        &keep_all.to_text(),
        &upstream(&py, &reader, &dir, &[]),
        "every file merged",
    );

    // topdeck drops the dead workers' live* gauges by itself; upstream does
    // once mark_process_dead has deleted their files.
    let ours = read_dir(&dir).unwrap();
    let dropped: Vec<_> = ours.files.iter().filter(|f| !f.merged).collect();
    assert_eq!(dropped.len(), 3 * 5, "{dropped:?}");
    assert!(dropped
        .iter()
        .all(|f| !f.alive && matches!(f.kind, Kind::Gauge(m) if m.is_live())));
    let marked = upstream(&py, &reader, &dir, &dead);
    assert_ne!(
        marked,
        keep_all.to_text(),
        "the dead workers' live gauges changed nothing"
    );
    assert_same_lines(
        &ours.to_text(),
        &marked,
        "dead workers' live gauges dropped",
    );
    assert_same_lines(
        &read_dir(&dir).unwrap().to_text(),
        &marked,
        "after mark_process_dead",
    );

    for mut child in alive {
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
    }
}

const GOOD: &[u8] = br#"["jobs", "jobs_total", {"q": "x"}, "Jobs"]"#;

fn good() -> Vec<u8> {
    file_of(&[
        (GOOD, 2.0, 0.0),
        (br#"["jobs", "jobs_total", {"q": "y"}, "Jobs"]"#, 3.0, 0.0),
    ])
}

#[test]
fn every_truncation_is_an_error_and_the_whole_file_parses() {
    let file = good();
    assert_eq!(parse(&file).unwrap().len(), 2);
    for len in 0..file.len() {
        assert!(parse(&file[..len]).is_err(), "{len} bytes parsed");
    }
    // Truncated and `used` rewritten to match: the cut entry runs past it,
    // unless the cut falls between the two entries.
    let boundary = file_of(&[(GOOD, 2.0, 0.0)]).len();
    for len in 9..file.len() {
        let mut cut = file[..len].to_vec();
        cut[..4].copy_from_slice(&(len as i32).to_ne_bytes());
        let got = parse(&cut);
        if len == boundary {
            assert_eq!(got.map(|e| e.len()), Ok(1));
        } else {
            assert!(
                matches!(got, Err(ParseError::EntryPastEnd { .. })),
                "{len}: {got:?}"
            );
        }
    }
}

#[test]
fn used_zero_is_a_new_empty_file_and_bad_used_is_an_error() {
    let mut file = good();
    file[..4].copy_from_slice(&0i32.to_ne_bytes());
    assert_eq!(parse(&file), Ok(vec![]));
    for used in [-1, i32::MIN, 1, 7] {
        file[..4].copy_from_slice(&used.to_ne_bytes());
        assert_eq!(parse(&file), Err(ParseError::BadUsed { used }));
    }
    file[..4].copy_from_slice(&i32::MAX.to_ne_bytes());
    assert!(matches!(parse(&file), Err(ParseError::UsedPastEnd { .. })));
}

#[test]
fn key_lengths_negative_or_past_the_end_are_errors() {
    for key_len in [-1, -8, i32::MIN, 1000, i32::MAX] {
        let mut file = good();
        file[8..12].copy_from_slice(&key_len.to_ne_bytes());
        let got = parse(&file);
        assert!(
            matches!(got, Err(ParseError::EntryPastEnd { at: 8, .. })),
            "{key_len}: {got:?}"
        );
    }
}

#[test]
fn keys_that_are_not_utf8_json_of_four_strings_are_errors() {
    let bad: [&[u8]; 9] = [
        b"\xff\xfe[]",
        b"not json",
        br#"["jobs", "jobs_total", {}]"#,
        br#"["jobs", "jobs_total", {}, "h", 5]"#,
        br#"["jobs", "jobs_total", {"q": 1}, "h"]"#,
        br#"["jobs", "jobs_total", [], "h"]"#,
        br#"[1, "jobs_total", {}, "h"]"#,
        br#"["", "jobs_total", {}, "h"]"#,
        br#"["jobs", "\ud800", {}, "h"]"#,
    ];
    for key in bad {
        let got = parse(&file_of(&[(GOOD, 1.0, 0.0), (key, 1.0, 0.0)]));
        assert!(
            matches!(got, Err(ParseError::BadKey { .. })),
            "{}: {got:?}",
            String::from_utf8_lossy(key)
        );
    }
}

#[test]
fn a_corrupt_or_misnamed_file_is_reported_and_the_good_ones_still_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let put = |name: &str, bytes: &[u8]| {
        std::fs::File::create(tmp.path().join(name))
            .unwrap()
            .write_all(bytes)
            .unwrap()
    };
    put("counter_1.db", &good());
    put("counter_2.db", &good());
    let mut truncated = good();
    truncated.truncate(30);
    put("counter_3.db", &truncated);
    put("counter.db", &good());
    put("counter_x1.db", &good());
    put("gauge_weird_4.db", &good());
    put("metrics_5.db", &good());
    put("huge_used.db", &i32::MAX.to_ne_bytes());
    let mut claims_huge = good();
    claims_huge[..4].copy_from_slice(&i32::MAX.to_ne_bytes());
    put("counter_6.db", &claims_huge);
    put(".counter_7.db", b"hidden: python's glob skips it too");
    put("notes.txt", b"not a .db file");
    std::fs::create_dir(tmp.path().join("counter_8.db")).unwrap();
    std::os::unix::fs::symlink(
        tmp.path().join("counter_1.db"),
        tmp.path().join("counter_9.db"),
    )
    .unwrap();

    let merged = read_dir(tmp.path()).unwrap();
    assert_eq!(
        merged.to_text(),
        "# HELP jobs_total Jobs\n# TYPE jobs_total counter\njobs_total{q=\"x\"} 4.0\njobs_total{q=\"y\"} 6.0\n"
    );
    let mut bad: Vec<_> = merged
        .errors
        .iter()
        .map(|e| e.path.file_name().unwrap().to_str().unwrap())
        .collect();
    bad.sort();
    assert_eq!(
        bad,
        [
            "counter.db",
            "counter_3.db",
            "counter_6.db",
            "counter_8.db",
            "counter_9.db",
            "counter_x1.db",
            "gauge_weird_4.db",
            "huge_used.db",
            "metrics_5.db"
        ]
    );
    let too_big = merged
        .errors
        .iter()
        .find(|e| e.path.ends_with("counter_6.db"))
        .unwrap();
    assert!(too_big.to_string().contains("256 MiB"), "{too_big}");
    assert_eq!(merged.files.len(), 2);
}

#[test]
fn a_bucket_whose_bound_python_would_not_merge_is_left_out_and_noted() {
    let tmp = tempfile::tempdir().unwrap();
    let file = file_of(&[
        (br#"["h", "h_bucket", {"le": "nan"}, "h"]"#, 1.0, 0.0),
        (br#"["h", "h_bucket", {"le": "1_0"}, "h"]"#, 1.0, 0.0),
        (br#"["h", "h_bucket", {"le": "+Inf"}, "h"]"#, 2.0, 0.0),
    ]);
    std::fs::write(tmp.path().join("histogram_1.db"), file).unwrap();
    let merged = read_dir(tmp.path()).unwrap();
    assert_eq!(
        merged.to_text(),
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2.0\nh_count 2.0\n"
    );
    let notes: Vec<String> = merged.errors.iter().map(ToString::to_string).collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].contains(r#"le="nan""#) && notes[1].contains(r#"le="1_0""#),
        "{notes:?}"
    );
}

/// `read_dir` of `dir`, which must be left out whole: the error, once,
/// naming the directory.
fn left_out_whole(dir: &Path) -> String {
    match read_dir(dir) {
        Err(e @ DirError::TooLarge { .. }) => {
            let text = e.to_string();
            assert_eq!(e.path(), dir);
            assert_eq!(
                text.matches(&dir.display().to_string()).count(),
                1,
                "{text}"
            );
            text
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_directory_of_more_files_than_the_budget_is_left_out_whole_before_any_is_opened() {
    let tmp = tempfile::tempdir().unwrap();
    for n in 0..=MAX_FILES_PER_DIR {
        std::fs::File::create(tmp.path().join(format!("counter_{n}.db"))).unwrap();
    }
    // A FIFO among them would be an error if it were opened.
    let fifo = std::ffi::CString::new(
        tmp.path()
            .join("counter_99999.db")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let text = left_out_whole(tmp.path());
    assert!(
        text.contains(&format!("{} *.db files", MAX_FILES_PER_DIR + 2)),
        "{text}"
    );
    assert!(!text.contains("regular"), "{text}");
}

#[test]
fn a_directory_of_more_distinct_keys_than_the_budget_is_left_out_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (0..=MAX_KEYS_PER_DIR)
        .map(|i| format!(r#"["k", "k_total", {{"i": "{i}"}}, "K"]"#))
        .collect();
    let entries: Vec<(&[u8], f64, f64)> = keys.iter().map(|k| (k.as_bytes(), 1.0, 0.0)).collect();
    std::fs::write(tmp.path().join("counter_1.db"), file_of(&entries)).unwrap();
    let text = left_out_whole(tmp.path());
    assert!(
        text.contains(&format!("{MAX_KEYS_PER_DIR} distinct keys")),
        "{text}"
    );
    // One key fewer is read whole.
    std::fs::write(tmp.path().join("counter_1.db"), file_of(&entries[1..])).unwrap();
    let merged = read_dir(tmp.path()).unwrap();
    assert_eq!(merged.files[0].entries, MAX_KEYS_PER_DIR);
}

#[test]
fn a_directory_of_more_bytes_than_the_budget_is_left_out_whole_without_copying_them() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("counter_1.db"), good()).unwrap();
    // Sparse: the size is what counts, and nothing past the first bytes
    // is copied once the header says how much is in use.
    let big = MAX_BYTES_PER_DIR + 4096;
    let mut header = good();
    header[..4].copy_from_slice(&(big as i32).to_ne_bytes());
    let path = tmp.path().join("counter_2.db");
    std::fs::write(&path, &header).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(big)
        .unwrap();
    let text = left_out_whole(tmp.path());
    assert!(
        text.contains(&format!("{} MiB", MAX_BYTES_PER_DIR >> 20)),
        "{text}"
    );
    // A header claiming as much over a short file is that file's error only.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(64)
        .unwrap();
    let merged = read_dir(tmp.path()).unwrap();
    assert_eq!(merged.files.len(), 1);
    let [bad] = merged.errors.as_slice() else {
        panic!("{:?}", merged.errors)
    };
    assert!(bad.path.ends_with("counter_2.db"), "{bad}");
    // What happened and what the reader did; no advice to change the
    // directory, which is its owner's.
    assert!(bad.why.contains("left it out"), "{bad}");
    assert!(!bad.why.contains("move"), "{bad}");
}

#[test]
fn bad_files_past_the_first_few_are_counted_in_one_line() {
    use topdeck_procfs::budget::MAX_ERRORS_PER_DIR;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("counter_1.db"), good()).unwrap();
    let bad = MAX_ERRORS_PER_DIR + 30;
    for n in 0..bad {
        std::fs::write(tmp.path().join(format!("counter_{}.db", n + 2)), b"bad").unwrap();
    }
    let merged = read_dir(tmp.path()).unwrap();
    assert_eq!(merged.files.len(), 1);
    assert_eq!(
        merged.errors.len(),
        MAX_ERRORS_PER_DIR + 1,
        "{:?}",
        merged.errors
    );
    let last = &merged.errors[MAX_ERRORS_PER_DIR];
    assert_eq!(last.path, tmp.path());
    assert!(
        last.why.contains("30 more files could not be read"),
        "{last}"
    );
}

#[test]
fn a_missing_directory_is_an_error_that_names_it() {
    let err = read_dir(Path::new("/nonexistent/prommp")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/prommp"), "{err}");
}

#[test]
fn float_to_go_string_matches_prometheus_client_on_edge_and_random_doubles() {
    use topdeck_portholes::prommp::float_to_go_string;
    let Some(py) = python() else { return };
    let mut values: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.1 + 0.2,
        1e-4,
        1e-5,
        -1e-5,
        2.5e-5,
        123456.0,
        999999.9,
        1234567.0,
        -1234567.0,
        12345678.9,
        1e15,
        1234567890123456.0,
        1e16,
        1.5e16,
        1e22,
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e7,
        1e100,
        3e6,
    ];
    // Deterministic doubles of every exponent (xorshift bit patterns).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        values.push(f64::from_bits(x));
    }
    let bits: Vec<String> = values.iter().map(|v| v.to_bits().to_string()).collect();
    let out = Command::new(&py)
        .args([
            "-c",
            "import struct, sys\nfrom prometheus_client.utils import floatToGoString\nfor b in sys.stdin.read().split():\n    print(floatToGoString(struct.unpack('<d', struct.pack('<Q', int(b)))[0]))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(bits.join("\n").as_bytes())?;
            child.wait_with_output()
        })
        .expect("run python");
    assert!(out.status.success());
    let theirs = String::from_utf8(out.stdout).unwrap();
    assert_eq!(theirs.lines().count(), values.len());
    for (v, want) in values.iter().zip(theirs.lines()) {
        assert_eq!(float_to_go_string(*v), want, "bits {:#x}", v.to_bits());
    }
}

#[test]
fn odd_but_valid_files_merge_exactly_as_prometheus_client_merges_them() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let reader = tmp.path().join("reader.py");
    std::fs::write(&reader, READER).unwrap();
    let dir = tmp.path().join("mp");
    std::fs::create_dir(&dir).unwrap();
    let put = |name: &str, entries: &[(&str, f64, f64)]| {
        let e: Vec<(&[u8], f64, f64)> = entries
            .iter()
            .map(|(k, v, t)| (k.as_bytes(), *v, *t))
            .collect();
        std::fs::write(dir.join(name), file_of(&e)).unwrap();
    };
    // mostrecent: timestamp 0 or below never wins; the newest does.
    put(
        "gauge_mostrecent_100.db",
        &[
            (r#"["mr", "mr", {"s": "a"}, "h"]"#, 5.0, 0.0),
            (r#"["mr", "mr", {"s": "b"}, "h"]"#, 7.0, 10.0),
        ],
    );
    put(
        "gauge_mostrecent_101.db",
        &[
            (r#"["mr", "mr", {"s": "b"}, "h"]"#, 8.0, 5.0),
            (r#"["mr", "mr", {"s": "c"}, "h"]"#, f64::NAN, -1.0),
        ],
    );
    // A user label called pid: the worker's pid wins in `all`, and `min`
    // drops both.
    put(
        "gauge_all_100.db",
        &[(r#"["ga", "ga", {"pid": "user"}, "h"]"#, 1.0, 0.0)],
    );
    put(
        "gauge_min_100.db",
        &[(r#"["gm", "gm", {"pid": "user"}, "h"]"#, -0.0, 0.0)],
    );
    put(
        "gauge_min_101.db",
        &[(r#"["gm", "gm", {}, "h"]"#, 0.0, 0.0)],
    );
    // One family written in two modes: the last file read decides.
    put(
        "gauge_max_100.db",
        &[(r#"["mix", "mix", {}, "h"]"#, 3.0, 0.0)],
    );
    put(
        "gauge_sum_101.db",
        &[(r#"["mix", "mix", {}, "h"]"#, 4.0, 0.0)],
    );
    // Buckets spelled differently for the same bound, and a label set with
    // buckets but no _sum.
    put(
        "histogram_100.db",
        &[
            (r#"["h", "h_bucket", {"le": "1", "r": "x"}, "h"]"#, 1.0, 0.0),
            (
                r#"["h", "h_bucket", {"le": "1.0", "r": "x"}, "h"]"#,
                2.0,
                0.0,
            ),
            (
                r#"["h", "h_bucket", {"le": " 2 ", "r": "x"}, "h"]"#,
                3.0,
                0.0,
            ),
            (
                r#"["h", "h_bucket", {"le": "1e3", "r": "x"}, "h"]"#,
                0.5,
                0.0,
            ),
            (
                r#"["h", "h_bucket", {"le": "+Inf", "r": "x"}, "h"]"#,
                0.0,
                0.0,
            ),
            // -0 and 0 are one bound, as `==` and Python's float keys say.
            (
                r#"["h", "h_bucket", {"le": "-0.0", "r": "z"}, "h"]"#,
                1.0,
                0.0,
            ),
            (r#"["h", "h_bucket", {"le": "0", "r": "z"}, "h"]"#, 2.0, 0.0),
            (
                r#"["h", "h_bucket", {"le": "+Inf", "r": "z"}, "h"]"#,
                4.0,
                0.0,
            ),
            (r#"["h", "h_sum", {"r": "y"}, "h"]"#, 9.0, 0.0),
            (
                r#"["h", "h_bucket", {"le": "-Inf", "r": "y"}, "h"]"#,
                1.0,
                0.0,
            ),
            (
                r#"["h", "h_bucket", {"le": "12345678", "r": "y"}, "h"]"#,
                1.0,
                0.0,
            ),
        ],
    );
    // Names that need escaping, OpenMetrics-only samples, odd help.
    put(
        "counter_100.db",
        &[
            (
                r#"["bad-name.x", "bad-name.x_total", {"1abc": "v\u00e9", "ok": "a\"b"}, "a\\b\nc"]"#,
                1.0,
                0.0,
            ),
            (r#"["c2", "c2_total", {}, "two"]"#, 2.0, 0.0),
            (r#"["c2", "c2_created", {}, "two"]"#, 1700000000.5, 0.0),
            (r#"["c2", "c2_gsum", {}, "two"]"#, 1.0, 0.0),
        ],
    );
    put(
        "counter_101.db",
        &[(r#"["c2", "c2_created", {}, "other help"]"#, 1.0, 0.0)],
    );
    put(
        "summary_100.db",
        &[
            (r#"["s", "s_count", {}, "h"]"#, 1e22, 0.0),
            (r#"["s", "s_sum", {}, "h"]"#, -1e-7, 0.0),
        ],
    );

    let ours = read_dir_with(&dir, DeadWorkers::KeepAll).unwrap();
    assert!(ours.errors.is_empty(), "{:?}", ours.errors);
    assert_same_lines(
        &ours.to_text(),
        &upstream(&py, &reader, &dir, &[]),
        "odd files",
    );
}
