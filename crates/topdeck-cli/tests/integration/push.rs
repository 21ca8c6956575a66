// SPDX-License-Identifier: Apache-2.0
//! `topdeck push` against a real OpenTelemetry Collector (built by
//! scripts/reach/otelcol.sh): the collector's otlp receiver takes what
//! push sends, and its otlp_http exporter forwards it, as protobuf, to a
//! receiver in this test, which decodes what arrived. So every value is
//! checked after the collector parsed and re-encoded it.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use topdeck::{HistogramValue, Namespace, Value};
use topdeck_export::otlp::proto::collector::ExportMetricsServiceRequest;
use topdeck_export::otlp::proto::common::any_value;
use topdeck_export::otlp::proto::metrics::{
    metric::Data, number_data_point, Metric, NumberDataPoint, ResourceMetrics,
};

use super::serve::free_port;
use super::{namespace, reach_tool, registry, text, topdeck, topdeck_cache, with_default_signals};

/// The collector scripts/reach/otelcol.sh builds, or `None` (with the
/// reason printed) outside CI; in CI its absence fails.
pub(super) fn collector() -> Option<PathBuf> {
    reach_tool(
        topdeck_cache().join("otelcol/topdeck-otelcol-0.165.0"),
        "scripts/reach/otelcol.sh",
    )
}

/// Requests the collector forwarded, decoded, in arrival order.
pub(super) type Arrived = Arc<Mutex<Vec<ExportMetricsServiceRequest>>>;

/// An HTTP/1.1 receiver of OTLP protobuf requests, always answering 200.
fn sink() -> (u16, Arrived) {
    sink_at(0)
}

/// [`sink`] on `port` (0: any free one).
fn sink_at(port: u16) -> (u16, Arrived) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("a port for the sink");
    let port = listener.local_addr().unwrap().port();
    let arrived: Arrived = Arc::default();
    let a = Arc::clone(&arrived);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let a = Arc::clone(&a);
            std::thread::spawn(move || serve_requests(conn, &a));
        }
    });
    (port, arrived)
}

/// Reads requests off one keep-alive connection until it closes.
fn serve_requests(conn: TcpStream, arrived: &Arrived) {
    let mut w = conn.try_clone().expect("clone the connection");
    let mut r = BufReader::new(conn);
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().expect("a content length");
                }
            }
        }
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let request = ExportMetricsServiceRequest::decode(&body[..])
            .expect("the collector forwards protobuf (encoding: proto, compression: none)");
        arrived.lock().unwrap().push(request);
        let ok =
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if w.write_all(ok.as_bytes()).is_err() {
            return;
        }
    }
}

/// A running collector, killed when dropped.
struct Collector {
    child: Child,
}

impl Collector {
    /// Starts `bin` with an otlp receiver on `port`, forwarding to the
    /// sink at `sink`, and waits until it listens.
    fn start(bin: &Path, dir: &Path, port: u16, sink: u16) -> Self {
        let config = dir.join("collector.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers: {{otlp: {{protocols: {{http: {{endpoint: 127.0.0.1:{port}}}}}}}}}\n\
                 exporters:\n  otlp_http:\n    metrics_endpoint: http://127.0.0.1:{sink}/v1/metrics\n    \
                 encoding: proto\n    compression: none\n    retry_on_failure: {{enabled: false}}\n    \
                 sending_queue: {{enabled: false}}\n\
                 service:\n  telemetry: {{metrics: {{level: none}}}}\n  pipelines:\n    \
                 metrics: {{receivers: [otlp], exporters: [otlp_http]}}\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("collector.log")).unwrap();
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the collector");
        let c = Self { child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the collector did not listen within 30 s: {}",
                std::fs::read_to_string(dir.join("collector.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A namespace, a sink, and a collector forwarding to it.
pub(super) struct Rig {
    pub(super) ns: tempfile::TempDir,
    tmp: tempfile::TempDir,
    pub(super) arrived: Arrived,
    /// The collector's otlp receiver.
    port: u16,
    sink: u16,
    collector: Option<Collector>,
}

impl Rig {
    pub(super) fn start(bin: &Path) -> Self {
        let (sink, arrived) = sink();
        let mut rig = Self {
            ns: namespace(),
            tmp: tempfile::tempdir().unwrap(),
            arrived,
            port: free_port(),
            sink,
            collector: None,
        };
        rig.collector = Some(Collector::start(bin, rig.tmp.path(), rig.port, rig.sink));
        rig
    }

    pub(super) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

pub(super) fn string_attr<'a>(r: &'a ResourceMetrics, key: &str) -> Option<&'a str> {
    r.resource
        .as_ref()?
        .attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        })
}

pub(super) fn find_metric<'a>(r: &'a ResourceMetrics, name: &str) -> Option<&'a Metric> {
    r.scope_metrics
        .iter()
        .flat_map(|s| &s.metrics)
        .find(|m| m.name == name)
}

/// The resource of `service` in `request`.
fn resource<'a>(
    request: &'a ExportMetricsServiceRequest,
    service: &str,
) -> Option<&'a ResourceMetrics> {
    request
        .resource_metrics
        .iter()
        .find(|r| string_attr(r, "service.name") == Some(service))
}

/// The points of a sum or gauge.
pub(super) fn number_points(m: &Metric) -> &[NumberDataPoint] {
    match &m.data {
        Some(Data::Sum(s)) => &s.data_points,
        Some(Data::Gauge(g)) => &g.data_points,
        other => panic!("{} is not a number: {other:?}", m.name),
    }
}

/// An integer sum's (or gauge's) value, the first point with `attrs`.
fn int_point(m: &Metric, label: Option<(&str, &str)>) -> i64 {
    let p = number_points(m)
        .iter()
        .find(|p| {
            label.is_none_or(|(k, v)| {
                p.attributes.iter().any(|kv| {
                    kv.key == k
                        && kv.value.as_ref().and_then(|a| a.value.as_ref())
                            == Some(&any_value::Value::StringValue(v.into()))
                })
            })
        })
        .unwrap_or_else(|| panic!("{} has no point {label:?}", m.name));
    match p.value {
        Some(number_data_point::Value::AsInt(n)) => n,
        other => panic!("{}: not an integer: {other:?}", m.name),
    }
}

/// Waits until `arrived` holds a request `f` accepts.
pub(super) fn wait_for(
    arrived: &Arrived,
    what: &str,
    f: impl Fn(&[ExportMetricsServiceRequest]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f(&arrived.lock().unwrap()) {
        assert!(Instant::now() < deadline, "waited 60 s for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Values recorded into the histogram: on bounds (powers of two are
/// bounds at every scale) and between them, repeated, and in the zero
/// bucket.
const RECORDED: [f64; 12] = [
    0.0, 0.000_7, 0.003, 0.003, 0.004, 0.125, 0.3, 0.3, 0.3, 1.0, 1.5, 40.0,
];

#[test]
fn a_collector_receives_the_counter_gauge_and_every_histogram_bucket_as_written() {
    let Some(bin) = collector() else { return };
    let rig = Rig::start(&bin);
    let (ns, arrived) = (&rig.ns, &rig.arrived);
    let reg = registry(ns.path(), "checkout");
    reg.counter("orders_total", &[("region", "eu")], "Orders.", "")
        .unwrap()
        .add(42);
    reg.gauge("queue_depth", &[], "Waiting.", "")
        .unwrap()
        .set(-7);
    let h = reg
        .histogram("pay_seconds", &[], "Time to pay.", "seconds")
        .unwrap();
    for v in RECORDED {
        h.record(v);
    }
    let entry = Namespace::at(ns.path()).list().entries.remove(0);
    let mut reader = topdeck::RegistryReader::open(reg.path()).unwrap();
    let Some(Value::Histogram(written)) =
        reader.snapshot().unwrap().get("pay_seconds", &[]).cloned()
    else {
        panic!("no histogram")
    };

    let out = topdeck(ns.path())
        .args(["push", "--once", "--endpoint", &rig.endpoint()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("pushed "),
        "{}",
        text(&out.stdout)
    );
    wait_for(arrived, "the forwarded request", |a| !a.is_empty());
    let requests = arrived.lock().unwrap();
    let r = resource(&requests[0], "checkout").expect("the checkout registry's resource");
    assert_eq!(string_attr(r, "topdeck.registry"), Some("checkout"));
    assert_eq!(
        string_attr(r, "process.executable.name"),
        Some(entry.process_name.as_str())
    );

    let orders = find_metric(r, "orders").expect("the counter, named without _total");
    let Some(Data::Sum(sum)) = &orders.data else {
        panic!("{orders:?}")
    };
    assert!(
        sum.is_monotonic && sum.aggregation_temporality == 2,
        "cumulative monotonic"
    );
    assert_eq!(int_point(orders, Some(("region", "eu"))), 42);
    assert_eq!(
        sum.data_points[0].start_time_unix_nano,
        entry.created_unix_ns
    );
    assert_eq!(int_point(find_metric(r, "queue_depth").unwrap(), None), -7);

    let pay = find_metric(r, "pay_seconds").unwrap();
    assert_eq!(pay.unit, "s");
    let Some(Data::ExponentialHistogram(e)) = &pay.data else {
        panic!("{pay:?}")
    };
    assert_eq!(e.aggregation_temporality, 2);
    let p = &e.data_points[0];
    assert_eq!(p.start_time_unix_nano, entry.created_unix_ns);
    assert_eq!(p.scale, i32::from(written.schema));
    assert_eq!(p.count, RECORDED.len() as u64);
    assert_eq!(p.sum, Some(RECORDED.iter().sum::<f64>()));
    assert_eq!(p.max, Some(40.0));
    assert_eq!(p.zero_threshold, written.zero_threshold);
    let zeros = RECORDED
        .iter()
        .filter(|&&v| v <= written.zero_threshold)
        .count();
    assert_eq!(p.zero_count, zeros as u64);
    let positive = p.positive.as_ref().expect("positive buckets");
    check_buckets(positive.offset, &positive.bucket_counts, p.scale, &written);
}

/// Every OTLP bucket against the writer's: bucket `k` (from `offset`)
/// must hold exactly the recorded values in `(base^k, base^(k+1)]`, and
/// the writer's bucket `i` must be OTLP's `i - 1`.
fn check_buckets(offset: i32, counts: &[u64], scale: i32, written: &HistogramValue) {
    // base^k as 2^(k / 2^scale): exact at powers of two, which are bounds.
    let bound = |k: i32| 2f64.powf(f64::from(k) / 2f64.powi(scale));
    let mut seen = 0;
    for (j, &n) in counts.iter().enumerate() {
        let k = offset + j as i32;
        let (lo, hi) = (bound(k), bound(k + 1));
        let inside = RECORDED
            .iter()
            .filter(|&&v| v > written.zero_threshold && lo < v && v <= hi)
            .count() as u64;
        assert_eq!(n, inside, "OTLP bucket {k} ({lo}, {hi}]");
        seen += n;
    }
    let positives = RECORDED
        .iter()
        .filter(|&&v| v > written.zero_threshold)
        .count() as u64;
    assert_eq!(seen, positives, "every value is in a sent bucket");
    let from_writer: Vec<(i32, u64)> = written
        .buckets
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(i, &n)| (written.min_index + i as i32 - 1, n))
        .collect();
    let sent: Vec<(i32, u64)> = counts
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(j, &n)| (offset + j as i32, n))
        .collect();
    assert_eq!(sent, from_writer);
}

/// The push's own counters in one request: `(batch number, dropped)`.
fn own_counts(request: &ExportMetricsServiceRequest) -> Option<(i64, i64)> {
    let r = resource(request, "topdeck-push")?;
    Some((
        int_point(find_metric(r, "topdeck_push_batches")?, None),
        int_point(
            find_metric(r, "topdeck_push_dropped")?,
            Some(("reason", "queue_full")),
        ),
    ))
}

#[test]
fn batches_made_while_the_collector_is_down_wait_in_the_queue_and_only_overflow_is_lost() {
    let Some(bin) = collector() else { return };
    const QUEUE: i64 = 4;
    let mut rig = Rig::start(&bin);
    let (tmp, arrived) = (rig.tmp.path().to_owned(), Arc::clone(&rig.arrived));
    let reg = registry(rig.ns.path(), "steady");
    let jobs = reg.counter("jobs_total", &[], "Jobs.", "").unwrap();
    jobs.add(1);

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_topdeck"));
    cmd.env("TOPDECK_DIR", rig.ns.path())
        .args([
            "push",
            "--interval",
            "200ms",
            "--queue",
            &QUEUE.to_string(),
            "--endpoint",
        ])
        .arg(rig.endpoint())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(tmp.join("push.log")).unwrap());
    let mut push = with_default_signals(&mut cmd).spawn().expect("start push");
    wait_for(&arrived, "two batches", |a| a.len() >= 2);

    // Down for 3 s: about 15 batches, of which the queue keeps 4.
    rig.collector = None;
    std::thread::sleep(Duration::from_secs(3));
    jobs.add(1000);
    rig.collector = Some(Collector::start(&bin, &tmp, rig.port, rig.sink));
    // Delivery resumes (after the backoff) and goes on for a while.
    wait_for(
        &arrived,
        "delivery after the outage with drops counted",
        |a| {
            a.iter()
                .filter_map(own_counts)
                .any(|(_, dropped)| dropped > 0)
        },
    );
    let resumed = arrived.lock().unwrap().len();
    wait_for(&arrived, "five more batches", |a| a.len() >= resumed + 5);
    // SAFETY: kill(2) on the child we started.
    unsafe { libc::kill(push.id() as i32, libc::SIGTERM) };
    let status = push.wait().unwrap();
    let log = std::fs::read_to_string(tmp.join("push.log")).unwrap();
    // It ends as the signal would, between two batches.
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM),
        "{status:?}: {log}"
    );

    let requests = arrived.lock().unwrap();
    let counts: Vec<(i64, i64)> = requests.iter().filter_map(own_counts).collect();
    let received: BTreeSet<i64> = counts.iter().map(|&(n, _)| n).collect();
    let (last, dropped) = *counts.iter().max().unwrap();
    assert!(
        dropped > 0,
        "the outage overflowed the queue: {counts:?}\n{log}"
    );
    // Every batch up to the last is delivered or counted as dropped.
    let missing: Vec<i64> = (1..=last).filter(|n| !received.contains(n)).collect();
    assert_eq!(
        missing.len() as i64,
        dropped,
        "lost batches {missing:?} against {dropped} counted\n{log}"
    );
    // What was lost is the oldest of the outage, in one run; the queue's
    // worth of batches after it was delivered.
    let (first, end) = (missing[0], *missing.last().unwrap());
    assert_eq!(end - first + 1, missing.len() as i64, "{missing:?}");
    assert!(
        (end + 1..=end + QUEUE).all(|n| received.contains(&n)),
        "the {QUEUE} batches kept by the queue arrived: {received:?}"
    );
    // The series itself lost nothing: the last batch holds the total.
    let last_request = requests
        .iter()
        .find(|r| own_counts(r).is_some_and(|(n, _)| n == last))
        .unwrap();
    let steady = resource(last_request, "steady").unwrap();
    assert_eq!(int_point(find_metric(steady, "jobs").unwrap(), None), 1001);
    assert!(log.contains("dropping the oldest"), "{log}");
    assert!(log.contains("again; the outage lasted"), "{log}");
    let per_batch: HashMap<i64, usize> = counts.iter().fold(HashMap::new(), |mut m, &(n, _)| {
        *m.entry(n).or_default() += 1;
        m
    });
    assert!(
        per_batch.values().all(|&c| c <= 2),
        "a batch sent over and over: {per_batch:?}"
    );
}

/// `topdeck push --once` to `url` with `extra` arguments: its stderr,
/// after it failed.
fn push_once_fails(url: &str, extra: &[&str]) -> String {
    let ns = namespace();
    let r = registry(ns.path(), "steady");
    r.counter("jobs_total", &[], "Jobs.", "").unwrap().add(1);
    let out = topdeck(ns.path())
        .args(["push", "--once", "--endpoint", url])
        .args(extra)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out.stdout));
    text(&out.stderr)
}

#[test]
fn a_receiver_that_never_answers_is_reported_as_a_timeout_of_its_length() {
    // Accepts (the kernel completes the connection) and never reads.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let err = push_once_fails(&url, &["--timeout", "1500ms"]);
    assert!(
        err.contains("timed out after 1s 500ms waiting for an answer"),
        "{err}"
    );
    drop(listener);
    // The same port, closed: refused, said as such.
    let err = push_once_fails(&url, &[]);
    assert!(
        err.contains(": connection refused (nothing listens"),
        "{err}"
    );
}

/// The points of the push's own `topdeck_push_dropped_points` in `request`.
fn dropped_points(request: &ExportMetricsServiceRequest) -> Option<i64> {
    let r = resource(request, "topdeck-push")?;
    Some(int_point(
        find_metric(r, "topdeck_push_dropped_points")?,
        None,
    ))
}

#[test]
fn the_end_of_an_outage_says_how_long_it_lasted_and_the_points_dropped_over_it() {
    let ns = namespace();
    let r = registry(ns.path(), "steady");
    r.counter("jobs_total", &[], "Jobs.", "").unwrap().add(1);
    let log = ns.path().join("push.log");
    // Nothing listens on the port yet: an outage from the start.
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_topdeck"));
    cmd.env("TOPDECK_DIR", ns.path())
        .args(["push", "--interval", "100ms", "--queue", "2", "--endpoint"])
        .arg(format!("http://127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut push = with_default_signals(&mut cmd).spawn().expect("start push");
    std::thread::sleep(Duration::from_millis(1500));
    let (_, arrived) = sink_at(port);
    let deadline = Instant::now() + Duration::from_secs(60);
    let line = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if let Some(l) = text.lines().find(|l| l.contains("the outage lasted")) {
            break l.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no end of the outage said:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // "... N requests of P points dropped over it": P is what the push's
    // own count of dropped points says once delivery resumed.
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "points")
        .unwrap_or_else(|| panic!("{line}"));
    let points: i64 = words[at - 1].parse().unwrap_or_else(|_| panic!("{line}"));
    assert!(points > 0, "the queue of 2 overflowed: {line}");
    wait_for(&arrived, "the dropped points counted", |a| {
        a.iter().filter_map(dropped_points).max() == Some(points)
    });
    // SAFETY: kill(2) on the child we started.
    unsafe { libc::kill(push.id() as i32, libc::SIGTERM) };
    let _ = push.wait();
    drop(r);
}
