// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve` scraped by real Prometheus servers (the Debian
//! `prometheus` package, see scripts/deps.sh): one with default settings,
//! which negotiates OpenMetrics and stores classic buckets, and one with
//! `--enable-feature=native-histograms`, which negotiates protobuf and
//! stores native histograms. Prometheus 2.42 cannot keep both from one
//! scrape (`scrape_classic_histograms` came later), hence two servers.
//! Values are checked through Prometheus's HTTP API against what this
//! process recorded; the text exposition is checked by `promtool`.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use topdeck::Namespace;

use super::{corrupt_file, dead_registry, namespace, registry, text};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";
/// How long Prometheus gets to start and scrape; a guard against hanging,
/// not a timing claim (it usually takes 2-3 s).
const DEADLINE: Duration = Duration::from_secs(90);

/// Kills and reaps a child process when dropped, pass or fail.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `topdeck serve` on a free loopback port, reading `dir`, with `extra` arguments.
fn serve(dir: &Path, extra: &[&str]) -> (Reaped, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_topdeck"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("TOPDECK_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start topdeck serve");
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

/// A Prometheus server in its own temporary directory, stopped and removed
/// on drop (the guard is declared before the directory, so it goes first).
struct Prometheus {
    child: Reaped,
    api: String,
    log: PathBuf,
    _dir: TempDir,
}

impl Prometheus {
    fn start(target: &str, native_histograms: bool) -> Self {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: run scripts/deps.sh (apt-get install prometheus)"
        );
        let dir = tempfile::tempdir().expect("a directory for Prometheus");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: topdeck\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let port = free_port();
        let log = dir.path().join("prometheus.log");
        let mut cmd = Command::new(PROMETHEUS);
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("create the log"));
        if native_histograms {
            cmd.arg("--enable-feature=native-histograms");
        }
        let child = Reaped(cmd.spawn().expect("start prometheus"));
        Self {
            child,
            api: format!("http://127.0.0.1:{port}/api/v1/query"),
            log,
            _dir: dir,
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// The result vector of an instant query (empty while Prometheus starts).
    fn query(&mut self, q: &str) -> Vec<serde_json::Value> {
        if let Ok(Some(status)) = self.child.0.try_wait() {
            panic!("prometheus exited ({status}):\n{}", self.log_tail());
        }
        let body = match ureq::get(&self.api).query("query", q).call() {
            Ok(r) => r.into_string().expect("a response body"),
            // Not listening yet.
            Err(ureq::Error::Transport(_)) => return Vec::new(),
            Err(ureq::Error::Status(code, r)) => {
                panic!(
                    "query {q:?}: HTTP {code}: {}",
                    r.into_string().unwrap_or_default()
                )
            }
        };
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON from the API");
        assert_eq!(v["status"], "success", "query {q:?}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `q` has a result, and returns it.
    fn wait_for(&mut self, q: &str) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let r = self.query(q);
            if !r.is_empty() {
                return r;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no result for {q:?} after {DEADLINE:?}; Prometheus log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until the value of `q` is at least `min`. For what the endpoint
    /// says about itself: a scrape is counted in the next one.
    fn at_least(&mut self, q: &str, min: f64) {
        let start = Instant::now();
        loop {
            let v = self.value(q);
            if v >= min {
                return;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{q:?} is still {v} < {min} after {DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The one value of `q`.
    fn value(&mut self, q: &str) -> f64 {
        let r = self.wait_for(q);
        assert_eq!(r.len(), 1, "{q:?} has one series: {r:?}");
        r[0]["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{q:?} has a float value: {r:?}"))
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Exact quantile of the values this test records: 1, 2, ..., 1000 ms.
fn recorded_quantile(q: f64) -> f64 {
    (q * 1000.0).ceil() / 1000.0
}

/// Asserts `got` is within one bucket of schema 3 (a factor 2^(1/8)) of `want`.
fn assert_within_bucket(what: &str, got: f64, want: f64) {
    let factor = 2f64.powf(1.0 / 8.0);
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
    let (_serve, url) = serve(ns.path(), &["--gzip"]);
    let target = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned();

    // The text exposition passes promtool's parser and linter.
    let body = ureq::get(&url)
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

    let mut classic = Prometheus::start(&target, false);
    let mut native = Prometheus::start(&target, true);
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

    // Classic buckets, from OpenMetrics.
    assert_eq!(
        classic.value(&format!("request_duration_seconds_count{selector}")),
        1000.0
    );
    for q in [0.5, 0.9, 0.99] {
        let got = classic.value(&format!(
            "histogram_quantile({q}, request_duration_seconds_bucket{selector})"
        ));
        assert_within_bucket(&format!("classic p{q}"), got, recorded_quantile(q));
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
        assert_within_bucket(&format!("native p{q}"), got, recorded_quantile(q));
    }

    // Each server got the format it asked for.
    native.at_least("topdeck_scrapes_total{format=\"protobuf\"}", 1.0);
    classic.at_least("topdeck_scrapes_total{format=\"openmetrics\"}", 1.0);
    drop(r);
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
        Some(topdeck_export::text::CONTENT_TYPE)
    );
    assert!(text
        .into_string()
        .unwrap()
        .contains("# TYPE jobs_total counter\n"));

    let pb = get(topdeck_export::protobuf::CONTENT_TYPE);
    assert_eq!(
        pb.header("Content-Type"),
        Some(topdeck_export::protobuf::CONTENT_TYPE)
    );
    let mut bytes = Vec::new();
    pb.into_reader().read_to_end(&mut bytes).unwrap();
    let mut rest = &bytes[..];
    let mut names = Vec::new();
    while !rest.is_empty() {
        let f =
            <topdeck_export::protobuf::MetricFamily as prost::Message>::decode_length_delimited(
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
