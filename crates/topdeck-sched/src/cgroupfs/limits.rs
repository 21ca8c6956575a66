// SPDX-License-Identifier: Apache-2.0
//! What a cgroup is given of the CPU, and who is in it: its weight (v1
//! `cpu.shares`, v2 `cpu.weight`), its quota (v1 `cpu.cfs_quota_us` over
//! `cpu.cfs_period_us`, v2 `cpu.max`) and its processes (`cgroup.procs`).
//! Small files any user may read; a view reads them each refresh.

use std::fs;
use std::path::Path;

/// Default v1 `cpu.shares`.
const V1_DEFAULT_SHARES: f64 = 1024.0;
/// Default v2 `cpu.weight`.
const V2_DEFAULT_WEIGHT: f64 = 100.0;
/// Most pids taken from one `cgroup.procs`: a view lists a container's
/// processes, it does not walk a fork bomb.
pub const MAX_PIDS: usize = 4096;

/// A cgroup's share of the CPU and its processes.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Limits {
    /// Its weight as a multiple of the default (1.0 for 1024 shares or
    /// weight 100; 8.0 for 8192 shares): comparable across versions.
    pub weight: Option<f64>,
    /// Its quota in CPUs (0.5: half a CPU per period); `None`: no quota.
    pub quota: Option<f64>,
    /// Its processes (not their threads), at most [`MAX_PIDS`].
    pub pids: Vec<u32>,
}

/// The [`Limits`] of the cgroup directory `dir` (v1 or v2, whichever
/// files it has); `None` when the directory is gone.
///
/// ```
/// // The root of whichever hierarchy this host mounts: it exists.
/// let root = std::path::Path::new("/sys/fs/cgroup");
/// assert!(topdeck_sched::cgroupfs::limits(root).is_some());
/// ```
pub fn limits(dir: &Path) -> Option<Limits> {
    let read = |name: &str| fs::read_to_string(dir.join(name)).ok();
    let procs = read("cgroup.procs");
    if procs.is_none() && !dir.is_dir() {
        return None;
    }
    let weight = weight(dir);
    let quota = match (read("cpu.cfs_quota_us"), read("cpu.max")) {
        (Some(q), _) => parse_v1_quota(&q, read("cpu.cfs_period_us").as_deref()?),
        (None, Some(max)) => parse_cpu_max(&max),
        (None, None) => None,
    };
    Some(Limits {
        weight,
        quota,
        pids: procs.as_deref().map(parse_procs).unwrap_or_default(),
    })
}

/// The CPU weight of the cgroup directory `dir` as a multiple of its
/// version's default (`cpu.shares`/1024, `cpu.weight`/100); `None` when it
/// has neither file.
pub fn weight(dir: &Path) -> Option<f64> {
    let read = |name: &str| fs::read_to_string(dir.join(name)).ok();
    match (read("cpu.shares"), read("cpu.weight")) {
        (Some(shares), _) => parse_number(&shares).map(|s| s / V1_DEFAULT_SHARES),
        (None, Some(w)) => parse_number(&w).map(|w| w / V2_DEFAULT_WEIGHT),
        (None, None) => None,
    }
}

fn parse_number(text: &str) -> Option<f64> {
    text.trim().parse().ok()
}

/// A v1 quota in CPUs: `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`.
///
/// ```
/// use topdeck_sched::cgroupfs::parse_v1_quota;
/// assert_eq!(parse_v1_quota("50000\n", "100000\n"), Some(0.5));
/// assert_eq!(parse_v1_quota("-1\n", "100000\n"), None);
/// ```
pub fn parse_v1_quota(quota: &str, period: &str) -> Option<f64> {
    let q: i64 = quota.trim().parse().ok()?;
    let p: f64 = parse_number(period)?;
    (q > 0 && p > 0.0).then(|| q as f64 / p)
}

/// A v2 quota in CPUs from `cpu.max` (`$MAX $PERIOD`, `max` for none).
///
/// ```
/// use topdeck_sched::cgroupfs::parse_cpu_max;
/// assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
/// assert_eq!(parse_cpu_max("max 100000\n"), None);
/// ```
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut f = text.split_whitespace();
    let max: f64 = f.next()?.parse().ok()?;
    let period: f64 = f.next()?.parse().ok()?;
    (period > 0.0).then(|| max / period)
}

/// The pids of a `cgroup.procs` text, at most [`MAX_PIDS`].
fn parse_procs(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| l.trim().parse().ok())
        .take(MAX_PIDS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_multiples_of_each_versions_default() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("cgroup.procs"), "12\n34\nnot a pid\n").unwrap();
        fs::write(d.join("cpu.shares"), "8192\n").unwrap();
        fs::write(d.join("cpu.cfs_quota_us"), "-1\n").unwrap();
        fs::write(d.join("cpu.cfs_period_us"), "100000\n").unwrap();
        let v1 = limits(d).unwrap();
        assert_eq!(
            (v1.weight, v1.quota, v1.pids),
            (Some(8.0), None, vec![12, 34])
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("cgroup.procs"), "").unwrap();
        fs::write(d.join("cpu.weight"), "50\n").unwrap();
        fs::write(d.join("cpu.max"), "25000 100000\n").unwrap();
        let v2 = limits(d).unwrap();
        assert_eq!((v2.weight, v2.quota), (Some(0.5), Some(0.25)));
        assert_eq!(limits(&d.join("gone")), None);
    }
}
