// SPDX-License-Identifier: Apache-2.0
//! A container holding both a topdeck writer and a JVM, as the host's
//! views meet it: the example service (its registry in the container's
//! own `/dev/shm`) and `examples/jvm/Alloc.java` (its hsperfdata in the
//! container's own `/tmp`) run in new mount and pid namespaces, in a
//! cgroup of their own. `ls`, `show` and `serve` on the host must name
//! both with their host pids and their container; and hsperfdata files
//! planted in a container's `/tmp` (truncated, garbage, a symlink, a FIFO)
//! must be errors naming them, never a hang or a crash, while the real JVM
//! beside them is still listed. Needs root and a JDK (CI has both):
//! without them each test says SKIPPED, and fails in CI.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::MutexGuard;

use serde_json::Value as Json;
use topdeck::dir::ENV_DIR;
use topdeck_tests::{topdeck_bin, workspace_bin, Proc};

use super::containers::{
    can_run, container, entries_named, host_listing, host_run, host_topdeck, nspid, runs_unless,
    wait_for_listing, Cgroup,
};
use super::hostile::{scrape, serve, ONE_AT_A_TIME};
use super::{portholes_where, shown_metric};

/// The JVM the tests run.
const PROGRAM: &str = include_str!("../../../examples/jvm/Alloc.java");

/// Whether the test can run: root, `unshare` and a JDK.
fn can_run_with_a_jvm(test: &str) -> bool {
    let jdk = ["java", "javac"].into_iter().find(|tool| {
        !Command::new(tool)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let why = jdk.map(|tool| format!("`{tool}` is not installed; run scripts/reach/hsperf.sh"));
    can_run(test) && runs_unless(test, why.as_deref())
}

/// `Alloc.class`, compiled into a directory removed when dropped: outside
/// `/tmp`, which the container mounts over (and so may the target
/// directory be, in a checkout under `/tmp`).
fn compiled_jvm() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("topdeck-it-jvm-")
        .tempdir_in("/var/tmp")
        .expect("create a directory in /var/tmp");
    std::fs::write(dir.path().join("Alloc.java"), PROGRAM).unwrap();
    let out = Command::new("javac")
        .arg("Alloc.java")
        .current_dir(dir.path())
        .output()
        .expect("run javac");
    assert!(
        out.status.success(),
        "javac Alloc.java: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// Shell words starting the JVM in the background, allocating until
/// killed, and saying `jvm <its pid in the container>`; the JVM says
/// `allocating` once it runs.
fn jvm_script(classes: &Path) -> String {
    format!(
        "java -Xmx64m -XX:+UseSerialGC -cp '{}' Alloc forever & echo jvm $!; ",
        classes.display()
    )
}

/// The `portholes` of `ls` whose file is the container's
/// `/tmp/hsperfdata_root/<name>`, as the host reaches it.
fn portholes_at<'a>(ls: &'a Json, name: &str) -> Vec<&'a Json> {
    let inside = format!("/root/tmp/hsperfdata_root/{name}");
    portholes_where(ls, |p| p.starts_with("/proc/") && p.ends_with(&inside))
}

/// The one porthole of `ls` at the container's hsperfdata file `name`.
fn porthole_at<'a>(ls: &'a Json, name: &str) -> &'a Json {
    match portholes_at(ls, name).as_slice() {
        [one] => one,
        other => panic!("{} portholes at {name}: {ls}", other.len()),
    }
}

/// The `errors` of `ls`.
fn errors_of(ls: &Json) -> Vec<&str> {
    ls["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors array: {ls}"))
        .iter()
        .filter_map(Json::as_str)
        .collect()
}

/// The host pid in `entry`, checked against the pid the process has in
/// its container (its `NSpid`).
fn host_pid_of(entry: &Json, inner: u32) -> u32 {
    let host = entry["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid: {entry}")) as u32;
    assert_ne!(host, inner, "the host pid, not the container's: {entry}");
    assert_eq!(nspid(host), (inner, host), "pid {host} is it: {entry}");
    host
}

/// The line of `body` for the series `name` whose labels include `pid`.
fn series_line<'a>(body: &'a str, name: &str, pid: u32) -> &'a str {
    let pid = format!("pid=\"{pid}\"");
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&pid))
        .unwrap_or_else(|| panic!("no {name} with {pid} in the scrape:\n{body}"))
}

/// What a test holds while its container runs; dropped in this order:
/// the container (and every process in it), its cgroup, the compiled
/// JVM, then the test's turn.
struct Scene {
    ns: Proc,
    cgroup: Cgroup,
    classes: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
}

/// A container in a cgroup named after `tag`, with a private `/tmp` too,
/// running `script` (given the compiled JVM's directory) after the JVM
/// has been compiled; `None` if the test cannot run here.
fn start_scene(test: &str, tag: &str, script: impl FnOnce(&Path) -> String) -> Option<Scene> {
    if !can_run_with_a_jvm(test) {
        return None;
    }
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let classes = compiled_jvm();
    let cgroup = Cgroup::create(tag);
    let ns = container(
        &cgroup,
        &format!(
            "mount -t tmpfs tmpfs /tmp || exit 1; {}",
            script(classes.path())
        ),
    );
    Some(Scene {
        ns,
        cgroup,
        classes,
        _turn: turn,
    })
}

#[test]
fn a_container_with_a_service_and_a_jvm_is_seen_whole_from_the_host() {
    // The shell (pid 1) waits for both, so killing one leaves the other
    // and the namespace; the service never reads its stdin.
    let Some(mut scene) = start_scene(
        "a_container_with_a_service_and_a_jvm_is_seen_whole_from_the_host",
        "mixed",
        |classes| {
            // Beside the classes, outside the /tmp the container mounts
            // over (the checkout, and so the binary, may be under /tmp).
            let service = classes.join("topdeck-example-service");
            std::fs::copy(workspace_bin("topdeck-example-service"), &service)
                .expect("copy the example service out of the checkout");
            format!(
                "'{}' --rate 100 --workers 1 & echo service $!; {}wait",
                service.display(),
                jvm_script(classes),
            )
        },
    ) else {
        return;
    };
    let service_inner: u32 = scene.ns.said("service ").parse().unwrap();
    let jvm_inner: u32 = scene.ns.said("jvm ").parse().unwrap();
    // The service's first line: `pid N registry PATH`.
    let first = scene.ns.said("pid ");
    let (pid, inside) = first
        .split_once(" registry ")
        .unwrap_or_else(|| panic!("the service's first line: pid {first}"));
    assert_eq!(pid, service_inner.to_string(), "{first}");
    let registry = Path::new(inside)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    scene.ns.said("allocating");
    let jvm_file = jvm_inner.to_string();

    let ls = wait_for_listing("the service and the JVM listed", |ls| {
        entries_named(ls, &registry).len() == 1 && portholes_at(ls, &jvm_file).len() == 1
    });
    let service = entries_named(&ls, &registry)[0];
    let service_host = host_pid_of(service, service_inner);
    let path = service["path"].as_str().unwrap();
    assert!(
        path.starts_with("/proc/") && path.ends_with(&format!("/root{inside}")),
        "the registry through the container's root: {service}"
    );
    assert_eq!(service["state"], "alive", "{service}");
    assert_eq!(service["process"], "topdeck-example-service", "{service}");
    assert_eq!(
        service["container"],
        scene.cgroup.name.as_str(),
        "{service}"
    );

    let jvm = porthole_at(&ls, &jvm_file);
    let jvm_host = host_pid_of(jvm, jvm_inner);
    assert_eq!(jvm["source"], "jvm", "{jvm}");
    assert_eq!(jvm["process"], "Alloc", "the main class names it: {jvm}");
    assert_eq!(jvm["container"], scene.cgroup.name.as_str(), "{jvm}");
    assert_eq!(jvm["state"], "alive", "{jvm}");
    let metrics = jvm["metrics"].as_u64().unwrap();
    assert!(metrics > 100, "a JVM publishes hundreds of counters: {jvm}");
    let jvm_path = jvm["path"].as_str().unwrap().to_owned();

    // The text listing names each row's source.
    let text = host_run(&["ls"]);
    assert!(text.status.success(), "{}", text.stderr);
    for (source, file) in [("topdeck", path), ("jvm", jvm_path.as_str())] {
        let row = text
            .stdout
            .lines()
            .find(|l| l.ends_with(file))
            .unwrap_or_else(|| panic!("{file} is not listed:\n{}", text.stdout));
        assert!(row.starts_with(&format!("{source} ")), "{row}");
    }

    let (ok, show) = host_topdeck(&["show", &jvm_host.to_string(), "--json"]);
    assert!(ok, "{show}");
    assert_eq!(show["source"], "jvm", "{show}");
    assert_eq!(show["pid"], jvm_host, "{show}");
    assert_eq!(show["path"], jvm_path.as_str(), "{show}");
    let collections = &shown_metric(&show, "jvm_sun_gc_collector_0_invocations")["value"];
    assert!(
        collections.as_u64().is_some_and(|n| n > 0),
        "the young collector ran: {show}"
    );
    // The summary above the counters says the same, as jstat -gcutil would.
    let jvm = &show["jvm"];
    let spaces: Vec<&str> = jvm["spaces"]
        .as_array()
        .unwrap_or_else(|| panic!("no JVM summary: {show}"))
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(spaces.contains(&"E") && spaces.contains(&"O"), "{jvm}");
    assert_eq!(jvm["collectors"][0]["name"], "YGC", "{jvm}");
    assert_eq!(
        jvm["collectors"][0]["count"].as_f64(),
        collections.as_u64().map(|n| n as f64),
        "{jvm}"
    );

    // Containers' registries are every user's: root's serve exports them
    // with --all-users.
    let mut cmd = Command::new(topdeck_bin());
    cmd.env_remove(ENV_DIR);
    let (mut endpoint, addr) = serve(cmd, &["--all-users"]);
    let body = scrape(&addr);
    endpoint.kill();
    let container = format!("container=\"{}\"", scene.cgroup.name);
    let gc = series_line(&body, "jvm_sun_gc_collector_0_invocations_total", jvm_host);
    for label in ["source=\"jvm\"", "process=\"Alloc\"", &container] {
        assert!(gc.contains(label), "{label} missing: {gc}");
    }
    let bytes = series_line(&body, "bytes_processed_total", service_host);
    assert!(bytes.contains(&container), "{container} missing: {bytes}");

    // A JVM killed outright leaves its file: dead, and no one's.
    // SAFETY: signals a process of this test's own namespace.
    assert_eq!(unsafe { libc::kill(jvm_host as i32, libc::SIGKILL) }, 0);
    let ls = wait_for_listing("the killed JVM's file listed as dead", |ls| {
        portholes_at(ls, &jvm_file)
            .first()
            .is_some_and(|j| j["state"] == "dead")
    });
    let jvm = porthole_at(&ls, &jvm_file);
    assert!(jvm["pid"].is_null() && jvm["container"].is_null(), "{jvm}");
    let service = entries_named(&ls, &registry);
    assert!(
        service.len() == 1 && service[0]["state"] == "alive",
        "the service lives on: {ls}"
    );

    // The namespace goes, and its /tmp and /dev/shm with it.
    scene.ns.kill();
    wait_for_listing("the container's files gone", |ls| {
        entries_named(ls, &registry).is_empty() && portholes_at(ls, &jvm_file).is_empty()
    });
}

/// Files planted beside a JVM's, each a different hostile shape, by the
/// name they get and what their error must say.
const PLANTED: [(&str, &str); 4] = [
    ("30001", "truncated"),
    ("30002", "not an hsperfdata file"),
    ("30003", "not a regular file"),
    ("30004", "not a regular file"),
];

/// Plants [`PLANTED`] in `dir`, a container's hsperfdata directory seen
/// from the host, beside `real` (a live JVM's file there); `outside` is
/// a host directory for the symlink's target.
fn plant(dir: &Path, real: &Path, outside: &Path) {
    let bytes = std::fs::read(real).unwrap();
    // Its prologue says how much of the file is used: far past this.
    std::fs::write(dir.join(PLANTED[0].0), &bytes[..256]).unwrap();
    std::fs::write(dir.join(PLANTED[1].0), b"garbage ".repeat(4096)).unwrap();
    // A whole, valid file on the host: following the link would list it.
    let target = outside.join("valid-copy");
    std::fs::write(&target, &bytes).unwrap();
    std::os::unix::fs::symlink(&target, dir.join(PLANTED[2].0)).unwrap();
    let fifo = std::ffi::CString::new(dir.join(PLANTED[3].0).as_os_str().as_bytes()).unwrap();
    // SAFETY: `fifo` is a NUL-terminated path that mkfifo does not keep.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
}

#[test]
fn a_hostile_hsperfdata_file_in_a_container_is_an_error_and_the_rest_still_lists() {
    let Some(mut scene) = start_scene(
        "a_hostile_hsperfdata_file_in_a_container_is_an_error_and_the_rest_still_lists",
        "hsperf",
        |classes| format!("{}wait", jvm_script(classes)),
    ) else {
        return;
    };
    let jvm_inner: u32 = scene.ns.said("jvm ").parse().unwrap();
    scene.ns.said("allocating");
    let jvm_file = jvm_inner.to_string();
    let ls = wait_for_listing("the JVM listed", |ls| {
        portholes_at(ls, &jvm_file).len() == 1
    });
    let jvm_host = host_pid_of(porthole_at(&ls, &jvm_file), jvm_inner);
    // Planted through the JVM's root, as a process in its container would.
    let dir = PathBuf::from(format!("/proc/{jvm_host}/root/tmp/hsperfdata_root"));
    plant(&dir, &dir.join(&jvm_file), scene.classes.path());

    // A reader that opened the FIFO blocking would never return: the
    // listing is bounded by `host_listing`'s own wait.
    let ls = host_listing();
    let errors = errors_of(&ls);
    for (name, why) in PLANTED {
        let file = format!("/root/tmp/hsperfdata_root/{name}: ");
        assert!(
            errors.iter().any(|e| e.contains(&file) && e.contains(why)),
            "{name} is not named as {why:?}: {ls}"
        );
        assert!(
            portholes_at(&ls, name).is_empty(),
            "{name} was listed: {ls}"
        );
    }
    let jvm = porthole_at(&ls, &jvm_file);
    assert_eq!(jvm["state"], "alive", "{jvm}");
    assert_eq!(jvm["process"], "Alloc", "{jvm}");
    assert_eq!(jvm["container"], scene.cgroup.name.as_str(), "{jvm}");
    assert!(jvm["metrics"].as_u64().is_some_and(|n| n > 100), "{jvm}");

    // The text listing warns about each and goes on.
    let text = host_run(&["ls"]);
    assert!(text.status.success(), "{}", text.stderr);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with("jvm ") && l.ends_with(&format!("/hsperfdata_root/{jvm_file}"))),
        "{}",
        text.stdout
    );
    for (name, _) in PLANTED {
        assert!(
            text.stderr.contains(&format!("/hsperfdata_root/{name}: ")),
            "no warning about {name}:\n{}",
            text.stderr
        );
    }
}

/// A prometheus_client counter file holding `jobs_total 5`.
fn prommp_counter_file() -> Vec<u8> {
    let key = br#"["jobs", "jobs_total", {}, "Jobs done"]"#;
    topdeck_portholes::prommp::file_of(&[(key, 5.0, 0.0)])
}

/// A valid hsperfdata file: the clock frequency every JVM publishes and
/// `command` as its `sun.rt.javaCommand`.
pub(super) fn perf_file(command: &str) -> Vec<u8> {
    use topdeck_portholes::hsperf;
    hsperf::SyntheticBuffer::new()
        .long(
            "sun.os.hrt.frequency",
            hsperf::Units::Hertz,
            hsperf::Variability::Constant,
            1_000_000_000,
        )
        .string("sun.rt.javaCommand", hsperf::Variability::Constant, command)
        .build()
}

/// A host directory (outside `/tmp`, which the container mounts over)
/// holding a valid file of each porthole, where a container's links
/// will point: `hsperfdata_root/40001`, `aeron/cnc.dat`,
/// `prom/counter_1.db`; and `real.db`, `real-cnc.dat` for the container
/// to copy into its own real sources.
fn host_files() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    use topdeck_portholes::aeron::CncBuilder;

    let host = tempfile::Builder::new()
        .prefix("topdeck-it-host-")
        .tempdir_in("/var/tmp")
        .expect("create a directory in /var/tmp");
    let h = host.path();
    let perms = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(h, perms.clone()).unwrap();
    for dir in ["hsperfdata_root", "aeron", "prom"] {
        std::fs::create_dir(h.join(dir)).unwrap();
        std::fs::set_permissions(h.join(dir), perms.clone()).unwrap();
    }
    std::fs::write(h.join("hsperfdata_root/40001"), perf_file("HostSecret")).unwrap();
    let cnc = CncBuilder::new().counter(0, "Bytes sent", 7).build();
    std::fs::write(h.join("aeron/cnc.dat"), &cnc).unwrap();
    std::fs::write(h.join("real-cnc.dat"), &cnc).unwrap();
    std::fs::write(h.join("prom/counter_1.db"), prommp_counter_file()).unwrap();
    std::fs::write(h.join("real.db"), prommp_counter_file()).unwrap();
    host
}

/// Shell words planting, in a container whose `/tmp` and `/dev/shm` are
/// its own, links to the host directory `host` where each porthole is
/// looked for, real sources of each beside them, then hiding `host` in
/// the container (a tmpfs over it), so that inside the container every
/// link leads to nothing: only a reader resolving them against the host's
/// root would find files there.
/// - `/tmp/hsperfdata_nobody` -> `host/hsperfdata_root`;
/// - a chroot at `/tmp/r` whose `/tmp` is a link to `host` (a `/tmp` that
///   is a link, which a mount point cannot be), with a process in it;
/// - `/dev/shm/aeron-root` -> `host/aeron`;
/// - a process whose `PROMETHEUS_MULTIPROC_DIR` is `/tmp/prom` ->
///   `host/prom`;
/// - real: `/tmp/realprom` (named by a process's environment) and
///   `/dev/shm/aeron-real/cnc.dat`, copied from `host`.
fn plant_links_script(host: &Path) -> String {
    format!(
        "H='{}'; set -e; \
         mkdir /tmp/realprom; cp \"$H/real.db\" /tmp/realprom/counter_1.db; \
         mkdir /dev/shm/aeron-real; cp \"$H/real-cnc.dat\" /dev/shm/aeron-real/cnc.dat; \
         ln -s \"$H/hsperfdata_root\" /tmp/hsperfdata_nobody; \
         ln -s \"$H/aeron\" /dev/shm/aeron-root; \
         ln -s \"$H/prom\" /tmp/prom; \
         mkdir /tmp/r; \
         for d in bin lib lib64 sbin usr; do \
           if [ -L /$d ]; then ln -s \"$(readlink /$d)\" /tmp/r/$d; \
           elif [ -d /$d ]; then mkdir /tmp/r/$d; mount --bind /$d /tmp/r/$d; fi; \
         done; \
         ln -s \"$H\" /tmp/r/tmp; \
         mount -t tmpfs tmpfs \"$H\"; \
         PROMETHEUS_MULTIPROC_DIR=/tmp/prom sleep 600 & \
         PROMETHEUS_MULTIPROC_DIR=/tmp/realprom sleep 600 & \
         chroot /tmp/r sleep 600 & \
         set +e; echo planted; ",
        host.display()
    )
}

#[test]
fn links_planted_in_a_container_do_not_lead_the_host_reader_to_host_portholes() {
    let host = host_files();
    let Some(mut scene) = start_scene(
        "links_planted_in_a_container_do_not_lead_the_host_reader_to_host_portholes",
        "links",
        |classes| {
            format!(
                "{}{}wait",
                plant_links_script(host.path()),
                jvm_script(classes)
            )
        },
    ) else {
        return;
    };
    scene.ns.expect("planted");
    let jvm_inner: u32 = scene.ns.said("jvm ").parse().unwrap();
    scene.ns.said("allocating");
    let jvm_file = jvm_inner.to_string();
    let paths = |ls: &Json| -> Vec<String> {
        ls["portholes"]
            .as_array()
            .unwrap_or_else(|| panic!("no portholes array: {ls}"))
            .iter()
            .filter_map(|p| p["path"].as_str().map(str::to_owned))
            .collect()
    };
    // The container's real sources are listed through its root.
    let real = [
        "/root/tmp/realprom".to_owned(),
        "/root/dev/shm/aeron-real/cnc.dat".to_owned(),
        format!("/root/tmp/hsperfdata_root/{jvm_file}"),
    ];
    let ls = wait_for_listing("the container's real sources listed", |ls| {
        let paths = paths(ls);
        real.iter().all(|r| {
            paths
                .iter()
                .any(|p| p.starts_with("/proc/") && p.ends_with(r.as_str()))
        })
    });
    let jvm = porthole_at(&ls, &jvm_file);
    assert_eq!(jvm["process"], "Alloc", "{jvm}");
    assert_eq!(jvm["container"], scene.cgroup.name.as_str(), "{jvm}");

    // Nothing of the host directory, under any name.
    let listed = paths(&ls);
    for leaked in ["/40001", "/aeron-root/", "/tmp/prom", "/hsperfdata_nobody/"] {
        assert!(
            !listed
                .iter()
                .any(|p| p.contains(leaked) && !p.ends_with("/tmp/realprom")),
            "{leaked}: a host file was listed through the container: {ls}"
        );
    }
    let text = ls.to_string();
    assert!(
        !text.contains("HostSecret"),
        "the host's JVM file was read: {ls}"
    );
    let errors = errors_of(&ls);
    // The links met directly are named as links; those met inside the
    // container's root lead nowhere there, and there is nothing to list.
    for link in ["/root/dev/shm/aeron-root", "/root/tmp/hsperfdata_nobody"] {
        assert!(
            errors
                .iter()
                .any(|e| e.contains(link) && e.contains("symbolic link")),
            "{link} is not named as a symbolic link: {ls}"
        );
    }
    for e in &errors {
        assert!(
            !e.contains(&host.path().display().to_string()),
            "an error about the host directory, so it was looked into: {e}"
        );
    }
}
