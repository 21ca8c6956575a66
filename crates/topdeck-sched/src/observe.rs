// SPDX-License-Identifier: Apache-2.0
//! One look at the host's scheduler for `topdeck sched`: from a running
//! agent if there is one, else from the probe run here for one window, else
//! (saying why) from the coarse fallback.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;
use topdeck::{Liveness, Namespace, Snapshot};

use crate::agent::{Agent, AgentConfig, REGISTRY_NAME};
use crate::cgroupfs::Hierarchy;
use crate::error::{Error, ErrorKind, Result};
use crate::fallback::{self, CoarseView};
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

fn snapshot_of(dir: Option<&PathBuf>) -> Option<(u32, topdeck::RegistryReader)> {
    let ns = dir.map_or_else(Namespace::host, Namespace::at);
    let mut entries: Vec<_> = ns
        .list()
        .entries
        .into_iter()
        .filter(|e| e.registry_name == REGISTRY_NAME && e.liveness == Liveness::Alive)
        .collect();
    entries.sort_by_key(|e| std::cmp::Reverse(e.created_unix_ns));
    let e = entries.into_iter().next()?;
    e.open().ok().map(|r| (e.pid, r))
}

fn snap(r: &mut topdeck::RegistryReader) -> Result<Snapshot> {
    r.snapshot()
        .map_err(|e| Error::with_source(ErrorKind::Registry, "reading the agent's registry", e))
}

/// Looks at the scheduler for `window`.
pub fn observe(window: Duration) -> Result<Observation> {
    if let Some((pid, mut reader)) = snapshot_of(None) {
        let before = snap(&mut reader)?;
        std::thread::sleep(window);
        let after = snap(&mut reader)?;
        return Ok(Observation::Agent {
            pid,
            view: SchedView::between(Some(&before), &after),
        });
    }
    let hierarchy = Hierarchy::detect()?;
    let why = match crate::probe::unavailable() {
        Some(e) => e.to_string(),
        None => match probe_window(window) {
            Ok(view) => return Ok(Observation::Probe { view }),
            Err(e) => format!("{e:#}"),
        },
    };
    Ok(Observation::Coarse(fallback::observe(
        &hierarchy, window, why,
    )))
}

/// Runs an agent here for one window, publishing into a private directory.
fn probe_window(window: Duration) -> Result<SchedView> {
    let dir = tempfile::tempdir()
        .map_err(|e| Error::with_source(ErrorKind::Io, "creating a temporary directory", e))?;
    let mut agent = Agent::start(AgentConfig {
        dir: Some(dir.path().to_path_buf()),
        interval: window,
        cost_every: Some(window),
        ..AgentConfig::default()
    })?;
    agent.tick()?;
    let (_, mut reader) = snapshot_of(Some(&dir.path().to_path_buf()))
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
