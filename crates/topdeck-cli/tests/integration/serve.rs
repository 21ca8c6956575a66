// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve` scraped by real Prometheus servers (the Debian
//! `prometheus` package, see scripts/deps.sh): one with default settings,
//! which negotiates OpenMetrics and stores classic buckets, and one with
//! `--enable-feature=native-histograms`, which negotiates protobuf and
//! stores native histograms. Prometheus 2.42 cannot keep both from one
//! scrape (`scrape_classic_histograms` came later), hence two servers.
//! Values are checked through Prometheus's HTTP API against what this
//! process recorded; the text exposition is checked by `promtool`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use topdeck::Namespace;

pub(super) use super::prometheus::{free_port, Reaped};
use super::prometheus::{Job, Prometheus};
use super::{corrupt_file, dead_registry, namespace, registry, text};

const PROMTOOL: &str = "/usr/bin/promtool";

/// `topdeck serve` on a free loopback port, reading `dir`, with `extra` arguments.
pub(super) fn serve(dir: &Path, extra: &[&str]) -> (Reaped, String) {
    start(serve_command(dir, extra))
}

fn serve_command(dir: &Path, extra: &[&str]) -> Command {
    serve_on(dir, "127.0.0.1:0", extra)
}

/// `topdeck serve --listen listen extra...` reading `dir`.
fn serve_on(dir: &Path, listen: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_topdeck"));
    super::with_default_signals(&mut cmd);
    cmd.args(["serve", "--listen", listen])
        .args(extra)
        .env("TOPDECK_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Starts `cmd` (a `serve_command`) and reads the address it listens on.
fn start(mut cmd: Command) -> (Reaped, String) {
    let mut child = cmd.spawn().expect("start topdeck serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the address line");
    let mut guard = Reaped(child);
    let Some(url) = line.trim().strip_prefix("listening on ") else {
        let mut err = String::new();
        let _ = guard
            .0
            .stderr
            .take()
            .map(|mut e| e.read_to_string(&mut err));
        panic!("topdeck serve did not start: {line:?}\n{err}");
    };
    (guard, url.to_owned())
}

/// Exact quantile of the values this test records: 1, 2, ..., 1000 ms.
fn recorded_quantile(q: f64) -> f64 {
    (q * 1000.0).ceil() / 1000.0
}

/// Asserts `got` is within one bucket of `schema` (a factor 2^(2^-schema))
/// of `want`: native buckets are the writer's (schema 3), classic ones of
/// seconds one per power of two (topdeck_export::histogram::ClassicBounds).
fn assert_within_bucket(what: &str, schema: i32, got: f64, want: f64) {
    let factor = 2f64.powf(2f64.powi(-schema));
    assert!(
        got > want / factor && got < want * factor,
        "{what}: {got} is not within a factor {factor:.4} of {want}"
    );
}

#[test]
fn prometheus_scrapes_counters_gauges_and_both_kinds_of_histograms() {
    let ns = namespace();
    // Two files to skip, made before the endpoint starts: a crashed
    // writer's and a corrupt one.
    dead_registry(ns.path());
    corrupt_file(ns.path());

    let r = registry(ns.path(), "main");
    r.counter("jobs_total", &[("queue", "fast")], "Jobs done.", "")
        .unwrap()
        .add(42);
    r.gauge("queue_depth", &[], "Jobs waiting.", "")
        .unwrap()
        .set(-7);
    let latency = r
        .histogram(
            "request_duration_seconds",
            &[],
            "Time to serve a request.",
            "seconds",
        )
        .unwrap();
    for ms in 1..=1000 {
        latency.record(f64::from(ms) / 1000.0);
    }
    let me = Namespace::at(ns.path())
        .list()
        .entries
        .into_iter()
        .find(|e| e.pid == std::process::id())
        .expect("this process's registry is listed");

    // Prometheus asks for gzip: the compressed path is scraped too.
    let (_serve, mut classic, mut native) = scraped_by_both(ns.path(), &["--gzip"]);
    let selector = format!(
        "{{process=\"{}\",pid=\"{}\"}}",
        me.process_name,
        std::process::id()
    );

    for p in [&mut classic, &mut native] {
        assert_eq!(p.value(&format!("jobs_total{selector}")), 42.0);
        assert_eq!(p.value(&format!("queue_depth{selector}")), -7.0);
        // The dead writer's jobs_total (4242) is not exported.
        assert_eq!(p.value("count(jobs_total)"), 1.0);
        p.at_least("sum(topdeck_scrape_errors_total{reason=\"dead\"})", 1.0);
        p.at_least("sum(topdeck_scrape_errors_total{reason=\"corrupt\"})", 1.0);
        p.at_least("sum(topdeck_scrapes_total)", 1.0);
    }
    // The endpoint's own duration histogram, in each representation.
    classic.at_least("topdeck_scrape_duration_seconds_count", 1.0);
    native.at_least("histogram_count(topdeck_scrape_duration_seconds)", 1.0);

    // Classic buckets, from OpenMetrics: 1000 values over 80 buckets of
    // the writer's, stored as the 32 fixed bounds of seconds and +Inf.
    assert_eq!(
        classic.value(&format!("request_duration_seconds_count{selector}")),
        1000.0
    );
    assert_eq!(
        classic.value(&format!("count(request_duration_seconds_bucket{selector})")),
        f64::from(topdeck_export::histogram::MAX_CLASSIC_BOUNDS + 1)
    );
    for q in [0.5, 0.9, 0.99] {
        let got = classic.value(&format!(
            "histogram_quantile({q}, request_duration_seconds_bucket{selector})"
        ));
        assert_within_bucket(&format!("classic p{q}"), 0, got, recorded_quantile(q));
    }

    // The native histogram, from protobuf: stored as one histogram series,
    // with no classic bucket series beside it.
    let h = native.wait_for(&format!("request_duration_seconds{selector}"));
    assert_eq!(h[0]["histogram"][1]["count"], "1000", "{h:?}");
    assert!(native.query("request_duration_seconds_bucket").is_empty());
    assert_eq!(
        native.value(&format!(
            "histogram_count(request_duration_seconds{selector})"
        )),
        1000.0
    );
    for q in [0.5, 0.9, 0.99] {
        let got = native.value(&format!(
            "histogram_quantile({q}, request_duration_seconds{selector})"
        ));
        assert_within_bucket(&format!("native p{q}"), 3, got, recorded_quantile(q));
    }

    // Each server got the format it asked for.
    native.at_least("topdeck_scrapes_total{format=\"protobuf\"}", 1.0);
    classic.at_least("topdeck_scrapes_total{format=\"openmetrics\"}", 1.0);
    drop(r);
}

/// `topdeck serve` of `dir` with `extra` arguments, its text checked by
/// promtool, and both Prometheus servers scraping it.
fn scraped_by_both(dir: &Path, extra: &[&str]) -> (Reaped, Prometheus, Prometheus) {
    let (serve, url) = serve(dir, extra);
    promtool_accepts(&url);
    let target = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned();
    let classic = Prometheus::start(&target, false);
    let native = Prometheus::start(&target, true);
    (serve, classic, native)
}

/// The text exposition at `url` passes promtool's parser and linter.
pub(super) fn promtool_accepts(url: &str) {
    let body = ureq::get(url)
        .set("Accept", "text/plain; version=0.0.4")
        .call()
        .expect("GET /metrics")
        .into_string()
        .expect("a text body");
    let mut promtool = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool (scripts/deps.sh installs it with prometheus)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}\n{}\n{}\n--- exposition:\n{body}",
        checked.status,
        text(&checked.stdout),
        text(&checked.stderr)
    );
}

/// A prometheus_client worker in multiprocess mode: worker `n` counts `n`
/// jobs, sets a `livesum` gauge to `n`, observes 0.1 s `n` times and a
/// size of `100 n`; then exits, or waits for its stdin to close.
const PYTHON_WORKER: &str = r#"
import sys
from prometheus_client import Counter, Gauge, Histogram, Summary
n = int(sys.argv[1])
Counter("py_jobs", "Jobs done.", ["queue"]).labels("fast").inc(n)
Gauge("py_inflight", "Requests in flight.", multiprocess_mode="livesum").set(n)
h = Histogram("py_latency_seconds", "Time to serve.")
for _ in range(n):
    h.observe(0.1)
Summary("py_size_bytes", "Request sizes.").observe(100 * n)
print("ready", flush=True)
if sys.argv[2] == "stay":
    sys.stdin.read()
"#;

/// The venv's python with prometheus_client (scripts/reach/prommp.sh), or
/// `None` (with the reason printed) outside CI; in CI its absence fails.
pub(crate) fn prommp_python() -> Option<PathBuf> {
    super::reach_tool(
        super::topdeck_cache().join("prommp/venv-prometheus_client-0.26.0/bin/python"),
        "scripts/reach/prommp.sh",
    )
}

#[test]
fn prometheus_scrapes_python_workers_merged_from_their_multiprocess_files() {
    let Some(py) = prommp_python() else { return };
    let ns = namespace();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("worker.py");
    std::fs::write(&script, PYTHON_WORKER).unwrap();
    let files = dir.path().join("metrics");
    std::fs::create_dir(&files).unwrap();
    let start = |n: u32, stay: &str| {
        let mut child = Command::new(&py)
            .arg(&script)
            .arg(n.to_string())
            .arg(stay)
            .env("PROMETHEUS_MULTIPROC_DIR", &files)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a python worker");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        Reaped(child)
    };
    // Workers 1 and 2 have exited: their counts stay, their live gauge goes.
    for n in [1, 2] {
        let mut w = start(n, "exit");
        assert!(w.0.wait().unwrap().success());
    }
    let _live = start(3, "stay");

    let (_serve, mut classic, mut native) =
        scraped_by_both(ns.path(), &["--prommp", files.to_str().unwrap()]);
    let python = "{source=\"python\"}";
    for p in [&mut classic, &mut native] {
        assert_eq!(
            p.value(r#"py_jobs_total{source="python",queue="fast"}"#),
            6.0
        );
        assert_eq!(
            p.value(&format!("py_inflight{python}")),
            3.0,
            "livesum of the live worker"
        );
        assert_eq!(p.value(&format!("py_latency_seconds_count{python}")), 6.0);
        // Summed in directory order, as upstream sums: the last bit varies.
        let sum = p.value(&format!("py_latency_seconds_sum{python}"));
        assert!((sum - 0.6).abs() < 1e-12, "{sum}");
        assert_eq!(
            p.value(r#"py_latency_seconds_bucket{source="python",le="0.1"}"#),
            6.0
        );
        assert_eq!(
            p.value(&format!(
                "histogram_quantile(1, py_latency_seconds_bucket{python})"
            )),
            0.1
        );
        assert_eq!(p.value(&format!("py_size_bytes_count{python}")), 3.0);
        assert_eq!(p.value(&format!("py_size_bytes_sum{python}")), 600.0);
    }
}

#[test]
fn serve_answers_each_format_gzip_and_wrong_requests() {
    let ns = namespace();
    let r = registry(ns.path(), "main");
    r.counter("jobs_total", &[], "Jobs done.", "")
        .unwrap()
        .add(5);
    let (_serve, url) = serve(ns.path(), &["--gzip"]);
    let get = |accept: &str| {
        ureq::get(&url)
            .set("Accept", accept)
            .call()
            .expect("GET /metrics")
    };

    let om = get("application/openmetrics-text; version=1.0.0");
    assert!(om
        .content_type()
        .starts_with("application/openmetrics-text"));
    let body = om.into_string().unwrap();
    assert!(body.contains("# TYPE jobs counter\n"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    let text = get("text/plain; version=0.0.4");
    assert_eq!(
        text.header("Content-Type"),
        Some(topdeck_export::Format::Text.content_type())
    );
    assert!(text
        .into_string()
        .unwrap()
        .contains("# TYPE jobs_total counter\n"));

    let pb = get(topdeck_export::Format::Protobuf.content_type());
    assert_eq!(
        pb.header("Content-Type"),
        Some(topdeck_export::Format::Protobuf.content_type())
    );
    let mut bytes = Vec::new();
    pb.into_reader().read_to_end(&mut bytes).unwrap();
    let mut rest = &bytes[..];
    let mut names = Vec::new();
    while !rest.is_empty() {
        let f =
            <topdeck_export::client_model::MetricFamily as prost::Message>::decode_length_delimited(
                &mut rest,
            )
            .expect("delimited MetricFamily messages");
        names.push(f.name);
    }
    assert!(names.iter().any(|n| n == "jobs_total"), "{names:?}");

    // gzip when asked for, and the same exposition inside.
    let z = ureq::get(&url)
        .set("Accept", "text/plain")
        .set("Accept-Encoding", "gzip")
        .call()
        .unwrap();
    assert_eq!(z.header("Content-Encoding"), Some("gzip"));
    let mut unzipped = String::new();
    flate2::read::GzDecoder::new(z.into_reader())
        .read_to_string(&mut unzipped)
        .expect("a gzip body");
    assert!(unzipped.contains("jobs_total{process="), "{unzipped}");
    // Without --gzip, the same request is answered uncompressed.
    let (_plain, plain_url) = serve(ns.path(), &[]);
    let plain = ureq::get(&plain_url)
        .set("Accept-Encoding", "gzip")
        .call()
        .unwrap();
    assert_eq!(plain.header("Content-Encoding"), None);
    assert!(plain.into_string().unwrap().contains("jobs_total{process="));

    let status = |r: Result<ureq::Response, ureq::Error>| match r {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("{e}"),
    };
    let base = url.trim_end_matches("/metrics");
    assert_eq!(status(ureq::get(base).call()), 200);
    assert_eq!(status(ureq::get(&format!("{base}/nothing")).call()), 404);
    assert_eq!(status(ureq::post(&url).call()), 405);
    assert_eq!(status(ureq::head(&url).call()), 200);
    drop(r);
}

#[test]
fn serve_says_why_it_cannot_listen() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().unwrap();
    let ns = namespace();
    let out = Command::new(env!("CARGO_BIN_EXE_topdeck"))
        .args(["serve", "--listen", &addr.to_string()])
        .env("TOPDECK_DIR", ns.path())
        .output()
        .expect("run topdeck serve");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    let bad = Command::new(env!("CARGO_BIN_EXE_topdeck"))
        .args(["serve", "--listen", "localhost"])
        .output()
        .expect("run topdeck serve");
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("--listen"),
        "{}",
        text(&bad.stderr)
    );
}

// Hostile clients. Each test attacks a real `topdeck serve` and asserts on
// what must hold whatever the machine's speed: scrapes from a well-behaved
// client succeed during or right after the attack, the process and its
// listener live on, and its threads, descriptors and memory stay bounded.
// How fast those scrapes are is measured by bench/serve_attacks.sh.

/// Guard against hanging while waiting for the server to settle; not a
/// timing claim (the server's own timeouts are 10 s).
const SETTLE: Duration = Duration::from_secs(45);

/// A field of /proc/PID/status, as a number (`Threads`, `VmRSS` in kB).
fn status(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's status");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Open descriptors of `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the server's descriptors")
        .count()
}

/// Waits until `ok()`, for at most [`SETTLE`]; says whether it came true.
fn settles(mut ok: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !ok() {
        if start.elapsed() > SETTLE {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// The address part of a `http://ADDR/metrics` URL.
fn addr(url: &str) -> std::net::SocketAddr {
    url.trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .parse()
        .expect("an address")
}

/// One scrape by a well-behaved client; the exposition must name `metric`.
fn scrape(url: &str, metric: &str) -> Result<(), String> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .build();
    let body = agent
        .get(url)
        .call()
        .map_err(|e| e.to_string())?
        .into_string()
        .map_err(|e| e.to_string())?;
    match body.contains(metric) {
        true => Ok(()),
        false => Err(format!("{metric} missing from the exposition")),
    }
}

/// A namespace with one registry counting `jobs_total` 1: what each attack
/// test scrapes for.
fn jobs_namespace() -> (tempfile::TempDir, topdeck::Registry) {
    let ns = namespace();
    let r = registry(ns.path(), "main");
    r.counter("jobs_total", &[], "Jobs done.", "")
        .unwrap()
        .add(1);
    (ns, r)
}

/// Asserts the server process still runs.
fn alive(serve: &mut Reaped) {
    if let Ok(Some(status)) = serve.0.try_wait() {
        let mut err = String::new();
        let _ = serve
            .0
            .stderr
            .take()
            .map(|mut e| e.read_to_string(&mut err));
        panic!("topdeck serve exited ({status}):\n{err}");
    }
}

#[test]
fn serve_outlives_running_out_of_descriptors() {
    let (ns, r) = jobs_namespace();
    let more: Vec<_> = (0..24)
        .map(|i| registry(ns.path(), &format!("more{i}")))
        .collect();
    // serve raises its soft limit to the hard one: lower both; and allow
    // more connections than descriptors, so that it does run out.
    let mut cmd = serve_command(ns.path(), &["--max-connections", "1000"]);
    // SAFETY: setrlimit is async-signal-safe, and the closure touches
    // nothing else of the parent's.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let limit = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        })
    };
    let (mut serve, url) = start(cmd);
    let pid = serve.0.id();
    scrape(&url, "jobs_total{").expect("a scrape before the attack");

    // Many more connections than the server has descriptors, each with
    // the start of a request (a connection that sends nothing is never
    // accepted: TCP_DEFER_ACCEPT); some wait in the listen backlog, some
    // are accepted and closed again.
    let idle: Vec<_> = (0..300)
        .filter_map(|_| {
            let mut c =
                std::net::TcpStream::connect_timeout(&addr(&url), Duration::from_secs(1)).ok()?;
            c.write_all(b"GET /metrics HTTP/1.1\r\n").ok()?;
            Some(c)
        })
        .collect();
    assert!(idle.len() > 64, "only {} connections opened", idle.len());
    for i in 0..20 {
        scrape(&url, "jobs_total{").unwrap_or_else(|e| panic!("scrape {i} under attack: {e}"));
    }
    alive(&mut serve);
    assert!(fds(pid) <= 64);
    drop(idle);
    scrape(&url, "jobs_total{").expect("a scrape after the attack");
    alive(&mut serve);
    // It did run out, and said so.
    // SAFETY: kill only sends a signal to the child we started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let out = serve.0.wait().expect("wait for serve");
    let mut err = String::new();
    let _ = serve
        .0
        .stderr
        .take()
        .map(|mut e| e.read_to_string(&mut err));
    assert_eq!(out.signal(), Some(libc::SIGTERM), "{out}\n{err}");
    assert!(err.contains("out of file descriptors"), "{err}");
    drop((more, r));
}

#[test]
fn serve_sheds_a_flood_of_http2_request_lines() {
    let (ns, r) = jobs_namespace();
    let (mut serve, url) = serve(ns.path(), &[]);
    let pid = serve.0.id();
    scrape(&url, "jobs_total{").expect("a scrape before the attack");
    let (threads, open) = (status(pid, "Threads"), fds(pid));

    // Four clients send 500 each, every one on its own connection, which
    // the client closes without reading.
    let flood: Vec<_> = (0..4)
        .map(|_| {
            let to = addr(&url);
            std::thread::spawn(move || {
                for _ in 0..500 {
                    let mut c = std::net::TcpStream::connect(to).expect("connect");
                    let _ = c.write_all(b"GET /metrics HTTP/2.0\r\n\r\n");
                }
            })
        })
        .collect();
    for f in flood {
        f.join().expect("a flooding client");
    }
    scrape(&url, "jobs_total{").expect("a scrape after the flood");
    alive(&mut serve);
    // No thread or descriptor per connection outlives it: at most the
    // blocking thread that scrapes, started by the scrape above.
    assert!(
        status(pid, "Threads") <= threads.max(3),
        "{} threads, {threads} before",
        status(pid, "Threads")
    );
    assert!(
        settles(|| fds(pid) <= open + 2),
        "{} descriptors open, {open} before",
        fds(pid)
    );
    drop(r);
}

#[test]
fn serve_answers_others_while_a_client_does_not_read() {
    let ns = namespace();
    let r = registry(ns.path(), "main");
    // A body of about 100 KB, so that pipelined responses fill the socket.
    let counters: Vec<_> = (0..1000)
        .map(|i| {
            let c = r
                .counter(&format!("jobs_{i}_total"), &[], "Jobs done.", "")
                .unwrap();
            c.add(i);
            c
        })
        .collect();
    let (mut serve, url) = serve(ns.path(), &[]);
    scrape(&url, "jobs_999_total{").expect("a scrape before the attack");

    // Requests pipelined until the server stops reading them, because its
    // responses are not read either.
    let mut stalled = std::net::TcpStream::connect(addr(&url)).expect("connect");
    stalled
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut sent = 0usize;
    let blocked = loop {
        match stalled.write(request) {
            Ok(n) => sent += n,
            Err(e) => break e,
        }
        assert!(sent < 1 << 30, "the server read 1 GiB of requests");
    };
    assert!(
        matches!(
            blocked.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{blocked}"
    );
    // The stalled client holds its response, not the scraper.
    for i in 0..20 {
        scrape(&url, "jobs_999_total{")
            .unwrap_or_else(|e| panic!("scrape {i} while a client does not read: {e}"));
    }
    alive(&mut serve);
    // Then the server gives up on it and resets its connection (its
    // requests unread), which the next write here sees.
    stalled
        .set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(
        settles(|| stalled.write(request).is_err_and(|e| matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ))),
        "the server still holds the connection that does not read"
    );
    drop((stalled, counters, r));
}

#[test]
fn serve_rejects_a_huge_header() {
    let (ns, r) = jobs_namespace();
    let (mut serve, url) = serve(ns.path(), &[]);
    let pid = serve.0.id();
    scrape(&url, "jobs_total{").expect("a scrape before the attack");

    // A 100 MB header line, streamed.
    let mut c = std::net::TcpStream::connect(addr(&url)).expect("connect");
    c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nX-Big: ").unwrap();
    let chunk = vec![b'a'; 64 << 10];
    let mut sent = 0usize;
    let mut refused = None;
    while sent < 100 << 20 {
        match c.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.unwrap_or_else(|| panic!("the server read all {sent} bytes"));
    assert!(sent < 100 << 20, "{sent} bytes sent before: {refused}");
    alive(&mut serve);
    let rss_kb = status(pid, "VmRSS");
    assert!(rss_kb < 64 << 10, "{rss_kb} kB resident");
    scrape(&url, "jobs_total{").expect("a scrape after the attack");
    drop(r);
}

/// It stops as every command does (crate::stop): dying of the signal, so
/// that `$?` is 128 + signal and a supervisor sees which.
#[test]
fn serve_dies_of_sigterm_sigint_and_sighup() {
    let ns = namespace();
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let (mut serve, url) = serve(ns.path(), &[]);
        scrape(&url, "topdeck_scrape_registries").expect("a scrape");
        // SAFETY: kill only sends a signal to the child we started.
        assert_eq!(unsafe { libc::kill(serve.0.id() as i32, sig) }, 0);
        let start = Instant::now();
        let status = loop {
            if let Some(s) = serve.0.try_wait().expect("wait for serve") {
                break s;
            }
            assert!(start.elapsed() < SETTLE, "still running after signal {sig}");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.signal(), Some(sig), "signal {sig}: {status}");
    }
}

/// Started with SIGHUP ignored (`nohup topdeck serve`), it keeps ignoring
/// it, as every command does; SIGTERM still ends it.
#[test]
fn serve_under_nohup_outlives_a_hangup() {
    let ns = namespace();
    let mut cmd = serve_command(ns.path(), &[]);
    // SAFETY: signal(2) is async-signal-safe and touches only the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        })
    };
    let (mut serve, url) = start(cmd);
    // SAFETY: kill only sends a signal to the child we started.
    assert_eq!(unsafe { libc::kill(serve.0.id() as i32, libc::SIGHUP) }, 0);
    scrape(&url, "topdeck_scrape_registries").expect("a scrape after the hangup");
    alive(&mut serve);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(serve.0.id() as i32, libc::SIGTERM) }, 0);
    let status = serve.0.wait().expect("wait for serve");
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}");
}

#[test]
fn serve_holds_no_descriptor_per_registry() {
    let ns = namespace();
    // A user who makes a thousand small registries: one descriptor each
    // would run a 1024-fd process out of them.
    let registries: Vec<_> = (0..1000)
        .map(|i| {
            let r = topdeck::Registry::builder()
                .dir(ns.path())
                .name(format!("tiny{i}"))
                .metrics(1)
                .string_bytes(4096)
                .gauge_bytes(4096)
                .shard_bytes(4096)
                .shards(1)
                .build()
                .unwrap();
            r.counter("tiny_total", &[], "", "").unwrap().inc();
            r
        })
        .collect();
    let (serve, url) = serve(ns.path(), &[]);
    // Opening a thousand registries may take a loaded machine more than
    // one user's share of a scrape (250 ms): the rest are left out and
    // opened by the next scrapes, the ones already open are kept.
    let all = (0..30).find(|_| scrape(&url, "topdeck_scrape_registries 1000\n").is_ok());
    assert!(
        all.is_some(),
        "30 scrapes never exported the 1000 registries"
    );
    scrape(&url, "topdeck_scrape_registries 1000\n").unwrap();
    let open = fds(serve.0.id());
    assert!(
        open < 64,
        "serve holds {open} descriptors for 1000 registries"
    );
    drop(registries);
}

/// A file holding `token`, with `mode`.
fn token_file(dir: &Path, name: &str, token: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A token no other run shares.
fn fresh_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("td-{nanos:x}-{}", std::process::id())
}

#[test]
fn serve_answers_only_requests_that_carry_its_bearer_token() {
    let (ns, r) = jobs_namespace();
    let secrets = tempfile::tempdir().unwrap();
    let token = fresh_token();
    let file = token_file(secrets.path(), "serve.token", &token, 0o600);
    let (mut serve, url) = serve(ns.path(), &["--bearer-token-file", file.to_str().unwrap()]);
    let get = |auth: Option<&str>| {
        let mut req = ureq::get(&url);
        if let Some(a) = auth {
            req = req.set("Authorization", a);
        }
        match req.call() {
            Ok(r) => (r.status(), None, r.into_string().unwrap()),
            Err(ureq::Error::Status(code, r)) => (
                code,
                r.header("WWW-Authenticate").map(str::to_owned),
                r.into_string().unwrap(),
            ),
            Err(e) => panic!("{e}"),
        }
    };
    let wrong = format!("Bearer {token}x");
    for auth in [None, Some("Bearer nope"), Some(wrong.as_str())] {
        let (status, challenge, body) = get(auth);
        assert_eq!(status, 401, "{auth:?}: {body}");
        assert_eq!(challenge.as_deref(), Some("Bearer realm=\"topdeck\""));
        assert!(body.contains("--bearer-token-file"), "{body}");
    }
    let bearer = format!("Bearer {token}");
    let (status, _, first) = get(Some(&bearer));
    assert_eq!(status, 200, "{first}");
    assert!(first.contains("jobs_total{"), "{first}");
    // The refused requests did no scrape: the second counts only the first.
    let (_, _, second) = get(Some(&bearer));
    let scrapes: f64 = second
        .lines()
        .filter(|l| l.starts_with("topdeck_scrapes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(scrapes, 1.0, "{second}");

    // A real Prometheus sends it from a credentials_file; one without is
    // refused (its target down).
    let target = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned();
    let theirs = token_file(secrets.path(), "prometheus.token", &token, 0o600);
    let mut with = Prometheus::scraping(Job {
        credentials_file: Some(&theirs),
        ..Job::of(&target)
    });
    let mut without = Prometheus::start(&target, false);
    assert_eq!(with.value("sum(jobs_total)"), 1.0);
    assert_eq!(with.value("up"), 1.0);
    assert_eq!(without.value("up"), 0.0);
    assert!(without.query("jobs_total").is_empty());
    alive(&mut serve);

    // A token file others can read is refused, with what to do.
    let open = token_file(secrets.path(), "open.token", &token, 0o644);
    let out = Command::new(env!("CARGO_BIN_EXE_topdeck"))
        .args(["serve", "--listen", "127.0.0.1:0", "--bearer-token-file"])
        .arg(&open)
        .env("TOPDECK_DIR", ns.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("readable by others") && err.contains("chmod o-rw"),
        "{err}"
    );
    drop(r);
}

/// `curl --unix-socket socket http://localhost/metrics`, as `uid:gid` if
/// given (through setpriv): its exit status and output.
fn curl_unix(socket: &Path, as_user: Option<(u32, u32)>) -> (Option<i32>, String) {
    let mut cmd = match as_user {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
                "--",
                "curl",
            ]);
            c
        }
        None => Command::new("curl"),
    };
    let out = cmd
        .args(["-sS", "--max-time", "20", "--unix-socket"])
        .arg(socket)
        .arg("http://localhost/metrics")
        .output()
        .expect("run curl");
    (
        out.status.code(),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

#[test]
fn serve_on_a_unix_socket_answers_its_owner_and_group_alone() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let (ns, r) = jobs_namespace();
    let dir = tempfile::tempdir().unwrap();
    // Anyone may reach the socket's name: only its mode keeps them out.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("metrics.sock");
    let listen = format!("unix:{}", socket.display());
    let (mut serve, said) = start(serve_on(ns.path(), &listen, &[]));
    assert_eq!(said, listen);
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o600);
    let (code, body) = curl_unix(&socket, None);
    assert_eq!(code, Some(0), "{body}");
    assert!(body.contains("jobs_total{"), "{body}");

    // Another user (nobody) cannot connect; in the socket's group, it can.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let nobody = (65534, 65534);
        let (code, out) = curl_unix(&socket, Some(nobody));
        assert_eq!(code, Some(7), "curl could connect: {out}");
        assert!(!out.contains("jobs_total"), "{out}");
        let shared = dir.path().join("group.sock");
        let (_group, _) = start(serve_on(
            ns.path(),
            &format!("unix:{}", shared.display()),
            &["--socket-group", "65534"],
        ));
        let meta = std::fs::symlink_metadata(&shared).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, 65534));
        let (code, out) = curl_unix(&shared, Some(nobody));
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("jobs_total{"), "{out}");
    } else {
        eprintln!("SKIPPED: connecting as another user needs root");
    }

    // Killed, it leaves its socket; the next serve replaces it.
    serve.0.kill().unwrap();
    serve.0.wait().unwrap();
    assert!(std::fs::symlink_metadata(&socket).is_ok());
    let (_again, _) = start(serve_on(ns.path(), &listen, &[]));
    let (code, body) = curl_unix(&socket, None);
    assert_eq!(code, Some(0), "{body}");
    // While it listens, a second serve is refused; a file is never replaced.
    let busy = serve_on(ns.path(), &listen, &[]).output().unwrap();
    assert!(!busy.status.success());
    let err = text(&busy.stderr);
    assert!(err.contains("is in use"), "{err}");
    let file = dir.path().join("notes");
    std::fs::write(&file, "mine").unwrap();
    let refused = serve_on(ns.path(), &format!("unix:{}", file.display()), &[])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = text(&refused.stderr);
    assert!(err.contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    drop(r);
}
