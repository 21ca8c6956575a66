// SPDX-License-Identifier: Apache-2.0
//! The file header: building one for a writer, and validating one for a
//! reader against the length of the file actually mapped.

use crate::error::FormatError;
use crate::layout::*;
use crate::{bytes_at, u32_at, u64_at};

/// How much room a new file reserves. The file never grows, so readers
/// never see a remap; untouched pages of a tmpfs file cost no memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Descriptor slots.
    pub metrics: u32,
    /// Bytes for names, labels, help and units.
    pub string_bytes: u64,
    /// Bytes for gauges (8 each).
    pub shared_bytes: u64,
    /// Bytes of each shard (8 per counter, `8 * (4 + buckets)` per histogram).
    pub shard_bytes: u64,
    /// Per-thread shards; further threads share the overflow shard.
    pub shards: u32,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            metrics: 4096,
            string_bytes: 256 << 10,
            shared_bytes: 32 << 10,
            shard_bytes: 1 << 20,
            shards: 16,
        }
    }
}

/// A validated header. Fields mirror `layout`; offsets are absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
    /// Declared file length.
    pub file_len: u64,
    /// Writer's pid, in its own pid namespace.
    pub pid: u32,
    /// Writer's start time in clock ticks since boot.
    pub start_ticks: u64,
    /// Creation time, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// Descriptor table offset.
    pub desc_offset: u64,
    /// Descriptor slots.
    pub desc_capacity: u32,
    /// Size of one descriptor.
    pub desc_len: u32,
    /// Published descriptors at the time the header was read.
    pub desc_count: u32,
    /// Per-thread shards (overflow shard excluded).
    pub shard_count: u32,
    /// String area offset.
    pub strings_offset: u64,
    /// String area length.
    pub strings_len: u64,
    /// Shared value area offset.
    pub shared_offset: u64,
    /// Shared value area length.
    pub shared_len: u64,
    /// Offset of shard 0.
    pub shards_offset: u64,
    /// Stride between shards.
    pub shard_len: u64,
    /// Shards that may hold non-zero values, at the time the header was read.
    pub shards_in_use: u32,
    /// Process name.
    pub process_name: String,
    /// Registry name.
    pub registry_name: String,
}

impl Capacity {
    /// Checks the capacity against the format's limits (docs/FORMAT.md,
    /// "Limits a reader enforces"), so that a writer never creates a file
    /// readers refuse. [`Header::new`] expects a capacity that passed.
    ///
    /// ```
    /// use topdeck_format::Capacity;
    /// assert!(Capacity::default().validate().is_ok());
    /// let huge = Capacity { metrics: 1 << 24, ..Capacity::default() };
    /// assert!(huge.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), FormatError> {
        let over = |what, value: u64, max: u64| {
            if value > max {
                Err(FormatError::OverLimit { what, value, max })
            } else {
                Ok(())
            }
        };
        over("metrics", self.metrics.into(), MAX_DESC_CAPACITY.into())?;
        over("string bytes", self.string_bytes, MAX_STRINGS_LEN)?;
        over("gauge bytes", self.shared_bytes, MAX_SHARED_LEN)?;
        over("bytes per shard", self.shard_bytes, MAX_SHARD_LEN)?;
        over("shards", self.shards.into(), MAX_SHARD_COUNT.into())?;
        // Each part is bounded above, so the sum cannot overflow.
        let file_len = Header::new(*self, 0, 0, 0, "", "").file_len;
        over(
            "file length (metrics, strings, gauges and shards together)",
            file_len,
            MAX_FILE_LEN,
        )
    }
}

fn align_up(v: u64) -> u64 {
    v.div_ceil(SECTION_ALIGN as u64) * SECTION_ALIGN as u64
}

impl Header {
    /// Lays out a new file for `capacity`.
    pub fn new(
        capacity: Capacity,
        pid: u32,
        start_ticks: u64,
        created_unix_ns: u64,
        process_name: &str,
        registry_name: &str,
    ) -> Self {
        let desc_offset = HEADER_LEN as u64;
        let strings_offset =
            align_up(desc_offset + u64::from(capacity.metrics) * DESCRIPTOR_LEN as u64);
        let shared_offset = align_up(strings_offset + capacity.string_bytes);
        let shards_offset = align_up(shared_offset + capacity.shared_bytes);
        let shard_len = align_up(capacity.shard_bytes);
        Self {
            major: VERSION_MAJOR,
            minor: VERSION_MINOR,
            file_len: shards_offset + shard_len * (u64::from(capacity.shards) + 1),
            pid,
            start_ticks,
            created_unix_ns,
            desc_offset,
            desc_capacity: capacity.metrics,
            desc_len: DESCRIPTOR_LEN as u32,
            desc_count: 0,
            shard_count: capacity.shards,
            strings_offset,
            strings_len: shared_offset - strings_offset,
            shared_offset,
            shared_len: shards_offset - shared_offset,
            shards_offset,
            shard_len,
            shards_in_use: 0,
            process_name: truncate_utf8(process_name, NAME_FIELD_LEN).into(),
            registry_name: truncate_utf8(registry_name, NAME_FIELD_LEN).into(),
        }
    }

    /// Writes every field except `version`, `desc_count` and `shards_in_use`,
    /// which the writer publishes separately. `out` must be zeroed.
    pub fn encode(&self, out: &mut [u8]) {
        let put = |out: &mut [u8], off: usize, b: &[u8]| out[off..off + b.len()].copy_from_slice(b);
        put(out, MAGIC_OFFSET, &MAGIC);
        put(out, HEADER_LEN_OFFSET, &(HEADER_LEN as u32).to_le_bytes());
        put(out, FILE_LEN_OFFSET, &self.file_len.to_le_bytes());
        put(out, PID_OFFSET, &self.pid.to_le_bytes());
        put(out, START_TICKS_OFFSET, &self.start_ticks.to_le_bytes());
        put(
            out,
            CREATED_UNIX_NS_OFFSET,
            &self.created_unix_ns.to_le_bytes(),
        );
        put(out, DESC_OFFSET_OFFSET, &self.desc_offset.to_le_bytes());
        put(out, DESC_CAPACITY_OFFSET, &self.desc_capacity.to_le_bytes());
        put(out, DESC_LEN_OFFSET, &self.desc_len.to_le_bytes());
        put(out, SHARD_COUNT_OFFSET, &self.shard_count.to_le_bytes());
        put(
            out,
            STRINGS_OFFSET_OFFSET,
            &self.strings_offset.to_le_bytes(),
        );
        put(out, STRINGS_LEN_OFFSET, &self.strings_len.to_le_bytes());
        put(out, SHARED_OFFSET_OFFSET, &self.shared_offset.to_le_bytes());
        put(out, SHARED_LEN_OFFSET, &self.shared_len.to_le_bytes());
        put(out, SHARDS_OFFSET_OFFSET, &self.shards_offset.to_le_bytes());
        put(out, SHARD_LEN_OFFSET, &self.shard_len.to_le_bytes());
        put(out, PROCESS_NAME_OFFSET, self.process_name.as_bytes());
        put(out, REGISTRY_NAME_OFFSET, self.registry_name.as_bytes());
    }

    /// Validates a header read from a file of `actual_len` bytes. `bytes`
    /// holds at least the first [`HEADER_FIELDS_END`] bytes of the file, or
    /// all of them if the file is shorter.
    pub fn parse(bytes: &[u8], actual_len: u64) -> Result<Self, FormatError> {
        if bytes.len() < 8 {
            return Err(FormatError::Truncated {
                what: "magic",
                need: 8,
                have: actual_len,
            });
        }
        let magic: [u8; 8] = bytes[..8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        if bytes.len() < HEADER_FIELDS_END {
            return Err(FormatError::Truncated {
                what: "header",
                need: HEADER_FIELDS_END as u64,
                have: actual_len,
            });
        }
        let version = u32_at(bytes, VERSION_OFFSET);
        if version == 0 {
            return Err(FormatError::NotReady);
        }
        let (major, minor) = ((version >> 16) as u16, version as u16);
        if major != VERSION_MAJOR {
            return Err(FormatError::UnsupportedVersion {
                major,
                minor,
                supported: VERSION_MAJOR,
            });
        }
        let h = Self {
            major,
            minor,
            file_len: u64_at(bytes, FILE_LEN_OFFSET),
            pid: u32_at(bytes, PID_OFFSET),
            start_ticks: u64_at(bytes, START_TICKS_OFFSET),
            created_unix_ns: u64_at(bytes, CREATED_UNIX_NS_OFFSET),
            desc_offset: u64_at(bytes, DESC_OFFSET_OFFSET),
            desc_capacity: u32_at(bytes, DESC_CAPACITY_OFFSET),
            desc_len: u32_at(bytes, DESC_LEN_OFFSET),
            desc_count: u32_at(bytes, DESC_COUNT_OFFSET),
            shard_count: u32_at(bytes, SHARD_COUNT_OFFSET),
            strings_offset: u64_at(bytes, STRINGS_OFFSET_OFFSET),
            strings_len: u64_at(bytes, STRINGS_LEN_OFFSET),
            shared_offset: u64_at(bytes, SHARED_OFFSET_OFFSET),
            shared_len: u64_at(bytes, SHARED_LEN_OFFSET),
            shards_offset: u64_at(bytes, SHARDS_OFFSET_OFFSET),
            shard_len: u64_at(bytes, SHARD_LEN_OFFSET),
            shards_in_use: u32_at(bytes, SHARDS_IN_USE_OFFSET),
            process_name: name_field(bytes, PROCESS_NAME_OFFSET, "process name")?,
            registry_name: name_field(bytes, REGISTRY_NAME_OFFSET, "registry name")?,
        };
        h.check(u64::from(u32_at(bytes, HEADER_LEN_OFFSET)), actual_len)?;
        Ok(h)
    }

    fn check(&self, header_len: u64, actual_len: u64) -> Result<(), FormatError> {
        use FormatError::Corrupt;
        if header_len < HEADER_FIELDS_END as u64 || header_len > self.desc_offset {
            return Err(Corrupt(
                "header length does not fit before the descriptor table",
            ));
        }
        // Limits first: a file that breaks one is refused for that reason,
        // whatever else is wrong with it.
        let limits = [
            ("file_len", self.file_len, MAX_FILE_LEN),
            (
                "desc_capacity",
                self.desc_capacity.into(),
                MAX_DESC_CAPACITY.into(),
            ),
            ("desc_len", self.desc_len.into(), MAX_DESC_LEN.into()),
            (
                "shard_count",
                self.shard_count.into(),
                MAX_SHARD_COUNT.into(),
            ),
            ("shard_len", self.shard_len, MAX_SHARD_LEN),
            ("strings_len", self.strings_len, MAX_STRINGS_LEN),
            ("shared_len", self.shared_len, MAX_SHARED_LEN),
        ];
        for (what, value, max) in limits {
            if value > max {
                return Err(FormatError::OverLimit { what, value, max });
            }
        }
        if actual_len < self.file_len {
            return Err(FormatError::Truncated {
                what: "declared file length",
                need: self.file_len,
                have: actual_len,
            });
        }
        if (self.desc_len as usize) < DESCRIPTOR_LEN || self.desc_len % 8 != 0 {
            return Err(Corrupt("descriptor length is not supported"));
        }
        if self.desc_count > self.desc_capacity {
            return Err(Corrupt("more descriptors published than the table holds"));
        }
        if self.shards_in_use > self.shard_count {
            return Err(Corrupt("more shards in use than the file has"));
        }
        let desc_end = u64::from(self.desc_capacity)
            .checked_mul(u64::from(self.desc_len))
            .and_then(|n| n.checked_add(self.desc_offset));
        let shards_end = u64::from(self.shard_count)
            .checked_add(1)
            .and_then(|n| n.checked_mul(self.shard_len))
            .and_then(|n| n.checked_add(self.shards_offset));
        let sections = [
            (Some(self.desc_offset), desc_end),
            (
                Some(self.strings_offset),
                self.strings_offset.checked_add(self.strings_len),
            ),
            (
                Some(self.shared_offset),
                self.shared_offset.checked_add(self.shared_len),
            ),
            (Some(self.shards_offset), shards_end),
        ];
        let mut prev_end = header_len;
        for (start, end) in sections {
            match (start, end) {
                (Some(s), Some(e)) if s >= prev_end && e <= self.file_len && s % 8 == 0 => {
                    prev_end = e
                }
                _ => {
                    return Err(Corrupt(
                        "a section lies outside the file or overlaps another",
                    ))
                }
            }
        }
        if self.shard_len % 8 != 0 || self.shared_len % 8 != 0 {
            return Err(Corrupt("value areas are not word-aligned"));
        }
        Ok(())
    }

    /// File offset of shard `i` (`i == shard_count` is the overflow shard).
    pub fn shard_offset(&self, i: u32) -> u64 {
        self.shards_offset + u64::from(i) * self.shard_len
    }
}

fn name_field(bytes: &[u8], off: usize, what: &'static str) -> Result<String, FormatError> {
    let field = bytes_at(bytes, off, NAME_FIELD_LEN);
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end])
        .map(str::to_owned)
        .map_err(|_| FormatError::NotUtf8(what))
}

/// The longest prefix of `s` that fits `max - 1` bytes (room for a NUL) on a char boundary.
fn truncate_utf8(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Header, Vec<u8>) {
        let h = Header::new(Capacity::default(), 42, 7, 9, "svc", "default");
        let mut buf = vec![0u8; HEADER_LEN];
        h.encode(&mut buf);
        buf[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&VERSION.to_le_bytes());
        (h, buf)
    }

    #[test]
    fn a_written_header_parses_back() {
        let (h, buf) = sample();
        assert_eq!(Header::parse(&buf, h.file_len).unwrap(), h);
    }

    #[test]
    fn version_zero_is_not_ready_and_other_majors_are_refused() {
        let (h, mut buf) = sample();
        buf[VERSION_OFFSET..VERSION_OFFSET + 4].fill(0);
        assert_eq!(Header::parse(&buf, h.file_len), Err(FormatError::NotReady));
        buf[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&(2u32 << 16).to_le_bytes());
        assert!(matches!(
            Header::parse(&buf, h.file_len),
            Err(FormatError::UnsupportedVersion { major: 2, .. })
        ));
        buf[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&(1u32 << 16 | 9).to_le_bytes());
        assert_eq!(Header::parse(&buf, h.file_len).unwrap().minor, 9);
    }

    #[test]
    fn a_file_shorter_than_declared_is_truncated() {
        let (h, buf) = sample();
        assert!(matches!(
            Header::parse(&buf, h.file_len - 1),
            Err(FormatError::Truncated { .. })
        ));
    }

    #[test]
    fn sections_pointing_outside_the_file_are_corrupt() {
        let (h, buf) = sample();
        for off in [
            DESC_OFFSET_OFFSET,
            STRINGS_LEN_OFFSET,
            SHARDS_OFFSET_OFFSET,
            SHARD_LEN_OFFSET,
        ] {
            let mut bad = buf.clone();
            bad[off..off + 8].copy_from_slice(&u64::MAX.to_le_bytes());
            assert!(Header::parse(&bad, h.file_len).is_err(), "field at {off}");
        }
        let mut bad = buf.clone();
        bad[DESC_COUNT_OFFSET..DESC_COUNT_OFFSET + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Header::parse(&bad, h.file_len).is_err());
    }

    /// `buf` with the little-endian `value` in the `width` bytes at `off`.
    fn patched(buf: &[u8], off: usize, width: usize, value: u64) -> Vec<u8> {
        let mut b = buf.to_vec();
        b[off..off + width].copy_from_slice(&value.to_le_bytes()[..width]);
        b
    }

    #[test]
    fn each_size_above_its_limit_is_refused_by_name() {
        let (h, buf) = sample();
        let cases = [
            (FILE_LEN_OFFSET, 8, "file_len", MAX_FILE_LEN),
            (
                DESC_CAPACITY_OFFSET,
                4,
                "desc_capacity",
                MAX_DESC_CAPACITY.into(),
            ),
            (DESC_LEN_OFFSET, 4, "desc_len", MAX_DESC_LEN.into()),
            (SHARD_COUNT_OFFSET, 4, "shard_count", MAX_SHARD_COUNT.into()),
            (SHARD_LEN_OFFSET, 8, "shard_len", MAX_SHARD_LEN),
            (STRINGS_LEN_OFFSET, 8, "strings_len", MAX_STRINGS_LEN),
            (SHARED_LEN_OFFSET, 8, "shared_len", MAX_SHARED_LEN),
        ];
        for (off, width, what, max) in cases {
            for value in [
                max + 8,
                if width == 4 {
                    u32::MAX.into()
                } else {
                    u64::MAX
                },
            ] {
                let bad = patched(&buf, off, width, value);
                // The actual length is no defence: the claim alone is refused.
                let err = Header::parse(&bad, u64::MAX).unwrap_err();
                assert_eq!(err, FormatError::OverLimit { what, value, max }, "{what}");
                assert!(err.to_string().contains(what), "{err}");
            }
            // At the limit, the field is judged by the other rules only.
            let at = Header::parse(&patched(&buf, off, width, max), u64::MAX);
            assert!(
                !matches!(at, Err(FormatError::OverLimit { .. })),
                "{what} at its limit: {at:?}"
            );
        }
        assert_eq!(Header::parse(&buf, h.file_len).unwrap(), h);
    }

    #[test]
    fn the_writer_cannot_lay_out_a_file_the_reader_refuses() {
        let mb = 1 << 20;
        let fits = [
            Capacity::default(),
            Capacity {
                metrics: MAX_DESC_CAPACITY,
                string_bytes: MAX_STRINGS_LEN,
                shared_bytes: MAX_SHARED_LEN,
                shard_bytes: 8 * mb,
                shards: 64,
            },
            Capacity {
                shard_bytes: MAX_SHARD_LEN,
                shards: 14,
                ..Capacity::default()
            },
            Capacity {
                shard_bytes: 4096,
                shards: MAX_SHARD_COUNT,
                ..Capacity::default()
            },
            Capacity {
                metrics: 0,
                string_bytes: 0,
                shared_bytes: 0,
                shard_bytes: 0,
                shards: 0,
            },
        ];
        for c in fits {
            c.validate().unwrap_or_else(|e| panic!("{c:?}: {e}"));
            let h = Header::new(c, 1, 1, 1, "p", "r");
            let mut buf = vec![0u8; HEADER_LEN];
            h.encode(&mut buf);
            buf[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&VERSION.to_le_bytes());
            Header::parse(&buf, h.file_len).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        }
        let too_big = [
            (
                Capacity {
                    metrics: MAX_DESC_CAPACITY + 1,
                    ..Capacity::default()
                },
                "metrics",
            ),
            (
                Capacity {
                    string_bytes: u64::MAX,
                    ..Capacity::default()
                },
                "string bytes",
            ),
            (
                Capacity {
                    shared_bytes: MAX_SHARED_LEN + 1,
                    ..Capacity::default()
                },
                "gauge bytes",
            ),
            (
                Capacity {
                    shard_bytes: MAX_SHARD_LEN + 1,
                    ..Capacity::default()
                },
                "bytes per shard",
            ),
            (
                Capacity {
                    shards: u32::MAX,
                    ..Capacity::default()
                },
                "shards",
            ),
            (
                Capacity {
                    shard_bytes: MAX_SHARD_LEN,
                    shards: 16,
                    ..Capacity::default()
                },
                "file length",
            ),
        ];
        for (c, what) in too_big {
            match c.validate() {
                Err(FormatError::OverLimit { what: w, .. }) => assert!(w.starts_with(what), "{w}"),
                other => panic!("{c:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn names_are_truncated_on_char_boundaries() {
        let long = "é".repeat(40);
        let h = Header::new(Capacity::default(), 1, 1, 1, &long, "r");
        assert!(h.process_name.len() < NAME_FIELD_LEN);
        assert!(long.starts_with(&h.process_name));
    }
}
