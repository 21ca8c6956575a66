// SPDX-License-Identifier: Apache-2.0
//! `top --at`, `sched --at` and `explain --at` on recordings made by the
//! real `topdeck record` of real writers: driven in tmux with the time
//! keys, and read by scripts (`--once --json`, `--json`), after the
//! writers are gone.
//! Frames are found by asking the recording itself, never by sleeping.

use std::process::{Child, ChildStdout};
use std::time::{Duration, Instant, UNIX_EPOCH};

use topdeck_procfs::testing::root_or_skip;

use super::sched::AgentProcess;
use super::top::{Tmux, Writer};
use super::*;

/// How long a recording may take to show what its writers did.
const DEADLINE: Duration = Duration::from_secs(30);

/// `topdeck record` of a namespace into a store of its own, a frame every
/// 200 ms, its stop signals at their defaults; killed and reaped when
/// dropped.
struct Recording {
    child: Child,
    _stdout: ChildStdout,
    store: TempDir,
}

impl Recording {
    fn start(ns: &Path) -> Self {
        let store = tempfile::tempdir().expect("a directory for the store");
        let mut child = with_default_signals(&mut std::process::Command::new(env!(
            "CARGO_BIN_EXE_topdeck"
        )))
        .args(["record", "--interval", "200ms", "--dir"])
        .arg(store.path())
        .env("TOPDECK_DIR", ns)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start topdeck record");
        let mut stdout = child.stdout.take().expect("the recorder's stdout");
        // Its first line says it records.
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(&mut stdout), &mut line)
            .expect("the recorder's first line");
        assert!(line.starts_with("topdeck record: reading"), "{line:?}");
        Self {
            child,
            _stdout: stdout,
            store,
        }
    }

    fn dir(&self) -> &Path {
        self.store.path()
    }

    /// The frame at or before `at` (`now`, or RFC 3339), as `top --once
    /// --json --at` shows it; `None` while nothing is recorded.
    fn at(&self, at: &str) -> Option<serde_json::Value> {
        let out = topdeck(self.dir())
            .args(["top", "--once", "--json", "--at", at, "--history"])
            .arg(self.dir())
            .output()
            .expect("run topdeck top --at");
        out.status.success().then(|| json(&out.stdout))
    }

    /// Waits until the last frame recorded satisfies `ok`; returns it.
    fn wait_for(&self, what: &str, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(v) = self.at("now").filter(|v| ok(v)) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "the recording never showed {what} within {DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every frame recorded, oldest first: each frame's time and the one
    /// before it, from the last back.
    fn frames(&self) -> Vec<serde_json::Value> {
        let mut v = vec![self.at("now").expect("a recording")];
        while let Some(since) = v.last().unwrap()["recorded"]["since_unix_ns"].as_u64() {
            v.push(self.at(&rfc3339(since)).expect("the frame before"));
        }
        v.reverse();
        v
    }

    /// Stops recording, as SIGTERM does (between two frames).
    fn stop(&mut self) {
        // SAFETY: kill only sends a signal, to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().expect("wait for the recorder");
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ns` ns since the Unix epoch as RFC 3339, to the nanosecond: how a
/// test names one frame exactly.
fn rfc3339(ns: u64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

fn unix_ns(frame: &serde_json::Value) -> u64 {
    frame["recorded"]["unix_ns"]
        .as_u64()
        .expect("a recorded frame")
}

/// How the title names a frame recorded 200 ms after the one before:
/// its local time of day to the millisecond.
fn clock(frame: &serde_json::Value) -> String {
    let at = frame["recorded"]["at"].as_str().expect("its local time");
    format!(
        "{}.{:03}",
        &at[11..19],
        unix_ns(frame) % 1_000_000_000 / 1_000_000
    )
}

/// The registry named `name` in a harvest.
fn registry<'a>(v: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    v["registries"]
        .as_array()?
        .iter()
        .find(|r| r["registry"] == name)
}

/// The rate of series `series` of registry `name`.
fn rate(v: &serde_json::Value, name: &str, series: &str) -> Option<f64> {
    registry(v, name)?["series"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == series)?["rate"]
        .as_f64()
}

/// The line of the screen whose processes row shows registry `name`.
fn row<'a>(s: &'a str, name: &str) -> Option<&'a str> {
    s.lines().find(|l| l.contains(&format!(" {name} ")))
}

#[test]
fn top_at_steps_through_a_recording_with_the_keys_and_shows_its_values_then() {
    let ns = namespace();
    let mut rec = Recording::start(ns.path());
    let writer = Writer::start(ns.path(), "alpha-svc");
    // A frame with the writer's rate, two more while it runs, then its end.
    let alive = rec.wait_for("the writer's rate", |v| {
        rate(v, "alpha-svc", "jobs_total").is_some_and(|r| r > 0.0)
    });
    rec.wait_for("two frames more", |v| {
        v["recorded"]["since_unix_ns"].as_u64() > Some(unix_ns(&alive))
    });
    drop(writer);
    rec.wait_for("the writer dead", |v| {
        registry(v, "alpha-svc").is_some_and(|r| r["state"] == "dead")
    });
    rec.stop();
    let frames = rec.frames();
    let i = frames
        .iter()
        .position(|f| unix_ns(f) == unix_ns(&alive))
        .expect("the frame with the writer's rate");
    let last = frames.last().unwrap();

    let bin = env!("CARGO_BIN_EXE_topdeck");
    let tmux = Tmux::sized(
        &[
            ("TOPDECK_DIR", ns.path()),
            ("TOPDECK_BIN", Path::new(bin)),
            ("HISTORY", rec.dir()),
        ],
        120,
        30,
    );
    tmux.wait_for("a shell prompt", |s| s.contains("td$"));
    tmux.type_text(
        &format!(
            "\"$TOPDECK_BIN\" top --at {} --history \"$HISTORY\"; echo top-exited-$?",
            rfc3339(unix_ns(&alive))
        ),
        true,
    );
    let title = |f: &serde_json::Value| format!("topdeck top · recorded {}", clock(f));
    let shows = |f: &serde_json::Value| {
        let t = title(f);
        move |s: &str| s.lines().next().is_some_and(|l| l.contains(&t))
    };
    let s = tmux.wait_for("the frame asked for", shows(&alive));
    assert!(
        s.contains("not recorded: process CPU and threads, cgroup limits and CPUs, host load"),
        "{s}"
    );
    let r = row(&s, "alpha-svc").unwrap_or_else(|| panic!("the writer's row:\n{s}"));
    assert!(r.contains("alive") && r.contains("/s jobs_total"), "{r}");
    // Its pid, and no CPU or threads: those were not recorded.
    let cells: Vec<&str> = r.trim_matches('│').split_whitespace().collect();
    let pid = registry(&alive, "alpha-svc").unwrap()["pid"].to_string();
    assert_eq!(
        (cells[0], &cells[2..4]),
        (pid.as_str(), &["-", "-"][..]),
        "{r}"
    );

    // A frame on, two back: the recorded time moves frame by frame.
    tmux.type_text("]", false);
    tmux.wait_for("the next frame", shows(&frames[i + 1]));
    tmux.type_text("[", false);
    tmux.key("Left");
    let s = tmux.wait_for("the frame before", shows(&frames[i - 1]));
    assert!(
        row(&s, "alpha-svc").is_some_and(|r| r.contains("alive")),
        "{s}"
    );
    // A minute on: the recording's last frame, the writer dead then.
    tmux.type_text("}", false);
    let s = tmux.wait_for("the last frame", shows(last));
    assert!(
        row(&s, "alpha-svc").is_some_and(|r| r.contains("dead")),
        "{s}"
    );
    tmux.type_text("}", false);
    tmux.wait_for("the end said", |s| s.contains("the recording's last frame"));
    // A minute back: the first frame, and no further.
    tmux.type_text("{", false);
    tmux.wait_for("the first frame", shows(&frames[0]));
    tmux.key("Right");
    tmux.wait_for("the second frame", shows(&frames[1]));
    tmux.key("q");
    tmux.wait_for("the shell again", |s| s.contains("top-exited-0"));
}

/// A registry of this process shaped like the agent's (the reader's own:
/// trusted), recorded with 100 run-queue waits of 20 ms between two
/// frames: `sched --at` and `top --at` show them over that window, and
/// the recording says it when there was no agent.
#[test]
fn sched_and_top_at_read_the_agents_registry_as_recorded() {
    let ns = namespace();
    let agent = super::registry(ns.path(), "topdeck-agent");
    let runq = agent
        .histogram(
            "topdeck_runq_latency_seconds",
            &[("cgroup", "/web"), ("container", "web")],
            "Run-queue waits.",
            "seconds",
        )
        .unwrap();
    agent
        .gauge(
            "topdeck_sched_verdict",
            &[
                ("cgroup", "/web"),
                ("culprit", "/batch"),
                ("kind", "noisy_neighbour"),
            ],
            "1 while the verdict holds.",
            "",
        )
        .unwrap()
        .set(1);
    let mut rec = Recording::start(ns.path());
    let agent_named = |v: &serde_json::Value| registry(v, "topdeck-agent").is_some();
    let before = rec.wait_for("the agent's registry", agent_named);
    for _ in 0..100 {
        runq.record(0.02);
    }
    let after = rec.wait_for("the waits", |v| {
        agent_named(v)
            && unix_ns(v) > unix_ns(&before)
            && v["scheduler"].is_object()
            && v["containers"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["runq"]["p99"].as_f64() > Some(0.01)))
    });
    rec.stop();
    drop(agent);
    let window = format!("{}ns", unix_ns(&after) - unix_ns(&before));
    let out = topdeck(ns.path())
        .args([
            "sched",
            "--json",
            "--window",
            &window,
            "--at",
            &rfc3339(unix_ns(&after)),
            "--history",
        ])
        .arg(rec.dir())
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["source"], "agent", "{v}");
    assert_eq!(v["pid"], std::process::id(), "{v}");
    assert_eq!(v["from_unix_ns"], unix_ns(&before), "{v}");
    assert_eq!(v["to_unix_ns"], unix_ns(&after), "{v}");
    let web = &v["view"]["cgroups"][0];
    assert_eq!(
        (web["cgroup"].as_str(), web["samples"].as_u64()),
        (Some("/web"), Some(100)),
        "{v}"
    );
    assert!(web["p99_seconds"].as_f64().unwrap() > 0.01, "{v}");
    assert_eq!(v["view"]["verdicts"][0]["victim"], "/web", "{v}");
    // The same as tables, saying which window of which recording.
    let out = topdeck(ns.path())
        .args([
            "sched",
            "--window",
            &window,
            "--at",
            &rfc3339(unix_ns(&after)),
            "--history",
        ])
        .arg(rec.dir())
        .assert()
        .success();
    let s = text(&out.get_output().stdout);
    assert!(
        s.contains("as recorded from") && s.contains("from topdeck agent pid"),
        "{s}"
    );
    assert!(
        s.lines()
            .any(|l| l.starts_with("/web ") && l.contains("100")),
        "{s}"
    );

    // `top --at` shows the same waits in the web container's row.
    let out = topdeck(ns.path())
        .args([
            "top",
            "--once",
            "--at",
            &rfc3339(unix_ns(&after)),
            "--history",
        ])
        .arg(rec.dir())
        .env("COLUMNS", "120")
        .assert()
        .success();
    let s = text(&out.get_output().stdout);
    let web = s
        .lines()
        .find(|l| l.starts_with("│web "))
        .unwrap_or_else(|| panic!("the web container:\n{s}"));
    assert!(web.contains("noisy") && web.contains("ms"), "{web}");
}

#[test]
fn without_a_recording_or_before_it_the_errors_say_what_is_there() {
    let ns = namespace();
    let empty = tempfile::tempdir().unwrap();
    for cmd in [&["top", "--once"][..], &["sched"][..]] {
        let out = topdeck(ns.path())
            .args(cmd)
            .args(["--at", "-10m", "--history"])
            .arg(empty.path())
            .assert()
            .failure();
        let err = text(&out.get_output().stderr);
        assert!(
            err.contains(&format!(
                "nothing is recorded in {}",
                empty.path().display()
            )) && err.contains("start `topdeck record`"),
            "{err}"
        );
    }
    let r = super::registry(ns.path(), "svc");
    r.counter("jobs_total", &[], "", "").unwrap().add(1);
    let mut rec = Recording::start(ns.path());
    let frame = rec.wait_for("a frame", |v| registry(v, "svc").is_some());
    rec.stop();
    let before = rfc3339(unix_ns(&frame) - 3_600_000_000_000);
    let out = topdeck(ns.path())
        .args(["top", "--once", "--at", &before, "--history"])
        .arg(rec.dir())
        .assert()
        .failure();
    let err = text(&out.get_output().stderr);
    assert!(
        err.contains("nothing was recorded in")
            && err.contains("it holds")
            && err.contains("frames)"),
        "{err}"
    );
    // A recording without the agent: said as such.
    let out = topdeck(ns.path())
        .args(["sched", "--window", "10ms", "--at", "now", "--history"])
        .arg(rec.dir())
        .assert()
        .failure();
    let err = text(&out.get_output().stderr);
    assert!(
        err.contains("no running scheduler agent was recorded") && err.contains("topdeck agent"),
        "{err}"
    );
    // A bad TIME says what it takes.
    let out = topdeck(ns.path())
        .args(["top", "--once", "--at", "at noon", "--history"])
        .arg(rec.dir())
        .assert()
        .failure();
    assert!(text(&out.get_output().stderr).contains("try `03:12`"));
}

/// The real agent (root, eBPF) recorded for a while, then gone: `sched
/// --at` reads its window from the recording.
#[test]
fn sched_at_reads_the_real_agent_as_recorded() {
    if !root_or_skip("`topdeck agent` loads BPF programs") {
        return;
    }
    let ns = namespace();
    let agent = AgentProcess::start(ns.path(), &["--interval", "200ms"]);
    agent.wait_for_registry(ns.path());
    let mut rec = Recording::start(ns.path());
    let waits = |v: &serde_json::Value| {
        v["containers"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["runq"]["p99"].is_f64()))
    };
    let first = rec.wait_for("the agent's waits", waits);
    let last = rec.wait_for("a second of them", |v| {
        waits(v) && unix_ns(v) >= unix_ns(&first) + 1_000_000_000
    });
    rec.stop();
    let pid = agent.0.id();
    drop(agent);
    let out = topdeck(ns.path())
        .args([
            "sched",
            "--json",
            "--window",
            "500ms",
            "--at",
            &rfc3339(unix_ns(&last)),
            "--history",
        ])
        .arg(rec.dir())
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["source"], "agent", "{v}");
    assert_eq!(v["pid"], pid, "{v}");
    assert!(v["from_unix_ns"].as_u64() < v["to_unix_ns"].as_u64(), "{v}");
    let cgroups = v["view"]["cgroups"].as_array().unwrap();
    assert!(!cgroups.is_empty(), "the host's scheduler made waits: {v}");
    for c in cgroups {
        assert!(
            c["p99_seconds"].as_f64().unwrap() >= c["p50_seconds"].as_f64().unwrap(),
            "{c}"
        );
    }
}

/// `history` says what a real recording kept, and `history export` gives
/// it back: OpenMetrics that promtool imports with every frame's samples,
/// and one JSON line per frame in `show --json`'s shape.
#[test]
fn history_says_what_is_kept_and_exports_it_for_promtool_and_as_json() {
    let ns = namespace();
    let mut rec = Recording::start(ns.path());
    let writer = Writer::start(ns.path(), "export-svc");
    let first = rec.wait_for("the writer's rate", |v| {
        rate(v, "export-svc", "jobs_total").is_some_and(|r| r > 0.0)
    });
    rec.wait_for("three frames more", |v| {
        v["recorded"]["since_unix_ns"].as_u64() > Some(unix_ns(&first) + 400_000_000)
    });
    drop(writer);
    rec.stop();
    let dir = rec.dir().to_str().unwrap().to_owned();
    let run = |args: &[&str]| {
        let out = topdeck(rec.dir()).args(args).output().expect("run topdeck");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let kept: serde_json::Value =
        serde_json::from_str(&run(&["history", "--json", "--verify", "--dir", &dir])).unwrap();
    let frames = kept["frames"].as_u64().unwrap();
    assert!(frames >= 4, "{kept}");
    assert!(kept["damage"].as_array().unwrap().is_empty(), "{kept}");
    assert!(kept["samples"].as_u64().unwrap() >= frames, "{kept}");
    // To the nanosecond: `from` and `to` are said to the second.
    let ns = |k: &str| rfc3339(kept[k].as_u64().unwrap());
    let (from, to) = (&ns("from_unix_ns"), &ns("to_unix_ns"));
    let said = run(&["history", "--dir", &dir]);
    assert!(said.contains(&format!("frames    {frames} (")), "{said}");

    // One JSON line per frame, each with the writer's registry.
    let lines = run(&[
        "history", "--dir", &dir, "export", "--from", from, "--to", to, "--format", "json",
    ]);
    let moments: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(moments.len() as u64, frames);
    let jobs = |m: &serde_json::Value| {
        m["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["registry"] == "export-svc")
            .and_then(|s| {
                s["metrics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["name"] == "jobs_total")?["value"]
                    .as_u64()
            })
    };
    let counts: Vec<u64> = moments.iter().filter_map(jobs).collect();
    assert!(
        counts.len() >= 2 && counts.windows(2).all(|w| w[0] <= w[1]),
        "{counts:?}"
    );

    // OpenMetrics with timestamps, into a Prometheus block.
    let om = run(&[
        "history", "--dir", &dir, "export", "--from", from, "--to", to,
    ]);
    assert!(om.ends_with("# EOF\n"));
    assert_eq!(
        om.matches("# TYPE jobs counter").count(),
        1,
        "each family once"
    );
    let samples = om.lines().filter(|l| l.starts_with("jobs_total{")).count();
    assert_eq!(
        samples,
        counts.len(),
        "a jobs_total sample per frame the writer is in"
    );
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("export.om"), &om).unwrap();
    let imported = std::process::Command::new("/usr/bin/promtool")
        .args([
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "export.om",
            "tsdb",
        ])
        .current_dir(work.path())
        .output()
        .expect("run promtool (scripts/deps.sh installs it with prometheus)");
    assert!(
        imported.status.success(),
        "promtool: {}{}",
        text(&imported.stdout),
        text(&imported.stderr)
    );
    assert!(
        text(&imported.stdout).contains("BLOCK ULID"),
        "{}",
        text(&imported.stdout)
    );
}

/// A service of this process whose timer measured each request's CPU
/// wait, and a registry shaped like the agent's (the reader's own:
/// trusted) charging this process's cgroup, recorded before and after
/// 100 requests that each waited 3 ms of 4: `explain --at` finds the
/// cgroup by the name the recording gives it, and names the culprit.
#[test]
fn explain_at_names_who_the_recorded_agent_charged_the_services_cgroup_for() {
    let ns = namespace();
    let cgroup =
        topdeck_procfs::cgroup::cgroup_of(std::process::id()).expect("this process's cgroup");
    let svc = super::registry(ns.path(), "svc");
    let latency = svc.histogram("req_seconds", &[], "", "seconds").unwrap();
    let wait = svc
        .histogram("req_cpu_wait_seconds", &[], "", "seconds")
        .unwrap();
    let agent = super::registry(ns.path(), "topdeck-agent");
    let behind = |culprit: &str| {
        agent
            .counter(
                "topdeck_sched_wait_behind_seconds_total",
                &[("cgroup", &cgroup), ("culprit", culprit)],
                "",
                "nanoseconds",
            )
            .unwrap()
    };
    let (hog, itself) = (behind("/hog"), behind(&cgroup));
    let mut rec = Recording::start(ns.path());
    let before = rec.wait_for("both registries", |v| {
        registry(v, "svc").is_some() && registry(v, "topdeck-agent").is_some()
    });
    for _ in 0..100 {
        latency.record(0.004);
        wait.record(0.003);
    }
    hog.add(270_000_000);
    itself.add(30_000_000);
    let written = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let after = rec.wait_for("a frame after them", |v| unix_ns(v) > written);
    rec.stop();
    let window = format!("{}ns", unix_ns(&after) - unix_ns(&before));
    let explain = |json: bool| {
        let mut c = topdeck(ns.path());
        c.args(["explain", "svc", "--window", &window, "--at"])
            .arg(rfc3339(unix_ns(&before)))
            .arg("--history")
            .arg(rec.dir());
        if json {
            c.arg("--json");
        }
        text(&c.assert().success().get_output().stdout)
    };
    let out = explain(true);
    let windows: Vec<serde_json::Value> = out.lines().map(|l| json(l.as_bytes())).collect();
    assert_eq!(windows.len(), 1, "the recording ends there: {out}");
    let w = &windows[0];
    assert_eq!(
        (&w["from_unix_ns"], &w["to_unix_ns"]),
        (&unix_ns(&before).into(), &unix_ns(&after).into()),
        "{w}"
    );
    assert_eq!(w["service"]["cgroup"], cgroup.as_str(), "{w}");
    assert!(w["wait"].is_null(), "not recorded: {w}");
    let who: Vec<(&str, f64)> = w["culprits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["who"].as_str().unwrap(), c["share"].as_f64().unwrap()))
        .collect();
    assert_eq!(who.len(), 2, "{w}");
    assert_eq!(who[0].0, "/hog", "{w}");
    assert!((who[0].1 - 0.9).abs() < 1e-9, "{w}");
    assert_eq!(who[1].0, format!("{cgroup} (itself)"), "{w}");
    let row = &w["rows"][0];
    assert_eq!(row["series"], "req_seconds", "{w}");
    assert_eq!(
        (&row["requests"], &row["per_request"], &row["finding"]),
        (&100.into(), &true.into(), &"cpu".into()),
        "{row}"
    );
    assert!(
        row["verdict"]
            .as_str()
            .is_some_and(|v| v.contains("75% waiting for a CPU, 90% of it behind /hog")),
        "{row}"
    );
    let s = explain(false);
    assert!(
        s.contains("who held the CPU from the topdeck agent")
            && s.contains("its threads' CPU wait unknown (not recorded); behind /hog 90%"),
        "{s}"
    );
}

#[test]
fn explain_at_says_what_the_recording_lacks() {
    let ns = namespace();
    let empty = tempfile::tempdir().unwrap();
    let explain = |at: &str, target: &str, history: &Path| {
        let out = topdeck(ns.path())
            .args(["explain", target, "--at", at, "--history"])
            .arg(history)
            .assert()
            .failure();
        text(&out.get_output().stderr)
    };
    let err = explain("-10m", "svc", empty.path());
    assert!(
        err.contains("nothing is recorded in") && err.contains("start `topdeck record`"),
        "{err}"
    );
    let r = super::registry(ns.path(), "svc");
    r.histogram("req_seconds", &[], "", "seconds")
        .unwrap()
        .record(0.001);
    let mut rec = Recording::start(ns.path());
    let frame = rec.wait_for("a frame", |v| registry(v, "svc").is_some());
    rec.stop();
    let err = explain(
        &rfc3339(unix_ns(&frame) - 3_600_000_000_000),
        "svc",
        rec.dir(),
    );
    assert!(
        err.contains("nothing was recorded at or before") && err.contains("it holds"),
        "{err}"
    );
    let err = explain(&rfc3339(unix_ns(&frame)), "nosuch", rec.dir());
    assert!(
        err.contains("nothing \"nosuch\" names was recorded at") && err.contains("svc"),
        "{err}"
    );
    // No agent recorded: the latencies still, nobody named, and why.
    let out = topdeck(ns.path())
        .args(["explain", "svc", "--window", "10ms", "--at"])
        .arg(rfc3339(unix_ns(&frame)))
        .arg("--history")
        .arg(rec.dir())
        .assert()
        .success();
    let s = text(&out.get_output().stdout);
    assert!(
        s.starts_with("explaining ")
            && s.contains("nobody named (no topdeck agent was recorded: `topdeck agent` must run"),
        "{s}"
    );
}
