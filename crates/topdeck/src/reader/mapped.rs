// SPDX-License-Identifier: Apache-2.0
//! A reader's view of someone else's file: opened read-only without
//! following links, mapped read-only, and read only through guarded word
//! copies into private buffers, so a file truncated under us is an error for
//! that file and never a SIGBUS for the reader.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use topdeck_format::layout::HEADER_FIELDS_END;
use topdeck_format::{FormatError, Header};

use super::fault_guard;
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

/// A read-only mapping of a registry file.
#[derive(Debug)]
pub(crate) struct MappedFile {
    map: Option<memmap2::Mmap>,
    len: u64,
    path: PathBuf,
    file: File,
}

impl MappedFile {
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io("cannot open", path, e))?;
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
            ));
        }
        let len = meta.len();
        if len > MAX_FILE_LEN {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "{}: {len} bytes is larger than any registry; not reading it",
                    path.display()
                ),
            ));
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
            file,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Copies `len` bytes at `off` into `out` (replacing its contents).
    pub(crate) fn copy(&self, off: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        if off.checked_add(len as u64).is_none_or(|end| end > self.len) {
            return Err(Error::format(
                &self.path,
                FormatError::Truncated {
                    what: "a section",
                    need: off.saturating_add(len as u64),
                    have: self.len,
                },
            ));
        }
        let Some(map) = &self.map else { return Ok(()) };
        out.resize(len, 0);
        // SAFETY: `off + len <= self.len`, the mapped length, checked above.
        let src = unsafe { map.as_ptr().add(off as usize) };
        // SAFETY: the source range lies inside the live mapping.
        unsafe { fault_guard::guarded_copy(out, src) }.map_err(|e| {
            Error::new(
                ErrorKind::Shrunk,
                format!(
                    "{}: the file shrank while being read ({e}); someone truncated it, and it is no \
                     longer trustworthy: remove it, or `topdeck gc` once its writer is dead",
                    self.path.display()
                ),
            )
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
    /// each other or the writer.
    pub(crate) fn liveness(&self) -> Liveness {
        let fd = self.file.as_raw_fd();
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) } == 0 {
            // SAFETY: as above; releases the lock just taken.
            unsafe { libc::flock(fd, libc::LOCK_UN) };
            Liveness::Dead
        } else {
            Liveness::Alive
        }
    }
}
