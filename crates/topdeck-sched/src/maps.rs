// SPDX-License-Identifier: Apache-2.0
//! Reading the probe's maps: whole per-CPU hash maps, and the used part of
//! the per-CPU slot array, in a few batched syscalls
//! (`BPF_MAP_LOOKUP_BATCH`, which libbpf-rs offers only for maps that are
//! not per-CPU), decoded through the skeleton's generated types and summed
//! over CPUs.

use std::collections::HashMap;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::error::{Error, ErrorKind, Result};
use crate::skel::types::{td_cgroup_stats, td_pair, td_pair_stats, td_running};

// SAFETY: these are `#[repr(C)]` structs of `u64` fields, arrays of `u64`
// and arrays of structs of three `u64` (td_culprit), generated from the BPF
// object's BTF: every bit pattern is valid and there is no padding.
unsafe impl plain::Plain for td_cgroup_stats {}
// SAFETY: as above, two `u64` fields.
unsafe impl plain::Plain for td_pair {}
// SAFETY: as above, two `u64` fields.
unsafe impl plain::Plain for td_pair_stats {}
// SAFETY: as above: a td_place (a `u64`, two `u32`), two `u64`, two
// `u32`: no padding.
unsafe impl plain::Plain for td_running {}

/// Number of causes of a switch-out (`TD_NR_CAUSES`).
pub const NR_CAUSES: usize = 3;
/// Names of the causes, in `enum td_cause` order, as published.
pub const CAUSES: [&str; NR_CAUSES] = ["same_cgroup", "other_cgroup", "system"];
/// Number of drop reasons (`TD_NR_DROPS`).
pub const NR_DROPS: usize = 4;
/// Names of the drop reasons, in `enum td_drop` order, as published.
pub const DROPS: [&str; NR_DROPS] = ["timestamp_full", "cgroup_full", "pair_full", "no_timestamp"];
/// The culprit id charged for idle CPUs and kernel threads (`TD_CGROUP_SYSTEM`).
pub const CGROUP_SYSTEM: u64 = 0;

/// One cgroup's totals since the probe was loaded, summed over CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupTotals {
    /// Run-queue waits per bucket (see [`crate::BucketTable`]).
    pub buckets: Vec<u64>,
    /// Waits in the zero bucket.
    pub zero: u64,
    /// Number of waits.
    pub count: u64,
    /// Sum of the waits, ns.
    pub wait_ns: u64,
    /// Time on CPU, ns.
    pub oncpu_ns: u64,
    /// Switch-outs while runnable, by [`CAUSES`].
    pub switch_out: [u64; NR_CAUSES],
    /// Wait charged to culprits in the cgroup's own slots, by culprit id;
    /// [`Totals::pairs`] merges these with the `pairs` map.
    pub culprits: Vec<(u64, PairTotals)>,
}

/// Wait charged to one (victim, culprit) pair since the probe was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PairTotals {
    /// Total wait, ns.
    pub wait_ns: u64,
    /// Number of waits.
    pub count: u64,
}

/// Everything the probe has counted, at one read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Totals {
    /// Per cgroup id.
    pub cgroups: HashMap<u64, CgroupTotals>,
    /// Per (victim cgroup id, culprit cgroup id); culprit
    /// [`CGROUP_SYSTEM`] for idle CPUs and kernel threads.
    pub pairs: HashMap<(u64, u64), PairTotals>,
    /// Samples lost, by [`DROPS`].
    pub drops: [u64; NR_DROPS],
    /// How many of `cgroups` are kept in the hash beyond the probe's slots
    /// (one hash lookup per switch each) rather than in a slot.
    pub in_hash: usize,
    /// How many are kept in a slot. A cgroup forgotten while it still had
    /// tasks can be in both for a while (its figures are then summed).
    pub in_slots: usize,
}

/// One wait still in progress at a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Waiting {
    /// The waiting task.
    pub pid: u32,
    /// Its cgroup id (the victim).
    pub cgroup: u64,
    /// When it became runnable, ns on the probe's clock.
    pub since_ns: u64,
    /// The time of the read, on the same clock.
    pub now_ns: u64,
    /// The cgroup running on the CPU it waits for, [`CGROUP_SYSTEM`] for an
    /// idle CPU, a kernel thread or a root-cgroup task: the culprit a
    /// finished wait would be charged to if the task ran now.
    pub culprit: u64,
}

impl Waiting {
    /// How long it has waited so far, ns.
    pub fn elapsed_ns(&self) -> u64 {
        self.now_ns.saturating_sub(self.since_ns)
    }
}

/// Size of `struct td_waiting` (sched.h): three `u64`, then `pid` and
/// `cpu` as `u32`. Decoded by hand: the skeleton generates types only for
/// what its maps and globals use, and the iterator's records are neither.
const WAITING_SIZE: usize = 32;

/// Decodes the task iterator's records, naming each one's culprit from the
/// per-CPU `running` values (`running[cpu]` is who holds that CPU).
pub(crate) fn decode_waiting(records: &[u8], running: &[Vec<u8>]) -> Vec<Waiting> {
    let mut r = td_running::default();
    let u64_at = |b: &[u8], i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    records
        .chunks_exact(WAITING_SIZE)
        .map(|b| {
            let (cgroup, since, now, pid, cpu) = (
                u64_at(b, 0),
                u64_at(b, 8),
                u64_at(b, 16),
                u32_at(b, 24),
                u32_at(b, 28),
            );
            let culprit = match running.get(cpu as usize) {
                Some(v) if plain::copy_from_bytes(&mut r, v).is_ok() => {
                    match r.place.system != 0 || r.pid == 0 {
                        true => CGROUP_SYSTEM,
                        false => r.place.cgroup,
                    }
                }
                _ => CGROUP_SYSTEM,
            };
            Waiting {
                pid,
                cgroup,
                since_ns: since,
                now_ns: now,
                culprit,
            }
        })
        .collect()
}

/// One cgroup's per-CPU values summed. For a slot (`owner` given), only
/// the CPUs whose copy names that cgroup: a copy a program on another CPU
/// wrote into after `forget` zeroed it, or one not yet claimed on its CPU,
/// is not this cgroup's.
pub(crate) fn decode_cgroup(
    per_cpu: &[u8],
    stride: usize,
    nr_buckets: usize,
    owner: Option<u64>,
) -> CgroupTotals {
    let mut t = CgroupTotals {
        buckets: vec![0; nr_buckets],
        ..Default::default()
    };
    let mut s = td_cgroup_stats::default();
    for chunk in per_cpu.chunks_exact(stride) {
        plain::copy_from_bytes(&mut s, chunk).expect("a per-CPU value holds a td_cgroup_stats");
        if owner.is_some_and(|id| s.owner != id) {
            continue;
        }
        // Each CPU fills its own culprit slots in its own order.
        t.add_parts(
            &s.buckets,
            [s.zero, s.count, s.wait_ns, s.oncpu_ns],
            s.switch_out,
            s.culprits
                .iter()
                .filter(|c| c.key != 0)
                .map(|c| (c.key - 1, c.wait_ns, c.count)),
        );
    }
    t.culprits.sort_unstable_by_key(|(id, _)| *id);
    t
}

impl CgroupTotals {
    /// Adds `other`, the same cgroup's statistics from another place (a
    /// cgroup forgotten while it still had tasks can be counted both in
    /// the hash and in a slot until its old tasks are placed again).
    pub(crate) fn add(&mut self, other: &CgroupTotals) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        self.add_parts(
            &other.buckets,
            [other.zero, other.count, other.wait_ns, other.oncpu_ns],
            other.switch_out,
            other
                .culprits
                .iter()
                .map(|(id, p)| (*id, p.wait_ns, p.count)),
        );
        self.culprits.sort_unstable_by_key(|(id, _)| *id);
    }

    /// Adds buckets, `[zero, count, wait_ns, oncpu_ns]`, switch-outs and
    /// `(culprit, wait_ns, count)`, merging culprits by id.
    fn add_parts(
        &mut self,
        buckets: &[u64],
        [zero, count, wait_ns, oncpu_ns]: [u64; 4],
        switch_out: [u64; NR_CAUSES],
        culprits: impl Iterator<Item = (u64, u64, u64)>,
    ) {
        for (sum, v) in self.buckets.iter_mut().zip(buckets) {
            *sum = sum.wrapping_add(*v);
        }
        self.zero = self.zero.wrapping_add(zero);
        self.count = self.count.wrapping_add(count);
        self.wait_ns = self.wait_ns.wrapping_add(wait_ns);
        self.oncpu_ns = self.oncpu_ns.wrapping_add(oncpu_ns);
        for (sum, v) in self.switch_out.iter_mut().zip(switch_out) {
            *sum = sum.wrapping_add(v);
        }
        for (culprit, wait_ns, count) in culprits {
            match self.culprits.iter_mut().find(|(id, _)| *id == culprit) {
                Some((_, p)) => {
                    p.wait_ns = p.wait_ns.wrapping_add(wait_ns);
                    p.count = p.count.wrapping_add(count);
                }
                None => self.culprits.push((culprit, PairTotals { wait_ns, count })),
            }
        }
    }
}

pub(crate) fn decode_pair(key: &[u8], per_cpu: &[u8], stride: usize) -> ((u64, u64), PairTotals) {
    let mut k = td_pair::default();
    plain::copy_from_bytes(&mut k, key).expect("a key holds a td_pair");
    let mut t = PairTotals::default();
    let mut v = td_pair_stats::default();
    for chunk in per_cpu.chunks_exact(stride) {
        plain::copy_from_bytes(&mut v, chunk).expect("a per-CPU value holds a td_pair_stats");
        t.wait_ns = t.wait_ns.wrapping_add(v.wait_ns);
        t.count = t.count.wrapping_add(v.count);
    }
    ((k.victim, k.culprit), t)
}

/// Size of one CPU's copy of a per-CPU value: rounded up to 8 bytes.
pub(crate) fn percpu_stride(value_size: usize) -> usize {
    value_size.next_multiple_of(8)
}

/// Every (key, all CPUs' values) of a per-CPU hash map, `ncpus` values each.
pub(crate) fn lookup_all_percpu(
    fd: BorrowedFd<'_>,
    name: &str,
    key_size: usize,
    value_size: usize,
    ncpus: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let stride = percpu_stride(value_size) * ncpus;
    let mut batch: u32 = 256;
    let mut out = Vec::new();
    // The batch token of hash maps is a bucket index (u32); 8 bytes is room enough.
    let mut token = None;
    loop {
        let mut keys = vec![0u8; key_size * batch as usize];
        let mut values = vec![0u8; stride * batch as usize];
        let (count, next) = match lookup_batch(fd, token, &mut keys, &mut values, batch) {
            // One hash bucket holds more entries than the batch: retry bigger.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && batch < 1 << 16 => {
                batch *= 4;
                continue;
            }
            r => r.map_err(|e| batch_error(name, e))?,
        };
        for i in 0..count {
            out.push((
                keys[i * key_size..(i + 1) * key_size].to_vec(),
                values[i * stride..(i + 1) * stride].to_vec(),
            ));
        }
        match next {
            Some(t) => token = Some(t),
            None => return Ok(out),
        }
    }
}

/// All CPUs' values of up to `n` entries of a per-CPU array from index
/// `from`, in one batched call, into `out` (`ncpus` values per entry): how
/// many entries it holds, fewer at the array's end.
pub(crate) fn lookup_percpu_range(
    fd: BorrowedFd<'_>,
    name: &str,
    from: u32,
    n: u32,
    value_size: usize,
    ncpus: usize,
    out: &mut Vec<u8>,
) -> Result<usize> {
    let stride = percpu_stride(value_size) * ncpus;
    let mut keys = vec![0u8; 4 * n as usize];
    out.clear();
    out.resize(stride * n as usize, 0);
    // An array's batch goes on after the index it is given.
    let token = from.checked_sub(1).map(|last| {
        let mut t = [0u8; 8];
        t[..4].copy_from_slice(&last.to_ne_bytes());
        t
    });
    let (count, _) =
        lookup_batch(fd, token, &mut keys, out, n).map_err(|e| batch_error(name, e))?;
    out.truncate(count * stride);
    Ok(count)
}

fn batch_error(name: &str, e: io::Error) -> Error {
    Error::with_source(
        ErrorKind::Map,
        format!("batched lookup in BPF map {name}"),
        io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
    )
}

/// One `BPF_MAP_LOOKUP_BATCH` of up to `batch` entries after `token`
/// (from the start when `None`): how many it returned, and the token to
/// go on from, `None` when the map is done.
fn lookup_batch(
    fd: BorrowedFd<'_>,
    token: Option<[u8; 8]>,
    keys: &mut [u8],
    values: &mut [u8],
    batch: u32,
) -> io::Result<(usize, Option<[u8; 8]>)> {
    let mut token_in = token.unwrap_or_default();
    let mut token_out = [0u8; 8];
    let mut count = batch;
    #[allow(clippy::needless_update)]
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `keys` and `values` hold `batch` keys and values of the
    // map's sizes (the callers size them so); the tokens are 8 bytes, at
    // least the 4 of a hash or array map's batch token; `opts` is
    // initialised with its size.
    let ret = unsafe {
        libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
            fd.as_raw_fd(),
            match token {
                Some(_) => token_in.as_mut_ptr().cast(),
                None => std::ptr::null_mut(),
            },
            token_out.as_mut_ptr().cast(),
            keys.as_mut_ptr().cast(),
            values.as_mut_ptr().cast(),
            &mut count,
            &opts,
        )
    };
    match (ret < 0).then(io::Error::last_os_error) {
        None => Ok((count as usize, Some(token_out))),
        Some(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok((count as usize, None)),
        Some(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 4242;
    const B: u64 = 77;

    /// One CPU's copy of a slot: `owner`, `count` waits of 1 µs each, all
    /// charged to culprit `B`.
    fn copy(owner: u64, count: u64) -> td_cgroup_stats {
        let mut s = td_cgroup_stats {
            owner,
            count,
            wait_ns: count * 1000,
            ..Default::default()
        };
        s.buckets[3] = count;
        s.culprits[0].key = B + 1;
        s.culprits[0].wait_ns = count * 1000;
        s.culprits[0].count = count;
        s
    }

    fn bytes(copies: &[td_cgroup_stats]) -> (Vec<u8>, usize) {
        let stride = percpu_stride(mem::size_of::<td_cgroup_stats>());
        let mut v = vec![0u8; stride * copies.len()];
        for (chunk, c) in v.chunks_exact_mut(stride).zip(copies) {
            // SAFETY: td_cgroup_stats is plain data (see the Plain impl).
            let b = unsafe { plain::as_bytes(c) };
            chunk[..b.len()].copy_from_slice(b);
        }
        (v, stride)
    }

    #[test]
    fn a_slot_counts_only_the_cpus_whose_copy_names_its_cgroup() {
        // CPU 0 counted A; CPU 1 holds what was written after a forget
        // zeroed it (owner 0); CPU 2 still names the slot's last cgroup.
        let (v, stride) = bytes(&[copy(A, 5), copy(0, 7), copy(B, 11)]);
        let t = decode_cgroup(&v, stride, 8, Some(A));
        assert_eq!((t.count, t.wait_ns, t.buckets[3]), (5, 5000, 5));
        assert_eq!(
            t.culprits,
            vec![(
                B,
                PairTotals {
                    wait_ns: 5000,
                    count: 5
                }
            )]
        );
        // The hash has no owners: every CPU counts.
        let t = decode_cgroup(&v, stride, 8, None);
        assert_eq!(t.count, 23);
    }

    #[test]
    fn a_cgroup_in_the_hash_and_in_a_slot_is_the_sum_of_both() {
        let (v, stride) = bytes(&[copy(A, 5), copy(A, 2)]);
        let mut hashed = decode_cgroup(&v, stride, 8, None);
        let (v, stride) = bytes(&[copy(A, 3)]);
        let mut slot = decode_cgroup(&v, stride, 8, Some(A));
        slot.culprits.push((
            1,
            PairTotals {
                wait_ns: 9,
                count: 1,
            },
        ));
        hashed.add(&slot);
        assert_eq!(
            (hashed.count, hashed.wait_ns, hashed.buckets[3]),
            (10, 10_000, 10)
        );
        assert_eq!(
            hashed.culprits,
            vec![
                (
                    1,
                    PairTotals {
                        wait_ns: 9,
                        count: 1
                    }
                ),
                (
                    B,
                    PairTotals {
                        wait_ns: 10_000,
                        count: 10
                    }
                )
            ]
        );
    }
}
