// SPDX-License-Identifier: Apache-2.0
//! The contract between the agent and its readers: the registry's name, each
//! metric's name, label keys, unit and help, and the label values with a
//! meaning of their own. The agent registers its families from these
//! ([`MetricSpec`]) and [`crate::reading::AgentReading`] parses a snapshot
//! with the same ones, so a name cannot change on one side only.
//!
//! Semantics: histograms and counters are cumulative since the agent
//! started (carried over when it rotates to a fresh file); the verdict and
//! evidence gauges describe the agent's last interval. Time a counter adds
//! up is in integer [`unit::NANOSECONDS`], which exporters expose in
//! seconds: such a counter is named `_seconds_total`.

/// The registry name the agent publishes under.
pub const REGISTRY_NAME: &str = "topdeck-agent";

/// Label keys.
pub mod key {
    /// A cgroup path (or [`super::value::SYSTEM`], [`super::value::UNRESOLVED`]).
    pub const CGROUP: &str = "cgroup";
    /// Which number of the verdict rule ([`super::THRESHOLD`]).
    pub const RULE: &str = "rule";
    /// The container, pod or service name of the cgroup.
    pub const CONTAINER: &str = "container";
    /// Who ran next when a task lost the CPU still runnable ([`crate::maps::CAUSES`]).
    pub const CAUSE: &str = "cause";
    /// The cgroup charged with the wait, or [`super::value::SELF`].
    pub const CULPRIT: &str = "culprit";
    /// What a verdict says ([`crate::verdict::VerdictKind::as_str`]).
    pub const KIND: &str = "kind";
    /// Which p99 of a verdict's evidence: [`super::value::BASELINE`] or [`super::value::NOW`].
    pub const WHEN: &str = "when";
    /// A BPF program of the probe.
    pub const PROGRAM: &str = "program";
    /// Why samples were lost ([`super::DropReason`]).
    pub const REASON: &str = "reason";
    /// What a series that did not fit was ([`super::Unpublished`]).
    pub const WHAT: &str = "what";
    /// Where the probe keeps a cgroup's statistics: [`super::value::SLOT`]
    /// or [`super::value::HASH`].
    pub const WHERE: &str = "where";
}

/// Label values with a meaning of their own.
pub mod value {
    /// The culprit for idle CPUs, kernel threads and root-cgroup tasks.
    pub const SYSTEM: &str = "system";
    /// The culprit of a verdict that blames the cgroup itself (own quota).
    pub const SELF: &str = "self";
    /// A cgroup that was gone before its path could be learnt.
    pub const UNRESOLVED: &str = "(unresolved)";
    /// The verdict's baseline p99.
    pub const BASELINE: &str = "baseline";
    /// The verdict's p99 in the last window.
    pub const NOW: &str = "now";
    /// A slot of the probe's per-CPU array.
    pub const SLOT: &str = "slot";
    /// The probe's hash, for cgroups beyond its slots.
    pub const HASH: &str = "hash";
}

/// Units, as the registry stores them.
pub mod unit {
    /// Seconds.
    pub const SECONDS: &str = "seconds";
    /// Nanoseconds: a counter's running total of time, exact; exposed in
    /// seconds (`topdeck_export::rules::counter_value`).
    pub const NANOSECONDS: &str = "nanoseconds";
    /// No unit.
    pub const NONE: &str = "";
}

/// One metric of the agent: name, label keys in registration order, unit
/// and help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricSpec {
    /// The metric name.
    pub name: &'static str,
    /// Its label keys, in the order a family takes their values.
    pub keys: &'static [&'static str],
    /// Its unit.
    pub unit: &'static str,
    /// Its help text.
    pub help: &'static str,
}

/// Run-queue waits of the cgroup's tasks (histogram).
pub const RUNQ_LATENCY: MetricSpec = MetricSpec {
    name: "topdeck_runq_latency_seconds",
    keys: &[key::CGROUP, key::CONTAINER],
    unit: unit::SECONDS,
    help: "Time runnable tasks of the cgroup waited for a CPU (run-queue latency).",
};

/// Switch-outs while runnable, by who ran next (counter).
pub const SWITCH_OUT: MetricSpec = MetricSpec {
    name: "topdeck_sched_switch_out_total",
    keys: &[key::CGROUP, key::CAUSE],
    unit: unit::NONE,
    help: "Times a task of the cgroup lost the CPU while still runnable, by who ran next.",
};

/// Wait charged to the cgroup that held the CPU before (counter of
/// nanoseconds, exposed in seconds).
pub const WAIT_BEHIND: MetricSpec = MetricSpec {
    name: "topdeck_sched_wait_behind_seconds_total",
    keys: &[key::CGROUP, key::CULPRIT],
    unit: unit::NANOSECONDS,
    help: "Run-queue wait of the cgroup charged to the cgroup that held the CPU just before it ran (system: idle or kernel).",
};

/// Time on CPU (counter of nanoseconds, exposed in seconds).
pub const ONCPU: MetricSpec = MetricSpec {
    name: "topdeck_sched_oncpu_seconds_total",
    keys: &[key::CGROUP],
    unit: unit::NANOSECONDS,
    help: "Time the cgroup's tasks spent on a CPU since the agent started.",
};

/// 1 while the verdict holds, else 0 (gauge).
pub const VERDICT: MetricSpec = MetricSpec {
    name: "topdeck_sched_verdict",
    keys: &[key::CGROUP, key::CULPRIT, key::KIND],
    unit: unit::NONE,
    help: "1 while the verdict holds: the cgroup's run-queue latency rose because of the culprit (noisy_neighbour) or its own CPU quota (own_quota).",
};

/// The verdict rule in force, one number per `rule` (f64 gauge), so that
/// every view prints the rule the agent applies (names: [`RULES`]).
pub const THRESHOLD: MetricSpec = MetricSpec {
    name: "topdeck_sched_verdict_rule",
    keys: &[key::RULE],
    unit: unit::NONE,
    help: "The verdict rule the agent applies: rise factors over the baseline, the p99 floor (seconds), shares of the wait behind other cgroups, the windows a verdict holds, and the window's length (seconds).",
};

/// The `rule` values of [`THRESHOLD`].
pub const RULES: [&str; 7] = [
    "rise_factor",
    "floor_seconds",
    "other_share",
    "suspect_rise_factor",
    "suspect_other_share",
    "hold_windows",
    "window_seconds",
];

/// Evidence of a verdict: the baseline and the last window's p99 (f64 gauge).
pub const VERDICT_P99: MetricSpec = MetricSpec {
    name: "topdeck_sched_verdict_p99_seconds",
    keys: &[key::CGROUP, key::WHEN],
    unit: unit::NONE,
    help: "Evidence of a verdict: run-queue p99 of the cgroup, baseline and in the last window.",
};

/// Evidence of a verdict: the share of the wait behind the culprit (f64 gauge).
pub const VERDICT_SHARE: MetricSpec = MetricSpec {
    name: "topdeck_sched_verdict_share",
    keys: &[key::CGROUP, key::CULPRIT],
    unit: unit::NONE,
    help:
        "Evidence of a verdict: share of the cgroup's wait behind the culprit in the last window.",
};

/// The probe's own cost: mean run time per event, seconds (f64 gauge).
pub const BPF_COST: MetricSpec = MetricSpec {
    name: "topdeck_bpf_run_per_event_seconds",
    keys: &[key::PROGRAM],
    unit: unit::SECONDS,
    help: "Mean run time of the probe's BPF program per event, from kernel BPF stats (enabled only while measuring).",
};

/// Samples lost or not measured (counter).
pub const DROPPED: MetricSpec = MetricSpec {
    name: "topdeck_sched_dropped_total",
    keys: &[key::REASON],
    unit: unit::NONE,
    help: "Scheduler samples lost or not measured, by reason.",
};

/// Cgroups the probe tracks, by where their statistics are (gauge).
pub const PLACED: MetricSpec = MetricSpec {
    name: "topdeck_sched_cgroups",
    keys: &[key::WHERE],
    unit: unit::NONE,
    help: "Cgroups the scheduler probe tracks, by where their statistics are: slot (no lookup per switch) or hash (beyond the slots, one lookup per switch; raise --cgroup-slots if it stays above 0).",
};

/// Series the registry had no room for (counter).
pub const UNPUBLISHED: MetricSpec = MetricSpec {
    name: "topdeck_agent_unpublished_total",
    keys: &[key::WHAT],
    unit: unit::NONE,
    help: "Series the agent could not publish because its registry was full, by what they were.",
};

/// Fresh registry files started (counter).
pub const ROTATIONS: MetricSpec = MetricSpec {
    name: "topdeck_agent_rotations_total",
    keys: &[],
    unit: unit::NONE,
    help: "Times the agent started a fresh registry file to drop the series of retired cgroups.",
};

/// Coarse (no eBPF): seconds waited runnable per second (f64 gauge).
pub const COARSE_WAIT_PER_SECOND: MetricSpec = MetricSpec {
    name: "topdeck_sched_coarse_wait_per_second",
    keys: &[key::CGROUP, key::CONTAINER],
    unit: unit::SECONDS,
    help: "Coarse (no eBPF): seconds the cgroup's threads waited runnable per second, from /proc/<tid>/schedstat.",
};

/// Coarse (no eBPF): mean run-queue wait per timeslice (f64 gauge).
pub const COARSE_MEAN_WAIT: MetricSpec = MetricSpec {
    name: "topdeck_sched_coarse_mean_wait_seconds",
    keys: &[key::CGROUP, key::CONTAINER],
    unit: unit::SECONDS,
    help: "Coarse (no eBPF): mean run-queue wait per timeslice, from /proc/<tid>/schedstat.",
};

/// Coarse (no eBPF): time throttled by the cgroup's own quota (f64 gauge).
pub const COARSE_THROTTLED: MetricSpec = MetricSpec {
    name: "topdeck_sched_coarse_throttled_seconds",
    keys: &[key::CGROUP, key::CONTAINER],
    unit: unit::SECONDS,
    help: "Coarse (no eBPF): time throttled by the cgroup's own quota in the last window, from cpu.stat.",
};

/// Why samples were lost or not measured: the kernel's reasons, in `enum
/// td_drop` order, then the agent's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// The map of wait start times was full.
    TimestampFull,
    /// The per-cgroup map was full.
    CgroupFull,
    /// The (victim, culprit) map was full.
    PairFull,
    /// A wait ended with no start time.
    NoTimestamp,
    /// A program did not run because another BPF program ran on that CPU.
    RecursionMiss,
}

impl DropReason {
    /// The kernel's reasons, in the order of [`crate::Totals::drops`].
    pub const KERNEL: [Self; crate::maps::NR_DROPS] = [
        Self::TimestampFull,
        Self::CgroupFull,
        Self::PairFull,
        Self::NoTimestamp,
    ];
    /// Every reason, as published.
    pub const ALL: [Self; 5] = [
        Self::TimestampFull,
        Self::CgroupFull,
        Self::PairFull,
        Self::NoTimestamp,
        Self::RecursionMiss,
    ];

    /// What a count of this reason means, in a line, for a view that
    /// prints it.
    ///
    /// ```
    /// use topdeck_sched::schema::DropReason;
    /// assert!(DropReason::NoTimestamp.meaning().contains("no start of wait"));
    /// ```
    pub fn meaning(self) -> &'static str {
        match self {
            Self::TimestampFull => {
                "waits not timed: the map of wait start times was full (more runnable threads than it holds)"
            }
            Self::CgroupFull => "waits not counted: the per-cgroup map was full",
            Self::PairFull => "waits not attributed to a culprit: the (victim, culprit) map was full",
            Self::NoTimestamp => {
                "switch-ins with no start of wait on record: threads runnable before the probe \
                 attached, or whose switch-out the kernel's event stream never showed; a few per \
                 second is normal"
            }
            Self::RecursionMiss => {
                "events not seen: another BPF program was running on that CPU"
            }
        }
    }

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TimestampFull => "timestamp_full",
            Self::CgroupFull => "cgroup_full",
            Self::PairFull => "pair_full",
            Self::NoTimestamp => "no_timestamp",
            Self::RecursionMiss => "recursion_miss",
        }
    }
}

/// What a series that did not fit in the registry was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unpublished {
    /// A cgroup's run-queue histogram, switch-outs or time on CPU.
    Cgroup,
    /// A (cgroup, culprit) wait.
    WaitBehind,
    /// A verdict.
    Verdict,
    /// A verdict's evidence.
    Evidence,
    /// The probe's cost.
    Cost,
}

impl Unpublished {
    /// Every kind, as published.
    pub const ALL: [Self; 5] = [
        Self::Cgroup,
        Self::WaitBehind,
        Self::Verdict,
        Self::Evidence,
        Self::Cost,
    ];

    /// The `what` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cgroup => "cgroup",
            Self::WaitBehind => "wait_behind",
            Self::Verdict => "verdict",
            Self::Evidence => "evidence",
            Self::Cost => "cost",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_drop_reasons_match_the_maps_names() {
        let names: Vec<&str> = DropReason::KERNEL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, crate::maps::DROPS);
    }

    #[test]
    fn every_metric_has_a_distinct_name_and_valid_keys() {
        let all = [
            RUNQ_LATENCY,
            SWITCH_OUT,
            WAIT_BEHIND,
            ONCPU,
            VERDICT,
            VERDICT_P99,
            VERDICT_SHARE,
            BPF_COST,
            DROPPED,
            PLACED,
            UNPUBLISHED,
            ROTATIONS,
            COARSE_WAIT_PER_SECOND,
            COARSE_MEAN_WAIT,
            COARSE_THROTTLED,
        ];
        let mut names: Vec<&str> = all.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        let dir = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(dir.path())
            .build()
            .unwrap();
        for m in all {
            let f = r
                .counter_family(m.name, m.keys, m.help, m.unit)
                .unwrap_or_else(|e| panic!("{}: {e}", m.name));
            let values = vec!["v"; m.keys.len()];
            let _ = f
                .with(&values)
                .unwrap_or_else(|e| panic!("{}: {e}", m.name));
        }
    }
}
