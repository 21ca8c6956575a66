// SPDX-License-Identifier: Apache-2.0
//! Small synthetic CnC files, laid out as a driver lays out its own, for
//! examples, tests and fuzz seeds.

use super::layout::*;

/// Builds the bytes of a small, valid `cnc.dat`.
///
/// ```
/// use topdeck_portholes::aeron::{CncBuilder, Header};
///
/// let bytes = CncBuilder::new().capacity(4).counter(7, "errors", 0).build();
/// let header = Header::parse(&bytes, bytes.len() as u64).unwrap();
/// assert_eq!(header.counters_metadata_len, 4 * 512);
/// ```
#[derive(Clone, Debug)]
pub struct CncBuilder {
    version: u32,
    capacity: usize,
    counters: Vec<(i32, String, i64)>,
    heartbeat_ms: i64,
    start_ms: Option<i64>,
    pid: i64,
}

impl Default for CncBuilder {
    fn default() -> Self {
        CncBuilder {
            version: 0x00_02_00,
            capacity: 8,
            counters: Vec::new(),
            heartbeat_ms: 0,
            start_ms: None,
            pid: 1,
        }
    }
}

/// Sizes a real driver would use, shrunk: ring data capacity 1 KiB plus the
/// trailer, a small broadcast buffer and error log.
const TO_DRIVER_LEN: usize = 1024 + RING_TRAILER_LEN;
const TO_CLIENTS_LEN: usize = 1024 + 128;
const ERROR_LOG_LEN: usize = 256;

impl CncBuilder {
    /// CnC 0.2.0, room for 8 counters, none allocated, no heartbeat.
    pub fn new() -> Self {
        Self::default()
    }
    /// The packed CnC version (`major << 16 | minor << 8 | patch`).
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }
    /// How many counter ids both regions have room for.
    pub fn capacity(mut self, ids: usize) -> Self {
        self.capacity = ids;
        self
    }
    /// Adds an allocated counter with the next id.
    pub fn counter(mut self, type_id: i32, label: &str, value: i64) -> Self {
        self.counters.push((type_id, label.to_owned(), value));
        self
    }
    /// The driver's heartbeat (and start time, unless
    /// [`start_ms`](Self::start_ms) gives another), epoch milliseconds.
    pub fn heartbeat_ms(mut self, ms: i64) -> Self {
        self.heartbeat_ms = ms;
        self
    }
    /// When the driver started, epoch milliseconds.
    pub fn start_ms(mut self, ms: i64) -> Self {
        self.start_ms = Some(ms);
        self
    }
    /// The driver's pid.
    pub fn pid(mut self, pid: i64) -> Self {
        self.pid = pid;
        self
    }

    /// The file's bytes.
    pub fn build(&self) -> Vec<u8> {
        let meta_len = self.capacity.max(self.counters.len()) * METADATA_RECORD_LEN;
        let values_len = meta_len / METADATA_RECORD_LEN * VALUE_SLOT_LEN;
        let meta_at = HEADER_LEN + TO_DRIVER_LEN + TO_CLIENTS_LEN;
        let values_at = meta_at + meta_len;
        let mut b = vec![0u8; values_at + values_len + ERROR_LOG_LEN];
        let mut put = |off: usize, bytes: &[u8]| b[off..off + bytes.len()].copy_from_slice(bytes);
        put(VERSION_OFFSET, &self.version.to_le_bytes());
        for (off, len) in [
            (TO_DRIVER_LEN_OFFSET, TO_DRIVER_LEN),
            (TO_CLIENTS_LEN_OFFSET, TO_CLIENTS_LEN),
            (COUNTERS_METADATA_LEN_OFFSET, meta_len),
            (COUNTERS_VALUES_LEN_OFFSET, values_len),
            (ERROR_LOG_LEN_OFFSET, ERROR_LOG_LEN),
        ] {
            put(off, &(len as i32).to_le_bytes());
        }
        put(
            CLIENT_LIVENESS_TIMEOUT_OFFSET,
            &10_000_000_000i64.to_le_bytes(),
        );
        put(
            START_TIMESTAMP_OFFSET,
            &self.start_ms.unwrap_or(self.heartbeat_ms).to_le_bytes(),
        );
        put(PID_OFFSET, &self.pid.to_le_bytes());
        put(FILE_PAGE_SIZE_OFFSET, &4096i32.to_le_bytes());
        let heartbeat_at =
            HEADER_LEN + TO_DRIVER_LEN - RING_TRAILER_LEN + CONSUMER_HEARTBEAT_OFFSET;
        put(heartbeat_at, &self.heartbeat_ms.to_le_bytes());
        for (id, (type_id, label, value)) in self.counters.iter().enumerate() {
            let rec = meta_at + id * METADATA_RECORD_LEN;
            let label = &label.as_bytes()[..label.len().min(MAX_LABEL_LEN)];
            put(rec + RECORD_STATE_OFFSET, &RECORD_ALLOCATED.to_le_bytes());
            put(rec + TYPE_ID_OFFSET, &type_id.to_le_bytes());
            put(rec + KEY_OFFSET, &(id as i64).to_le_bytes());
            put(
                rec + LABEL_LENGTH_OFFSET,
                &(label.len() as i32).to_le_bytes(),
            );
            put(rec + LABEL_OFFSET, label);
            let slot = values_at + id * VALUE_SLOT_LEN;
            put(slot, &value.to_le_bytes());
            put(
                slot + REGISTRATION_ID_OFFSET,
                &(id as i64 + 100).to_le_bytes(),
            );
        }
        b
    }
}
