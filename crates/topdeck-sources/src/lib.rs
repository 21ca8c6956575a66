// SPDX-License-Identifier: Apache-2.0
//! topdeck-sources: other runtimes' portholes as topdeck snapshots, so
//! every view (`ls`, `show`, `watch`, `top`, `serve`) shows a JVM, a
//! Python service and an Aeron driver beside topdeck's own registries.
//!
//! The parsers are in `topdeck-portholes` (read-only: nothing locked,
//! written or mapped); this crate finds the sources on the host and in
//! its containers ([`Portholes::look`]), tells live ones from files left
//! behind, and names their series for Prometheus, the same in every view:
//!
//! - **jvm**: `jvm_` and the hsperfdata counter's name in snake case, in
//!   its natural unit (ticks as seconds through `sun.os.hrt.frequency`,
//!   bytes as bytes): `sun.gc.collector.0.time` is
//!   `jvm_sun_gc_collector_0_time_seconds`, a counter;
//! - **python**: prometheus_client's names, unchanged, merged as its
//!   `MultiProcessCollector` merges them;
//! - **aeron**: `aeron_` and the counter's label (`Bytes sent` is
//!   `aeron_bytes_sent`).

mod aeron;
mod assembly;
mod jvm;
mod look;
mod names;
mod procs;
mod python;
mod spent;
#[cfg(test)]
mod testing;

pub use look::{Config, Found, Kind, Look, Portholes, Reading};
pub use names::metric_name;
