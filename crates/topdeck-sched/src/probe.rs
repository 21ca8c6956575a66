// SPDX-License-Identifier: Apache-2.0
//! Loading the BPF programs, choosing tp_btf or raw_tp at run time, and
//! reading their maps.
//!
//! ```no_run
//! # fn main() -> topdeck_sched::Result<()> {
//! let hierarchy = topdeck_sched::Hierarchy::detect()?;
//! let probe = topdeck_sched::Probe::load(&hierarchy)?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let totals = probe.read()?;
//! for (id, c) in &totals.cgroups {
//!     println!("cgroup {id}: {} waits, {} ns", c.count, c.wait_ns);
//! }
//! # Ok(()) }
//! ```

use std::collections::hash_map::Entry;
use std::fmt;
use std::io::Read;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::buckets::{BucketTable, MAX_BUCKETS, SLICES};
use crate::cgroupfs::Hierarchy;
use crate::error::{Error, ErrorKind, Result};
use crate::maps::{self, Totals, NR_DROPS};
use crate::skel::types::td_cgroup_stats;
use crate::skel::{OpenSchedSkel, SchedSkel, SchedSkelBuilder};
use crate::thread_waits::{self, ThreadWaitsPin};

/// `TD_NO_SLOT`: a cgroup whose statistics are in the hash.
const NO_SLOT: u32 = u32::MAX;

/// Bytes the slot array may take over all CPUs by default (it is
/// preallocated): 910 slots on 2 CPUs, the 64-slot floor from 29 CPUs on.
pub const SLOT_BUDGET: usize = 4 << 20;

/// The most bytes of slots one read of the per-CPU array copies at once
/// (one batch), whatever the number of slots and CPUs.
const STATS_READ_BYTES: usize = 1 << 20;

/// Slots for `ncpus` CPUs: [`SLOT_BUDGET`] worth, at least 64, at most
/// 4,096 (the hash's size).
///
/// ```
/// assert_eq!(topdeck_sched::default_slots(2), 910);
/// assert_eq!(topdeck_sched::default_slots(64), 64);
/// ```
pub fn default_slots(ncpus: usize) -> u32 {
    let per_slot = maps::percpu_stride(std::mem::size_of::<td_cgroup_stats>()) * ncpus.max(1);
    (SLOT_BUDGET / per_slot).clamp(64, 4096) as u32
}

/// The event programs' links, and the task iterator's (tp_btf only).
type Links = (Vec<Link>, Option<Link>);

/// How the programs are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// BTF-typed tracepoints: plain loads, task-local storage.
    TpBtf,
    /// Raw tracepoints: probe reads, a pid-keyed LRU hash for timestamps.
    RawTp,
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TpBtf => "tp_btf",
            Self::RawTp => "raw_tp",
        })
    }
}

/// Where timestamps come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// The kernel's own: `sched_info.last_queued`, which the scheduler
    /// stamps at each enqueue, read at `sched_switch` against the run
    /// queue's clock (tp_btf, where the kernel keeps sched_info: see
    /// [`kernel_keeps_sched_info`]). No wakeup programs and no per-task
    /// storage; the clock is the run queue's, so the blind spot of
    /// [`Clock::RunQueue`] applies (the kernel's `run_delay` has it too).
    /// Elsewhere (raw_tp, or no sched_info) it is [`Clock::Ktime`].
    #[default]
    SchedInfo,
    /// `bpf_ktime_get_ns`, stamped by the probe's own wakeup programs:
    /// exact.
    Ktime,
    /// The run queue's own clock, stamped by the probe's own wakeup
    /// programs (tp_btf only): cheaper where the clock helper is dear, but
    /// the last stretch of a wait cut short by a wakeup preemption (up to
    /// a tick) is not seen.
    RunQueue,
}

/// Whether the kernel keeps each task's `sched_info` (CONFIG_SCHED_INFO,
/// maintained: on kernels before 5.14 only with schedstats or delay
/// accounting on): this thread's `/proc/thread-self/schedstat` exists and
/// counts its timeslices, which it would not if the fields were left
/// alone.
pub fn kernel_keeps_sched_info() -> bool {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|t| crate::fallback::parse_schedstat(&t))
        .is_some_and(|(_, slices)| slices > 0)
}

/// How [`Probe::load_opts`] loads the probe.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Force tp_btf or raw_tp (default: tp_btf, else raw_tp).
    pub flavour: Option<Flavour>,
    /// Where timestamps come from.
    pub clock: Clock,
    /// Cgroups in the per-CPU slot array; `None`: [`default_slots`].
    pub slots: Option<u32>,
    /// Where to pin the thread-waits array (docs/FORMAT.md "Thread
    /// waits"); `None` (the default here, so that probes loaded side by
    /// side do not contend for one pin): off, the array is the header
    /// alone and unpinned. The agent pins at
    /// [`topdeck_format::waits::DEFAULT_PIN`].
    pub thread_waits: Option<PathBuf>,
    /// Cap on the thread-waits array's memory: thread ids past it have no
    /// slot.
    pub thread_waits_memory: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            flavour: None,
            clock: Clock::default(),
            slots: None,
            thread_waits: None,
            thread_waits_memory: topdeck_format::waits::DEFAULT_MAX_BYTES,
        }
    }
}

/// The loaded and attached probe. Dropping it detaches and unloads the
/// programs and frees their maps.
pub struct Probe {
    // Field order matters: links detach before the skeleton is destroyed.
    links: Vec<Link>,
    /// The task iterator that lists waits in progress (tp_btf only).
    waiting: Option<Link>,
    skel: SchedSkel<'static>,
    flavour: Flavour,
    table: BucketTable,
    ncpus: usize,
    /// Why tp_btf was not used, when it was not.
    tp_btf_error: Option<String>,
    /// Waits come from the kernel's sched_info (no wakeup programs).
    sched_info: bool,
    /// The thread-waits array's pin, when thread waits are on.
    waits: Option<ThreadWaitsPin>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        // Before the links detach (the fields drop after this): readers
        // must see the array gone before it stops advancing.
        if let Some(pin) = self.waits.take() {
            if let Err(e) = self.mark_gone() {
                eprintln!(
                    "topdeck: could not mark the thread-waits array at {} gone: {e:#}",
                    pin.path().display()
                );
            }
            thread_waits::unpin_if_ours(&pin);
        }
    }
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe")
            .field("flavour", &self.flavour)
            .field("links", &self.links.len())
            .finish_non_exhaustive()
    }
}

/// Why the probe cannot run on this host, checked before trying: `None`
/// when it may.
pub fn unavailable() -> Option<Error> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some(Error::new(
            ErrorKind::Permission,
            "loading BPF programs needs root (CAP_BPF and CAP_PERFMON); run as root, e.g. `sudo topdeck agent`",
        ));
    }
    let btf = Path::new("/sys/kernel/btf/vmlinux");
    if !btf.exists() {
        return Some(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the kernel has no BTF ({} is missing; it needs CONFIG_DEBUG_INFO_BTF=y)",
                btf.display()
            ),
        ));
    }
    None
}

impl Probe {
    /// Loads and attaches the programs: tp_btf if the kernel takes them,
    /// else raw_tp. `hierarchy` says which cgroup ids to record.
    pub fn load(hierarchy: &Hierarchy) -> Result<Self> {
        Self::load_as(hierarchy, None)
    }

    /// Like [`Probe::load`], forcing one flavour when `flavour` is given.
    pub fn load_as(hierarchy: &Hierarchy, flavour: Option<Flavour>) -> Result<Self> {
        Self::load_with(hierarchy, flavour, Clock::default())
    }

    /// Like [`Probe::load_as`], with timestamps from `clock`.
    pub fn load_with(
        hierarchy: &Hierarchy,
        flavour: Option<Flavour>,
        clock: Clock,
    ) -> Result<Self> {
        Self::load_with_slots(hierarchy, flavour, clock, None)
    }

    /// Like [`Probe::load_with`], with room for `slots` cgroups in the
    /// per-CPU array that a switch reaches without a hash lookup (the
    /// default, `None`, is [`default_slots`]); further cgroups are kept in
    /// a hash, at the cost of a lookup per switch.
    pub fn load_with_slots(
        hierarchy: &Hierarchy,
        flavour: Option<Flavour>,
        clock: Clock,
        slots: Option<u32>,
    ) -> Result<Self> {
        Self::load_opts(
            hierarchy,
            &LoadOptions {
                flavour,
                clock,
                slots,
                ..LoadOptions::default()
            },
        )
    }

    /// Loads and attaches the probe as `opts` says; with
    /// `opts.thread_waits`, publishes the thread-waits array there
    /// (header written, frozen, pinned 0666), marked gone and unpinned
    /// when the probe is dropped, marked gone by the kernel if this
    /// process dies first.
    pub fn load_opts(hierarchy: &Hierarchy, opts: &LoadOptions) -> Result<Self> {
        let (flavour, clock, slots) = (opts.flavour, opts.clock, opts.slots);
        if let Some(e) = unavailable() {
            return Err(e);
        }
        let waits_on = opts.thread_waits.is_some();
        let entries = thread_waits::entries(waits_on, opts.thread_waits_memory)?;
        let root = hierarchy.root_id()?;
        let table = BucketTable::new();
        let ncpus = libbpf_rs::num_possible_cpus()
            .map_err(|e| Error::with_source(ErrorKind::Unsupported, "counting possible CPUs", e))?;
        let slots = slots.unwrap_or_else(|| default_slots(ncpus)).max(1);
        let attempt = |f| {
            let load = |clock| {
                Self::try_load(
                    hierarchy.cpu_v1,
                    root,
                    &table,
                    f,
                    clock,
                    slots,
                    (waits_on, entries),
                )
            };
            match clock {
                Clock::SchedInfo if f == Flavour::TpBtf && kernel_keeps_sched_info() => {
                    match load(Clock::SchedInfo)? {
                        (s, l, true) => Ok((s, l, true)),
                        // The programs found a field missing: their own
                        // timestamps instead.
                        _ => load(Clock::Ktime),
                    }
                }
                Clock::SchedInfo => load(Clock::Ktime),
                c => load(c),
            }
        };
        let (skel, (links, waiting), flavour, tp_btf_error) = match flavour {
            Some(f) => {
                let (s, l, si) = attempt(f)?;
                (s, (l, si), f, None)
            }
            None => match attempt(Flavour::TpBtf) {
                Ok((s, l, si)) => (s, (l, si), Flavour::TpBtf, None),
                Err(e) => {
                    let why = format!("{e:#}");
                    let (s, l, si) = attempt(Flavour::RawTp).map_err(|raw| {
                        Error::new(
                            ErrorKind::Load,
                            format!("tp_btf failed ({why}), and raw_tp failed too ({raw:#})"),
                        )
                    })?;
                    (s, (l, si), Flavour::RawTp, Some(why))
                }
            },
        };
        let ((links, waiting), sched_info) = (links, waiting);
        let mut probe = Self {
            links,
            waiting,
            skel,
            flavour,
            table,
            ncpus,
            tp_btf_error,
            sched_info,
            waits: None,
        };
        if let Some(path) = &opts.thread_waits {
            // The kernel's tgid of this process, which its exit programs
            // watch for; the header names the same.
            let tgid = probe
                .skel
                .progs
                .td_waits_start
                .test_run(libbpf_rs::ProgramInput::default())
                .map_err(|e| {
                    Error::with_source(ErrorKind::ThreadWaits, "running td_waits_start", e)
                })?
                .return_value;
            let fd = probe.skel.maps.thread_waits.as_fd().as_raw_fd();
            probe.waits = Some(thread_waits::publish(fd, entries, path, tgid)?);
        }
        Ok(probe)
    }

    /// Marks the thread-waits array gone, through `td_waits_gone` (the
    /// array is frozen: no system call can write it).
    fn mark_gone(&self) -> Result<()> {
        let out = self
            .skel
            .progs
            .td_waits_gone
            .test_run(libbpf_rs::ProgramInput::default())
            .map_err(|e| Error::with_source(ErrorKind::Map, "running td_waits_gone", e))?;
        match out.return_value {
            0 => Ok(()),
            r => Err(Error::new(
                ErrorKind::Map,
                format!("td_waits_gone returned {r}"),
            )),
        }
    }

    /// The thread-waits array's pin, when thread waits are on.
    pub fn thread_waits(&self) -> Option<&ThreadWaitsPin> {
        self.waits.as_ref()
    }

    /// Thread `tid`'s cumulative waits, read with a map lookup (root);
    /// `None` past the array's end.
    pub fn thread_wait_of(&self, tid: u32) -> Option<topdeck_format::waits::Waits> {
        let key = tid.checked_add(topdeck_format::waits::HEADER_ENTRIES as u32)?;
        let v = self
            .skel
            .maps
            .thread_waits
            .lookup(&key.to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        let at = |i: usize| Some(u64::from_ne_bytes(v.get(i..i + 8)?.try_into().ok()?));
        Some(topdeck_format::waits::Waits {
            total: at(topdeck_format::waits::slot::TOTAL)?,
            own: at(topdeck_format::waits::slot::OWN)?,
            other: at(topdeck_format::waits::slot::OTHER)?,
            system: at(topdeck_format::waits::slot::SYSTEM)?,
        })
    }

    fn try_load(
        cpu_v1: bool,
        root: u64,
        table: &BucketTable,
        flavour: Flavour,
        clock: Clock,
        slots: u32,
        (waits_on, entries): (bool, u32),
    ) -> Result<(SchedSkel<'static>, Links, bool)> {
        let load_err = |what: &str, e: libbpf_rs::Error| {
            let kind = match e.kind() {
                libbpf_rs::ErrorKind::PermissionDenied => ErrorKind::Permission,
                _ => ErrorKind::Load,
            };
            Error::with_source(kind, format!("{what} ({flavour})"), e)
        };
        // The skeleton borrows its object storage for as long as it lives;
        // one small allocation per load is leaked so that the probe can own
        // the skeleton without a self-referential struct.
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open: OpenSchedSkel<'static> = SchedSkelBuilder::default()
            .open(storage)
            .map_err(|e| load_err("opening the BPF object", e))?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::new(ErrorKind::Load, "the BPF object has no .rodata"))?;
        rodata.cpu_v1 = cpu_v1;
        rodata.root_cgroup = root;
        rodata.clock_rq = clock == Clock::RunQueue;
        let btf = flavour == Flavour::TpBtf;
        let si = btf && clock == Clock::SchedInfo;
        rodata.sched_info = si;
        rodata.nr_buckets = table.len() as u32;
        rodata.zero_ns = table.zero_ns;
        debug_assert!(table.len() <= MAX_BUCKETS && table.slice_bucket.len() == SLICES);
        rodata.bound_ns[..table.len()].copy_from_slice(&table.bound_ns);
        rodata.slice_bucket.copy_from_slice(&table.slice_bucket);

        let p = &mut open.progs;
        // With sched_info the kernel stamps the wakeups itself.
        for prog in [&mut p.td_wakeup_btf, &mut p.td_wakeup_new_btf] {
            prog.set_autoload(btf && !si);
        }
        p.td_switch_btf.set_autoload(btf);
        p.td_uses_sched_info.set_autoload(si);
        for prog in [
            &mut p.td_wakeup_raw,
            &mut p.td_wakeup_new_raw,
            &mut p.td_switch_raw,
        ] {
            prog.set_autoload(!btf);
        }
        // The iterator reads sched_info or task storage with plain loads:
        // tp_btf only.
        p.td_waiting.set_autoload(btf);
        // The liveness programs only matter for a published array.
        p.td_exit_btf.set_autoload(waits_on && btf);
        p.td_exit_raw.set_autoload(waits_on && !btf);
        p.td_waits_gone.set_autoload(waits_on);
        p.td_waits_start.set_autoload(waits_on);
        if btf {
            // tp_btf keeps timestamps in task storage: the pid map is unused.
            open.maps
                .pid_ts
                .set_max_entries(1)
                .map_err(|e| load_err("shrinking pid_ts", e))?;
        }
        if !si {
            // Only sched_info's switch reads the arrivals.
            open.maps
                .arrivals
                .set_max_entries(1)
                .map_err(|e| load_err("shrinking arrivals", e))?;
        }
        let m = &mut open.maps;
        let in_hash = m.cgroups.max_entries();
        m.stats
            .set_max_entries(slots)
            .and_then(|()| m.free_slots.set_max_entries(slots))
            .and_then(|()| m.slots.set_max_entries(slots.saturating_add(in_hash)))
            .map_err(|e| load_err("sizing the cgroup slots", e))?;
        m.thread_waits
            .set_max_entries(entries)
            .map_err(|e| load_err("sizing the thread-waits array", e))?;
        let skel = open
            .load()
            .map_err(|e| load_err("loading the BPF programs", e))?;
        if si {
            let uses = skel
                .progs
                .td_uses_sched_info
                .test_run(libbpf_rs::ProgramInput::default())
                .map_err(|e| load_err("running td_uses_sched_info", e))?
                .return_value;
            if uses != 1 {
                return Ok((skel, (Vec::new(), None), false));
            }
        }
        // Pushed highest first, so that the lowest pops first.
        for slot in (0..slots).rev() {
            skel.maps
                .free_slots
                .update(&[], &slot.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| load_err("filling free_slots", e))?;
        }
        let mut links = Vec::new();
        for prog in event_progs(&skel, flavour, si) {
            let link = prog.attach().map_err(|e| {
                load_err(&format!("attaching {}", prog.name().to_string_lossy()), e)
            })?;
            links.push(link);
        }
        let p = &skel.progs;
        if waits_on {
            let exit = match btf {
                true => &p.td_exit_btf,
                false => &p.td_exit_raw,
            };
            links.push(
                exit.attach()
                    .map_err(|e| load_err("attaching the agent's exit watch", e))?,
            );
        }
        let waiting = match btf {
            true => Some(
                skel.progs
                    .td_waiting
                    .attach()
                    .map_err(|e| load_err("attaching td_waiting", e))?,
            ),
            false => None,
        };
        Ok((skel, (links, waiting), si))
    }

    /// How the programs are attached.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// Whether waits come from the kernel's sched_info ([`Clock::SchedInfo`]
    /// where the kernel keeps it): then only `sched_switch` has a program.
    pub fn sched_info(&self) -> bool {
        self.sched_info
    }

    /// Why tp_btf was not used, when raw_tp was chosen as the fallback.
    pub fn tp_btf_error(&self) -> Option<&str> {
        self.tp_btf_error.as_deref()
    }

    /// The bucket tables the programs were loaded with.
    pub fn buckets(&self) -> &BucketTable {
        &self.table
    }

    /// Reads every map: all totals since the probe was loaded.
    pub fn read(&self) -> Result<Totals> {
        let m = &self.skel.maps;
        let nb = self.table.len();
        let cg_size = m.cgroups.value_size() as usize;
        let cg_stride = maps::percpu_stride(cg_size);
        let mut placed = Vec::new();
        for (key, value) in m
            .slots
            .lookup_batch(256, MapFlags::ANY, MapFlags::ANY)
            .map_err(|e| Error::with_source(ErrorKind::Map, "reading BPF map slots", e))?
        {
            let id = u64::from_ne_bytes(key[..8].try_into().expect("8-byte key"));
            let slot = u32::from_ne_bytes(value[..4].try_into().expect("4-byte value"));
            if slot != NO_SLOT {
                placed.push((id, slot));
            }
        }
        let hashed = maps::lookup_all_percpu(
            m.cgroups.as_fd(),
            "cgroups",
            m.cgroups.key_size() as usize,
            cg_size,
            self.ncpus,
        )?;
        let in_hash = hashed.len();
        let mut cgroups: std::collections::HashMap<u64, maps::CgroupTotals> = hashed
            .into_iter()
            .map(|(k, v)| {
                let id = u64::from_ne_bytes(k[..8].try_into().expect("8-byte key"));
                (id, maps::decode_cgroup(&v, cg_stride, nb, None))
            })
            .collect();
        // Placed slots in order, a run of consecutive slots (free ones
        // among them) per batched call, each run of bounded size and all
        // into one buffer: the read's memory stays the same however many
        // slots and CPUs there are.
        placed.sort_unstable_by_key(|&(_, slot)| slot);
        let in_slots = placed.len();
        let per_slot = cg_stride * self.ncpus;
        let chunk = (STATS_READ_BYTES / per_slot).max(1) as u32;
        let mut values = Vec::new();
        let mut placed = placed.into_iter().peekable();
        while let Some(&(_, from)) = placed.peek() {
            let n = maps::lookup_percpu_range(
                m.stats.as_fd(),
                "stats",
                from,
                chunk,
                cg_size,
                self.ncpus,
                &mut values,
            )?;
            let end = from.saturating_add(n as u32).max(from.saturating_add(1));
            while let Some((id, slot)) = placed.next_if(|&(_, slot)| slot < end) {
                let at = (slot - from) as usize * per_slot;
                let Some(v) = values.get(at..at + per_slot) else {
                    continue;
                };
                let t = maps::decode_cgroup(v, cg_stride, nb, Some(id));
                match cgroups.entry(id) {
                    Entry::Occupied(mut e) => e.get_mut().add(&t),
                    Entry::Vacant(e) => {
                        e.insert(t);
                    }
                }
            }
        }
        let pair_size = m.pairs.value_size() as usize;
        let pair_stride = maps::percpu_stride(pair_size);
        let mut pairs: std::collections::HashMap<(u64, u64), maps::PairTotals> =
            maps::lookup_all_percpu(
                m.pairs.as_fd(),
                "pairs",
                m.pairs.key_size() as usize,
                pair_size,
                self.ncpus,
            )?
            .into_iter()
            .map(|(k, v)| maps::decode_pair(&k, &v, pair_stride))
            .collect();
        for (&victim, c) in &cgroups {
            for &(culprit, t) in &c.culprits {
                let p = pairs.entry((victim, culprit)).or_default();
                p.wait_ns = p.wait_ns.wrapping_add(t.wait_ns);
                p.count = p.count.wrapping_add(t.count);
            }
        }
        let mut drops = [0u64; NR_DROPS];
        for (i, d) in drops.iter_mut().enumerate() {
            let key = (i as u32).to_ne_bytes();
            let per_cpu = m
                .drops
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(|e| Error::with_source(ErrorKind::Map, "reading BPF map drops", e))?
                .unwrap_or_default();
            *d = per_cpu
                .iter()
                .map(|v| u64::from_ne_bytes(v[..8].try_into().expect("8-byte value")))
                .fold(0, u64::wrapping_add);
        }
        Ok(Totals {
            cgroups,
            pairs,
            drops,
            in_hash,
            in_slots,
        })
    }

    /// The waits in progress now: every task queued on a run queue and not
    /// yet on a CPU since it became runnable, each with the cgroup running
    /// on that CPU now. Empty with the raw_tp flavour, which has no task
    /// iterator. Costs one walk of the tasks in the kernel, at read time.
    pub fn waiting(&self) -> Result<Vec<maps::Waiting>> {
        let Some(link) = &self.waiting else {
            return Ok(Vec::new());
        };
        let mut bytes = Vec::new();
        libbpf_rs::Iter::new(link)
            .map_err(|e| Error::with_source(ErrorKind::Map, "creating the td_waiting iterator", e))?
            .read_to_end(&mut bytes)
            .map_err(|e| {
                Error::with_source(ErrorKind::Map, "reading the td_waiting iterator", e)
            })?;
        // Read after the iterator, so that it names who holds each CPU at
        // least as late as the waits were seen.
        let running = self
            .skel
            .maps
            .running
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| Error::with_source(ErrorKind::Map, "reading BPF map running", e))?
            .unwrap_or_default();
        Ok(maps::decode_waiting(&bytes, &running))
    }

    /// The slot of cgroup `id` in the per-CPU array, `None` when its
    /// statistics are kept in the hash or it has not been seen.
    pub fn slot_of(&self, id: u64) -> Option<u32> {
        let v = self
            .skel
            .maps
            .slots
            .lookup(&id.to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        let slot = u32::from_ne_bytes(v[..4].try_into().ok()?);
        (slot != NO_SLOT).then_some(slot)
    }

    /// Removes a cgroup that no longer exists from the maps, so that they do
    /// not fill up with the dead: its slot is zeroed and freed for the next
    /// new cgroup. Its pairs go too. Fails, saying which step, when its slot
    /// could not be freed (it then stays unused until the probe is loaded
    /// again) or an entry could not be deleted; entries already gone are
    /// not a failure.
    pub fn forget(&self, id: u64, pairs: &[(u64, u64)]) -> Result<()> {
        let m = &self.skel.maps;
        let key = id.to_ne_bytes();
        let failed = |what: &str, e| {
            Error::with_source(ErrorKind::Map, format!("forgetting cgroup {id}: {what}"), e)
        };
        let gone = |r: std::result::Result<(), libbpf_rs::Error>| match r {
            Err(e) if e.kind() != libbpf_rs::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        let slot = self.slot_of(id);
        gone(m.slots.delete(&key)).map_err(|e| failed("deleting its slot entry", e))?;
        if let Some(slot) = slot {
            // Zeroed for tidiness: a slot is zeroed again on each CPU as it
            // is claimed there, and read only where it names its cgroup.
            let zeros = vec![vec![0u8; m.stats.value_size() as usize]; self.ncpus];
            let _ = m
                .stats
                .update_percpu(&slot.to_ne_bytes(), &zeros, MapFlags::ANY);
            m.free_slots
                .update(&[], &slot.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| failed("freeing its slot", e))?;
        }
        gone(m.cgroups.delete(&key)).map_err(|e| failed("deleting its statistics", e))?;
        for &(victim, culprit) in pairs {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&victim.to_ne_bytes());
            key[8..].copy_from_slice(&culprit.to_ne_bytes());
            gone(m.pairs.delete(&key)).map_err(|e| failed("deleting a pair", e))?;
        }
        Ok(())
    }

    /// Run-time statistics of the attached programs (zero unless
    /// [`BpfStats::enable`] is in force).
    pub fn program_stats(&self) -> Result<Vec<ProgramStats>> {
        event_progs(&self.skel, self.flavour, self.sched_info)
            .iter()
            .map(|prog| {
                let name = prog.name().to_string_lossy().into_owned();
                ProgramStats::of_fd(prog.as_fd().as_raw_fd(), &name)
            })
            .collect()
    }
}

/// The event programs that are attached: the wakeups (unless sched_info
/// stamps them) and the switch, of `flavour`.
fn event_progs<'a>(
    skel: &'a SchedSkel<'static>,
    flavour: Flavour,
    sched_info: bool,
) -> Vec<&'a libbpf_rs::ProgramMut<'static>> {
    let p = &skel.progs;
    match (flavour, sched_info) {
        (Flavour::TpBtf, true) => vec![&p.td_switch_btf],
        (Flavour::TpBtf, false) => vec![&p.td_wakeup_btf, &p.td_wakeup_new_btf, &p.td_switch_btf],
        (Flavour::RawTp, _) => vec![&p.td_wakeup_raw, &p.td_wakeup_new_raw, &p.td_switch_raw],
    }
}

/// One program's run-time statistics from `bpf_prog_info`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProgramStats {
    /// Program name (e.g. `td_switch_btf`).
    pub name: String,
    /// Total time spent running, ns (counted only while stats are enabled).
    pub run_time_ns: u64,
    /// Runs (counted only while stats are enabled).
    pub run_cnt: u64,
    /// Runs skipped because the program was already running on that CPU.
    pub recursion_misses: u64,
}

impl ProgramStats {
    /// The statistics of the program behind `fd`.
    pub fn of_fd(fd: i32, name: &str) -> Result<Self> {
        let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of_val(&info) as u32;
        // SAFETY: `info` is a writable bpf_prog_info and `len` its size;
        // the kernel writes at most `len` bytes.
        let ret =
            unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
        if ret < 0 {
            return Err(Error::with_source(
                ErrorKind::Load,
                format!("reading bpf_prog_info of {name}"),
                std::io::Error::from_raw_os_error(-ret),
            ));
        }
        Ok(Self {
            name: name.to_string(),
            run_time_ns: info.run_time_ns,
            run_cnt: info.run_cnt,
            recursion_misses: info.recursion_misses,
        })
    }

    /// Mean ns per run between two reads, `None` without runs.
    pub fn ns_per_run_since(&self, before: &Self) -> Option<f64> {
        let runs = self.run_cnt.checked_sub(before.run_cnt)?;
        let ns = self.run_time_ns.checked_sub(before.run_time_ns)?;
        (runs > 0).then(|| ns as f64 / runs as f64)
    }
}

/// Kernel BPF run-time statistics (`BPF_ENABLE_STATS`), on while this
/// lives. They cost a clock read per program run, so the agent turns them
/// on only while it measures its own cost.
#[derive(Debug)]
pub struct BpfStats {
    _fd: OwnedFd,
}

impl BpfStats {
    /// Turns run-time statistics on for every BPF program until dropped.
    pub fn enable() -> Result<Self> {
        // SAFETY: bpf_enable_stats takes a plain enum and returns a new fd
        // or a negative errno.
        let fd = unsafe {
            libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
        };
        if fd < 0 {
            return Err(Error::with_source(
                ErrorKind::Unsupported,
                "enabling BPF run-time statistics (BPF_ENABLE_STATS)",
                std::io::Error::from_raw_os_error(-fd),
            ));
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { _fd: fd })
    }
}
