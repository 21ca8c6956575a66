// SPDX-License-Identifier: Apache-2.0
//! Writers in containers, as a host's reader meets them: a real writer
//! started in its own mount and pid namespaces (`unshare`) with a private
//! tmpfs on `/dev/shm`, placed in a cgroup of its own. The host's `topdeck
//! ls` must list its registry through `/proc/<pid>/root`, with its host
//! pid, its liveness and its container; and a symlink planted in the
//! container must not lead the host's reader anywhere. Needs root (CI runs
//! as root): without it each test says SKIPPED, and fails in CI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use topdeck::dir::ENV_DIR;
use topdeck_tests::{is_root, skip, topdeck_bin, Finished, Proc, TIMEOUT};

use super::{hostile::ONE_AT_A_TIME, shown_metric, writer_bin};

/// Whether the test can run; says SKIPPED (or fails in CI) if not.
pub(super) fn can_run(test: &str) -> bool {
    let why = if !is_root() {
        "namespaces, mounts and cgroups need root"
    } else if Command::new("unshare").arg("--version").output().is_err() {
        "`unshare` (util-linux) is not installed"
    } else {
        return true;
    };
    runs_unless(test, Some(why))
}

/// Whether the test can run, given `why` it cannot, if anything: says
/// SKIPPED then, or fails in CI, which must run every test.
pub(super) fn runs_unless(test: &str, why: Option<&str>) -> bool {
    let Some(why) = why else {
        return true;
    };
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why}, and CI must run it");
    }
    skip(test, &format!("SKIPPED: {why}"));
    false
}

/// A cgroup made for one test in the unified hierarchy and in the v1 cpu
/// one, where they are mounted; removed when dropped (its processes gone).
pub(super) struct Cgroup {
    pub(super) name: String,
    dirs: Vec<PathBuf>,
}

impl Cgroup {
    pub(super) fn create(tag: &str) -> Self {
        let name = format!("topdeck-it-{tag}-{}", std::process::id());
        let mut dirs = Vec::new();
        for parent in [
            "/sys/fs/cgroup/unified",
            "/sys/fs/cgroup/cpu",
            "/sys/fs/cgroup/cpu,cpuacct",
            "/sys/fs/cgroup",
        ] {
            let parent = Path::new(parent);
            // On a hybrid host /sys/fs/cgroup itself is a tmpfs of
            // mounts, without cgroup.procs; cpu may be a link to cpu,cpuacct.
            if !parent.join("cgroup.procs").exists() || parent.is_symlink() {
                continue;
            }
            let dir = parent.join(&name);
            std::fs::create_dir(&dir)
                .unwrap_or_else(|e| panic!("create the cgroup {}: {e}", dir.display()));
            dirs.push(dir);
        }
        assert!(!dirs.is_empty(), "no cgroup hierarchy under /sys/fs/cgroup");
        Self { name, dirs }
    }

    /// Shell words that move the shell itself into every one of them.
    pub(super) fn join_script(&self) -> String {
        self.dirs
            .iter()
            .map(|d| format!("echo $$ > '{}/cgroup.procs' && ", d.display()))
            .collect()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // A killed process leaves its cgroup once it is reaped, which may
        // lag a moment behind.
        let deadline = Instant::now() + Duration::from_secs(10);
        for d in &self.dirs {
            while std::fs::remove_dir(d).is_err() && d.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A shell as pid 1 of new mount and pid namespaces, in `cgroup`, with a
/// private tmpfs on `/dev/shm`, running `script` after that; killing the
/// `unshare` process (the returned one) kills it and its namespace.
pub(super) fn container(cgroup: &Cgroup, script: &str) -> Proc {
    let mut cmd = unshared_sh(&format!(
        "{}mount -t tmpfs tmpfs /dev/shm && {script}",
        cgroup.join_script()
    ));
    cmd.env_remove(ENV_DIR);
    Proc::start("container", cmd)
}

/// `sh -c script` as pid 1 of new mount (private propagation) and pid
/// namespaces, with its own `/proc`; killing the `unshare` process kills
/// it and its namespace.
pub(super) fn unshared_sh(script: &str) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "sh",
        "-c",
        script,
    ]);
    cmd
}

/// `topdeck args...` as the host's reader sees it (no `TOPDECK_DIR`).
pub(super) fn host_run(args: &[&str]) -> Finished {
    let mut cmd = Command::new(topdeck_bin());
    cmd.args(args).env_remove(ENV_DIR);
    let mut p = Proc::start("topdeck", cmd);
    p.close_stdin();
    p.finish()
}

/// `topdeck args...` as the host's reader sees it (no `TOPDECK_DIR`):
/// its status and its JSON.
pub(super) fn host_topdeck(args: &[&str]) -> (bool, Json) {
    let out = host_run(args);
    let json = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "`topdeck {}` printed no valid JSON ({e}):\n{}\nstderr:\n{}",
            args.join(" "),
            out.stdout,
            out.stderr
        )
    });
    (out.status.success(), json)
}

/// The registries of `topdeck ls --json` on the host.
pub(super) fn host_listing() -> Json {
    let (ok, ls) = host_topdeck(&["ls", "--json"]);
    assert!(ok, "`topdeck ls --json` failed: {ls}");
    ls
}

/// The entries of `ls` whose file is `name`.
pub(super) fn entries_named<'a>(ls: &'a Json, name: &str) -> Vec<&'a Json> {
    ls["registries"]
        .as_array()
        .unwrap_or_else(|| panic!("no registries array: {ls}"))
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| Path::new(p).file_name() == Some(name.as_ref()))
        })
        .collect()
}

/// The innermost and outermost pids of `pid`'s `NSpid` line.
pub(super) fn nspid(pid: u32) -> (u32, u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let pids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    (pids[pids.len() - 1], pids[0])
}

/// Polls the host's listing until `done` holds for the entries of `name`.
fn wait_for(name: &str, what: &str, done: impl Fn(&[&Json]) -> bool) -> Json {
    wait_for_listing(&format!("{name} {what}"), |ls| {
        done(&entries_named(ls, name))
    })
}

/// Polls the host's listing until `done` holds for it; fails the test
/// with the last listing, saying `what` never happened, after a while.
pub(super) fn wait_for_listing(what: &str, done: impl Fn(&Json) -> bool) -> Json {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let ls = host_listing();
        if done(&ls) {
            return ls;
        }
        assert!(Instant::now() < deadline, "never: {what}: {ls}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_writer_in_a_container_is_listed_with_its_host_pid_container_and_liveness() {
    let test = "a_writer_in_a_container_is_listed_with_its_host_pid_container_and_liveness";
    if !can_run(test) {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let cgroup = Cgroup::create("ls");
    // The writer runs as pid 2 of its namespace, its shell (pid 1) waits:
    // killing the writer alone leaves its file, and its namespace, behind.
    let mut ns = container(
        &cgroup,
        // (A background job's stdin is /dev/null unless redirected, and
        // the writer lives until its stdin ends.)
        &format!(
            "exec 3<&0; '{}' idle <&3 & echo writer $!; wait; exec sleep 600",
            writer_bin().display()
        ),
    );
    let inner_pid: u32 = ns.expect("writer ").parse().unwrap();
    let inside = PathBuf::from(ns.said("ready "));
    let name = inside.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with(&format!("{inner_pid}-")),
        "the file is named after the writer's own pid: {name}"
    );

    let ls = host_listing();
    let found = entries_named(&ls, &name);
    assert_eq!(found.len(), 1, "listed once: {ls}");
    let e = found[0];
    let host_pid = e["pid"].as_u64().unwrap() as u32;
    assert_ne!(
        host_pid, inner_pid,
        "the host pid, not the container's: {e}"
    );
    assert_eq!(
        nspid(host_pid),
        (inner_pid, host_pid),
        "pid {host_pid} is the writer: {e}"
    );
    let path = e["path"].as_str().unwrap();
    assert!(
        path.starts_with("/proc/") && path.ends_with(&format!("/root{}", inside.display())),
        "the file as seen through the container's root: {e}"
    );
    assert_eq!(e["state"], "alive", "{e}");
    assert_eq!(e["process"], "td-writer", "{e}");
    assert_eq!(e["container"].as_str(), Some(cgroup.name.as_str()), "{e}");
    // The path is one a user can read on the host.
    assert!(Path::new(path).is_file(), "{path} is not readable here");

    let (ok, show) = host_topdeck(&["show", &host_pid.to_string(), "--json"]);
    assert!(ok, "{show}");
    assert_eq!(show["state"], "alive", "{show}");
    assert_eq!(shown_metric(&show, "good_total")["value"], 42, "{show}");
    let (ok, show) = host_topdeck(&["show", path, "--json"]);
    assert!(ok, "{show}");
    assert_eq!(shown_metric(&show, "good_total")["value"], 42, "{show}");

    // SAFETY: signals a process of this test's own namespace.
    assert_eq!(unsafe { libc::kill(host_pid as i32, libc::SIGKILL) }, 0);
    wait_for(&name, "became dead", |found| {
        found.len() == 1 && found[0]["state"] == "dead" && found[0]["container"].is_null()
    });

    // The namespace goes, and its /dev/shm with it.
    ns.kill();
    wait_for(&name, "was gone", |found| found.is_empty());
}

#[test]
fn a_symlink_planted_in_a_container_does_not_lead_the_host_reader_out() {
    let test = "a_symlink_planted_in_a_container_does_not_lead_the_host_reader_out";
    if !can_run(test) {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // A host directory holding a live registry, outside every /dev/shm.
    let host_dir = topdeck_tests::namespace_dir();
    let victim = topdeck_tests::Writer::start(writer_bin(), host_dir.path(), &["idle"]);
    let victim_name = victim
        .path
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();

    // The container's topdeck-0 is a symlink to it, through the host's
    // root as the container's /proc shows it (a magic link) and plainly.
    let cgroup = Cgroup::create("link");
    let magic = format!("/proc/1/root{}", host_dir.path().display());
    let mut ns = container(
        &cgroup,
        &format!(
            "ln -s '{magic}' /dev/shm/topdeck-0 && ln -s '{}' /dev/shm/topdeck-1 && \
             mkdir -m 700 /dev/shm/topdeck-0.ab && ln -s /proc/1/root/dev /dev/shm/topdeck-0.ab/x.topdeck && \
             echo planted && exec sleep 600",
            host_dir.path().display()
        ),
    );
    ns.expect("planted");

    let (ok, ls) = host_topdeck(&["ls", "--json"]);
    assert!(
        ok,
        "a container's planted links must not fail the host's listing: {ls}"
    );
    let through_link: Vec<_> = entries_named(&ls, &victim_name)
        .into_iter()
        .filter(|e| e["path"].as_str() != victim.path.to_str())
        .collect();
    assert!(
        through_link.is_empty(),
        "the host directory's registry was listed through the container: {ls}"
    );
    let errors: Vec<&str> = ls["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    for link in ["topdeck-0", "topdeck-1"] {
        assert!(
            errors
                .iter()
                .any(|e| e.contains(&format!("/dev/shm/{link}")) && e.contains("symlink")),
            "the planted {link} is named as a symlink: {ls}"
        );
    }
    assert!(
        errors
            .iter()
            .any(|e| e.contains("/dev/shm/topdeck-0.ab/x.topdeck") && e.contains("symlink")),
        "the planted file is named as a symlink: {ls}"
    );
    drop(ns);
    drop(victim);
}
