// SPDX-License-Identifier: Apache-2.0
//! `MetricStrings::decode_at` with fuzzed references into fuzzed bytes,
//! and `names::decode_labels` on any bytes. A label set that decodes must
//! encode back to the same bytes, with names Prometheus accepts.
//!
//! Input: the base offset and four `(offset, length)` references as
//! little-endian `u16`s (small, so that they land inside the bytes), then
//! the string area's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdeck_format::names::{decode_labels, encode_labels, validate_label_name};
use topdeck_format::{MetricKind, MetricStrings, RawDescriptor, StrRef};

fuzz_target!(|data: &[u8]| {
    if let Ok(labels) = decode_labels(data) {
        let pairs: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(encode_labels(&pairs), data);
        for (k, _) in &pairs {
            assert!(validate_label_name(k).is_ok());
        }
    }
    let Some((head, strings)) = data.split_first_chunk::<18>() else {
        return;
    };
    let n = |i: usize| u32::from(u16::from_le_bytes([head[2 * i], head[2 * i + 1]]));
    let r = |i: usize| StrRef {
        off: n(i),
        len: n(i + 1),
    };
    let d = RawDescriptor {
        kind: MetricKind::Counter,
        schema: 0,
        value_len: 8,
        value_offset: 0,
        name: r(1),
        labels: r(3),
        help: r(5),
        unit: r(7),
        min_index: 0,
        bucket_count: 0,
        zero_threshold: 0.0,
    };
    let base = u64::from(n(0));
    if let Ok(s) = MetricStrings::decode_at(&d, strings, base) {
        assert_eq!(s.name.len() as u32, d.name.len);
        assert_eq!(s.help.len() as u32, d.help.len);
        assert_eq!(s.unit.len() as u32, d.unit.len);
    }
});
