// SPDX-License-Identifier: Apache-2.0
//! `topdeck agent` and `topdeck sched`: the agent publishes, `sched` reads it
//! like any registry, a clean stop removes the agent's file, and without
//! privileges both say why and fall back to coarse figures.

use std::time::{Duration, Instant};

use topdeck_procfs::testing::{is_root, root_or_skip};

use super::*;

/// The agent as a child process in namespace `dir`, killed on drop.
pub(crate) struct AgentProcess(pub(crate) std::process::Child);

impl AgentProcess {
    pub(crate) fn start(dir: &Path, args: &[&str]) -> Self {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_topdeck"))
            .arg("agent")
            // Agents of these tests run side by side: none pins at the
            // default path unless its arguments say where.
            .args(match args.contains(&"--thread-waits") {
                true => &[][..],
                false => &["--thread-waits", "off"][..],
            })
            .args(args)
            .env("TOPDECK_DIR", dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning topdeck agent");
        Self(child)
    }

    /// What the agent printed on stdout, once it has ended.
    pub(crate) fn stdout(&mut self) -> String {
        let mut stdout = String::new();
        std::io::Read::read_to_string(
            &mut self.0.stdout.take().expect("piped stdout"),
            &mut stdout,
        )
        .expect("the agent's stdout");
        stdout
    }

    /// Waits for the agent's registry file to appear.
    pub(crate) fn wait_for_registry(&self, dir: &Path) -> PathBuf {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if let Some(e) = std::fs::read_dir(dir).ok().and_then(|mut d| {
                d.find_map(|e| {
                    e.ok()
                        .filter(|e| e.file_name().to_string_lossy().ends_with(".topdeck"))
                })
            }) {
                return e.path();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the agent published no registry in {}", dir.display());
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sched_reads_the_running_agent_and_a_clean_stop_removes_its_file() {
    if !root_or_skip("`topdeck agent` loads BPF programs") {
        return;
    }
    let ns = namespace();
    let mut agent = AgentProcess::start(
        ns.path(),
        &[
            "--interval",
            "200ms",
            "--count",
            "15",
            "--rise",
            "3",
            "--hold",
            "2",
        ],
    );
    let file = agent.wait_for_registry(ns.path());
    let out = topdeck(ns.path())
        .args(["sched", "--window", "500ms", "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["source"], "agent", "{v}");
    assert_eq!(v["pid"], agent.0.id(), "{v}");
    let cgroups = v["view"]["cgroups"].as_array().unwrap();
    assert!(!cgroups.is_empty(), "the host's scheduler made waits: {v}");
    for c in cgroups {
        assert!(
            c["p99_seconds"].as_f64().unwrap() >= c["p50_seconds"].as_f64().unwrap(),
            "{c}"
        );
    }
    // The text form names its source and columns.
    let out = topdeck(ns.path())
        .args(["sched", "--window", "200ms"])
        .assert()
        .success();
    let text = text(&out.get_output().stdout);
    assert!(text.contains("from topdeck agent pid"), "{text}");
    assert!(
        text.contains("P99") && text.contains("WAITED BEHIND"),
        "{text}"
    );
    // The rule the agent was given, and the length of its windows.
    assert!(
        text.contains("rule (the agent's, on its own windows): noisy neighbour: p99 >= 3x")
            && text.contains("each held 2 windows")
            && text.contains("(windows of 200ms)"),
        "{text}"
    );

    let status = agent.0.wait().unwrap();
    assert!(
        status.success(),
        "the agent stops after --count: {status:?}"
    );
    assert!(!file.exists(), "a clean stop removes {}", file.display());
}

/// `topdeck serve` over a namespace the agent publishes in: the text
/// exposition, the agent's series included, passes promtool's parser and
/// linter; the running totals are counters exposed in seconds (the agent
/// keeps nanoseconds) and the probe's cost is a gauge in seconds.
#[test]
fn serve_exposes_the_agents_series_as_promtool_accepts_them() {
    if !root_or_skip("`topdeck agent` loads BPF programs") {
        return;
    }
    let ns = namespace();
    let started = Instant::now();
    let agent = AgentProcess::start(ns.path(), &["--interval", "100ms", "--cost-every", "100ms"]);
    agent.wait_for_registry(ns.path());
    let (_serve, url) = super::serve::serve(ns.path(), &[]);
    let get = || {
        ureq::get(&url)
            .set("Accept", "text/plain; version=0.0.4")
            .call()
            .expect("GET /metrics")
            .into_string()
            .expect("a text body")
    };
    let wanted = [
        "\ntopdeck_sched_oncpu_seconds_total{",
        "\ntopdeck_sched_wait_behind_seconds_total{",
        "\ntopdeck_bpf_run_per_event_seconds{",
    ];
    let mut body = get();
    while !wanted.iter().all(|w| body.contains(w)) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the agent's series, within 30 s: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
        body = get();
    }
    super::serve::promtool_accepts(&url);
    for name in [
        "topdeck_sched_oncpu_seconds_total",
        "topdeck_sched_wait_behind_seconds_total",
    ] {
        assert!(
            body.contains(&format!("# TYPE {name} counter\n")),
            "{name} is a counter: {body}"
        );
    }
    // Seconds, not nanoseconds: no cgroup was on CPU longer than every
    // CPU for as long as the agent ran.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let most = started.elapsed().as_secs_f64() * cpus;
    for line in body
        .lines()
        .filter(|l| l.starts_with("topdeck_sched_oncpu_seconds_total{"))
    {
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((0.0..=most).contains(&v), "{line}: at most {most} s");
    }
    // Each cgroup's run-queue latency, for a classic scraper: the powers
    // of two of the agent's range (2^-22 s to 64 s) within the classic
    // window of seconds (from 2^-20 s), then +Inf, whatever has filled.
    let want: Vec<String> = (-20..=6)
        .map(|e| {
            let mut le = Vec::new();
            topdeck_export::rules::write_f64(&mut le, f64::from(e).exp2()).unwrap();
            String::from_utf8(le).unwrap()
        })
        .chain(["+Inf".to_owned()])
        .collect();
    let mut les: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for line in body
        .lines()
        .filter(|l| l.starts_with("topdeck_runq_latency_seconds_bucket{"))
    {
        let (series, le) = line.split_once(",le=\"").unwrap();
        les.entry(series)
            .or_default()
            .push(le.split('"').next().unwrap());
    }
    assert!(!les.is_empty(), "run-queue histograms: {body}");
    for (series, got) in les {
        assert_eq!(got, want, "{series}");
    }
    drop(agent);
}

#[test]
fn an_agent_without_cap_sys_admin_runs_on_without_its_cost_figure() {
    if !root_or_skip("`topdeck agent` loads BPF programs") {
        return;
    }
    // The sandboxed units (deploy/systemd) grant CAP_BPF and CAP_PERFMON
    // but not CAP_SYS_ADMIN, which BPF run-time statistics need.
    let ns = namespace();
    let out = std::process::Command::new("setpriv")
        .args(["--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--"])
        .arg(env!("CARGO_BIN_EXE_topdeck"))
        .args([
            "agent",
            "--thread-waits",
            "off",
            "--interval",
            "100ms",
            "--cost-every",
            "100ms",
            "--count",
            "10",
        ])
        .env("TOPDECK_DIR", ns.path())
        .output()
        .expect("run setpriv (util-linux)");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(
        stderr.contains("cannot measure the probe's own cost") && stderr.contains("CAP_SYS_ADMIN"),
        "{stderr}"
    );
}

#[test]
fn sigterm_stops_the_agent_cleanly() {
    if !root_or_skip("`topdeck agent` loads BPF programs") {
        return;
    }
    let ns = namespace();
    let mut agent = AgentProcess::start(ns.path(), &["--interval", "100ms"]);
    let file = agent.wait_for_registry(ns.path());
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(agent.0.id() as i32, libc::SIGTERM) };
    let status = agent.0.wait().unwrap();
    // Stopped cleanly, then died of the signal, so that its supervisor
    // sees why it ended (systemd counts that as a clean stop).
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    assert!(!file.exists(), "SIGTERM removes {}", file.display());
    let stdout = agent.stdout();
    assert!(stdout.contains("probe attached (tp_btf)"), "{stdout}");
}

/// A pin directory of its own under bpffs, removed on drop.
struct PinDir(PathBuf);

impl Drop for PinDir {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn the_agent_pins_thread_waits_where_told_and_sigterm_unpins_them() {
    if !root_or_skip("`topdeck agent` loads BPF programs and pins in bpffs") {
        return;
    }
    let ns = namespace();
    let dir = PinDir(PathBuf::from(format!(
        "/sys/fs/bpf/topdeck-test-cli-{}",
        std::process::id()
    )));
    let pin = dir.0.join("thread_waits");
    let pin_arg = pin.to_str().unwrap().to_string();
    let mut agent = AgentProcess::start(
        ns.path(),
        &["--interval", "100ms", "--thread-waits", &pin_arg],
    );
    agent.wait_for_registry(ns.path());
    assert!(pin.exists(), "{} is pinned", pin.display());
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(agent.0.id() as i32, libc::SIGTERM) };
    agent.0.wait().unwrap();
    assert!(!pin.exists(), "SIGTERM unpins {}", pin.display());
    let stdout = agent.stdout();
    assert!(
        stdout.contains(&format!("thread waits pinned at {pin_arg} (")),
        "{stdout}"
    );
}

/// Runs `topdeck` as the unprivileged user `nobody`.
fn as_nobody(dir: &Path, args: &[&str]) -> assert_cmd::assert::Assert {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_topdeck"),
        ])
        .args(args)
        .env("TOPDECK_DIR", dir)
        .assert()
}

#[test]
fn without_privileges_sched_says_why_and_falls_back_to_coarse_figures() {
    if !is_root() {
        // Unprivileged already: the real thing, directly.
        let out = topdeck(Path::new("/nonexistent"))
            .args(["sched", "--window", "200ms", "--json"])
            .assert()
            .success();
        let v = json(&out.get_output().stdout);
        assert_eq!(v["source"], "coarse", "{v}");
        return;
    }
    let ns = namespace();
    let out = as_nobody(ns.path(), &["sched", "--window", "300ms", "--json"]).success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["source"], "coarse", "{v}");
    assert_eq!(v["resolution"], "coarse", "{v}");
    assert!(v["why"].as_str().unwrap().contains("needs root"), "{v}");
    let out = as_nobody(ns.path(), &["sched", "--window", "300ms"]).success();
    let text = text(&out.get_output().stdout);
    assert!(
        text.starts_with("eBPF unavailable: loading BPF programs needs root"),
        "{text}"
    );
    assert!(text.contains("coarse figures"), "{text}");
}

#[test]
fn without_privileges_the_agent_says_why_and_publishes_coarse_figures() {
    if !root_or_skip("`topdeck agent` loads BPF programs") {
        return;
    }
    let ns = namespace();
    // nobody must be able to write its namespace.
    std::fs::set_permissions(
        ns.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let dir = ns.path().join("nobody");
    let out = as_nobody(
        &dir,
        &[
            "agent",
            "--thread-waits",
            "off",
            "--interval",
            "200ms",
            "--count",
            "2",
        ],
    )
    .success();
    let text = text(&out.get_output().stdout);
    assert!(
        text.contains("eBPF unavailable: loading BPF programs needs root"),
        "{text}"
    );
    assert!(text.contains("falling back to coarse figures"), "{text}");
}

#[test]
fn a_squatted_namespace_stops_the_agent_naming_the_directory_not_ebpf() {
    if !root_or_skip("`topdeck agent` loads BPF programs") {
        return;
    }
    let ns = namespace();
    let squatted = ns.path().join("squatted");
    std::fs::create_dir(&squatted).unwrap();
    std::os::unix::fs::chown(&squatted, Some(65534), Some(65534)).unwrap();
    let out = topdeck(&squatted)
        .args([
            "agent",
            "--thread-waits",
            "off",
            "--count",
            "1",
            "--interval",
            "100ms",
        ])
        .assert()
        .failure();
    let (stdout, stderr) = (
        text(&out.get_output().stdout),
        text(&out.get_output().stderr),
    );
    let d = squatted.display().to_string();
    assert!(
        stderr.contains(&format!("{d} is owned by uid 65534")),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("ls -la -- {d}")), "{stderr}");
    assert!(
        !stdout.contains("eBPF") && !stderr.contains("eBPF"),
        "{stdout}{stderr}"
    );
    assert!(!stdout.contains("coarse"), "{stdout}");
    assert!(
        std::fs::read_dir(&squatted).unwrap().next().is_none(),
        "nothing was written in the squatted directory"
    );

    // Without privileges, eBPF is out too; the directory is still what is
    // named, because no fallback can publish there either.
    // nobody must be able to reach the directory to be told whose it is.
    std::fs::set_permissions(
        ns.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let root_owned = ns.path().join("root-owned");
    std::fs::create_dir(&root_owned).unwrap();
    let out = as_nobody(
        &root_owned,
        &["agent", "--thread-waits", "off", "--count", "1"],
    )
    .failure();
    let (stdout, stderr) = (
        text(&out.get_output().stdout),
        text(&out.get_output().stderr),
    );
    assert!(
        stderr.contains(&format!("{} is owned by uid 0", root_owned.display())),
        "{stderr}"
    );
    assert!(!stdout.contains("eBPF unavailable"), "{stdout}");
}
