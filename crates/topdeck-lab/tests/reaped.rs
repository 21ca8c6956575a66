// SPDX-License-Identifier: Apache-2.0
//! A run of `topdeck-lab` leaves no process behind: the sleeping processes
//! a population forks are gone, not merely dying, when the lab returns, so
//! a second run does not count the first one's (issue 31).
//!
//! This file is a test binary of its own because it makes the test process
//! a child subreaper (`PR_SET_CHILD_SUBREAPER`): any descendant of the lab
//! that outlives its parent is then reparented to this process, where it
//! stays (as a zombie once dead) until this test reaps it, instead of being
//! reaped by init at some later moment. What is still ours once the lab has
//! exited is exactly what the lab left behind, with no race to lose.

use std::process::Command;

/// Processes whose parent is this process, from `/proc/<pid>/stat`
/// (zombies included: their `stat` stays readable until they are reaped).
fn our_children() -> Vec<libc::pid_t> {
    // SAFETY: getpid(2) cannot fail.
    let me = unsafe { libc::getpid() };
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|e| {
            let pid: libc::pid_t = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid: libc::pid_t = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == me).then_some(pid)
        })
        .collect()
}

#[test]
fn a_populated_run_has_reaped_every_process_it_forked_when_it_returns() {
    // SAFETY: prctl(2) with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(
        our_children(),
        Vec::<libc::pid_t>::new(),
        "children before the run"
    );

    let out = tempfile::tempdir().expect("a temporary directory");
    let o = Command::new(env!("CARGO_BIN_EXE_topdeck-lab"))
        .args(["--quick", "--out"])
        .arg(out.path())
        .args(["contend", "--populate-processes", "50", "--", "true"])
        .output()
        .expect("run topdeck-lab");
    // Checked at once, before anything else: no waiting for stragglers.
    let left = our_children();
    // Reap what was left, so a failure leaves nothing behind either.
    for &pid in &left {
        // SAFETY: kill(2) and waitpid(2) on processes reparented to us.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    assert!(
        o.status.success(),
        "topdeck-lab failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // The population was there while the experiment ran...
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("contend.json")).unwrap()).unwrap();
    assert_eq!(saved["census"]["asked"]["processes"], 50, "{saved}");
    assert!(
        saved["census"]["host_processes"].as_u64().unwrap() >= 50,
        "{saved}"
    );
    // ...and none of it outlived the lab.
    assert_eq!(
        left.len(),
        0,
        "processes left behind by the lab, still on the host when it returned: {left:?}"
    );
}
