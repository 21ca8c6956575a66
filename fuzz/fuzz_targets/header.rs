// SPDX-License-Identifier: Apache-2.0
//! `Header::parse` on any bytes, against the length of the bytes and
//! against the largest file there may be. A header that parses must
//! describe sections inside the file, in order, and a writer-sized header
//! must come back unchanged through `Header::encode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdeck_format::layout::*;
use topdeck_format::Header;

fuzz_target!(|data: &[u8]| {
    for actual in [data.len() as u64, MAX_FILE_LEN] {
        let Ok(h) = Header::parse(data, actual) else {
            continue;
        };
        assert!(h.file_len <= actual && h.file_len <= MAX_FILE_LEN);
        assert!(h.desc_count <= h.desc_capacity && h.shards_in_use <= h.shard_count);
        let table_end = h.desc_offset + u64::from(h.desc_capacity) * u64::from(h.desc_len);
        assert!(table_end <= h.strings_offset);
        assert!(h.strings_offset + h.strings_len <= h.shared_offset);
        assert!(h.shared_offset + h.shared_len <= h.shards_offset);
        assert!(h.shard_offset(h.shard_count) + h.shard_len <= h.file_len);
        if h.desc_offset >= HEADER_LEN as u64 {
            let mut page = vec![0u8; HEADER_LEN];
            h.encode(&mut page);
            let version = u32::from(h.major) << 16 | u32::from(h.minor);
            page[VERSION_OFFSET..][..4].copy_from_slice(&version.to_le_bytes());
            page[DESC_COUNT_OFFSET..][..4].copy_from_slice(&h.desc_count.to_le_bytes());
            page[SHARDS_IN_USE_OFFSET..][..4].copy_from_slice(&h.shards_in_use.to_le_bytes());
            assert_eq!(Header::parse(&page, actual).as_ref(), Ok(&h));
        }
    }
});
