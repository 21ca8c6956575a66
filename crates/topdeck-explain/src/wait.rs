// SPDX-License-Identifier: Apache-2.0
//! The CPU wait of a set of processes' threads, per thread, so that a
//! window's wait is the sum of each thread's growth and a thread that
//! exits or starts mid-window neither subtracts nor adds what it did
//! outside it.
//!
//! Two levels: the agent's thread-waits array (each thread's wait split by
//! who held the CPU: its own cgroup, another, the system), read by plain
//! loads; else `/proc/<tid>/schedstat`'s run delay, which every user may
//! read, with no split and no culprit. A recording keeps neither: read
//! from one, the threads' wait is unknown ([`Level::Unrecorded`]).

use std::collections::HashMap;
use std::fs;

use serde::Serialize;
use topdeck_format::waits::Waits;
use topdeck_procfs::cgroup::cgroup_of_text;
use topdeck_sched::cgroupfs::{attribute, Attribution};
use topdeck_sched::fallback::parse_schedstat;
use topdeck_sched::Hierarchy;

/// Where a window's CPU wait came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The agent's thread-waits array: per thread, split by who held the CPU.
    ThreadWaits,
    /// `/proc/<tid>/schedstat`: per thread, no split.
    Schedstat,
    /// A recording, which keeps no thread's wait: the threads' wait over a
    /// window is unknown (each request's own, where its timer measured it,
    /// is in the recorded companions).
    Unrecorded,
}

impl Level {
    /// What the level can say, for views to print beside its figures.
    pub fn meaning(self) -> &'static str {
        match self {
            Level::ThreadWaits => "per thread from the agent's thread-waits array",
            Level::Schedstat => {
                "per process from /proc/<tid>/schedstat (no agent's thread-waits array: no split by who held the CPU)"
            }
            Level::Unrecorded => {
                "unknown (a recording keeps neither the agent's thread-waits array nor /proc/<tid>/schedstat)"
            }
        }
    }
}

/// Each thread's cumulative wait at one moment.
#[derive(Debug, Clone, Default)]
pub struct ThreadSample {
    by_tid: HashMap<u32, Waits>,
}

impl ThreadSample {
    /// The threads sampled.
    pub fn threads(&self) -> usize {
        self.by_tid.len()
    }

    /// What the threads present at both moments waited in between, plus
    /// what threads that appeared since (`later`'s own) waited; threads
    /// gone by `later` are left out.
    pub fn growth(&self, later: &ThreadSample, level: Level) -> Waits {
        let mut sum = Waits::default();
        for (tid, now) in &later.by_tid {
            match self.by_tid.get(tid) {
                Some(then) if now.total >= then.total => sum += now.since(then),
                // A schedstat thread is born at zero; an array's slot may
                // carry a predecessor's sum, so a newcomer counts from its
                // first sight.
                None if level == Level::Schedstat => sum += *now,
                _ => {}
            }
        }
        sum
    }
}

impl FromIterator<(u32, Waits)> for ThreadSample {
    /// A sample from `(tid, cumulative waits)` pairs.
    fn from_iter<I: IntoIterator<Item = (u32, Waits)>>(pairs: I) -> Self {
        ThreadSample {
            by_tid: pairs.into_iter().collect(),
        }
    }
}

/// The threads of `pids`, from `/proc/<pid>/task`.
pub fn threads_of(pids: &[u32]) -> Vec<u32> {
    let mut tids = Vec::new();
    for pid in pids {
        let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        tids.extend(
            dir.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())),
        );
    }
    tids
}

/// Samples `tids` through `slot` (the array's reader) or, without one,
/// their schedstat.
pub fn sample(tids: &[u32], slot: Option<&dyn Fn(u32) -> Option<Waits>>) -> ThreadSample {
    let mut by_tid = HashMap::with_capacity(tids.len());
    for &tid in tids {
        let w = match slot {
            Some(read) => read(tid),
            None => fs::read_to_string(format!("/proc/{tid}/schedstat"))
                .ok()
                .and_then(|t| parse_schedstat(&t))
                .map(|(wait, _)| Waits {
                    total: wait,
                    ..Waits::default()
                }),
        };
        if let Some(w) = w {
            by_tid.insert(tid, w);
        }
    }
    ThreadSample { by_tid }
}

/// The processes that share `pid`'s cgroup (a pre-forked server's
/// workers), from the cgroup's `cgroup.procs`; just `pid` when it runs in
/// the root cgroup or the cgroup cannot be read.
pub fn cgroup_mates(hierarchy: Option<&Hierarchy>, pid: u32) -> Vec<u32> {
    let mates = || -> Option<Vec<u32>> {
        let h = hierarchy?;
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        // The path the probe keys the task by; the hierarchy it is in.
        let path = cgroup_of_text(&text).filter(|p| p != "/")?;
        let dir = match attribute(&text) {
            Some(Attribution::Unified(_)) => {
                h.unified.as_deref()?.join(path.trim_start_matches('/'))
            }
            _ => h.dir(&path),
        };
        let procs = fs::read_to_string(dir.join("cgroup.procs")).ok()?;
        Some(
            procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect(),
        )
    };
    mates()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| vec![pid])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pairs: &[(u32, u64)]) -> ThreadSample {
        ThreadSample {
            by_tid: pairs
                .iter()
                .map(|&(t, total)| {
                    (
                        t,
                        Waits {
                            total,
                            ..Waits::default()
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_windows_growth_counts_only_what_threads_did_inside_it() {
        let before = at(&[(1, 100), (2, 50), (3, 10)]);
        // 2 exited, 4 started, 1 grew by 20, 3 by 5.
        let after = at(&[(1, 120), (3, 15), (4, 7)]);
        assert_eq!(before.growth(&after, Level::Schedstat).total, 20 + 5 + 7);
        assert_eq!(before.growth(&after, Level::ThreadWaits).total, 20 + 5);
    }

    #[test]
    fn this_processs_threads_and_schedstat_are_read() {
        let tids = threads_of(&[std::process::id()]);
        assert!(tids.contains(&std::process::id()));
        let s = sample(&tids, None);
        assert!(s.threads() >= 1, "schedstat is world-readable");
    }
}
