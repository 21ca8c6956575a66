// SPDX-License-Identifier: Apache-2.0
//! topdeck from C: the C ABI of the `topdeck` library, built as
//! `libtopdeck.so` and `libtopdeck.a`, declared in `include/topdeck.h`
//! (generated from this crate by cbindgen; `make -C bindings/c header`).
//!
//! Every entry point catches panics and turns them into `TD_ERR_INTERNAL`;
//! fallible calls return a `td_status` and leave a message for
//! `td_last_error()`. Handles are boxed Rust handles: an update is the
//! Rust update behind one pointer.

mod args;
mod reader;
mod status;
mod writer;

pub use args::td_label;
pub use reader::{
    td_entry, td_histogram_value, td_kind, td_list, td_listing, td_listing_count, td_listing_entry,
    td_listing_free, td_listing_rejected, td_listing_rejected_count, td_metric, td_reader,
    td_reader_alive, td_reader_close, td_reader_open, td_reader_open_path, td_reader_snapshot,
    td_rejected, td_snapshot, td_snapshot_count, td_snapshot_free, td_snapshot_metric,
};
pub use status::{td_last_error, td_status, td_status_name};
pub use writer::*;
