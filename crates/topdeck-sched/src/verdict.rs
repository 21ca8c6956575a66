// SPDX-License-Identifier: Apache-2.0
//! Noisy-neighbour verdicts: pure judgement over one window of figures per
//! cgroup against that cgroup's own recent past. No I/O, so every rule is
//! unit tested with synthetic inputs.
//!
//! A cgroup's run-queue p99 has *risen* when it is at least
//! [`Thresholds::rise_factor`] times its baseline (the median p99 of its
//! recent quiet windows; a window with too few waits to judge counts as
//! quiet at the floor) and above [`Thresholds::min_p99_seconds`]. Then:
//!
//! - if the cgroup was throttled by its own CPU quota in the window, the
//!   verdict is [`VerdictKind::OwnQuota`]: it is at its limit, nobody else
//!   is to blame (also given without a baseline when the p99 is high);
//! - else if at least [`Thresholds::min_other_share`] of its waiting was
//!   behind other cgroups, the verdict is [`VerdictKind::NoisyNeighbour`],
//!   naming every cgroup that holds at least
//!   [`Thresholds::min_culprit_share`] of the wait;
//! - else a smaller rise ([`Thresholds::suspect_rise_factor`], also above
//!   the floor) with at least [`Thresholds::suspect_other_share`] of the
//!   wait behind others is a [`VerdictKind::Suspect`], naming them the
//!   same way: worth a look, not a page (an equal-weight neighbour that
//!   only doubles a p99 is one).
//!
//! The root cgroup ([`ROOT`]) is never judged: it is the system, not a
//! tenant. Of two cgroups that name each other in one window, the one that
//! got more CPU for its weight keeps no verdict ([`settle_mutual`]).
//!
//! The judge says what each window shows; the agent gives a verdict only
//! once it has held for [`Thresholds::hold`] windows in a row, and clears
//! it after as many without ([`Hold`]), so noise neither raises nor clears
//! one. The rule is published with the verdicts
//! (`crate::schema::THRESHOLD`), and every view prints it.
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
    /// p99 over baseline that makes a [`VerdictKind::Suspect`] (a smaller
    /// rise than [`Thresholds::rise_factor`]).
    pub suspect_rise_factor: f64,
    /// Share of the wait behind other cgroups that makes a suspect.
    pub suspect_other_share: f64,
    /// Windows in a row a verdict must hold before the agent gives it, and
    /// windows without it before the agent clears it ([`Hold`]).
    pub hold: u32,
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
            suspect_rise_factor: 2.0,
            suspect_other_share: 0.2,
            hold: 3,
        }
    }
}

impl fmt::Display for Thresholds {
    /// The rule in one line, for every view to print beside its verdicts.
    ///
    /// ```
    /// let t = topdeck_sched::verdict::Thresholds::default();
    /// assert_eq!(
    ///     t.to_string(),
    ///     "noisy neighbour: p99 >= 4x its baseline and >= 500µs, >= 50% of its wait behind other cgroups; \
    ///      suspect: >= 2x and >= 20%; each held 3 windows before it is given or cleared"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "noisy neighbour: p99 >= {}x its baseline and >= {}, >= {:.0}% of its wait behind other cgroups; \
             suspect: >= {}x and >= {:.0}%; each held {} windows before it is given or cleared",
            self.rise_factor,
            topdeck::human::seconds(self.min_p99_seconds),
            self.min_other_share * 100.0,
            self.suspect_rise_factor,
            self.suspect_other_share * 100.0,
            self.hold,
        )
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
    /// A smaller rise, partly behind other cgroups: worth a look, not a page.
    Suspect,
}

impl VerdictKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::NoisyNeighbour, Self::OwnQuota, Self::Suspect];

    /// The name published in the `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoisyNeighbour => "noisy_neighbour",
            Self::OwnQuota => "own_quota",
            Self::Suspect => "suspect",
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
            VerdictKind::NoisyNeighbour | VerdictKind::Suspect => {
                write!(
                    f,
                    "{} ",
                    match self.kind {
                        VerdictKind::Suspect => "suspect neighbour",
                        _ => "noisy neighbour",
                    }
                )?;
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

/// What the agent gives from the judge's windows: a verdict once it has
/// held for [`Thresholds::hold`] windows in a row, kept (with its latest
/// evidence) until as many windows have gone by without it, so one noisy
/// window neither raises nor clears a verdict. A stronger kind replaces a
/// verdict already given at once; a weaker one does not: the stronger
/// verdict stands, with the evidence that made it, until it clears, so a
/// view does not flip between `noisy` and `suspect` window by window (a
/// soak on a loaded host saw that every second or two).
///
/// ```
/// use topdeck_sched::verdict::{Hold, Verdict, VerdictKind};
/// let v = Verdict {
///     kind: VerdictKind::NoisyNeighbour, victim: "/web".into(), p99_before: None,
///     p99_after: None, culprits: vec![], other_share: None, throttled: None,
/// };
/// let mut hold = Hold::new(2);
/// assert!(hold.apply(vec![v.clone()]).is_empty(), "one window is not enough");
/// assert_eq!(hold.apply(vec![v.clone()]).len(), 1, "two in a row are");
/// assert_eq!(hold.apply(vec![]).len(), 1, "kept through one quiet window");
/// assert!(hold.apply(vec![]).is_empty(), "cleared after two");
/// ```
#[derive(Debug, Default)]
pub struct Hold {
    windows: u32,
    state: HashMap<String, Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// Windows in a row with a verdict, and without.
    streak: u32,
    calm: u32,
    given: Option<Verdict>,
}

impl Hold {
    /// Verdicts held for `windows` windows (1: as judged).
    pub fn new(windows: u32) -> Self {
        Self {
            windows: windows.max(1),
            state: HashMap::new(),
        }
    }

    /// The verdicts in force after a window whose judged verdicts are
    /// `judged`, by victim.
    pub fn apply(&mut self, judged: Vec<Verdict>) -> Vec<Verdict> {
        let mut seen = std::collections::HashSet::new();
        for v in judged {
            seen.insert(v.victim.clone());
            let h = self.state.entry(v.victim.clone()).or_default();
            h.calm = 0;
            h.streak += 1;
            let weaker = h
                .given
                .as_ref()
                .is_some_and(|g| strength(v.kind) < strength(g.kind));
            if (h.streak >= self.windows || h.given.is_some()) && !weaker {
                h.given = Some(v);
            }
        }
        for (victim, h) in self.state.iter_mut() {
            if !seen.contains(victim) {
                h.streak = 0;
                h.calm += 1;
                if h.calm >= self.windows {
                    h.given = None;
                }
            }
        }
        self.state.retain(|_, h| h.given.is_some() || h.streak > 0);
        let mut given: Vec<Verdict> = self
            .state
            .values()
            .filter_map(|h| h.given.clone())
            .collect();
        given.sort_by(|a, b| a.victim.cmp(&b.victim));
        given
    }

    /// Forgets a cgroup that is gone.
    pub fn forget(&mut self, victim: &str) {
        self.state.remove(victim);
    }
}

/// The root cgroup: idle CPUs' kernel threads and every task nobody
/// placed. It is not a tenant a neighbour can be unfair to, so it gets no
/// verdict (a 10-minute soak gave it 6 on a quiet host); what it holds of
/// the CPU is still charged to it (`system`) in everyone else's.
pub const ROOT: &str = "/";

/// Settles two cgroups that each name the other as their neighbour in one
/// window: the one that got more CPU for its weight is not the one being
/// starved (a CPU-bound batch job whose waits rose because a light
/// service woke more often), so its verdict is dropped. `cpu_per_weight`
/// gives a cgroup's CPU time in the window over its CPU weight; when
/// either is unknown, or they are equal, both verdicts stand.
///
/// ```
/// use topdeck_sched::verdict::{settle_mutual, Verdict, VerdictKind};
/// let v = |victim: &str, culprit: &str| Verdict {
///     kind: VerdictKind::NoisyNeighbour, victim: victim.into(), p99_before: None,
///     p99_after: None, culprits: vec![(culprit.into(), 0.9)], other_share: None, throttled: None,
/// };
/// // The service ran 0.02 s at weight 1; the batch job 0.94 s at weight 8.
/// let cpu = |cg: &str| match cg { "/web" => Some(0.02), "/batch" => Some(0.94 / 8.0), _ => None };
/// let kept = settle_mutual(vec![v("/web", "/batch"), v("/batch", "/web")], cpu);
/// assert_eq!(kept.len(), 1);
/// assert_eq!(kept[0].victim, "/web");
/// ```
pub fn settle_mutual(
    verdicts: Vec<Verdict>,
    cpu_per_weight: impl Fn(&str) -> Option<f64>,
) -> Vec<Verdict> {
    let names = |v: &Verdict, other: &str| {
        v.kind != VerdictKind::OwnQuota && v.culprits.iter().any(|(c, _)| c == other)
    };
    let dropped: Vec<bool> = verdicts
        .iter()
        .map(|v| {
            verdicts.iter().any(|w| {
                names(v, &w.victim)
                    && names(w, &v.victim)
                    && match (cpu_per_weight(&v.victim), cpu_per_weight(&w.victim)) {
                        (Some(mine), Some(theirs)) => mine > theirs,
                        _ => false,
                    }
            })
        })
        .collect();
    verdicts
        .into_iter()
        .zip(dropped)
        .filter_map(|(v, d)| (!d).then_some(v))
        .collect()
}

/// How strong a kind of verdict is: a suspect is worth a look, the others a page.
fn strength(kind: VerdictKind) -> u8 {
    match kind {
        VerdictKind::Suspect => 0,
        VerdictKind::NoisyNeighbour | VerdictKind::OwnQuota => 1,
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
        if victim == ROOT {
            return None;
        }
        let t = &self.thresholds;
        let total = w.wait_seconds();
        let long_waits = w.seconds > 0.0 && total > 0.0 && total >= t.min_wait_share * w.seconds;
        let Some(p99) = w
            .p99_seconds
            .filter(|_| w.samples >= t.min_samples || long_waits)
        else {
            // Too few waits to judge: the cgroup barely waited, a quiet
            // window whose p99 did not matter. It enters the baseline at
            // the floor, so that a service that ran alone (a CPU-bound one
            // has few waits) has a past to rise from once a neighbour
            // comes, and a rise from it must clear rise_factor floors.
            self.remember_quiet(victim, t.min_p99_seconds);
            return None;
        };
        let baseline = self.baseline(victim);
        let high = p99 >= t.min_p99_seconds;
        let rose_by = |factor: f64| high && baseline.is_some_and(|b| p99 >= factor * b);
        let rose = rose_by(t.rise_factor);
        let rose_some = rose || rose_by(t.suspect_rise_factor);
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
        } else if rose_some && other_share >= t.suspect_other_share {
            culprits.retain(|(_, s)| *s >= t.min_culprit_share);
            // A rise behind others, but nobody big enough to name: no suspect.
            (!culprits.is_empty()).then(|| verdict(VerdictKind::Suspect, culprits))
        } else {
            None
        };
        // A window that rose at all stays out of the baseline, so a
        // neighbour that stays noisy stays named.
        if judged.is_none() && !rose_some {
            self.remember_quiet(victim, p99);
        }
        judged
    }

    fn remember_quiet(&mut self, victim: &str, p99: f64) {
        let h = self.quiet.entry(victim.to_string()).or_default();
        h.push_back(p99);
        while h.len() > self.thresholds.history {
            h.pop_front();
        }
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

    /// A judge whose baseline is 400 µs: twice it is above the floor.
    fn settled_slow() -> Judge {
        let mut j = Judge::new(Thresholds::default());
        for p in [380e-6, 400e-6, 420e-6] {
            assert_eq!(j.judge("/v", &window(p, &[(Culprit::Own, 1.0)], 0)), None);
        }
        j
    }

    #[test]
    fn a_smaller_rise_partly_behind_another_cgroup_is_a_suspect_naming_it() {
        let mut j = settled_slow();
        // 2.5x the baseline, a quarter of the wait behind /batch: not a
        // noisy neighbour (4x, half), but a suspect.
        let w = window(1e-3, &[(cg("/batch"), 0.25), (Culprit::Own, 0.75)], 0);
        let v = j.judge("/v", &w).expect("a suspect");
        assert_eq!(v.kind, VerdictKind::Suspect);
        assert_eq!(v.culprits, [("/batch".to_string(), 0.25)]);
        assert!(
            v.to_string()
                .starts_with("/v: suspect neighbour /batch (25% of its wait)"),
            "{v}"
        );
        // The same rise behind its own threads is nobody's fault.
        let own = window(1e-3, &[(Culprit::Own, 0.9), (Culprit::System, 0.1)], 0);
        assert_eq!(j.judge("/v", &own), None);
        // Below the floor, no rise matters.
        let mut quick = settled();
        let small = window(100e-6, &[(cg("/batch"), 1.0)], 0);
        assert_eq!(quick.judge("/v", &small), None);
    }

    #[test]
    fn a_given_verdict_is_not_weakened_by_a_weaker_window_but_strengthened_at_once() {
        let v = |kind, p99| Verdict {
            kind,
            victim: "/v".into(),
            p99_before: Some(1e-4),
            p99_after: Some(p99),
            culprits: vec![("/batch".into(), 0.5)],
            other_share: Some(0.5),
            throttled: None,
        };
        let (suspect, noisy) = (VerdictKind::Suspect, VerdictKind::NoisyNeighbour);
        let mut hold = Hold::new(2);
        let kinds = |given: Vec<Verdict>| -> Vec<(VerdictKind, f64)> {
            given
                .iter()
                .map(|g| (g.kind, g.p99_after.unwrap()))
                .collect()
        };
        assert!(hold.apply(vec![v(suspect, 1e-3)]).is_empty());
        assert_eq!(kinds(hold.apply(vec![v(suspect, 1e-3)])), [(suspect, 1e-3)]);
        assert_eq!(
            kinds(hold.apply(vec![v(noisy, 3e-3)])),
            [(noisy, 3e-3)],
            "at once"
        );
        // A suspect window while noisy stands: the noisy verdict and its evidence.
        assert_eq!(kinds(hold.apply(vec![v(suspect, 1e-3)])), [(noisy, 3e-3)]);
        assert_eq!(kinds(hold.apply(vec![v(noisy, 4e-3)])), [(noisy, 4e-3)]);
        // Cleared after two windows without, then a suspect starts afresh.
        hold.apply(vec![]);
        assert!(hold.apply(vec![]).is_empty());
        assert!(hold.apply(vec![v(suspect, 1e-3)]).is_empty());
    }

    #[test]
    fn a_verdict_is_given_after_it_holds_and_cleared_after_as_many_quiet_windows() {
        let mut j = settled();
        let mut hold = Hold::new(3);
        let noisy = window(4e-3, &[(cg("/batch"), 0.9)], 0);
        let quiet = window(40e-6, &[(Culprit::Own, 1.0)], 0);
        let mut given = Vec::new();
        // One noisy window among quiet ones never gives a verdict.
        for w in [&noisy, &quiet, &noisy, &quiet, &quiet] {
            given.push(hold.apply(j.judge("/v", w).into_iter().collect()).len());
        }
        assert_eq!(given, [0, 0, 0, 0, 0], "a flapping window is no verdict");
        given.clear();
        for w in [
            &noisy, &noisy, &noisy, &quiet, &noisy, &quiet, &quiet, &quiet,
        ] {
            given.push(hold.apply(j.judge("/v", w).into_iter().collect()).len());
        }
        assert_eq!(given, [0, 0, 1, 1, 1, 1, 1, 0]);
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
    fn a_service_that_ran_alone_has_the_floor_for_a_baseline() {
        // A CPU-bound service alone on its CPU waits a few times a window:
        // too few to judge, but quiet all the same.
        let mut j = Judge::new(Thresholds::default());
        let alone = Window {
            samples: 3,
            ..window(40e-6, &[], 0)
        };
        for _ in 0..3 {
            assert_eq!(j.judge("/v", &alone), None);
        }
        assert_eq!(
            j.baseline("/v"),
            Some(Thresholds::default().min_p99_seconds)
        );
        // A neighbour at equal weight: it waits a slice behind it each turn.
        let shared = window(5e-3, &[(cg("/hog"), 0.97), (Culprit::Own, 0.03)], 0);
        let v = j.judge("/v", &shared).expect("a verdict");
        assert_eq!(
            (v.kind, v.culprits[0].0.as_str()),
            (VerdictKind::NoisyNeighbour, "/hog")
        );
        // Not from a wait that stays under rise_factor floors.
        let mut k = Judge::new(Thresholds::default());
        for _ in 0..3 {
            k.judge("/v", &alone);
        }
        assert_eq!(
            k.judge("/v", &window(1.5e-3, &[(cg("/hog"), 1.0)], 0))
                .map(|v| v.kind),
            Some(VerdictKind::Suspect)
        );
        assert_eq!(
            k.judge("/v", &window(0.9e-3, &[(cg("/hog"), 1.0)], 0)),
            None
        );
    }

    #[test]
    fn mutual_blame_keeps_the_verdict_of_the_one_that_got_less_cpu_for_its_weight() {
        let v = |victim: &str, culprit: &str| Verdict {
            kind: VerdictKind::NoisyNeighbour,
            victim: victim.into(),
            p99_before: None,
            p99_after: None,
            culprits: vec![(culprit.into(), 0.9)],
            other_share: None,
            throttled: None,
        };
        let both = || vec![v("/a", "/b"), v("/b", "/a"), v("/c", "/b")];
        let victims =
            |vs: Vec<Verdict>| -> Vec<String> { vs.into_iter().map(|v| v.victim).collect() };
        let cpu = |a: f64, b: f64| {
            move |cg: &str| match cg {
                "/a" => Some(a),
                "/b" => Some(b),
                _ => None,
            }
        };
        assert_eq!(victims(settle_mutual(both(), cpu(0.1, 0.5))), ["/a", "/c"]);
        assert_eq!(victims(settle_mutual(both(), cpu(0.5, 0.1))), ["/b", "/c"]);
        assert_eq!(
            victims(settle_mutual(both(), cpu(0.5, 0.5))),
            ["/a", "/b", "/c"],
            "a tie"
        );
        assert_eq!(
            victims(settle_mutual(both(), |_: &str| None)),
            ["/a", "/b", "/c"],
            "unknown"
        );
    }

    #[test]
    fn the_root_cgroup_is_never_a_victim() {
        let mut j = Judge::new(Thresholds::default());
        for _ in 0..5 {
            j.judge(ROOT, &window(40e-6, &[], 0));
        }
        assert_eq!(
            j.judge(ROOT, &window(9e-3, &[(cg("/batch"), 1.0)], 0)),
            None
        );
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
