// SPDX-License-Identifier: Apache-2.0
//! One error for every source: which kind of source, which file, and why,
//! in the terms of topdeck's own [`ErrorKind`], so that a view counts and
//! shows a JVM's corrupt file as it does a registry's. Each parser keeps
//! its own detailed error; this is what they all become at the seam.

use std::fmt;
use std::path::{Path, PathBuf};

use topdeck::ErrorKind;
use topdeck_portholes::{aeron, hsperf, mmv, prommp};

use crate::source::Kind;

/// A source, file or directory that could not be read; the others still are.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let bad = dir.path().join("1-1-0.topdeck");
/// std::fs::write(&bad, vec![0x5a; 8192]).unwrap();
/// let mut tracker = topdeck_sources::Tracker::<()>::new(topdeck::Namespace::at(dir.path()), None);
/// let look = tracker.look();
/// let e = &look.errors[0];
/// assert_eq!((e.source(), e.kind()), (topdeck_sources::Kind::Topdeck, topdeck::ErrorKind::Corrupt));
/// assert_eq!(e.path(), Some(bad.as_path()));
/// assert!(e.to_string().contains("1-1-0.topdeck"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    source: Kind,
    kind: ErrorKind,
    path: Option<PathBuf>,
    message: String,
}

impl Error {
    /// An error of a `source` kind, about `path`; `message` names the path
    /// and says what to do.
    pub(crate) fn new(
        source: Kind,
        kind: ErrorKind,
        path: Option<&Path>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            source,
            kind,
            path: path.map(Path::to_path_buf),
            message: message.into(),
        }
    }

    /// Which kind of source it came from.
    pub fn source(&self) -> Kind {
        self.source
    }

    /// What went wrong, for matching and counting.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The file or directory concerned, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<&topdeck::Error> for Error {
    fn from(e: &topdeck::Error) -> Self {
        Self::new(Kind::Topdeck, e.kind(), e.path(), format!("{e:#}"))
    }
}

impl From<topdeck::Error> for Error {
    fn from(e: topdeck::Error) -> Self {
        Self::from(&e)
    }
}

impl From<&hsperf::Error> for Error {
    fn from(e: &hsperf::Error) -> Self {
        use hsperf::ErrorKind as H;
        let kind = match e.kind() {
            H::Truncated { .. }
            | H::Corrupt { .. }
            | H::BadMagic { .. }
            | H::BadByteOrder { .. } => ErrorKind::Corrupt,
            H::UnsupportedVersion { .. } => ErrorKind::UnsupportedVersion,
            H::NotAccessible => ErrorKind::NotReady,
            H::TooLarge { .. } | H::LeftOut { .. } => ErrorKind::TooLarge,
            H::NotRegularFile | H::HardLinked { .. } | H::OwnerMismatch { .. } => {
                ErrorKind::Planted
            }
            H::InsecureDirectory { .. } => ErrorKind::UnsafeDirectory,
            _ => ErrorKind::Io,
        };
        Self::new(Kind::Jvm, kind, e.path(), e.to_string())
    }
}

impl From<&aeron::Error> for Error {
    fn from(e: &aeron::Error) -> Self {
        use aeron::Error as A;
        let (kind, path) = match e {
            A::Io { path, .. } => (ErrorKind::Io, path),
            A::NotRegular { path } | A::Link { path } => (ErrorKind::Planted, path),
            A::Format { path, source } => (
                match source {
                    aeron::FormatError::NotReady => ErrorKind::NotReady,
                    aeron::FormatError::UnsupportedVersion { .. } => ErrorKind::UnsupportedVersion,
                    _ => ErrorKind::Corrupt,
                },
                path,
            ),
            A::NotWriter { path, .. } => (ErrorKind::Planted, path),
            A::LeftOut { path, .. } => (ErrorKind::TooLarge, path),
        };
        Self::new(Kind::Aeron, kind, Some(path), e.to_string())
    }
}

impl From<&prommp::DirError> for Error {
    fn from(e: &prommp::DirError) -> Self {
        let kind = match e {
            prommp::DirError::List { .. } => ErrorKind::Io,
            prommp::DirError::TooLarge { .. } => ErrorKind::TooLarge,
        };
        Self::new(Kind::Python, kind, Some(e.path()), e.to_string())
    }
}

impl From<&prommp::FileError> for Error {
    fn from(e: &prommp::FileError) -> Self {
        Self::new(
            Kind::Python,
            ErrorKind::Corrupt,
            Some(&e.path),
            e.to_string(),
        )
    }
}

impl From<&mmv::Error> for Error {
    fn from(e: &mmv::Error) -> Self {
        use mmv::ErrorKind as M;
        let kind = match e.kind() {
            M::Truncated { .. } | M::BadMagic { .. } | M::Corrupt { .. } => ErrorKind::Corrupt,
            M::UnsupportedVersion { .. } => ErrorKind::UnsupportedVersion,
            M::NotReady { .. } => ErrorKind::NotReady,
            M::TooLarge { .. } | M::LeftOut { .. } => ErrorKind::TooLarge,
            M::NotRegularFile | M::HardLinked { .. } => ErrorKind::Planted,
            _ => ErrorKind::Io,
        };
        Self::new(Kind::Mmv, kind, e.path(), e.to_string())
    }
}
