// SPDX-License-Identifier: Apache-2.0
//! A real Prometheus server (the Debian `prometheus` package, see
//! scripts/deps.sh) scraping one target, asked through its HTTP API. Used
//! by the CLI's serve tests and, included as is (`#[path]`), by the hostile
//! users' tests in tests/, so both hold the endpoint to the same scraper.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub const PROMETHEUS: &str = "/usr/bin/prometheus";
/// How long Prometheus gets to start and scrape; a guard against hanging,
/// not a timing claim (it usually takes 2-3 s).
pub const DEADLINE: Duration = Duration::from_secs(90);

/// Kills and reaps a child process when dropped, pass or fail.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What Prometheus scrapes, and how.
pub struct Job<'a> {
    /// `host:port` of the endpoint.
    pub target: &'a str,
    /// `--enable-feature=native-histograms` (negotiates protobuf).
    pub native_histograms: bool,
    /// Sent as `Authorization: Bearer <its contents>` (`authorization:
    /// credentials_file:`).
    pub credentials_file: Option<&'a Path>,
    /// Scrape interval and timeout.
    pub interval: Duration,
}

impl<'a> Job<'a> {
    /// Every second, classic histograms, no credentials.
    pub fn of(target: &'a str) -> Self {
        Self {
            target,
            native_histograms: false,
            credentials_file: None,
            interval: Duration::from_secs(1),
        }
    }
}

/// A Prometheus server in its own temporary directory, stopped and removed
/// on drop (the guard is declared before the directory, so it goes first).
pub struct Prometheus {
    child: Reaped,
    api: String,
    log: PathBuf,
    _dir: TempDir,
}

impl Prometheus {
    pub fn start(target: &str, native_histograms: bool) -> Self {
        Self::scraping(Job {
            native_histograms,
            ..Job::of(target)
        })
    }

    pub fn scraping(job: Job<'_>) -> Self {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: run scripts/deps.sh (apt-get install prometheus)"
        );
        let dir = tempfile::tempdir().expect("a directory for Prometheus");
        let config = dir.path().join("prometheus.yml");
        let every = format!("{}ms", job.interval.as_millis());
        let authorization = job.credentials_file.map_or(String::new(), |f| {
            format!(
                "    authorization:\n      credentials_file: {}\n",
                f.display()
            )
        });
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n\
                 scrape_configs:\n  - job_name: topdeck\n{authorization}    static_configs:\n      - targets: ['{}']\n",
                job.target
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
        if job.native_histograms {
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

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// The result vector of an instant query (empty while Prometheus starts).
    pub fn query(&mut self, q: &str) -> Vec<serde_json::Value> {
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
    pub fn wait_for(&mut self, q: &str) -> Vec<serde_json::Value> {
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
    pub fn at_least(&mut self, q: &str, min: f64) {
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
    pub fn value(&mut self, q: &str) -> f64 {
        let r = self.wait_for(q);
        assert_eq!(r.len(), 1, "{q:?} has one series: {r:?}");
        number(&r[0])
    }

    /// Every value of `q` once it has any, by the value of `label`.
    pub fn values_by(&mut self, q: &str, label: &str) -> Vec<(String, f64)> {
        self.wait_for(q)
            .iter()
            .map(|s| {
                (
                    s["metric"][label].as_str().unwrap_or("").to_owned(),
                    number(s),
                )
            })
            .collect()
    }
}

/// The value of one series of a query's result.
fn number(series: &serde_json::Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a float value: {series:?}"))
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
