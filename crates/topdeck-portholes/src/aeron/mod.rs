// SPDX-License-Identifier: Apache-2.0
//! An Aeron media driver's `cnc.dat`: its header, its counters (Agrona's
//! counters metadata and values) and the driver's heartbeat, copied out of
//! the file with `pread` (never mapped, never locked, never written).
//!
//! The driver leaves `cnc.dat` behind when it exits, so a file is no proof
//! of a driver: [`Cnc::liveness`] compares the heartbeat the driver stamps
//! into its to-driver ring buffer with the client liveness timeout.
//!
//! Layout: Aeron's `CncFileDescriptor` (CnC version 0.2.0, Aeron 1.51.0)
//! and Agrona's `CountersReader`; the offsets are in `layout.rs`.
//!
//! ```
//! use topdeck_portholes::aeron::{Cnc, CncBuilder};
//!
//! // A driver's file in miniature: two counters, a fresh heartbeat.
//! let bytes = CncBuilder::new()
//!     .counter(0, "Bytes sent", 4096)
//!     .counter(0, "Bytes received", 1024)
//!     .heartbeat_ms(1_700_000_000_000)
//!     .build();
//! let cnc = Cnc::parse(&bytes).unwrap();
//! assert_eq!(cnc.counters[1].label, "Bytes received");
//! assert_eq!(cnc.counters[1].value, 1024);
//! assert!(cnc.liveness(1_700_000_001_000).alive);
//! assert!(!cnc.liveness(1_700_000_100_000).alive);
//! ```

mod build;
mod discover;
mod file;
mod layout;
mod parse;
mod writer;

pub use build::CncBuilder;
pub use discover::{
    discover, discover_checked, discover_owned_by, discover_with, Discovery, Source,
};
pub use layout::{HEADER_LEN, MAX_REGION_LEN};

use std::path::PathBuf;

/// The CnC header: the lengths of the five regions that follow it, in
/// order, and what the driver says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Semantic version packed as `major << 16 | minor << 8 | patch`.
    pub version: u32,
    /// Clients' commands to the driver (a ring buffer).
    pub to_driver_len: u64,
    /// The driver's responses to clients (a broadcast buffer).
    pub to_clients_len: u64,
    /// One 512-byte record per counter id.
    pub counters_metadata_len: u64,
    /// One 128-byte slot per counter id.
    pub counters_values_len: u64,
    /// The driver's distinct-error log.
    pub error_log_len: u64,
    /// How long the driver waits for a client's keepalive; a driver whose
    /// heartbeat is older than this is taken as gone.
    pub client_liveness_timeout_ns: i64,
    /// When the driver started, epoch milliseconds.
    pub start_timestamp_ms: i64,
    /// The driver's pid, in the driver's own pid namespace.
    pub pid: i64,
    /// The page size the file is rounded up to.
    pub file_page_size: i32,
}

impl Header {
    /// The version as (major, minor, patch).
    pub fn semver(&self) -> (u8, u8, u8) {
        (
            (self.version >> 16) as u8,
            (self.version >> 8) as u8,
            self.version as u8,
        )
    }
    /// Where the to-driver buffer starts.
    pub fn to_driver_offset(&self) -> u64 {
        HEADER_LEN as u64
    }
    /// Where the counters metadata starts.
    pub fn counters_metadata_offset(&self) -> u64 {
        self.to_driver_offset()
            .saturating_add(self.to_driver_len)
            .saturating_add(self.to_clients_len)
    }
    /// Where the counters values start.
    pub fn counters_values_offset(&self) -> u64 {
        self.counters_metadata_offset()
            .saturating_add(self.counters_metadata_len)
    }
    /// Where the error log starts.
    pub fn error_log_offset(&self) -> u64 {
        self.counters_values_offset()
            .saturating_add(self.counters_values_len)
    }
    /// Where the driver's heartbeat (an i64, epoch ms) lies in the file.
    pub fn heartbeat_offset(&self) -> u64 {
        // Saturating: the fields are public, so a header may not come from
        // `parse`, which refuses a ring too short for its trailer.
        let from_end = (layout::RING_TRAILER_LEN - layout::CONSUMER_HEARTBEAT_OFFSET) as u64;
        self.to_driver_offset()
            .saturating_add(self.to_driver_len)
            .saturating_sub(from_end)
    }
}

/// One allocated counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// Its index in both counters regions; ids are reused after a counter
    /// is freed, `registration_id` tells two uses apart.
    pub id: i32,
    /// What kind of counter (Aeron's `AeronCounters` type ids).
    pub type_id: i32,
    /// The key the counter's owner stored (112 bytes, type-specific).
    pub key: Vec<u8>,
    /// What the counter counts, as AeronStat prints it.
    pub label: String,
    /// Its value when it was copied.
    pub value: i64,
    /// Which use of this id: a new one for every allocation.
    pub registration_id: i64,
    /// The client that owns the counter (0: the driver).
    pub owner_id: i64,
    /// What the counter refers to (a publication's or image's registration id).
    pub reference_id: i64,
}

/// What one reading of a `cnc.dat` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cnc {
    /// The file's header.
    pub header: Header,
    /// The allocated counters, by id.
    pub counters: Vec<Counter>,
    /// The driver's last heartbeat, epoch milliseconds (0: never).
    pub heartbeat_ms: i64,
}

/// Whether the driver behind a file still runs, judged by its heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// The heartbeat is fresher than the timeout.
    pub alive: bool,
    /// Now minus the heartbeat (negative if the driver stamped it after
    /// `now` was taken).
    pub heartbeat_age_ms: i64,
    /// The client liveness timeout, the limit of a live heartbeat's age.
    pub timeout_ms: i64,
}

impl Cnc {
    /// Decodes a whole `cnc.dat` held in memory (tests, fuzzing); [`read`]
    /// copies only the parts it needs from a file.
    pub fn parse(bytes: &[u8]) -> Result<Cnc, FormatError> {
        let header = Header::parse(bytes, bytes.len() as u64)?;
        // The header checked every region against `bytes.len()`.
        let slice = |off: u64, len: u64| &bytes[off as usize..(off + len) as usize];
        let to_driver = slice(header.to_driver_offset(), header.to_driver_len);
        let metadata = slice(
            header.counters_metadata_offset(),
            header.counters_metadata_len,
        );
        let values = slice(header.counters_values_offset(), header.counters_values_len);
        Ok(Cnc {
            heartbeat_ms: parse::heartbeat_ms(to_driver).unwrap_or_default(),
            counters: parse::counters(metadata, values)?,
            header,
        })
    }

    /// Alive if the heartbeat is no older than the client liveness timeout
    /// at `now_ms` (epoch ms); a heartbeat as far in the future counts as a
    /// clock step, not as eternal life.
    pub fn liveness(&self, now_ms: i64) -> Liveness {
        let timeout_ms = self.header.client_liveness_timeout_ns / 1_000_000;
        let age = now_ms.saturating_sub(self.heartbeat_ms);
        Liveness {
            alive: self.heartbeat_ms > 0 && age.saturating_abs() <= timeout_ms,
            heartbeat_age_ms: age,
            timeout_ms,
        }
    }
}

/// The wall clock in epoch milliseconds, the driver's heartbeat clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Reads `cnc.dat` at `path` (or in the directory `path`, an `aeron.dir`):
/// one `pread` of the header, one of the heartbeat, and of the counters
/// regions only as far as their records are in use.
pub fn read(path: impl Into<PathBuf>) -> Result<Cnc, Error> {
    file::read(path.into())
}

/// What is wrong with the bytes of a CnC file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[allow(missing_docs)] // each variant's message is its documentation
pub enum FormatError {
    #[error("the {what} needs {need} bytes but only {have} are there; the file is truncated or still being created, retry once the driver has started")]
    Truncated {
        what: &'static str,
        need: u64,
        have: u64,
    },
    #[error(
        "the CnC version is 0: the driver has not finished creating the file; retry in a moment"
    )]
    NotReady,
    #[error("CnC version {}.{}.{} is not supported (only major version {SUPPORTED}); use a topdeck that knows this Aeron release", version >> 16, (version >> 8) & 0xff, version & 0xff, SUPPORTED = layout::SUPPORTED_MAJOR)]
    UnsupportedVersion { version: u32 },
    #[error("the header gives the {field} a negative length ({len}); the file is corrupt")]
    NegativeLength { field: &'static str, len: i32 },
    #[error("the header's regions end at byte {end} but the file has {file_len}; the file is truncated or corrupt")]
    RegionsPastEnd { end: u64, file_len: u64 },
    #[error("the to-driver buffer ({len} bytes) is too short to hold its ring buffer trailer; the file is corrupt")]
    RingTooShort { len: u64 },
    #[error("the {what} region claims {len} bytes, over the {max} this reader copies; the file is corrupt or from a driver configured beyond it", max = MAX_REGION_LEN)]
    RegionTooLarge { what: &'static str, len: u64 },
    #[error("counter {id} has a label length of {len}, past its 380-byte label field; the file is corrupt")]
    LabelPastRecord { id: i32, len: i32 },
}

/// A CnC file that could not be read.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant's message is its documentation
pub enum Error {
    #[error("{}: {source}; check that the Aeron directory exists and is readable", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a regular file; give the path of an Aeron driver's cnc.dat or its aeron.dir", path.display())]
    NotRegular { path: PathBuf },
    #[error("{}: a symbolic link, not followed (a driver makes its own directory and file there; a link is someone else's); read the driver's own aeron.dir instead", path.display())]
    Link { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Format { path: PathBuf, source: FormatError },
    #[error("{}: {why}; its counters are shown without a pid or container, as no process can be shown to be the driver that wrote it", path.display())]
    NotWriter { path: PathBuf, why: String },
    #[error("{}: {what}; the entries past the budget stay unread while the directory holds this many", path.display())]
    LeftOut { path: PathBuf, what: String },
}
