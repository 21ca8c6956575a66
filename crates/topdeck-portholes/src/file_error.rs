// SPDX-License-Identifier: Apache-2.0
//! The error of a porthole reader that copies one file at a time (hsperf,
//! MMV): which file (when there is one), what is wrong (each reader's own
//! `ErrorKind`, for matching) and, in its `Display`, what to do. Each
//! reader names it `Error`: [`hsperf::Error`](crate::hsperf::Error),
//! [`mmv::Error`](crate::mmv::Error).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A file that could not be read: which file, what is wrong (see
/// [`FileError::kind`]) and, in its `Display`, what to do.
#[derive(Debug)]
pub struct FileError<K> {
    path: Option<PathBuf>,
    kind: K,
    source: Option<io::Error>,
}

/// A reader's `ErrorKind`: what is wrong, for matching. Only this crate's
/// readers have one.
pub trait FileErrorKind: fmt::Display + fmt::Debug + sealed::Kind {}

impl<K: sealed::Kind + fmt::Display + fmt::Debug> FileErrorKind for K {}

pub(crate) mod sealed {
    use std::io;

    /// What the shared parts of the readers need of a kind: the kinds
    /// every reader has, and the advice for each.
    pub trait Kind: Sized {
        /// A system call `what` failed.
        fn io(what: &'static str) -> Self;
        /// Not a regular file.
        fn not_regular_file() -> Self;
        /// More than one hard link.
        fn hard_linked(links: u64) -> Self;
        /// Larger than the reader copies.
        fn too_large(size: u64, max: u64) -> Self;
        /// What to do; `io` is the operating system's error, if any.
        fn hint(&self, io: Option<io::ErrorKind>) -> &'static str;
    }
}

/// The advice for a failed system call: `denied` when permission was
/// refused, `gone` when the file is no longer there.
pub(crate) fn io_hint(
    io: Option<io::ErrorKind>,
    denied: &'static str,
    gone: &'static str,
) -> &'static str {
    match io {
        Some(io::ErrorKind::PermissionDenied) => denied,
        Some(io::ErrorKind::NotFound) => gone,
        _ => "check the file and its directory",
    }
}

impl<K: FileErrorKind> FileError<K> {
    pub(crate) fn new(kind: K) -> Self {
        FileError {
            path: None,
            kind,
            source: None,
        }
    }

    pub(crate) fn io(what: &'static str, path: &Path, source: io::Error) -> Self {
        FileError {
            path: Some(path.to_path_buf()),
            kind: K::io(what),
            source: Some(source),
        }
    }

    pub(crate) fn at(mut self, path: &Path) -> Self {
        self.path = Some(path.to_path_buf());
        self
    }

    /// What is wrong.
    pub fn kind(&self) -> &K {
        &self.kind
    }

    /// The file, when the bytes came from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The operating system's error, for the kind `Io`.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.source.as_ref()
    }
}

impl<K: FileErrorKind> fmt::Display for FileError<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(path) = &self.path {
            write!(f, "{}: ", path.display())?;
        }
        write!(f, "{}", self.kind)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        let hint = self.kind.hint(self.source.as_ref().map(io::Error::kind));
        write!(f, "; {hint}")
    }
}

impl<K: FileErrorKind> std::error::Error for FileError<K> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
