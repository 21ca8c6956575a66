// SPDX-License-Identifier: Apache-2.0
//! The service a view explains: its processes, the cgroup the agent knows
//! it by, and one [`Reading`] of it at a time from a snapshot of its
//! source, its threads' waits and the agent's charges.

use std::collections::BTreeMap;

use serde::Serialize;
use topdeck::waits::State;
use topdeck::{Namespace, Snapshot, ThreadWaits};
use topdeck_sched::{trust, AgentReading, Hierarchy};

use crate::wait::{self, Level};
use crate::window::Reading;
use topdeck_sources::latencies;

/// Who is explained.
#[derive(Serialize)]
pub struct Service {
    /// The process that writes the source.
    pub pid: Option<u32>,
    /// The processes whose threads' waits count: the writer's, or for a
    /// pre-forked server every process of its cgroup.
    pub pids: Vec<u32>,
    /// The cgroup its threads are keyed by, as the agent labels it.
    pub cgroup: Option<String>,
    /// The agent's thread-waits array (`TOPDECK_THREAD_WAITS`, else the
    /// default pin), opened again when its agent has gone.
    #[serde(skip)]
    waits: Option<ThreadWaits>,
    /// Why the array could not be used, when one is pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_problem: Option<String>,
}

impl Service {
    /// The service of the source written by `pid`; `whole_cgroup` for a
    /// source written by a pre-forked server's workers (prometheus_client's
    /// multiprocess directory), which share their cgroup.
    ///
    /// ```
    /// let me = std::process::id();
    /// let s = topdeck_explain::Service::of(Some(me), false);
    /// assert_eq!(s.pids, [me]);
    /// ```
    pub fn of(pid: Option<u32>, whole_cgroup: bool) -> Self {
        let pids = match (pid, whole_cgroup) {
            (Some(p), true) => wait::cgroup_mates(Hierarchy::detect().ok().as_ref(), p),
            (Some(p), false) => vec![p],
            (None, _) => vec![],
        };
        let (waits, waits_problem) = match ThreadWaits::try_from_env() {
            Ok(w) => (w, None),
            Err(e) => (None, Some(e.to_string())),
        };
        Service {
            pid,
            pids,
            cgroup: pid.and_then(topdeck_procfs::cgroup::cgroup_of),
            waits,
            waits_problem,
        }
    }

    /// One reading: `snapshot` is its source's, taken now; `at_secs` the
    /// time of it on any monotonic clock.
    pub fn read(&mut self, snapshot: &Snapshot, at_secs: f64) -> Reading {
        let tids = wait::threads_of(&self.pids);
        let live = self.live_waits();
        let (threads, level) = match live {
            Some(w) => (
                wait::sample(&tids, Some(&|tid| w.slot(tid))),
                Level::ThreadWaits,
            ),
            None => (wait::sample(&tids, None), Level::Schedstat),
        };
        Reading {
            at_secs,
            latencies: latencies(snapshot.iter()),
            threads,
            level,
            cgroup: self.cgroup.clone(),
            culprits: self.culprits(),
        }
    }

    /// The array while its agent runs; a gone one is looked for again
    /// (a restarted agent pins a new one).
    fn live_waits(&mut self) -> Option<&ThreadWaits> {
        if self
            .waits
            .as_ref()
            .is_some_and(|w| w.state() == State::Gone)
        {
            self.waits = ThreadWaits::from_env();
        }
        self.waits.as_ref().filter(|w| w.state() == State::Live)
    }

    /// Why no reading names who held the CPU, for views to say.
    pub fn why_nobody_named(&self) -> String {
        if self.cgroup.is_none() {
            return "its process's cgroup is unknown".into();
        }
        match self.waits.as_ref().filter(|w| w.state() == State::Live) {
            // The array says an agent runs: its registry is what is missing.
            Some(w) => format!(
                "the topdeck agent (pid {}) runs, but this user cannot read its registry: run explain as root",
                w.agent_pid()
            ),
            None => "no topdeck agent runs: start `topdeck agent` as root".into(),
        }
    }

    /// The wait the trusted agent charged to each culprit of the
    /// service's cgroup, cumulative; `None` without an agent or a cgroup.
    fn culprits(&self) -> Option<BTreeMap<String, u64>> {
        let cgroup = self.cgroup.as_deref()?;
        let entries = Namespace::host().list().entries;
        let (agent, _) = trust::pick_agent(&entries);
        let snap = agent?.open().ok()?.snapshot().ok()?;
        let reading = AgentReading::parse(&snap);
        Some(
            reading
                .cgroups
                .get(cgroup)
                .map(|c| c.wait_behind_ns.clone())
                .unwrap_or_default(),
        )
    }
}
