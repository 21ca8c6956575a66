// SPDX-License-Identifier: Apache-2.0
//! A writer's registry file laid out again with its sections packed at
//! 8-byte alignment, which the format allows (docs/FORMAT.md): the same
//! header fields, descriptors, strings and value words in a file of a few
//! KiB instead of megabytes of zero pages, with the writer-specific
//! numbers (pid, start time, creation time) fixed so that the result is
//! the same on every run. The fuzz seeds and the conformance vectors are
//! made this way.

use topdeck_format::layout::*;
use topdeck_format::{Header, RawDescriptor};

use crate::{put_u32, put_u64};

/// The pid a packed file names.
pub const PACKED_PID: u32 = 4242;

fn align8(v: u64) -> u64 {
    v.div_ceil(8) * 8
}

/// `b`, a registry file as its writer left it, packed (see the module docs).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let r = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// r.counter("jobs_total", &[], "Jobs.", "").unwrap().add(3);
/// let file = std::fs::read(r.path()).unwrap();
/// let small = topdeck_tests::packed(&file);
/// assert!(small.len() < 16 * 1024 && file.len() > 1 << 20);
/// let h = topdeck_format::Header::parse(&small, small.len() as u64).unwrap();
/// assert_eq!((h.pid, h.desc_count), (topdeck_tests::PACKED_PID, 1));
/// ```
///
/// # Panics
/// Panics if `b` is not a valid registry file: its callers pack files a
/// real writer just made.
pub fn packed(b: &[u8]) -> Vec<u8> {
    let h = Header::parse(b, b.len() as u64).expect("the writer's file parses");
    let descs: Vec<RawDescriptor> = (0..h.desc_count as u64)
        .map(|i| {
            let at = (h.desc_offset + i * u64::from(h.desc_len)) as usize;
            RawDescriptor::parse(&b[at..at + h.desc_len as usize], &h).unwrap()
        })
        .collect();
    let end = |sharded: bool| {
        descs
            .iter()
            .filter(|d| d.kind.is_sharded() == sharded)
            .map(RawDescriptor::value_end)
            .max()
            .unwrap_or(0)
    };
    let strings_len = align8(descs.iter().map(|d| d.strings_end()).max().unwrap_or(0));
    let (shard_len, shared_len) = (align8(end(true)), align8(end(false)));
    let header_len = align8(HEADER_FIELDS_END as u64);
    let table = u64::from(h.desc_count) * u64::from(h.desc_len);
    let strings_offset = header_len + table;
    let shared_offset = strings_offset + strings_len;
    let shards_offset = shared_offset + shared_len;
    let file_len = shards_offset + (u64::from(h.shards_in_use) + 1) * shard_len;
    let mut out = vec![0u8; file_len as usize];
    out[..HEADER_FIELDS_END].copy_from_slice(&b[..HEADER_FIELDS_END]);
    put_u32(&mut out, HEADER_LEN_OFFSET, header_len as u32);
    put_u32(&mut out, PID_OFFSET, PACKED_PID);
    put_u64(&mut out, START_TICKS_OFFSET, 1);
    put_u64(&mut out, CREATED_UNIX_NS_OFFSET, 0);
    for (off, v) in [
        (FILE_LEN_OFFSET, file_len),
        (DESC_OFFSET_OFFSET, header_len),
        (STRINGS_OFFSET_OFFSET, strings_offset),
        (STRINGS_LEN_OFFSET, strings_len),
        (SHARED_OFFSET_OFFSET, shared_offset),
        (SHARED_LEN_OFFSET, shared_len),
        (SHARDS_OFFSET_OFFSET, shards_offset),
        (SHARD_LEN_OFFSET, shard_len),
    ] {
        put_u64(&mut out, off, v);
    }
    put_u32(&mut out, DESC_CAPACITY_OFFSET, h.desc_count);
    put_u32(&mut out, SHARD_COUNT_OFFSET, h.shards_in_use);
    let mut copy = |to: u64, from: u64, len: u64| {
        let (to, from, len) = (to as usize, from as usize, len as usize);
        out[to..to + len].copy_from_slice(&b[from..from + len]);
    };
    copy(header_len, h.desc_offset, table);
    copy(strings_offset, h.strings_offset, strings_len);
    copy(shared_offset, h.shared_offset, shared_len);
    let shards = (0..h.shards_in_use).chain([h.shard_count]);
    for (i, s) in shards.enumerate() {
        copy(
            shards_offset + i as u64 * shard_len,
            h.shard_offset(s),
            shard_len,
        );
    }
    let packed = Header::parse(&out, file_len).expect("the packed file parses");
    assert_eq!(packed.desc_count, h.desc_count);
    out
}
