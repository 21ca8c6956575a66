// SPDX-License-Identifier: Apache-2.0
//! Copying an MMV file without disturbing its writer: opened relative to
//! its directory without following a link, checked by `fstat` of the open
//! descriptor, then copied whole with `pread` into a private buffer. No
//! mapping (a file truncated under a mapping is SIGBUS), no lock, no write.

use std::fs::File;
use std::io;
use std::path::Path;

use super::error::{Error, ErrorKind, Result};
use super::parse::parse;
use super::Mmv;
use crate::copy::{copy_whole, open_regular};

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
    let (file, _) = open_regular(&dir, name, path)?;
    read_open(&file, path)
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
        let bytes = copy_whole(file, path, MAX_FILE_SIZE)?;
        match parse(&bytes, &name) {
            Err(e) if again && matches!(e.kind(), ErrorKind::NotReady { g1, .. } if *g1 != 0) => {
                again = false;
            }
            other => return other.map_err(|e| e.at(path)),
        }
    }
}
