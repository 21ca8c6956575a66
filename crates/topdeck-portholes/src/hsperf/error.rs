// SPDX-License-Identifier: Apache-2.0
//! What can go wrong reading an hsperfdata buffer or file: one error type
//! carrying the file (when there is one), what is wrong, and what to do.

use std::io;

use crate::file_error::{io_hint, sealed, FileError};

/// Result of the hsperfdata reader.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An hsperfdata buffer or file that could not be read: which file, what
/// is wrong (see [`FileError::kind`]) and, in its `Display`, what to do.
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
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The first four bytes are not `CA FE C0 C0`.
    #[error("not an hsperfdata file (magic {found:02x?}, expected [ca, fe, c0, c0])")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// Byte 4 is neither 0 (big-endian) nor 1 (little-endian).
    #[error("byte order byte is {found}, neither 0 (big-endian) nor 1 (little-endian)")]
    BadByteOrder {
        /// The byte found.
        found: u8,
    },
    /// A PerfData version other than 2.x.
    #[error("PerfData version {major}.{minor} is not supported (this reader reads 2.x)")]
    UnsupportedVersion {
        /// Major version found.
        major: u8,
        /// Minor version found.
        minor: u8,
    },
    /// The JVM has not finished initialising its counters (`accessible` is 0).
    #[error("the JVM has not made its counters accessible yet (it is starting)")]
    NotAccessible,
    /// A field, offset or entry does not fit the buffer or the format.
    #[error("corrupt at byte {offset}{}: {problem}", entry.map(|e| format!(" (entry {e})")).unwrap_or_default())]
    Corrupt {
        /// Index of the entry being read, if any.
        entry: Option<u32>,
        /// Byte offset in the buffer of the field at fault.
        offset: u64,
        /// What is wrong.
        problem: &'static str,
    },
    /// The file is larger than the reader copies.
    #[error("the file is {size} bytes, above the {max}-byte limit of this reader (a JVM started with a large -XX:PerfDataMemorySize)")]
    TooLarge {
        /// Size of the file.
        size: u64,
        /// The reader's limit.
        max: u64,
    },
    /// Not a regular file (a FIFO, a device, a directory...).
    #[error("not a regular file")]
    NotRegularFile,
    /// The file has more than one hard link, which the JVM refuses too.
    #[error("the file has {links} hard links (a JVM's file has exactly one)")]
    HardLinked {
        /// Its link count.
        links: u64,
    },
    /// The directory fails the JVM's own security checks.
    #[error("insecure hsperfdata directory: {why}")]
    InsecureDirectory {
        /// Which check failed.
        why: &'static str,
    },
    /// The file's owner is not the directory's owner.
    #[error("the file is owned by uid {file_uid}, its directory by uid {dir_uid}")]
    OwnerMismatch {
        /// Owner of the file.
        file_uid: u32,
        /// Owner of the directory.
        dir_uid: u32,
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
    pub(crate) fn corrupt(entry: Option<u32>, offset: usize, problem: &'static str) -> Self {
        Error::new(ErrorKind::Corrupt {
            entry,
            offset: offset as u64,
            problem,
        })
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
            ErrorKind::NotAccessible => "read it again in a few milliseconds",
            ErrorKind::Truncated { .. } | ErrorKind::Corrupt { .. } => {
                "read it again; if it persists the file is not a live JVM's (a stale or foreign file)"
            }
            ErrorKind::BadMagic { .. } | ErrorKind::BadByteOrder { .. } => {
                "the file is not a HotSpot JVM's; ignore it"
            }
            ErrorKind::UnsupportedVersion { .. } => "read it with that JDK's jstat instead",
            ErrorKind::TooLarge { .. } => {
                "read it with jstat, or restart the JVM with a smaller -XX:PerfDataMemorySize"
            }
            ErrorKind::NotRegularFile
            | ErrorKind::HardLinked { .. }
            | ErrorKind::InsecureDirectory { .. }
            | ErrorKind::OwnerMismatch { .. } => {
                "it was not created by a JVM; check who put it there"
            }
            ErrorKind::LeftOut { .. } => {
                "the files past the budget stay unread while the directory holds this many; only its owner can thin it (a killed JVM leaves its file behind)"
            }
            ErrorKind::Io { .. } => io_hint(
                io,
                "run as the JVM's user or as root to read it",
                "the JVM has exited",
            ),
        }
    }
}
