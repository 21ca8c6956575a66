// SPDX-License-Identifier: Apache-2.0
//! Latency explained: a service's own latency histograms joined, window by
//! window, with the CPU its threads waited for and who held the CPU, so
//! that one line answers "is it my code, or did my threads wait for a CPU,
//! and behind whom?".
//!
//! - `topdeck_sources::latency`: which series are latencies, and their
//!   timers' companions (each request's own CPU wait, when measured).
//! - [`wait`]: the threads' CPU wait, from the agent's thread-waits array
//!   or `/proc/<tid>/schedstat`.
//! - [`window`]: the join over one window, with a baseline kept across
//!   windows; [`verdict`]: its one line.
//!
//! Reading the source is the caller's (`topdeck explain` and `top` read it
//! through the one tracker); [`Service::read`] adds the rest of a
//! [`Reading`].

pub mod service;
pub mod verdict;
pub mod wait;
pub mod window;

pub use service::Service;
pub use topdeck_sources::{latencies, Dist, Latency};
pub use wait::Level;
pub use window::{Culprit, Explainer, Finding, Reading, Row, Window};
