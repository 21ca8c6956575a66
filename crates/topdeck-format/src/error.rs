// SPDX-License-Identifier: Apache-2.0
//! What can be wrong with a file, a name or a header, independent of where
//! the bytes came from. The library adds the path and what to do.

/// A violation of format v1 found while validating bytes or names.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The file is shorter than the structure being read.
    #[error("file too short: {what} needs {need} bytes, the file has {have}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes required.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The file does not start with the topdeck magic.
    #[error("not a topdeck metrics file (magic {found:02x?})")]
    BadMagic {
        /// The first bytes found.
        found: [u8; 8],
    },
    /// The writer has not finished creating the file.
    #[error("the file is not ready yet (version 0: its writer is still creating it)")]
    NotReady,
    /// The file uses a major version this reader does not understand.
    #[error("format version {major}.{minor} is not supported (this reader reads {supported}.x)")]
    UnsupportedVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
        /// The major this reader reads.
        supported: u16,
    },
    /// A size, offset or count does not fit the file.
    #[error("corrupt: {0}")]
    Corrupt(&'static str),
    /// A size or count is above a limit of the format (docs/FORMAT.md,
    /// "Limits a reader enforces"): no valid writer produces it.
    #[error("{what} is {value}, above the format's limit of {max}")]
    OverLimit {
        /// The field or quantity.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// A string that must be UTF-8 is not.
    #[error("corrupt: {0} is not valid UTF-8")]
    NotUtf8(&'static str),
    /// A metric or label name breaks the naming rules.
    #[error("invalid {what} {name:?}: {why}")]
    InvalidName {
        /// Which kind of name.
        what: &'static str,
        /// The name as given.
        name: String,
        /// The rule broken.
        why: &'static str,
    },
    /// A string or set is over its limit.
    #[error("{what} too long: {len} (limit {max})")]
    TooLong {
        /// Which string.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}
