// SPDX-License-Identifier: Apache-2.0
//! One look at the host's scheduler for `topdeck sched`: from a running
//! agent if there is one, else from the probe run here for one window, else
//! (saying why) from the coarse fallback; or, for a moment of the past,
//! from the agent's registry as a recording kept it ([`recorded`]). Only
//! a registry that [`crate::trust`] accepts counts as the agent; the
//! others are reported, never read.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;
use topdeck::{Namespace, Snapshot};

use crate::agent::{Agent, AgentConfig};
use crate::cgroupfs::Hierarchy;
use crate::error::{Error, ErrorKind, Result};
use crate::fallback::{self, CoarseView};
use crate::trust::{self, Untrusted};
use crate::view::SchedView;

/// Where the figures came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Observation {
    /// A running `topdeck agent`, read like any registry.
    Agent {
        /// The agent's pid.
        pid: u32,
        /// The window.
        view: SchedView,
    },
    /// The probe, loaded here for one window, with BPF run-time stats on
    /// (verdicts need the history a running agent keeps).
    Probe {
        /// The window.
        view: SchedView,
    },
    /// No eBPF: coarse per-cgroup figures, with the reason.
    Coarse(CoarseView),
}

/// What `topdeck sched` saw: the observation, and the registries named
/// `topdeck-agent` that were ignored because they are not the agent's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Where the figures came from, and the figures.
    #[serde(flatten)]
    pub observation: Observation,
    /// How many registries posed as the agent and were ignored.
    pub spoofed_agents: usize,
    /// Why each was ignored, one sentence each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub untrusted_agents: Vec<Untrusted>,
}

/// The trusted live agent registry in `dir` (default: the host's
/// namespace) opened for reading, with its pid; and the impostors.
fn snapshot_of(dir: Option<&PathBuf>) -> (Option<(u32, topdeck::RegistryReader)>, Vec<Untrusted>) {
    let ns = dir.map_or_else(Namespace::host, Namespace::at);
    let entries = ns.list().entries;
    let (agent, untrusted) = trust::pick_agent(&entries);
    let reader = agent.and_then(|e| e.open().ok().map(|r| (e.pid, r)));
    (reader, untrusted)
}

fn snap(r: &mut topdeck::RegistryReader) -> Result<Snapshot> {
    r.snapshot()
        .map_err(|e| Error::with_source(ErrorKind::Registry, "reading the agent's registry", e))
}

/// Looks at the scheduler for `window`.
pub fn observe(window: Duration) -> Result<Report> {
    let (agent, untrusted) = snapshot_of(None);
    let report = |observation| Report {
        observation,
        spoofed_agents: untrusted.len(),
        untrusted_agents: untrusted.clone(),
    };
    if let Some((pid, mut reader)) = agent {
        let before = snap(&mut reader)?;
        std::thread::sleep(window);
        // The agent may have rotated to a fresh file in the window: its
        // values are carried over, so the newest file of the same agent is
        // the end of the window (the old one stopped changing).
        let after = match snapshot_of(None).0 {
            Some((p, mut newer)) if p == pid && newer.path() != reader.path() => snap(&mut newer)?,
            _ => snap(&mut reader)?,
        };
        return Ok(report(Observation::Agent {
            pid,
            view: SchedView::between(Some(&before), &after),
        }));
    }
    let hierarchy = Hierarchy::detect()?;
    let why = match crate::probe::unavailable() {
        Some(e) => e.to_string(),
        None => match probe_window(window) {
            Ok(view) => return Ok(report(Observation::Probe { view })),
            Err(e) => format!("{e:#}"),
        },
    };
    Ok(report(Observation::Coarse(fallback::observe(
        &hierarchy, window, why,
    ))))
}

/// A registry named `topdeck-agent` as a recording kept it at one moment.
#[derive(Debug, Clone, Copy)]
pub struct RecordedAgent<'a> {
    /// What the recording kept of its file and writer.
    pub facts: &'a trust::Recorded,
    /// When it was created, ns since the Unix epoch: the newest is read.
    pub created_unix_ns: Option<u64>,
    /// Its values then.
    pub snapshot: &'a Snapshot,
}

/// The trusted live agent among `found`, the `topdeck-agent` registries
/// of one recorded moment (root's before the reader's own, the newest
/// first), and the impostors: what [`recorded`] reads, for other views of
/// a recording to read the same agent.
pub fn pick_recorded<'a>(
    found: &[RecordedAgent<'a>],
    reader_uid: u32,
) -> (Option<RecordedAgent<'a>>, Vec<Untrusted>) {
    let mut trusted = Vec::new();
    let mut untrusted = Vec::new();
    for a in found.iter().filter(|a| a.facts.alive) {
        match trust::judge_recorded(a.facts, reader_uid) {
            Ok(t) => trusted.push((t.owner != 0, std::cmp::Reverse(a.created_unix_ns), *a)),
            Err(u) => untrusted.push(u),
        }
    }
    trusted.sort_by_key(|(not_root, newest, _)| (*not_root, *newest));
    (trusted.first().map(|(_, _, a)| *a), untrusted)
}

/// The scheduler over a recorded window, as [`observe`] reads a running
/// agent: the trusted agent's registry at the window's end (among `end`,
/// the `topdeck-agent` registries recorded then) against the same
/// agent's at its start (among `start`; its newest file, should it have
/// rotated). Registries that only posed as the agent are reported, never
/// read. An error of kind [`ErrorKind::NotRecorded`] when no trusted
/// agent was recorded at the end, or that agent not yet at the start.
pub fn recorded(start: &[RecordedAgent], end: &[RecordedAgent]) -> Result<Report> {
    let reader = trust::reader_uid();
    let (agent, untrusted) = pick_recorded(end, reader);
    let Some(agent) = agent else {
        let posers = match untrusted.len() {
            0 => String::new(),
            1 => format!(
                " (a registry named {} only posed as it)",
                crate::REGISTRY_NAME
            ),
            n => format!(
                " ({n} registries named {} only posed as it)",
                crate::REGISTRY_NAME
            ),
        };
        return Err(Error::new(
            ErrorKind::NotRecorded,
            format!("no running scheduler agent was recorded{posers}"),
        ));
    };
    let pid = agent.facts.pid.unwrap_or(0);
    let same = |a: &&RecordedAgent| {
        a.facts.alive
            && a.facts.pid == agent.facts.pid
            && a.facts.uid == agent.facts.uid
            && trust::judge_recorded(a.facts, reader).is_ok()
    };
    let before = start
        .iter()
        .filter(same)
        .max_by_key(|a| (a.facts.path == agent.facts.path, a.created_unix_ns))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::NotRecorded,
                format!(
                    "the scheduler agent, pid {pid}, was not yet recorded at the window's start"
                ),
            )
        })?;
    Ok(Report {
        observation: Observation::Agent {
            pid,
            view: SchedView::between(Some(before.snapshot), agent.snapshot),
        },
        spoofed_agents: untrusted.len(),
        untrusted_agents: untrusted,
    })
}

/// Runs an agent here for one window, publishing into a private directory.
fn probe_window(window: Duration) -> Result<SchedView> {
    let dir = tempfile::tempdir()
        .map_err(|e| Error::with_source(ErrorKind::Io, "creating a temporary directory", e))?;
    let mut agent = Agent::start(AgentConfig {
        dir: Some(dir.path().to_path_buf()),
        interval: window,
        cost_every: Some(window),
        // No pin: a running agent owns the default one.
        thread_waits: None,
        ..AgentConfig::default()
    })?;
    agent.tick()?;
    let (_, mut reader) = snapshot_of(Some(&dir.path().to_path_buf()))
        .0
        .ok_or_else(|| Error::new(ErrorKind::Registry, "the agent's registry did not appear"))?;
    let before = snap(&mut reader)?;
    // One window. BPF run-time stats were turned on by the first tick and
    // are read (and turned off) by the second: the probe's cost is measured
    // over this window, which makes it a little dearer than usual.
    let stop = AtomicBool::new(false);
    agent.run(&stop, |_| {
        stop.store(true, std::sync::atomic::Ordering::Relaxed)
    })?;
    let after = snap(&mut reader)?;
    Ok(SchedView::between(Some(&before), &after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;

    /// A registry of this process shaped like the agent's, with one
    /// cgroup's run-queue waits.
    fn agent(dir: &std::path::Path) -> (topdeck::Registry, topdeck::Histogram) {
        let r = topdeck::Registry::builder()
            .dir(dir)
            .name(crate::REGISTRY_NAME)
            .build()
            .unwrap();
        let h = r
            .histogram(
                schema::RUNQ_LATENCY.name,
                &[("cgroup", "/web"), ("container", "web")],
                "",
                "seconds",
            )
            .unwrap();
        (r, h)
    }

    fn facts(uid: u32, pid: u32, path: &str) -> trust::Recorded {
        trust::Recorded {
            path: path.into(),
            uid: Some(uid),
            pid: Some(pid),
            alive: true,
        }
    }

    #[test]
    fn a_recorded_window_is_the_trusted_agents_difference_and_posers_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (r, h) = agent(dir.path());
        let mut reader = topdeck::RegistryReader::open(r.path()).unwrap();
        h.record(0.5);
        let before = reader.snapshot().unwrap();
        for _ in 0..10 {
            h.record(0.002);
        }
        let after = reader.snapshot().unwrap();
        let me = trust::reader_uid();
        let real = facts(me, 7, "/dev/shm/topdeck-0/7-1-1.topdeck");
        let poser = facts(me + 1, 9, "/dev/shm/topdeck-x/9-1-1.topdeck");
        let at = |f, s| RecordedAgent {
            facts: f,
            created_unix_ns: Some(1),
            snapshot: s,
        };
        let report = recorded(
            &[at(&real, &before), at(&poser, &after)],
            &[at(&poser, &after), at(&real, &after)],
        )
        .unwrap();
        assert_eq!(report.spoofed_agents, 1);
        let Observation::Agent { pid, view } = report.observation else {
            panic!("{report:?}");
        };
        assert_eq!(pid, 7);
        assert_eq!(view.cgroups[0].samples, 10, "the window's waits only");
        assert!(view.cgroups[0].p99_seconds.unwrap() < 0.01);

        let e = recorded(&[], &[at(&poser, &after)]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotRecorded);
        assert!(
            e.to_string()
                .contains("a registry named topdeck-agent only posed"),
            "{e}"
        );
        let e = recorded(&[at(&poser, &before)], &[at(&real, &after)]).unwrap_err();
        assert!(e.to_string().contains("pid 7, was not yet recorded"), "{e}");
    }
}
