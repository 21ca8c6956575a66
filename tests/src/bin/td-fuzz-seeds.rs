// SPDX-License-Identifier: Apache-2.0
//! Writes the seed corpora of the fuzz targets (`fuzz/corpus/<target>/seed-*`):
//! registries made by the real writer, the hostile files of the bad-input
//! tests, and the headers Prometheus sends.
//!
//!     cargo run -p topdeck-tests --bin td-fuzz-seeds -- fuzz/corpus
//!
//! A writer's file is mostly zeros (every section starts on a page), which
//! a fuzzer would spend its time mutating; each registry is therefore laid
//! out again with its sections packed at 8-byte alignment, which the format
//! allows (docs/FORMAT.md): the same header fields, descriptors, strings
//! and value words, in a file of one or two KiB. Writer-specific numbers
//! (pid, start time, creation time) are fixed, so the seeds are the same
//! on every run.

use std::path::{Path, PathBuf};

use topdeck::{Buckets, Registry};
use topdeck_format::layout::*;
use topdeck_format::names::encode_labels;
use topdeck_format::{Header, RawDescriptor};
use topdeck_tests::{get_u64, packed, put_u32, put_u64, PACKED_PID};

fn main() {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or("fuzz/corpus".into()));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let registries = [
        ("kinds", kinds(dir.path())),
        ("empty", empty(dir.path())),
        ("labels", labels(dir.path())),
        ("histograms", histograms(dir.path())),
    ];
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, bytes) in &registries {
        files.push((name.to_string(), bytes.clone()));
    }
    files.extend(hostile(&registries[0].1));
    for target in ["header", "reader", "export"] {
        for (name, bytes) in &files {
            // The header target needs the header only; the rest costs it time.
            let keep = if target == "header" {
                bytes.len().min(HEADER_FIELDS_END + 64)
            } else {
                bytes.len()
            };
            write(&out, target, name, &bytes[..keep]);
        }
    }
    for (name, bytes) in &registries {
        for (i, seed) in descriptor_seeds(bytes).into_iter().enumerate() {
            write(&out, "descriptor", &format!("{name}-{i}"), &seed);
        }
        for (i, seed) in strings_seeds(bytes).into_iter().enumerate() {
            write(&out, "strings", &format!("{name}-{i}"), &seed);
        }
    }
    for (name, seed) in requests() {
        write(&out, "serve_request", name, seed.as_bytes());
    }
}

fn write(out: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = out.join(target);
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    let path = dir.join(format!("seed-{name}"));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn small(dir: &Path, name: &str) -> topdeck::RegistryBuilder {
    Registry::builder()
        .dir(dir)
        .name(name)
        .metrics(16)
        .string_bytes(4096)
        .gauge_bytes(4096)
        .shard_bytes(4096)
        .shards(2)
}

/// Every kind of metric, updated from two threads, and the clock
/// parameters (format v1.1).
fn kinds(dir: &Path) -> Vec<u8> {
    let r = small(dir, "main").build().expect("build");
    let (requests, h) = topdeck_tests::template_metrics(&r);
    r.record_clock_params();
    std::thread::scope(|s| {
        s.spawn(|| {
            requests.add(2);
            h.record(0.0);
        });
    });
    compact(&r)
}

fn empty(dir: &Path) -> Vec<u8> {
    compact(&small(dir, "empty").build().expect("build"))
}

/// What the exporter must escape or rename: quotes, backslashes and line
/// feeds in values and help, labels named like the exporter's own, `le`
/// on a histogram, a counter without `_total`, a unit suffix, odd floats.
fn labels(dir: &Path) -> Vec<u8> {
    let r = small(dir, "side \"q\"").build().expect("build");
    let odd = [
        ("process", "x\"y"),
        ("pid", "back\\slash"),
        ("registry", "line\nfeed"),
        ("uid", "ünïcødé"),
    ];
    r.counter("jobs", &odd, "Help with \\ and \"quotes\"\nand a line.", "")
        .unwrap()
        .add(u64::MAX);
    r.gauge("disk_bytes", &[("le", "1")], "", "bytes")
        .unwrap()
        .set(i64::MIN);
    for (i, v) in [f64::NAN, f64::INFINITY, -0.0].into_iter().enumerate() {
        r.gauge_f64("ratio", &[("i", &i.to_string())], "", "")
            .unwrap()
            .set(v);
    }
    let b = Buckets::exponential(3, 1e-3, 10.0).unwrap();
    r.histogram_with("size:ratio", &[("le", "0.5")], "", "ratio", b)
        .unwrap()
        .record(0.5);
    r.counter("jobs", &[("a", "1")], "A second help.", "")
        .unwrap()
        .add(1);
    compact(&r)
}

/// The extremes of the bucket maths: the widest and narrowest schemas,
/// tiny and huge bounds, observations at and past both ends.
fn histograms(dir: &Path) -> Vec<u8> {
    let r = small(dir, "hist").build().expect("build");
    for (schema, min, max) in [(-4, 1e-300, 1e300), (8, 0.999, 1.001), (0, 1e-9, 1e-3)] {
        let b = Buckets::exponential(schema, min, max).unwrap();
        let h = r
            .histogram_with(&format!("h{}", schema + 4), &[], "", "", b)
            .unwrap();
        for v in [0.0, -1.0, min, max, f64::MAX, f64::MIN_POSITIVE, 1.0] {
            h.record(v);
        }
    }
    compact(&r)
}

fn align8(v: u64) -> u64 {
    v.div_ceil(8) * 8
}

/// The registry's file with its sections packed (see the module docs).
fn compact(r: &Registry) -> Vec<u8> {
    packed(&std::fs::read(r.path()).expect("read the registry"))
}

/// The damaged files of tests/tests/integration/bad_input.rs, made from
/// the packed `kinds` registry, and the sparse claims of bench/hostile.py
/// (the reader and export targets extend a file to the length it claims).
fn hostile(kinds: &[u8]) -> Vec<(String, Vec<u8>)> {
    let h = Header::parse(kinds, kinds.len() as u64).unwrap();
    let desc = |i: u64| (h.desc_offset + i * u64::from(h.desc_len)) as usize;
    let mut out = Vec::new();
    let mut patched = |name: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = kinds.to_vec();
        f(&mut b);
        out.push((format!("bad-{name}"), b));
    };
    patched("truncated-header", &|b| b.truncate(100));
    patched("truncated-table", &|b| b.truncate(desc(1) + 10));
    patched("magic", &|b| b[..8].copy_from_slice(b"TOPDECKX"));
    patched("major", &|b| put_u32(b, VERSION_OFFSET, 2 << 16));
    patched("minor", &|b| put_u32(b, VERSION_OFFSET, 1 << 16 | 9));
    patched("count", &|b| {
        put_u32(b, DESC_COUNT_OFFSET, h.desc_count + 1)
    });
    patched("value-offset", &|b| {
        put_u64(b, desc(0) + D_VALUE_OFFSET, h.shard_len)
    });
    patched("string-ref", &|b| {
        put_u32(b, desc(1) + D_HELP + 4, u32::MAX)
    });
    patched("name-utf8", &|b| {
        let off = u32::from_le_bytes(b[desc(0) + D_NAME..][..4].try_into().unwrap());
        b[h.strings_offset as usize + off as usize + 1] = 0xff;
    });
    patched("process-utf8", &|b| b[PROCESS_NAME_OFFSET] = 0xc3);
    patched("wrapping", &|b| {
        let c = get_u64(b, desc(0) + D_VALUE_OFFSET);
        put_u64(b, (h.shard_offset(h.shard_count) + c) as usize, u64::MAX);
        let hist = get_u64(b, desc(3) + D_VALUE_OFFSET);
        let word = |i: usize| (h.shard_offset(0) + hist) as usize + i * WORD;
        put_u64(b, word(HISTOGRAM_HEAD_WORDS), u64::MAX - 1);
        put_u64(b, word(H_ZERO), u64::MAX);
        put_u64(b, word(H_MAX), u64::MAX);
    });
    patched("min-index", &|b| {
        put_u32(b, desc(3) + D_MIN_INDEX, (i32::MAX - 100) as u32)
    });
    // A quarter gigabyte of table (2^20 slots of 256 bytes), all
    // published, one descriptor written: the rest is a hole.
    out.push(("sparse-table".into(), sparse(1 << 20, 256, 2, 4096, 0)));
    // Fifteen shards of 256 MiB, a counter in their last word.
    let far = sparse(1, 64, 14, MAX_SHARD_LEN, MAX_SHARD_LEN - 8);
    out.push(("sparse-shards".into(), far));
    out
}

/// The start of a file shaped like bench/hostile.py's, packed: a header
/// that claims `capacity` descriptors, all published, and `shards` shards
/// of `shard_len` bytes, all in use; descriptor 0 written, a counter `x`
/// at `counter_at` in each shard; the rest of the claim left to the hole.
fn sparse(capacity: u32, desc_len: u32, shards: u32, shard_len: u64, counter_at: u64) -> Vec<u8> {
    let desc_offset = align8(HEADER_FIELDS_END as u64);
    let table = u64::from(capacity) * u64::from(desc_len);
    let strings_offset = desc_offset + table;
    let shared_offset = strings_offset + 64;
    let shards_offset = shared_offset + 64;
    let file_len = shards_offset + (u64::from(shards) + 1) * shard_len;
    let mut h = vec![0u8; desc_offset as usize + desc_len as usize];
    h[..8].copy_from_slice(&MAGIC);
    put_u32(&mut h, VERSION_OFFSET, VERSION);
    put_u32(&mut h, HEADER_LEN_OFFSET, desc_offset as u32);
    put_u64(&mut h, FILE_LEN_OFFSET, file_len);
    put_u32(&mut h, PID_OFFSET, PACKED_PID);
    put_u64(&mut h, START_TICKS_OFFSET, 1);
    put_u64(&mut h, DESC_OFFSET_OFFSET, desc_offset);
    put_u32(&mut h, DESC_CAPACITY_OFFSET, capacity);
    put_u32(&mut h, DESC_LEN_OFFSET, desc_len);
    put_u32(&mut h, DESC_COUNT_OFFSET, capacity);
    put_u32(&mut h, SHARD_COUNT_OFFSET, shards);
    put_u64(&mut h, STRINGS_OFFSET_OFFSET, strings_offset);
    put_u64(&mut h, STRINGS_LEN_OFFSET, 64);
    put_u64(&mut h, SHARED_OFFSET_OFFSET, shared_offset);
    put_u64(&mut h, SHARED_LEN_OFFSET, 64);
    put_u64(&mut h, SHARDS_OFFSET_OFFSET, shards_offset);
    put_u64(&mut h, SHARD_LEN_OFFSET, shard_len);
    put_u32(&mut h, SHARDS_IN_USE_OFFSET, shards);
    h[PROCESS_NAME_OFFSET..][..3].copy_from_slice(b"svc");
    h[REGISTRY_NAME_OFFSET..][..4].copy_from_slice(b"main");
    let d = desc_offset as usize;
    h[d + D_KIND] = 1;
    put_u32(&mut h, d + D_VALUE_LEN, WORD as u32);
    put_u64(&mut h, d + D_VALUE_OFFSET, counter_at);
    put_u32(&mut h, d + D_NAME + 4, 1);
    if h.len() as u64 == strings_offset {
        h.push(b'x');
    }
    h
}

/// The descriptor target's input for each descriptor of a packed file:
/// the three area lengths, the descriptor, the string area.
fn descriptor_seeds(file: &[u8]) -> Vec<Vec<u8>> {
    let h = Header::parse(file, file.len() as u64).unwrap();
    let strings = &file[h.strings_offset as usize..][..h.strings_len as usize];
    (0..h.desc_count as usize)
        .map(|i| {
            let at = h.desc_offset as usize + i * h.desc_len as usize;
            let mut seed = Vec::new();
            for n in [h.strings_len, h.shard_len, h.shared_len] {
                seed.extend_from_slice(&(n as u32).to_le_bytes());
            }
            seed.extend_from_slice(&file[at..at + DESCRIPTOR_LEN]);
            seed.extend_from_slice(strings);
            seed
        })
        .collect()
}

/// The strings target's input for each descriptor with labels: its four
/// references (base 0) and the bytes they reference; and the label set
/// alone, which the target also decodes whole.
fn strings_seeds(file: &[u8]) -> Vec<Vec<u8>> {
    let h = Header::parse(file, file.len() as u64).unwrap();
    let area = &file[h.strings_offset as usize..][..h.strings_len as usize];
    let mut seeds = Vec::new();
    for i in 0..h.desc_count as usize {
        let at = h.desc_offset as usize + i * h.desc_len as usize;
        let d = RawDescriptor::parse(&file[at..at + DESCRIPTOR_LEN], &h).unwrap();
        if d.labels.len == 0 {
            continue;
        }
        let mut head = vec![0u8, 0];
        let mut body = Vec::new();
        for r in d.strings() {
            let s = &area[r.off as usize..r.end() as usize];
            head.extend_from_slice(&(body.len() as u16).to_le_bytes());
            head.extend_from_slice(&(s.len() as u16).to_le_bytes());
            body.extend_from_slice(s);
        }
        head.extend_from_slice(&body);
        seeds.push(head);
        seeds.push(area[d.labels.off as usize..d.labels.end() as usize].to_vec());
    }
    seeds.push(encode_labels(&[("method", "GET"), ("code", "200")]));
    seeds
}

/// Requests as the serve_request target reads them: method, target, then
/// `a`-prefixed `Accept` and other `Accept-Encoding` values.
fn requests() -> Vec<(&'static str, String)> {
    // What Prometheus sends: 2.x by default, 2.x with native histograms,
    // and 3.x (with UTF-8 escaping offered).
    let prometheus2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
        version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;\
        encoding=delimited;q=0.8,application/openmetrics-text;version=1.0.0;q=0.5,\
        text/plain;version=0.0.4;q=0.4,*/*;q=0.1";
    let prometheus3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
        application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;\
        escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
    vec![
        (
            "prometheus2",
            format!("GET\n/metrics\na{prometheus2}\ngzip"),
        ),
        ("native", format!("GET\n/metrics\na{native}\ngzip")),
        (
            "prometheus3",
            format!("GET\n/metrics\na{prometheus3}\ngzip"),
        ),
        ("curl", "GET\n/metrics\na*/*".into()),
        (
            "split",
            "HEAD\n/metrics?x=1\natext/plain;q=0.5\naapplication/openmetrics-text\n\
             gzip;q=0, identity\n*;q=0.1"
                .into(),
        ),
        ("index", "GET\n/".into()),
        ("post", "POST\nhttp://localhost:9464/metrics\n".into()),
        (
            "absolute",
            "GET\nhttp://[::1]:9464/metrics\naTEXT/PLAIN".into(),
        ),
    ]
}
