// SPDX-License-Identifier: Apache-2.0
//! The scheduler agent's registry, read generically from its metric names:
//! [`scheduler`] turns the registries of one pass into the scheduler
//! panel's [`SchedulerHarvest`]. Kept apart, behind that one function, so
//! that a typed reader of the agent's registry can replace it whole.

use super::harvest::{ContainerRunq, Reading, RegistryHarvest, SchedulerHarvest, State, Verdict};

/// The registry name under which the scheduler agent publishes.
pub const AGENT_REGISTRY: &str = "topdeck-agent";
/// Run-queue latency per container, a histogram labelled `cgroup`, `container`.
pub const RUNQ_METRIC: &str = "topdeck_runq_latency_seconds";
/// A scheduler verdict, a gauge labelled `cgroup`, `culprit`, `kind`; 1 while it holds.
pub const VERDICT_METRIC: &str = "topdeck_sched_verdict";

/// The agent's view from the registries of one pass: the live trusted
/// `topdeck-agent` registry if there is one (root's before the reader's
/// own), else a dead one; `None` when there is no such registry.
pub fn scheduler(registries: &[RegistryHarvest]) -> Option<SchedulerHarvest> {
    let agent = registries
        .iter()
        .filter(|r| r.registry == AGENT_REGISTRY && r.state != State::Broken)
        .filter_map(|r| r.agent_owner.map(|owner| (r, owner)))
        .min_by_key(|(r, owner)| (r.state != State::Alive, *owner != 0))
        .map(|(r, _)| r)?;
    let mut view = SchedulerHarvest {
        pid: agent.pid,
        state: Some(agent.state),
        ..SchedulerHarvest::default()
    };
    for s in &agent.series {
        match (s.meta.name.as_str(), &s.reading) {
            (RUNQ_METRIC, Reading::Histogram { rate, p50, p99, .. }) => {
                view.containers.push(ContainerRunq {
                    container: s.label("container").to_owned(),
                    cgroup: s.label("cgroup").to_owned(),
                    rate: *rate,
                    p50: *p50,
                    p99: *p99,
                    history: s.history.clone(),
                });
            }
            (VERDICT_METRIC, Reading::Gauge { value }) if *value == 1.0 => {
                view.verdicts.push(Verdict {
                    cgroup: s.label("cgroup").to_owned(),
                    culprit: s.label("culprit").to_owned(),
                    kind: s.label("kind").to_owned(),
                });
            }
            _ => {}
        }
    }
    // Worst first; containers with nothing observed last, then by name.
    view.containers.sort_by(|a, b| {
        let (pa, pb) = (a.p99.unwrap_or(-1.0), b.p99.unwrap_or(-1.0));
        pb.total_cmp(&pa)
            .then_with(|| a.container.cmp(&b.container))
    });
    Some(view)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use topdeck_sched::trust;

    use super::*;
    use crate::top::harvest::{History, Meta, Series};

    #[test]
    fn only_a_trusted_agent_registry_feeds_the_scheduler_view_root_first() {
        let agent = |pid, owner: Option<u32>, untrusted: bool, culprit: &str| {
            let mut r = crate::top::harvest::tests::registry(pid, "topdeck", vec![]);
            r.registry = AGENT_REGISTRY.into();
            r.agent_owner = owner;
            r.untrusted = untrusted.then(|| {
                let mut f = trust_facts();
                f.path = r.path.clone().into();
                trust::judge(&f, 0).unwrap_err()
            });
            r.series.push(Series {
                meta: Arc::new(Meta {
                    name: VERDICT_METRIC.into(),
                    labels: vec![
                        ("cgroup".into(), "/web".into()),
                        ("culprit".into(), culprit.into()),
                        ("kind".into(), "noisy_neighbour".into()),
                    ],
                    unit: String::new(),
                }),
                reading: Reading::Gauge { value: 1.0 },
                history: History::default(),
            });
            r
        };
        let spoof = agent(1, None, true, "/fabricated");
        let own = agent(2, Some(1001), false, "/own");
        let root = agent(3, Some(0), false, "/real");
        assert_eq!(scheduler(std::slice::from_ref(&spoof)), None);
        let view = scheduler(&[spoof.clone(), own.clone()]).unwrap();
        assert_eq!(view.pid, Some(2));
        let view = scheduler(&[spoof, own, root]).unwrap();
        assert_eq!(view.pid, Some(3), "root's agent before the reader's own");
        assert_eq!(view.verdicts[0].culprit, "/real");
    }

    /// Facts of a registry owned by uid 1001: untrusted by root.
    fn trust_facts() -> trust::Facts {
        let n = |kind, uid, mode| trust::Node { kind, uid, mode };
        trust::Facts {
            path: "/dev/shm/topdeck-1001/1-1-1.topdeck".into(),
            file: Some(n(trust::Kind::File, 1001, 0o644)),
            dir: "/dev/shm/topdeck-1001".into(),
            dir_node: Some(n(trust::Kind::Dir, 1001, 0o755)),
            ancestors: Some(vec![]),
            alive: true,
            pid: 1,
            start_ticks: 1,
            process: None,
        }
    }
}
