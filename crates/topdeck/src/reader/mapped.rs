// SPDX-License-Identifier: Apache-2.0
//! A reader's view of someone else's file: opened read-only without
//! following links, mapped read-only, and read only through guarded word
//! copies into private buffers, so a file truncated under us is an error for
//! that file and never a SIGBUS for the reader.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use topdeck_format::layout::HEADER_FIELDS_END;
use topdeck_format::{FormatError, Header};

use rustix::fs::FlockOperation;

use super::fault_guard;
use super::locks::LockTable;
use crate::error::{Error, ErrorKind, Result};

/// Largest file a reader maps: the format's limit on `file_len`.
const MAX_FILE_LEN: u64 = topdeck_format::layout::MAX_FILE_LEN;

/// Whether a registry's writer still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// The writer holds its lock on the file.
    Alive,
    /// Nobody holds the lock: the writer exited without removing the file, or crashed.
    Dead,
}

/// Who the file belongs to and who else may open it, from `fstat` on the
/// reader's own descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity {
    pub(crate) uid: u32,
    mode: u32,
    dev: u64,
    ino: u64,
}

/// What a lock probe found: the answer, or a question for `/proc/locks`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Probe {
    Known(Liveness),
    Ask(LockQuestion),
}

impl Probe {
    /// The answer, from `table` if the lock's holder must be looked up.
    pub(crate) fn answer(self, table: &LockTable) -> Liveness {
        match self {
            Probe::Known(l) => l,
            Probe::Ask(q) => q.answer(table),
        }
    }
}

/// Whether the writer of a file others may lock holds its lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockQuestion {
    identity: Identity,
    writer: Option<(u32, u64)>,
}

impl LockQuestion {
    pub(crate) fn answer(&self, table: &LockTable) -> Liveness {
        let Identity { uid, dev, ino, .. } = self.identity;
        if table.writer_holds_lock(dev, ino, uid, self.writer) {
            Liveness::Alive
        } else {
            Liveness::Dead
        }
    }
}

/// A read-only mapping of a registry file.
#[derive(Debug)]
pub(crate) struct MappedFile {
    map: Option<memmap2::Mmap>,
    len: u64,
    path: PathBuf,
    /// `None` once detached: the mapping outlives its descriptor.
    file: Option<File>,
    identity: Identity,
}

impl MappedFile {
    /// Opens `path` (a file a user named, not one found by listing a
    /// namespace: those come through [`MappedFile::from_file`]).
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io("cannot open", path, e))?;
        Self::from_file(file, path)
    }

    /// Maps a file already opened (and checked) by the caller.
    pub(crate) fn from_file(file: File, path: &Path) -> Result<Self> {
        let meta = file
            .metadata()
            .map_err(|e| Error::io("cannot stat", path, e))?;
        if !meta.is_file() {
            return Err(Error::new(
                ErrorKind::Planted,
                format!(
                    "{}: not a regular file, so not a registry; give the path of a `.topdeck` file",
                    path.display()
                ),
            )
            .with_path(path));
        }
        let len = meta.len();
        if len > MAX_FILE_LEN {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "{}: {len} bytes is larger than any registry; not reading it",
                    path.display()
                ),
            )
            .with_path(path));
        }
        let map = if len == 0 {
            None
        } else {
            // SAFETY: a read-only shared mapping. Its contents may change or
            // vanish underneath us; it is only read through `guarded_copy`,
            // never through references.
            Some(
                unsafe { memmap2::MmapOptions::new().len(len as usize).map(&file) }
                    .map_err(|e| Error::io("cannot map", path, e))?,
            )
        };
        Ok(Self {
            map,
            len,
            path: path.to_owned(),
            file: Some(file),
            identity: Identity {
                uid: meta.uid(),
                mode: meta.mode(),
                dev: meta.dev(),
                ino: meta.ino(),
            },
        })
    }

    /// The file's owner, as `fstat` saw it when it was opened.
    pub(crate) fn owner(&self) -> u32 {
        self.identity.uid
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Copies `len` bytes at `off` into `out` (replacing its contents).
    pub(crate) fn copy(&self, off: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        if off.checked_add(len as u64).is_none_or(|end| end > self.len) {
            out.clear();
            return Err(Error::format(
                &self.path,
                FormatError::Truncated {
                    what: "a section",
                    need: off.saturating_add(len as u64),
                    have: self.len,
                },
            ));
        }
        let Some(map) = &self.map else {
            out.clear();
            return Ok(());
        };
        // Sized without zeroing what the copy overwrites anyway: a
        // snapshot's copies are most of what it writes.
        if out.len() < len {
            out.resize(len, 0);
        } else {
            out.truncate(len);
        }
        // SAFETY: `off + len <= self.len`, the mapped length, checked above.
        let src = unsafe { map.as_ptr().add(off as usize) };
        // SAFETY: the source range lies inside the live mapping.
        unsafe { fault_guard::guarded_copy(out, src) }.map_err(|e| {
            out.clear();
            Error::new(
                ErrorKind::Shrunk,
                format!(
                    "{}: the file shrank while being read ({e}); someone truncated it, and it is no \
                     longer trustworthy: remove it, or `topdeck gc` once its writer is dead",
                    self.path.display()
                ),
            )
            .with_path(&self.path)
        })
    }

    /// Reads and validates the header.
    pub(crate) fn header(&self) -> Result<Header> {
        let mut buf = Vec::new();
        self.copy(
            0,
            (HEADER_FIELDS_END as u64).min(self.len) as usize,
            &mut buf,
        )?;
        Header::parse(&buf, self.len).map_err(|e| Error::format(&self.path, e))
    }

    /// Probes the writer's lock with a shared lock: observers never block
    /// each other or the writer. A lock is proof of life only if the
    /// file's owner holds it: when others may open the file (a group
    /// reader, or an old writer's 0644 file), someone else's lock on a dead
    /// file must not make it look alive, so `/proc/locks` must say who
    /// holds it: [`Probe::Ask`]. `writer` is the pid and start time the
    /// header claims, which a lock holder in this pid namespace may match
    /// (a writer that changed its uid after creating the file).
    pub(crate) fn probe(&self, writer: Option<(u32, u64)>) -> Probe {
        let ask = Probe::Ask(LockQuestion {
            identity: self.identity,
            writer,
        });
        let Some(file) = &self.file else {
            return ask;
        };
        match rustix::fs::flock(file, FlockOperation::NonBlockingLockShared) {
            Ok(()) => {
                let _ = rustix::fs::flock(file, FlockOperation::Unlock);
                Probe::Known(Liveness::Dead)
            }
            Err(_) if self.identity.mode & 0o077 == 0 => Probe::Known(Liveness::Alive),
            Err(_) => ask,
        }
    }

    /// Takes the collector's exclusive lock: `true` if nobody held any
    /// lock on the file, or if only someone other than its owner did (a
    /// reader's lock on a dead writer's file keeps nobody alive). The lock
    /// table is read after the attempt, so it shows any lock that made the
    /// attempt fail.
    pub(crate) fn lock_for_removal(&self, writer: Option<(u32, u64)>) -> bool {
        let locked = self.file.as_ref().is_some_and(|f| {
            rustix::fs::flock(f, FlockOperation::NonBlockingLockExclusive).is_ok()
        });
        let question = LockQuestion {
            identity: self.identity,
            writer,
        };
        locked || question.answer(&LockTable::new()) == Liveness::Dead
    }

    /// Closes the descriptor and keeps the mapping (which does not need
    /// it): a reader kept for a long time then costs no descriptor.
    pub(crate) fn detach(&mut self) {
        self.file = None;
    }
}
