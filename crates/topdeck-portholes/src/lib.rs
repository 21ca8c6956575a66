// SPDX-License-Identifier: Apache-2.0
//! Portholes: metrics other runtimes already publish in memory-mapped
//! files, read without disturbing them. Each format has its own module: a
//! parser of bytes copied out of the file (never a mapping of someone
//! else's file, which a truncation would turn into SIGBUS), and the
//! discovery and liveness rules of its runtime (never a lock on its file:
//! a JVM that finds its hsperfdata file locked runs without one).
//!
//! - [`hsperf`]: the HotSpot JVM's `hsperfdata_<user>/<pid>` (PerfData 2.0).
//! - [`prommp`]: Python prometheus_client's multiprocess `*.db` files.
//! - [`aeron`]: an Aeron media driver's `cnc.dat` counters.
//! - [`mmv`]: Performance Co-Pilot's memory-mapped values (`$PCP_TMP_DIR/mmv/*`).
//!
//! This crate depends on no other part of topdeck: the observers adapt its
//! readings to their views.

pub mod aeron;
mod copy;
pub mod file_error;
pub mod hsperf;
pub mod mmv;
pub mod prommp;
mod views;
