// SPDX-License-Identifier: Apache-2.0
//! The crate's one error type: a kind to match on, a message with the
//! context (paths, program names), and the source chain kept.

use std::fmt;

/// What went wrong, for callers that react differently (the agent falls
/// back to coarse figures on [`ErrorKind::Unsupported`] and
/// [`ErrorKind::Permission`], and stops on [`ErrorKind::Namespace`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Not allowed: BPF needs root (CAP_BPF and CAP_PERFMON).
    Permission,
    /// The kernel lacks something the probe needs (BTF, tracepoints, maps).
    Unsupported,
    /// The BPF object failed to open, load or attach.
    Load,
    /// A BPF map could not be read.
    Map,
    /// cgroupfs or procfs did not say what we expected.
    Cgroup,
    /// Publishing through the topdeck registry failed.
    Registry,
    /// The namespace directory the registry belongs in is unusable: owned
    /// by another user, writable by others, a symlink, or impossible to
    /// create. Nothing else (eBPF or not) helps until root fixes it; the
    /// message names the directory, its owner and what to run.
    Namespace,
    /// The thread-waits array cannot be published at its pin: the pin's
    /// directory is not root's or others may write it, another live agent
    /// publishes there, bpffs is missing, or the budget holds no slot. The
    /// message names the path and what to do; falling back to coarse
    /// figures would not help.
    ThreadWaits,
    /// Other I/O.
    Io,
    /// A recording holds no trusted agent's registry at the moment asked
    /// (or at the start of the window).
    NotRecorded,
}

/// An error of the scheduler probe.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl fmt::Display) -> Self {
        Self {
            kind,
            message: message.to_string(),
            source: None,
        }
    }

    /// An error of `kind` saying `message`, caused by `source`.
    pub fn with_source(
        kind: ErrorKind,
        message: impl fmt::Display,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            message: message.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}
