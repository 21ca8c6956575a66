// SPDX-License-Identifier: Apache-2.0
//! Copying an MMV file without disturbing its writer: opened relative to
//! its directory without following a link, checked by `fstat` of the open
//! descriptor, then copied whole with `pread` into a private buffer. No
//! mapping (a file truncated under a mapping is SIGBUS), no lock, no write.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use topdeck_procfs::root::open_file_at;

use super::error::{Error, ErrorKind, Result};
use super::parse::parse;
use super::Mmv;

/// The largest file [`read`] copies; a larger one is refused with
/// [`ErrorKind::TooLarge`]. Writers' files are kilobytes (strings take 256
/// bytes each); 64 MiB is a thousand metrics of hundreds of instances.
pub const MAX_FILE_SIZE: u64 = 64 << 20;

/// Reads the MMV file at `path`, opened inside its directory without
/// following a symbolic link (a directory through another view's
/// `/proc/<pid>/root` is resolved inside that root).
///
/// ```no_run
/// let file = topdeck_portholes::mmv::read("/var/lib/pcp/tmp/mmv/app".as_ref())?;
/// for metric in &file.metrics {
///     println!("{} = {:?}", metric.pcp_name, metric.values);
/// }
/// # Ok::<(), topdeck_portholes::mmv::Error>(())
/// ```
pub fn read(path: &Path) -> Result<Mmv> {
    let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
    let Some(name) = path.file_name() else {
        return Err(Error::io(
            "splitting the path into directory and file name",
            path,
            invalid(),
        ));
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = topdeck_procfs::root::open_dir(dir)
        .map_err(|e| Error::io("opening the directory", dir, e))?;
    let (file, _) = open_in(&dir, name, path)?;
    read_open(&file, path)
}

/// Opens `name` of the open directory `dir` read-only, without following
/// a link or blocking on a FIFO, and checks by `fstat` of the descriptor
/// that it is a regular file with one link.
pub(crate) fn open_in(dir: &impl AsFd, name: &OsStr, path: &Path) -> Result<(File, Metadata)> {
    let file = open_file_at(dir, name).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => Error::new(ErrorKind::NotRegularFile).at(path),
        _ => Error::io("opening the file", path, e),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("fstat of the file", path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::new(ErrorKind::NotRegularFile).at(path));
    }
    if meta.nlink() > 1 {
        return Err(Error::new(ErrorKind::HardLinked {
            links: meta.nlink(),
        })
        .at(path));
    }
    Ok((file, meta))
}

/// Copies and parses the open file `file` (shown as `path`, named after
/// its last component). A copy whose generation fields differ (a writer
/// publishing at that instant) is copied once more before it is called
/// [`ErrorKind::NotReady`].
pub(crate) fn read_open(file: &File, path: &Path) -> Result<Mmv> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut again = true;
    loop {
        let bytes = copy(file, path)?;
        match parse(&bytes, &name) {
            Err(e) if again && matches!(e.kind(), ErrorKind::NotReady { g1, .. } if *g1 != 0) => {
                again = false;
            }
            other => return other.map_err(|e| e.at(path)),
        }
    }
}

/// The whole file, its size taken from `fstat` now, by `pread` (more than
/// one only if the kernel returns less): a file truncated meanwhile gives
/// a short copy, which the parser reports, never a fault.
fn copy(file: &File, path: &Path) -> Result<Vec<u8>> {
    let size = file
        .metadata()
        .map_err(|e| Error::io("fstat of the file", path, e))?
        .len();
    if size > MAX_FILE_SIZE {
        return Err(Error::new(ErrorKind::TooLarge {
            size,
            max: MAX_FILE_SIZE,
        })
        .at(path));
    }
    let mut bytes = vec![0; size as usize];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read_at(&mut bytes[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("pread of the file", path, e)),
        }
    }
    bytes.truncate(filled);
    Ok(bytes)
}
