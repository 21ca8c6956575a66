// SPDX-License-Identifier: Apache-2.0
//! The writer side: a registry file and the handles that update it.

mod cell;
mod counter;
mod cpu_wait;
mod family;
mod gauge;
mod histogram;
mod mapping;
mod registry;
mod shard;
mod tick_index;
mod timer;

pub use counter::{Counter, LocalCounter};
pub use family::Family;
pub use gauge::{Gauge, GaugeF64};
pub use histogram::{Buckets, Histogram};
pub use registry::{Registry, RegistryBuilder};
pub use timer::{Timer, TimerGuard, Timing};
