// SPDX-License-Identifier: Apache-2.0
//! The thread-waits array: each thread's cumulative run-queue wait, kept by
//! the agent's BPF probe in a frozen, memory-mappable BPF array that every
//! process may map read-only and read with plain loads (docs/FORMAT.md,
//! "Thread waits"). This module is the contract between the probe that
//! writes it (`topdeck-sched`, `sched.h`) and the readers (`topdeck`'s
//! timer, the observers): entry sizes, the header's fields, where a
//! thread's slot is.
//!
//! The array is a BPF array of [`ENTRY_BYTES`]-byte entries. Entries 0 and
//! 1 are the header (one cache line that only changes when the agent goes,
//! so readers keep it cached); the slot of host thread id `tid` is entry
//! `tid + HEADER_ENTRIES`. Every field is a native-endian `u64` written by
//! BPF programs only: user space cannot write a frozen map.
//!
//! ```
//! use topdeck_format::waits;
//! assert_eq!(waits::slot_offset(1), 3 * waits::ENTRY_BYTES);
//! assert_eq!(waits::entries_for(32_768), 32_770);
//! assert_eq!(waits::bytes_for(32_768), 32_770 * 32);
//! ```

/// Bytes per entry: four `u64`s.
pub const ENTRY_BYTES: usize = 32;

/// Entries the header takes before the first thread's slot.
pub const HEADER_ENTRIES: usize = 2;

/// `header.magic`: "TDWT" read as a little-endian `u32`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"TDWT");

/// `header.version` of this layout.
pub const VERSION: u32 = 1;

/// `header.state` while the agent that owns the array runs.
pub const LIVE: u64 = 1;

/// `header.state` once its agent has gone (stopped, or killed: the probe
/// marks it as the agent's last thread exits). Terminal: an array never
/// comes back to life; a restarted agent pins a new one.
pub const GONE: u64 = 2;

/// Where the agent pins the array by default, in a root-owned directory of
/// a bpffs mount.
pub const DEFAULT_PIN: &str = "/sys/fs/bpf/topdeck/thread_waits";

/// The environment variable naming another pin (tests, a second agent);
/// `off` turns the per-request wait off in writers.
pub const PIN_ENV: &str = "TOPDECK_THREAD_WAITS";

/// Default cap on the array's memory: thread ids past it have no slot.
pub const DEFAULT_MAX_BYTES: usize = 32 << 20;

/// Byte offsets of the header's fields from the start of the array.
pub mod header {
    /// `u32`: [`super::MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u32`: [`super::VERSION`].
    pub const VERSION: usize = 4;
    /// `u64`: [`super::LIVE`] or [`super::GONE`] (0 before the agent set it up).
    pub const STATE: usize = 8;
    /// `u64`: `CLOCK_MONOTONIC` ns when the agent created the array: tells
    /// one array from the next.
    pub const STARTED_NS: usize = 16;
    /// `u32`: entries in the array, header included.
    pub const ENTRIES: usize = 24;
    /// `u32`: the agent's process id on the host (the initial pid
    /// namespace's, as thread ids are), whatever namespace it runs in.
    pub const AGENT_PID: usize = 28;
}

/// Byte offsets of a slot's fields from the slot's start; each a `u64` of
/// nanoseconds, cumulative since the array was created.
pub mod slot {
    /// All run-queue wait.
    pub const TOTAL: usize = 0;
    /// The part spent behind a task of the thread's own cgroup.
    pub const OWN: usize = 8;
    /// The part spent behind a task of another cgroup.
    pub const OTHER: usize = 16;
    /// The part spent behind idle, a kernel thread or the root cgroup.
    pub const SYSTEM: usize = 24;
}

/// Entries for a host whose highest thread id is below `pid_max`.
pub const fn entries_for(pid_max: usize) -> usize {
    pid_max + HEADER_ENTRIES
}

/// Bytes of an array for `pid_max` thread ids.
pub const fn bytes_for(pid_max: usize) -> usize {
    entries_for(pid_max) * ENTRY_BYTES
}

/// The thread ids an array of at most `max_bytes` covers, for a host's
/// `pid_max`: all of them, or as many as fit.
///
/// ```
/// use topdeck_format::waits;
/// assert_eq!(waits::tids_within(32_768, waits::DEFAULT_MAX_BYTES), 32_768);
/// assert_eq!(waits::tids_within(4_194_304, waits::DEFAULT_MAX_BYTES), 1_048_574);
/// ```
pub const fn tids_within(pid_max: usize, max_bytes: usize) -> usize {
    let fit = max_bytes / ENTRY_BYTES;
    let fit = fit.saturating_sub(HEADER_ENTRIES);
    if pid_max < fit {
        pid_max
    } else {
        fit
    }
}

/// Byte offset of thread `tid`'s slot.
pub const fn slot_offset(tid: u32) -> usize {
    (tid as usize + HEADER_ENTRIES) * ENTRY_BYTES
}

/// One thread's cumulative waits, in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// All run-queue wait.
    pub total: u64,
    /// The part behind a task of the thread's own cgroup.
    pub own: u64,
    /// The part behind a task of another cgroup.
    pub other: u64,
    /// The part behind idle, a kernel thread or the root cgroup.
    pub system: u64,
}

impl Waits {
    /// What was added between `earlier` and `self` (wrapping, as counters).
    pub fn since(&self, earlier: &Waits) -> Waits {
        Waits {
            total: self.total.wrapping_sub(earlier.total),
            own: self.own.wrapping_sub(earlier.own),
            other: self.other.wrapping_sub(earlier.other),
            system: self.system.wrapping_sub(earlier.system),
        }
    }
}

impl std::ops::AddAssign for Waits {
    fn add_assign(&mut self, o: Waits) {
        self.total = self.total.wrapping_add(o.total);
        self.own = self.own.wrapping_add(o.own);
        self.other = self.other.wrapping_add(o.other);
        self.system = self.system.wrapping_add(o.system);
    }
}
