// SPDX-License-Identifier: Apache-2.0
#![allow(missing_docs)]
//! The portholes' cost against what users run otherwise, in one run:
//!
//! - `prommp_100`, `prommp_1000`: a scrape of a prometheus_client
//!   multiprocess directory of 100 and 1,000 `*.db` files, written by the
//!   real prometheus_client (bench/prommp_anchor.py: short-lived workers
//!   that exit and are marked dead, as under a pre-forking server, plus two
//!   live ones). `topdeck` is `prommp::read_dir` + `Merged::to_text`;
//!   `prometheus_client` is `generate_latest` with a `MultiProcessCollector`,
//!   timed inside one long-running Python process (no interpreter start-up).
//!   The two bodies are compared byte for byte before and after the timing,
//!   and the bench fails if they differ. Then each side's CPU time per
//!   scrape (30 scrapes each) is printed, less inflated by a loaded machine
//!   than wall time.
//! - `hsperf_100_jvms`: `HsperfDir::open`, the listing and the copy and parse
//!   of 100 hsperfdata files (copies of a real JVM's file); `discover` +
//!   reading every file found on this host (a /proc scan).
//! - `hsperf_1_jvm`: what one JVM's counters cost: topdeck's read of its
//!   file, and one `jstat -gcutil` and one `jcmd PerfCounter.print`
//!   invocation (the tools users would otherwise run), wall time.
//!
//! Needs the venv of scripts/reach/prommp.sh and the JDK of
//! scripts/reach/hsperf.sh; without them the groups are skipped with a
//! message saying so (with CI set, the bench fails instead).

use std::cell::{OnceCell, RefCell};
use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{black_box, Criterion, SamplingMode};
use topdeck_portholes::{hsperf, prommp};
use topdeck_procfs::budget::thread_cpu;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A missing producer skips its groups, loudly; under CI it fails.
fn skip(what: &str, why: &str, script: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what}: {why}; run {script} (CI is set, so this fails instead of skipping)");
    }
    eprintln!("SKIPPED {what}: {why}; run {script}");
}

/// The venv's python, from the install script (which installs nothing when
/// the venv is there).
fn venv_python() -> Result<PathBuf, String> {
    let out = Command::new(repo().join("scripts/reach/prommp.sh"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run scripts/reach/prommp.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!("scripts/reach/prommp.sh failed ({})", out.status));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A directory filled by bench/prommp_anchor.py, and that script waiting
/// for commands, its live workers holding their files.
struct PromDir {
    dir: tempfile::TempDir,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl PromDir {
    fn new(python: &Path, files: usize) -> PromDir {
        let dir = tempfile::Builder::new()
            .prefix("topdeck-prommp-bench.")
            .tempdir()
            .expect("a temporary directory");
        let mut child = Command::new(python)
            .arg(repo().join("bench/prommp_anchor.py"))
            .arg(dir.path())
            .arg(files.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("bench/prommp_anchor.py starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut d = PromDir {
            dir,
            child,
            stdin,
            stdout,
        };
        let ready = d.line();
        eprintln!(
            "prommp_{files}: {ready} (workers, files) in {}",
            d.dir.path().display()
        );
        assert_eq!(
            ready.split_whitespace().nth(2),
            Some(files.to_string().as_str()),
            "bench/prommp_anchor.py did not write {files} files: {ready:?}"
        );
        d
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("reading bench/prommp_anchor.py");
        assert!(
            !line.is_empty(),
            "bench/prommp_anchor.py exited early (its error is above)"
        );
        line.trim().to_string()
    }

    fn command(&mut self, cmd: &str) -> String {
        let stdin = self.stdin.as_mut().expect("the script's stdin");
        writeln!(stdin, "{cmd}").expect("writing to bench/prommp_anchor.py");
        self.line()
    }

    /// `iters` scrapes by prometheus_client, timed inside Python.
    fn python_scrapes(&mut self, iters: u64) -> Duration {
        let ns: u64 = self
            .command(&format!("time {iters}"))
            .parse()
            .expect("nanoseconds from bench/prommp_anchor.py");
        Duration::from_nanos(ns)
    }

    /// The CPU time of each of `n` scrapes by prometheus_client.
    fn python_cpu(&mut self, n: usize) -> Vec<Duration> {
        self.command(&format!("cpu {n}"))
            .split_whitespace()
            .map(|ns| Duration::from_nanos(ns.parse().expect("nanoseconds")))
            .collect()
    }

    /// Fails the bench unless topdeck's body is prometheus_client's, byte
    /// for byte, for the directory as it is now.
    fn check_identical(&mut self, when: &str) {
        let path = self.dir.path().with_extension("expected.txt");
        let ok = self.command(&format!("dump {}", path.display()));
        assert_eq!(ok, "ok");
        let expected = fs::read(&path).expect("prometheus_client's body");
        let _ = fs::remove_file(&path);
        let merged = prommp::read_dir(self.dir.path()).expect("the directory reads");
        assert!(merged.errors.is_empty(), "{:?}", merged.errors);
        let ours = merged.to_text();
        if ours.as_bytes() != expected {
            let at = ours
                .bytes()
                .zip(&expected)
                .position(|(a, b)| a != *b)
                .unwrap_or(ours.len().min(expected.len()));
            panic!(
                "{when}: topdeck's body differs from prometheus_client's at byte {at} (lengths {} and {}):\n  topdeck:           {:?}\n  prometheus_client: {:?}",
                ours.len(),
                expected.len(),
                &ours[at.saturating_sub(60)..(at + 60).min(ours.len())],
                String::from_utf8_lossy(&expected[at.saturating_sub(60)..(at + 60).min(expected.len())]),
            );
        }
        eprintln!(
            "{when}: identical bodies, {} bytes, {} families, {} files",
            ours.len(),
            merged.families.len(),
            merged.files.len()
        );
    }
}

impl Drop for PromDir {
    fn drop(&mut self) {
        drop(self.stdin.take()); // end of input: the script stops its workers
        let _ = self.child.wait();
    }
}

fn prommp_group(c: &mut Criterion, python: &Path, files: usize) {
    // Made on first use, so that a filter leaving the group out costs nothing.
    let dir: OnceCell<RefCell<PromDir>> = OnceCell::new();
    let fixture = || {
        dir.get_or_init(|| {
            let mut d = PromDir::new(python, files);
            d.check_identical("before timing");
            RefCell::new(d)
        })
    };
    let mut g = c.benchmark_group(format!("prommp_{files}"));
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(if files >= 1000 { 8 } else { 4 }));
    g.bench_function("topdeck", |b| {
        let path = fixture().borrow().dir.path().to_path_buf();
        b.iter(|| {
            let merged = prommp::read_dir(&path).expect("the directory reads");
            black_box(merged.to_text())
        })
    });
    g.bench_function("prometheus_client", |b| {
        let d = fixture();
        b.iter_custom(|iters| d.borrow_mut().python_scrapes(iters))
    });
    g.finish();
    if let Some(d) = dir.get() {
        let mut d = d.borrow_mut();
        d.check_identical("after timing");
        // CPU time, which a loaded 2-CPU machine inflates less than wall
        // time: what each scrape costs, not how long it waited to run.
        let theirs = d.python_cpu(CPU_SCRAPES);
        let ours: Vec<Duration> = (0..CPU_SCRAPES)
            .map(|_| {
                let start = thread_cpu();
                let merged = prommp::read_dir(d.dir.path()).expect("the directory reads");
                black_box(merged.to_text());
                thread_cpu() - start
            })
            .collect();
        let (ours, theirs) = (spread(ours), spread(theirs));
        eprintln!(
            "prommp_{files} CPU time per scrape, {CPU_SCRAPES} scrapes each: topdeck {ours}; prometheus_client {theirs}; prometheus_client / topdeck = {:.1}x (medians)",
            theirs.median.as_secs_f64() / ours.median.as_secs_f64()
        );
    }
}

const CPU_SCRAPES: usize = 30;

/// Median and range of some durations.
#[derive(Clone, Copy)]
struct Spread {
    median: Duration,
    min: Duration,
    max: Duration,
}

fn spread(mut d: Vec<Duration>) -> Spread {
    d.sort();
    Spread {
        median: d[d.len() / 2],
        min: d[0],
        max: d[d.len() - 1],
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {:.2} ms (min {:.2}, max {:.2})",
            self.median.as_secs_f64() * 1e3,
            self.min.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3
        )
    }
}

/// A few real JVMs, each sleeping, stopped with SIGTERM (so that each
/// removes its file) when dropped.
struct Jvms {
    _classes: tempfile::TempDir,
    children: Vec<Child>,
    files: Vec<PathBuf>,
}

impl Jvms {
    fn start(n: usize) -> Result<Jvms, String> {
        let classes = tempfile::tempdir().map_err(|e| e.to_string())?;
        fs::write(
            classes.path().join("Sleep.java"),
            "public class Sleep { public static void main(String[] a) throws Exception { Thread.sleep(Long.MAX_VALUE); } }\n",
        )
        .map_err(|e| e.to_string())?;
        let javac = Command::new("javac")
            .arg("Sleep.java")
            .current_dir(classes.path())
            .status()
            .map_err(|e| format!("cannot run javac: {e}"))?;
        if !javac.success() {
            return Err(format!("javac failed ({javac})"));
        }
        let mut jvms = Jvms {
            _classes: classes,
            children: Vec::new(),
            files: Vec::new(),
        };
        for _ in 0..n {
            let child = Command::new("java")
                .args(["-Xmx16m", "-XX:TieredStopAtLevel=1", "-cp"])
                .arg(jvms._classes.path())
                .arg("Sleep")
                .spawn()
                .map_err(|e| format!("cannot run java: {e}"))?;
            jvms.children.push(child);
        }
        for child in &jvms.children {
            let file = hsperf_file(child.id())?;
            hsperf::read_when_accessible(&file, Duration::from_secs(30))
                .map_err(|e| format!("the JVM's file does not read: {e}"))?;
            jvms.files.push(file);
        }
        Ok(jvms)
    }
}

impl Drop for Jvms {
    fn drop(&mut self) {
        for child in &mut self.children {
            // SAFETY: kill(2) on the pid of a child we have not reaped yet.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

/// `/tmp/hsperfdata_<user>/<pid>` once the JVM has created it.
fn hsperf_file(pid: u32) -> Result<PathBuf, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = fs::read_dir("/tmp")
            .map_err(|e| format!("cannot list /tmp: {e}"))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("hsperfdata_"))
            .map(|e| e.path().join(pid.to_string()))
            .find(|p| p.exists());
        match found {
            Some(p) => return Ok(p),
            None if Instant::now() > deadline => {
                return Err(format!(
                    "JVM {pid} wrote no /tmp/hsperfdata_*/{pid} in 30 s"
                ))
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// `copies` copies of `file` in a private `hsperfdata_<user>` directory,
/// named as pids are.
fn copied_dir(file: &Path, copies: u32) -> (tempfile::TempDir, PathBuf) {
    let top = tempfile::tempdir().expect("a temporary directory");
    let user = file
        .parent()
        .and_then(Path::file_name)
        .expect("the JVM's directory name");
    let dir = top.path().join(user);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .expect("the copies' directory");
    let bytes = fs::read(file).expect("the JVM's file");
    for i in 0..copies {
        fs::write(dir.join((100_000 + i).to_string()), &bytes).expect("a copy");
    }
    (top, dir)
}

fn hsperf_groups(c: &mut Criterion) {
    let jvms: OnceCell<Jvms> = OnceCell::new();
    let jvms = || jvms.get_or_init(|| Jvms::start(3).unwrap_or_else(|e| panic!("hsperf: {e}")));
    let copies: OnceCell<(tempfile::TempDir, PathBuf)> = OnceCell::new();
    let copies = || {
        &copies
            .get_or_init(|| {
                let file = &jvms().files[0];
                let (top, dir) = copied_dir(file, 100);
                eprintln!(
                    "hsperf_100_jvms: 100 copies of {} ({} bytes) in {}",
                    file.display(),
                    fs::metadata(file).map(|m| m.len()).unwrap_or(0),
                    dir.display()
                );
                (top, dir)
            })
            .1
    };

    let told = std::cell::Cell::new(false);
    let mut g = c.benchmark_group("hsperf_100_jvms");
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("topdeck_open_list_read_100", |b| {
        let dir = copies();
        b.iter(|| {
            let d = hsperf::HsperfDir::open(dir).expect("the directory opens");
            let pids = d.pids().expect("the directory lists");
            assert_eq!(pids.len(), 100);
            for pid in pids {
                let perf = d.read(OsStr::new(&pid.to_string())).expect("a copy reads");
                black_box(perf);
            }
        })
    });
    g.bench_function("topdeck_discover_read_all", |b| {
        jvms();
        // The routine runs once per sample: say what it finds once.
        if !told.replace(true) {
            let found = hsperf::discover();
            eprintln!(
            "hsperf_100_jvms/topdeck_discover_read_all: discover() finds {} files on this host ({} errors)",
            found.jvms.len(),
                found.errors.len()
            );
        }
        b.iter(|| {
            let found = hsperf::discover();
            for jvm in &found.jvms {
                let _ = black_box(jvm.read());
            }
            black_box(found)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("hsperf_1_jvm");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1));
    g.bench_function("topdeck", |b| {
        let file = &jvms().files[0];
        b.iter(|| black_box(hsperf::read(file).expect("the JVM's file reads")))
    });
    for (name, args) in [
        ("jstat_gcutil", &["jstat", "-gcutil", ""]),
        ("jcmd_perfcounter_print", &["jcmd", "", "PerfCounter.print"]),
    ] {
        g.bench_function(name, |b| {
            let pid = jvms().children[0].id().to_string();
            let argv: Vec<&str> = args
                .iter()
                .map(|a| if a.is_empty() { pid.as_str() } else { a })
                .collect();
            b.iter(|| {
                let out = Command::new(argv[0])
                    .args(&argv[1..])
                    .stderr(Stdio::null())
                    .output()
                    .expect("the tool runs");
                assert!(out.status.success(), "{argv:?} failed: {}", out.status);
                black_box(out.stdout)
            })
        });
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    match venv_python() {
        Ok(python) => {
            for files in [100, 1000] {
                prommp_group(&mut c, &python, files);
            }
        }
        Err(why) => skip("prommp", &why, "scripts/reach/prommp.sh"),
    }
    let jdk = ["java", "javac", "jstat", "jcmd"];
    let on_path = |tool: &&str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|dir| dir.join(tool).is_file())
    };
    match jdk.iter().find(|tool| !on_path(tool)) {
        None => hsperf_groups(&mut c),
        Some(tool) => skip(
            "hsperf",
            &format!("{tool} is missing"),
            "scripts/reach/hsperf.sh",
        ),
    }
    c.final_summary();
}
