// SPDX-License-Identifier: Apache-2.0
//! Waits still in progress when a window closes, and what they add to it.
//!
//! The probe counts a wait when it ends, at the switch that puts the task on
//! a CPU. A victim starved by a neighbour with a much larger CPU share runs
//! a handful of times a second: most of its waiting is in a few long waits,
//! and the one under way when a window closes would show nowhere in that
//! window. So at each read the agent also lists the waits in progress
//! ([`crate::Probe::waiting`]: tasks queued on a run queue, not on a CPU,
//! with the probe's timestamp of when they became runnable) and folds them
//! into the window with [`InProgress::observe`] and [`Observed::apply`]:
//!
//! - **Attribution.** The part of a wait in progress is charged to the
//!   cgroup that holds the task's CPU at the read (system for an
//!   idle CPU, a kernel thread or a root-cgroup task): the culprit the probe
//!   would charge the whole wait to if the task ran at that moment (a
//!   finished wait goes to whoever held the CPU just before the task ran).
//!   Like the probe's own rule, it names the last holder, not everyone who
//!   ran during the wait.
//! - **Counted once.** Each wait is known by (pid, when it became runnable).
//!   A wait seen at one read adds what it waited since the previous read
//!   (all of it the first time it is seen). When it ends, the probe adds its
//!   whole length to the finished totals of the window it ends in; what
//!   earlier windows already counted is taken back there, from the culprit
//!   it was charged to first. So every nanosecond of waiting counts in one
//!   window, the one it fell in. (The agent walks the tasks before it reads
//!   the totals: a wait that ends in between counts its last stretch in this
//!   window twice, and the next window takes it back; the sum stays right.)
//! - **Latency.** A wait in progress is a sample at least as long as it has
//!   waited so far; the window's p99 ([`p99_with`]) includes those samples,
//!   so a victim that did not run at all in a window still shows its wait.
//!   The published histograms keep finished waits only.
//!
//! Everything here is pure bookkeeping over what the probe read: the tests
//! run without root.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use topdeck::HistogramValue;

use crate::buckets::BucketTable;
use crate::maps::Waiting;
use crate::verdict::{Culprit, Window};

/// What a wait seen at the last read has been counted for so far.
#[derive(Debug, Clone, Copy)]
struct Counted {
    victim: u64,
    culprit: u64,
    ns: u64,
}

/// The waits in progress seen at the last read, between reads.
#[derive(Debug, Default)]
pub struct InProgress {
    /// By (pid, when it became runnable): one wait of one task.
    counted: HashMap<(u32, u64), Counted>,
    /// When the last read was.
    last: Option<Instant>,
}

/// What waits in progress add to one cgroup's window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pending {
    /// Waiting that fell in this window, ns, by culprit cgroup id.
    pub added: BTreeMap<u64, u64>,
    /// Waiting counted in earlier windows by waits that ended in this one
    /// (whose whole length is in this window's finished totals), ns, by the
    /// culprit it was charged to.
    pub taken_back: BTreeMap<u64, u64>,
    /// How long each wait still in progress has waited so far, ns.
    pub elapsed: Vec<u64>,
}

/// What one read found, per victim cgroup.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// By victim cgroup id.
    pub cgroups: HashMap<u64, Pending>,
    /// Length of the window this read closes (zero for the first read).
    pub window: Duration,
}

impl InProgress {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the waits in progress at a read made `at`, which closes the
    /// window since the last read, and says what they add to it.
    pub fn observe(&mut self, at: Instant, now: &[Waiting]) -> Observed {
        let window = self
            .last
            .replace(at)
            .map_or(Duration::ZERO, |last| at.saturating_duration_since(last));
        let mut out = Observed {
            cgroups: HashMap::new(),
            window,
        };
        let mut counted = HashMap::with_capacity(now.len());
        for w in now {
            let key = (w.pid, w.since_ns);
            let elapsed = w.elapsed_ns();
            let before = self.counted.remove(&key).map_or(0, |c| c.ns);
            let p = out.cgroups.entry(w.cgroup).or_default();
            *p.added.entry(w.culprit).or_default() += elapsed.saturating_sub(before);
            p.elapsed.push(elapsed);
            counted.insert(
                key,
                Counted {
                    victim: w.cgroup,
                    culprit: w.culprit,
                    ns: elapsed.max(before),
                },
            );
        }
        // Those not seen again have ended since the last read.
        for c in self.counted.values() {
            let p = out.cgroups.entry(c.victim).or_default();
            *p.taken_back.entry(c.culprit).or_default() += c.ns;
        }
        self.counted = counted;
        out
    }
}

impl Observed {
    /// Whether `cgroup` had waits in progress at this read or at the last.
    pub fn has(&self, cgroup: u64) -> bool {
        self.cgroups.contains_key(&cgroup)
    }

    /// The cgroup ids this read's waits in progress name: victims and the
    /// culprits they are charged to.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.cgroups
            .iter()
            .flat_map(|(&v, p)| std::iter::once(v).chain(p.added.keys().copied()))
    }

    /// The p99 of `cgroup`'s window: its finished waits `hv` and, as
    /// samples of at least their length so far, its waits in progress.
    pub fn p99(&self, cgroup: u64, hv: &HistogramValue, table: &BucketTable) -> Option<f64> {
        let elapsed = self.cgroups.get(&cgroup).map_or(&[][..], |p| &p.elapsed);
        p99_with(hv, table, elapsed)
    }

    /// Folds `victim`'s waits in progress into its window `w`, whose
    /// `wait_behind` holds its finished waits; `culprit` names a cgroup id
    /// as a [`Culprit`] of `victim`. Also sets the window's length.
    pub fn apply(&self, victim: u64, w: &mut Window, mut culprit: impl FnMut(u64) -> Culprit) {
        w.seconds = self.window.as_secs_f64();
        let Some(p) = self.cgroups.get(&victim) else {
            return;
        };
        w.waiting = p.elapsed.len() as u64;
        for (&c, &ns) in &p.added {
            if ns > 0 {
                *slot(&mut w.wait_behind, culprit(c)) += ns as f64 / 1e9;
            }
        }
        for (&c, &ns) in &p.taken_back {
            let mut left = ns as f64 / 1e9;
            // First from the culprit it was charged to; if the wait ended
            // behind another (the CPU changed hands after the read), the
            // rest from the others, largest first, so the window's total
            // stays right although its split may shift by that much.
            let first = culprit(c);
            let s = slot(&mut w.wait_behind, first);
            let take = left.min(*s);
            *s -= take;
            left -= take;
            while left > 0.0 {
                let Some((_, s)) = w
                    .wait_behind
                    .iter_mut()
                    .filter(|(_, s)| *s > 0.0)
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                else {
                    break;
                };
                let take = left.min(*s);
                *s -= take;
                left -= take;
            }
        }
        w.wait_behind.retain(|(_, s)| *s > 0.0);
    }
}

fn slot(behind: &mut Vec<(Culprit, f64)>, c: Culprit) -> &mut f64 {
    let i = match behind.iter().position(|(x, _)| *x == c) {
        Some(i) => i,
        None => {
            behind.push((c, 0.0));
            behind.len() - 1
        }
    };
    &mut behind[i].1
}

/// The p99 of the finished waits in `hv` (bucketed as the probe buckets
/// them) together with waits in progress of `elapsed` ns so far.
pub fn p99_with(hv: &HistogramValue, table: &BucketTable, elapsed: &[u64]) -> Option<f64> {
    if elapsed.is_empty() {
        return hv.quantile(0.99);
    }
    let mut h = hv.clone();
    if h.buckets.len() < table.len() {
        h.buckets.resize(table.len(), 0);
    }
    for &ns in elapsed {
        match table.bucket_of(ns) {
            None => h.zero_count += 1,
            Some(k) => h.buckets[k] += 1,
        }
        h.count += 1;
    }
    h.quantile(0.99)
}

/// `victim`'s [`Culprit`] for cgroup id `culprit`, named by `path`: the
/// agent's rule (it names through its cache of cgroup names).
#[cfg(test)]
fn culprit_of(victim: u64, culprit: u64, path: impl FnOnce(u64) -> String) -> Culprit {
    match culprit {
        crate::maps::CGROUP_SYSTEM => Culprit::System,
        c if c == victim => Culprit::Own,
        c => Culprit::Cgroup(path(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(pid: u32, cgroup: u64, since_ms: u64, now_ms: u64, culprit: u64) -> Waiting {
        Waiting {
            pid,
            cgroup,
            since_ns: since_ms * 1_000_000,
            now_ns: now_ms * 1_000_000,
            culprit,
        }
    }

    /// Reads one second apart.
    struct Clock(Instant);

    impl Clock {
        fn next(&mut self) -> Instant {
            self.0 += Duration::from_secs(1);
            self.0
        }
    }

    fn clock() -> Clock {
        Clock(Instant::now())
    }

    use crate::maps::CGROUP_SYSTEM;

    #[test]
    fn a_long_wait_counts_once_in_the_windows_it_spans() {
        let (mut t, mut at) = (InProgress::new(), clock());
        // Runnable at 1.5 s; reads at 2 s and 3 s; it runs at 3.2 s.
        let o = t.observe(at.next(), &[waiting(7, 10, 1500, 2000, 20)]);
        assert_eq!(o.cgroups[&10].added[&20], 500_000_000);
        assert_eq!(o.cgroups[&10].elapsed, [500_000_000]);
        let o = t.observe(at.next(), &[waiting(7, 10, 1500, 3000, 20)]);
        assert_eq!(o.cgroups[&10].added[&20], 1_000_000_000);
        assert_eq!(o.cgroups[&10].elapsed, [1_500_000_000]);
        // Ended: its 1.7 s are in the finished totals of this window; the
        // 1.5 s counted before are taken back, leaving its last 0.2 s.
        let o = t.observe(at.next(), &[]);
        assert_eq!(o.cgroups[&10].taken_back[&20], 1_500_000_000);
        let mut w = Window {
            wait_behind: vec![(Culprit::Cgroup("/n".into()), 1.7)],
            ..Default::default()
        };
        o.apply(10, &mut w, |c| culprit_of(10, c, |_| "/n".into()));
        assert!((w.wait_behind[0].1 - 0.2).abs() < 1e-9, "{w:?}");
        assert_eq!(w.waiting, 0);
        // Nothing is remembered after it ended.
        assert!(t.observe(at.next(), &[]).cgroups.is_empty());
    }

    #[test]
    fn a_new_wait_of_the_same_task_is_another_wait() {
        let (mut t, mut at) = (InProgress::new(), clock());
        t.observe(at.next(), &[waiting(7, 10, 1500, 2000, 20)]);
        // It ran, and waits again since 2.6 s.
        let o = t.observe(at.next(), &[waiting(7, 10, 2600, 3000, 20)]);
        let p = &o.cgroups[&10];
        assert_eq!(p.added[&20], 400_000_000);
        assert_eq!(p.taken_back[&20], 500_000_000);
        assert_eq!(p.elapsed, [400_000_000]);
    }

    #[test]
    fn waits_are_charged_to_who_holds_the_cpu_at_the_read() {
        let (mut t, mut at) = (InProgress::new(), clock());
        assert_eq!(t.observe(at.next(), &[]).window, Duration::ZERO);
        let o = t.observe(
            at.next(),
            &[
                waiting(1, 10, 1000, 2000, 20),
                waiting(2, 10, 1800, 2000, CGROUP_SYSTEM),
                waiting(3, 10, 1900, 2000, 10),
            ],
        );
        let mut w = Window::default();
        o.apply(10, &mut w, |c| culprit_of(10, c, |id| format!("/{id}")));
        let mut got = w.wait_behind.clone();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            [
                (Culprit::Own, 0.1),
                (Culprit::System, 0.2),
                (Culprit::Cgroup("/20".into()), 1.0)
            ]
        );
        assert_eq!(w.waiting, 3);
        assert_eq!(w.seconds, 1.0);
    }

    #[test]
    fn what_is_taken_back_from_a_culprit_that_changed_comes_from_the_others() {
        let (mut t, mut at) = (InProgress::new(), clock());
        t.observe(at.next(), &[waiting(1, 10, 1000, 2000, 20)]);
        let o = t.observe(at.next(), &[]);
        // The wait ended behind /30 after the CPU changed hands: 1.3 s.
        let mut w = Window {
            wait_behind: vec![(Culprit::Cgroup("/30".into()), 1.3)],
            ..Default::default()
        };
        o.apply(10, &mut w, |c| culprit_of(10, c, |id| format!("/{id}")));
        assert_eq!(w.wait_behind.len(), 1);
        assert!((w.wait_behind[0].1 - 0.3).abs() < 1e-9, "{w:?}");
    }

    /// A histogram of the probe's bucket layout with nothing in it.
    fn empty_histogram(table: &BucketTable) -> HistogramValue {
        HistogramValue::empty(
            crate::buckets::SCHEMA,
            table.zero_threshold(),
            table.min_index(),
            table.len(),
        )
    }

    #[test]
    fn the_p99_sees_a_victim_that_did_not_run() {
        let table = BucketTable::new();
        let empty = empty_histogram(&table);
        assert_eq!(p99_with(&empty, &table, &[]), None);
        let p99 = p99_with(&empty, &table, &[900_000_000]).unwrap();
        assert!((0.8..=1.0).contains(&p99), "{p99}");
    }
}
