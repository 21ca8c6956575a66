// SPDX-License-Identifier: Apache-2.0
//! A cgroup's CPU throttling by its own quota, from `cpu.stat` (v1 and v2).

use std::fs;
use std::path::Path;

/// A cgroup's CPU throttling counters, from `cpu.stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Throttling {
    /// Periods in which the cgroup ran out of quota.
    pub nr_throttled: u64,
    /// Time its tasks were held back, ns.
    pub throttled_ns: u64,
}

/// The throttling counters in `<dir>/cpu.stat`: v1 `throttled_time` (ns)
/// or v2 `throttled_usec`. `None` when the file is missing (the cgroup is
/// gone) or has no throttling lines (no cpu controller there).
pub fn throttling(dir: &Path) -> Option<Throttling> {
    parse_cpu_stat(&fs::read_to_string(dir.join("cpu.stat")).ok()?)
}

/// Parses cpu.stat text.
pub fn parse_cpu_stat(text: &str) -> Option<Throttling> {
    let mut t = Throttling::default();
    let mut seen = false;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match k {
            "nr_throttled" => (t.nr_throttled, seen) = (v, true),
            "throttled_time" => t.throttled_ns = v,
            "throttled_usec" => t.throttled_ns = v.saturating_mul(1000),
            _ => {}
        }
    }
    seen.then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_stat_in_both_versions() {
        let v1 = "nr_periods 10\nnr_throttled 4\nthrottled_time 123456\nnr_bursts 0\n";
        assert_eq!(
            parse_cpu_stat(v1),
            Some(Throttling {
                nr_throttled: 4,
                throttled_ns: 123_456
            })
        );
        let v2 = "usage_usec 5\nnr_periods 3\nnr_throttled 2\nthrottled_usec 7\n";
        assert_eq!(
            parse_cpu_stat(v2),
            Some(Throttling {
                nr_throttled: 2,
                throttled_ns: 7_000
            })
        );
        assert_eq!(parse_cpu_stat("usage_usec 5\n"), None);
    }
}
