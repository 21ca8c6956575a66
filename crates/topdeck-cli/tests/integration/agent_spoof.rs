// SPDX-License-Identifier: Apache-2.0
//! A real second user publishes a registry named `topdeck-agent` with
//! fabricated verdicts in its own `/dev/shm/topdeck-<uid>`, the attack
//! found on this machine; root's `topdeck sched` and `topdeck top` must
//! not take it for the agent, must count it, and must show the real agent
//! when one runs alongside.
//!
//! Needs root (to add the user and to run the agent); it works in the
//! host's namespace (no `TOPDECK_DIR`), because that is where the attack
//! happens: every user's directory under /dev/shm is read.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use topdeck_procfs::testing::root_or_skip;

use super::*;

/// Set in the child that plays the spoofer.
const SPOOF_WRITER: &str = "TOPDECK_CLI_TEST_SPOOF_WRITER";

/// A system user made for one test, and removed (with the namespace
/// directory its processes made) when dropped.
struct SpoofUser {
    name: String,
    uid: u32,
    gid: u32,
}

impl SpoofUser {
    fn create() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        // Short enough for useradd's 32-character limit.
        let name = format!("td-spoof-{:x}{:x}", std::process::id(), nanos);
        let status = std::process::Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(&name)
            .status()
            .expect("running useradd");
        assert!(status.success(), "useradd {name}: {status:?}");
        let id = |flag: &str| -> u32 {
            let out = std::process::Command::new("id")
                .args([flag, &name])
                .output()
                .expect("running id");
            text(&out.stdout).trim().parse().expect("a numeric id")
        };
        let (uid, gid) = (id("-u"), id("-g"));
        Self { name, uid, gid }
    }

    /// The namespace directory this user's writers make.
    fn dir(&self) -> PathBuf {
        PathBuf::from(format!("/dev/shm/topdeck-{}", self.uid))
    }
}

impl Drop for SpoofUser {
    fn drop(&mut self) {
        // Made by this test's child, so this test removes it.
        let _ = std::fs::remove_dir_all(self.dir());
        let _ = std::process::Command::new("userdel")
            .arg(&self.name)
            .status();
    }
}

/// The spoofer: this test binary again, as `user`, on the ignored helper
/// below; it publishes until its stdin closes. Killed when dropped.
struct Spoofer {
    child: Child,
    _stdin: ChildStdin,
    path: PathBuf,
}

impl Spoofer {
    fn start(user: &SpoofUser) -> Self {
        let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "agent_spoof::spoof_writer_helper",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(SPOOF_WRITER, "1")
            .env_remove("TOPDECK_DIR")
            // Its own directory, /dev/shm/topdeck-<uid>, as a real user's
            // application would use.
            .uid(user.uid)
            .gid(user.gid)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the spoofer");
        let stdin = child.stdin.take().expect("its stdin");
        let stdout = child.stdout.take().expect("its stdout");
        let path = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.split_once("spoof-ready ").map(|(_, p)| PathBuf::from(p)))
            .unwrap_or_else(|| {
                let mut err = String::new();
                use std::io::Read;
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                panic!("the spoofer did not publish: {err}")
            });
        Self {
            child,
            _stdin: stdin,
            path,
        }
    }
}

impl Drop for Spoofer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Not a test of its own: the body of the spoofer [`Spoofer`] starts.
#[test]
#[ignore = "run by `Spoofer::start` as another user"]
fn spoof_writer_helper() {
    if std::env::var_os(SPOOF_WRITER).is_none() {
        return;
    }
    let r = topdeck::Registry::builder()
        .name("topdeck-agent")
        .build()
        .expect("the spoofer's registry");
    // The agent's own metric names, with a verdict nobody reached.
    r.gauge(
        "topdeck_sched_verdict",
        &[
            ("cgroup", "/victim"),
            ("culprit", "/fabricated"),
            ("kind", "noisy_neighbour"),
        ],
        "1 while the verdict holds.",
        "",
    )
    .unwrap()
    .set(1);
    let h = r
        .histogram(
            "topdeck_runq_latency_seconds",
            &[("cgroup", "/victim"), ("container", "fabricated")],
            "Run-queue waits.",
            "seconds",
        )
        .unwrap();
    h.record(9.0);
    println!("spoof-ready {}", r.path().display());
    // Until the test closes stdin (or kills us).
    let _ = std::io::stdin().lines().count();
}

/// `topdeck` in the host's namespace, as root.
fn host_topdeck() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_topdeck"));
    c.env_remove("TOPDECK_DIR");
    c
}

/// The real agent in the host's namespace; stopped with SIGTERM (which
/// removes its file) when dropped.
struct RealAgent(Child);

impl RealAgent {
    fn start() -> (Self, PathBuf) {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_topdeck"))
            .args([
                "agent",
                "--thread-waits",
                "off",
                "--interval",
                "200ms",
                "--count",
                "300",
            ])
            .env_remove("TOPDECK_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning topdeck agent");
        let agent = Self(child);
        let prefix = format!("{}-", agent.0.id());
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if let Some(p) = std::fs::read_dir("/dev/shm/topdeck-0").ok().and_then(|d| {
                d.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".topdeck"))
                })
            }) {
                return (agent, p);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the agent published nothing in /dev/shm/topdeck-0");
    }
}

impl Drop for RealAgent {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn untrusted_names(v: &serde_json::Value, path: &Path, uid: u32) -> bool {
    let want = format!(
        "registry {}: named topdeck-agent but owned by uid {uid}",
        path.display()
    );
    v["untrusted_agents"].as_array().is_some_and(|a| {
        a.iter()
            .any(|s| s.as_str().is_some_and(|s| s.starts_with(&want)))
    })
}

#[test]
fn another_users_topdeck_agent_registry_is_never_taken_for_the_agent() {
    if !root_or_skip("it adds a second user and runs the agent") {
        return;
    }
    let user = SpoofUser::create();
    let spoof = Spoofer::start(&user);
    assert!(
        spoof.path.starts_with(user.dir()),
        "{}",
        spoof.path.display()
    );
    let spoof_pid = spoof.child.id();

    // Alone: whatever sched shows, it is not the spoof.
    let out = host_topdeck()
        .args(["sched", "--window", "300ms", "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert!(
        v["source"] != "agent" || v["pid"] != spoof_pid,
        "the spoof was read as the agent: {v}"
    );
    assert!(v["spoofed_agents"].as_u64().unwrap() >= 1, "{v}");
    assert!(untrusted_names(&v, &spoof.path, user.uid), "{v}");
    assert!(!v.to_string().contains("/fabricated"), "{v}");

    let out = host_topdeck()
        .args(["sched", "--window", "200ms"])
        .assert()
        .success();
    let t = text(&out.get_output().stdout);
    assert!(
        t.contains(&format!("note: ignored registry {}", spoof.path.display())),
        "{t}"
    );
    assert!(!t.contains("/fabricated"), "{t}");

    let out = host_topdeck()
        .args(["top", "--once", "--json", "--interval", "200ms"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert!(v["spoofed_agents"].as_u64().unwrap() >= 1, "{v}");
    assert!(
        v["scheduler"].is_null() || v["scheduler"]["pid"] != spoof_pid,
        "{v}"
    );
    let row = v["registries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == spoof.path.display().to_string())
        .unwrap_or_else(|| panic!("the spoof is still listed as a registry: {v}"));
    assert!(
        row["untrusted"]
            .as_str()
            .unwrap()
            .contains(&format!("owned by uid {}", user.uid)),
        "{row}"
    );

    // With the real agent running alongside, the real one is shown.
    let root_dir = Path::new("/dev/shm/topdeck-0");
    let root_dir_was_there = root_dir.exists();
    let (agent, _file) = RealAgent::start();
    let agent_pid = agent.0.id();
    let out = host_topdeck()
        .args(["sched", "--window", "300ms", "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["source"], "agent", "{v}");
    assert_eq!(v["pid"], agent_pid, "{v}");
    assert!(untrusted_names(&v, &spoof.path, user.uid), "{v}");
    assert!(!v.to_string().contains("/fabricated"), "{v}");

    let out = host_topdeck()
        .args(["top", "--once", "--json", "--interval", "300ms"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["scheduler"]["pid"], agent_pid, "{}", v["scheduler"]);
    assert!(v["spoofed_agents"].as_u64().unwrap() >= 1, "{v}");
    assert!(!v["scheduler"].to_string().contains("/fabricated"), "{v}");
    drop(agent);
    if !root_dir_was_there {
        // The agent made it for this test; remove_dir leaves it if anything
        // else has appeared in it since.
        let _ = std::fs::remove_dir(root_dir);
    }
    drop(spoof);
    drop(user);
}
