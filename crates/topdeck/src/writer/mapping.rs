// SPDX-License-Identifier: Apache-2.0
//! The writer's view of its file: a shared read-write mapping and the
//! layout it was created with. Every handle keeps it alive through an `Arc`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::MmapRaw;
use topdeck_format::layout::{SHARDS_IN_USE_OFFSET, WORD};
use topdeck_format::Header;

/// A writable mapping of one registry file.
#[derive(Debug)]
pub(crate) struct Mapping {
    map: MmapRaw,
    pub(crate) header: Header,
}

impl Mapping {
    pub(crate) fn new(map: MmapRaw, header: Header) -> Self {
        debug_assert!(map.len() as u64 >= header.file_len);
        Self { map, header }
    }

    /// Pointer to byte `off` of the file.
    pub(crate) fn ptr(&self, off: u64) -> *mut u8 {
        assert!(off < self.header.file_len, "offset {off} outside the file");
        // SAFETY: `off` is inside the mapping, checked just above.
        unsafe { self.map.as_mut_ptr().add(off as usize) }
    }

    /// The word at `off`, which must be 8-aligned and inside the file.
    pub(crate) fn word(&self, off: u64) -> &AtomicU64 {
        assert!(off % WORD as u64 == 0 && off + WORD as u64 <= self.header.file_len);
        // SAFETY: in bounds and aligned (the mapping is page-aligned and off
        // is 8-aligned); the memory lives as long as `self`, and all
        // concurrent access to value words goes through atomics.
        unsafe { &*(self.ptr(off) as *const AtomicU64) }
    }

    /// The 32-bit header word at `off`.
    pub(crate) fn word32(&self, off: usize) -> &AtomicU32 {
        assert!(off % 4 == 0 && off + 4 <= topdeck_format::layout::HEADER_LEN);
        // SAFETY: inside the header page, 4-aligned, lives as long as `self`.
        unsafe { &*(self.ptr(off as u64) as *const AtomicU32) }
    }

    /// Copies `bytes` to `off`. Only for bytes no reader looks at until a
    /// later release store publishes them.
    pub(crate) fn write(&self, off: u64, bytes: &[u8]) {
        assert!(off + bytes.len() as u64 <= self.header.file_len);
        // SAFETY: the range is inside the mapping (checked above) and not yet
        // published, so nothing else reads or writes it concurrently.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr(off), bytes.len()) }
    }

    /// Raises `shards_in_use` to cover the first `n` thread indices.
    pub(crate) fn publish_shards_in_use(&self, n: u32) {
        let n = n.min(self.header.shard_count);
        self.word32(SHARDS_IN_USE_OFFSET)
            .fetch_max(n, Ordering::Release);
    }

    /// Shards a reader (or an in-process `get`) must sum: those in use, then overflow.
    pub(crate) fn shards_to_read(&self) -> impl Iterator<Item = u32> {
        let in_use = self.word32(SHARDS_IN_USE_OFFSET).load(Ordering::Acquire);
        (0..in_use).chain(std::iter::once(self.header.shard_count))
    }
}
