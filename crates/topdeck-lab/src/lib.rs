// SPDX-License-Identifier: Apache-2.0
//! topdeck-lab: the interference lab. It measures what observing a system
//! costs the system: a victim operation timed into latency histograms alone
//! and while an observer runs (`observer`), observers contending with each
//! other (`contend`), topdeck's own readers against its writers, with a
//! lock-based exporter for contrast (`selftest`), and the idle cost of
//! instrumentation against a 1 ms time-cache ticker (`idle`). Each
//! experiment prints text tables shaped like the source article's and saves
//! its result as JSON; [`report`] turns the saved results into one HTML page
//! with SVG charts.
//!
//! The `topdeck-lab` binary (`src/bin/topdeck-lab`) is its command line.
//! The lab re-executes a helper binary for work that must happen in another
//! process (populating the host with sockets and threads, idle children);
//! [`child::Helper`] names that binary and [`tasks::run`] is its body.
//!
//! ```no_run
//! use topdeck_lab::{child::Helper, experiments::contend};
//! let cfg = contend::Config::new(vec!["ps".into(), "auxww".into()], Helper::current_exe(&["child"]).unwrap());
//! let result = contend::run(&cfg)?;
//! print!("{}", contend::table(&result));
//! # Ok::<(), topdeck_lab::Error>(())
//! ```

pub mod child;
pub mod cpu;
mod error;
pub mod experiments;
pub mod hist;
pub mod populate;
pub mod report;
pub mod table;
pub mod tasks;
pub mod timing;
pub mod victims;

pub use error::{Error, ErrorKind, Result};
