// SPDX-License-Identifier: Apache-2.0
//! The topdeck metrics file format, version 1: byte layout, validation of
//! untrusted bytes, and the exponential bucket maths shared with Prometheus
//! native histograms. This crate does no I/O and starts no threads; the
//! `topdeck` crate maps files and publishes values. The prose specification
//! is `docs/FORMAT.md`.
//!
//! # Metric kinds
//!
//! - **Counter**: a `u64` that only goes up while its process lives. Each
//!   thread adds to its own shard; the value is the wrapping sum of all
//!   shards. It starts at 0 with each new file: a restarted process is a new
//!   file, so a reader sees a reset as a new series (a new pid/start time).
//! - **Gauge**: an `i64` or an `f64` that is set, or added to, atomically
//!   in one shared word.
//! - **Histogram**: counts of observations in exponential buckets (see
//!   [`exponential`]), a zero bucket, a count, a sum and a maximum, kept per
//!   shard and summed by readers. Count, sum and buckets are separate words:
//!   a reader may see them a few updates apart.
//!
//! # Example
//!
//! ```
//! use topdeck_format::{header::{Capacity, Header}, layout};
//! let h = Header::new(Capacity::default(), 4242, 1000, 0, "svc", "default");
//! let mut page = vec![0u8; layout::HEADER_LEN];
//! h.encode(&mut page);
//! page[layout::VERSION_OFFSET..][..4].copy_from_slice(&layout::VERSION.to_le_bytes());
//! assert_eq!(Header::parse(&page, h.file_len).unwrap().pid, 4242);
//! ```

pub mod descriptor;
pub mod error;
pub mod exponential;
pub mod header;
pub mod layout;
pub mod names;
pub mod waits;

pub use descriptor::{MetricKind, MetricStrings, RawDescriptor, StrRef};
pub use error::FormatError;
pub use header::{Capacity, Header};

fn bytes_at(b: &[u8], off: usize, len: usize) -> &[u8] {
    &b[off..off + len]
}

/// Little-endian `u32` at `off`; callers have checked the length.
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(bytes_at(b, off, 4).try_into().expect("4 bytes"))
}

/// Little-endian `u64` at `off`; callers have checked the length.
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(bytes_at(b, off, 8).try_into().expect("8 bytes"))
}
