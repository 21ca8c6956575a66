// SPDX-License-Identifier: Apache-2.0
//! The views in the past: a real example service recorded by a real
//! `topdeck record`, then `show --at` held to what a live `show` printed
//! at that time, and `watch --from` to the frames the store holds.
//!
//! A live look and a frame are never taken at one instant, so each check
//! says which frames it may compare: a frame's values were read between
//! the frame before it (whose timestamp is taken after its own read) and
//! its own timestamp. A frame whose predecessor is stamped after a live
//! look was read after it; a frame stamped before a live look was read
//! before it. A counter of such a frame lies between the two live looks
//! around it; a writer stopped (SIGSTOP) before both a look and a frame
//! shows them the same values, gauges included.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value as Json;
use tempfile::TempDir;
use topdeck_history::History;
use topdeck_tests::{describe, namespace_dir, topdeck, topdeck_bin, workspace_bin, Proc, TIMEOUT};

/// The recorder's interval.
const INTERVAL: &str = "200ms";

/// ns since the Unix epoch, now.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64
}

/// `unix_ns` as RFC 3339 to the nanosecond: a TIME naming it exactly.
fn rfc3339(unix_ns: u64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(unix_ns)).to_string()
}

/// `recorded_at` of `show --at --json`, in ns.
fn recorded_at(shown: &Json) -> u64 {
    let at = shown["recorded_at"]
        .as_str()
        .unwrap_or_else(|| panic!("no recorded_at: {shown}"));
    humantime::parse_rfc3339(at)
        .unwrap_or_else(|e| panic!("recorded_at {at}: {e}"))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A namespace with example services in it, recorded into a store.
struct Scene {
    ns: TempDir,
    store: TempDir,
    recorder: Option<Proc>,
}

/// A live `show --json` and the times around it.
struct Look {
    json: Json,
    before_ns: u64,
    after_ns: u64,
}

impl Scene {
    fn new() -> Self {
        Self {
            ns: namespace_dir(),
            store: namespace_dir(),
            recorder: None,
        }
    }

    fn store(&self) -> &str {
        self.store.path().to_str().expect("a UTF-8 temporary path")
    }

    /// Starts an example service with `args`, once it counts requests.
    fn service(&self, args: &[&str]) -> (Proc, u32) {
        let mut cmd = std::process::Command::new(workspace_bin("topdeck-example-service"));
        cmd.args(["--workers", "1"])
            .args(args)
            .env(topdeck::dir::ENV_DIR, self.ns.path());
        let mut p = Proc::start("topdeck-example-service", cmd);
        let first = p.expect("pid ");
        let pid: u32 = first
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the service's first line: pid {first}"));
        let pid_arg = pid.to_string();
        self.wait_for("the service's requests_total", || {
            let shown = self.topdeck(&["show", &pid_arg, "--json"]);
            shown.status.success() && shown.stdout.contains("\"requests_total\"")
        });
        (p, pid)
    }

    /// Starts `topdeck record` on the namespace.
    fn record(&mut self) {
        let mut cmd = std::process::Command::new(topdeck_bin());
        cmd.args(["record", "--interval", INTERVAL, "--dir", self.store()])
            .env(topdeck::dir::ENV_DIR, self.ns.path());
        let mut p = Proc::start("topdeck record", cmd);
        p.expect("topdeck record: ");
        self.recorder = Some(p);
        self.wait_for("a first frame", || !self.frames(0, u64::MAX).is_empty());
    }

    /// Stops the recorder as a person would (SIGTERM), between frames.
    fn stop_recording(&mut self) {
        let mut p = self.recorder.take().expect("recording");
        terminate(&mut p);
    }

    /// Runs `topdeck args` on the namespace.
    fn topdeck(&self, args: &[&str]) -> topdeck_tests::Finished {
        topdeck(self.ns.path(), args)
    }

    /// Runs `topdeck args`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.topdeck(args);
        assert!(
            out.status.success(),
            "`topdeck {}` {}\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            describe(Some(out.status)),
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// Runs `topdeck args`, which must fail; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.topdeck(args);
        assert!(
            !out.status.success(),
            "`topdeck {}` succeeded:\n{}",
            args.join(" "),
            out.stdout
        );
        out.stderr
    }

    /// `show target --json`, now.
    fn look(&self, target: &str) -> Look {
        let before_ns = now_ns();
        let json = json(&self.ok(&["show", target, "--json"]));
        Look {
            json,
            before_ns,
            after_ns: now_ns(),
        }
    }

    /// `show target --at <unix_ns> --json`.
    fn show_at(&self, target: &str, unix_ns: u64) -> Json {
        let at = rfc3339(unix_ns);
        json(&self.ok(&[
            "show",
            target,
            "--at",
            &at,
            "--history",
            self.store(),
            "--json",
        ]))
    }

    /// The times of the frames recorded from `from` to `to`.
    fn frames(&self, from: u64, to: u64) -> Vec<u64> {
        let Ok(history) = History::open(self.store.path()) else {
            return Vec::new();
        };
        history
            .replay(from, to, &|_| false)
            .map(|m| m.expect("a frame").unix_ns)
            .collect()
    }

    /// Waits until `done`, failing the test after [`TIMEOUT`].
    fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        while !done() {
            assert!(Instant::now() < deadline, "no {what} within {TIMEOUT:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops `pid` (SIGSTOP), has a frame recorded after it stopped, and
    /// returns a live `show` of it then and that frame's time; then lets
    /// it go on (SIGCONT).
    fn frozen(&self, pid: u32) -> (Json, u64) {
        signal(pid, libc::SIGSTOP);
        self.wait_for("stop", || stopped(pid));
        let stopped_ns = now_ns();
        let look = self.look(&pid.to_string());
        // The second frame stamped after the stop was read after it.
        self.wait_for("two frames after the stop", || {
            self.frames(stopped_ns, u64::MAX).len() >= 2
        });
        let frame = self.frames(stopped_ns, u64::MAX)[1];
        signal(pid, libc::SIGCONT);
        (look.json, frame)
    }
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(
        r,
        0,
        "kill {pid} {sig}: {}",
        std::io::Error::last_os_error()
    );
}

/// Whether every thread of `pid` is stopped (state `T` in
/// /proc/<pid>/task/*/stat): the leader may stop before its workers.
fn stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| Some(s[s.rfind(')')? + 1..].trim_start().starts_with('T')))
            .unwrap_or(false)
    })
}

/// Stops `p` with SIGTERM, as a person would, and waits for it: it
/// exits, or dies of the signal once its work is done (as `topdeck`'s
/// long-running commands do).
fn terminate(p: &mut Proc) {
    signal(p.pid(), libc::SIGTERM);
    let status = p.wait();
    assert!(
        status.success() || status.signal() == Some(libc::SIGTERM),
        "{} after SIGTERM",
        describe(Some(status))
    );
}

fn json(stdout: &str) -> Json {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

/// `show --at`'s object, less `recorded_at`: the live shape.
fn as_live(mut shown: Json) -> Json {
    shown
        .as_object_mut()
        .expect("one source shown")
        .remove("recorded_at");
    shown
}

/// The metric of `shown` with the name and labels of `m`.
fn same_series<'a>(shown: &'a Json, m: &Json) -> &'a Json {
    shown["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|o| o["name"] == m["name"] && o["labels"] == m["labels"])
        .unwrap_or_else(|| panic!("{} is not in {shown}", m["name"]))
}

/// Every number that only grows in a metric's value: a counter's, a
/// histogram's count, sum and count in each bucket (by bound).
fn growing(m: &Json) -> Vec<(String, f64)> {
    let v = &m["value"];
    match m["kind"].as_str() {
        Some("counter") => vec![("value".into(), v.as_f64().unwrap())],
        Some("histogram") => {
            let mut out = vec![
                ("count".into(), v["count"].as_f64().unwrap()),
                ("sum".into(), v["sum"].as_f64().unwrap()),
            ];
            for b in v["buckets"].as_array().unwrap() {
                out.push((format!("bucket {}", b[0]), b[1].as_f64().unwrap()));
            }
            out
        }
        _ => Vec::new(),
    }
}

/// Checks that every growing number of `at` lies between `before`'s and
/// `after`'s (a bucket not shown holds 0).
fn between(before: &Json, at: &Json, after: &Json) {
    let of = |shown: &Json, m: &Json, what: &str| {
        growing(same_series(shown, m))
            .into_iter()
            .find(|(w, _)| w == what)
            .map_or(0.0, |(_, v)| v)
    };
    let mut checked = 0;
    for m in at["metrics"].as_array().unwrap() {
        for (what, v) in growing(m) {
            let (lo, hi) = (of(before, m, &what), of(after, m, &what));
            assert!(
                lo <= v && v <= hi,
                "{} {} {what}: recorded {v}, live {lo} before and {hi} after",
                m["name"],
                m["labels"]
            );
            checked += 1;
        }
    }
    assert!(checked > 5, "too little compared: {at}");
}

#[test]
fn show_at_gives_each_writer_as_a_live_show_gave_it_then() {
    let mut scene = Scene::new();
    let (mut first, first_pid) = scene.service(&["--rate", "100"]);
    scene.record();
    let pid = first_pid.to_string();

    // Running: a frame read between two live looks lies between them.
    let early = scene.look(&pid);
    let (late, frame) = loop {
        std::thread::sleep(Duration::from_millis(600));
        let late = scene.look(&pid);
        let frames = scene.frames(early.after_ns, late.before_ns);
        if frames.len() >= 2 {
            break (late, frames[1]);
        }
    };
    let at = scene.show_at(&pid, frame);
    assert_eq!(recorded_at(&at), frame, "the frame asked for, exactly");
    between(&early.json, &at, &late.json);

    // Stopped: the same, gauges and all, and the same shape but for
    // `recorded_at`.
    let (live_first, at_first) = scene.frozen(first_pid);
    assert_eq!(as_live(scene.show_at(&pid, at_first)), live_first);

    // A restart: a new writer, a new registry file.
    terminate(&mut first);
    let (_second, second_pid) = scene.service(&["--rate", "50", "--seed", "2"]);
    let (live_second, at_second) = scene.frozen(second_pid);
    scene.stop_recording();

    let name = "topdeck-example-service";
    assert_eq!(as_live(scene.show_at(name, at_first)), live_first);
    assert_eq!(as_live(scene.show_at(name, at_second)), live_second);
    assert_eq!(
        as_live(scene.show_at(&second_pid.to_string(), at_second)),
        live_second
    );
    let gone = scene.fails(&[
        "show",
        &pid,
        "--at",
        &rfc3339(at_second),
        "--history",
        scene.store(),
    ]);
    assert!(
        gone.contains("recorded then:") && gone.contains(&format!("(pid {second_pid}, registry")),
        "{gone}"
    );

    // The text says it is the past, then shows what a live show shows.
    let text = scene.ok(&[
        "show",
        &pid,
        "--at",
        &rfc3339(at_first),
        "--history",
        scene.store(),
    ]);
    let head = text.lines().next().unwrap();
    assert!(head.starts_with("as recorded at "), "{text}");
    assert!(text.contains(&format!("\npid: {first_pid}\n")), "{text}");
    assert!(text.contains("\nrequests_total{worker=\"0\"} "), "{text}");

    // A live watch does not follow a restart: nor does a replay.
    let watched = scene.ok(&[
        "watch",
        name,
        "--from",
        &rfc3339(at_first),
        "--history",
        scene.store(),
        "requests_total",
    ]);
    assert!(
        watched.starts_with(&format!("watching {name} (pid {first_pid}), ")),
        "{watched}"
    );
    assert!(
        watched.ends_with("state: dead (the writer is gone); stopping"),
        "{watched}"
    );
}

/// The interval blocks of `watch` output: each head's time and the
/// `+secs` since the first read, and its lines.
fn blocks(stdout: &str) -> Vec<(String, String, Vec<&str>)> {
    let mut out: Vec<(String, String, Vec<&str>)> = Vec::new();
    for line in stdout.lines().skip(1) {
        match line.strip_prefix("--- ") {
            Some(head) => {
                let (time, since) = head.split_once(' ').unwrap_or_else(|| panic!("{line}"));
                out.push((time.into(), since.into(), Vec::new()));
            }
            None => out
                .last_mut()
                .unwrap_or_else(|| panic!("a line before the first block: {stdout}"))
                .2
                .push(line.trim()),
        }
    }
    out
}

/// `requests_total{worker="0"}` recorded at each of `frames`.
fn requests(store: &Path, frames: &[u64]) -> Vec<u64> {
    let history = History::open(store).unwrap();
    frames
        .iter()
        .map(|&f| {
            let m = history.at(f, &|_| true).unwrap().unwrap();
            assert_eq!(m.unix_ns, f);
            m.sources
                .iter()
                .find_map(|(s, snap)| {
                    (s.process == "topdeck-example-service")
                        .then(|| snap.get("requests_total", &[("worker", "0")]).cloned())
                        .flatten()
                })
                .map(|v| match v {
                    topdeck::Value::Counter(c) => c,
                    other => panic!("requests_total: {other:?}"),
                })
                .unwrap_or_else(|| panic!("no requests_total at {}", rfc3339(f)))
        })
        .collect()
}

/// A rate as `watch` prints it (`99.5/s`, `4.00/s`, `1.2k/s`), and how
/// far its rounding may be from the rate.
fn parse_rate(text: &str) -> Option<(f64, f64)> {
    let r = text.strip_suffix("/s")?;
    let (r, scale) = match r.strip_suffix('k') {
        Some(r) => (r, 1e3),
        None => (r, 1.0),
    };
    let decimals = r.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
    Some((
        r.parse::<f64>().ok()? * scale,
        0.5 * 10f64.powi(-decimals) * scale * 1.01,
    ))
}

#[test]
fn watch_from_replays_each_recorded_interval_at_its_time() {
    const RATE: f64 = 100.0;
    let mut scene = Scene::new();
    let (mut service, pid) = scene.service(&["--rate", "100"]);
    scene.record();
    scene.wait_for("12 frames", || scene.frames(0, u64::MAX).len() >= 12);
    scene.stop_recording();
    terminate(&mut service);

    let all = scene.frames(0, u64::MAX);
    let n = all.len();
    // From between the 2nd and 3rd frames to between the 3rd and 2nd
    // last: the first read is the 2nd frame, and one interval ends at
    // each frame from the 3rd to the 3rd last.
    let from = all[1] + (all[2] - all[1]) / 2;
    let to = all[n - 3] + (all[n - 2] - all[n - 3]) / 2;
    let shown = &all[2..=n - 3];
    let replay = |extra: &[&str]| {
        let mut args = vec![
            "watch".to_owned(),
            pid.to_string(),
            "requests_total".into(),
            "--from".into(),
            rfc3339(from),
            "--to".into(),
            rfc3339(to),
            "--history".into(),
            scene.store().into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        scene.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = replay(&[]);
    assert!(
        out.starts_with(&format!(
            "watching topdeck-example-service (pid {pid}), registry main, as recorded from "
        )),
        "{out}"
    );
    let got = blocks(&out);
    assert_eq!(
        got.len(),
        shown.len(),
        "one interval per frame in range:\n{out}"
    );
    let counts = requests(scene.store.path(), &all[1..=n - 3]);
    for (i, ((time, since, lines), &f)) in got.iter().zip(shown).enumerate() {
        // Stamped with the frame's time, not now's.
        let stamp = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_nanos(f));
        assert_eq!(time, &stamp.to_string(), "{out}");
        let secs = Duration::from_nanos(f - all[1]).as_secs_f64();
        assert_eq!(since, &format!("+{secs:.1}s"), "{out}");
        // The counter's increase between the two frames, and its rate
        // over their own timestamps.
        let line = lines
            .iter()
            .find(|l| l.starts_with("requests_total{worker=\"0\"}"))
            .unwrap_or_else(|| panic!("no requests_total in block {i}:\n{out}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let increase = counts[i + 1] - counts[i];
        assert_eq!(words[2], format!("+{increase}"), "{line}");
        let (rate, precision) = parse_rate(words[1]).unwrap_or_else(|| panic!("{line}"));
        let exact = increase as f64 / Duration::from_nanos(f - all[i + 1]).as_secs_f64();
        assert!((rate - exact).abs() <= precision, "{line}: {exact}/s");
    }
    // The service makes 100 requests a second: over the whole replay the
    // rate is that, give or take what a busy machine delays.
    let total = counts[counts.len() - 1] - counts[0];
    let overall = total as f64 / ((shown[shown.len() - 1] - all[1]) as f64 / 1e9);
    assert!(
        (RATE * 0.5..=RATE * 1.5).contains(&overall),
        "{overall}/s:\n{out}"
    );

    // --count stops early; --interval shows a frame at least that long
    // after the one shown before.
    assert_eq!(blocks(&replay(&["--count", "2"])).len(), 2);
    let step = 500_000_000;
    let mut last = all[1];
    let expected = shown
        .iter()
        .filter(|&&f| {
            let due = f - last >= step;
            if due {
                last = f;
            }
            due
        })
        .count();
    let spaced = replay(&["--interval", "500ms"]);
    assert_eq!(blocks(&spaced).len(), expected, "{spaced}");
}

#[test]
fn the_past_says_what_it_holds_when_asked_for_what_it_does_not() {
    let mut scene = Scene::new();
    let none = scene.fails(&["show", "1", "--at", "-1m", "--history", scene.store()]);
    assert!(
        none.contains("nothing is recorded in") && none.contains("topdeck record"),
        "{none}"
    );
    let (_service, pid) = scene.service(&["--rate", "10"]);
    scene.record();
    scene.stop_recording();
    let all = scene.frames(0, u64::MAX);
    let before = rfc3339(all[0] - 10_000_000_000);
    let first = rfc3339(all[0]);

    let early = scene.fails(&[
        "show",
        &pid.to_string(),
        "--at",
        &before,
        "--history",
        scene.store(),
    ]);
    assert!(
        early.contains("nothing was recorded at or before") && early.contains("it holds"),
        "{early}"
    );
    let early = scene.fails(&[
        "watch",
        &pid.to_string(),
        "--from",
        &before,
        "--to",
        &before,
        "--history",
        scene.store(),
    ]);
    assert!(early.contains("nothing was recorded from"), "{early}");

    let unknown = scene.fails(&[
        "show",
        "no-such-service",
        "--at",
        &first,
        "--history",
        scene.store(),
    ]);
    assert!(
        unknown.contains("\"no-such-service\"")
            && unknown.contains(&format!(
                "topdeck-example-service (pid {pid}, registry main)"
            )),
        "{unknown}"
    );
    let unknown = scene.fails(&[
        "watch",
        "no-such-service",
        "--from",
        &first,
        "--history",
        scene.store(),
    ]);
    assert!(unknown.contains("recorded then: "), "{unknown}");

    let bad = scene.fails(&["show", "1", "--at", "at noon", "--history", scene.store()]);
    assert!(bad.contains("cannot read the time"), "{bad}");
    let without = scene.fails(&["watch", "1", "--to", "-1m"]);
    assert!(without.contains("--from"), "{without}");
}

/// A writer that rotates its registry (a new file under the same name, as
/// the agent does when one fills): `show --at` gives each file's values
/// at its own time, the path and the values of the file recorded then.
#[test]
fn show_at_follows_a_registry_rotation_by_time() {
    let mut scene = Scene::new();
    scene.record();
    let value = |shown: &Json| {
        shown["metrics"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == "jobs_total"))
            .and_then(|m| m["value"].as_u64())
    };
    let first = topdeck::Registry::builder()
        .dir(scene.ns.path())
        .name("rotating")
        .build()
        .unwrap();
    first
        .counter("jobs_total", &[], "Jobs.", "")
        .unwrap()
        .add(7);
    let first_path = first.path().to_owned();
    let since = now_ns();
    scene.wait_for("two frames of the first file", || {
        scene.frames(since, u64::MAX).len() >= 2
    });
    let first_frame = *scene.frames(since, u64::MAX).last().unwrap();
    drop(first);
    let second = topdeck::Registry::builder()
        .dir(scene.ns.path())
        .name("rotating")
        .build()
        .unwrap();
    second
        .counter("jobs_total", &[], "Jobs.", "")
        .unwrap()
        .add(1000);
    let rotated = now_ns();
    scene.wait_for("two frames of the second file", || {
        scene.frames(rotated, u64::MAX).len() >= 2
    });
    let second_frame = *scene.frames(rotated, u64::MAX).last().unwrap();
    scene.stop_recording();

    let then = scene.show_at("rotating", first_frame);
    assert_eq!(value(&then), Some(7), "{then:#}");
    assert_eq!(then["path"].as_str(), first_path.to_str());
    let now = scene.show_at("rotating", second_frame);
    assert_eq!(value(&now), Some(1000), "{now:#}");
    assert_eq!(now["path"].as_str(), second.path().to_str());
    assert_ne!(then["path"], now["path"]);
}
