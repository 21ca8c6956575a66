// SPDX-License-Identifier: Apache-2.0
//! The agent's work for one window, as a pure function: from two reads of
//! the probe's totals, the waits in progress at the second, the cgroups'
//! names and their throttling, to what the agent publishes and the
//! verdicts. The agent does the I/O around it (maps, cgroupfs, registry);
//! everything it decides is here, tested without root.

use std::collections::{BTreeMap, HashMap};

use topdeck::HistogramValue;

use crate::buckets::{BucketTable, SCHEMA};
use crate::cgroupfs::Throttling;
use crate::inprogress::Observed;
use crate::maps::{Totals, CGROUP_SYSTEM, NR_CAUSES};
use crate::schema::{value, DropReason};
use crate::verdict::{Culprit, Judge, Verdict, Window};

/// A cgroup as the agent names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CgroupName {
    /// Idle CPUs, kernel threads and root-cgroup tasks, as a culprit.
    System,
    /// A cgroup path, `/` or `/a/b`.
    Path(String),
    /// A cgroup that was gone before its path could be learnt: its figures
    /// go to the one series set labelled [`value::UNRESOLVED`].
    Unresolved,
}

impl CgroupName {
    /// The name for cgroup `id`: the system id is [`CgroupName::System`],
    /// others are named by `path` if it knows them.
    pub fn of(id: u64, path: Option<&str>) -> Self {
        match (id, path) {
            (CGROUP_SYSTEM, _) => Self::System,
            (_, Some(p)) => Self::Path(p.to_string()),
            (_, None) => Self::Unresolved,
        }
    }

    /// The label value it is published under.
    pub fn label(&self) -> &str {
        match self {
            Self::System => value::SYSTEM,
            Self::Path(p) => p,
            Self::Unresolved => value::UNRESOLVED,
        }
    }
}

/// What one window is made of.
#[derive(Debug, Clone, Copy)]
pub struct StepInput<'a> {
    /// The probe's totals at the previous read.
    pub prev: &'a Totals,
    /// The probe's totals at this read.
    pub now: &'a Totals,
    /// Waits in progress at this read ([`crate::inprogress`]).
    pub waiting: &'a Observed,
    /// Names of the cgroup ids; an id missing here is unresolved.
    pub names: &'a HashMap<u64, CgroupName>,
    /// Throttling by their own quota in the window (deltas), for the
    /// cgroups of [`judged`] where it is known.
    pub throttled: &'a HashMap<u64, Throttling>,
    /// The probe's bucket layout.
    pub table: &'a BucketTable,
}

/// One cgroup id's figures over the window, to add to its series.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupDelta {
    /// The cgroup id.
    pub id: u64,
    /// Its name; ids that share a name share the series.
    pub name: CgroupName,
    /// Run-queue waits that ended in the window.
    pub runq: HistogramValue,
    /// Switch-outs while runnable, by [`crate::maps::CAUSES`].
    pub switch_out: [u64; NR_CAUSES],
    /// Time on CPU, nanoseconds (the probe's running total grows by it).
    pub oncpu_ns: u64,
}

/// Wait of one victim charged to one culprit in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct PairDelta {
    /// The cgroup that waited.
    pub victim: CgroupName,
    /// The cgroup that held the CPU before it ran.
    pub culprit: CgroupName,
    /// Nanoseconds.
    pub ns: u64,
}

/// What one window yields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutput {
    /// Per cgroup id with new figures or waits in progress, by id.
    pub cgroups: Vec<CgroupDelta>,
    /// Per (victim, culprit) pair whose wait grew, by ids.
    pub wait_behind: Vec<PairDelta>,
    /// Samples the kernel lost in the window, by reason.
    pub drops: Vec<(DropReason, u64)>,
    /// The window each cgroup id of [`judged`] was judged on.
    pub windows: BTreeMap<u64, Window>,
    /// Verdicts in force after the window, by victim id.
    pub verdicts: Vec<Verdict>,
}

/// The cgroup ids whose window is judged: those whose totals changed, or
/// that have waits in progress. Sorted.
pub fn judged(prev: &Totals, now: &Totals, waiting: &Observed) -> Vec<u64> {
    let mut ids: Vec<u64> = now
        .cgroups
        .iter()
        .filter(|(id, n)| prev.cgroups.get(id) != Some(*n) || waiting.has(**id))
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    ids
}

/// Every cgroup id the window mentions with new figures, victims and
/// culprits, the ones to name before [`step`]. A culprit whose share did
/// not change is left out: a retired cgroup lives on, unchanged, in its
/// victims' slots and must not be followed again. Sorted.
pub fn mentioned(prev: &Totals, now: &Totals, waiting: &Observed) -> Vec<u64> {
    let mut ids: Vec<u64> = now
        .cgroups
        .iter()
        .filter(|(id, n)| prev.cgroups.get(id) != Some(*n))
        .map(|(id, _)| *id)
        .collect();
    ids.extend(
        now.pairs
            .iter()
            .filter(|(k, n)| prev.pairs.get(k).is_none_or(|b| b.wait_ns != n.wait_ns))
            .flat_map(|(&(v, c), _)| [v, c]),
    );
    ids.extend(waiting.ids());
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// What `victim`'s wait behind cgroup id `culprit` is charged to. An id
/// not named (a culprit of a wait in progress at the last read, retired
/// since) is unresolved.
fn culprit(names: &HashMap<u64, CgroupName>, victim: u64, culprit: u64) -> Culprit {
    match names.get(&culprit) {
        Some(CgroupName::System) => Culprit::System,
        _ if culprit == victim => Culprit::Own,
        Some(CgroupName::Path(p)) => Culprit::Cgroup(p.clone()),
        Some(CgroupName::Unresolved) | None => Culprit::Unresolved,
    }
}

fn name(names: &HashMap<u64, CgroupName>, id: u64) -> CgroupName {
    names.get(&id).cloned().unwrap_or(CgroupName::Unresolved)
}

/// One window: what grew between the two reads, each cgroup's window with
/// its waits in progress folded in, and `judge`'s verdicts on the cgroups
/// with a path (the judge keeps each cgroup's history between windows).
pub fn step(input: &StepInput<'_>, judge: &mut Judge) -> StepOutput {
    let StepInput {
        prev,
        now,
        waiting,
        names,
        throttled,
        table,
    } = *input;
    let mut out = StepOutput::default();
    let empty = Default::default();
    for id in judged(prev, now, waiting) {
        let n = &now.cgroups[&id];
        let b = prev.cgroups.get(&id).unwrap_or(&empty);
        let mut runq = HistogramValue::empty(
            SCHEMA,
            table.zero_threshold(),
            table.min_index(),
            table.len(),
        );
        runq.zero_count = n.zero.wrapping_sub(b.zero);
        for (k, slot) in runq.buckets.iter_mut().enumerate() {
            let was = b.buckets.get(k).copied().unwrap_or(0);
            *slot = n.buckets.get(k).copied().unwrap_or(0).wrapping_sub(was);
        }
        runq.count = runq.zero_count + runq.buckets.iter().sum::<u64>();
        out.windows.insert(
            id,
            Window {
                p99_seconds: waiting.p99(id, &runq, table),
                samples: runq.count,
                throttled: throttled.get(&id).copied(),
                ..Default::default()
            },
        );
        let mut switch_out = [0; NR_CAUSES];
        for ((d, n), b) in switch_out.iter_mut().zip(n.switch_out).zip(b.switch_out) {
            *d = n.wrapping_sub(b);
        }
        out.cgroups.push(CgroupDelta {
            id,
            name: name(names, id),
            runq,
            switch_out,
            oncpu_ns: n.oncpu_ns.wrapping_sub(b.oncpu_ns),
        });
    }

    let mut pairs: Vec<(&(u64, u64), u64)> = now
        .pairs
        .iter()
        .map(|(k, n)| {
            let b = prev.pairs.get(k).map_or(0, |b| b.wait_ns);
            (k, n.wait_ns.wrapping_sub(b))
        })
        .filter(|(_, d)| *d != 0)
        .collect();
    pairs.sort_unstable_by_key(|(k, _)| **k);
    for (&(v, c), ns) in pairs {
        out.wait_behind.push(PairDelta {
            victim: name(names, v),
            culprit: name(names, c),
            ns,
        });
        if let Some(w) = out.windows.get_mut(&v) {
            w.wait_behind.push((culprit(names, v, c), ns as f64 / 1e9));
        }
    }
    for (&id, w) in out.windows.iter_mut() {
        waiting.apply(id, w, |c| culprit(names, id, c));
    }

    out.drops = DropReason::KERNEL
        .iter()
        .zip(now.drops.iter().zip(&prev.drops))
        .map(|(r, (n, b))| (*r, n.wrapping_sub(*b)))
        .collect();

    for (id, w) in &out.windows {
        if let Some(CgroupName::Path(path)) = names.get(id) {
            out.verdicts.extend(judge.judge(path, w));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::inprogress::InProgress;
    use crate::maps::{CgroupTotals, PairTotals, Waiting};
    use crate::verdict::{Thresholds, VerdictKind};

    const VICTIM: u64 = 10;
    const NEIGHBOUR: u64 = 20;
    const GONE: u64 = 30;
    const SYSTEM: u64 = CGROUP_SYSTEM;
    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Expect {
        Nothing,
        Neighbour,
        OwnQuota,
    }

    /// One window of one second, read at `k` seconds.
    #[derive(Clone)]
    struct Window1s {
        /// Waits of the victim that ended in the window: (culprit, ns, how many).
        finished: Vec<(u64, u64, u64)>,
        /// Waits of the victim in progress at the read: (pid, since ms, culprit).
        waiting: Vec<(u32, u64, u64)>,
        /// Periods the victim was throttled in.
        throttled: u64,
        expect: Expect,
    }

    fn window(
        finished: &[(u64, u64, u64)],
        waiting: &[(u32, u64, u64)],
        expect: Expect,
    ) -> Window1s {
        Window1s {
            finished: finished.to_vec(),
            waiting: waiting.to_vec(),
            throttled: 0,
            expect,
        }
    }

    /// A latency-sensitive cgroup on its own: many short waits.
    fn quiet(n: usize) -> Vec<Window1s> {
        let w = window(
            &[(VICTIM, 40 * US, 400), (SYSTEM, 30 * US, 100)],
            &[],
            Expect::Nothing,
        );
        vec![w; n]
    }

    /// Reads at 6..=8 s; the neighbour took the CPU at 5 s. The victim runs
    /// a few times a second, and not at all from 5.9 s to 7.3 s.
    fn starved() -> Vec<Window1s> {
        let mut s = quiet(5);
        s.push(window(
            &[(NEIGHBOUR, 200 * MS, 4)],
            &[(7, 5900, NEIGHBOUR)],
            Expect::Neighbour,
        ));
        // Not one wait ended: only the one in progress shows the starving.
        s.push(window(&[], &[(7, 5900, NEIGHBOUR)], Expect::Neighbour));
        s.push(window(
            &[(NEIGHBOUR, 1400 * MS, 1), (NEIGHBOUR, 200 * MS, 3)],
            &[(7, 7950, NEIGHBOUR)],
            Expect::Neighbour,
        ));
        s
    }

    fn names() -> HashMap<u64, CgroupName> {
        HashMap::from([
            (VICTIM, CgroupName::Path("/victim".into())),
            (NEIGHBOUR, CgroupName::Path("/neighbour".into())),
            (SYSTEM, CgroupName::System),
        ])
    }

    /// The probe's totals after `windows`: the victim's histogram and its
    /// (victim, culprit) pairs, cumulative.
    fn add(totals: &mut Totals, table: &BucketTable, w: &Window1s) {
        let v = totals
            .cgroups
            .entry(VICTIM)
            .or_insert_with(|| CgroupTotals {
                buckets: vec![0; table.len()],
                ..Default::default()
            });
        for &(culprit, ns, n) in &w.finished {
            v.buckets[table.bucket_of(ns).unwrap()] += n;
            v.count += n;
            v.wait_ns += ns * n;
            let p = totals.pairs.entry((VICTIM, culprit)).or_insert(PairTotals {
                wait_ns: 0,
                count: 0,
            });
            p.wait_ns += ns * n;
            p.count += n;
        }
    }

    fn run(name: &str, windows: &[Window1s]) {
        let table = BucketTable::new();
        let names = names();
        let mut judge = Judge::new(Thresholds::default());
        let mut tracker = InProgress::new();
        let start = Instant::now();
        let mut prev = Totals::default();
        for (i, w) in windows.iter().enumerate() {
            let k = i as u64 + 1;
            let now_ns = k * 1000 * MS;
            let waiting: Vec<Waiting> = w
                .waiting
                .iter()
                .map(|&(pid, since_ms, culprit)| Waiting {
                    pid,
                    cgroup: VICTIM,
                    since_ns: since_ms * MS,
                    now_ns,
                    culprit,
                })
                .collect();
            let observed = tracker.observe(start + Duration::from_secs(k), &waiting);
            let mut now = prev.clone();
            add(&mut now, &table, w);
            let throttled = HashMap::from([(
                VICTIM,
                Throttling {
                    nr_throttled: w.throttled,
                    throttled_ns: w.throttled * 80 * MS,
                },
            )]);
            let out = step(
                &StepInput {
                    prev: &prev,
                    now: &now,
                    waiting: &observed,
                    names: &names,
                    throttled: &throttled,
                    table: &table,
                },
                &mut judge,
            );
            let got = match out.verdicts.as_slice() {
                [] => Expect::Nothing,
                [v] if v.kind == VerdictKind::OwnQuota => Expect::OwnQuota,
                [_] => Expect::Neighbour,
                many => panic!("{name}, window {k}: one victim, verdicts {many:?}"),
            };
            assert_eq!(
                got, w.expect,
                "{name}, window {k}: {:?} gave {:?}",
                out.windows, out.verdicts
            );
            if let [v] = out.verdicts.as_slice() {
                assert_eq!(v.victim, "/victim");
                if v.kind == VerdictKind::NoisyNeighbour {
                    let culprits: Vec<&str> = v.culprits.iter().map(|(c, _)| c.as_str()).collect();
                    assert_eq!(culprits, ["/neighbour"], "{name}, window {k}: {v:?}");
                }
            }
            // What is published is what finished in the window.
            let finished: u64 = w.finished.iter().map(|f| f.2).sum();
            let published: u64 = out.cgroups.iter().map(|c| c.runq.count).sum();
            assert_eq!(published, finished, "{name}, window {k}");
            prev = now;
        }
    }

    #[test]
    fn a_starved_victim_names_its_neighbour() {
        run("starved", &starved());
    }

    #[test]
    fn the_verdict_clears_when_the_neighbour_stops() {
        let mut stops = starved();
        // The neighbour stops at 8 s: the last long wait ends at once, and
        // the victim is back to many short waits.
        stops.push(window(
            &[(NEIGHBOUR, 51 * MS, 1), (VICTIM, 40 * US, 500)],
            &[],
            Expect::Nothing,
        ));
        stops.extend(quiet(2));
        run("stops", &stops);
    }

    #[test]
    fn a_quota_bound_cgroup_is_at_its_own_quota() {
        let mut quota = quiet(5);
        // Throttled by its own quota: its tasks wait while the CPU idles, or
        // while a neighbour runs; either way it is at its own limit.
        for culprit in [SYSTEM, NEIGHBOUR, SYSTEM] {
            let mut w = window(
                &[(culprit, 80 * MS, 6)],
                &[(3, 1000 * quota.len() as u64 + 900, culprit)],
                Expect::OwnQuota,
            );
            w.throttled = 8;
            quota.push(w);
        }
        run("quota", &quota);
    }

    #[test]
    fn a_victim_behind_its_own_threads_blames_nobody() {
        let mut own = quiet(5);
        // Its own CPU hogs: few long waits, all behind its own threads.
        own.push(window(
            &[(VICTIM, 150 * MS, 6)],
            &[(4, 5900, VICTIM)],
            Expect::Nothing,
        ));
        own.push(window(
            &[],
            &[(4, 5900, VICTIM), (5, 6200, VICTIM)],
            Expect::Nothing,
        ));
        run("own threads", &own);
    }

    #[test]
    fn a_few_short_waits_are_not_judged() {
        let mut thin = quiet(5);
        // Three waits, 15 ms of waiting in all: too little to judge, though
        // their p99 is far above the baseline.
        thin.push(window(&[(NEIGHBOUR, 5 * MS, 3)], &[], Expect::Nothing));
        run("thin", &thin);
    }

    #[test]
    fn without_the_wait_in_progress_a_window_the_victim_never_ran_in_shows_nothing() {
        let mut windows = starved();
        for w in windows.iter_mut().skip(5) {
            w.waiting.clear();
        }
        windows[6].expect = Expect::Nothing;
        run("finished waits only", &windows);
    }

    #[test]
    fn an_unresolved_culprit_counts_against_others_but_is_never_named() {
        let table = BucketTable::new();
        let names = names();
        let mut judge = Judge::new(Thresholds::default());
        let observed = Observed::default();
        let no_throttling = HashMap::new();
        let next = |prev: &Totals, windows: &[Window1s], judge: &mut Judge| {
            let mut now = prev.clone();
            for w in windows {
                add(&mut now, &table, w);
            }
            let input = StepInput {
                prev,
                now: &now,
                waiting: &observed,
                names: &names,
                throttled: &no_throttling,
                table: &table,
            };
            (step(&input, judge), now)
        };
        let mut prev = Totals::default();
        for w in quiet(5) {
            let (out, now) = next(&prev, &[w], &mut judge);
            assert!(out.verdicts.is_empty());
            prev = now;
        }
        let noisy = [
            window(&[(NEIGHBOUR, 3 * MS, 30)], &[], Expect::Neighbour),
            window(&[(GONE, 4 * MS, 60)], &[], Expect::Neighbour),
        ];
        let (out, _) = next(&prev, &noisy, &mut judge);
        let [v] = out.verdicts.as_slice() else {
            panic!("one verdict: {:?}", out.verdicts);
        };
        // 90 ms behind the neighbour, 240 ms behind the unnamed cgroup: the
        // neighbour is named with its share, the unnamed one only counts in
        // the share behind others.
        let names: Vec<&str> = v.culprits.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(names, ["/neighbour"]);
        assert!((v.culprits[0].1 - 90.0 / 330.0).abs() < 1e-9, "{v:?}");
        assert_eq!(v.other_share.map(|s| (s * 100.0).round()), Some(100.0));
        let gone: Vec<&PairDelta> = out
            .wait_behind
            .iter()
            .filter(|p| p.culprit == CgroupName::Unresolved)
            .collect();
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].ns, 240_000_000);
    }

    #[test]
    fn publishes_the_deltas_of_every_figure() {
        let table = BucketTable::new();
        let mut prev = Totals {
            drops: [1, 2, 3, 4],
            ..Default::default()
        };
        prev.cgroups.insert(
            VICTIM,
            CgroupTotals {
                buckets: vec![0; table.len()],
                switch_out: [5, 5, 5],
                oncpu_ns: 1_000_000_000,
                ..Default::default()
            },
        );
        let mut now = prev.clone();
        now.drops = [1, 4, 3, 10];
        let v = now.cgroups.get_mut(&VICTIM).unwrap();
        v.switch_out = [6, 8, 5];
        v.oncpu_ns = 1_500_000_000;
        v.zero = 2;
        // A cgroup nobody named: published under the unresolved name, not judged.
        now.cgroups.insert(
            GONE,
            CgroupTotals {
                buckets: vec![0; table.len()],
                zero: 1,
                ..Default::default()
            },
        );
        let out = step(
            &StepInput {
                prev: &prev,
                now: &now,
                waiting: &Observed::default(),
                names: &names(),
                throttled: &HashMap::new(),
                table: &table,
            },
            &mut Judge::new(Thresholds::default()),
        );
        let drops: Vec<(&str, u64)> = out.drops.iter().map(|(r, n)| (r.as_str(), *n)).collect();
        assert_eq!(
            drops,
            [
                ("timestamp_full", 0),
                ("cgroup_full", 2),
                ("pair_full", 0),
                ("no_timestamp", 6)
            ]
        );
        let [victim, gone] = out.cgroups.as_slice() else {
            panic!("two cgroups: {:?}", out.cgroups);
        };
        assert_eq!(victim.name, CgroupName::Path("/victim".into()));
        assert_eq!(victim.switch_out, [1, 3, 0]);
        assert_eq!(victim.oncpu_ns, 500_000_000);
        assert_eq!((victim.runq.zero_count, victim.runq.count), (2, 2));
        assert_eq!(gone.name, CgroupName::Unresolved);
        assert_eq!(gone.name.label(), "(unresolved)");
        assert_eq!(out.windows.len(), 2);
    }
}
