// SPDX-License-Identifier: Apache-2.0
//! Copying the parts of a `cnc.dat` the counters need, with `pread` into
//! private buffers: a driver's file is 48 MB by default, most of it ring
//! and broadcast buffers and unused counter records this reader skips.

use std::fs::File;
use std::path::{Path, PathBuf};

use topdeck_procfs::root::{self, open_dir_at, open_file_at};

use super::layout::*;
use super::{parse, Cnc, Error, FormatError, Header};
use crate::copy::read_full;

/// The file in an `aeron.dir`.
pub(crate) const CNC_FILE: &str = "cnc.dat";

/// Metadata is copied this many records at a time until an unused record
/// ends the list: 64 KiB, room for the ~50 counters of an idle driver.
const METADATA_CHUNK_RECORDS: usize = 128;

pub(crate) fn read(mut path: PathBuf) -> Result<Cnc, Error> {
    // The parent through another view's `/proc/<pid>/root` is resolved
    // inside that root; the last name (an `aeron.dir`, or the `cnc.dat`
    // itself) is never followed, here as in discovery: it lives in a
    // directory other users may write to, and a link there could lead to
    // another user's driver.
    let parent = match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => Path::new("/"),
    };
    let name = path.file_name().unwrap_or(path.as_os_str()).to_owned();
    let opened = root::open_dir(parent).and_then(|dir| match open_dir_at(&dir, &name) {
        Ok(aeron_dir) => {
            path.push(CNC_FILE);
            open_file_at(&aeron_dir, CNC_FILE.as_ref())
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => open_file_at(&dir, &name),
        Err(e) => Err(e),
    });
    match opened {
        Ok(file) => read_open(file, path),
        Err(source) => Err(Error::Io { path, source }),
    }
}

/// Reads the `cnc.dat` open as `file` (shown as `path`): the opened file,
/// never its path again.
pub(crate) fn read_open(file: File, path: PathBuf) -> Result<Cnc, Error> {
    let file = match file.metadata() {
        Ok(meta) if !meta.file_type().is_file() => return Err(Error::NotRegular { path }),
        Ok(meta) => Source {
            file,
            len: meta.len(),
            path,
        },
        Err(source) => return Err(Error::Io { path, source }),
    };
    let head = file.copy(0, HEADER_LEN as u64, "header")?;
    let header = Header::parse(&head, file.len).map_err(|e| file.format(e))?;
    let heartbeat = file.copy(header.heartbeat_offset(), 8, "heartbeat")?;

    let meta_at = header.counters_metadata_offset();
    let meta_len = header.counters_metadata_len;
    let mut metadata = Vec::new();
    let ids = loop {
        let have = metadata.len() as u64;
        if have >= meta_len {
            break metadata.len() / METADATA_RECORD_LEN;
        }
        let chunk = (meta_len - have).min((METADATA_CHUNK_RECORDS * METADATA_RECORD_LEN) as u64);
        let bytes = file.copy(meta_at + have, chunk, "counters metadata")?;
        let before = metadata.len() / METADATA_RECORD_LEN;
        metadata.extend_from_slice(&bytes);
        if let Some(n) = parse::records_in_use(&bytes) {
            break before + n;
        }
    };
    let values_len = ((ids * VALUE_SLOT_LEN) as u64).min(header.counters_values_len);
    let values = file.copy(
        header.counters_values_offset(),
        values_len,
        "counters values",
    )?;
    let counters = parse::counters(&metadata, &values).map_err(|e| file.format(e))?;
    Ok(Cnc {
        header,
        counters,
        heartbeat_ms: parse::i64_at(&heartbeat, 0).unwrap_or_default(),
    })
}

struct Source {
    file: File,
    len: u64,
    path: PathBuf,
}

impl Source {
    fn format(&self, source: FormatError) -> Error {
        Error::Format {
            path: self.path.clone(),
            source,
        }
    }

    /// `len` bytes at `offset`, all of them: the file may have shrunk since
    /// its length was taken, and a short copy is a truncation, not data.
    fn copy(&self, offset: u64, len: u64, what: &'static str) -> Result<Vec<u8>, Error> {
        let mut buf = vec![0u8; len as usize];
        match read_full(&self.file, &mut buf, offset) {
            Ok(done) if done < buf.len() => Err(self.format(FormatError::Truncated {
                what,
                need: offset + len,
                have: offset + done as u64,
            })),
            Ok(_) => Ok(buf),
            Err(source) => Err(Error::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }
}
