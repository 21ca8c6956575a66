// SPDX-License-Identifier: Apache-2.0
//! Helpers for the workspace's tests (feature `testing`), here because
//! every crate with tests that need root depends on this one. Not part of
//! the API.

use std::io::Write;

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether a test that needs root can run: `true` as root. Otherwise the
/// test should return at once: outside CI this says "SKIPPED", the test's
/// name and `why` root is needed on stderr, past the test harness's output
/// capture, and returns `false`; under CI (`CI` set), which runs every
/// test as root, it panics instead, so no test is skipped there unseen.
///
/// ```no_run
/// if !topdeck_procfs::testing::root_or_skip("it loads BPF programs") {
///     return;
/// }
/// // What only root may do.
/// ```
pub fn root_or_skip(why: &str) -> bool {
    if is_root() {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    if std::env::var_os("CI").is_some() {
        panic!("{test}: needs root because {why}, and CI must run every test");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: needs root because {why}"
    );
    false
}
