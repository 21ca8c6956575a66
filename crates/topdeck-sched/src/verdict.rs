// SPDX-License-Identifier: Apache-2.0
//! Noisy-neighbour verdicts: pure judgement over one window of figures per
//! cgroup against that cgroup's own recent past. No I/O, so every rule is
//! unit tested with synthetic inputs.
//!
//! A cgroup's run-queue p99 has *risen* when it is at least
//! [`Thresholds::rise_factor`] times its baseline (the median p99 of its
//! recent quiet windows) and above [`Thresholds::min_p99_seconds`]. Then:
//!
//! - if the cgroup was throttled by its own CPU quota in the window, the
//!   verdict is [`VerdictKind::OwnQuota`]: it is at its limit, nobody else
//!   is to blame (also given without a baseline when the p99 is high);
//! - else if at least [`Thresholds::min_other_share`] of its waiting was
//!   behind other cgroups, the verdict is [`VerdictKind::NoisyNeighbour`],
//!   naming every cgroup that holds at least
//!   [`Thresholds::min_culprit_share`] of the wait.
//!
//! Windows with a verdict do not enter the baseline, so a neighbour that
//! stays noisy stays named, and the verdict clears when the p99 falls back.
//!
//! A window is judged when it has at least [`Thresholds::min_samples`]
//! finished waits, *or* its cgroup spent at least
//! [`Thresholds::min_wait_share`] of the window runnable but waiting (summed
//! over its tasks, waits still in progress included: see
//! [`crate::inprogress`]). The second rule is for the victim a heavy
//! neighbour starves: it runs a few times a window, so it has few waits,
//! each of them long. Its p99 and its shares behind each culprit come from
//! the time it waited in the window, in progress or not.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use serde::Serialize;

use crate::cgroupfs::Throttling;

/// The knobs of the judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// p99 over baseline that counts as a rise.
    pub rise_factor: f64,
    /// p99 below this is never a problem, seconds.
    pub min_p99_seconds: f64,
    /// Finished waits that make a window worth judging.
    pub min_samples: u64,
    /// Or: time spent waiting in the window, as a share of the window's
    /// length, that makes it worth judging (few waits, but long ones).
    pub min_wait_share: f64,
    /// Share of the wait behind other cgroups that makes a neighbour noisy.
    pub min_other_share: f64,
    /// Share of the wait that makes one cgroup a culprit.
    pub min_culprit_share: f64,
    /// Quiet windows remembered for the baseline.
    pub history: usize,
    /// Quiet windows needed before a rise can be judged.
    pub min_history: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            rise_factor: 4.0,
            min_p99_seconds: 0.000_5,
            min_samples: 20,
            min_wait_share: 0.05,
            min_other_share: 0.5,
            min_culprit_share: 0.1,
            history: 30,
            min_history: 3,
        }
    }
}

/// Whom a wait was charged to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Culprit {
    /// A task of the same cgroup held the CPU.
    Own,
    /// The CPU was idle, or a kernel thread or a root-cgroup task held it.
    System,
    /// Another cgroup, by path.
    Cgroup(String),
    /// Another cgroup that was gone before its path was learnt: it counts
    /// towards the share behind others, but is never named.
    Unresolved,
}

/// One cgroup's figures over one window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// Run-queue latency p99, seconds (`None` without waits): of the waits
    /// that ended in the window and, as samples of their length so far, of
    /// those still in progress at its end.
    pub p99_seconds: Option<f64>,
    /// Waits that ended in the window.
    pub samples: u64,
    /// Seconds of waiting in the window behind each culprit, waits still in
    /// progress included (each counted once, in the window it fell in).
    pub wait_behind: Vec<(Culprit, f64)>,
    /// Throttling by its own quota in the window (a delta), if known.
    pub throttled: Option<Throttling>,
    /// Length of the window, seconds (0 when unknown: then only
    /// [`Thresholds::min_samples`] makes it worth judging).
    pub seconds: f64,
    /// Waits still in progress at the window's end.
    pub waiting: u64,
}

impl Window {
    /// Seconds spent waiting in the window, summed over its tasks.
    pub fn wait_seconds(&self) -> f64 {
        self.wait_behind.iter().map(|(_, s)| s).sum()
    }
}

/// What a verdict says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Waiting behind other cgroups.
    NoisyNeighbour,
    /// Held back by its own CPU quota.
    OwnQuota,
}

impl VerdictKind {
    /// Every kind.
    pub const ALL: [Self; 2] = [Self::NoisyNeighbour, Self::OwnQuota];

    /// The name published in the `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoisyNeighbour => "noisy_neighbour",
            Self::OwnQuota => "own_quota",
        }
    }

    /// The kind published as `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// A verdict on one cgroup, with its evidence: as the judge gives it, or as
/// a reader finds it in the agent's registry
/// ([`crate::reading::AgentReading`]), which publishes less of it (the
/// fields that say so are `None` there).
///
/// ```
/// use topdeck_sched::verdict::{Verdict, VerdictKind};
/// let v = Verdict {
///     kind: VerdictKind::NoisyNeighbour,
///     victim: "/web".into(),
///     p99_before: Some(40e-6),
///     p99_after: Some(3.7e-3),
///     culprits: vec![("/batch".into(), 0.8)],
///     other_share: None,
///     throttled: None,
/// };
/// assert_eq!(
///     v.to_string(),
///     "/web: noisy neighbour /batch (80% of its wait); run-queue p99 40.0µs -> 3.7ms"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// What it says.
    pub kind: VerdictKind,
    /// The cgroup that suffers (path).
    pub victim: String,
    /// Baseline p99, seconds (`None` when there was none yet).
    pub p99_before: Option<f64>,
    /// p99 in the window, seconds (`None` when a reader found no evidence).
    pub p99_after: Option<f64>,
    /// Culprit cgroups (paths) and their share of the victim's wait, largest
    /// first; empty for [`VerdictKind::OwnQuota`]. A share a reader did not
    /// find is NaN (`null` in JSON).
    pub culprits: Vec<(String, f64)>,
    /// Share of the wait behind other cgroups (not itself, not system);
    /// the registry does not carry it.
    pub other_share: Option<f64>,
    /// Throttling by its own quota in the window, when known; the registry
    /// does not carry it.
    pub throttled: Option<Throttling>,
}

impl fmt::Display for Verdict {
    /// One line: the victim, what holds it back, and its p99 from baseline
    /// to now (`?` for what is not known).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p99 = |s: Option<f64>| s.map_or("?".into(), topdeck::human::seconds);
        write!(f, "{}: ", self.victim)?;
        match self.kind {
            VerdictKind::NoisyNeighbour => {
                write!(f, "noisy neighbour ")?;
                for (i, (c, share)) in self.culprits.iter().enumerate() {
                    let share = match share.is_finite() {
                        true => format!("{:.0}%", share * 100.0),
                        false => "?".into(),
                    };
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{c} ({share} of its wait)")?;
                }
            }
            VerdictKind::OwnQuota => {
                write!(f, "held by its own CPU quota")?;
                if let Some(t) = self.throttled {
                    write!(
                        f,
                        " ({} periods, {} throttled)",
                        t.nr_throttled,
                        topdeck::human::seconds(t.throttled_ns as f64 / 1e9)
                    )?;
                }
            }
        }
        write!(
            f,
            "; run-queue p99 {} -> {}",
            p99(self.p99_before),
            p99(self.p99_after)
        )
    }
}

/// Remembers each cgroup's quiet p99s and judges new windows against them.
#[derive(Debug, Default)]
pub struct Judge {
    thresholds: Thresholds,
    quiet: HashMap<String, VecDeque<f64>>,
}

impl Judge {
    /// A judge with these thresholds and no history.
    pub fn new(thresholds: Thresholds) -> Self {
        Self {
            thresholds,
            quiet: HashMap::new(),
        }
    }

    /// The median p99 of `victim`'s quiet windows, once there are enough.
    pub fn baseline(&self, victim: &str) -> Option<f64> {
        let h = self.quiet.get(victim)?;
        if h.len() < self.thresholds.min_history.max(1) {
            return None;
        }
        let mut v: Vec<f64> = h.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }

    /// Judges one window of `victim` and remembers it if it was quiet.
    ///
    /// ```
    /// use topdeck_sched::verdict::{Culprit, Judge, Thresholds, VerdictKind, Window};
    /// let mut judge = Judge::new(Thresholds::default());
    /// let quiet = Window { p99_seconds: Some(40e-6), samples: 1000, ..Default::default() };
    /// for _ in 0..5 {
    ///     assert!(judge.judge("/web", &quiet).is_none());
    /// }
    /// let noisy = Window {
    ///     p99_seconds: Some(4e-3),
    ///     samples: 1000,
    ///     wait_behind: vec![(Culprit::Cgroup("/batch".into()), 0.9), (Culprit::Own, 0.1)],
    ///     ..Default::default()
    /// };
    /// let v = judge.judge("/web", &noisy).unwrap();
    /// assert_eq!(v.kind, VerdictKind::NoisyNeighbour);
    /// assert_eq!(v.culprits[0].0, "/batch");
    /// ```
    pub fn judge(&mut self, victim: &str, w: &Window) -> Option<Verdict> {
        let t = &self.thresholds;
        let total = w.wait_seconds();
        let long_waits = w.seconds > 0.0 && total > 0.0 && total >= t.min_wait_share * w.seconds;
        let p99 = w
            .p99_seconds
            .filter(|_| w.samples >= t.min_samples || long_waits)?;
        let baseline = self.baseline(victim);
        let high = p99 >= t.min_p99_seconds;
        let rose = high && baseline.is_some_and(|b| p99 >= t.rise_factor * b);
        let throttled = w.throttled.unwrap_or_default();
        let mut culprits: Vec<(String, f64)> = w
            .wait_behind
            .iter()
            .filter_map(|(c, s)| match c {
                Culprit::Cgroup(p) if p != victim && total > 0.0 => Some((p.clone(), s / total)),
                _ => None,
            })
            .collect();
        let unresolved: f64 = w
            .wait_behind
            .iter()
            .filter(|(c, _)| *c == Culprit::Unresolved && total > 0.0)
            .map(|(_, s)| s / total)
            .sum();
        let other_share: f64 = culprits.iter().map(|(_, s)| s).sum::<f64>() + unresolved;
        culprits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let verdict = |kind, culprits| Verdict {
            kind,
            victim: victim.to_string(),
            p99_before: baseline,
            p99_after: Some(p99),
            culprits,
            other_share: Some(other_share),
            throttled: w.throttled,
        };
        let judged = if throttled.nr_throttled > 0 && (rose || high) {
            Some(verdict(VerdictKind::OwnQuota, Vec::new()))
        } else if rose && other_share >= t.min_other_share {
            culprits.retain(|(_, s)| *s >= t.min_culprit_share);
            Some(verdict(VerdictKind::NoisyNeighbour, culprits))
        } else {
            None
        };
        if judged.is_none() && !rose {
            let h = self.quiet.entry(victim.to_string()).or_default();
            h.push_back(p99);
            while h.len() > t.history {
                h.pop_front();
            }
        }
        judged
    }

    /// Forgets a cgroup that is gone.
    pub fn forget(&mut self, victim: &str) {
        self.quiet.remove(victim);
    }

    /// Gives back the room of many forgotten cgroups.
    pub(crate) fn give_back(&mut self) {
        crate::memory::give_back(&mut self.quiet);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(p99: f64, behind: &[(Culprit, f64)], throttled: u64) -> Window {
        Window {
            p99_seconds: Some(p99),
            samples: 500,
            wait_behind: behind.to_vec(),
            throttled: Some(Throttling {
                nr_throttled: throttled,
                throttled_ns: throttled * 50_000_000,
            }),
            ..Default::default()
        }
    }

    fn cg(p: &str) -> Culprit {
        Culprit::Cgroup(p.to_string())
    }

    fn settled() -> Judge {
        let mut j = Judge::new(Thresholds::default());
        for p in [30e-6, 40e-6, 35e-6, 50e-6] {
            assert_eq!(j.judge("/v", &window(p, &[(Culprit::Own, 1.0)], 0)), None);
        }
        j
    }

    #[test]
    fn a_rise_behind_another_cgroup_names_it_with_evidence() {
        let mut j = settled();
        let w = window(
            3.7e-3,
            &[
                (cg("/hog"), 0.8),
                (Culprit::System, 0.15),
                (Culprit::Own, 0.05),
            ],
            0,
        );
        let v = j.judge("/v", &w).expect("a verdict");
        assert_eq!(v.kind, VerdictKind::NoisyNeighbour);
        assert_eq!(v.p99_before, Some(40e-6));
        assert_eq!(v.p99_after, Some(3.7e-3));
        assert_eq!(v.culprits.len(), 1);
        assert_eq!(v.culprits[0].0, "/hog");
        assert!((v.culprits[0].1 - 0.8).abs() < 1e-9);
    }

    #[test]
    fn several_culprits_are_named_largest_first_and_small_ones_left_out() {
        let mut j = settled();
        let w = window(
            2e-3,
            &[
                (cg("/a"), 0.3),
                (cg("/b"), 0.6),
                (cg("/c"), 0.05),
                (Culprit::Own, 0.05),
            ],
            0,
        );
        let v = j.judge("/v", &w).unwrap();
        let names: Vec<&str> = v.culprits.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["/b", "/a"]);
    }

    #[test]
    fn throttling_by_its_own_quota_blames_nobody_else() {
        let mut j = settled();
        let w = window(20e-3, &[(Culprit::System, 0.9), (cg("/other"), 0.1)], 12);
        let v = j.judge("/v", &w).unwrap();
        assert_eq!(v.kind, VerdictKind::OwnQuota);
        assert!(v.culprits.is_empty());
        assert_eq!(v.throttled.map(|t| t.nr_throttled), Some(12));
        // Even a cgroup that waits mostly behind another is at its quota when throttled.
        let w = window(20e-3, &[(cg("/other"), 0.9)], 3);
        assert_eq!(j.judge("/v", &w).unwrap().kind, VerdictKind::OwnQuota);
    }

    #[test]
    fn a_quota_is_named_without_a_baseline_when_latency_is_high() {
        let mut j = Judge::new(Thresholds::default());
        let v = j
            .judge("/v", &window(30e-3, &[(Culprit::System, 1.0)], 5))
            .unwrap();
        assert_eq!(v.kind, VerdictKind::OwnQuota);
        assert_eq!(v.p99_before, None);
        // A little throttling with a fine p99 is no verdict.
        assert_eq!(
            j.judge("/w", &window(50e-6, &[(Culprit::Own, 1.0)], 1)),
            None
        );
    }

    #[test]
    fn waiting_behind_its_own_tasks_is_not_a_neighbour() {
        let mut j = settled();
        let w = window(5e-3, &[(Culprit::Own, 0.9), (cg("/x"), 0.1)], 0);
        assert_eq!(j.judge("/v", &w), None);
        // Nor is its own path given as a culprit.
        let w = window(5e-3, &[(cg("/v"), 1.0)], 0);
        assert_eq!(j.judge("/v", &w), None);
    }

    #[test]
    fn no_baseline_means_no_neighbour_verdict() {
        let mut j = Judge::new(Thresholds::default());
        let w = window(5e-3, &[(cg("/hog"), 1.0)], 0);
        assert_eq!(j.judge("/v", &w), None);
    }

    #[test]
    fn small_rises_and_thin_windows_are_not_judged() {
        let mut j = settled();
        assert_eq!(
            j.judge("/v", &window(120e-6, &[(cg("/hog"), 1.0)], 0)),
            None
        );
        let thin = Window {
            samples: 3,
            ..window(9e-3, &[(cg("/hog"), 1.0)], 0)
        };
        assert_eq!(j.judge("/v", &thin), None);
    }

    #[test]
    fn few_waits_are_judged_when_they_add_up_to_a_share_of_the_window() {
        let mut j = settled();
        let starved = Window {
            p99_seconds: Some(0.9),
            samples: 4,
            wait_behind: vec![(cg("/hog"), 0.95)],
            seconds: 1.0,
            ..Default::default()
        };
        let v = j.judge("/v", &starved).expect("a verdict");
        assert_eq!(v.kind, VerdictKind::NoisyNeighbour);
        assert_eq!(v.culprits[0].0, "/hog");
        // 40 ms of a second is below the 5% that makes a window worth judging.
        let brief = Window {
            wait_behind: vec![(cg("/hog"), 0.04)],
            ..starved.clone()
        };
        assert_eq!(j.judge("/v", &brief), None);
        // Without the window's length, only the count of waits qualifies.
        let unknown = Window {
            seconds: 0.0,
            ..starved
        };
        assert_eq!(j.judge("/v", &unknown), None);
    }

    #[test]
    fn the_verdict_persists_while_noisy_and_clears_after() {
        let mut j = settled();
        let noisy = window(4e-3, &[(cg("/hog"), 1.0)], 0);
        for _ in 0..50 {
            assert!(
                j.judge("/v", &noisy).is_some(),
                "noisy windows must not become the baseline"
            );
        }
        assert_eq!(
            j.judge("/v", &window(45e-6, &[(Culprit::Own, 1.0)], 0)),
            None
        );
        assert_eq!(j.baseline("/v"), Some(40e-6));
    }
}
