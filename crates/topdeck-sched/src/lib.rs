// SPDX-License-Identifier: Apache-2.0
//! The scheduler probe: eBPF programs on `sched_wakeup`, `sched_wakeup_new`
//! and `sched_switch` that measure, per cgroup and in the kernel, how long
//! runnable tasks wait for a CPU (run-queue latency), whom they waited
//! behind, and who preempted them; and the user-space side that loads them,
//! reads their maps once per second, names the cgroups and judges which
//! cgroup is a noisy neighbour to which.
//!
//! How it fits together:
//!
//! - `src/bpf/sched.bpf.c` (+ `sched.h`, `core_fixes.bpf.h`): a wait starts
//!   at a wakeup or when a task is switched out still runnable, and ends
//!   when it is switched in. Where the kernel keeps `sched_info` (tp_btf,
//!   [`Clock::SchedInfo`], the default) the start is the kernel's own stamp,
//!   read at the switch, and only `sched_switch` has a program; elsewhere
//!   the wakeup programs stamp it in task storage (or a pid-keyed hash). Each wait goes into the task's cgroup: a
//!   histogram in topdeck's bucket scheme ([`BucketTable`]), and a charge to
//!   the cgroup that held the CPU just before (the culprit). Values are
//!   per-CPU, so the programs add without atomics; nothing is streamed.
//!   Each cgroup's values are a slot of a per-CPU array that each task (or
//!   with sched_info a per-CPU cache keyed by cgroup id) and each CPU's
//!   running entry remember, so a switch makes no hash lookup;
//!   the array is preallocated to a memory budget ([`default_slots`]) and
//!   cgroups beyond it are kept in a per-CPU hash.
//! - [`Probe`] loads them (tp_btf, else raw_tp) and reads the maps in
//!   batches into cumulative [`Totals`].
//! - [`Agent`] turns totals into topdeck metrics in the `topdeck-agent`
//!   registry, with cgroup paths ([`CgroupNames`]), container names
//!   ([`container_name`]), throttling from `cpu.stat` and the verdicts of
//!   [`verdict`]; each interval's decisions are the pure [`step::step`].
//!   [`schema`] names everything the agent publishes, and
//!   [`AgentReading`] parses a snapshot of it by those names;
//!   [`SchedView`] is what a reader of that registry makes of two
//!   snapshots; [`observe()`] is `topdeck sched`.
//! - [`inprogress`]: waits still in progress at each read (a task iterator
//!   in `sched.bpf.c`, walked at read time), folded into the window they
//!   fall in, so that a victim starved for a whole window still shows.
//! - [`fallback`]: coarse figures when eBPF cannot run, and why.
//! - [`thread_waits`]: each thread's cumulative run-queue wait, split by
//!   whom it waited behind, in a frozen memory-mappable array the probe
//!   keeps per host thread id and pins for every process to map read-only
//!   (docs/FORMAT.md "Thread waits"); its header reads gone once the agent
//!   stops or dies. Off unless [`LoadOptions::thread_waits`] names a pin;
//!   the agent pins at [`thread_waits::DEFAULT_PIN`].
//!
//! Which cgroup a task counts in: on a cgroup v2 host, its v2 cgroup. On a
//! hybrid host (cpu controller in v1, cgroup v2 beside it, e.g. at
//! `/sys/fs/cgroup/unified`), its v1 cpu cgroup unless that is the v1
//! root; then its v2 cgroup unless that is the v2 root; then `/`, which
//! counts as system. So a systemd service without CPU accounting is named
//! by its v2 path (`/system.slice/nginx.service`) instead of being lumped
//! into `/`. v2 ids carry a tag bit ([`cgroupfs::UNIFIED_TAG`]) because
//! inode numbers are per hierarchy; see [`cgroupfs`] for the rule and
//! [`cgroupfs::attribute`] for it stated over `/proc/<pid>/cgroup`.
//! - [`trust`]: whether a registry named `topdeck-agent` is the agent's.
//!
//! What readers trust: any user can publish a registry named
//! `topdeck-agent` in their own `/dev/shm/topdeck-<uid>`, so the name
//! proves nothing. `topdeck sched` and `topdeck top` show a `topdeck-agent`
//! registry as the agent's only when [`trust::verify_agent`] accepts it:
//! the file and its directory belong to root (or to the reader itself), the
//! directory is not a symlink and nobody else can write in it or swap it,
//! and its live writer is a process of that same uid with the start time
//! the header records. Anything else is ignored, counted
//! (`spoofed_agents` in their JSON) and named once. The agent in turn
//! refuses a namespace directory it does not own ([`ErrorKind::Namespace`],
//! [`nsdir`]) and says who owns it and what to check, instead of falling
//! back as if eBPF were missing.
//!
//! Semantics of what is published: histograms and counters are cumulative
//! since the agent started; the verdict and evidence gauges describe the
//! agent's last interval.
//!
//! ```no_run
//! # fn main() -> topdeck_sched::Result<()> {
//! let hierarchy = topdeck_sched::Hierarchy::detect()?;
//! let probe = topdeck_sched::Probe::load(&hierarchy)?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let totals = probe.read()?;
//! for (id, c) in &totals.cgroups {
//!     println!("cgroup {id}: {} waits, {} ns in all", c.count, c.wait_ns);
//! }
//! # Ok(()) }
//! ```

pub mod agent;
mod buckets;
pub mod cgroupfs;
mod config;
mod error;
pub mod fallback;
pub mod inprogress;
pub mod maps;
mod memory;
pub mod nsdir;
pub mod observe;
mod probe;
mod publisher;
pub mod reading;
pub mod schema;
pub mod step;
#[cfg(feature = "testing")]
pub mod testing;
pub mod thread_waits;
pub mod trust;
pub mod verdict;
pub mod view;

#[allow(
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    unused_imports
)]
mod skel {
    // Generated with the object it embeds by crates/topdeck-sched-build,
    // whose test checks both against src/bpf.
    include!("bpf/sched.skel.rs");
}

pub use agent::{Agent, AgentConfig};
pub use buckets::BucketTable;
pub use cgroupfs::{CgroupNames, Hierarchy, Throttling};
pub use error::{Error, ErrorKind, Result};
pub use maps::Totals;
pub use observe::{observe, Observation, RecordedAgent, Report};
pub use probe::{
    default_slots, kernel_keeps_sched_info, unavailable, BpfStats, Clock, Flavour, LoadOptions,
    Probe, ProgramStats, SLOT_BUDGET,
};
pub use reading::AgentReading;
pub use schema::REGISTRY_NAME;
pub use thread_waits::ThreadWaitsPin;
pub use topdeck_procfs::cgroup::container_name;
pub use view::SchedView;
