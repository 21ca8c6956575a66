// SPDX-License-Identifier: Apache-2.0
//! What can go wrong with a store, each saying what and what to do.

use std::path::PathBuf;

/// A store could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file operation failed (a full disk is one: recording resumes
    /// when space returns).
    #[error("{what} {}: {source}{}", path.display(), hint(source))]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which file or directory.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Another recorder writes this store.
    #[error("another `topdeck record` is writing {}; stop it first, or record elsewhere with --dir", dir.display())]
    Busy {
        /// The store.
        dir: PathBuf,
    },
    /// The store's directory is not safe to record into.
    #[error("refusing to record into {}: {why}; use a directory of your own with --dir", dir.display())]
    Unsafe {
        /// The store.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Nothing is recorded there.
    #[error("nothing is recorded in {}: start `topdeck record` (or pass the store with --history)", dir.display())]
    Empty {
        /// The store.
        dir: PathBuf,
    },
    /// A time that could not be understood.
    #[error("cannot read the time {text:?}: {why} (try `03:12`, `yesterday 03:12`, `-10m` or `2026-11-29T03:12:00Z`)")]
    Time {
        /// What was given.
        text: String,
        /// Why not.
        why: String,
    },
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            " (the disk is full: recording pauses and resumes when space is freed)"
        }
        Some(libc::EACCES) | Some(libc::EPERM) => " (not allowed: run as the store's owner)",
        _ => "",
    }
}
