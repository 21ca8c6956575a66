// SPDX-License-Identifier: Apache-2.0
//! The cgroup hierarchy the host's cpu controller lives in, cgroup ids to
//! paths, the throttling counters of `cpu.stat`, and a cgroup's weight,
//! quota and processes.
//!
//! Source of truth: Documentation/admin-guide/cgroup-v1/cgroups.rst and
//! cgroup-v2.rst. A cgroup's id, as BPF sees it (`kn->id`), is the inode
//! number of its directory in cgroupfs, so ids are resolved by walking the
//! hierarchy and matching `st_ino`.
//!
//! # Which hierarchy names a task on a hybrid host
//!
//! A hybrid host mounts the cpu controller as a v1 hierarchy and cgroup v2
//! (no controllers) at [`Hierarchy::unified`]. A task is keyed by
//! ([`attribute`] states the rule over `/proc/<pid>/cgroup`):
//!
//! 1. its v1 cpu cgroup when that is not the v1 root: that is what the
//!    scheduler groups it by, and where its quota and throttling live;
//! 2. else its v2 cgroup when that is not the v2 root: the cpu hierarchy
//!    does not tell it apart (a systemd service without CPU accounting, a
//!    task a runtime placed only in v2), but v2 does;
//! 3. else it is in both roots: `/`, which counts as system.
//!
//! Inode numbers are per hierarchy, so a v2 id could equal a v1 id: the
//! probe sets [`UNIFIED_TAG`] (bit 63) in ids of case 2, and
//! [`CgroupNames`] resolves those under the unified mount. A v2 cgroup is
//! shown by its path alone, like a v1 one: systemd and the container
//! runtimes' systemd drivers use the same paths in both hierarchies, so
//! the path means the same unit either way, and their series merge when
//! both hierarchies name one unit. A v2-keyed cgroup has no v1 cpu group
//! of its own, so no quota: its throttling (read from the cpu hierarchy at
//! that path) is normally absent.

mod hierarchy;
mod limits;
mod names;
mod throttling;

pub use hierarchy::{is_unified, parse_mountinfo, untag, Hierarchy, UNIFIED_TAG};
pub use limits::{limits, parse_cpu_max, parse_v1_quota, weight, Limits, MAX_PIDS};
pub use names::{CgroupNames, MAX_WALK, MAX_WATCHES};
pub use throttling::{parse_cpu_stat, throttling, Throttling};
pub use topdeck_procfs::cgroup::{attribute, Attribution};
