// SPDX-License-Identifier: Apache-2.0
//! The service a view explains: its processes, the cgroup the agent knows
//! it by, and one [`Reading`] of it at a time from a snapshot of its
//! source, its threads' waits and the agent's charges: read live
//! ([`Service::of`], [`Service::read`]), or from a recording
//! ([`Service::recorded`], [`Service::read_recorded`]), which keeps the
//! source and the agent's registry but no thread's wait.

use std::collections::BTreeMap;

use serde::Serialize;
use topdeck::waits::State;
use topdeck::{Namespace, Snapshot, ThreadWaits};
use topdeck_sched::{container_name, trust, AgentReading, Hierarchy};

use crate::wait::{self, Level, ThreadSample};
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
    /// Of a recorded service, what the recording names its cgroup by.
    #[serde(skip)]
    recorded: Option<Recorded>,
}

/// What a recording keeps of a service's cgroup: the name, not the path.
struct Recorded {
    /// The container its process ran in, as the recorded source names it
    /// (`topdeck_procfs::cgroup::container_name` of the path the agent
    /// keys it by); `None` for the root cgroup.
    container: Option<String>,
    /// Why the last reading named nobody, the agent's registry given.
    nobody: Option<String>,
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
            recorded: None,
        }
    }

    /// The service of a recorded source written by `pid`, in the cgroup
    /// the recording names `container` (`None`: the root cgroup). Its
    /// cgroup's path is known once the recorded agent names it.
    ///
    /// ```
    /// let s = topdeck_explain::Service::recorded(Some(7), Some("web.service"));
    /// assert_eq!((s.pids.as_slice(), s.cgroup.as_deref()), (&[7][..], None));
    /// ```
    pub fn recorded(pid: Option<u32>, container: Option<&str>) -> Self {
        Service {
            pid,
            pids: pid.into_iter().collect(),
            cgroup: None,
            waits: None,
            waits_problem: None,
            recorded: Some(Recorded {
                container: container.map(str::to_owned),
                nobody: None,
            }),
        }
    }

    /// One reading of a recorded service: `snapshot` is its source's as
    /// recorded at one frame, `agent` the trusted agent's registry at the
    /// same frame (`None` when none was recorded), `at_secs` the frame's
    /// time in seconds. A recording keeps no thread's wait: the reading's
    /// level is [`Level::Unrecorded`], and the culprits are the agent's
    /// charges for the service's cgroup.
    pub fn read_recorded(
        &mut self,
        snapshot: &Snapshot,
        agent: Option<&Snapshot>,
        at_secs: f64,
    ) -> Reading {
        let culprits = agent.and_then(|a| self.recorded_culprits(&AgentReading::parse(a)));
        Reading {
            at_secs,
            latencies: latencies(snapshot.iter()),
            threads: ThreadSample::default(),
            level: Level::Unrecorded,
            cgroup: self.cgroup.clone(),
            culprits,
        }
    }

    /// The agent's charges for the recorded service's cgroup: the one
    /// cgroup it keys by a path of the recorded container's name (the
    /// root, `/`, for none). A cgroup it has not charged yet has none; a
    /// name that several of its cgroups have names nobody.
    fn recorded_culprits(&mut self, agent: &AgentReading) -> Option<BTreeMap<String, u64>> {
        let recorded = self.recorded.as_mut()?;
        if self.pid.is_none() {
            recorded.nobody = Some("its writer is unknown, and so its cgroup".into());
            return None;
        }
        let keys: Vec<&String> = agent
            .cgroups
            .keys()
            .filter(|path| match &recorded.container {
                None => *path == "/",
                Some(c) => *path != "/" && container_name(path) == *c,
            })
            .collect();
        match keys.as_slice() {
            [] => {
                recorded.nobody = None;
                Some(BTreeMap::new())
            }
            [path] => {
                recorded.nobody = None;
                self.cgroup = Some(path.to_string());
                Some(agent.cgroups[*path].wait_behind_ns.clone())
            }
            several => {
                let paths: Vec<&str> = several.iter().map(|p| p.as_str()).collect();
                recorded.nobody = Some(format!(
                    "the recording names its cgroup {:?}, which names {} of the agent's: {}",
                    recorded.container.as_deref().unwrap_or("/"),
                    paths.len(),
                    paths.join(", ")
                ));
                None
            }
        }
    }

    /// One reading: `snapshot` is its source's, taken now; `at_secs` the
    /// time of it on any monotonic clock.
    pub fn read(&mut self, snapshot: &Snapshot, at_secs: f64) -> Reading {
        debug_assert!(
            self.recorded.is_none(),
            "a recorded service is read_recorded"
        );
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
        if let Some(r) = &self.recorded {
            return r.nobody.clone().unwrap_or_else(|| {
                "no topdeck agent was recorded: `topdeck agent` must run, as root, while `topdeck record` does".into()
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck_sched::schema::WAIT_BEHIND;

    /// A registry shaped like the agent's: the wait it charged `cgroup`
    /// behind each culprit, ns.
    fn agent(charges: &[(&str, &str, u64)]) -> Snapshot {
        let dir = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(dir.path())
            .name("topdeck-agent")
            .build()
            .unwrap();
        for (cgroup, culprit, ns) in charges {
            r.counter(
                WAIT_BEHIND.name,
                &[("cgroup", cgroup), ("culprit", culprit)],
                "",
                "nanoseconds",
            )
            .unwrap()
            .add(*ns);
        }
        topdeck::RegistryReader::open(r.path())
            .unwrap()
            .snapshot()
            .unwrap()
    }

    /// A service's registry with one latency histogram and no companions.
    fn service(requests: usize) -> Snapshot {
        let dir = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(dir.path())
            .build()
            .unwrap();
        let h = r.histogram("req_seconds", &[], "", "seconds").unwrap();
        for _ in 0..requests {
            h.record(0.002);
        }
        topdeck::RegistryReader::open(r.path())
            .unwrap()
            .snapshot()
            .unwrap()
    }

    #[test]
    fn a_recorded_service_is_charged_by_the_agents_cgroup_of_its_containers_name() {
        let mut s = Service::recorded(Some(7), Some("web.service"));
        let charges = |hog| {
            agent(&[
                ("/system.slice/web.service", "/batch", hog),
                ("/system.slice/web.service", "system", 10),
                ("/system.slice/db.service", "/batch", 999),
            ])
        };
        let r0 = s.read_recorded(&service(10), Some(&charges(100)), 0.0);
        let r1 = s.read_recorded(&service(30), Some(&charges(400)), 1.0);
        assert_eq!(s.cgroup.as_deref(), Some("/system.slice/web.service"));
        assert_eq!(
            (r1.level, r1.cgroup.as_deref()),
            (Level::Unrecorded, s.cgroup.as_deref())
        );
        let w = crate::Explainer::default().window(&r0, &r1);
        // The threads' wait is unknown, not zero; the agent's charges name /batch.
        assert_eq!((w.wait, w.threads), (None, None));
        assert_eq!(w.culprits.len(), 1, "{:?}", w.culprits);
        assert_eq!(
            (w.culprits[0].who.as_str(), w.culprits[0].share),
            ("/batch", 1.0)
        );
        let row = &w.rows[0];
        assert_eq!((row.requests, row.per_request), (20, false));
        assert_eq!((row.wait_per_request, row.share), (None, None));
        assert_eq!(row.finding, crate::Finding::Unknown, "{row:?}");
        assert!(
            row.verdict.contains("not recorded") && row.verdict.contains("to /batch"),
            "{}",
            row.verdict
        );
    }

    #[test]
    fn a_recorded_service_without_the_agent_or_of_an_ambiguous_name_names_nobody() {
        let mut s = Service::recorded(Some(7), Some("web"));
        let r = s.read_recorded(&service(1), None, 0.0);
        assert_eq!(r.culprits, None);
        assert!(s
            .why_nobody_named()
            .contains("no topdeck agent was recorded"));
        let two = agent(&[("/a/web", "/x", 1), ("/b/web", "/y", 1)]);
        assert_eq!(s.read_recorded(&service(1), Some(&two), 0.0).culprits, None);
        let why = s.why_nobody_named();
        assert!(why.contains("/a/web, /b/web"), "{why}");
        // The root cgroup is the agent's `/`.
        let mut root = Service::recorded(Some(7), None);
        let one = agent(&[("/", "/x", 5), ("/web", "/", 3)]);
        let r = root.read_recorded(&service(1), Some(&one), 0.0);
        assert_eq!(r.culprits, Some(BTreeMap::from([("/x".to_string(), 5)])));
        assert_eq!(root.cgroup.as_deref(), Some("/"));
    }
}
