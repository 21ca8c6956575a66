// SPDX-License-Identifier: Apache-2.0
//! The library's one error type. Every error names the file or directory it
//! concerns and says what to do; the cause is kept as the source.

use std::fmt;
use std::path::{Path, PathBuf};

use topdeck_format::FormatError;

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, for matching. New kinds may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An I/O call failed (the source holds the OS error).
    Io,
    /// A file is not a valid topdeck file: wrong magic, corrupt, truncated, not UTF-8.
    Corrupt,
    /// A file was created by a newer, incompatible format version.
    UnsupportedVersion,
    /// The writer has not finished creating the file yet.
    NotReady,
    /// The file shrank while it was mapped (someone truncated it).
    Shrunk,
    /// A namespace directory is owned by someone else or writable by others.
    UnsafeDirectory,
    /// A symlink, or a file owned by another user, was found where a metrics file belongs.
    Planted,
    /// A metric or label name breaks the naming rules.
    InvalidName,
    /// The same name and labels were registered twice.
    Duplicate,
    /// The registry file has no room left for another metric.
    RegistryFull,
    /// No registry matched the request.
    NotFound,
    /// The reader may not open it: another user's private directory or file.
    PermissionDenied,
    /// Larger than allowed: reading a registry would cost more than the
    /// reader's [`Limits`](crate::Limits) allow, a registry asked of the
    /// builder is larger than the format allows, or a directory holds more
    /// files than one listing reads.
    TooLarge,
}

/// A topdeck error: a kind, a message naming the path and the remedy, and a cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The file or directory concerned, when there is one.
    path: Option<PathBuf>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            path: None,
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// An I/O failure on `path` while doing `what`.
    pub(crate) fn io(what: &str, path: &Path, err: std::io::Error) -> Self {
        Self::new(ErrorKind::Io, format!("{}: {what}: {err}", path.display()))
            .with_path(path)
            .with_source(err)
    }

    /// A format violation found in the file at `path`.
    pub(crate) fn format(path: &Path, err: FormatError) -> Self {
        Self::format_at(path, None, err)
    }

    /// A format violation found in the file at `path`, at `place` in it
    /// (e.g. one descriptor).
    pub(crate) fn format_at(path: &Path, place: Option<&str>, err: FormatError) -> Self {
        let (kind, remedy) = match err {
            FormatError::NotReady => (ErrorKind::NotReady, "retry in a moment"),
            FormatError::UnsupportedVersion { .. } => (
                ErrorKind::UnsupportedVersion,
                "upgrade this reader to read it",
            ),
            FormatError::InvalidName { .. } | FormatError::TooLong { .. } => {
                (ErrorKind::InvalidName, "fix the name")
            }
            FormatError::BadMagic { .. } => (
                ErrorKind::Corrupt,
                "it is not a topdeck file, so readers leave it alone: find out who put it there",
            ),
            _ => (
                ErrorKind::Corrupt,
                "it is not a valid topdeck file; if its writer is dead, `topdeck gc` removes it",
            ),
        };
        let place = place.map(|p| format!("{p}: ")).unwrap_or_default();
        Self::new(kind, format!("{}: {place}{err}; {remedy}", path.display()))
            .with_path(path)
            .with_source(err)
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The file or directory concerned, when the error has one (its
    /// message then starts with it).
    ///
    /// ```
    /// let err = topdeck::RegistryReader::open("/nonexistent/1-1-0.topdeck".as_ref()).unwrap_err();
    /// assert_eq!(err.path(), Some(std::path::Path::new("/nonexistent/1-1-0.topdeck")));
    /// ```
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The same error, of another kind.
    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// Records the file or directory concerned.
    pub(crate) fn with_path(mut self, path: &Path) -> Self {
        self.path = Some(path.to_owned());
        self
    }

    /// The message: the path concerned, what happened and what to do.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether an I/O error says the file already exists.
    pub(crate) fn already_exists(&self) -> bool {
        self.source
            .as_ref()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|e| e.kind() == std::io::ErrorKind::AlreadyExists)
    }

    /// Appends what to do to the message.
    pub(crate) fn with_hint(mut self, hint: &str) -> Self {
        self.message.push_str("; ");
        self.message.push_str(hint);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}
