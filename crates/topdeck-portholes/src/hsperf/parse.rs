// SPDX-License-Identifier: Apache-2.0
//! The parser: bytes copied out of an hsperfdata file to [`PerfData`],
//! every count and offset bounded by the copy (the file may be truncated,
//! stale, half-written or hostile).

use super::error::{Error, ErrorKind, Result};
use super::{ByteOrder, Entry, PerfData, Prologue, Units, Value, Variability};

/// The bytes every PerfData file starts with, whatever its byte order
/// (`PerfMemory::initialize` stores the jint `0xcafec0c0` in native order
/// on big-endian hosts and `0xc0c0feca` on little-endian ones).
pub(crate) const MAGIC: [u8; 4] = [0xca, 0xfe, 0xc0, 0xc0];
pub(crate) const PROLOGUE_SIZE: usize = 32;
/// `PerfDataEntry`: entry_length, name_offset, vector_length (i32 each),
/// data_type, flags, data_units, data_variability (u8 each), data_offset (i32).
pub(crate) const ENTRY_HEADER_SIZE: usize = 20;
/// The smallest entry a JVM writes: a header, a one-byte name with its NUL
/// and a byte of data, rounded up to 8 (`PerfData::create_entry`).
const MIN_ENTRY_SIZE: usize = 24;
const SUPPORTED_FLAG: u8 = 0x01;
const TYPE_LONG: u8 = b'J';
const TYPE_BYTE: u8 = b'B';

/// Parses a copy of an hsperfdata file.
///
/// Entries are read until `num_entries` or an `entry_length` of 0 (memory
/// the JVM has reserved but not filled yet), whichever comes first; an
/// announced last entry whose header is still all zeros is likewise one the
/// JVM is filling in, and ends the list. Anything else that does not fit
/// is an error, never a panic and never a read outside `bytes`.
///
/// ```
/// use topdeck_portholes::hsperf::{self, ErrorKind, SyntheticBuffer, Units, Variability};
///
/// let bytes = SyntheticBuffer::new()
///     .long("sun.gc.collector.0.invocations", Units::Events, Variability::Monotonic, 7)
///     .build();
/// assert_eq!(hsperf::parse(&bytes)?.long("sun.gc.collector.0.invocations"), Some(7));
/// let err = hsperf::parse(&bytes[..40]).unwrap_err();
/// assert!(matches!(err.kind(), ErrorKind::Truncated { .. }));
/// # Ok::<(), hsperf::Error>(())
/// ```
pub fn parse(bytes: &[u8]) -> Result<PerfData> {
    let prologue = parse_prologue(bytes)?;
    let used = prologue.used as usize;
    let mut entries =
        Vec::with_capacity((prologue.num_entries as usize).min(used / MIN_ENTRY_SIZE));
    let fields = Fields {
        bytes: &bytes[..used],
        order: prologue.byte_order,
    };
    let mut offset = prologue.entry_offset as usize;
    for index in 0..prologue.num_entries {
        let is_last = index + 1 == prologue.num_entries;
        match parse_entry(&fields, offset, index, is_last)? {
            Some((entry, length)) => {
                entries.push(entry);
                offset += length;
            }
            None => break,
        }
    }
    Ok(PerfData { prologue, entries })
}

fn parse_prologue(bytes: &[u8]) -> Result<Prologue> {
    if bytes.len() < PROLOGUE_SIZE {
        return Err(Error::new(ErrorKind::Truncated {
            what: "the prologue",
            need: PROLOGUE_SIZE as u64,
            have: bytes.len() as u64,
        }));
    }
    let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if magic != MAGIC {
        return Err(Error::new(ErrorKind::BadMagic { found: magic }));
    }
    let byte_order = match bytes[4] {
        0 => ByteOrder::Big,
        1 => ByteOrder::Little,
        found => return Err(Error::new(ErrorKind::BadByteOrder { found })),
    };
    let (major, minor) = (bytes[5], bytes[6]);
    if major != 2 {
        return Err(Error::new(ErrorKind::UnsupportedVersion { major, minor }));
    }
    if bytes[7] == 0 {
        return Err(Error::new(ErrorKind::NotAccessible));
    }
    let fields = Fields {
        bytes,
        order: byte_order,
    };
    let used = fields.non_negative(8, None, "used is negative")?;
    let overflow = fields.non_negative(12, None, "overflow is negative")?;
    let mod_time_stamp = fields.i64(16).unwrap_or_default();
    let entry_offset = fields.non_negative(24, None, "entry_offset is negative")?;
    let num_entries = fields.non_negative(28, None, "num_entries is negative")?;
    if (used as usize) < PROLOGUE_SIZE {
        return Err(Error::corrupt(None, 8, "used is smaller than the prologue"));
    }
    if used as usize > bytes.len() {
        return Err(Error::new(ErrorKind::Truncated {
            what: "the used area the prologue announces",
            need: used.into(),
            have: bytes.len() as u64,
        }));
    }
    if (entry_offset as usize) < PROLOGUE_SIZE || entry_offset > used || entry_offset % 4 != 0 {
        return Err(Error::corrupt(
            None,
            24,
            "entry_offset is not a 4-aligned offset between the prologue and the end of the used area",
        ));
    }
    Ok(Prologue {
        byte_order,
        major,
        minor,
        accessible: true,
        used,
        overflow,
        mod_time_stamp,
        entry_offset,
        num_entries,
    })
}

/// Returns the entry at `start` and its length, or `None` at the end of
/// the filled entries.
fn parse_entry(
    fields: &Fields<'_>,
    start: usize,
    index: u32,
    is_last: bool,
) -> Result<Option<(Entry, usize)>> {
    let at = Some(index);
    if start == fields.bytes.len() {
        // The used area ends exactly here; memory past it is zeros.
        return Ok(None);
    }
    let header = fields
        .bytes
        .get(start..)
        .and_then(|rest| rest.get(..ENTRY_HEADER_SIZE))
        .ok_or_else(|| {
            Error::corrupt(
                at,
                start,
                "num_entries announces an entry past the used area",
            )
        })?;
    let length = fields.non_negative(start, at, "entry_length is negative")? as usize;
    if length == 0 {
        return Ok(None);
    }
    let name_offset = fields.non_negative(start + 4, at, "name_offset is negative")? as usize;
    let vector_length = fields.non_negative(start + 8, at, "vector_length is negative")? as usize;
    let (data_type, flags, units, variability) = (header[12], header[13], header[14], header[15]);
    let data_offset = fields.non_negative(start + 16, at, "data_offset is negative")? as usize;
    if is_last && name_offset == 0 && data_type == 0 && data_offset == 0 {
        // The JVM bumps num_entries before it fills the entry in.
        return Ok(None);
    }
    if length < MIN_ENTRY_SIZE || length % 4 != 0 {
        return Err(Error::corrupt(
            at,
            start,
            "entry_length is not a 4-aligned length of at least 24 bytes",
        ));
    }
    let end = start
        .checked_add(length)
        .filter(|&end| end <= fields.bytes.len())
        .ok_or_else(|| Error::corrupt(at, start, "entry_length reaches past the used area"))?;
    let entry = &fields.bytes[start..end];
    if name_offset < ENTRY_HEADER_SIZE || data_offset <= name_offset || data_offset > length {
        return Err(Error::corrupt(
            at,
            start + 4,
            "name_offset and data_offset are not in order inside the entry",
        ));
    }
    let name_bytes = &entry[name_offset..data_offset];
    let nul = name_bytes.iter().position(|&b| b == 0).ok_or_else(|| {
        Error::corrupt(
            at,
            start + name_offset,
            "the name has no NUL before the data",
        )
    })?;
    let name = std::str::from_utf8(&name_bytes[..nul])
        .map_err(|_| Error::corrupt(at, start + name_offset, "the name is not UTF-8"))?
        .to_owned();
    let units = match units {
        1 => Units::None,
        2 => Units::Bytes,
        3 => Units::Ticks,
        4 => Units::Events,
        5 => Units::String,
        6 => Units::Hertz,
        _ => return Err(Error::corrupt(at, start + 14, "unknown units")),
    };
    let variability = match variability {
        1 => Variability::Constant,
        2 => Variability::Monotonic,
        3 => Variability::Variable,
        _ => return Err(Error::corrupt(at, start + 15, "unknown variability")),
    };
    let data = &entry[data_offset..];
    let value = match (data_type, vector_length) {
        (TYPE_LONG, 0) => Value::Long(
            fields
                .i64(start + data_offset)
                .filter(|_| data.len() >= 8)
                .ok_or_else(|| {
                    Error::corrupt(
                        at,
                        start + data_offset,
                        "the i64 value reaches past the entry",
                    )
                })?,
        ),
        (TYPE_BYTE, n) if n > 0 => {
            let array = data.get(..n).ok_or_else(|| {
                Error::corrupt(at, start + 8, "vector_length reaches past the entry")
            })?;
            if units == Units::String {
                let text = array.split(|&b| b == 0).next().unwrap_or_default();
                Value::String(String::from_utf8_lossy(text).into_owned())
            } else {
                Value::Bytes(array.to_vec())
            }
        }
        _ => {
            return Err(Error::corrupt(
                at,
                start + 12,
                "data type is neither a scalar 'J' (i64) nor a 'B' array",
            ))
        }
    };
    Ok(Some((
        Entry {
            name,
            value,
            units,
            variability,
            supported: flags & SUPPORTED_FLAG != 0,
        },
        length,
    )))
}

/// Fixed-size fields of the buffer in its byte order, bounds-checked.
struct Fields<'a> {
    bytes: &'a [u8],
    order: ByteOrder,
}

impl Fields<'_> {
    fn array<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        self.bytes.get(offset..)?.get(..N)?.try_into().ok()
    }

    fn i32(&self, offset: usize) -> Option<i32> {
        let raw = self.array::<4>(offset)?;
        Some(match self.order {
            ByteOrder::Big => i32::from_be_bytes(raw),
            ByteOrder::Little => i32::from_le_bytes(raw),
        })
    }

    fn i64(&self, offset: usize) -> Option<i64> {
        let raw = self.array::<8>(offset)?;
        Some(match self.order {
            ByteOrder::Big => i64::from_be_bytes(raw),
            ByteOrder::Little => i64::from_le_bytes(raw),
        })
    }

    /// An i32 field that must be >= 0 (every length, offset and count).
    fn non_negative(
        &self,
        offset: usize,
        entry: Option<u32>,
        problem: &'static str,
    ) -> Result<u32> {
        let value = self
            .i32(offset)
            .ok_or_else(|| Error::corrupt(entry, offset, "a field reaches past the used area"))?;
        u32::try_from(value).map_err(|_| Error::corrupt(entry, offset, problem))
    }
}
