// SPDX-License-Identifier: Apache-2.0
//! One look at the host's scheduler for `topdeck sched`: from a running
//! agent if there is one, else from the probe run here for one window, else
//! (saying why) from the coarse fallback. Only a registry that
//! [`crate::trust`] accepts counts as a running agent; the others are
//! reported, never read.

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
