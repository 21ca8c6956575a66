// SPDX-License-Identifier: Apache-2.0
//! `topdeck ls`: the table, the JSON shape, dead writers and bad files.

use super::*;

#[test]
fn json_lists_a_live_registry_with_its_metrics() {
    let ns = namespace();
    let r = registry(ns.path(), "cli-ls");
    let _a = r.counter("a_total", &[], "", "").unwrap();
    let _b = r.gauge("b", &[], "", "").unwrap();
    let _c = r.histogram("c_seconds", &[], "", "seconds").unwrap();
    let out = topdeck(ns.path()).args(["ls", "--json"]).assert().success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    let regs = v["registries"].as_array().unwrap();
    assert_eq!(regs.len(), 1, "{v}");
    let e = &regs[0];
    assert_eq!(e["path"], r.path().to_str().unwrap());
    assert_eq!(e["pid"], std::process::id());
    assert_eq!(e["process"], own_name());
    assert_eq!(e["registry"], "cli-ls");
    assert_eq!(e["metrics"], 3);
    assert_eq!(e["state"], "alive");
    assert!(e["start_ticks"].as_u64().unwrap() > 0, "{e}");
    assert!(e["created_unix_ns"].as_u64().unwrap() > 0, "{e}");
    let container = topdeck_procfs::cgroup::container_of(std::process::id());
    assert_eq!(e["container"].as_str(), container.as_deref(), "{e}");
}

#[test]
fn the_table_names_pid_uid_process_state_and_file() {
    let ns = namespace();
    let r = registry(ns.path(), "cli-table");
    let out = topdeck(ns.path()).arg("ls").assert().success();
    let stdout = text(&out.get_output().stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header.join(" "),
        "SOURCE PID UID PROCESS REGISTRY METRICS STATE AGE CONTAINER FILE",
        "{stdout}"
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[0], "topdeck");
    assert_eq!(row[1], std::process::id().to_string());
    // SAFETY: geteuid has no preconditions.
    assert_eq!(row[2], unsafe { libc::geteuid() }.to_string());
    assert_eq!(row[3], own_name());
    assert_eq!(row[4], "cli-table");
    assert_eq!(row[5], "0");
    assert_eq!(row[6], "alive");
    let container = topdeck_procfs::cgroup::container_of(std::process::id());
    assert_eq!(row[8], container.as_deref().unwrap_or("-"));
    assert_eq!(row[9], r.path().to_str().unwrap());
    assert_eq!(lines.len(), 2, "{stdout}");
}

#[test]
fn a_corrupt_file_is_a_warning_and_the_good_registry_is_still_listed() {
    let ns = namespace();
    let r = registry(ns.path(), "good");
    let bad = corrupt_file(ns.path());

    let out = topdeck(ns.path()).arg("ls").assert().success();
    let (stdout, stderr) = (
        text(&out.get_output().stdout),
        text(&out.get_output().stderr),
    );
    assert!(stdout.contains(r.path().to_str().unwrap()), "{stdout}");
    assert!(!stdout.contains("1-1-0.topdeck"), "{stdout}");
    let warning = stderr.lines().next().unwrap_or_default();
    assert!(warning.starts_with("warning: "), "{stderr}");
    assert!(warning.contains(bad.to_str().unwrap()), "{stderr}");

    let out = topdeck(ns.path()).args(["ls", "--json"]).assert().success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["registries"].as_array().unwrap().len(), 1, "{v}");
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{v}");
    assert!(errors[0].as_str().unwrap().contains(bad.to_str().unwrap()));
}

#[test]
fn a_dead_writer_is_listed_as_dead_beside_a_live_one() {
    let ns = namespace();
    let live = registry(ns.path(), "live");
    let (dead, pid) = dead_registry(ns.path());
    let out = topdeck(ns.path()).args(["ls", "--json"]).assert().success();
    let v = json(&out.get_output().stdout);
    let state_of = |path: &Path| {
        v["registries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == path.to_str().unwrap())
            .map(|e| (e["state"].clone(), e["pid"].clone()))
    };
    assert_eq!(state_of(&dead), Some(("dead".into(), pid.into())), "{v}");
    assert_eq!(
        state_of(live.path()),
        Some(("alive".into(), std::process::id().into())),
        "{v}"
    );
}

#[test]
fn an_empty_namespace_says_so() {
    let ns = namespace();
    let out = topdeck(ns.path()).arg("ls").assert().success();
    let stdout = text(&out.get_output().stdout);
    assert_eq!(
        stdout.trim(),
        format!("no registries in {}", ns.path().display())
    );
}

#[test]
fn a_missing_or_unsafe_namespace_fails_and_never_advises_removing_it() {
    use std::os::unix::fs::PermissionsExt;
    let ns = namespace();
    let missing = ns.path().join("never-made");
    let out = topdeck(&missing).arg("ls").assert().failure();
    let stderr = text(&out.get_output().stderr);
    assert!(
        stderr.contains("never-made") && stderr.contains("no such directory"),
        "{stderr}"
    );

    std::fs::set_permissions(ns.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = topdeck(ns.path()).arg("ls").assert().failure();
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.contains("lets others write in it"), "{stderr}");
    assert!(stderr.contains("find out who made it"), "{stderr}");
    assert!(!stderr.contains("remove it"), "{stderr}");
    let out = topdeck(ns.path()).args(["ls", "--json"]).assert().failure();
    let json: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(json["errors"].as_array().unwrap().len(), 1, "{json}");
}

/// A link planted where another user's directory would be, in the host's
/// `/dev/shm`: that user's problem, said on stderr, while `ls` lists the
/// rest and succeeds. The caller's own unreadable directory still fails it
/// (above).
#[test]
fn another_users_unreadable_directory_is_said_and_not_a_failure() {
    if !topdeck_procfs::testing::root_or_skip("only root may plant in /dev/shm as another uid") {
        return;
    }
    struct Planted(PathBuf);
    impl Drop for Planted {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let target = tempfile::tempdir().unwrap();
    // A uid nobody here has; the name is the only claim.
    let link = Planted(PathBuf::from(format!(
        "/dev/shm/topdeck-{}",
        4_000_000_000u32 - 7
    )));
    let _ = std::fs::remove_file(&link.0);
    std::os::unix::fs::symlink(target.path(), &link.0).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_topdeck"))
        .env_remove("TOPDECK_DIR")
        .args(["ls", "--no-portholes"])
        .assert()
        .success();
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.contains(&link.0.display().to_string()), "{stderr}");
}
