// SPDX-License-Identifier: Apache-2.0
//! Every bench binary answers `--help` with its usage on stdout (exit 0)
//! and a bad or missing argument with what is wrong and its usage line on
//! stderr (exit 2), never with a panic or a backtrace, even with
//! `RUST_BACKTRACE=1` (issue 31). No case here starts a measurement: each
//! is refused, or answered, before one would.

use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};

fn run(exe: &str, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .unwrap_or_else(|e| panic!("run {exe}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `name args` prints its usage on stdout and exits 0.
fn helps(exe: &str, name: &str, args: &[&str]) {
    let o = run(exe, args);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{name} {args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.starts_with(&format!("usage: {name} ")),
        "{name} {args:?}: {stdout}"
    );
    assert_eq!(stderr, "", "{name} {args:?}");
}

/// `name args` says `why` and its usage line on stderr, prints nothing on
/// stdout and exits 2.
fn refuses(exe: &str, name: &str, args: &[&str], why: &str) {
    let o = run(exe, args);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(
        o.status.code(),
        Some(2),
        "{name} {args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.starts_with(&format!("{name}: ")) && stderr.contains(why),
        "{name} {args:?}: wanted {why:?} in\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("\nusage: {name} ")),
        "{name} {args:?}: no usage line in\n{stderr}"
    );
    for never in ["panicked", "backtrace", "Error: "] {
        assert!(
            !stderr.contains(never),
            "{name} {args:?}: {never:?} in\n{stderr}"
        );
    }
    assert_eq!(stdout, "", "{name} {args:?}");
}

#[test]
fn clock_lab_answers_help_and_refuses_bad_arguments() {
    let (exe, name) = (env!("CARGO_BIN_EXE_clock_lab"), "clock_lab");
    helps(exe, name, &["--help"]);
    helps(exe, name, &["drift", "-h"]);
    refuses(exe, name, &[], "no experiment given");
    refuses(exe, name, &["bogus"], "unknown experiment \"bogus\"");
    refuses(exe, name, &["drift", "x"], "\"x\" is not valid");
    refuses(
        exe,
        name,
        &["load", "1", "2", "3", "-4"],
        "\"-4\" is not valid",
    );
    refuses(exe, name, &["cross", "1", "2"], "cross takes at most 1");
    // std::env::args() would panic on this one.
    let o = Command::new(exe)
        .arg(std::ffi::OsStr::from_bytes(b"drift\xff"))
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is not UTF-8") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

#[test]
fn sched_overhead_answers_help_and_refuses_bad_arguments_without_root_or_bpf() {
    let (exe, name) = (env!("CARGO_BIN_EXE_sched_overhead"), "sched_overhead");
    helps(exe, name, &["--help"]);
    helps(exe, name, &["load", "--bogus", "--help"]);
    refuses(exe, name, &["--bogus"], "unknown argument \"--bogus\"");
    refuses(exe, name, &["--reps"], "--reps needs a value");
    refuses(exe, name, &["--reps", "x"], "--reps: \"x\" is not valid");
    refuses(exe, name, &["--secs", "0"], "at least 1");
    refuses(exe, name, &["--reps", "0"], "at least 1");
    refuses(exe, name, &["load", "--hog-mib", "-1"], "--hog-mib");
    refuses(
        exe,
        name,
        &["--thread-waits"],
        "--thread-waits needs a value",
    );
}

#[test]
fn machine_answers_help_and_refuses_bad_arguments() {
    let (exe, name) = (env!("CARGO_BIN_EXE_machine"), "machine");
    helps(exe, name, &["--help"]);
    refuses(exe, name, &["0"], "give two CPU numbers");
    refuses(exe, name, &["0", "1", "2"], "give two CPU numbers");
    refuses(exe, name, &["a", "b"], "\"a\" is not valid");
    refuses(exe, name, &["1", "1"], "two different CPUs");
}

#[test]
fn namespace_budget_answers_help_and_refuses_bad_arguments() {
    let (exe, name) = (env!("CARGO_BIN_EXE_namespace_budget"), "namespace_budget");
    helps(exe, name, &["--help"]);
    refuses(exe, name, &["--files"], "--files needs a value");
    refuses(
        exe,
        name,
        &["--rounds", "x"],
        "--rounds: \"x\" is not valid",
    );
    refuses(exe, name, &["--bogus"], "unknown argument \"--bogus\"");
}

#[test]
fn porthole_budget_answers_help_and_refuses_bad_arguments() {
    let (exe, name) = (env!("CARGO_BIN_EXE_porthole_budget"), "porthole_budget");
    helps(exe, name, &["--help"]);
    refuses(exe, name, &["--keys"], "--keys needs a value");
    refuses(exe, name, &["--uid", "-1"], "--uid: \"-1\" is not valid");
    refuses(exe, name, &["--bogus"], "unknown argument \"--bogus\"");
}

#[test]
fn serve_attacks_answers_help_and_refuses_bad_arguments() {
    let (exe, name) = (env!("CARGO_BIN_EXE_serve_attacks"), "serve_attacks");
    helps(exe, name, &["--help"]);
    refuses(exe, name, &["--seconds"], "--seconds needs a value");
    refuses(
        exe,
        name,
        &["--registries", "x"],
        "--registries: \"x\" is not valid",
    );
    refuses(exe, name, &["--bogus", "1"], "unknown argument \"--bogus\"");
}

#[test]
fn example_fleet_answers_help_and_refuses_bad_arguments() {
    let (exe, name) = (env!("CARGO_BIN_EXE_example_fleet"), "example_fleet");
    helps(exe, name, &["--help"]);
    refuses(exe, name, &["--series"], "--series needs a value");
    refuses(
        exe,
        name,
        &["--registries", "x"],
        "--registries: \"x\" is not valid",
    );
    refuses(exe, name, &["--series", "0"], "give at least 1");
    refuses(exe, name, &["--series", "100000"], "at most 65536");
    refuses(exe, name, &["--bogus", "1"], "unknown argument \"--bogus\"");
}
