// SPDX-License-Identifier: Apache-2.0
//! topdeck: metrics in memory-mapped files.
//!
//! A process creates a [`Registry`] (one file in the namespace directory,
//! `/dev/shm/topdeck-<uid>` unless `TOPDECK_DIR` says otherwise), registers
//! counters, gauges and histograms, and updates them through handles that
//! point straight into the mapping: no lock, no system call, no background
//! thread, and no cache line shared between threads for counters and
//! histograms. Any number of observers list the files with a [`Namespace`]
//! and read them with a [`RegistryReader`]: read-only mappings, guarded
//! copies, nothing written and no lock the writer waits on.
//!
//! The byte layout is specified in `docs/FORMAT.md` and implemented in the
//! `topdeck-format` crate; the kinds' semantics are defined there.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! use topdeck::{Namespace, Registry, Value};
//!
//! // Writer
//! let registry = Registry::builder().dir(dir.path()).build()?;
//! let served = registry.counter("requests_total", &[("route", "/")], "Requests served.", "")?;
//! let latency = registry.histogram("request_duration_seconds", &[], "Latency.", "seconds")?;
//! served.inc();
//! latency.record(0.004);
//!
//! // Reader (normally another process)
//! for entry in Namespace::at(dir.path()).list().entries {
//!     let snap = entry.open()?.snapshot()?;
//!     assert_eq!(snap.get("requests_total", &[("route", "/")]), Some(&Value::Counter(1)));
//! }
//! # Ok::<(), topdeck::Error>(())
//! ```

pub mod clock;
pub mod dir;
mod error;
pub mod human;
mod process;
mod reader;
pub mod waits;
mod writer;

pub use error::{Error, ErrorKind, Result};
pub use reader::{
    label_value, BucketsValue, Change, Changes, ForeignReader, GcReport, HistogramValue, Limits,
    Listing, Liveness, LockTable, MetricInfo, Namespace, RegistryEntry, RegistryReader,
    SeriesChange, SeriesKey, Snapshot, Snapshots, Value, MAX_ERRORS_PER_DIR,
    MAX_FALLBACKS_PER_USER, MAX_FILES_PER_DIR, MAX_TIME_PER_DIR,
};
pub use topdeck_format::MetricKind;
pub use waits::ThreadWaits;
pub use writer::{
    Buckets, Counter, Family, Gauge, GaugeF64, Histogram, LocalCounter, Registry, RegistryBuilder,
    Timer, TimerGuard, Timing,
};
