// SPDX-License-Identifier: Apache-2.0
//! `top --at`: the view of a recording. [`Recorded`] is the origin that
//! gives the collector recorded moments, one a pass, as the recorder kept
//! them; [`Travel`] moves through a store as keys ask (a frame, a
//! minute), and only then: nothing refreshes on its own.
//!
//! A frame is shown as the live view shows a pass: its rates and
//! quantiles are over the interval from the frame before, through the
//! same diffing, and its sparklines are the frames before it, so the
//! store is replayed up to [`HISTORY`] frames back on a jump, and one
//! frame on for a step forward.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use topdeck_history::{History, Moment};
use topdeck_sched::trust::{self, Trusted, Untrusted};
use topdeck_sources::{Kind, Source};

use super::agent::AGENT_REGISTRY;
use super::app::Step;
use super::collect::Collector;
use super::harvest::{Harvest, HostLine, Recorded as RecordedAt};
use super::history::HISTORY;
use super::origin::{Found, Look, Origin};

/// A minute, in ns: what `{` and `}` move.
const MINUTE_NS: u64 = 60_000_000_000;

/// What names a recorded source from one frame to the next beside its
/// path: another writer at the same path is another source.
type Identity = (Kind, Option<u32>, Option<u64>, Option<u64>);

fn identity(s: &Source) -> Identity {
    (s.kind, s.pid, s.start_ticks, s.created_unix_ns)
}

/// Recorded moments as an [`Origin`]: each look takes the next one fed.
pub struct Recorded {
    /// How the store is named where the live view names its directories.
    dirs: Vec<String>,
    queue: VecDeque<Moment>,
    /// The sources of the last look, by path.
    seen: HashMap<PathBuf, Identity>,
    /// When the last look's frame was recorded.
    last_ns: Option<u64>,
    reader_uid: u32,
}

impl Recorded {
    /// An origin of the store at `dir`, with nothing fed yet.
    pub fn new(dir: &Path) -> Self {
        Self {
            dirs: vec![format!("{} (recorded)", dir.display())],
            queue: VecDeque::new(),
            seen: HashMap::new(),
            last_ns: None,
            reader_uid: trust::reader_uid(),
        }
    }

    /// Queues `m` for the next look.
    pub fn feed(&mut self, m: Moment) {
        self.queue.push_back(m);
    }

    /// Whether a registry named `topdeck-agent`, as recorded, was the
    /// agent's; `None` for other sources.
    fn agent(&self, s: &Source) -> Option<Result<Trusted, Untrusted>> {
        if s.kind != Kind::Topdeck || s.registry.as_deref() != Some(AGENT_REGISTRY) {
            return None;
        }
        let facts = trust::Recorded {
            path: s.path.clone(),
            uid: s.uid,
            pid: s.pid,
            alive: s.liveness == topdeck::Liveness::Alive,
        };
        Some(trust::judge_recorded(&facts, self.reader_uid))
    }
}

impl Origin for Recorded {
    fn look(&mut self, gone: &mut dyn FnMut(&Path)) -> Look {
        let Some(m) = self.queue.pop_front() else {
            // Nothing fed: nothing seen.
            for path in self.seen.keys() {
                gone(path);
            }
            self.seen.clear();
            return Look {
                at_ns: self.last_ns.unwrap_or(0),
                taken: SystemTime::UNIX_EPOCH,
                dirs: self.dirs.clone(),
                sources: Vec::new(),
                errors: Vec::new(),
                recorded: None,
            };
        };
        let seen: HashMap<PathBuf, Identity> = m
            .sources
            .iter()
            .map(|(s, _)| (s.path.clone(), identity(s)))
            .collect();
        for (path, id) in &self.seen {
            if seen.get(path) != Some(id) {
                gone(path);
            }
        }
        self.seen = seen;
        let sources = m
            .sources
            .into_iter()
            .map(|(source, snap)| Found {
                agent: self.agent(&source),
                source,
                snapshot: Ok(snap),
            })
            .collect();
        let since = self.last_ns.replace(m.unix_ns);
        Look {
            at_ns: m.unix_ns,
            taken: SystemTime::UNIX_EPOCH + Duration::from_nanos(m.unix_ns),
            dirs: self.dirs.clone(),
            sources,
            errors: Vec::new(),
            recorded: Some(RecordedAt::new(m.unix_ns, since, m.damage)),
        }
    }

    fn host(&mut self) -> Option<HostLine> {
        None
    }

    fn procfs(&self) -> bool {
        false
    }
}

/// Where a move ended.
#[derive(Debug)]
pub enum Moved {
    /// At another frame, harvested.
    To(Box<Harvest>),
    /// Nowhere to go: why (the recording's first or last frame).
    Stay(&'static str),
}

/// A store, shown one frame at a time.
pub struct Travel {
    dir: PathBuf,
    history: History,
    /// Fed up to the frame shown.
    collector: Collector<Recorded>,
    /// The frame shown, ns since the Unix epoch.
    at: u64,
    /// Time between the frame shown and the one before it (0: none
    /// before): how far back a jump replays for the sparklines.
    spacing: u64,
}

impl Travel {
    /// The store `history` (at `dir`) at `at`: the frame recorded at or
    /// before it, harvested, and a note when that frame is well before
    /// `at` (the recording had stopped, or paused).
    pub fn open(dir: &Path, history: History, at: u64) -> Result<(Self, Harvest, Option<String>)> {
        let none: topdeck_history::Filter = &|_| false;
        let frame = crate::recording::moment_at(&history, dir, at, none)?.unix_ns;
        let before = frame
            .checked_sub(1)
            .map(|t| history.at(t, none))
            .transpose()?
            .flatten();
        let spacing = before.map_or(0, |b| frame - b.unix_ns);
        let mut travel = Self {
            dir: dir.to_owned(),
            collector: Collector::of(Recorded::new(dir)),
            history,
            at: frame,
            spacing,
        };
        let harvest = travel.rebuild(frame)?;
        // Beyond two frames' time: not where it was asked.
        let late = at.saturating_sub(frame);
        let note = (late > spacing.max(500_000_000) * 2).then(|| {
            format!(
                "nothing recorded between {} and {}: showing the frame before",
                crate::recording::when(frame),
                crate::recording::when(at)
            )
        });
        Ok((travel, harvest, note))
    }

    /// Moves as `step` asks.
    pub fn step(&mut self, step: Step) -> Result<Moved> {
        let target = match step {
            Step::Back => self.before(self.at)?,
            Step::Forward => self.after(self.at)?,
            Step::BackMinute => match self.before(self.at.saturating_sub(MINUTE_NS) + 1)? {
                Some(t) => Some(t),
                None => self.first().filter(|&t| t < self.at),
            },
            Step::ForwardMinute => match self.before(self.at.saturating_add(MINUTE_NS) + 1)? {
                Some(t) if t > self.at => Some(t),
                _ => self.after(self.at)?,
            },
        };
        let Some(t) = target else {
            return Ok(Moved::Stay(match step {
                Step::Back | Step::BackMinute => "the recording's first frame",
                Step::Forward | Step::ForwardMinute => "the recording's last frame",
            }));
        };
        self.load(t).map(|h| Moved::To(Box::new(h)))
    }

    /// The frame recorded last before `t`.
    fn before(&self, t: u64) -> Result<Option<u64>> {
        let Some(t) = t.checked_sub(1) else {
            return Ok(None);
        };
        Ok(self.history.at(t, &|_| false)?.map(|m| m.unix_ns))
    }

    /// The frame recorded first after `t`.
    fn after(&self, t: u64) -> Result<Option<u64>> {
        let mut next = self
            .history
            .replay(t.saturating_add(1), u64::MAX, &|_| false);
        Ok(next.next().transpose()?.map(|m| m.unix_ns))
    }

    /// The recording's first frame.
    fn first(&self) -> Option<u64> {
        self.after(0).ok().flatten()
    }

    /// The frame at `t`, harvested: the frames after the one shown are
    /// fed to the collector as they are while they are within the
    /// sparklines' span; anything else is replayed afresh.
    fn load(&mut self, t: u64) -> Result<Harvest> {
        let span = self.spacing.saturating_mul(HISTORY as u64);
        let harvest = if t > self.at && t - self.at <= span {
            self.feed(self.at + 1, t)?
        } else {
            self.rebuild(t)?
        };
        self.at = t;
        if let Some(since) = harvest.recorded.as_ref().and_then(|r| r.since_unix_ns) {
            self.spacing = t.saturating_sub(since);
        }
        Ok(harvest)
    }

    /// A fresh collector fed the frames of the sparklines' span up to
    /// `t`, and at least the frame before it, whatever the gap, for rates.
    fn rebuild(&mut self, t: u64) -> Result<Harvest> {
        self.collector = Collector::of(Recorded::new(&self.dir));
        let span = t.saturating_sub(self.spacing.saturating_mul(HISTORY as u64));
        let from = self.before(t)?.map_or(t, |b| b.min(span));
        self.feed(from, t)
    }

    /// Feeds every frame from `from` to `to` to the collector, one pass
    /// each; the last one's harvest.
    fn feed(&mut self, from: u64, to: u64) -> Result<Harvest> {
        let mut last = None;
        for m in self.history.replay(from, to, &|_| true) {
            let m =
                m.with_context(|| format!("cannot read the recording in {}", self.dir.display()))?;
            self.collector.origin_mut().feed(m);
            last = Some(self.collector.harvest());
        }
        last.with_context(|| {
            format!(
                "the frame of {} in {} could not be read again",
                crate::recording::when(to),
                self.dir.display()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::harvest::{Reading, Series, State};
    use topdeck::{Namespace, Registry, Snapshot};
    use topdeck_history::{Options, Recorder};
    use topdeck_sched::schema;
    use topdeck_sources::Tracker;

    const SEC: u64 = 1_000_000_000;
    /// When the test recording starts: a fixed moment, ns since the epoch.
    const T0: u64 = 1_800_000_000 * SEC;

    /// Every source of `tracker`'s namespace with a snapshot now.
    fn read_all(tracker: &mut Tracker<()>) -> Vec<(Source, Snapshot)> {
        let mut out = Vec::new();
        for source in tracker.look().sources {
            let snap = tracker.open(&source).unwrap().snapshot().unwrap();
            out.push((source, snap));
        }
        out
    }

    fn record(rec: &mut Recorder, at: u64, sources: &[(Source, Snapshot)]) {
        rec.record(at, sources.iter().map(|(s, snap)| (s, snap.clone())))
            .unwrap();
    }

    fn series<'a>(h: &'a Harvest, registry: &str, name: &str) -> &'a Series {
        let r = h
            .registries
            .iter()
            .find(|r| r.registry == registry)
            .unwrap();
        r.series.iter().find(|s| s.meta.name == name).unwrap()
    }

    fn rate(h: &Harvest) -> Option<f64> {
        series(h, "svc", "jobs_total").rate()
    }

    fn moved(m: Moved) -> Harvest {
        match m {
            Moved::To(h) => *h,
            Moved::Stay(why) => panic!("stayed: {why}"),
        }
    }

    /// A service's counter recorded at T0, +1 s, +2 s and +3 min, going
    /// up by 10, 20, 30 and 1800: each frame's rate is over the interval
    /// from the frame before, whatever the host does now.
    #[test]
    fn a_frame_shows_rates_from_the_frame_before_and_keys_move_frame_by_frame() {
        let ns = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let svc = Registry::builder()
            .dir(ns.path())
            .name("svc")
            .build()
            .unwrap();
        let jobs = svc.counter("jobs_total", &[], "Jobs.", "").unwrap();
        let mut tracker = Tracker::<()>::new(Namespace::at(ns.path()), None);
        let mut rec = Recorder::open(store.path(), Options::default()).unwrap();
        for (at, add) in [
            (T0, 10),
            (T0 + SEC, 20),
            (T0 + 2 * SEC, 30),
            (T0 + 180 * SEC, 1800),
        ] {
            jobs.add(add);
            record(&mut rec, at, &read_all(&mut tracker));
        }
        drop(rec);
        let open = |at| {
            let history = History::open(store.path()).unwrap();
            Travel::open(store.path(), history, at).unwrap()
        };
        let (mut travel, h, note) = open(T0 + SEC + SEC / 2);
        assert_eq!(note, None);
        let r = h.recorded.as_ref().unwrap();
        assert_eq!((r.unix_ns, r.since_unix_ns), (T0 + SEC, Some(T0)));
        assert_eq!(rate(&h), Some(20.0));
        // The sparkline holds the frames before, as a live view's would.
        assert_eq!(series(&h, "svc", "jobs_total").history.last(3), [20.0]);
        // Nothing of procfs: the process is known by its source alone.
        let me = Some(std::process::id());
        let p = h.processes.iter().find(|p| p.pid == me).unwrap();
        assert_eq!((p.cpu, p.threads, p.state), (None, None, State::Alive));
        assert!(h.host.is_none());

        let h = moved(travel.step(Step::Forward).unwrap());
        assert_eq!(rate(&h), Some(30.0));
        assert_eq!(
            series(&h, "svc", "jobs_total").history.last(3),
            [20.0, 30.0]
        );
        // A minute on: the frame at +3 min is the next one.
        let h = moved(travel.step(Step::ForwardMinute).unwrap());
        assert_eq!(h.recorded.as_ref().unwrap().unix_ns, T0 + 180 * SEC);
        assert!((rate(&h).unwrap() - 1800.0 / 178.0).abs() < 1e-9);
        assert!(
            matches!(travel.step(Step::Forward).unwrap(), Moved::Stay(w) if w.contains("last"))
        );
        // A minute back from +3 min: the frame at +2 s, replayed afresh.
        let h = moved(travel.step(Step::BackMinute).unwrap());
        assert_eq!(h.recorded.as_ref().unwrap().unix_ns, T0 + 2 * SEC);
        assert_eq!(rate(&h), Some(30.0));
        let h = moved(travel.step(Step::Back).unwrap());
        assert_eq!(rate(&h), Some(20.0));
        // The first frame has none before it: no rate, and no further back.
        let h = moved(travel.step(Step::BackMinute).unwrap());
        let first = series(&h, "svc", "jobs_total");
        assert_eq!(
            first.reading,
            Reading::Counter {
                total: 10,
                rate: None
            }
        );
        assert!(matches!(travel.step(Step::Back).unwrap(), Moved::Stay(w) if w.contains("first")));

        // Long after the last frame: that frame, said.
        let (_, h, note) = open(T0 + 3600 * SEC);
        assert_eq!(h.recorded.unwrap().unix_ns, T0 + 180 * SEC);
        assert!(note.unwrap().contains("nothing recorded between"));
        // Before the first: the span recorded.
        let history = History::open(store.path()).unwrap();
        let e = Travel::open(store.path(), history, T0 - SEC).err().unwrap();
        let e = format!("{e:#}");
        assert!(
            e.contains("nothing was recorded") && e.contains("(4 frames)"),
            "{e}"
        );
    }

    /// The agent's registry as recorded feeds the containers, its verdict
    /// and whom each waited behind; a registry that only posed as the
    /// agent (another owner, as recorded) is counted, never read.
    #[test]
    fn the_recorded_agent_feeds_the_containers_and_a_poser_is_ignored() {
        let ns = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let agent = Registry::builder()
            .dir(ns.path())
            .name(AGENT_REGISTRY)
            .build()
            .unwrap();
        let runq = agent
            .histogram(
                schema::RUNQ_LATENCY.name,
                &[("cgroup", "/web"), ("container", "web")],
                "",
                "seconds",
            )
            .unwrap();
        let behind = agent
            .counter(
                schema::WAIT_BEHIND.name,
                &[("cgroup", "/web"), ("culprit", "/batch")],
                "",
                "nanoseconds",
            )
            .unwrap();
        agent
            .gauge(
                schema::VERDICT.name,
                &[
                    ("cgroup", "/web"),
                    ("culprit", "/batch"),
                    ("kind", "noisy_neighbour"),
                ],
                "",
                "",
            )
            .unwrap()
            .set(1);
        let mut tracker = Tracker::<()>::new(Namespace::at(ns.path()), None);
        let mut rec = Recorder::open(store.path(), Options::default()).unwrap();
        let with_poser = |mut sources: Vec<(Source, Snapshot)>| {
            let (mut poser, snap) = sources[0].clone();
            poser.path = ns.path().join("9-9-9.topdeck");
            poser.uid = Some(trust::reader_uid() + 1);
            poser.pid = Some(9);
            sources.push((poser, snap));
            sources
        };
        record(&mut rec, T0, &with_poser(read_all(&mut tracker)));
        for _ in 0..100 {
            runq.record(0.02);
        }
        behind.add(1_000_000_000);
        record(&mut rec, T0 + SEC, &with_poser(read_all(&mut tracker)));
        drop(rec);
        let history = History::open(store.path()).unwrap();
        let (_, h, _) = Travel::open(store.path(), history, T0 + SEC).unwrap();
        assert_eq!(h.spoofed_agents, 1);
        let s = h.scheduler.as_ref().expect("the agent's view");
        assert_eq!(s.pid, Some(std::process::id()));
        let web = h.containers.iter().find(|c| c.cgroup == "/web").unwrap();
        assert!(web.runq.as_ref().unwrap().p99.unwrap() > 0.01, "{web:?}");
        assert_eq!(web.behind[0].name, "batch");
        assert_eq!(web.verdict.as_ref().unwrap().victim, "/web");
        assert_eq!(web.cpu, None, "the agent published no on-CPU time");
    }
}
