// SPDX-License-Identifier: Apache-2.0
//! `RawDescriptor::parse` on any 64 bytes, against areas of fuzzed sizes,
//! then `MetricStrings::decode` of what it references in a string area of
//! fuzzed bytes. A descriptor that parses must reference only its areas,
//! come back unchanged through `RawDescriptor::encode`, and, for a
//! histogram, have bucket bounds that the exponential maths computes
//! without panicking, in increasing order.
//!
//! Input: three little-endian `u32`s (string area, shard and shared area
//! lengths, each capped at the format's limit), the descriptor, then the
//! string area's first bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdeck_format::exponential::upper_bound;
use topdeck_format::layout::*;
use topdeck_format::{Capacity, Header, MetricKind, MetricStrings, RawDescriptor};

fuzz_target!(|data: &[u8]| {
    let Some((sizes, rest)) = data.split_first_chunk::<12>() else {
        return;
    };
    let Some((desc, strings)) = rest.split_first_chunk::<DESCRIPTOR_LEN>() else {
        return;
    };
    let size = |i: usize| u64::from(u32::from_le_bytes(sizes[i * 4..][..4].try_into().unwrap()));
    let mut header = Header::new(Capacity::default(), 1, 1, 1, "fuzz", "main");
    header.strings_len = size(0).min(MAX_STRINGS_LEN);
    header.shard_len = size(1).min(MAX_SHARD_LEN) & !7;
    header.shared_len = size(2).min(MAX_SHARED_LEN) & !7;
    let Ok(d) = RawDescriptor::parse(desc, &header) else {
        return;
    };
    assert!(d.strings_end() <= header.strings_len);
    let area = if d.kind.is_sharded() {
        header.shard_len
    } else {
        header.shared_len
    };
    assert!(d.value_end() <= area && d.value_offset % WORD as u64 == 0);
    let mut again = [0u8; DESCRIPTOR_LEN];
    d.encode(&mut again);
    // Compared as bytes: a gauge's unused zero threshold may be NaN.
    let back = RawDescriptor::parse(&again, &header).expect("an encoded descriptor parses");
    let mut twice = [0u8; DESCRIPTOR_LEN];
    back.encode(&mut twice);
    assert_eq!(again, twice);
    if d.kind == MetricKind::Histogram {
        let r = d.bucket_range();
        let mut prev = r.zero_threshold();
        for i in 0..r.bucket_count as i32 {
            let bound = upper_bound(r.schema, r.min_index + i);
            assert!(bound >= prev, "bounds out of order in {r:?} at {i}");
            prev = bound;
        }
        assert_eq!(prev, r.max_bound());
    }
    if let Ok(s) = MetricStrings::decode(&d, strings) {
        assert!(!s.name.is_empty());
        assert!(s.labels.len() <= topdeck_format::names::MAX_LABELS);
    }
});
