// SPDX-License-Identifier: Apache-2.0
//! Reading the probe's maps: whole per-CPU hash maps in a few batched
//! syscalls (`BPF_MAP_LOOKUP_BATCH`, which libbpf-rs offers only for maps
//! that are not per-CPU), decoded through the skeleton's generated types and
//! summed over CPUs.

use std::collections::HashMap;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::error::{Error, ErrorKind, Result};
use crate::skel::types::{td_cgroup_stats, td_pair, td_pair_stats};

// SAFETY: these are `#[repr(C)]` structs of `u64` fields, arrays of `u64`
// and arrays of structs of three `u64` (td_culprit), generated from the BPF
// object's BTF: every bit pattern is valid and there is no padding.
unsafe impl plain::Plain for td_cgroup_stats {}
// SAFETY: as above, two `u64` fields.
unsafe impl plain::Plain for td_pair {}
// SAFETY: as above, two `u64` fields.
unsafe impl plain::Plain for td_pair_stats {}

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
}

pub(crate) fn decode_cgroup(per_cpu: &[u8], stride: usize, nr_buckets: usize) -> CgroupTotals {
    let mut t = CgroupTotals {
        buckets: vec![0; nr_buckets],
        ..Default::default()
    };
    let mut s = td_cgroup_stats::default();
    for chunk in per_cpu.chunks_exact(stride) {
        plain::copy_from_bytes(&mut s, chunk).expect("a per-CPU value holds a td_cgroup_stats");
        for (sum, v) in t.buckets.iter_mut().zip(s.buckets.iter()) {
            *sum = sum.wrapping_add(*v);
        }
        t.zero = t.zero.wrapping_add(s.zero);
        t.count = t.count.wrapping_add(s.count);
        t.wait_ns = t.wait_ns.wrapping_add(s.wait_ns);
        t.oncpu_ns = t.oncpu_ns.wrapping_add(s.oncpu_ns);
        for (sum, v) in t.switch_out.iter_mut().zip(s.switch_out) {
            *sum = sum.wrapping_add(v);
        }
        // Each CPU fills its own slots in its own order: merge by culprit.
        for c in s.culprits.iter().filter(|c| c.key != 0) {
            let culprit = c.key - 1;
            match t.culprits.iter_mut().find(|(id, _)| *id == culprit) {
                Some((_, p)) => {
                    p.wait_ns = p.wait_ns.wrapping_add(c.wait_ns);
                    p.count = p.count.wrapping_add(c.count);
                }
                None => t.culprits.push((
                    culprit,
                    PairTotals {
                        wait_ns: c.wait_ns,
                        count: c.count,
                    },
                )),
            }
        }
    }
    t.culprits.sort_unstable_by_key(|(id, _)| *id);
    t
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
    let mut token_in = [0u8; 8];
    let mut token_out = [0u8; 8];
    let mut first = true;
    loop {
        let mut keys = vec![0u8; key_size * batch as usize];
        let mut values = vec![0u8; stride * batch as usize];
        let mut count = batch;
        #[allow(clippy::needless_update)]
        let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
            sz: mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
            ..Default::default()
        };
        // SAFETY: `keys` and `values` hold `count` keys and per-CPU values
        // of the map's sizes; the tokens are 8 bytes, at least the 4 of a
        // hash map's batch token; `opts` is initialised with its size.
        let ret = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
                fd.as_raw_fd(),
                if first {
                    std::ptr::null_mut()
                } else {
                    token_in.as_mut_ptr().cast()
                },
                token_out.as_mut_ptr().cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let err = (ret < 0).then(io::Error::last_os_error);
        let done = match &err {
            None => false,
            Some(e) if e.raw_os_error() == Some(libc::ENOENT) => true,
            // One hash bucket holds more entries than the batch: retry bigger.
            Some(e) if e.raw_os_error() == Some(libc::ENOSPC) && batch < 1 << 16 => {
                batch *= 4;
                continue;
            }
            Some(e) => {
                return Err(Error::with_source(
                    ErrorKind::Map,
                    format!("batched lookup in BPF map {name}"),
                    io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
                ))
            }
        };
        for i in 0..count as usize {
            out.push((
                keys[i * key_size..(i + 1) * key_size].to_vec(),
                values[i * stride..(i + 1) * stride].to_vec(),
            ));
        }
        if done {
            return Ok(out);
        }
        token_in = token_out;
        first = false;
    }
}
