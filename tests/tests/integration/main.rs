// SPDX-License-Identifier: Apache-2.0
//! Integration tests of topdeck with real processes: writers and readers
//! in separate processes (`multiprocess`), writers killed mid-life
//! (`crash`), damaged files and hostile namespace directories
//! (`bad_input`), a hostile local user against root's readers, with
//! real users (`hostile`), and writers in containers with a `/dev/shm` of
//! their own (`containers`), a container holding both a writer and a JVM,
//! or hostile hsperfdata files (`portholes`), and real PCP MMV writers on
//! the host and in a container, held to PCP's own `mmvdump` (`mmv`). The
//! flight recorder: killed at random moments and on a full disk
//! (`recorder`); a recorded example service held to what live views showed
//! of it (`history`), and read back by `top` after it stopped
//! (`recorded`). The `topdeck` command and the example service must be
//! built first: `cargo build --workspace --bins`.

mod bad_input;
mod containers;
mod crash;
mod forged_writers;
mod history;
mod hostile;
mod mmv;
mod multiprocess;
mod portholes;
#[path = "../../../crates/topdeck-cli/tests/integration/prometheus.rs"]
#[allow(dead_code)]
mod prometheus;
mod recorded;
mod recorder;
mod second_reader;

use std::path::Path;
use std::process::Command;

use serde_json::Value as Json;
use topdeck::{RegistryReader, Snapshot, Value};
use topdeck_tests::{Proc, Writer};

/// The test writer.
fn writer_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_td-writer"))
}

/// The test reader.
fn reader_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_td-reader"))
}

/// Starts a `td-writer` with `args` in namespace `dir`.
fn writer(dir: &Path, args: &[&str]) -> Writer {
    Writer::start(writer_bin(), dir, args)
}

/// Starts a `td-reader` with `args`.
fn reader(args: &[&str]) -> Proc {
    let mut cmd = Command::new(reader_bin());
    cmd.args(args);
    Proc::start("td-reader", cmd)
}

/// Opens `path` and takes one snapshot, in this process.
fn snapshot(path: &Path) -> Snapshot {
    let mut r =
        RegistryReader::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    r.snapshot()
        .unwrap_or_else(|e| panic!("snapshot {}: {e}", path.display()))
}

/// A counter's value in `snap`.
fn counter(snap: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    match snap.get(name, labels) {
        Some(Value::Counter(v)) => *v,
        other => panic!("{name}{labels:?} is not a counter in the snapshot: {other:?}"),
    }
}

/// The entry for `path` in the `registries` of `topdeck ls --json`.
fn listed<'a>(ls: &'a Json, path: &Path) -> Option<&'a Json> {
    ls["registries"]
        .as_array()
        .unwrap_or_else(|| panic!("`topdeck ls --json` has no registries array: {ls}"))
        .iter()
        .find(|r| r["path"].as_str() == path.to_str())
}

/// The `portholes` of `topdeck ls --json` whose path passes `keep`.
fn portholes_where(ls: &Json, keep: impl Fn(&str) -> bool) -> Vec<&Json> {
    ls["portholes"]
        .as_array()
        .unwrap_or_else(|| panic!("no portholes array: {ls}"))
        .iter()
        .filter(|p| p["path"].as_str().is_some_and(&keep))
        .collect()
}

/// Whether some message in the `errors` of a JSON report names `path`.
fn reports_error_for(report: &Json, path: &Path) -> bool {
    let path = path.display().to_string();
    report["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors array in {report}"))
        .iter()
        .any(|e| e.as_str().is_some_and(|m| m.contains(&path)))
}

/// The metric named `name` in the output of `topdeck show --json`.
fn shown_metric<'a>(show: &'a Json, name: &str) -> &'a Json {
    show["metrics"]
        .as_array()
        .unwrap_or_else(|| panic!("`topdeck show --json` has no metrics array: {show}"))
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("`topdeck show --json` does not show {name}: {show}"))
}
