// SPDX-License-Identifier: Apache-2.0
//! The scheduler probe: eBPF programs on `sched_wakeup`, `sched_wakeup_new`
//! and `sched_switch` that measure, per cgroup and in the kernel, how long
//! runnable tasks wait for a CPU (run-queue latency), whom they waited
//! behind, and who preempted them; and the user-space side that loads them,
//! reads their maps once per second, names the cgroups and judges which
//! cgroup is a noisy neighbour to which.
//!
//! ```no_run
//! # fn main() -> topdeck_sched::Result<()> {
//! let hierarchy = topdeck_sched::Hierarchy::detect()?;
//! let probe = topdeck_sched::Probe::load(&hierarchy)?;
//! let totals = probe.read()?;
//! # let _ = totals;
//! # Ok(()) }
//! ```

pub mod agent;
mod buckets;
pub mod cgroupfs;
mod error;
pub mod fallback;
pub mod maps;
mod names;
pub mod observe;
mod probe;
pub mod verdict;
pub mod view;

#[allow(
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    unused_imports
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/sched.skel.rs"));
}

/// The overhead benchmark's comparison programs (`sched_overhead`): a
/// per-event ring-buffer variant in the style of Netflix's monitor, and
/// empty programs on the same tracepoints. Not part of the API.
#[doc(hidden)]
#[allow(
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    unused_imports
)]
pub mod baseline {
    /// One ring-buffer event per wait.
    pub mod ringbuf {
        include!(concat!(env!("OUT_DIR"), "/ringbuf.skel.rs"));
    }
    /// Programs that do nothing.
    pub mod floor {
        include!(concat!(env!("OUT_DIR"), "/floor.skel.rs"));
    }
}

pub use agent::{Agent, AgentConfig, REGISTRY_NAME};
pub use buckets::BucketTable;
pub use cgroupfs::{CgroupNames, Hierarchy, Throttling};
pub use error::{Error, ErrorKind, Result};
pub use maps::Totals;
pub use names::container_name;
pub use observe::{observe, Observation};
pub use probe::{unavailable, BpfStats, Clock, Flavour, Probe, ProgramStats};
pub use view::SchedView;
