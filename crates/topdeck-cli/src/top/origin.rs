// SPDX-License-Identifier: Apache-2.0
//! Where the looks come from: the one seam between the live view and the
//! view of a recording. An [`Origin`] gives each pass its sources, each
//! with a snapshot, and says what else of the host it can tell; the
//! collector (`collect`) diffs the snapshots, joins the agent's figures
//! and takes the census the same way for both, so every panel shows the
//! past as it shows the present.
//!
//! [`Live`] reads the host as it runs: sources through a [`Tracker`],
//! the host line from procfs, and it lets the census read processes and
//! cgroups there. `super::past::Recorded` gives recorded moments, one a
//! pass, and nothing the recorder did not keep.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use topdeck::{Liveness, Namespace, Snapshot};
use topdeck_procfs::host::Host;
use topdeck_sched::trust::{self, Trusted, Untrusted};
use topdeck_sources::{Portholes, Source, Tracker};

use super::agent::AGENT_REGISTRY;
use super::harvest::{HostLine, Recorded};

/// Where a pass's sources come from.
pub trait Origin {
    /// One look: every source with a snapshot of it, and what could not
    /// be read at all. `gone` is told each path an earlier look gave that
    /// now holds no source, or another one: what was kept of it is
    /// handed to a successor or dropped.
    fn look(&mut self, gone: &mut dyn FnMut(&Path)) -> Look;

    /// The host at a glance, as of the last look; `None` when this origin
    /// cannot tell.
    fn host(&mut self) -> Option<HostLine>;

    /// Whether the census may read processes and cgroups from procfs and
    /// cgroupfs: only when they are what is looked at, the host now.
    fn procfs(&self) -> bool;
}

/// What one [`Origin::look`] found.
#[derive(Debug)]
pub struct Look {
    /// When, ns on the origin's own clock: what rates are measured on.
    pub at_ns: u64,
    /// When, on the wall clock.
    pub taken: SystemTime,
    /// The namespace directories read.
    pub dirs: Vec<String>,
    /// Every source found, in namespace order.
    pub sources: Vec<Found>,
    /// What could not be read at all: its path (`-` when unknown) and why.
    pub errors: Vec<(String, String)>,
    /// For a recorded moment: which one, and what it lacks.
    pub recorded: Option<Recorded>,
}

/// One source of a look.
#[derive(Debug)]
pub struct Found {
    /// The source, as the look found it.
    pub source: Source,
    /// A snapshot of it, or why it could not be taken.
    pub snapshot: Result<Snapshot, String>,
    /// For a registry named `topdeck-agent`: whether it is the agent's.
    pub agent: Option<Result<Trusted, Untrusted>>,
}

/// The host as it runs.
pub struct Live {
    tracker: Tracker<()>,
    /// The origin of the look clock.
    started: Instant,
    /// The host as the last look read it, for CPU use over the interval.
    host: Option<Host>,
    /// Dead writers' registries as read once, by path, with the file's
    /// identity: a dead writer's file no longer changes, so it is neither
    /// copied again at every pass nor kept mapped.
    dead: HashMap<PathBuf, ((u64, u64), Snapshot)>,
}

impl Live {
    /// The sources of `ns` and other runtimes' `portholes`.
    pub fn new(ns: Namespace, portholes: Option<Portholes>) -> Self {
        Self {
            tracker: Tracker::new(ns, portholes),
            started: Instant::now(),
            host: None,
            dead: HashMap::new(),
        }
    }
}

impl Origin for Live {
    fn look(&mut self, gone: &mut dyn FnMut(&Path)) -> Look {
        let look = self.tracker.look_with(|path, _| gone(&path));
        let mut sources = Vec::with_capacity(look.sources.len());
        let mut errors = Vec::with_capacity(look.errors.len());
        // Those no longer found are forgotten with this look.
        let mut was_dead = std::mem::take(&mut self.dead);
        for source in look.sources {
            let dead = (source.liveness == Liveness::Dead)
                .then(|| source.registry_entry().map(|e| e.file_id()))
                .flatten();
            let kept = match (dead, was_dead.remove(&source.path)) {
                (Some(id), Some((was, snap))) if was == id => Some(snap),
                // Another file at that path: the one kept is gone, as the
                // tracker says of the sources it follows.
                (_, Some(_)) => {
                    gone(&source.path);
                    None
                }
                _ => None,
            };
            let snapshot = match kept {
                Some(snap) => Ok(snap),
                None => match self.tracker.open(&source) {
                    Ok(t) => t.snapshot().map_err(|e| e.to_string()),
                    Err(e) => {
                        errors.push((source.path.display().to_string(), e.to_string()));
                        continue;
                    }
                },
            };
            if let (Some(id), Ok(snap)) = (dead, &snapshot) {
                self.tracker.forget(&source.path);
                self.dead.insert(source.path.clone(), (id, snap.clone()));
            }
            // Looked at every pass: a file's owner and writer can change
            // between passes, and the check is a few stat calls.
            let agent = match (source.registry.as_deref(), source.registry_entry()) {
                (Some(AGENT_REGISTRY), Some(entry)) => Some(trust::verify_agent(entry)),
                _ => None,
            };
            sources.push(Found {
                source,
                snapshot,
                agent,
            });
        }
        for path in was_dead.keys() {
            gone(path);
        }
        for e in &look.errors {
            let path = e
                .path()
                .map_or_else(|| "-".into(), |p| p.display().to_string());
            errors.push((path, e.to_string()));
        }
        Look {
            at_ns: self.started.elapsed().as_nanos() as u64,
            taken: SystemTime::now(),
            dirs: self
                .tracker
                .namespace()
                .dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
            sources,
            errors,
            recorded: None,
        }
    }

    fn host(&mut self) -> Option<HostLine> {
        let host = Host::read();
        let cpu_busy = self
            .host
            .as_ref()
            .and_then(|before| host.cpu_busy_since(before));
        let line = HostLine::of(&host, cpu_busy);
        self.host = Some(host);
        Some(line)
    }

    fn procfs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead writer's registry is copied once, not at every pass, and no
    /// reader of it is kept: 100,000 dead files cost `top` every pass.
    #[test]
    fn a_dead_writers_registry_is_read_once_and_not_kept_open() {
        let dir = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(dir.path())
            .name("svc")
            .build()
            .unwrap();
        r.counter("jobs_total", &[], "Jobs.", "").unwrap().add(3);
        // A copy is a file no writer holds: dead.
        let copy = dir.path().join("1-1-0.topdeck");
        std::fs::copy(r.path(), &copy).unwrap();
        let mut live = Live::new(Namespace::at(dir.path()), None);
        for pass in 0..3 {
            let look = live.look(&mut |_| {});
            let found = look
                .sources
                .iter()
                .find(|f| f.source.path == copy)
                .unwrap_or_else(|| panic!("pass {pass}: the dead copy is listed: {look:?}"));
            assert_eq!(found.source.liveness, Liveness::Dead);
            let snap = found.snapshot.as_ref().unwrap();
            assert_eq!(
                snap.get("jobs_total", &[]),
                Some(&topdeck::Value::Counter(3))
            );
            assert_eq!(
                live.tracker.len(),
                1,
                "pass {pass}: only the live one is kept open"
            );
        }
    }
}
