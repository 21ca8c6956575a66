// SPDX-License-Identifier: Apache-2.0
//! `topdeck gc`: dead writers' files go, live ones and foreign files stay.

use super::*;

#[test]
fn removes_a_dead_writers_file_and_leaves_a_live_one() {
    let ns = namespace();
    let live = registry(ns.path(), "live");
    let (dead, _) = dead_registry(ns.path());
    assert!(dead.exists());

    // A dry run names the same file and removes nothing.
    let out = topdeck(ns.path())
        .args(["gc", "--dry-run", "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["removed"], serde_json::json!([dead.to_str().unwrap()]));
    assert!(dead.exists() && live.path().exists());
    let out = topdeck(ns.path())
        .args(["gc", "--dry-run"])
        .assert()
        .success();
    assert!(
        text(&out.get_output().stdout)
            .ends_with("1 file of dead writers would be removed (dry run: nothing was)\n"),
        "{}",
        text(&out.get_output().stdout)
    );
    assert!(dead.exists());

    let out = topdeck(ns.path()).args(["gc", "--json"]).assert().success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["removed"], serde_json::json!([dead.to_str().unwrap()]));
    assert_eq!(v["errors"], serde_json::json!([]));
    assert!(!dead.exists());
    assert!(live.path().exists());

    let out = topdeck(ns.path()).args(["ls", "--json"]).assert().success();
    let v = json(&out.get_output().stdout);
    let paths: Vec<&str> = v["registries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [live.path().to_str().unwrap()]);
}

#[test]
fn the_text_report_names_each_removed_file() {
    let ns = namespace();
    let (dead, _) = dead_registry(ns.path());
    let out = topdeck(ns.path()).arg("gc").assert().success();
    let stdout = text(&out.get_output().stdout);
    assert_eq!(
        stdout,
        format!(
            "removed {}\n1 file of dead writers removed\n",
            dead.display()
        )
    );
    let out = topdeck(ns.path()).arg("gc").assert().success();
    assert_eq!(
        text(&out.get_output().stdout),
        "0 files of dead writers removed\n"
    );
}

#[test]
fn a_corrupt_file_is_left_alone_with_a_warning() {
    let ns = namespace();
    let bad = corrupt_file(ns.path());
    let out = topdeck(ns.path()).arg("gc").assert().success();
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.starts_with("warning: "), "{stderr}");
    assert!(stderr.contains(bad.to_str().unwrap()), "{stderr}");
    assert!(bad.exists());

    let out = topdeck(ns.path()).args(["gc", "--json"]).assert().success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["removed"], serde_json::json!([]));
    assert!(v["errors"][0]
        .as_str()
        .unwrap()
        .contains(bad.to_str().unwrap()));
}

/// `gc` on an unusable namespace directory of the caller's fails as `ls`
/// does (it exited 0, having collected nothing).
#[test]
fn an_unsafe_namespace_fails_gc_as_it_fails_ls() {
    use std::os::unix::fs::PermissionsExt;
    let ns = namespace();
    std::fs::set_permissions(ns.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for args in [
        &["gc"][..],
        &["gc", "--json"],
        &["gc", "--dry-run"],
        &["ls"],
    ] {
        let out = topdeck(ns.path()).args(args).assert().failure();
        // Said on stderr, or in the JSON's errors.
        let said = text(&out.get_output().stderr) + &text(&out.get_output().stdout);
        assert!(
            said.contains("lets others write in it")
                && said.contains("cannot read the namespace directory"),
            "{args:?}: {said}"
        );
    }
}
