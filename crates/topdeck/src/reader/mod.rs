// SPDX-License-Identifier: Apache-2.0
//! The reader side: list registries, check their writers, snapshot them.

mod fault_guard;
mod foreign;
mod locks;
mod mapped;
mod namespace;
mod registry_reader;
mod series;
mod since;
mod snapshot;
mod snapshots;
mod views;

pub use foreign::ForeignReader;
pub use locks::LockTable;
pub use mapped::Liveness;
pub use namespace::{
    GcReport, Listing, Namespace, RegistryEntry, MAX_ERRORS_PER_DIR, MAX_FALLBACKS_PER_USER,
    MAX_FILES_PER_DIR, MAX_TIME_PER_DIR,
};
pub use registry_reader::{Limits, RegistryReader};
pub use series::{label_value, SeriesKey};
pub use since::{Change, Changes, SeriesChange};
pub use snapshot::{BucketsValue, HistogramValue, MetricInfo, Snapshot, Value};
pub use snapshots::Snapshots;
