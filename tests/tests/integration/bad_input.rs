// SPDX-License-Identifier: Apache-2.0
//! Damaged files, hostile namespace directories and misuse of the writer
//! API: each gives its own error kind with a message naming the file, never
//! a panic or a crash, and the good registries beside it keep being listed
//! and shown.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tempfile::TempDir;
use topdeck::{ErrorKind, Liveness, Namespace, Registry, RegistryReader, Snapshot, Value};
use topdeck_format::layout::*;
use topdeck_tests::{
    assert_error, desc_at, describe, get_u32, get_u64, is_root, namespace_dir, plant, put_u32,
    put_u64, run_measured, skip, template, topdeck, topdeck_json, Measured, Rng, Sparse, Writer,
    T_COUNTER, T_GAUGE, T_HISTOGRAM,
};

use super::{
    counter, listed, reader, reader_bin, reports_error_for, shown_metric, snapshot, writer,
};

/// How a bad file must show up in a listing.
#[derive(Debug, Clone, Copy)]
enum Seen {
    /// Its header is bad: it is an error of this kind in the listing.
    Error(ErrorKind),
    /// Its header is sound: it is listed (dead); reading its metrics fails.
    Broken,
    /// A readable registry: listed with this liveness, and shown.
    Readable(Liveness),
}

/// A namespace directory with a good, live writer in it.
struct Scene {
    ns: TempDir,
    good: Writer,
}

impl Scene {
    fn new() -> Self {
        let ns = namespace_dir();
        let good = writer(ns.path(), &["idle"]);
        Self { ns, good }
    }

    fn dir(&self) -> &Path {
        self.ns.path()
    }

    /// The template file with `patch` applied, planted in the directory.
    fn plant_patched(&self, patch: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
        let mut bytes = template().bytes.clone();
        patch(&mut bytes);
        plant(self.dir(), bytes)
    }

    /// The good registry is still listed, readable and shown by the library
    /// and by `topdeck`, and each bad file is reported as `seen`.
    fn assert_survives(&self, bad: &[(&Path, Seen)]) {
        let listing = Namespace::at(self.dir()).list();
        let good = listing
            .entries
            .iter()
            .find(|e| e.path == self.good.path)
            .unwrap_or_else(|| panic!("the good registry is not listed: {listing:?}"));
        assert_eq!(
            (good.pid, good.liveness),
            (self.good.pid(), Liveness::Alive)
        );
        assert_eq!(good.process_name, "td-writer");
        assert_eq!(
            counter(&snapshot(&good.path), "good_total", &[("kind", "good")]),
            42
        );
        for &(path, seen) in bad {
            let as_error = listing
                .errors
                .iter()
                .find(|e| e.to_string().contains(&path.display().to_string()));
            let as_entry = listing.entries.iter().find(|e| e.path == path);
            match seen {
                Seen::Error(kind) => {
                    let e = as_error.unwrap_or_else(|| {
                        panic!(
                            "{} is not reported in the listing: {listing:?}",
                            path.display()
                        )
                    });
                    assert_eq!(e.kind(), kind, "{e}");
                    assert!(
                        as_entry.is_none(),
                        "{} is listed as a registry",
                        path.display()
                    );
                }
                Seen::Broken | Seen::Readable(_) => {
                    let e = as_entry
                        .unwrap_or_else(|| panic!("{} is not listed: {listing:?}", path.display()));
                    let want = if let Seen::Readable(l) = seen {
                        l
                    } else {
                        Liveness::Dead
                    };
                    assert_eq!(e.liveness, want, "{}", path.display());
                }
            }
        }

        let ls = topdeck_json(self.dir(), &["ls", "--json"]);
        let entry = listed(&ls, &self.good.path)
            .unwrap_or_else(|| panic!("`topdeck ls --json` does not list the good registry: {ls}"));
        assert_eq!(entry["state"], "alive", "{ls}");
        for &(path, seen) in bad {
            match seen {
                Seen::Error(_) => assert!(
                    reports_error_for(&ls, path),
                    "`topdeck ls --json` does not report {}: {ls}",
                    path.display()
                ),
                Seen::Broken => {
                    assert_eq!(
                        listed(&ls, path).map(|e| &e["state"]),
                        Some(&"dead".into()),
                        "{ls}"
                    );
                    // Showing it fails cleanly, naming the file.
                    let out = topdeck(self.dir(), &["show", path.to_str().unwrap(), "--json"]);
                    assert!(
                        !out.status.success(),
                        "`topdeck show` of {} succeeded: {}",
                        path.display(),
                        out.stdout
                    );
                    assert!(
                        !out.stderr.contains("panicked"),
                        "`topdeck show` panicked: {}",
                        out.stderr
                    );
                    assert!(
                        out.stderr.contains(&path.display().to_string()),
                        "`topdeck show` does not name the file: {}",
                        out.stderr
                    );
                }
                Seen::Readable(l) => {
                    let state = if l == Liveness::Alive {
                        "alive"
                    } else {
                        "dead"
                    };
                    assert_eq!(
                        listed(&ls, path).map(|e| &e["state"]),
                        Some(&state.into()),
                        "{ls}"
                    );
                    let show =
                        topdeck_json(self.dir(), &["show", path.to_str().unwrap(), "--json"]);
                    assert_eq!(show["path"].as_str(), path.to_str(), "{show}");
                }
            }
        }
        let show = topdeck_json(
            self.dir(),
            &["show", &self.good.pid().to_string(), "--json"],
        );
        assert_eq!(show["path"].as_str(), self.good.path.to_str(), "{show}");
        assert_eq!(shown_metric(&show, "good_total")["value"], 42, "{show}");
    }
}

/// Opening `path` fails with `kind`, naming it.
fn assert_open_fails(path: &Path, kind: ErrorKind) {
    let err = RegistryReader::open(path).expect_err("opening a bad file succeeded");
    assert_error(&err, kind, path);
}

/// Opening `path` works, and its first snapshot fails with `kind`, naming it.
fn assert_snapshot_fails(path: &Path, kind: ErrorKind) -> String {
    let mut r = RegistryReader::open(path).unwrap_or_else(|e| panic!("{e}"));
    let err = r
        .snapshot()
        .expect_err("a snapshot of a bad file succeeded");
    assert_error(&err, kind, path);
    err.to_string()
}

#[test]
fn a_truncated_file_is_corrupt() {
    let s = Scene::new();
    let t = template();
    let cuts = [
        0,
        4,
        100,
        HEADER_LEN,
        t.header.desc_offset as usize + 10,
        t.bytes.len() - 1,
    ];
    let bad: Vec<PathBuf> = cuts
        .iter()
        .map(|&n| plant(s.dir(), t.bytes[..n].to_vec()))
        .collect();
    assert_all_corrupt(&s, &bad);
}

#[test]
fn a_wrong_magic_is_corrupt() {
    let s = Scene::new();
    let bad = s.plant_patched(|b| b[..8].copy_from_slice(b"TOPDECKX"));
    let err = RegistryReader::open(&bad).unwrap_err();
    assert_error(&err, ErrorKind::Corrupt, &bad);
    assert!(
        err.to_string().contains("not a topdeck metrics file"),
        "{err}"
    );
    s.assert_survives(&[(&bad, Seen::Error(ErrorKind::Corrupt))]);
}

#[test]
fn a_future_major_version_is_unsupported_and_a_future_minor_is_read() {
    let s = Scene::new();
    let major = s.plant_patched(|b| put_u32(b, VERSION_OFFSET, 2 << 16));
    assert_open_fails(&major, ErrorKind::UnsupportedVersion);
    let minor = s.plant_patched(|b| put_u32(b, VERSION_OFFSET, 1 << 16 | 9));
    let snap = snapshot(&minor);
    assert_eq!(counter(&snap, "requests_total", &[("route", "/")]), 5);
    s.assert_survives(&[
        (&major, Seen::Error(ErrorKind::UnsupportedVersion)),
        (&minor, Seen::Readable(Liveness::Dead)),
    ]);
}

#[test]
fn random_bytes_are_corrupt() {
    let s = Scene::new();
    let mut bad = Vec::new();
    for seed in 1..=8u64 {
        let mut rng = Rng(seed);
        let len = (rng.next_u64() % 40_000) as usize;
        bad.push(plant(s.dir(), rng.bytes(len)));
        // Right magic and version, random everything else.
        let mut b = rng.bytes(HEADER_LEN + len);
        b[..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, VERSION_OFFSET, VERSION);
        bad.push(plant(s.dir(), b));
    }
    assert_all_corrupt(&s, &bad);
}

#[test]
fn a_descriptor_table_outside_the_file_is_corrupt() {
    let s = Scene::new();
    let len = template().bytes.len() as u64;
    let past = s.plant_patched(|b| put_u64(b, DESC_OFFSET_OFFSET, len));
    let huge = s.plant_patched(|b| put_u64(b, DESC_OFFSET_OFFSET, u64::MAX - 7));
    for p in [&past, &huge] {
        assert_open_fails(p, ErrorKind::Corrupt);
    }
    s.assert_survives(&[
        (&past, Seen::Error(ErrorKind::Corrupt)),
        (&huge, Seen::Error(ErrorKind::Corrupt)),
    ]);
}

/// Peak resident set a reader may reach on a hostile file: a few MiB of
/// its own, and nothing of what the file claims. The claims below are
/// 256 MiB and more, so believing them cannot stay under it.
const READER_RSS_KIB: u64 = 32 << 10;

/// `td-reader hold` on `path` in a child process: it opens and snapshots,
/// and on success snapshots once more.
fn hold_measured(path: &Path) -> Measured {
    let mut cmd = std::process::Command::new(reader_bin());
    // Symbolizing a backtrace for the error would cost more than the read.
    cmd.arg("hold")
        .arg(path)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0");
    let m = run_measured(cmd, "snapshot\n");
    assert!(
        !m.stderr.contains("panicked"),
        "the reader panicked: {}",
        m.stderr
    );
    assert!(
        m.peak_rss_kib < READER_RSS_KIB,
        "reading {} took {} KiB at its peak: the reader believed a claim\n{}{}",
        path.display(),
        m.peak_rss_kib,
        m.stdout,
        m.stderr
    );
    m
}

#[test]
fn a_header_claiming_a_gigabyte_descriptor_table_is_refused_at_open() {
    let s = Scene::new();
    // 2^24 slots of 64 bytes: 1 GiB of table, one page of data.
    let gib = Sparse::default().plant(s.dir());
    let err = RegistryReader::open(&gib).unwrap_err();
    assert_error(&err, ErrorKind::Corrupt, &gib);
    assert!(
        err.to_string().contains("desc_capacity is 16777216"),
        "{err}"
    );
    let m = hold_measured(&gib);
    assert!(!m.status.success(), "{}", m.stdout);
    assert!(m.stderr.contains("desc_capacity"), "{}", m.stderr);
    s.assert_survives(&[(&gib, Seen::Error(ErrorKind::Corrupt))]);
}

#[test]
fn a_table_of_holes_within_the_limits_is_refused_after_one_chunk() {
    let s = Scene::new();
    // The largest table the limits allow, 256 MiB, all of it published:
    // descriptor 0 is valid, the next 299 look valid, the rest are holes.
    let table = Sparse::holes().plant(s.dir());
    let msg = assert_snapshot_fails(&table, ErrorKind::Corrupt);
    assert!(
        msg.contains("descriptor 1 of 1048576") && msg.contains("outside the string area"),
        "{msg}"
    );
    let m = hold_measured(&table);
    assert!(m.stderr.contains("descriptor 1 of 1048576"), "{}", m.stderr);
    // Holes only, but for the first descriptor: the same, one later.
    let holes = Sparse {
        capacity: MAX_DESC_CAPACITY,
        desc_len: MAX_DESC_LEN,
        ..Sparse::default()
    }
    .plant(s.dir());
    let msg = assert_snapshot_fails(&holes, ErrorKind::Corrupt);
    assert!(
        msg.contains("descriptor 1 of 1048576") && msg.contains("unknown metric kind"),
        "{msg}"
    );
    hold_measured(&holes);
    s.assert_survives(&[(&table, Seen::Broken), (&holes, Seen::Broken)]);
}

#[test]
fn a_counter_at_the_far_end_of_huge_shards_costs_one_word_per_shard() {
    let s = Scene::new();
    // Fifteen shards of 256 MiB, all in use; one counter in their last word.
    let far = Sparse::far_counter();
    let path = far.plant(s.dir());
    assert_eq!(counter(&snapshot(&path), "x", &[]), 7);
    let m = hold_measured(&path);
    assert!(m.status.success(), "{}{}", m.stdout, m.stderr);
    assert!(m.stdout.contains("result ok len=1"), "{}", m.stdout);
    s.assert_survives(&[(&path, Seen::Readable(Liveness::Dead))]);
}

#[test]
fn a_descriptor_count_beyond_what_was_written_is_corrupt() {
    let s = Scene::new();
    let cap = template().header.desc_capacity;
    let over = s.plant_patched(|b| put_u32(b, DESC_COUNT_OFFSET, cap + 1));
    assert_open_fails(&over, ErrorKind::Corrupt);
    // Within capacity, but the extra slots were never written.
    let unwritten = s.plant_patched(|b| put_u32(b, DESC_COUNT_OFFSET, cap));
    assert_snapshot_fails(&unwritten, ErrorKind::Corrupt);
    s.assert_survives(&[
        (&over, Seen::Error(ErrorKind::Corrupt)),
        (&unwritten, Seen::Broken),
    ]);
}

#[test]
fn a_value_offset_outside_its_area_is_corrupt() {
    let s = Scene::new();
    let h = &template().header;
    let counter =
        s.plant_patched(|b| put_u64(b, desc_at(h, T_COUNTER) + D_VALUE_OFFSET, h.shard_len));
    let gauge = s.plant_patched(|b| put_u64(b, desc_at(h, T_GAUGE) + D_VALUE_OFFSET, h.shared_len));
    let huge =
        s.plant_patched(|b| put_u64(b, desc_at(h, T_HISTOGRAM) + D_VALUE_OFFSET, u64::MAX - 7));
    for p in [&counter, &gauge, &huge] {
        assert_snapshot_fails(p, ErrorKind::Corrupt);
    }
    s.assert_survives(&[
        (&counter, Seen::Broken),
        (&gauge, Seen::Broken),
        (&huge, Seen::Broken),
    ]);
}

#[test]
fn a_string_reference_outside_the_string_area_is_corrupt() {
    let s = Scene::new();
    let h = &template().header;
    let name =
        s.plant_patched(|b| put_u32(b, desc_at(h, T_COUNTER) + D_NAME, h.strings_len as u32));
    let help = s.plant_patched(|b| put_u32(b, desc_at(h, T_GAUGE) + D_HELP + 4, u32::MAX));
    for p in [&name, &help] {
        assert_snapshot_fails(p, ErrorKind::Corrupt);
    }
    s.assert_survives(&[(&name, Seen::Broken), (&help, Seen::Broken)]);
}

#[test]
fn a_metric_name_that_is_not_utf8_is_corrupt() {
    let s = Scene::new();
    let h = &template().header;
    let bad = s.plant_patched(|b| {
        let name_off = get_u32(b, desc_at(h, T_COUNTER) + D_NAME) as usize;
        b[h.strings_offset as usize + name_off + 1] = 0xff;
    });
    let msg = assert_snapshot_fails(&bad, ErrorKind::Corrupt);
    assert!(msg.contains("UTF-8"), "{msg}");
    s.assert_survives(&[(&bad, Seen::Broken)]);
}

#[test]
fn a_process_name_that_is_not_utf8_is_corrupt() {
    let s = Scene::new();
    let bad = s.plant_patched(|b| b[PROCESS_NAME_OFFSET] = 0xc3);
    let err = RegistryReader::open(&bad).unwrap_err();
    assert_error(&err, ErrorKind::Corrupt, &bad);
    assert!(err.to_string().contains("UTF-8"), "{err}");
    s.assert_survives(&[(&bad, Seen::Error(ErrorKind::Corrupt))]);
}

#[test]
fn a_file_truncated_under_a_reader_is_an_error_not_a_crash() {
    let s = Scene::new();
    let bad = plant(s.dir(), template().bytes.clone());
    let mut r = reader(&["hold", bad.to_str().unwrap()]);
    assert_eq!(r.expect("opened len="), "5");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&bad)
        .and_then(|f| f.set_len(4096))
        .unwrap_or_else(|e| panic!("truncate {}: {e}", bad.display()));
    r.send("snapshot");
    let Some(result) = r.try_expect("result ") else {
        panic!(
            "the reader process {} when it read {}, truncated under its mapping: the library's \
             SIGBUS guard (crates/topdeck/src/reader/fault_guard.rs) did not turn the fault into \
             ErrorKind::Shrunk\n--- its stderr ---\n{}",
            describe(Some(r.wait())),
            bad.display(),
            r.stderr()
        )
    };
    let (outcome, message) = result.split_once(' ').unwrap_or((&result, ""));
    assert_eq!(
        outcome, "err",
        "a snapshot of a shrunk file succeeded: {result}"
    );
    let kind = field_of(message, "kind=");
    assert!(
        kind == "Shrunk" || kind == "Corrupt",
        "kind {kind}: {message}"
    );
    assert!(message.contains(&bad.display().to_string()), "{message}");
    assert!(r.wait().success());
    s.assert_survives(&[(&bad, Seen::Error(ErrorKind::Corrupt))]);
}

fn field_of<'a>(s: &'a str, key: &str) -> &'a str {
    s.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or("")
}

#[test]
fn a_namespace_owned_by_another_user_is_refused_to_writers() {
    const TEST: &str = "bad_input::a_namespace_owned_by_another_user_is_refused_to_writers";
    if !is_root() {
        skip(
            TEST,
            "chown needs root; a directory owned by another user not tested",
        );
        return;
    }
    let s = Scene::new();
    let nobody = 65534;
    let planted = plant(s.dir(), template().bytes.clone());
    std::os::unix::fs::chown(s.dir(), Some(nobody), Some(nobody)).unwrap();
    // The directory's owner's own registry is fine; root's planted one is not.
    std::os::unix::fs::chown(&s.good.path, Some(nobody), Some(nobody)).unwrap();

    let err = Registry::builder().dir(s.dir()).build().unwrap_err();
    assert_error(&err, ErrorKind::UnsafeDirectory, s.dir());
    assert!(err.to_string().contains("65534"), "{err}");
    s.assert_survives(&[(&planted, Seen::Error(ErrorKind::Planted))]);
}

#[test]
fn a_world_writable_namespace_is_refused() {
    let s = Scene::new();
    let mut dead = writer(s.dir(), &["idle"]);
    dead.proc.kill();
    std::fs::set_permissions(s.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();

    let err = Registry::builder().dir(s.dir()).build().unwrap_err();
    assert_error(&err, ErrorKind::UnsafeDirectory, s.dir());
    let listing = Namespace::at(s.dir()).list();
    assert!(listing.entries.is_empty(), "{:?}", listing.entries);
    assert_eq!(listing.errors.len(), 1, "{:?}", listing.errors);
    assert_error(&listing.errors[0], ErrorKind::UnsafeDirectory, s.dir());
    // An unusable namespace fails the command, after saying why in the JSON.
    let ls = topdeck(s.dir(), &["ls", "--json"]);
    assert!(!ls.status.success(), "{}", ls.stdout);
    let ls: serde_json::Value = serde_json::from_str(&ls.stdout).unwrap();
    assert!(reports_error_for(&ls, s.dir()), "{ls}");
    // Nothing is removed from a directory anyone could have written to.
    let report = Namespace::at(s.dir()).gc();
    assert!(report.removed.is_empty(), "{:?}", report.removed);
    assert!(dead.path.exists());

    std::fs::set_permissions(s.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    s.assert_survives(&[(&dead.path, Seen::Readable(Liveness::Dead))]);
}

#[test]
fn a_planted_symlink_is_reported_and_never_followed() {
    let s = Scene::new();
    let elsewhere = namespace_dir();
    let target = plant(elsewhere.path(), template().bytes.clone());
    let link = s
        .dir()
        .join(format!("3999999-1-0{}", topdeck::dir::FILE_SUFFIX));
    std::os::unix::fs::symlink(&target, &link).unwrap();

    let err = RegistryReader::open(&link).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Io | ErrorKind::Planted),
        "{err}"
    );
    assert!(
        err.to_string().contains(&link.display().to_string()),
        "{err}"
    );
    let report = Namespace::at(s.dir()).gc();
    assert!(report.removed.is_empty(), "{:?}", report.removed);
    assert!(
        report.errors.iter().any(|e| e.kind() == ErrorKind::Planted),
        "{:?}",
        report.errors
    );
    assert!(
        target.exists() && link.symlink_metadata().is_ok(),
        "gc removed the link or its target"
    );
    s.assert_survives(&[(&link, Seen::Error(ErrorKind::Planted))]);
}

/// A registry of this process in the scene's directory, beside the good one.
fn own_registry(s: &Scene, metrics: u32) -> Registry {
    Registry::builder()
        .dir(s.dir())
        .name("own")
        .metrics(metrics)
        .build()
        .unwrap()
}

#[test]
fn an_invalid_metric_name_is_refused_naming_the_file() {
    let s = Scene::new();
    let r = own_registry(&s, 16);
    for (name, labels) in [
        ("bad-name", &[][..]),
        ("9lives", &[]),
        ("", &[]),
        ("ok_total", &[("__reserved", "x")]),
        ("ok_total", &[("a:b", "x")]),
    ] {
        let err = r.counter(name, labels, "", "").unwrap_err();
        assert_error(&err, ErrorKind::InvalidName, r.path());
    }
    r.counter("ok_total", &[], "", "").unwrap().inc();
    assert_eq!(counter(&snapshot(r.path()), "ok_total", &[]), 1);
    assert_eq!(snapshot(r.path()).len(), 1);
    s.assert_survives(&[(r.path(), Seen::Readable(Liveness::Alive))]);
}

#[test]
fn a_duplicate_registration_is_refused_naming_the_file() {
    let s = Scene::new();
    let r = own_registry(&s, 16);
    r.counter("jobs_total", &[("queue", "a")], "", "")
        .unwrap()
        .add(3);
    let _b = r.counter("jobs_total", &[("queue", "b")], "", "").unwrap();
    let err = r
        .counter("jobs_total", &[("queue", "a")], "", "")
        .unwrap_err();
    assert_error(&err, ErrorKind::Duplicate, r.path());
    let err = r
        .gauge("jobs_total", &[("queue", "a")], "", "")
        .unwrap_err();
    assert_error(&err, ErrorKind::Duplicate, r.path());
    let snap = snapshot(r.path());
    assert_eq!(snap.len(), 2);
    assert_eq!(counter(&snap, "jobs_total", &[("queue", "a")]), 3);
    s.assert_survives(&[(r.path(), Seen::Readable(Liveness::Alive))]);
}

#[test]
fn a_full_registry_is_refused_naming_the_file_and_keeps_its_metrics() {
    let s = Scene::new();
    let r = own_registry(&s, 4);
    for i in 0..4 {
        r.counter(&format!("c{i}_total"), &[], "", "")
            .unwrap()
            .add(i);
    }
    let err = r.counter("c4_total", &[], "", "").unwrap_err();
    assert_error(&err, ErrorKind::RegistryFull, r.path());
    let err = r.histogram("h_seconds", &[], "", "").unwrap_err();
    assert_error(&err, ErrorKind::RegistryFull, r.path());
    let snap = snapshot(r.path());
    assert_eq!(snap.len(), 4);
    assert_eq!(counter(&snap, "c3_total", &[]), 3);
    s.assert_survives(&[(r.path(), Seen::Readable(Liveness::Alive))]);
}

/// Sets word `i` of the histogram's block in `shard`.
fn put_hist_word(b: &mut [u8], shard: u32, i: usize, v: u64) {
    let h = &template().header;
    let off = get_u64(b, desc_at(h, T_HISTOGRAM) + D_VALUE_OFFSET);
    put_u64(b, (h.shard_offset(shard) + off) as usize + i * WORD, v);
}

#[test]
fn counts_near_the_top_of_u64_stop_there_instead_of_panicking() {
    let s = Scene::new();
    let h = &template().header;
    let bad = s.plant_patched(|b| {
        let c = get_u64(b, desc_at(h, T_COUNTER) + D_VALUE_OFFSET);
        put_u64(b, (h.shard_offset(h.shard_count) + c) as usize, u64::MAX);
        put_hist_word(b, 0, HISTOGRAM_HEAD_WORDS, u64::MAX - 1);
        put_hist_word(b, 0, HISTOGRAM_HEAD_WORDS + 1, 7);
        put_hist_word(b, 0, H_ZERO, u64::MAX);
    });
    let snap = snapshot(&bad);
    // The counter's shard words were 5 and u64::MAX: readers sum them as
    // writers add, stopping at u64::MAX (FORMAT.md section 5), never
    // wrapping to a small total a rate would take for a reset.
    assert_eq!(
        counter(&snap, "requests_total", &[("route", "/")]),
        u64::MAX
    );
    match snap.get("latency_seconds", &[]) {
        Some(Value::Histogram(hv)) => {
            let sum = hv
                .buckets
                .iter()
                .fold(hv.zero_count, |a, &b| a.wrapping_add(b));
            assert_eq!(hv.count, sum);
            exercise(&snap);
        }
        other => panic!("latency_seconds: {other:?}"),
    }
    s.assert_survives(&[(&bad, Seen::Readable(Liveness::Dead))]);
}

#[test]
fn extreme_bucket_indices_do_not_panic_quantiles() {
    let s = Scene::new();
    let h = &template().header;
    for min_index in [i32::MIN, i32::MIN + 1, i32::MAX - 100] {
        let bad = s
            .plant_patched(|b| put_u32(b, desc_at(h, T_HISTOGRAM) + D_MIN_INDEX, min_index as u32));
        let mut r = RegistryReader::open(&bad).unwrap();
        // Either the descriptor is refused, or every derived value is computable.
        match r.snapshot() {
            Ok(snap) => exercise(&snap),
            Err(e) => assert_error(&e, ErrorKind::Corrupt, &bad),
        }
    }
    s.assert_survives(&[]);
}

/// Computes everything a viewer derives from a snapshot.
fn exercise(snap: &Snapshot) {
    for (_, v) in snap.iter() {
        if let Value::Histogram(h) = v {
            for q in [0.0, 0.1, 0.25, 0.5, 0.9, 0.99, 1.0] {
                let _ = h.quantile(q);
            }
            let _ = h.mean();
            let _ = h.nonzero_buckets().count();
        }
    }
}

/// Opens, snapshots twice and lists a damaged copy of the template; every
/// error must name the file. Panics are what the property tests look for.
fn read_damaged(bytes: Vec<u8>) {
    let ns = namespace_dir();
    let path = plant(ns.path(), bytes);
    let names = |e: &topdeck::Error| {
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    };
    match RegistryReader::open(&path) {
        Ok(mut r) => {
            let _ = r.liveness();
            for _ in 0..2 {
                match r.snapshot() {
                    Ok(snap) => exercise(&snap),
                    Err(e) => names(&e),
                }
            }
        }
        Err(e) => names(&e),
    }
    let listing = Namespace::at(ns.path()).list();
    listing.errors.iter().for_each(names);
    let _ = Namespace::at(ns.path()).find("1");
}

/// One change to the template: a random byte, or a telling 32/64-bit
/// value, in a region chosen so that every structure gets hit.
#[derive(Debug, Clone)]
struct Mutation {
    region: u8,
    at: u32,
    byte: u8,
    word: Option<(bool, u64)>,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let telling = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::from(u32::MAX)),
        Just(i32::MIN as u32 as u64),
        Just(i32::MAX as u64),
        Just(1 << 63),
        any::<u64>(),
    ];
    (
        any::<u8>(),
        any::<u32>(),
        any::<u8>(),
        proptest::option::of((any::<bool>(), telling)),
    )
        .prop_map(|(region, at, byte, word)| Mutation {
            region,
            at,
            byte,
            word,
        })
}

fn apply(b: &mut [u8], m: &Mutation) {
    let h = &template().header;
    let used_shard = 4096usize.min(h.shard_len as usize);
    let (start, len) = match m.region % 7 {
        0 => (0, HEADER_FIELDS_END),
        1 => (h.desc_offset as usize, 8 * DESCRIPTOR_LEN),
        2 => (h.strings_offset as usize, 256),
        3 => (h.shared_offset as usize, 64),
        4 => (h.shards_offset as usize, used_shard),
        5 => (h.shard_offset(h.shard_count) as usize, used_shard),
        _ => (0, b.len()),
    };
    let at = start + m.at as usize % len;
    match m.word {
        Some((wide, v)) => {
            let at = at & !3;
            if wide && at + 8 <= b.len() {
                put_u64(b, at, v);
            } else if at + 4 <= b.len() {
                put_u32(b, at, v as u32);
            }
        }
        None if at < b.len() => b[at] = m.byte,
        None => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_mutations_never_panic_the_reader(muts in proptest::collection::vec(mutation(), 1..12)) {
        let mut b = template().bytes.clone();
        for m in &muts {
            apply(&mut b, m);
        }
        read_damaged(b);
    }

    #[test]
    fn random_truncations_never_panic_the_reader(cut in any::<u32>(), muts in proptest::collection::vec(mutation(), 0..4)) {
        let mut b = template().bytes.clone();
        for m in &muts {
            apply(&mut b, m);
        }
        b.truncate(cut as usize % (b.len() + 1));
        read_damaged(b);
    }
}

/// Each file fails to open as corrupt, and the scene's good registry survives them all.
fn assert_all_corrupt(s: &Scene, bad: &[PathBuf]) {
    for p in bad {
        assert_open_fails(p, ErrorKind::Corrupt);
    }
    let seen: Vec<_> = bad
        .iter()
        .map(|p| (p.as_path(), Seen::Error(ErrorKind::Corrupt)))
        .collect();
    s.assert_survives(&seen);
}
