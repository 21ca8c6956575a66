// SPDX-License-Identifier: Apache-2.0
//! topdeck-sources: every source of series on the host as one kind of
//! thing, so every view (`ls`, `show`, `watch`, `top`, `serve`, `push`)
//! reads a JVM, a Python service and an Aeron driver as it reads
//! topdeck's own registries: one [`Source`] (kind, path, proven pid, uid,
//! process, container, liveness), one [`Tracker`] that finds them all in
//! one walk of `/proc` and hands out the same [`Tracked`] readings for
//! `Snapshot::since`, and one [`Error`].
//!
//! The parsers are in `topdeck-portholes` (read-only: nothing locked,
//! written or mapped); this crate finds the sources on the host and in
//! its containers, tells live ones from files left behind, and names
//! other runtimes' series for Prometheus, the same in every view:
//!
//! - **jvm**: `jvm_` and the hsperfdata counter's name in snake case, in
//!   its natural unit (ticks as seconds through `sun.os.hrt.frequency`,
//!   bytes as bytes): `sun.gc.collector.0.time` is
//!   `jvm_sun_gc_collector_0_time_seconds`, a counter;
//! - **python**: prometheus_client's names, unchanged, merged as its
//!   `MultiProcessCollector` merges them;
//! - **aeron**: `aeron_` and the counter's label (`Bytes sent` is
//!   `aeron_bytes_sent`);
//! - **mmv**: PCP's name made safe (`mmv.app.requests` is
//!   `mmv_app_requests`), in base units, instances as `instance`.

mod aeron;
mod assembly;
pub mod dist;
mod error;
mod jvm;
mod jvm_summary;
pub mod latency;
mod mmv;
mod names;
mod portholes;
mod procs;
mod python;
mod source;
mod spent;
#[cfg(test)]
mod testing;
mod tracker;

pub use dist::Dist;
pub use error::Error;
pub use jvm_summary::{Collector, JvmSummary, Space};
pub use latency::{latencies, Latency};
pub use names::{metric_name, unit_of_name};
pub use portholes::{Config, Portholes};
pub use source::{state_name, Kind, Source};
pub use tracker::{Look, Tracked, Tracker};
