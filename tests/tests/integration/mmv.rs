// SPDX-License-Identifier: Apache-2.0
//! PCP MMV files as the views meet them, from real writers (python3-pcp's
//! version 1 and a libpcp_mmv program's version 3, in
//! `crates/topdeck-portholes/tests/mmv/`) publishing in the real discovery
//! directory, `$PCP_TMP_DIR/mmv`: `show` gives every number PCP's own
//! `mmvdump` prints, in base units, and leaves strings and "no value"
//! sentinels out; `ls` names the C writer (PROCESS flag) by its pid and
//! the python one by none, a SIGKILLed writer's file as dead, and a writer
//! in a container with a `$PCP_TMP_DIR` of its own by its host pid,
//! through `/proc/<pid>/root`. Needs scripts/reach/mmv.sh and root (the
//! directory is PCP's; the container needs `unshare`): without them each
//! test says SKIPPED, and fails in CI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use topdeck_tests::{is_root, namespace_dir, topdeck, topdeck_json, Proc, TIMEOUT};

use super::containers::{can_run, runs_unless, unshared_sh};
use super::portholes_where;

#[path = "../../../crates/topdeck-portholes/tests/mmv/support.rs"]
mod support;
use support::{
    compile_c_writer, mmv_dir, mmvdump, python_writer, tools_present, type_and_sem, Writer,
};

/// Whether the test can run: the writers, mmvdump, and root to write in
/// PCP's directory.
fn can_run_mmv(test: &str) -> bool {
    tools_present(test)
        && runs_unless(
            test,
            (!is_root()).then_some("PCP's mmv directory needs root"),
        )
}

/// A file name no other test (or run) uses: `topdeck-test-<pid>-<n>`.
fn unique_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("topdeck-test-{}-{n}", std::process::id())
}

/// Both writers publishing in the discovery directory, each file removed
/// when its writer is dropped, pass or fail; and the namespace directory
/// `topdeck` runs on (empty: only portholes are listed).
struct Scene {
    /// Kept running until the scene is dropped.
    _python: Writer,
    python_file: PathBuf,
    c: Writer,
    c_file: PathBuf,
    ns: tempfile::TempDir,
    /// The compiled C writer; dropped after the writers.
    bin: tempfile::TempDir,
}

impl Scene {
    fn start() -> Scene {
        let dir = mmv_dir();
        let python_file = dir.join(unique_name());
        let python = Writer::start(python_writer(&python_file)).removing(&python_file);
        let bin = compiled_c_writer();
        let c_file = dir.join(unique_name());
        let mut command = Command::new(bin.path().join("writer_v3"));
        command.arg(&c_file);
        let c = Writer::start(command).removing(&c_file);
        Scene {
            _python: python,
            python_file,
            c,
            c_file,
            ns: namespace_dir(),
            bin,
        }
    }

    /// `topdeck args... --portholes` on the empty namespace, as JSON.
    fn json(&self, args: &[&str]) -> Json {
        topdeck_json(self.ns.path(), &[args, &["--portholes"]].concat())
    }

    /// `topdeck ls --json`.
    fn ls(&self) -> Json {
        self.json(&["ls", "--json"])
    }
}

/// The C writer, compiled into a directory removed when dropped.
fn compiled_c_writer() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("topdeck-it-mmv-")
        .tempdir_in("/var/tmp")
        .expect("create a directory in /var/tmp");
    compile_c_writer(dir.path());
    dir
}

/// The file name of `path`.
fn name_of(path: &Path) -> &str {
    path.file_name().unwrap().to_str().unwrap()
}

/// The porthole of `ls` at `path`, if listed.
fn porthole<'a>(ls: &'a Json, path: &Path) -> Option<&'a Json> {
    ls["portholes"]
        .as_array()
        .unwrap_or_else(|| panic!("no portholes array: {ls}"))
        .iter()
        .find(|p| p["path"].as_str() == path.to_str())
}

/// `ls` once `done` accepts it, or a failure after [`TIMEOUT`].
fn wait_for_ls(scene: &Scene, what: &str, done: impl Fn(&Json) -> bool) -> Json {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let ls = scene.ls();
        if done(&ls) {
            return ls;
        }
        assert!(Instant::now() < deadline, "waited for {what}: {ls}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A PCP name as a series name: `.`, `-` and the like become `_`.
fn safe(name: &str) -> String {
    name.chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_lowercase(),
            false => '_',
        })
        .collect()
}

/// What one of mmvdump's `units=` lines means in base units: how many
/// base units one is, and the base unit (`seconds`, `bytes` or none).
/// Only the units the writers use: another fails the test, so that a new
/// one is looked at.
fn base_units(units: &str) -> (f64, &'static str) {
    match units {
        "" | "count" | "count / sec" => (1.0, ""),
        "count x 10^3" => (1e3, ""),
        "byte" => (1.0, "bytes"),
        "Kbyte" => (1024.0, "bytes"),
        "millisec" => (1e-3, "seconds"),
        "microsec" => (1e-6, "seconds"),
        other => panic!("units {other:?}: add them to base_units"),
    }
}

/// One number mmvdump prints, as `show` must give it.
#[derive(Debug)]
struct Expected {
    name: String,
    instance: Option<String>,
    kind: &'static str,
    unit: &'static str,
    /// The value as mmvdump prints it, in its own units.
    text: String,
    factor: f64,
    /// A timing in progress: it grows between mmvdump's read and show's.
    running: bool,
}

/// What `show` of the MMV file at `path` must give, from mmvdump: every
/// numeric value, and the series names of those it must leave out
/// (strings, and sentinels in a file with the SENTINEL flag).
fn expected_from_mmvdump(path: &Path) -> (Vec<Expected>, Vec<String>) {
    let dump = mmvdump(path);
    let sentinels = dump.has_flag("sentinel");
    let (mut shown, mut left_out) = (Vec::new(), Vec::new());
    for (item, instance, text) in &dump.values {
        let units = dump.metric_field(*item, "units=").unwrap_or_else(|| {
            panic!("no units line for {item}: {:?}", dump.metrics[item]);
        });
        let (factor, unit) = base_units(units);
        let mut name = format!("mmv_{}_{}", safe(name_of(path)), safe(dump.name(*item)));
        if !unit.is_empty() {
            name = format!("{name}_{unit}");
        }
        let (_, sem) = type_and_sem(&dump.metrics[item][1]);
        let sentinel = sentinels
            && matches!(
                text.as_str(),
                "-1" | "4294967295" | "18446744073709551615" | "nan" | "-nan" | "\"\""
            );
        if text.starts_with('"') || sentinel {
            left_out.push(name);
            continue;
        }
        // An ELAPSED value: `<µs so far> (value=…/extra=…)`, extra non-zero
        // while a timing runs.
        let (number, raw) = text.split_once(' ').unwrap_or((text, ""));
        shown.push(Expected {
            name,
            instance: instance.as_ref().map(|(_, name)| name.clone()),
            kind: if sem == 1 { "counter" } else { "gauge" },
            unit,
            text: number.to_owned(),
            factor,
            running: !raw.is_empty() && !raw.ends_with("/extra=0)"),
        });
    }
    (shown, left_out)
}

/// Asserts that `topdeck show <file name> --json` gives what mmvdump
/// prints of `path`, and nothing else; returns the shown JSON.
fn assert_shown_as_mmvdump(scene: &Scene, path: &Path, pid: Option<u32>) -> Json {
    let (expected, left_out) = expected_from_mmvdump(path);
    let show = scene.json(&["show", name_of(path), "--json"]);
    assert_eq!(show["source"], "mmv", "{show}");
    assert_eq!(show["path"], path.to_str().unwrap(), "{show}");
    assert_eq!(show["state"], "alive", "{show}");
    assert_eq!(show["pid"], serde_json::json!(pid), "{show}");
    let metrics = show["metrics"].as_array().unwrap();
    for e in &expected {
        let labels = match &e.instance {
            Some(i) => serde_json::json!({ "instance": i }),
            None => serde_json::json!({}),
        };
        let m = metrics
            .iter()
            .find(|m| m["name"] == e.name.as_str() && m["labels"] == labels)
            .unwrap_or_else(|| panic!("{e:?} is not shown: {show}"));
        assert_eq!(
            (m["kind"].as_str(), m["unit"].as_str()),
            (Some(e.kind), Some(e.unit)),
            "{e:?}: {m}"
        );
        let got = &m["value"];
        match e.text.parse::<i128>() {
            // A whole number in units needing no scaling: exactly it.
            Ok(whole) if e.factor == 1.0 && !e.running => {
                let shown = got
                    .as_i64()
                    .map(i128::from)
                    .or(got.as_u64().map(i128::from));
                assert_eq!(shown, Some(whole), "{e:?}: {m}");
            }
            _ => {
                let want = e.text.parse::<f64>().unwrap() * e.factor;
                let got = got.as_f64().unwrap_or_else(|| panic!("{e:?}: {m}"));
                let close = match e.running {
                    // mmvdump read the clock a moment before show did.
                    true => (0.0..30.0).contains(&(got - want)),
                    false => (got - want).abs() <= want.abs() * 1e-12,
                };
                assert!(close, "{e:?}: want {want}, shown {got}");
            }
        }
    }
    assert_eq!(
        metrics.len(),
        expected.len(),
        "only mmvdump's numbers: {show}"
    );
    for name in &left_out {
        assert!(
            !metrics.iter().any(|m| m["name"] == name.as_str()),
            "{name} is a string or a sentinel, yet shown: {show}"
        );
    }
    // Strings are shown beside the series, by PCP name, as mmvdump prints
    // them; a "no value" string is not.
    let dump = mmvdump(path);
    let sentinels = dump.has_flag("sentinel");
    let want: Vec<(String, String)> = dump
        .values
        .iter()
        .filter(|(_, _, text)| text.starts_with('"') && !(sentinels && text == "\"\""))
        .map(|(item, instance, text)| {
            let mut name = format!("mmv.{}.{}", name_of(path), dump.name(*item));
            if let Some((_, i)) = instance {
                name = format!("{name}[{i}]");
            }
            (name, text.trim_matches('"').to_owned())
        })
        .collect();
    assert!(!want.is_empty(), "the writers set a string");
    let got: Vec<(String, String)> = show["strings"]
        .as_array()
        .unwrap_or_else(|| panic!("no strings shown: {show}"))
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["value"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(got, want, "{show}");
    show
}

#[test]
fn show_gives_every_number_mmvdump_prints_in_base_units_and_no_strings_or_sentinels() {
    let test = "show_gives_every_number_mmvdump_prints_in_base_units_and_no_strings_or_sentinels";
    if !can_run_mmv(test) {
        return;
    }
    let scene = Scene::start();
    let show = assert_shown_as_mmvdump(&scene, &scene.c_file, Some(scene.c.pid()));
    // The values the C writer sets, as the views must give them.
    let c = safe(name_of(&scene.c_file));
    let value = |name: &str| {
        show["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == format!("mmv_{c}_{name}").as_str())
            .map(|m| m["value"].clone())
            .unwrap_or_else(|| panic!("{name} is not shown: {show}"))
    };
    assert_eq!(value("memory_rss_bytes"), 123_456.0 * 1024.0);
    assert_eq!(value("gc_pause_seconds"), 1.2345);
    assert_eq!(value("request_time_seconds"), 2.5);
    assert_eq!(value("events_kilo"), 12_000.0);
    assert_eq!(value("balance"), -9_000_000_000_000_000_000i64);
    for name in [
        "build_version",
        "unknown_count",
        "unknown_ratio",
        "unknown_name",
    ] {
        assert!(
            !show.to_string().contains(&format!("\"mmv_{c}_{name}\"")),
            "{name}: {show}"
        );
    }

    let show = assert_shown_as_mmvdump(&scene, &scene.python_file, None);
    let py = safe(name_of(&scene.python_file));
    let requests: Vec<(&str, &Json)> = show["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"] == format!("mmv_{py}_requests_total").as_str())
        .map(|m| (m["labels"]["instance"].as_str().unwrap(), &m["value"]))
        .collect();
    // python3-pcp stores no semantics: gauges, whatever it was told.
    assert_eq!(
        requests,
        [
            ("high", &Json::from(42)),
            ("low", &Json::from(7)),
            ("bulk work", &Json::from(123_456_789_012u64))
        ],
        "{show}"
    );

    // The text view runs and names the source.
    let text = topdeck(
        scene.ns.path(),
        &["show", name_of(&scene.c_file), "--portholes"],
    );
    assert!(text.status.success(), "{}", text.stderr);
    assert!(
        text.stdout.lines().any(|l| l == "source: mmv"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .lines()
            .any(|l| l == format!("file: {}", scene.c_file.display())),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!("mmv_{c}_memory_rss_bytes")),
        "{}",
        text.stdout
    );
}

#[test]
fn ls_names_the_c_writer_by_its_pid_and_a_sigkilled_writers_file_as_dead() {
    let test = "ls_names_the_c_writer_by_its_pid_and_a_sigkilled_writers_file_as_dead";
    if !can_run_mmv(test) {
        return;
    }
    let mut scene = Scene::start();
    let ls = scene.ls();
    let c = porthole(&ls, &scene.c_file).unwrap_or_else(|| panic!("the C writer's file: {ls}"));
    assert_eq!(c["source"], "mmv", "{c}");
    assert_eq!(c["pid"], scene.c.pid(), "the PROCESS flag's pid: {c}");
    assert_eq!(c["state"], "alive", "{c}");
    assert_eq!(c["process"], "writer_v3", "{c}");
    assert_eq!(c["uid"], 0, "{c}");
    // 3 instances of one counter and 9 other numbers.
    assert_eq!(c["metrics"], 12, "{c}");
    let py = porthole(&ls, &scene.python_file)
        .unwrap_or_else(|| panic!("the python writer's file: {ls}"));
    assert_eq!(py["source"], "mmv", "{py}");
    assert!(
        py["pid"].is_null(),
        "no PROCESS flag, no writer named: {py}"
    );
    assert_eq!(py["state"], "alive", "{py}");
    assert_eq!(py["process"], name_of(&scene.python_file), "{py}");
    assert_eq!(py["metrics"], 5, "{py}");

    // Killed outright, the C writer leaves its file: no one's, dead.
    let pid = scene.c.pid();
    scene.c.kill();
    assert!(scene.c_file.exists(), "SIGKILL left the file");
    let ls = wait_for_ls(&scene, "the killed writer's file listed as dead", |ls| {
        porthole(ls, &scene.c_file).is_some_and(|c| c["state"] == "dead")
    });
    let c = porthole(&ls, &scene.c_file).unwrap();
    assert!(c["pid"].is_null(), "pid {pid} is gone: {c}");
    assert_eq!(c["metrics"], 12, "its last values: {c}");
    let py = porthole(&ls, &scene.python_file).unwrap();
    assert_eq!(py["state"], "alive", "{py}");
    // show reads it still, as dead.
    let show = scene.json(&["show", name_of(&scene.c_file), "--json"]);
    assert_eq!(
        (&show["state"], &show["pid"]),
        (&"dead".into(), &serde_json::Value::Null),
        "{show}"
    );
}

#[test]
fn a_writer_in_a_container_with_its_own_pcp_tmp_dir_is_listed_from_the_host() {
    let test = "a_writer_in_a_container_with_its_own_pcp_tmp_dir_is_listed_from_the_host";
    if !can_run_mmv(test) || !can_run(test) {
        return;
    }
    let scene = Scene::start();
    // $PCP_TMP_DIR.
    let tmp = mmv_dir().parent().unwrap().to_owned();
    let name = unique_name();
    let inside = tmp.join("mmv").join(&name);
    // New mount and pid namespaces: the writer is pid 1 there, and its
    // PCP_TMP_DIR a tmpfs the host does not see.
    let cmd = unshared_sh(&format!(
        "mount -t tmpfs none '{tmp}' && mkdir -p '{tmp}/mmv' && exec '{bin}' '{file}'",
        tmp = tmp.display(),
        bin = scene.bin.path().join("writer_v3").display(),
        file = inside.display(),
    ));
    let mut container = Proc::start("container", cmd);
    container.expect("ready");
    assert!(
        !inside.exists(),
        "the container's file is seen on the host's path"
    );
    let host_pid = child_of(container.pid());

    let through_root = format!("/root{}", inside.display());
    let at_it = |ls: &Json| -> Vec<Json> {
        portholes_where(ls, |p| p.ends_with(&through_root))
            .into_iter()
            .cloned()
            .collect()
    };
    let ls = wait_for_ls(&scene, "the container's file listed", |ls| {
        !at_it(ls).is_empty()
    });
    let found = at_it(&ls);
    let [entry] = found.as_slice() else {
        panic!("{} entries at {through_root}: {ls}", found.len());
    };
    let path = entry["path"].as_str().unwrap();
    // Through the root of a process of the container: unshare or the writer.
    let via = format!("/proc/{{{}, {host_pid}}}{through_root}", container.pid());
    assert!(
        [container.pid(), host_pid]
            .iter()
            .any(|p| path == format!("/proc/{p}{through_root}")),
        "not {via}: {entry}"
    );
    assert_eq!(entry["source"], "mmv", "{entry}");
    assert_eq!(
        entry["pid"], host_pid,
        "the writer's host pid, not 1: {entry}"
    );
    assert_eq!(entry["state"], "alive", "{entry}");
    assert_eq!(entry["process"], "writer_v3", "{entry}");
    assert_eq!(entry["metrics"], 12, "{entry}");
    // Found by its name too, from the host.
    let show = scene.json(&["show", &name, "--json"]);
    assert_eq!(show["path"], path, "{show}");
    assert_eq!(show["pid"], host_pid, "{show}");

    // The namespace goes, and its tmpfs with it.
    drop(container);
    wait_for_ls(&scene, "the container's file gone", |ls| {
        at_it(ls).is_empty()
    });
}

/// The one child of `pid`: the container's first process, as the host
/// numbers it.
fn child_of(pid: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_else(|e| panic!("the children of {pid}: {e}"));
    match children.split_whitespace().collect::<Vec<_>>().as_slice() {
        [one] => one.parse().unwrap(),
        other => panic!("pid {pid} has children {other:?}"),
    }
}
