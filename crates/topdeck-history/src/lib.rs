// SPDX-License-Identifier: Apache-2.0
//! topdeck-history: the flight recorder's store. Every source the views
//! see, recorded every interval, read back as the views read the host.
//!
//! A store is a directory of segments (one an hour, or smaller under a
//! size cap), each an append-only run of frames. A frame is one moment:
//! every source (its identity, its writer's liveness) and every series'
//! value. A key frame (one a minute at 1 s) holds every value whole;
//! the frames between hold what changed since the frame before, so an
//! unchanged series costs a byte before compression. Each frame is
//! compressed (zstd) and checksummed (CRC-32): a torn tail after SIGKILL
//! or power loss is dropped, a damaged frame costs that frame only (the
//! frames after it are rebuilt backward from the next key frame), and
//! both are said. The format is in `docs/FORMAT.md` §11.
//!
//! [`Recorder`] writes a store; [`History`] reads it: a [`Summary`], the
//! sources at a moment ([`History::at`]), every moment of a stretch in
//! order ([`History::replay`]), each as the same [`Source`] and
//! [`Snapshot`] a live look gives, so every view shows the past as it
//! shows the present.
//!
//! [`Source`]: topdeck_sources::Source
//! [`Snapshot`]: topdeck::Snapshot

mod codec;
mod error;
mod history;
mod recorder;
mod segment;
mod time;

pub use error::Error;
pub use history::{Filter, History, Moment, Replay, Summary};
pub use recorder::{Options, Recorder, Stats, Written};
pub use time::{format as format_time, parse_time};

/// Where a store is kept unless told otherwise: `/var/lib/topdeck/history`
/// for root, else `$XDG_STATE_HOME/topdeck/history` (by default
/// `~/.local/state/topdeck/history`).
pub fn default_dir() -> std::path::PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return "/var/lib/topdeck/history".into();
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|s| !s.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".local/state")))
        .unwrap_or_else(|| "/tmp".into());
    state.join("topdeck/history")
}
