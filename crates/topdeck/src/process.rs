// SPDX-License-Identifier: Apache-2.0
//! Facts about this process a writer records: its start time (to tell a
//! reused pid from the original) and a short name.

use std::path::Path;

/// This process's start time in clock ticks since boot.
pub(crate) fn own_start_ticks() -> u64 {
    topdeck_procfs::process::start_ticks(None).unwrap_or(0)
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
    fn own_start_time_is_known() {
        assert!(own_start_ticks() > 0);
    }
}
