// SPDX-License-Identifier: Apache-2.0
//! Writers killed with SIGKILL: their files stay readable with the last
//! values, are reported dead, and are the only ones `gc` removes, even when
//! a new writer has the same pid.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use topdeck::{ErrorKind, Liveness, Namespace, RegistryReader, Value};
use topdeck_tests::{
    exclusive_spawns, is_root, namespace_dir, skip, topdeck_json, write_file, writer_cmd, Done,
    Proc, Writer,
};

use super::{counter, listed, reports_error_for, shown_metric, snapshot, writer, writer_bin};

/// Starts a `run` writer, lets it count at least `min` per worker, and
/// returns it (still alive, waiting for `exit`) with its exact count.
fn counted(dir: &Path, workers: u32, min: u64) -> (Writer, Done) {
    let (workers, min) = (workers.to_string(), min.to_string());
    let mut w = writer(
        dir,
        &[
            "run",
            "--workers",
            &workers,
            "--min-per-worker",
            &min,
            "--batch",
            "1000",
        ],
    );
    w.proc.send("go");
    w.proc.send("stop");
    let done = Done::parse(&w.proc.expect("done "));
    (w, done)
}

/// Kills `w` with SIGKILL.
fn sigkill(w: &mut Writer) {
    let status = w.proc.kill();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
}

#[test]
fn a_killed_writer_leaves_its_last_values_readable_and_is_reported_dead() {
    let ns = namespace_dir();
    let (mut w, done) = counted(ns.path(), 3, 200_000);
    let pid = w.pid();
    sigkill(&mut w);

    assert!(w.path.exists(), "the killed writer's file is gone");
    let mut r = RegistryReader::open(&w.path).unwrap();
    assert_eq!(r.liveness(), Liveness::Dead);
    assert_eq!(r.header().pid, pid);
    assert_eq!(r.header().process_name, "td-writer");
    let snap = r.snapshot().unwrap();
    assert_eq!(counter(&snap, "ops_total", &[]), done.ops);
    for (k, n) in done.per_worker.iter().enumerate() {
        assert_eq!(
            counter(&snap, "worker_ops_total", &[("worker", &k.to_string())]),
            *n
        );
    }
    match snap.get("op_value", &[]) {
        Some(Value::Histogram(h)) => assert_eq!((h.count, h.sum), (done.records, done.sum as f64)),
        other => panic!("op_value: {other:?}"),
    }
    assert_eq!(snap.get("workers_running", &[]), Some(&Value::Gauge(0)));

    let listing = Namespace::at(ns.path()).list();
    assert!(listing.errors.is_empty(), "{:?}", listing.errors);
    assert_eq!(listing.entries.len(), 1);
    let e = &listing.entries[0];
    assert_eq!(
        (e.path.as_path(), e.pid, e.liveness),
        (w.path.as_path(), pid, Liveness::Dead)
    );
    let (found, _) = Namespace::at(ns.path()).find(&pid.to_string());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].liveness, Liveness::Dead);

    let ls = topdeck_json(ns.path(), &["ls", "--json"]);
    let entry = listed(&ls, &w.path)
        .unwrap_or_else(|| panic!("`topdeck ls` does not list {}: {ls}", w.path.display()));
    assert_eq!(entry["state"], "dead", "{ls}");
    assert_eq!(entry["pid"], pid, "{ls}");
    let show = topdeck_json(ns.path(), &["show", &pid.to_string(), "--json"]);
    assert_eq!(show["state"], "dead", "{show}");
    assert_eq!(
        shown_metric(&show, "ops_total")["value"],
        done.ops,
        "{show}"
    );
}

#[test]
fn gc_removes_dead_writers_files_and_leaves_everything_else() {
    let ns = namespace_dir();
    let dir = ns.path();
    let live = writer(dir, &["idle"]);
    let mut dead = writer(dir, &["idle"]);
    sigkill(&mut dead);
    // Files gc must leave: one being created right now, one that is not topdeck's.
    let creating = dir.join(format!("{}999-1-0", topdeck::dir::TEMP_PREFIX));
    write_file(&creating, b"");
    let foreign = dir.join(format!("notes{}", topdeck::dir::FILE_SUFFIX));
    write_file(&foreign, b"not a metrics file, but somebody's notes\n");

    let report = Namespace::at(dir).gc();
    assert_eq!(report.removed, vec![dead.path.clone()]);
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert_eq!(report.errors[0].kind(), ErrorKind::Corrupt);
    assert!(
        report.errors[0]
            .to_string()
            .contains(&foreign.display().to_string()),
        "{}",
        report.errors[0]
    );
    assert!(!dead.path.exists());
    for kept in [&live.path, &creating, &foreign] {
        assert!(kept.exists(), "gc removed {}", kept.display());
    }

    // The command does the same.
    let mut dead2 = writer(dir, &["idle"]);
    sigkill(&mut dead2);
    let report = topdeck_json(dir, &["gc", "--json"]);
    let removed: Vec<PathBuf> = report["removed"]
        .as_array()
        .unwrap_or_else(|| panic!("no removed array: {report}"))
        .iter()
        .map(|p| PathBuf::from(p.as_str().expect("a path")))
        .collect();
    assert_eq!(removed, vec![dead2.path.clone()], "{report}");
    assert!(reports_error_for(&report, &foreign), "{report}");
    assert!(!dead2.path.exists());
    for kept in [&live.path, &creating, &foreign] {
        assert!(kept.exists(), "`topdeck gc` removed {}", kept.display());
    }

    let listing = Namespace::at(dir).list();
    let alive: Vec<_> = listing
        .entries
        .iter()
        .map(|e| (&e.path, e.liveness))
        .collect();
    assert_eq!(alive, vec![(&live.path, Liveness::Alive)]);
    assert_eq!(
        counter(&snapshot(&live.path), "good_total", &[("kind", "good")]),
        42
    );
}

/// Clock ticks since boot, as `/proc/<pid>/stat` counts start times.
fn ticks_now() -> u64 {
    let uptime = std::fs::read_to_string("/proc/uptime").expect("read /proc/uptime");
    let secs: f64 = uptime
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("uptime seconds");
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (secs * hz as f64) as u64
}

const NS_LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

/// Starts an `idle` writer with pid `pid`, steering the kernel's next pid;
/// `None` if other processes or threads kept taking it.
fn idle_writer_with_pid(dir: &Path, pid: u32) -> Option<Writer> {
    let held = exclusive_spawns();
    for _ in 0..20 {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(NS_LAST_PID)
            .ok()?;
        f.write_all((pid - 1).to_string().as_bytes()).ok()?;
        drop(f);
        let p = Proc::start_exclusive("td-writer", writer_cmd(writer_bin(), dir, &["idle"]), &held);
        if p.pid() == pid {
            return Some(Writer::from_proc(p));
        }
        // Someone else took the pid first: stop this one cleanly so it leaves no file.
        let mut w = Writer::from_proc(p);
        w.proc.send("exit");
        w.proc.wait();
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
fn a_new_writer_with_a_dead_writers_pid_is_told_apart() {
    const TEST: &str = "crash::a_new_writer_with_a_dead_writers_pid_is_told_apart";
    if !is_root() {
        skip(
            TEST,
            "writing /proc/sys/kernel/ns_last_pid needs root; pid reuse not tested",
        );
        return;
    }
    if std::fs::OpenOptions::new()
        .write(true)
        .open(NS_LAST_PID)
        .is_err()
    {
        skip(
            TEST,
            &format!("{NS_LAST_PID} is not writable here; pid reuse not tested"),
        );
        return;
    }
    let ns = namespace_dir();
    let dir = ns.path();
    let (mut old, done) = counted(dir, 1, 1000);
    let pid = old.pid();
    let old_start = RegistryReader::open(&old.path)
        .unwrap()
        .header()
        .start_ticks;
    sigkill(&mut old);
    // A pid reused within the same clock tick would give the same file name.
    while ticks_now() <= old_start + 1 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let Some(new) = idle_writer_with_pid(dir, pid) else {
        skip(
            TEST,
            &format!("pid {pid} was taken by other processes in 20 tries; pid reuse not tested"),
        );
        return;
    };

    assert_ne!(old.path, new.path);
    assert!(old.path.exists() && new.path.exists());
    let listing = Namespace::at(dir).list();
    assert!(listing.errors.is_empty(), "{:?}", listing.errors);
    let state = |p: &Path| {
        listing
            .entries
            .iter()
            .find(|e| e.path == p)
            .map(|e| (e.pid, e.liveness))
    };
    assert_eq!(state(&old.path), Some((pid, Liveness::Dead)));
    assert_eq!(state(&new.path), Some((pid, Liveness::Alive)));
    let (found, _) = Namespace::at(dir).find(&pid.to_string());
    assert_eq!(
        found.iter().map(|e| &e.path).collect::<Vec<_>>(),
        vec![&new.path, &old.path]
    );

    let ls = topdeck_json(dir, &["ls", "--json"]);
    assert_eq!(
        listed(&ls, &old.path).map(|e| &e["state"]),
        Some(&"dead".into()),
        "{ls}"
    );
    assert_eq!(
        listed(&ls, &new.path).map(|e| &e["state"]),
        Some(&"alive".into()),
        "{ls}"
    );
    let show = topdeck_json(dir, &["show", &pid.to_string(), "--json"]);
    assert_eq!(show["path"].as_str(), new.path.to_str(), "{show}");
    assert_eq!(show["state"], "alive", "{show}");
    assert_eq!(shown_metric(&show, "good_total")["value"], 42, "{show}");
    // The dead one still holds what it counted.
    assert_eq!(counter(&snapshot(&old.path), "ops_total", &[]), done.ops);

    let report = Namespace::at(dir).gc();
    assert_eq!(report.removed, vec![old.path.clone()]);
    assert!(new.path.exists());
}
