// SPDX-License-Identifier: Apache-2.0
//! The service a view explains: its processes, the cgroup the agent knows
//! it by, and one [`Reading`] of it at a time from a snapshot of its
//! source, its threads' waits and the agent's charges.

use std::collections::BTreeMap;

use serde::Serialize;
use topdeck::{Namespace, Snapshot};
use topdeck_sched::{trust, AgentReading, Hierarchy};

use crate::wait::{self, Level};
use crate::window::Reading;
use topdeck_sources::latencies;

/// Who is explained.
#[derive(Debug, Clone, Serialize)]
pub struct Service {
    /// The process that writes the source.
    pub pid: Option<u32>,
    /// The processes whose threads' waits count: the writer's, or for a
    /// pre-forked server every process of its cgroup.
    pub pids: Vec<u32>,
    /// The cgroup its threads are keyed by, as the agent labels it.
    pub cgroup: Option<String>,
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
        Service {
            pid,
            pids,
            cgroup: pid.and_then(topdeck_procfs::cgroup::cgroup_of),
        }
    }

    /// One reading: `snapshot` is its source's, taken now; `at_secs` the
    /// time of it on any monotonic clock.
    pub fn read(&self, snapshot: &Snapshot, at_secs: f64) -> Reading {
        let tids = wait::threads_of(&self.pids);
        Reading {
            at_secs,
            latencies: latencies(snapshot.iter()),
            threads: wait::sample(&tids, None),
            level: Level::Schedstat,
            cgroup: self.cgroup.clone(),
            culprits: self.culprits(),
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
