// SPDX-License-Identifier: Apache-2.0
//! What one collection pass of `topdeck top` saw, and all the panels draw:
//! a [`Harvest`] of registries and their series, each series' reading over
//! the interval (a counter's rate, a histogram's p50/p99 of that interval,
//! a summary's mean of it, a gauge's value) and its [`History`], and the scheduler agent's view.
//! Plain data: made by `collect`, read by `app` and `draw`.

use std::sync::Arc;

use serde::{Serialize, Serializer};
use topdeck::MetricInfo;
use topdeck_sched::trust::Untrusted;
pub use topdeck_sched::verdict::Verdict;

pub use super::history::History;

/// Everything one collection pass saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Harvest {
    /// The namespace directories read.
    pub dirs: Vec<String>,
    /// Every registry file, readable or not, in namespace order (pid, path).
    pub registries: Vec<RegistryHarvest>,
    /// Every process with a source or in a container, and each dead or
    /// broken source, as the processes pane lists them.
    pub processes: Vec<ProcessRow>,
    /// Every container (cgroup) the agent or a source's process is in,
    /// the system as one row, as the containers pane lists them.
    pub containers: Vec<ContainerRow>,
    /// The scheduler agent's view, when a trusted `topdeck-agent` registry exists.
    pub scheduler: Option<SchedulerHarvest>,
    /// Registries named `topdeck-agent` that are not the agent's, ignored.
    pub spoofed_agents: usize,
    /// When the pass read them (wall clock, for the title line).
    #[serde(skip)]
    pub taken: Option<std::time::SystemTime>,
    /// The host at a glance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostLine>,
    /// For a recorded moment (`top --at`): which, and what it lacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Recorded>,
}

/// What a recording does not hold, shown as `-` (or left out) in the view
/// of a recorded moment: the recorder keeps what sources publish, not
/// what procfs and cgroupfs said of their processes then.
pub const NOT_RECORDED: &str = "process CPU and threads, cgroup limits and CPUs, host load";

/// Which recorded moment a harvest shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recorded {
    /// The frame shown, ns since the Unix epoch.
    pub unix_ns: u64,
    /// The same, local time (RFC 3339).
    pub at: String,
    /// The frame before it, which its rates and quantiles are measured
    /// from; `None` for the first frame of a recording.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_unix_ns: Option<u64>,
    /// What is not recorded, and so not shown ([`NOT_RECORDED`]).
    pub not_recorded: &'static str,
    /// Damage met reading the frame, when there was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
}

impl Recorded {
    /// The moment of the frame at `unix_ns`, after the one at `since`.
    pub fn new(unix_ns: u64, since: Option<u64>, damage: Option<String>) -> Self {
        Self {
            unix_ns,
            at: topdeck_history::format_time(unix_ns),
            since_unix_ns: since,
            not_recorded: NOT_RECORDED,
            damage,
        }
    }
}

/// The host at a glance, as the host line shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostLine {
    /// Share of the CPUs' time busy over the interval (`None` on the first pass).
    pub cpu_busy: Option<f64>,
    /// CPUs online.
    pub cpus: usize,
    /// Load average over the last minute.
    pub load1: Option<f64>,
    /// Memory in use (all but what is available), and in all, bytes.
    pub mem_used: Option<u64>,
    /// See `mem_used`.
    pub mem_total: Option<u64>,
    /// Share of the last 10 s some runnable task waited for a CPU, percent.
    pub cpu_pressure: Option<f64>,
}

impl HostLine {
    /// The line of a reading, with the CPU use measured since the last.
    pub fn of(h: &topdeck_procfs::host::Host, cpu_busy: Option<f64>) -> Self {
        HostLine {
            cpu_busy,
            cpus: h.cpus,
            load1: h.load1,
            mem_used: h
                .mem_total
                .zip(h.mem_available)
                .map(|(t, a)| t.saturating_sub(a)),
            mem_total: h.mem_total,
            cpu_pressure: h.cpu_pressure,
        }
    }
}

impl std::fmt::Display for HostLine {
    /// `host: CPU 37% of 2 · load 1.24 · memory 0.7 of 23.5GiB · CPU pressure 1.3%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cpu = self
            .cpu_busy
            .map_or("-".into(), |b| format!("{:.0}%", b * 100.0));
        write!(f, "host: CPU {cpu} of {}", self.cpus)?;
        if let Some(l) = self.load1 {
            write!(f, " · load {l:.2}")?;
        }
        if let (Some(used), Some(total)) = (self.mem_used, self.mem_total) {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            write!(f, " · memory {:.1} of {:.1}GiB", gib(used), gib(total))?;
        }
        if let Some(p) = self.cpu_pressure {
            write!(f, " · CPU pressure {p:.1}%")?;
        }
        Ok(())
    }
}

/// Whether a registry's writer runs, or whether its file could be read at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The writer holds its file: values move.
    Alive,
    /// The writer is gone: values are frozen, rates are zero.
    Dead,
    /// The file could not be read; `error` says why.
    Broken,
}

/// One registry file as of this pass.
#[derive(Debug, Clone, Serialize)]
pub struct RegistryHarvest {
    /// The file, or for a broken file that could not be named, its error.
    pub path: String,
    /// Writer's pid; `None` when the header could not be read.
    pub pid: Option<u32>,
    /// Writer's process name (`?` when unknown).
    pub process: String,
    /// Which runtime wrote it (`topdeck`, `jvm`, `python`, `aeron`,
    /// `mmv`); `None` for a file that could not be read.
    pub source: Option<&'static str>,
    /// The owner of its file; `None` when unknown.
    pub uid: Option<u32>,
    /// The container its writer runs in; `None` for the system's.
    pub container: Option<String>,
    /// Registry name (`?` when unknown).
    pub registry: String,
    /// Alive, dead or broken.
    pub state: State,
    /// Metrics published.
    pub metrics: usize,
    /// Why the file (or this pass's read of it) failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its metrics, in registration order.
    pub series: Vec<Series>,
    /// For a registry named `topdeck-agent` that is not the agent's: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untrusted: Option<Untrusted>,
    /// For a registry named `topdeck-agent` that is the agent's: the uid it
    /// belongs to (root, or the reader itself).
    #[serde(skip)]
    pub agent_owner: Option<u32>,
    /// For a registry named `topdeck-agent`: the verdicts it holds, read
    /// by the agent's typed reader (shown only if the registry is trusted).
    #[serde(skip)]
    pub agent_verdicts: Vec<Verdict>,
    /// A JVM's collection at a glance, when this is a JVM's hsperfdata.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jvm: Option<topdeck_sources::JvmSummary>,
    /// The agent's verdict rule in words, when this is its registry.
    #[serde(skip)]
    pub agent_rule: Option<String>,
}

impl RegistryHarvest {
    /// The counter with the highest rate, and that rate.
    pub fn busiest(&self) -> Option<(&Series, f64)> {
        self.series
            .iter()
            .filter_map(|s| match s.reading {
                Reading::Counter { rate: Some(r), .. }
                | Reading::CounterF64 { rate: Some(r), .. } => Some((s, r)),
                _ => None,
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    pub(super) fn broken(path: String, error: String) -> Self {
        Self {
            error: Some(error),
            ..Self::read(
                path,
                None,
                "?".into(),
                "?".into(),
                State::Broken,
                Vec::new(),
            )
        }
    }

    /// A row read in this pass, with nothing to say about the agent.
    pub(super) fn read(
        path: String,
        pid: Option<u32>,
        process: String,
        registry: String,
        state: State,
        series: Vec<Series>,
    ) -> Self {
        Self {
            path,
            pid,
            process,
            source: None,
            uid: None,
            container: None,
            registry,
            state,
            metrics: series.len(),
            error: None,
            series,
            untrusted: None,
            agent_owner: None,
            agent_verdicts: Vec::new(),
            agent_rule: None,
            jvm: None,
        }
    }
}

/// What a metric is, as opposed to what it did: made once when the metric
/// is first seen and shared by every later pass, so that a pass over
/// 100,000 series copies no strings.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Meta {
    /// Metric name.
    pub name: String,
    /// Labels, in registration order.
    #[serde(serialize_with = "labels_as_object")]
    pub labels: Vec<(String, String)>,
    /// Unit (may be empty).
    pub unit: String,
}

impl Meta {
    pub(super) fn of(m: &MetricInfo) -> Arc<Self> {
        Arc::new(Self {
            name: m.name.clone(),
            labels: m.labels.clone(),
            unit: m.unit.clone(),
        })
    }
}

/// One metric (name and labels) as of this pass.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// Name, labels and unit.
    #[serde(flatten)]
    pub meta: Arc<Meta>,
    /// What it did over the interval.
    #[serde(flatten)]
    pub reading: Reading,
    /// Past readings, this pass's last.
    #[serde(skip)]
    pub history: History,
}

impl Series {
    /// `name{k="v",...}`: the series' identity, as a person reads it.
    pub fn id(&self) -> String {
        let m = &self.meta;
        if m.labels.is_empty() {
            return m.name.clone();
        }
        let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        format!("{}{{{}}}", m.name, labels.join(","))
    }

    /// The value of label `key`, or `""`.
    pub fn label(&self, key: &str) -> &str {
        topdeck::label_value(&self.meta.labels, key).unwrap_or("")
    }

    /// Events per second: a counter's rate, a histogram's observation rate.
    pub fn rate(&self) -> Option<f64> {
        match self.reading {
            Reading::Counter { rate, .. }
            | Reading::Histogram { rate, .. }
            | Reading::CounterF64 { rate, .. }
            | Reading::Buckets { rate, .. }
            | Reading::Summary { rate, .. } => rate,
            Reading::Gauge { .. } => None,
        }
    }
}

fn labels_as_object<S: Serializer>(labels: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(labels.iter().map(|(k, v)| (k, v)))
}

/// A metric's reading over one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reading {
    /// A counter: its total, and its rate per second over the interval
    /// (`None` on the first read, or when it went backwards: a reset).
    Counter {
        /// Total since the writer started.
        total: u64,
        /// Increase per second over the interval.
        rate: Option<f64>,
    },
    /// A gauge's current value.
    Gauge {
        /// The value (integer gauges converted).
        value: f64,
    },
    /// A histogram over the interval (since start on the first read).
    Histogram {
        /// Observations in the interval.
        count: u64,
        /// Observations per second (`None` on the first read).
        rate: Option<f64>,
        /// Median of the interval's observations.
        p50: Option<f64>,
        /// 99th percentile of the interval's observations.
        p99: Option<f64>,
        /// Sum of the interval's observations.
        #[serde(skip)]
        sum: f64,
        /// Share of the interval's latency its requests spent waiting for
        /// a CPU, when its timer measured each request's wait (its
        /// `_cpu_wait_seconds` companion, `topdeck_sources::latency`).
        #[serde(skip_serializing_if = "Option::is_none")]
        cpu_wait: Option<f64>,
    },
    /// Another runtime's float counter: a counter whose total is a float.
    #[serde(rename = "counter")]
    CounterF64 {
        /// Total since the source started.
        total: f64,
        /// Increase per second over the interval.
        rate: Option<f64>,
    },
    /// Another runtime's fixed-bucket histogram over the interval: a
    /// histogram whose count is a float, its quantiles interpolated inside
    /// the buckets as Prometheus' `histogram_quantile` does.
    #[serde(rename = "histogram")]
    Buckets {
        /// Observations in the interval.
        count: f64,
        /// Observations per second (`None` on the first read).
        rate: Option<f64>,
        /// Median of the interval's observations.
        p50: Option<f64>,
        /// 99th percentile of the interval's observations.
        p99: Option<f64>,
    },
    /// Another runtime's summary over the interval: no quantiles, a mean.
    Summary {
        /// Observations in the interval.
        count: f64,
        /// Observations per second (`None` on the first read).
        rate: Option<f64>,
        /// Mean of the interval's observations.
        mean: Option<f64>,
    },
}

impl Reading {
    /// The number a sparkline plots for this reading; none for a first
    /// read (a histogram's then covers everything since start, not an
    /// interval, and would plot as a spike) or a counter reset.
    pub(super) fn plotted(&self) -> Option<f64> {
        match *self {
            Reading::Counter { rate, .. } | Reading::CounterF64 { rate, .. } => rate,
            Reading::Gauge { value } => Some(value),
            Reading::Histogram { rate: None, .. }
            | Reading::Buckets { rate: None, .. }
            | Reading::Summary { rate: None, .. } => None,
            Reading::Histogram { p99, .. } | Reading::Buckets { p99, .. } => {
                Some(p99.unwrap_or(0.0))
            }
            Reading::Summary { mean, .. } => Some(mean.unwrap_or(0.0)),
        }
    }
}

/// The scheduler agent's metrics, read generically from their names.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedulerHarvest {
    /// Pid of the agent whose registry this is.
    pub pid: Option<u32>,
    /// Whether that agent still runs.
    pub state: Option<State>,
    /// What it publishes of each cgroup.
    #[serde(skip)]
    pub cgroups: Vec<AgentCgroup>,
    /// Verdicts that hold now, as the agent's registry has them.
    pub verdicts: Vec<Verdict>,
    /// The rule they follow, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// A cgroup the agent publishes, over the interval.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentCgroup {
    /// Container name as the agent labels it.
    pub container: String,
    /// Its cgroup path, or `system`.
    pub cgroup: String,
    /// Its run-queue latency.
    pub runq: Option<Runq>,
    /// Who held the CPU while it waited.
    pub behind: Vec<Culprit>,
    /// CPUs its tasks kept busy (the probe's on-CPU time over the interval).
    pub cpu: Option<f64>,
}

/// Run-queue latency over the interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Runq {
    /// Run-queue waits per second.
    pub rate: Option<f64>,
    /// Median wait, seconds.
    pub p50: Option<f64>,
    /// 99th percentile wait, seconds.
    pub p99: Option<f64>,
    /// Past p99s.
    #[serde(skip)]
    pub history: History,
}

/// Who held the CPU while a container waited, and its share of the wait.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprit {
    /// A container name, `itself`, or `system` (idle CPUs, the kernel).
    pub name: String,
    /// Share of the container's run-queue wait over the interval, 0..=1.
    pub share: f64,
}

/// A container's apps' latency: its busiest latency histogram.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppLatency {
    /// The process that publishes it.
    pub process: String,
    /// The series, as `name{labels}`.
    pub metric: String,
    /// Its p99 over the interval, seconds.
    pub p99: f64,
    /// Share of its latency that was CPU wait, where its timer measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_wait: Option<f64>,
}

/// One container (a cgroup, as the scheduler probe keys tasks), or the
/// system: what it used and was given of the CPU, how long its tasks
/// waited and behind whom, and its apps' latency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerRow {
    /// What a person calls it (`system` for the root cgroup).
    pub container: String,
    /// Its cgroup path (`system` for the root); of a recorded moment in
    /// which the agent did not name it, its name (paths are not recorded).
    pub cgroup: String,
    /// CPUs it kept busy over the interval (1.0: one CPU all the time).
    pub cpu: Option<f64>,
    /// Its CPU weight as a multiple of the default.
    pub weight: Option<f64>,
    /// Its CPU quota, in CPUs; `None` when it has none.
    pub quota: Option<f64>,
    /// The CPUs its processes may run on (`0-3,8`).
    pub cpus: Option<String>,
    /// Its run-queue latency, from the agent.
    pub runq: Option<Runq>,
    /// Who held the CPU while it waited, biggest share first.
    pub behind: Vec<Culprit>,
    /// The agent's verdict on it, when one holds.
    pub verdict: Option<Verdict>,
    /// Its apps' latency.
    pub latency: Option<AppLatency>,
    /// Its processes, by [`ProcessRow::key`].
    pub processes: Vec<String>,
}

impl ContainerRow {
    /// A row that knows only its name and cgroup.
    pub fn new(container: String, cgroup: String) -> Self {
        Self {
            container,
            cgroup,
            cpu: None,
            weight: None,
            quota: None,
            cpus: None,
            runq: None,
            behind: Vec::new(),
            verdict: None,
            latency: None,
            processes: Vec::new(),
        }
    }

    /// Whether this is the system's row (the root cgroup).
    pub fn is_system(&self) -> bool {
        self.cgroup == SYSTEM
    }
}

/// How the agent and the containers pane name the root cgroup.
pub const SYSTEM: &str = topdeck_sched::schema::value::SYSTEM;

/// One process as the processes pane lists it: a running process with its
/// sources, or a dead or broken source on its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessRow {
    /// What names it from pass to pass: `pid:start` for a running
    /// process, the file's path for a dead or broken source.
    pub key: String,
    /// Its pid.
    pub pid: Option<u32>,
    /// Its command (the name its source gives it, else `comm`).
    pub command: String,
    /// CPUs it kept busy over the interval.
    pub cpu: Option<f64>,
    /// Its threads.
    pub threads: Option<u32>,
    /// Its owner.
    pub uid: Option<u32>,
    /// Its container's cgroup ([`ContainerRow::cgroup`]).
    pub cgroup: Option<String>,
    /// Its container's name.
    pub container: Option<String>,
    /// Alive, or its source's state.
    pub state: State,
    /// Its sources, as indices into [`Harvest::registries`].
    #[serde(skip)]
    pub sources: Vec<usize>,
    /// Their paths.
    pub source_paths: Vec<String>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn counter(name: &str, rate: f64) -> Series {
        Series {
            meta: Arc::new(Meta {
                name: name.into(),
                labels: vec![],
                unit: String::new(),
            }),
            reading: Reading::Counter {
                total: 100,
                rate: Some(rate),
            },
            history: History::of(&[rate / 2.0, rate]),
        }
    }

    pub(crate) fn registry(pid: u32, process: &str, series: Vec<Series>) -> RegistryHarvest {
        RegistryHarvest::read(
            format!("/ns/{pid}-1-0.topdeck"),
            Some(pid),
            process.into(),
            "default".into(),
            State::Alive,
            series,
        )
    }

    /// `h` with a process per live writer (a row per dead or broken file)
    /// and a container per registry's container (`system` for none), as
    /// the census would make them of processes that ran no CPU.
    pub(crate) fn census(mut h: Harvest) -> Harvest {
        let (mut procs, mut containers): (Vec<ProcessRow>, Vec<ContainerRow>) = (vec![], vec![]);
        for (i, r) in h.registries.iter().enumerate() {
            let alive = r.state == State::Alive && r.pid.is_some();
            let key = match (alive, r.pid) {
                (true, Some(pid)) => pid.to_string(),
                _ => r.path.clone(),
            };
            let (name, cgroup) = match &r.container {
                Some(c) => (c.clone(), format!("/{c}")),
                None => (SYSTEM.to_owned(), SYSTEM.to_owned()),
            };
            if let Some(p) = procs.iter_mut().find(|p| p.key == key) {
                p.sources.push(i);
                p.source_paths.push(r.path.clone());
                continue;
            }
            procs.push(ProcessRow {
                key: key.clone(),
                pid: r.pid,
                command: r.process.clone(),
                cpu: None,
                threads: Some(1),
                uid: r.uid,
                cgroup: Some(cgroup.clone()),
                container: Some(name.clone()),
                state: r.state,
                sources: vec![i],
                source_paths: vec![r.path.clone()],
            });
            match containers.iter_mut().find(|c| c.cgroup == cgroup) {
                Some(c) => c.processes.push(key),
                None => {
                    let mut c = ContainerRow::new(name, cgroup);
                    c.processes.push(key);
                    containers.push(c);
                }
            }
        }
        (h.processes, h.containers) = (procs, containers);
        h
    }

    /// Three registries: a quiet `alpha`, a busy `bravo`, a middling `charlie`.
    pub(crate) fn sample() -> Harvest {
        census(Harvest {
            registries: vec![
                registry(10, "alpha", vec![counter("a_total", 1.0)]),
                registry(
                    20,
                    "bravo",
                    vec![
                        counter("requests_total", 500.0),
                        counter("errors_total", 2.0),
                    ],
                ),
                registry(30, "charlie", vec![counter("jobs_total", 50.0)]),
            ],
            ..Harvest::default()
        })
    }

    #[test]
    fn harvests_serialize_with_labels_as_objects_and_a_kind_tag() {
        let s = Series {
            meta: Arc::new(Meta {
                name: "x_total".into(),
                labels: vec![("a".into(), "1".into())],
                unit: String::new(),
            }),
            reading: Reading::Counter {
                total: 2,
                rate: Some(1.0),
            },
            history: History::of(&[1.0]),
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["labels"]["a"], "1");
        assert_eq!(v["kind"], "counter");
        assert_eq!(v["rate"], 1.0);
        assert!(v.get("history").is_none());
    }
}
