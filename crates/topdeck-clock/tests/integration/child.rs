// SPDX-License-Identifier: Apache-2.0
//! The child side of environment-dependent scenarios, and the parent's
//! helper that runs one and parses what it printed.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

/// Runs `scenario` in a re-executed copy of this test binary with `env`
/// added (and the clock variables otherwise cleared); returns the
/// `key=value` lines it printed after `CHILD `.
pub fn run(scenario: &str, env: &[(&str, &str)]) -> HashMap<String, String> {
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new(&exe)
        .args(["--exact", "child::entry", "--nocapture", "--test-threads=1"])
        .env_remove("TOPDECK_CLOCK")
        .env_remove("TOPDECK_CLOCK_FORCE")
        .env("TOPDECK_CLOCK_CHILD", scenario)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {scenario} {env:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let map: HashMap<String, String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("CHILD "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert!(
        map.contains_key("kind"),
        "child printed no report:\n{stdout}"
    );
    map
}

/// Not a test of its own: the entry point of the child process. Without
/// `TOPDECK_CLOCK_CHILD` it returns at once.
#[test]
fn entry() {
    let Ok(scenario) = std::env::var("TOPDECK_CLOCK_CHILD") else {
        return;
    };
    // The harness printed "test child::entry ... " without a newline.
    println!();
    let mut prev = topdeck_clock::now();
    // The skew check runs on the recalibration thread right after first
    // use; wait for it (bounded) so the report includes its verdict.
    if topdeck_clock::source().kind != topdeck_clock::SourceKind::Os {
        for _ in 0..1000 {
            if topdeck_clock::skew().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if scenario == "recalibrate" {
        topdeck_clock::recalibrate();
    }
    let mut backwards = 0u64;
    for _ in 0..200_000 {
        let v = topdeck_clock::now();
        backwards += u64::from(v < prev);
        prev = v;
    }
    let wall = topdeck_clock::wall();
    let real = crate::os_ns(libc::CLOCK_REALTIME);
    let src = topdeck_clock::source();
    let stats = topdeck_clock::stats();
    println!("CHILD kind={}", src.kind.name());
    println!("CHILD reason={}", src.reason);
    println!("CHILD resets={}", stats.resets);
    println!("CHILD recalibrations={}", stats.recalibrations);
    println!("CHILD fallbacks={}", stats.fallbacks);
    println!("CHILD backwards={backwards}");
    println!("CHILD wall_minus_realtime={}", wall as i64 - real as i64);
    println!(
        "CHILD params_source={}",
        topdeck_clock::params().source.name()
    );
}
