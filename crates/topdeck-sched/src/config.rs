// SPDX-License-Identifier: Apache-2.0
//! How the scheduler agent runs: what [`crate::Agent::start`] is given.

use std::path::PathBuf;
use std::time::Duration;

use crate::probe::{Clock, Flavour};
use crate::verdict::Thresholds;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Namespace directory (default: `TOPDECK_DIR`, else the host's).
    pub dir: Option<PathBuf>,
    /// Time between map reads.
    pub interval: Duration,
    /// Verdict thresholds.
    pub thresholds: Thresholds,
    /// How often to measure the probe's own cost (BPF run-time stats are on
    /// for one interval each time); `None` never.
    pub cost_every: Option<Duration>,
    /// Force tp_btf or raw_tp.
    pub flavour: Option<Flavour>,
    /// Where the probe's timestamps come from.
    pub clock: Clock,
    /// How long a cgroup stays published after it is gone, before it is
    /// retired: at least two scrape intervals, so that every scraper sees
    /// its last values.
    pub grace: Duration,
    /// Metrics the registry holds; a rotation makes room when retired
    /// cgroups fill it.
    pub max_series: u32,
    /// Cgroups the probe keeps in its per-CPU slot array (preallocated,
    /// 2,304 bytes per CPU each); `None`: [`crate::default_slots`].
    pub cgroup_slots: Option<u32>,
    /// Where the probe pins the thread-waits array (docs/FORMAT.md
    /// "Thread waits"); `None`: thread waits off.
    pub thread_waits: Option<PathBuf>,
    /// Cap on the thread-waits array's memory, bytes.
    pub thread_waits_memory: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            dir: None,
            interval: Duration::from_secs(1),
            thresholds: Thresholds::default(),
            cost_every: Some(Duration::from_secs(60)),
            flavour: None,
            clock: Clock::default(),
            grace: Duration::from_secs(30),
            max_series: 16_384,
            cgroup_slots: None,
            thread_waits: Some(PathBuf::from(topdeck_format::waits::DEFAULT_PIN)),
            thread_waits_memory: topdeck_format::waits::DEFAULT_MAX_BYTES,
        }
    }
}
