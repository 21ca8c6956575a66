// SPDX-License-Identifier: Apache-2.0
//! Copying another program's file without disturbing it: opened relative
//! to its directory, read-only, without following a link or blocking on
//! a FIFO; judged by `fstat` of the open descriptor; copied with `pread`
//! into a private buffer. No mapping (a file truncated under a mapping is
//! SIGBUS), no lock, no write.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use topdeck_procfs::root::open_file_at;

use crate::file_error::{FileError, FileErrorKind};

/// Fills `buf` from byte `at` of `file` by `pread` (more than one only if
/// the kernel returns less), up to the end of the file: how many bytes
/// were read, fewer than asked for when the file ends first.
pub(crate) fn read_full(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Opens `name` of the open directory `dir` (shown as `path`) read-only,
/// without following a link or blocking on a FIFO, and checks by `fstat`
/// of the descriptor that it is a regular file with one link (a writer
/// makes its file with `O_EXCL`: another name may be someone else's).
pub(crate) fn open_regular<K: FileErrorKind>(
    dir: &impl AsFd,
    name: &OsStr,
    path: &Path,
) -> Result<(File, Metadata), FileError<K>> {
    let file = open_file_at(dir, name).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => FileError::new(K::not_regular_file()).at(path),
        _ => FileError::io("opening the file", path, e),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| FileError::io("fstat of the file", path, e))?;
    if !meta.file_type().is_file() {
        return Err(FileError::new(K::not_regular_file()).at(path));
    }
    if meta.nlink() > 1 {
        return Err(FileError::new(K::hard_linked(meta.nlink())).at(path));
    }
    Ok((file, meta))
}

/// The whole of the open file `file` (shown as `path`), its size taken
/// from `fstat` now (a writer may have resized it since it was opened),
/// refused above `max` bytes: a file truncated meanwhile gives a short
/// copy, which the parser reports, never a fault.
pub(crate) fn copy_whole<K: FileErrorKind>(
    file: &File,
    path: &Path,
    max: u64,
) -> Result<Vec<u8>, FileError<K>> {
    let size = file
        .metadata()
        .map_err(|e| FileError::io("fstat of the file", path, e))?
        .len();
    if size > max {
        return Err(FileError::new(K::too_large(size, max)).at(path));
    }
    let mut bytes = vec![0; size as usize];
    let filled =
        read_full(file, &mut bytes, 0).map_err(|e| FileError::io("pread of the file", path, e))?;
    bytes.truncate(filled);
    Ok(bytes)
}
