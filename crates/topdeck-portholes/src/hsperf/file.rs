// SPDX-License-Identifier: Apache-2.0
//! Copying a JVM's hsperfdata file without disturbing it: the directory
//! and file checks of the JVM's own `perfMemory_posix.cpp`
//! (`is_directory_secure`, `is_file_secure`), then one `pread` into a
//! private buffer. No lock (a JVM that finds its file locked at start-up
//! runs without shared counters), no mapping (a JVM reusing the file
//! truncates it, which would turn a mapping into SIGBUS), no write.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use topdeck_procfs::root::open_dir_at;

use super::error::{Error, ErrorKind, Result};
use super::parse::parse;
use super::PerfData;
use crate::copy::{copy_whole, open_regular};

/// The largest file [`read`] copies. A JVM's file is 32 KiB unless it was
/// started with a larger `-XX:PerfDataMemorySize`; a larger file is
/// refused with [`ErrorKind::TooLarge`] rather than copied.
pub const MAX_FILE_SIZE: u64 = 1 << 20;

/// How often [`read_when_accessible`] looks again, as jvmstat's
/// `synchWithTarget` does.
const ACCESSIBLE_POLL: Duration = Duration::from_millis(20);

/// Reads the hsperfdata file at `path` (`…/hsperfdata_<user>/<pid>`),
/// checking its directory and the file as the JVM does.
///
/// ```no_run
/// let perf = topdeck_portholes::hsperf::read("/tmp/hsperfdata_app/4242".as_ref())?;
/// println!("{:?}", perf.long("sun.gc.collector.0.invocations"));
/// # Ok::<(), topdeck_portholes::hsperf::Error>(())
/// ```
pub fn read(path: &Path) -> Result<PerfData> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::io(
            "splitting the path into directory and file name",
            path,
            io::Error::from(io::ErrorKind::InvalidInput),
        ));
    };
    HsperfDir::open(dir)?.read(name)
}

/// [`read`], looking again every 20 ms for up to `timeout` while the JVM
/// is starting ([`ErrorKind::NotAccessible`]), as jstat does.
///
/// ```no_run
/// use std::time::Duration;
///
/// let path = "/tmp/hsperfdata_app/4242".as_ref();
/// let perf = topdeck_portholes::hsperf::read_when_accessible(path, Duration::from_secs(5))?;
/// println!("{:?}", perf.seconds("sun.gc.collector.0.time"));
/// # Ok::<(), topdeck_portholes::hsperf::Error>(())
/// ```
pub fn read_when_accessible(path: &Path, timeout: Duration) -> Result<PerfData> {
    let deadline = Instant::now() + timeout;
    loop {
        match read(path) {
            Err(e) if *e.kind() == ErrorKind::NotAccessible && Instant::now() < deadline => {
                std::thread::sleep(ACCESSIBLE_POLL);
            }
            other => return other,
        }
    }
}

/// An open `hsperfdata_<user>` directory that passed the JVM's checks: not
/// a symbolic link, not writable by group or others. Files are opened
/// relative to it, so a directory swapped after the check is not followed.
///
/// ```no_run
/// use topdeck_portholes::hsperf::HsperfDir;
///
/// let dir = HsperfDir::open("/tmp/hsperfdata_app".as_ref())?;
/// for pid in dir.pids()? {
///     println!("{pid}: {:?}", dir.read(pid.to_string().as_ref()).map(|p| p.entries.len()));
/// }
/// # Ok::<(), topdeck_portholes::hsperf::Error>(())
/// ```
#[derive(Debug)]
pub struct HsperfDir {
    dir: File,
    path: PathBuf,
    uid: u32,
}

impl HsperfDir {
    /// Opens and checks the directory at `path`. Its parent is opened as
    /// [`topdeck_procfs::root::open_dir`] opens it: a path through another
    /// view's `/proc/<pid>/root` is resolved inside that root, so a link
    /// planted there (`/tmp -> /var/lib/host-stuff`) cannot lead to this
    /// reader's files.
    pub fn open(path: &Path) -> Result<Self> {
        let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
        let Some(name) = path.file_name() else {
            return Err(Error::io(
                "splitting the path into parent and name",
                path,
                invalid(),
            ));
        };
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let parent = topdeck_procfs::root::open_dir(parent)
            .map_err(|e| Error::io("opening the parent directory", parent, e))?;
        Self::open_at(&parent, name, path)
    }

    /// Opens and checks the directory `name` of the open directory
    /// `parent` (a `/tmp` opened by [`topdeck_procfs::root::open_dir_in`]),
    /// never by path: `path` is only what errors and [`path`](Self::path)
    /// show.
    ///
    /// ```
    /// use topdeck_portholes::hsperf::HsperfDir;
    ///
    /// let tmp = tempfile::tempdir()?;
    /// std::fs::create_dir(tmp.path().join("hsperfdata_app"))?;
    /// std::os::unix::fs::symlink(tmp.path().join("hsperfdata_app"), tmp.path().join("hsperfdata_link"))?;
    /// let parent = std::fs::File::open(tmp.path())?;
    /// let shown = tmp.path().join("hsperfdata_app");
    /// let dir = HsperfDir::open_at(&parent, "hsperfdata_app".as_ref(), &shown)?;
    /// assert_eq!(dir.pids()?, Vec::<u32>::new());
    /// let link = HsperfDir::open_at(&parent, "hsperfdata_link".as_ref(), &shown).unwrap_err();
    /// assert!(link.to_string().contains("symbolic link"), "{link}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_at(parent: &impl AsFd, name: &OsStr, path: &Path) -> Result<Self> {
        let dir = File::from(open_dir_at(parent, name).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::ELOOP) => Error::new(ErrorKind::InsecureDirectory {
                    why: "it is a symbolic link",
                })
                .at(path),
                Some(libc::ENOTDIR) => Error::new(ErrorKind::InsecureDirectory {
                    why: "it is not a directory",
                })
                .at(path),
                _ => Error::io("opening the directory", path, e),
            }
        })?);
        let meta = dir
            .metadata()
            .map_err(|e| Error::io("fstat of the directory", path, e))?;
        if meta.mode() & (libc::S_IWGRP | libc::S_IWOTH) != 0 {
            return Err(Error::new(ErrorKind::InsecureDirectory {
                why: "it is writable by group or others",
            })
            .at(path));
        }
        Ok(HsperfDir {
            dir,
            path: path.to_path_buf(),
            uid: meta.uid(),
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's owner, from `fstat` of its open descriptor.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The names of the directory that are pids (the files of JVMs, live or
    /// stale), sorted.
    pub fn pids(&self) -> Result<Vec<u32>> {
        Ok(self.pids_up_to(usize::MAX)?.0)
    }

    /// [`pids`](Self::pids) among the first `max` names listed, and
    /// whether those were all the names: a directory holding a million
    /// names costs a look no more than `max`.
    pub fn pids_up_to(&self, max: usize) -> Result<(Vec<u32>, bool)> {
        let (names, complete) = topdeck_procfs::budget::names_up_to(&self.dir, max)
            .map_err(|e| Error::io("listing the directory", &self.path, e))?;
        let mut pids: Vec<u32> = names
            .iter()
            .filter_map(|name| name.to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        Ok((pids, complete))
    }

    /// The stamp of entry `name` (a link not followed), to tell whether
    /// a file known to be unreadable changed.
    pub(crate) fn stamp(&self, name: &str) -> Option<topdeck_procfs::unreadable::Stamp> {
        topdeck_procfs::unreadable::Stamp::at(&self.dir, name)
    }

    /// Copies and parses the file `name` of this directory.
    pub fn read(&self, name: &OsStr) -> Result<PerfData> {
        let path = self.path.join(name);
        let (file, _) = self.open_file(name)?;
        read_open(&file, &path)
    }

    /// Opens `name` read-only, without following a symbolic link or
    /// blocking on a FIFO, and checks it as `is_file_secure` does.
    pub(crate) fn open_file(&self, name: &OsStr) -> Result<(File, Metadata)> {
        let path = self.path.join(name);
        if name.as_bytes().contains(&0) {
            let invalid = io::Error::from(io::ErrorKind::InvalidInput);
            return Err(Error::io("checking the file name", &path, invalid));
        }
        let (file, meta) = open_regular(&self.dir, name, &path)?;
        if meta.uid() != self.uid {
            return Err(Error::new(ErrorKind::OwnerMismatch {
                file_uid: meta.uid(),
                dir_uid: self.uid,
            })
            .at(&path));
        }
        Ok((file, meta))
    }
}

/// Copies and parses the open file `file` (shown as `path`), its size
/// taken from `fstat` now: a JVM reusing the file may have resized it
/// since it was opened.
pub(crate) fn read_open(file: &File, path: &Path) -> Result<PerfData> {
    let bytes = copy_whole(file, path, MAX_FILE_SIZE)?;
    parse(&bytes).map_err(|e| e.at(path))
}
