// SPDX-License-Identifier: Apache-2.0
//! Porthole files a local user writes naming a process that is not
//! theirs: an hsperfdata file named after a root service's pid, a
//! `cnc.dat` whose header gives that pid. Root's `topdeck ls` and
//! `topdeck serve --all-users` must list them without that process's
//! `pid` and `container` (docs/SECURITY.md says those labels are
//! checked), while a file its own process wrote keeps its pid; and a
//! driver in a container sharing the host's `/dev/shm` (`--ipc=host`)
//! is named by its host pid, not by the pid its header gives. The
//! attacker is uid 1000 (`setpriv`, no account needed), its processes
//! real ones. Needs root (CI runs as root): without it each test says
//! SKIPPED, and fails in CI.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::MutexGuard;

use serde_json::Value as Json;
use topdeck::dir::ENV_DIR;
use topdeck_portholes::aeron;
use topdeck_tests::{topdeck_bin, Proc};

use super::containers::{can_run, host_listing, Cgroup};
use super::hostile::{scrape, serve, ONE_AT_A_TIME};
use super::portholes::perf_file;

/// The local user writing the files.
const ATTACKER: u32 = 1000;

/// `argv` as uid and gid [`ATTACKER`], without supplementary groups.
fn as_attacker(argv: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        &format!("--reuid={ATTACKER}"),
        &format!("--regid={ATTACKER}"),
        "--clear-groups",
        "--",
    ])
    .args(argv)
    .env_remove(ENV_DIR);
    cmd
}

/// Runs `script` in `sh` as the attacker (its errors to the test's
/// stderr); fails the test if it fails.
fn attacker_runs(script: &str) {
    let status = as_attacker(&["sh", "-c", script])
        .status()
        .expect("run setpriv");
    assert!(status.success(), "as uid {ATTACKER}: {script}: {status}");
}

/// A long-lived process started by `cmd`, which says `pid <its pid>`
/// first, and that pid.
fn sleeper(name: &str, mut cmd: Command) -> (Proc, u32) {
    cmd.env_remove(ENV_DIR);
    let mut p = Proc::start(name, cmd);
    let pid = p.said("pid ").trim().parse().expect("a pid");
    (p, pid)
}

/// A root `sleep` in the cgroup `cgroup` (a service with a container
/// name), and its pid.
fn root_service(cgroup: &Cgroup) -> (Proc, u32) {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!(
        "{}echo pid $$; exec sleep 600",
        cgroup.join_script()
    ));
    sleeper("root service", cmd)
}

/// A `sleep` of the attacker's own, and its pid.
fn attacker_process() -> (Proc, u32) {
    sleeper(
        "attacker's process",
        as_attacker(&["sh", "-c", "echo pid $$; exec sleep 600"]),
    )
}

/// Paths removed (as root) when dropped, files or directories.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

/// A directory the attacker can read, holding `bytes` as `name`, to copy
/// from; removed when dropped.
fn readable(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("topdeck-it-forged-")
        .tempdir_in("/var/tmp")
        .expect("create a directory in /var/tmp");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, bytes).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, file)
}

/// The test's turn and a cgroup named after `tag`, or `None` (said) when
/// it cannot run here.
fn turn(test: &str, tag: &str) -> Option<(MutexGuard<'static, ()>, Cgroup)> {
    if !can_run(test) {
        return None;
    }
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    Some((turn, Cgroup::create(tag)))
}

/// The one porthole of `ls` at `path`.
fn porthole<'a>(ls: &'a Json, path: &Path) -> &'a Json {
    let path = path.to_str().unwrap();
    let all = ls["portholes"]
        .as_array()
        .unwrap_or_else(|| panic!("no portholes array: {ls}"));
    let at: Vec<&Json> = all.iter().filter(|p| p["path"] == path).collect();
    match at.as_slice() {
        [one] => one,
        other => panic!("{} portholes at {path}: {ls}", other.len()),
    }
}

/// Fails unless `entry` names neither `pid` nor its container, and
/// names the attacker as its file's owner.
fn names_nobody(entry: &Json, pid: u32, container: &str) {
    assert_eq!(entry["uid"], ATTACKER, "the file's owner: {entry}");
    assert_ne!(entry["pid"], pid, "another process's pid: {entry}");
    assert!(
        entry["pid"].is_null(),
        "a pid not shown to be its writer: {entry}"
    );
    assert_ne!(
        entry["container"], container,
        "another process's container: {entry}"
    );
    assert!(entry["container"].is_null(), "{entry}");
}

/// The lines of a scrape of root's `serve --all-users`.
fn served() -> String {
    let mut cmd = Command::new(topdeck_bin());
    cmd.env_remove(ENV_DIR);
    let (mut endpoint, addr) = serve(cmd, &["--all-users"]);
    let body = scrape(&addr);
    endpoint.kill();
    body
}

/// Fails if a porthole series of `body` carries `pid` or `container`.
fn no_series_names(body: &str, pid: u32, container: &str) {
    let pid_label = format!("pid=\"{pid}\"");
    let container_label = format!("container=\"{container}\"");
    let attacker = format!("uid=\"{ATTACKER}\"");
    let mut attackers = 0;
    for line in body.lines().filter(|l| l.contains("source=\"")) {
        assert!(
            !line.contains(&pid_label) && !line.contains(&container_label),
            "a porthole series labelled as the root service: {line}"
        );
        attackers += usize::from(line.contains(&attacker));
    }
    assert!(
        attackers > 0,
        "no series with the owner's {attacker}:\n{body}"
    );
}

#[test]
fn an_hsperfdata_file_named_after_another_users_process_does_not_get_its_pid() {
    const TEST: &str = "an_hsperfdata_file_named_after_another_users_process_does_not_get_its_pid";
    let Some((_turn, cgroup)) = turn(TEST, "forged-jvm") else {
        return;
    };
    let (_service, victim) = root_service(&cgroup);
    let (_own, own) = attacker_process();
    let (_src, src) = readable("perf", &perf_file("Forged"));
    // A user name of its own, not to meet a real JVM's directory.
    let dir = PathBuf::from(format!("/tmp/hsperfdata_tdforged{}", std::process::id()));
    let _cleanup = Cleanup(vec![dir.clone()]);
    attacker_runs(&format!(
        "mkdir -m 755 '{d}' && cp '{s}' '{d}/{victim}' && cp '{s}' '{d}/{own}'",
        d = dir.display(),
        s = src.display()
    ));

    let ls = host_listing();
    let forged = porthole(&ls, &dir.join(victim.to_string()));
    names_nobody(forged, victim, &cgroup.name);
    let genuine = porthole(&ls, &dir.join(own.to_string()));
    assert_eq!(genuine["pid"], own, "its own process wrote it: {genuine}");
    no_series_names(&served(), victim, &cgroup.name);
}

#[test]
fn a_cnc_file_naming_another_users_process_does_not_get_its_pid() {
    const TEST: &str = "a_cnc_file_naming_another_users_process_does_not_get_its_pid";
    let Some((_turn, cgroup)) = turn(TEST, "forged-aeron") else {
        return;
    };
    let (_service, victim) = root_service(&cgroup);
    let (_own, own) = attacker_process();
    let now = aeron::now_ms();
    let cnc = |pid: u32, start_ms: i64| {
        aeron::CncBuilder::new()
            .counter(0, "Bytes sent", 7)
            .pid(pid.into())
            .heartbeat_ms(now)
            .start_ms(start_ms)
            .build()
    };
    let (_src, forged_src) = readable("forged", &cnc(victim, now));
    let own_src = forged_src.with_file_name("own");
    std::fs::write(&own_src, cnc(own, now)).unwrap();
    // The attacker's own process, but a driver that started an hour before
    // it: a pid reused since.
    let reused_src = forged_src.with_file_name("reused");
    std::fs::write(&reused_src, cnc(own, now - 3_600_000)).unwrap();
    for f in [&own_src, &reused_src] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let dir = |what: &str| {
        PathBuf::from(format!(
            "/dev/shm/aeron-tdforged{}-{what}",
            std::process::id()
        ))
    };
    let _cleanup = Cleanup(["forged", "own", "reused"].map(dir).to_vec());
    for (what, src) in [
        ("forged", &forged_src),
        ("own", &own_src),
        ("reused", &reused_src),
    ] {
        attacker_runs(&format!(
            "mkdir -m 755 '{d}' && cp '{s}' '{d}/cnc.dat'",
            d = dir(what).display(),
            s = src.display()
        ));
    }

    let ls = host_listing();
    let forged_path = dir("forged").join("cnc.dat");
    let forged = porthole(&ls, &forged_path);
    names_nobody(forged, victim, &cgroup.name);
    let errors = ls["errors"].to_string();
    assert!(
        errors.contains(forged_path.to_str().unwrap())
            && errors.contains(&format!("process {victim} runs as uid 0")),
        "the refusal is not said: {ls}"
    );
    let reused = porthole(&ls, &dir("reused").join("cnc.dat"));
    assert!(
        reused["pid"].is_null(),
        "a driver older than its process: {reused}"
    );
    let genuine = porthole(&ls, &dir("own").join("cnc.dat"));
    assert_eq!(genuine["pid"], own, "its own process wrote it: {genuine}");
    no_series_names(&served(), victim, &cgroup.name);
}

#[test]
fn a_driver_in_a_container_sharing_the_hosts_dev_shm_is_named_by_its_host_pid() {
    const TEST: &str = "a_driver_in_a_container_sharing_the_hosts_dev_shm_is_named_by_its_host_pid";
    let Some((_turn, cgroup)) = turn(TEST, "ipc-host") else {
        return;
    };
    let dir = PathBuf::from(format!("/dev/shm/aeron-tdipchost{}", std::process::id()));
    let _cleanup = Cleanup(vec![dir.clone()]);
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("cnc.dat");
    // Pid 1 of a pid namespace of its own, with the host's /dev/shm and
    // /proc (its /proc/self is its host pid): it maps the driver's file
    // once there, as a driver does.
    let mapper = "import mmap, os, sys, time\n\
                  print('pid', os.readlink('/proc/self'), flush=True)\n\
                  while not os.path.exists(sys.argv[1]): time.sleep(0.02)\n\
                  f = open(sys.argv[1], 'rb')\n\
                  m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n\
                  print('mapped', flush=True)\n\
                  time.sleep(600)\n";
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!(
        "{}exec unshare --pid --fork --kill-child python3 -c \"$0\" \"$1\"",
        cgroup.join_script()
    ));
    cmd.args([mapper, file.to_str().unwrap()]);
    let (mut driver, host_pid) = sleeper("driver in a container", cmd);
    let written = aeron::CncBuilder::new()
        .counter(0, "Bytes sent", 7)
        .pid(1)
        .heartbeat_ms(aeron::now_ms())
        .build();
    std::fs::write(&file, written).unwrap();
    driver.expect("mapped");

    let ls = host_listing();
    let found = porthole(&ls, &file);
    assert_eq!(
        found["pid"], host_pid,
        "its host pid, not its header's 1: {found}"
    );
    assert_eq!(found["container"], cgroup.name.as_str(), "{found}");
}
