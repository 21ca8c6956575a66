// SPDX-License-Identifier: Apache-2.0
//! Decoding of bytes already copied out of a CnC file: the header, the
//! counters and the driver's heartbeat. Every offset is checked against
//! the bytes at hand, so a hostile file yields an error, never a panic.

use super::layout::*;
use super::{Counter, FormatError, Header};

pub(crate) fn i32_at(b: &[u8], off: usize) -> Option<i32> {
    Some(i32::from_le_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}

pub(crate) fn i64_at(b: &[u8], off: usize) -> Option<i64> {
    Some(i64::from_le_bytes(
        b.get(off..off.checked_add(8)?)?.try_into().ok()?,
    ))
}

fn region_len(field: &'static str, raw: i32) -> Result<u64, FormatError> {
    u64::try_from(raw).map_err(|_| FormatError::NegativeLength { field, len: raw })
}

impl Header {
    /// Decodes the header from the file's first bytes and checks that every
    /// region it declares lies inside a file of `file_len` bytes.
    pub fn parse(bytes: &[u8], file_len: u64) -> Result<Header, FormatError> {
        if bytes.len() < HEADER_LEN || file_len < HEADER_LEN as u64 {
            return Err(FormatError::Truncated {
                what: "header",
                need: HEADER_LEN as u64,
                have: file_len.min(bytes.len() as u64),
            });
        }
        let int = |off| i32_at(bytes, off).unwrap_or_default();
        let long = |off| i64_at(bytes, off).unwrap_or_default();
        let version = int(VERSION_OFFSET) as u32;
        if version == 0 {
            return Err(FormatError::NotReady);
        }
        if version >> 16 != SUPPORTED_MAJOR {
            return Err(FormatError::UnsupportedVersion { version });
        }
        let header = Header {
            version,
            to_driver_len: region_len("to-driver buffer", int(TO_DRIVER_LEN_OFFSET))?,
            to_clients_len: region_len("to-clients buffer", int(TO_CLIENTS_LEN_OFFSET))?,
            counters_metadata_len: region_len(
                "counters metadata",
                int(COUNTERS_METADATA_LEN_OFFSET),
            )?,
            counters_values_len: region_len("counters values", int(COUNTERS_VALUES_LEN_OFFSET))?,
            error_log_len: region_len("error log", int(ERROR_LOG_LEN_OFFSET))?,
            client_liveness_timeout_ns: long(CLIENT_LIVENESS_TIMEOUT_OFFSET),
            start_timestamp_ms: long(START_TIMESTAMP_OFFSET),
            pid: long(PID_OFFSET),
            file_page_size: int(FILE_PAGE_SIZE_OFFSET),
        };
        // Five i32 lengths after 128 bytes cannot overflow a u64.
        let end = header.error_log_offset() + header.error_log_len;
        if end > file_len {
            return Err(FormatError::RegionsPastEnd { end, file_len });
        }
        if header.to_driver_len < RING_TRAILER_LEN as u64 {
            return Err(FormatError::RingTooShort {
                len: header.to_driver_len,
            });
        }
        for (what, len) in [
            ("counters metadata", header.counters_metadata_len),
            ("counters values", header.counters_values_len),
        ] {
            if len > MAX_REGION_LEN {
                return Err(FormatError::RegionTooLarge { what, len });
            }
        }
        Ok(header)
    }
}

/// The driver's last heartbeat (epoch ms) from the to-driver buffer's last
/// bytes, given as `to_driver_tail` (at least its trailer).
pub(crate) fn heartbeat_ms(to_driver_tail: &[u8]) -> Option<i64> {
    let trailer = to_driver_tail.len().checked_sub(RING_TRAILER_LEN)?;
    i64_at(to_driver_tail, trailer + CONSUMER_HEARTBEAT_OFFSET)
}

/// How many metadata records, from the start of `metadata`, come before
/// the first unused one; `None` if no unused record is in these bytes (the
/// list may go on past them).
pub(crate) fn records_in_use(metadata: &[u8]) -> Option<usize> {
    metadata
        .chunks_exact(METADATA_RECORD_LEN)
        .position(|r| i32_at(r, RECORD_STATE_OFFSET) == Some(RECORD_UNUSED))
}

/// Decodes every allocated counter. Ids run while both regions hold a
/// record for them and stop at the first unused record, as Agrona's
/// `CountersReader.forEach` does; reclaimed records (and any state this
/// reader does not know) are skipped.
pub(crate) fn counters(metadata: &[u8], values: &[u8]) -> Result<Vec<Counter>, FormatError> {
    let ids = (metadata.len() / METADATA_RECORD_LEN).min(values.len() / VALUE_SLOT_LEN);
    let mut out = Vec::new();
    for (id, (meta, slot)) in metadata
        .chunks_exact(METADATA_RECORD_LEN)
        .zip(values.chunks_exact(VALUE_SLOT_LEN))
        .take(ids)
        .enumerate()
    {
        let int = |off| i32_at(meta, off).unwrap_or_default();
        let long = |off| i64_at(slot, off).unwrap_or_default();
        match int(RECORD_STATE_OFFSET) {
            RECORD_UNUSED => break,
            RECORD_ALLOCATED => {}
            _ => continue,
        }
        let id = id as i32;
        let raw_len = int(LABEL_LENGTH_OFFSET);
        let label_len = usize::try_from(raw_len)
            .ok()
            .filter(|&n| n <= MAX_LABEL_LEN)
            .ok_or(FormatError::LabelPastRecord { id, len: raw_len })?;
        let label = &meta[LABEL_OFFSET..LABEL_OFFSET + label_len];
        out.push(Counter {
            id,
            type_id: int(TYPE_ID_OFFSET),
            key: meta[KEY_OFFSET..KEY_OFFSET + KEY_LEN].to_vec(),
            label: String::from_utf8_lossy(label).into_owned(),
            value: long(0),
            registration_id: long(REGISTRATION_ID_OFFSET),
            owner_id: long(OWNER_ID_OFFSET),
            reference_id: long(REFERENCE_ID_OFFSET),
        });
    }
    Ok(out)
}
