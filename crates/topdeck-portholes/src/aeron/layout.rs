// SPDX-License-Identifier: Apache-2.0
//! Offsets of the CnC file (Aeron's `CncFileDescriptor`, CnC version
//! 0.2.0) and of Agrona's counters and ring buffer, as Aeron 1.51.0 lays
//! them out (checked with `javap -constants` on that jar; see
//! /work/shared/notes/REACH.md §3.2). Every number is little-endian.

/// The only CnC major version whose layout this module knows.
pub const SUPPORTED_MAJOR: u32 = 0;

/// The header's fields end well before this: sections start here.
pub const HEADER_LEN: usize = 128;

pub const VERSION_OFFSET: usize = 0;
pub const TO_DRIVER_LEN_OFFSET: usize = 4;
pub const TO_CLIENTS_LEN_OFFSET: usize = 8;
pub const COUNTERS_METADATA_LEN_OFFSET: usize = 12;
pub const COUNTERS_VALUES_LEN_OFFSET: usize = 16;
pub const ERROR_LOG_LEN_OFFSET: usize = 20;
pub const CLIENT_LIVENESS_TIMEOUT_OFFSET: usize = 24;
pub const START_TIMESTAMP_OFFSET: usize = 32;
pub const PID_OFFSET: usize = 40;
pub const FILE_PAGE_SIZE_OFFSET: usize = 48;

/// The to-driver buffer is a many-to-one ring buffer whose trailer (the
/// last `RING_TRAILER_LEN` bytes) holds the driver's heartbeat: the driver
/// is that ring's consumer and stamps it every duty cycle.
pub const RING_TRAILER_LEN: usize = 768;
pub const CONSUMER_HEARTBEAT_OFFSET: usize = 640;

/// One metadata record per counter id.
pub const METADATA_RECORD_LEN: usize = 512;
pub const RECORD_STATE_OFFSET: usize = 0;
pub const TYPE_ID_OFFSET: usize = 4;
pub const KEY_OFFSET: usize = 16;
pub const KEY_LEN: usize = 112;
pub const LABEL_LENGTH_OFFSET: usize = 128;
pub const LABEL_OFFSET: usize = 132;
pub const MAX_LABEL_LEN: usize = 380;

pub const RECORD_UNUSED: i32 = 0;
pub const RECORD_ALLOCATED: i32 = 1;

/// One value slot per counter id.
pub const VALUE_SLOT_LEN: usize = 128;
pub const REGISTRATION_ID_OFFSET: usize = 8;
pub const OWNER_ID_OFFSET: usize = 16;
pub const REFERENCE_ID_OFFSET: usize = 24;

/// The most this reader copies of either counters region. A default driver
/// declares 32 MiB of metadata and 8 MiB of values; a larger claim is more
/// likely a hostile file than a driver, and would make every poll costly.
pub const MAX_REGION_LEN: u64 = 64 << 20;
