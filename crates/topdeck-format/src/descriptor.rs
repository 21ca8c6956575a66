// SPDX-License-Identifier: Apache-2.0
//! Metric descriptors: what a metric is and where its values live. A
//! descriptor is written once, before it is published, and never changes.

use crate::error::FormatError;
use crate::exponential::{is_valid_schema, BucketRange};
use crate::header::Header;
use crate::layout::*;
use crate::names::{
    decode_labels, validate_metric_name, MAX_HELP_LEN, MAX_LABELS_LEN, MAX_NAME_LEN, MAX_UNIT_LEN,
};
use crate::{u32_at, u64_at};

/// Most buckets one histogram may have: 128 powers of two at schema 3.
pub const MAX_BUCKETS: u32 = 1024;
/// Bucket indices beyond this magnitude lie outside the `f64` range at every schema
/// (2^1024 at schema 8 is index 2^18; the smallest subnormal is above index -2^19).
pub const MAX_ABS_INDEX: i32 = 1 << 19;

/// What kind of metric a descriptor describes. The semantics of each kind
/// are defined in the crate documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MetricKind {
    /// Monotonic `u64`, one word per shard; the value is the wrapping sum over shards.
    Counter = 1,
    /// `i64` in the shared area.
    GaugeI64 = 2,
    /// `f64` (IEEE-754 bits) in the shared area.
    GaugeF64 = 3,
    /// Exponential histogram, one block per shard.
    Histogram = 4,
}

impl MetricKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Counter,
            2 => Self::GaugeI64,
            3 => Self::GaugeF64,
            4 => Self::Histogram,
            _ => return None,
        })
    }

    /// Whether values live in shards (rather than the shared area).
    pub fn is_sharded(self) -> bool {
        matches!(self, Self::Counter | Self::Histogram)
    }
}

/// A reference into the string area: offset relative to `strings_offset`, and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StrRef {
    /// Offset from the start of the string area.
    pub off: u32,
    /// Length in bytes.
    pub len: u32,
}

impl StrRef {
    /// One past the last byte, relative to the string area.
    pub fn end(self) -> u64 {
        u64::from(self.off) + u64::from(self.len)
    }
}

/// A descriptor as stored: numbers only, strings still referenced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawDescriptor {
    /// Metric kind.
    pub kind: MetricKind,
    /// Histogram schema, else 0.
    pub schema: i8,
    /// Bytes of the value block.
    pub value_len: u32,
    /// Offset of the value block within each shard, or within the shared area.
    pub value_offset: u64,
    /// Metric name.
    pub name: StrRef,
    /// Encoded labels.
    pub labels: StrRef,
    /// Help text.
    pub help: StrRef,
    /// Unit.
    pub unit: StrRef,
    /// Histogram: index of the first bucket.
    pub min_index: i32,
    /// Histogram: number of buckets.
    pub bucket_count: u32,
    /// Histogram: upper bound of the zero bucket.
    pub zero_threshold: f64,
}

impl RawDescriptor {
    /// Writes the descriptor into `out` (at least [`DESCRIPTOR_LEN`] bytes).
    pub fn encode(&self, out: &mut [u8]) {
        out[D_KIND] = self.kind as u8;
        out[D_SCHEMA] = self.schema as u8;
        out[D_VALUE_LEN..D_VALUE_LEN + 4].copy_from_slice(&self.value_len.to_le_bytes());
        out[D_VALUE_OFFSET..D_VALUE_OFFSET + 8].copy_from_slice(&self.value_offset.to_le_bytes());
        for (at, r) in [
            (D_NAME, self.name),
            (D_LABELS, self.labels),
            (D_HELP, self.help),
            (D_UNIT, self.unit),
        ] {
            out[at..at + 4].copy_from_slice(&r.off.to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&r.len.to_le_bytes());
        }
        out[D_MIN_INDEX..D_MIN_INDEX + 4].copy_from_slice(&self.min_index.to_le_bytes());
        out[D_BUCKET_COUNT..D_BUCKET_COUNT + 4].copy_from_slice(&self.bucket_count.to_le_bytes());
        out[D_ZERO_THRESHOLD..D_ZERO_THRESHOLD + 8]
            .copy_from_slice(&self.zero_threshold.to_bits().to_le_bytes());
    }

    /// Reads and validates a descriptor against `header`: every reference
    /// must lie inside its area and the value block must match the kind.
    pub fn parse(bytes: &[u8], header: &Header) -> Result<Self, FormatError> {
        use FormatError::Corrupt;
        if bytes.len() < DESCRIPTOR_LEN {
            return Err(Corrupt("descriptor shorter than its fixed fields"));
        }
        let kind = MetricKind::from_u8(bytes[D_KIND]).ok_or(Corrupt("unknown metric kind"))?;
        let sref = |at| StrRef {
            off: u32_at(bytes, at),
            len: u32_at(bytes, at + 4),
        };
        let d = Self {
            kind,
            schema: bytes[D_SCHEMA] as i8,
            value_len: u32_at(bytes, D_VALUE_LEN),
            value_offset: u64_at(bytes, D_VALUE_OFFSET),
            name: sref(D_NAME),
            labels: sref(D_LABELS),
            help: sref(D_HELP),
            unit: sref(D_UNIT),
            min_index: u32_at(bytes, D_MIN_INDEX) as i32,
            bucket_count: u32_at(bytes, D_BUCKET_COUNT),
            zero_threshold: f64::from_bits(u64_at(bytes, D_ZERO_THRESHOLD)),
        };
        for r in [d.name, d.labels, d.help, d.unit] {
            if r.end() > header.strings_len {
                return Err(Corrupt("a string reference points outside the string area"));
            }
        }
        // No valid writer stores a longer string, and a reader decodes every
        // byte referenced: this bounds what one descriptor costs to read.
        for (r, what, max) in [
            (d.name, "a metric name's length", MAX_NAME_LEN),
            (d.labels, "an encoded label set's length", MAX_LABELS_LEN),
            (d.help, "a help text's length", MAX_HELP_LEN),
            (d.unit, "a unit's length", MAX_UNIT_LEN),
        ] {
            if r.len as usize > max {
                return Err(FormatError::OverLimit {
                    what,
                    value: r.len.into(),
                    max: max as u64,
                });
            }
        }
        let expected_len = match kind {
            MetricKind::Counter | MetricKind::GaugeI64 | MetricKind::GaugeF64 => WORD as u64,
            MetricKind::Histogram => {
                if !is_valid_schema(d.schema) {
                    return Err(Corrupt("histogram schema out of range"));
                }
                if d.bucket_count == 0 || d.bucket_count > MAX_BUCKETS {
                    return Err(Corrupt("histogram bucket count out of range"));
                }
                let end = i64::from(d.min_index) + i64::from(d.bucket_count);
                if d.min_index < -MAX_ABS_INDEX || end > i64::from(MAX_ABS_INDEX) {
                    return Err(Corrupt(
                        "histogram bucket indices lie outside the f64 range",
                    ));
                }
                if d.zero_threshold.is_nan() || d.zero_threshold < 0.0 {
                    return Err(Corrupt("histogram zero threshold is negative or NaN"));
                }
                (HISTOGRAM_HEAD_WORDS as u64 + u64::from(d.bucket_count)) * WORD as u64
            }
        };
        let area = if kind.is_sharded() {
            header.shard_len
        } else {
            header.shared_len
        };
        if u64::from(d.value_len) != expected_len
            || d.value_offset % WORD as u64 != 0
            || d.value_offset
                .checked_add(expected_len)
                .is_none_or(|e| e > area)
        {
            return Err(Corrupt(
                "a value block lies outside its area or has the wrong size",
            ));
        }
        Ok(d)
    }

    /// The histogram's bucket range (meaningful for histograms only).
    pub fn bucket_range(&self) -> BucketRange {
        BucketRange {
            schema: self.schema,
            min_index: self.min_index,
            bucket_count: self.bucket_count,
        }
    }

    /// The four string references: name, labels, help, unit.
    pub fn strings(&self) -> [StrRef; 4] {
        [self.name, self.labels, self.help, self.unit]
    }

    /// One past the last string byte this descriptor references.
    pub fn strings_end(&self) -> u64 {
        self.strings().iter().map(|r| r.end()).max().unwrap_or(0)
    }

    /// Bytes of string data referenced, overlaps counted twice.
    pub fn string_bytes(&self) -> u64 {
        self.strings().iter().map(|r| u64::from(r.len)).sum()
    }

    /// One past the value block, relative to its area.
    pub fn value_end(&self) -> u64 {
        self.value_offset + u64::from(self.value_len)
    }
}

/// The strings of a descriptor, decoded and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricStrings {
    /// Metric name.
    pub name: String,
    /// Label pairs, in registration order.
    pub labels: Vec<(String, String)>,
    /// Help text.
    pub help: String,
    /// Unit (may be empty).
    pub unit: String,
}

impl MetricStrings {
    /// Decodes the strings `d` references from `strings`, a copy of the
    /// string area from its start.
    pub fn decode(d: &RawDescriptor, strings: &[u8]) -> Result<Self, FormatError> {
        Self::decode_at(d, strings, 0)
    }

    /// Decodes the strings `d` references from `strings`, a copy of the
    /// string area from offset `base` on: a reader copies only the part a
    /// few descriptors reference. Empty strings need no bytes at all.
    pub fn decode_at(d: &RawDescriptor, strings: &[u8], base: u64) -> Result<Self, FormatError> {
        let bytes = |r: StrRef| {
            if r.len == 0 {
                return Ok(&[][..]);
            }
            u64::from(r.off)
                .checked_sub(base)
                .and_then(|start| strings.get(start as usize..(start + u64::from(r.len)) as usize))
                .ok_or(FormatError::Corrupt(
                    "a string reference points past the data read",
                ))
        };
        let text = |r: StrRef, what| {
            std::str::from_utf8(bytes(r)?).map_err(|_| FormatError::NotUtf8(what))
        };
        let name = text(d.name, "metric name")?;
        validate_metric_name(name)?;
        Ok(Self {
            name: name.to_owned(),
            labels: decode_labels(bytes(d.labels)?)?,
            help: text(d.help, "help")?.to_owned(),
            unit: text(d.unit, "unit")?.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Capacity;

    fn header() -> Header {
        Header::new(Capacity::default(), 1, 1, 1, "p", "r")
    }

    fn counter() -> RawDescriptor {
        RawDescriptor {
            kind: MetricKind::Counter,
            schema: 0,
            value_len: 8,
            value_offset: 64,
            name: StrRef { off: 0, len: 3 },
            labels: StrRef::default(),
            help: StrRef::default(),
            unit: StrRef::default(),
            min_index: 0,
            bucket_count: 0,
            zero_threshold: 0.0,
        }
    }

    #[test]
    fn a_written_descriptor_parses_back() {
        let mut buf = [0u8; DESCRIPTOR_LEN];
        counter().encode(&mut buf);
        assert_eq!(RawDescriptor::parse(&buf, &header()).unwrap(), counter());
    }

    #[test]
    fn out_of_range_references_are_corrupt() {
        let h = header();
        let cases: [fn(&mut RawDescriptor); 4] = [
            |d| d.value_offset = u64::MAX - 3,
            |d| d.value_offset = 4,
            |d| d.name.off = u32::MAX,
            |d| d.value_len = 16,
        ];
        for f in cases {
            let mut d = counter();
            f(&mut d);
            let mut buf = [0u8; DESCRIPTOR_LEN];
            d.encode(&mut buf);
            assert!(RawDescriptor::parse(&buf, &h).is_err(), "{d:?}");
        }
        let mut buf = [0u8; DESCRIPTOR_LEN];
        counter().encode(&mut buf);
        buf[D_KIND] = 99;
        assert!(RawDescriptor::parse(&buf, &h).is_err());
    }

    #[test]
    fn string_lengths_above_the_writers_limits_are_refused() {
        let h = header();
        type Set = fn(&mut RawDescriptor, u32);
        let cases: [(Set, usize); 4] = [
            (|d, n| d.name.len = n, MAX_NAME_LEN),
            (|d, n| d.labels.len = n, MAX_LABELS_LEN),
            (|d, n| d.help.len = n, MAX_HELP_LEN),
            (|d, n| d.unit.len = n, MAX_UNIT_LEN),
        ];
        for (set, max) in cases {
            for (len, ok) in [(max, true), (max + 1, false)] {
                let mut d = counter();
                set(&mut d, len as u32);
                let mut buf = [0u8; DESCRIPTOR_LEN];
                d.encode(&mut buf);
                let got = RawDescriptor::parse(&buf, &h);
                assert_eq!(got.is_ok(), ok, "{d:?}: {got:?}");
                if !ok {
                    assert!(matches!(got, Err(FormatError::OverLimit { .. })), "{got:?}");
                }
            }
        }
    }

    #[test]
    fn strings_decode_from_a_part_of_the_area() {
        let mut d = counter();
        d.name = StrRef { off: 100, len: 3 };
        d.help = StrRef { off: 103, len: 2 };
        d.unit = StrRef { off: 7, len: 0 };
        let s = MetricStrings::decode_at(&d, b"abcok", 100).unwrap();
        assert_eq!(
            (s.name.as_str(), s.help.as_str(), s.unit.as_str()),
            ("abc", "ok", "")
        );
        assert!(MetricStrings::decode_at(&d, b"abcok", 101).is_err());
        assert!(MetricStrings::decode_at(&d, b"abco", 100).is_err());
    }

    #[test]
    fn strings_must_be_utf8_and_valid_names() {
        let d = counter();
        assert_eq!(MetricStrings::decode(&d, b"abc").unwrap().name, "abc");
        assert_eq!(
            MetricStrings::decode(&d, b"a\xffc"),
            Err(FormatError::NotUtf8("metric name"))
        );
        assert!(MetricStrings::decode(&d, b"a-c").is_err());
        assert!(MetricStrings::decode(&d, b"ab").is_err());
    }
}
