// SPDX-License-Identifier: Apache-2.0
#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! The Prometheus endpoint's cost, in three groups:
//!
//! - `scrape_100x1000`: a full scrape of 100 registries of 1,000 metrics
//!   each (900 counters, 90 gauges, 10 histograms; the same names in every
//!   registry, as 100 processes of one service would have), as
//!   `topdeck serve` does it: list the namespace, snapshot through kept
//!   readers, group, encode, up to the body a server sends (in pieces, see
//!   `topdeck_export::Body`). Per format, then with the body copied out of
//!   the scraper (as `topdeck serve` sends it), then listing and snapshots
//!   alone.
//! - `encode_1000c_10h`: the anchor shape, 1,000 counters and 10
//!   histograms in one registry, read and encoded as text by topdeck (and
//!   as protobuf), against what the `prometheus`, `prometheus-client` and
//!   `metrics` crates do to produce the same exposition.
//! - `writer_under_scrape`: a writer's counter increment and histogram
//!   record with nobody reading, and while another thread scrapes all 100
//!   registries every second.
//! - `push_100x1000`: what one `topdeck push` batch of the same 100
//!   registries costs before the socket: gather (the scrape's listing and
//!   snapshots), map to OTLP, encode with prost into requests of at most
//!   4 MiB (and gzip each, as `--compression gzip`), beside a protobuf
//!   scrape of the same registries in the same run.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use topdeck_bench::{latencies, namespace, per_thread_loop, LATENCIES};
use topdeck_export::{Exposition, Format, Scraper, Source};

const REGISTRIES: usize = 100;
const COUNTERS: usize = 900;
const GAUGES: usize = 90;
const HISTOGRAMS: usize = 10;

/// The body compressed as `topdeck serve --gzip` does it.
fn gzip(body: topdeck_export::Body<'_>) -> Vec<u8> {
    gzip_chunks(body.chunks())
}

/// Pieces compressed at level 1, as `serve --gzip` and `push
/// --compression gzip` do.
fn gzip_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    for c in chunks {
        z.write_all(c).unwrap();
    }
    z.finish().unwrap()
}

/// The body copied out of the scraper's buffers, as `topdeck serve` does
/// so that it can release the scraper before sending.
fn copied(body: topdeck_export::Body<'_>) -> Vec<u8> {
    let mut v = Vec::with_capacity(body.len());
    body.chunks().for_each(|c| v.extend_from_slice(c));
    v
}

/// The median CPU time of this thread over `n` calls of `f`: unlike wall
/// time, it does not count time the thread waited while others ran, which
/// on a shared 2-CPU machine is most of the noise.
fn thread_cpu_per_call(n: usize, mut f: impl FnMut()) -> Duration {
    let now = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    };
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = now();
            f();
            now() - t
        })
        .collect();
    times.sort();
    times[n / 2]
}

/// One registry of the 100: its handles, kept alive with it.
struct Service {
    registry: topdeck::Registry,
    counters: Vec<topdeck::Counter>,
    histograms: Vec<topdeck::Histogram>,
}

fn service(dir: &tempfile::TempDir, n: usize) -> Service {
    let registry = topdeck::Registry::builder()
        .dir(dir.path())
        .name(format!("svc{n}"))
        .build()
        .expect("a registry in the benchmark's directory");
    let lat = latencies();
    let routes = ["/", "/api", "/login", "/static"];
    let counters: Vec<_> = (0..COUNTERS)
        .map(|i| {
            let c = registry
                .counter(
                    &format!("app_events_{i}_total"),
                    &[("route", routes[i % routes.len()])],
                    "Events of one kind.",
                    "",
                )
                .unwrap();
            c.add((i * 7 + n) as u64);
            c
        })
        .collect();
    for i in 0..GAUGES {
        registry
            .gauge(&format!("app_level_{i}"), &[], "A level.", "")
            .unwrap()
            .set((i * n) as i64);
    }
    let histograms: Vec<_> = (0..HISTOGRAMS)
        .map(|i| {
            let h = registry
                .histogram(
                    &format!("app_latency_{i}_seconds"),
                    &[],
                    "Time per request.",
                    "seconds",
                )
                .unwrap();
            for v in lat.iter().skip(i).step_by(4) {
                h.record(*v);
            }
            h
        })
        .collect();
    Service {
        registry,
        counters,
        histograms,
    }
}

/// The run size `topdeck serve` streams its body in.
const STREAM_WINDOW: usize = 1 << 20;

fn services(dir: &tempfile::TempDir) -> Vec<Service> {
    (0..REGISTRIES).map(|n| service(dir, n)).collect()
}

fn scrape(c: &mut Criterion) {
    let dir = namespace();
    let svcs = services(&dir);
    let mut g = c.benchmark_group("scrape_100x1000");
    for format in [Format::Text, Format::OpenMetrics, Format::Protobuf] {
        let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
        let (report, body) = scraper.scrape_body(format).unwrap();
        let bytes = body.len();
        assert_eq!(report.registries, REGISTRIES);
        assert_eq!(report.series, REGISTRIES * 1000);
        assert!(report.skipped.is_empty());
        eprintln!(
            "scrape_100x1000/{}: {bytes} bytes ({:.1} MB)",
            format.name(),
            bytes as f64 / 1e6
        );
        let cpu = thread_cpu_per_call(20, || {
            black_box(scraper.scrape_body(format).unwrap().1.len());
        });
        eprintln!(
            "scrape_100x1000/{}: {:.2} ms of this thread's CPU time per scrape (median of 20)",
            format.name(),
            cpu.as_secs_f64() * 1e3
        );
        // What `topdeck serve` does before the socket: the body stays in
        // the scraper's buffers and is sent from there.
        g.bench_function(format.name(), |b| {
            b.iter(|| black_box(scraper.scrape_body(format).unwrap().1.len()))
        });
        // The copy alone, into a new buffer each time as the server does
        // (the allocation, its page faults and its release included).
        let body = scraper.scrape_body(format).unwrap().1;
        let cpu = thread_cpu_per_call(20, || {
            black_box(copied(body).len());
        });
        eprintln!(
            "scrape_100x1000/{}_copy_only: {:.2} ms of this thread's CPU time per copy (median of 20)",
            format.name(),
            cpu.as_secs_f64() * 1e3
        );
    }
    // What `topdeck serve` does in all before the socket: scrape, then copy
    // the body out so the scraper is free while it is sent.
    for format in [Format::Text, Format::Protobuf] {
        let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
        g.bench_function(format!("{}_copied", format.name()), |b| {
            b.iter(|| black_box(copied(scraper.scrape_body(format).unwrap().1).len()))
        });
    }
    // What `topdeck serve` does now: every snapshot taken at once, then the
    // body encoded a run of about 1 MiB at a time (serve's window), each
    // run copied out to be sent.
    for format in [Format::Text, Format::Protobuf] {
        let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
        let runs = scraper.scrape_chunks(format, STREAM_WINDOW).1.count();
        eprintln!(
            "scrape_100x1000/{}_streamed: {runs} runs of about {STREAM_WINDOW} bytes",
            format.name()
        );
        g.bench_function(format!("{}_streamed", format.name()), |b| {
            b.iter(|| {
                let (_, chunks) = scraper.scrape_chunks(format, STREAM_WINDOW);
                let bytes: usize = chunks.map(|c| c.unwrap().len()).sum();
                black_box(bytes)
            })
        });
    }
    // What `topdeck serve --gzip` adds for a scraper that accepts gzip:
    // level 1 over the body's pieces.
    for format in [Format::Text, Format::Protobuf] {
        let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
        let (_, body) = scraper.scrape_body(format).unwrap();
        let (raw, zipped) = (body.len(), gzip(body).len());
        eprintln!(
            "scrape_100x1000/{}_gzip: {raw} bytes -> {zipped} bytes ({:.1}x smaller)",
            format.name(),
            raw as f64 / zipped as f64
        );
        g.bench_function(format!("{}_gzip", format.name()), |b| {
            b.iter(|| black_box(gzip(scraper.scrape_body(format).unwrap().1).len()))
        });
    }
    let mut readers: Vec<_> = svcs
        .iter()
        .map(|s| topdeck::RegistryReader::open(s.registry.path()).unwrap())
        .collect();
    g.bench_function("snapshots_only", |b| {
        b.iter(|| {
            for r in &mut readers {
                black_box(r.snapshot().unwrap());
            }
        })
    });
    let listing_ns = topdeck::Namespace::at(dir.path());
    g.bench_function("list_only", |b| b.iter(|| black_box(listing_ns.list())));
    g.finish();
    drop(svcs);
}

/// Histogram bounds for the Prometheus crates, as in `updates.rs`:
/// exponential from 1 ms, doubling, 15 buckets.
const PROM_START: f64 = 1e-3;
const PROM_FACTOR: f64 = 2.0;
const PROM_BUCKETS: usize = 15;

fn anchor(c: &mut Criterion) {
    let dir = namespace();
    let lat = latencies();
    let mut g = c.benchmark_group("encode_1000c_10h");

    let registry = topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .unwrap();
    for i in 0..1000 {
        registry
            .counter(&format!("c{i}_total"), &[], "c", "")
            .unwrap()
            .inc();
    }
    for i in 0..10 {
        let h = registry
            .histogram(&format!("h{i}_seconds"), &[], "h", "seconds")
            .unwrap();
        lat.iter().skip(i).step_by(10).for_each(|v| h.record(*v));
    }
    // What `topdeck serve` does for this namespace at each scrape: list the
    // directory (one open, map and flock of the file), snapshot, encode.
    for (name, format) in [
        ("topdeck", Format::Text),
        ("topdeck_protobuf", Format::Protobuf),
    ] {
        let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
        let (report, body) = scraper.scrape_body(format).unwrap();
        assert_eq!((report.registries, report.series), (1, 1010));
        eprintln!("encode_1000c_10h/{name}: {} bytes", body.len());
        g.bench_function(name, |b| {
            b.iter(|| black_box(scraper.scrape_body(format).unwrap().1.len()))
        });
    }
    // The encoder alone, from a snapshot already taken, with nothing kept
    // from a previous encoding (buffers, rendered labels, grouping).
    let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
    let entry = topdeck::Namespace::at(dir.path()).list().entries.remove(0);
    let entry = topdeck_sources::Source::of_registry(entry);
    let snap = reader.snapshot().unwrap();
    let mut out = Vec::with_capacity(256 << 10);
    g.bench_function("topdeck_encode_only_cold", |b| {
        b.iter(|| {
            out.clear();
            let sources = [Source::of(&entry, &snap)];
            Format::Text
                .encode(&mut out, &Exposition::group(&sources))
                .unwrap();
            black_box(out.len())
        })
    });

    let prom = prometheus::Registry::new();
    for i in 0..1000 {
        let c = prometheus::IntCounter::new(format!("c{i}_total"), "c").unwrap();
        c.inc();
        prom.register(Box::new(c)).unwrap();
    }
    let buckets = prometheus::exponential_buckets(PROM_START, PROM_FACTOR, PROM_BUCKETS).unwrap();
    for i in 0..10 {
        let h = prometheus::Histogram::with_opts(
            prometheus::HistogramOpts::new(format!("h{i}_seconds"), "h").buckets(buckets.clone()),
        )
        .unwrap();
        lat.iter().skip(i).step_by(10).for_each(|v| h.observe(*v));
        prom.register(Box::new(h)).unwrap();
    }
    {
        let mut out = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &prom.gather(), &mut out)
            .unwrap();
        eprintln!(
            "encode_1000c_10h/prometheus_gather_encode: {} bytes",
            out.len()
        );
    }
    g.bench_function("prometheus_gather_encode", |b| {
        let enc = prometheus::TextEncoder::new();
        b.iter(|| {
            let mut out = Vec::with_capacity(256 << 10);
            prometheus::Encoder::encode(&enc, &prom.gather(), &mut out).unwrap();
            black_box(out.len())
        })
    });

    let mut pc = prometheus_client::registry::Registry::default();
    for i in 0..1000 {
        let c = prometheus_client::metrics::counter::Counter::<u64>::default();
        c.inc();
        pc.register(format!("c{i}"), "c", c);
    }
    for i in 0..10 {
        let h = prometheus_client::metrics::histogram::Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(
                PROM_START,
                PROM_FACTOR,
                PROM_BUCKETS as u16,
            ),
        );
        lat.iter().skip(i).step_by(10).for_each(|v| h.observe(*v));
        pc.register(format!("h{i}_seconds"), "h", h);
    }
    {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &pc).unwrap();
        eprintln!(
            "encode_1000c_10h/prometheus_client_encode: {} bytes",
            out.len()
        );
    }
    g.bench_function("prometheus_client_encode", |b| {
        b.iter(|| {
            let mut out = String::with_capacity(256 << 10);
            prometheus_client::encoding::text::encode(&mut out, &pc).unwrap();
            black_box(out.len())
        })
    });

    let rec = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(
            &prometheus::exponential_buckets(PROM_START, PROM_FACTOR, PROM_BUCKETS).unwrap(),
        )
        .unwrap()
        .build_recorder();
    let meta = metrics::Metadata::new("bench", metrics::Level::INFO, None);
    for i in 0..1000 {
        let key = metrics::Key::from_name(format!("c{i}_total"));
        metrics::Recorder::register_counter(&rec, &key, &meta).increment(1);
    }
    for i in 0..10 {
        let key = metrics::Key::from_name(format!("h{i}_seconds"));
        let h = metrics::Recorder::register_histogram(&rec, &key, &meta);
        lat.iter().skip(i).step_by(10).for_each(|v| h.record(*v));
    }
    let handle = rec.handle();
    eprintln!(
        "encode_1000c_10h/metrics_render: {} bytes",
        handle.render().len()
    );
    g.bench_function("metrics_render", |b| {
        b.iter(|| black_box(handle.render().len()))
    });
    g.finish();
}

/// A thread that scrapes `dir` in the text format every second until dropped.
struct BackgroundScraper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl BackgroundScraper {
    fn start(dir: &std::path::Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let dir = dir.to_owned();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut scraper = Scraper::new(topdeck::Namespace::at(&dir));
            let mut out = Vec::new();
            let mut scrapes = 0;
            let mut next = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    out.clear();
                    scraper.scrape(Format::Text, &mut out).unwrap();
                    scrapes += 1;
                    next += Duration::from_secs(1);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            scrapes
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for BackgroundScraper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let scrapes = t.join().expect("the scraper thread");
            eprintln!("background scraper: {scrapes} full scrapes");
        }
    }
}

fn writer(c: &mut Criterion) {
    let dir = namespace();
    let svcs = services(&dir);
    let lat = latencies();
    let counter = &svcs[0].counters[0];
    let hist = &svcs[0].histograms[0];
    let mut g = c.benchmark_group("writer_under_scrape");
    // Loops as in `updates.rs`, on a thread of their own.
    let run = |g: &mut criterion::BenchmarkGroup<'_, _>, suffix: &str| {
        g.bench_function(format!("counter_inc_{suffix}"), |b| {
            b.iter_custom(|n| {
                per_thread_loop(1, n, &|n| {
                    for _ in 0..n {
                        black_box(counter).inc();
                    }
                })
            })
        });
        g.bench_function(format!("histogram_record_{suffix}"), |b| {
            b.iter_custom(|n| {
                per_thread_loop(1, n, &|n| {
                    for i in 0..n {
                        black_box(hist).record(lat[i as usize & (LATENCIES - 1)]);
                    }
                })
            })
        });
    };
    run(&mut g, "no_scrape");
    {
        let _bg = BackgroundScraper::start(dir.path());
        run(&mut g, "scrape_every_1s");
    }
    g.finish();
    drop(svcs);
}

/// Most bytes of one request, as `topdeck push` splits a batch
/// (`cmd::push::MAX_REQUEST_BYTES`).
const REQUEST_BYTES: usize = 4 << 20;

/// One `topdeck push` batch before the socket: gather, map, encode into
/// requests of at most 4 MiB, as push does.
fn push_batch(scraper: &mut Scraper, encoder: &mut topdeck_export::otlp::Encoder) -> Vec<Vec<u8>> {
    let gathered = scraper.gather();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let batch = encoder.request(&gathered, &[], now);
    assert_eq!(batch.points, REGISTRIES * 1000);
    let mut parts = Vec::new();
    encoder.encode_parts(batch, REQUEST_BYTES, |body, _| parts.push(body));
    parts
}

/// Bytes in all of a batch's requests.
fn total(parts: &[Vec<u8>]) -> usize {
    parts.iter().map(Vec::len).sum()
}

/// Each request gzipped, as `--compression gzip` does: bytes in all.
fn gzipped_total(parts: &[Vec<u8>]) -> usize {
    parts.iter().map(|p| gzip_chunks([&p[..]]).len()).sum()
}

fn push(c: &mut Criterion) {
    let dir = namespace();
    let svcs = services(&dir);
    let mut g = c.benchmark_group("push_100x1000");
    let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
    let mut encoder = topdeck_export::otlp::Encoder::new("bench");
    let parts = push_batch(&mut scraper, &mut encoder);
    let (raw, zipped) = (total(&parts), gzipped_total(&parts));
    let scraped = scraper.scrape_body(Format::Protobuf).unwrap().1.len();
    eprintln!(
        "push_100x1000: {raw} bytes of OTLP protobuf ({:.1} MB) in {} requests, {zipped} gzipped \
         ({:.1}x smaller); a protobuf scrape of the same: {scraped} bytes",
        raw as f64 / 1e6,
        parts.len(),
        raw as f64 / zipped as f64,
    );
    // Where a push's time goes: gather (listing and snapshots, as a
    // scrape), building the messages, encoding them.
    let now = 1_800_000_000_000_000_000;
    let gather = thread_cpu_per_call(20, || {
        black_box(scraper.gather().report.series);
    });
    let gathered = scraper.gather();
    // Built afresh (a new reader's first request), then updated in place
    // (every later request of the same readers).
    let fresh = thread_cpu_per_call(20, || {
        black_box(
            topdeck_export::otlp::Encoder::new("bench")
                .request(&gathered, &[], now)
                .points,
        );
    });
    let build = thread_cpu_per_call(20, || {
        let batch = encoder.request(&gathered, &[], now);
        black_box(batch.points);
        encoder.recycle(batch);
    });
    let batch = encoder.request(&gathered, &[], now);
    let encode = thread_cpu_per_call(20, || {
        black_box(prost::Message::encode_to_vec(&batch.request).len());
    });
    eprintln!(
        "push_100x1000 phases: gather {:.2} ms, build afresh {:.2} ms, update in place {:.2} ms, \
         encode {:.2} ms (medians of 20)",
        gather.as_secs_f64() * 1e3,
        fresh.as_secs_f64() * 1e3,
        build.as_secs_f64() * 1e3,
        encode.as_secs_f64() * 1e3
    );
    encoder.recycle(batch);
    drop(gathered);
    // CPU time of this thread, the push and the scrape interleaved so
    // both see the same machine.
    for round in 0..3 {
        let push_cpu = thread_cpu_per_call(20, || {
            black_box(total(&push_batch(&mut scraper, &mut encoder)));
        });
        let scrape_cpu = thread_cpu_per_call(20, || {
            black_box(scraper.scrape_body(Format::Protobuf).unwrap().1.len());
        });
        eprintln!(
            "push_100x1000 round {round}: push {:.2} ms, protobuf scrape {:.2} ms of this thread's \
             CPU time (medians of 20)",
            push_cpu.as_secs_f64() * 1e3,
            scrape_cpu.as_secs_f64() * 1e3
        );
    }
    g.bench_function("otlp_encode", |b| {
        b.iter(|| black_box(total(&push_batch(&mut scraper, &mut encoder))))
    });
    g.bench_function("otlp_encode_gzip", |b| {
        b.iter(|| black_box(gzipped_total(&push_batch(&mut scraper, &mut encoder))))
    });
    g.bench_function("protobuf_scrape", |b| {
        b.iter(|| black_box(scraper.scrape_body(Format::Protobuf).unwrap().1.len()))
    });
    g.finish();
    drop(svcs);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .sample_size(20);
    targets = anchor, scrape, writer, push
}
criterion_main!(benches);
