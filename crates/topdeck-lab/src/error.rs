// SPDX-License-Identifier: Apache-2.0
//! The lab's one error type: a kind to match on, a message that says what
//! happened and what to do, and the cause kept as the source.

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, for matching. New kinds may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A system call or file operation failed (the source holds the OS error).
    Io,
    /// An option or argument makes no sense (empty command, zero iterations).
    BadInput,
    /// A helper or observed child process failed or said something unexpected.
    Child,
    /// The topdeck library refused (registry, reader).
    Topdeck,
    /// Writing the report failed.
    Report,
}

/// A lab error.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// An error of `kind` with no cause.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// An I/O error while doing `what`; the OS error is kept as the source,
    /// so `{:#}` (anyhow) prints `what: OS error` once.
    pub fn io(what: impl std::fmt::Display, err: std::io::Error) -> Self {
        Self {
            kind: ErrorKind::Io,
            message: what.to_string(),
            source: Some(Box::new(err)),
        }
    }

    /// The last OS error (errno) while doing `what`.
    pub fn last_os(what: impl std::fmt::Display) -> Self {
        Self::io(what, std::io::Error::last_os_error())
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl From<topdeck::Error> for Error {
    fn from(e: topdeck::Error) -> Self {
        Self {
            kind: ErrorKind::Topdeck,
            message: format!("topdeck: {e}"),
            source: Some(Box::new(e)),
        }
    }
}
