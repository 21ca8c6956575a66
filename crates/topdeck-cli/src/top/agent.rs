// SPDX-License-Identifier: Apache-2.0
//! The scheduler panel from the registries of one pass: [`scheduler`]
//! picks the agent's registry; its verdicts come from the agent's typed
//! reader ([`topdeck_sched::AgentReading`], read when the registry was), its
//! cgroups' run-queue rates and percentiles, on-CPU time and whom they
//! waited behind from the series the collector diffed like any other
//! registry's.

use topdeck_sched::schema::{self, key};

use std::collections::HashMap;

use super::harvest::{
    AgentCgroup, Culprit, Reading, RegistryHarvest, Runq, SchedulerHarvest, State, SYSTEM,
};

/// The registry name under which the scheduler agent publishes.
pub const AGENT_REGISTRY: &str = schema::REGISTRY_NAME;

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
        verdicts: agent.agent_verdicts.clone(),
        rule: agent.agent_rule.clone(),
        ..SchedulerHarvest::default()
    };
    let mut cgroups: Vec<AgentCgroup> = Vec::new();
    let mut behind: HashMap<String, Vec<(String, f64)>> = HashMap::new();
    let mut oncpu: HashMap<String, f64> = HashMap::new();
    for s in &agent.series {
        // The root cgroup is the system's row, whichever name it has here.
        let cgroup = match s.label(key::CGROUP) {
            "/" => SYSTEM,
            c => c,
        };
        let rate = match s.reading {
            Reading::Counter { rate, .. } => rate,
            _ => None,
        };
        if s.meta.name == schema::RUNQ_LATENCY.name {
            if let Reading::Histogram { rate, p50, p99, .. } = &s.reading {
                cgroups.push(AgentCgroup {
                    container: match cgroup {
                        SYSTEM => SYSTEM.to_owned(),
                        _ => s.label(key::CONTAINER).to_owned(),
                    },
                    cgroup: cgroup.to_owned(),
                    runq: Some(Runq {
                        rate: *rate,
                        p50: *p50,
                        p99: *p99,
                        history: s.history.clone(),
                    }),
                    ..AgentCgroup::default()
                });
            }
        } else if s.meta.name == schema::WAIT_BEHIND.name {
            let culprit = s.label(key::CULPRIT);
            let name = if culprit == cgroup {
                "itself".to_owned()
            } else if culprit == schema::value::SYSTEM {
                culprit.to_owned()
            } else {
                topdeck_procfs::cgroup::container_name(culprit)
            };
            behind
                .entry(cgroup.to_owned())
                .or_default()
                .push((name, rate.unwrap_or(0.0)));
        } else if s.meta.name == schema::ONCPU.name {
            // Nanoseconds on a CPU per second: CPUs busy.
            if let Some(r) = rate {
                oncpu.insert(cgroup.to_owned(), r / 1e9);
            }
        }
    }
    for c in &mut cgroups {
        c.cpu = oncpu.get(&c.cgroup).copied();
        let waits = behind.remove(&c.cgroup).unwrap_or_default();
        let total: f64 = waits.iter().map(|(_, r)| r).sum();
        if total > 0.0 {
            c.behind = waits
                .into_iter()
                .filter(|(_, r)| *r > 0.0)
                .map(|(name, r)| Culprit {
                    name,
                    share: r / total,
                })
                .collect();
            c.behind.sort_by(|a, b| b.share.total_cmp(&a.share));
        }
    }
    view.cgroups = cgroups;
    Some(view)
}

#[cfg(test)]
mod tests {
    use topdeck_sched::trust;
    use topdeck_sched::verdict::{Verdict, VerdictKind};

    use super::*;

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
            r.agent_verdicts.push(Verdict {
                kind: VerdictKind::NoisyNeighbour,
                victim: "/web".into(),
                p99_before: None,
                p99_after: None,
                culprits: vec![(culprit.into(), 1.0)],
                other_share: None,
                throttled: None,
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
        assert_eq!(view.verdicts[0].culprits[0].0, "/real");
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
