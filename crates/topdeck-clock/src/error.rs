// SPDX-License-Identifier: Apache-2.0
//! The crate's one error type: only decoding stored parameters can fail;
//! reading the clock never does.

/// What went wrong, for matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Fewer bytes than the parameter area.
    Truncated,
    /// A `clock_version` this crate does not know.
    UnknownVersion,
    /// A field outside its valid range.
    Invalid,
}

/// An error decoding clock parameters.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
