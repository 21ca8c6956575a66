// SPDX-License-Identifier: Apache-2.0
//! Facts about a process from procfs: start time (to tell a reused pid from
//! the original) and a short name.

use std::path::Path;

/// Start time of `pid` in clock ticks since boot: field 22 of
/// `/proc/<pid>/stat` (proc(5)). The command name (field 2) may hold spaces
/// and parentheses, so fields are counted after its last `)`.
pub(crate) fn start_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid).join("stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name come field 3 (state) onwards; field 22 is the 20th of them.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// This process's start time in clock ticks since boot.
pub(crate) fn own_start_ticks() -> u64 {
    start_ticks("self").unwrap_or(0)
}

/// A short name for this process: the file name of `argv[0]`, else `comm`.
pub(crate) fn own_name() -> String {
    std::env::args_os()
        .next()
        .as_deref()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .or_else(|| std::fs::read_to_string("/proc/self/comm").ok())
        .map(|n| n.trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_known_and_stable() {
        let a = own_start_ticks();
        assert!(a > 0);
        assert_eq!(a, start_ticks(&std::process::id().to_string()).unwrap());
    }

    #[test]
    fn a_missing_process_has_no_start_time() {
        assert_eq!(start_ticks("999999999"), None);
    }
}
