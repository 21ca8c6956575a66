// SPDX-License-Identifier: Apache-2.0
//! What can go wrong reading an MMV file: one error type carrying the file
//! (when there is one), what is wrong, and what to do.

use std::io;

use crate::file_error::{io_hint, sealed, FileError};

/// Result of the MMV reader.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An MMV file that could not be read: which file, what is wrong (see
/// [`FileError::kind`]) and, in its `Display`, what to do.
pub type Error = FileError<ErrorKind>;

/// What is wrong, for matching.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The bytes end before a structure that must be there.
    #[error("truncated: {what} needs {need} bytes, only {have} were read")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed (from the start of the file).
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The first four bytes are not `MMV\0`.
    #[error("not an MMV file (magic {found:02x?}, expected \"MMV\\0\")")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A format version other than 1, 2 or 3.
    #[error("MMV version {version} is not supported (this reader reads 1 to 3)")]
    UnsupportedVersion {
        /// The version found.
        version: i32,
    },
    /// The writer has not published the file yet (`g1` is 0, or `g1` and
    /// `g2` differ): it is still filling it in.
    #[error("not ready: the writer is still filling the file in (generation g1={g1}, g2={g2})")]
    NotReady {
        /// The first generation field.
        g1: u64,
        /// The second, equal to the first once the file is complete.
        g2: u64,
    },
    /// A field, offset or count does not fit the file or the format.
    #[error("corrupt at byte {offset}: {problem}")]
    Corrupt {
        /// Byte offset in the file of the field at fault.
        offset: u64,
        /// What is wrong.
        problem: &'static str,
    },
    /// The file is larger than the reader copies.
    #[error("the file is {size} bytes, above the {max}-byte limit of this reader")]
    TooLarge {
        /// Size of the file.
        size: u64,
        /// The reader's limit.
        max: u64,
    },
    /// Not a regular file (a link, a FIFO, a device, a directory...).
    #[error("not a regular file")]
    NotRegularFile,
    /// The file has more than one hard link (a writer makes its file with
    /// `O_EXCL`: one link); another name may be someone else's file.
    #[error("the file has {links} hard links (a writer's file has exactly one)")]
    HardLinked {
        /// Its link count.
        links: u64,
    },
    /// Part of a directory was left out of this look: more files than one
    /// look reads in one directory, or errors about its files counted
    /// rather than each reported.
    #[error("{what}")]
    LeftOut {
        /// What was left out, and the budget.
        what: String,
    },
    /// A system call failed (the `source` says why).
    #[error("{what} failed")]
    Io {
        /// The operation.
        what: &'static str,
    },
}

impl Error {
    pub(crate) fn corrupt(offset: usize, problem: &'static str) -> Self {
        Error::new(ErrorKind::Corrupt {
            offset: offset as u64,
            problem,
        })
    }

    pub(crate) fn truncated(what: &'static str, need: usize, have: usize) -> Self {
        Error::new(ErrorKind::Truncated {
            what,
            need: need as u64,
            have: have as u64,
        })
    }

    /// Whether reading again later may succeed: a file its writer has not
    /// published yet ([`ErrorKind::NotReady`]).
    pub fn is_not_ready(&self) -> bool {
        matches!(self.kind(), ErrorKind::NotReady { .. })
    }
}

impl sealed::Kind for ErrorKind {
    fn io(what: &'static str) -> Self {
        ErrorKind::Io { what }
    }

    fn not_regular_file() -> Self {
        ErrorKind::NotRegularFile
    }

    fn hard_linked(links: u64) -> Self {
        ErrorKind::HardLinked { links }
    }

    fn too_large(size: u64, max: u64) -> Self {
        ErrorKind::TooLarge { size, max }
    }

    fn hint(&self, io: Option<io::ErrorKind>) -> &'static str {
        match self {
            ErrorKind::NotReady { .. } => "read it again at the next look",
            ErrorKind::Truncated { .. } | ErrorKind::Corrupt { .. } => {
                "read it again; if it persists the file is not a working MMV writer's (a stale, foreign or hostile file)"
            }
            ErrorKind::BadMagic { .. } => "the file is not an MMV file; ignore it",
            ErrorKind::UnsupportedVersion { .. } => "read it with that PCP release's mmvdump",
            ErrorKind::TooLarge { .. } => "read it with mmvdump instead",
            ErrorKind::NotRegularFile | ErrorKind::HardLinked { .. } => {
                "it was not created by an MMV writer; check who put it there"
            }
            ErrorKind::LeftOut { .. } => {
                "the files past the budget stay unread while the directory holds this many (a crashed writer leaves its file behind)"
            }
            ErrorKind::Io { .. } => io_hint(
                io,
                "run as the writer's user or as root to read it",
                "the writer has removed it",
            ),
        }
    }
}
