// SPDX-License-Identifier: Apache-2.0
//! The namespace: every registry file on the host (or in `TOPDECK_DIR`),
//! listed with its writer's liveness, and the removal of dead writers' files.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use topdeck_format::layout::MAGIC;

use super::mapped::{Liveness, MappedFile};
use super::registry_reader::RegistryReader;
use crate::dir::{self, FILE_SUFFIX, TEMP_PREFIX};
use crate::error::{Error, ErrorKind, Result};

/// A file left half-created this long ago by a writer that is gone is removed by `gc`.
const STALE_TEMP_AGE: Duration = Duration::from_secs(60);

/// One registry file and what its header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryEntry {
    /// The file.
    pub path: PathBuf,
    /// Writer's pid, as the writer saw it.
    pub pid: u32,
    /// Writer's start time, clock ticks since boot.
    pub start_ticks: u64,
    /// Writer's process name.
    pub process_name: String,
    /// Registry name.
    pub registry_name: String,
    /// Metrics published when listed.
    pub metrics: u32,
    /// Whether the writer is alive.
    pub liveness: Liveness,
    /// When the registry was created, ns since the Unix epoch.
    pub created_unix_ns: u64,
}

impl RegistryEntry {
    /// Opens a reader on this registry.
    pub fn open(&self) -> Result<RegistryReader> {
        RegistryReader::open(&self.path)
    }
}

/// Registries found, and the files that could not be read (each error names its file).
#[derive(Debug, Default)]
pub struct Listing {
    /// Readable registries, sorted by pid then path.
    pub entries: Vec<RegistryEntry>,
    /// One error per unreadable file or unsafe directory.
    pub errors: Vec<Error>,
}

/// What `gc` did.
#[derive(Debug, Default)]
pub struct GcReport {
    /// Files removed.
    pub removed: Vec<PathBuf>,
    /// Files left alone, and why (not topdeck files, or removal failed).
    pub errors: Vec<Error>,
}

/// The set of namespace directories a reader looks at.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let listing = topdeck::Namespace::at(dir.path()).list();
/// assert_eq!(listing.entries.len(), 1);
/// assert_eq!(listing.entries[0].liveness, topdeck::Liveness::Alive);
/// # drop(registry);
/// ```
#[derive(Debug, Clone)]
pub struct Namespace {
    dirs: Vec<PathBuf>,
}

impl Namespace {
    /// `TOPDECK_DIR` if set, else every user's directory under `/dev/shm`.
    pub fn host() -> Self {
        Self {
            dirs: dir::reader_dirs(),
        }
    }

    /// One directory.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self {
            dirs: vec![dir.into()],
        }
    }

    /// The directories looked at.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Lists every registry; unreadable files become errors and the rest are still listed.
    pub fn list(&self) -> Listing {
        let mut out = Listing::default();
        for (path, owner) in self.files(&mut out.errors, |n| n.ends_with(FILE_SUFFIX)) {
            match entry(&path, owner) {
                Ok(e) => out.entries.push(e),
                Err(e) => out.errors.push(e),
            }
        }
        out.entries
            .sort_by(|a, b| (a.pid, &a.path).cmp(&(b.pid, &b.path)));
        out
    }

    /// Registries whose pid or process name is `key`; live ones first.
    pub fn find(&self, key: &str) -> (Vec<RegistryEntry>, Vec<Error>) {
        let listing = self.list();
        let pid = key.parse::<u32>().ok();
        let path = fs::canonicalize(key).ok();
        let mut found: Vec<RegistryEntry> = listing
            .entries
            .into_iter()
            .filter(|e| {
                Some(e.pid) == pid
                    || e.process_name == key
                    || (path.is_some() && fs::canonicalize(&e.path).ok() == path)
            })
            .collect();
        found.sort_by_key(|e| {
            (
                e.liveness != Liveness::Alive,
                std::cmp::Reverse(e.created_unix_ns),
            )
        });
        (found, listing.errors)
    }

    /// Removes the files of dead writers, and only those: a file is removed
    /// only while this call holds its lock, which a live writer never lets go.
    pub fn gc(&self) -> GcReport {
        let mut report = GcReport::default();
        let files = self.files(&mut report.errors, |n| {
            n.ends_with(FILE_SUFFIX) || n.starts_with(TEMP_PREFIX)
        });
        for (path, owner) in files {
            match collect(&path, owner) {
                Ok(true) => report.removed.push(path),
                Ok(false) => {}
                Err(e) => report.errors.push(e),
            }
        }
        report
    }

    /// `(path, directory owner)` of every entry whose name passes `keep`,
    /// in safe directories.
    fn files(&self, errors: &mut Vec<Error>, keep: impl Fn(&str) -> bool) -> Vec<(PathBuf, u32)> {
        let mut out = Vec::new();
        for d in &self.dirs {
            let owner = match dir::check_dir(d, None) {
                Ok(o) => o,
                Err(e) if e.kind() == ErrorKind::Io && !d.exists() => continue,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let entries = match fs::read_dir(d) {
                Ok(e) => e,
                Err(e) => {
                    errors.push(Error::io("cannot list the namespace directory", d, e));
                    continue;
                }
            };
            let mut names: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_str().is_some_and(&keep))
                .map(|e| e.path())
                .collect();
            names.sort();
            out.extend(names.into_iter().map(|p| (p, owner)));
        }
        out
    }
}

fn entry(path: &Path, owner: u32) -> Result<RegistryEntry> {
    dir::check_entry(path, owner)?;
    let reader = RegistryReader::open(path)?;
    let h = reader.header();
    Ok(RegistryEntry {
        path: path.to_owned(),
        pid: h.pid,
        start_ticks: h.start_ticks,
        process_name: h.process_name.clone(),
        registry_name: h.registry_name.clone(),
        metrics: h.desc_count,
        liveness: reader.liveness(),
        created_unix_ns: h.created_unix_ns,
    })
}

/// Removes `path` if its writer is dead; `Ok(false)` if it is alive.
fn collect(path: &Path, owner: u32) -> Result<bool> {
    dir::check_entry(path, owner)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io("cannot open", path, e))?;
    let is_temp = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(TEMP_PREFIX));
    if is_temp {
        let age = file
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok());
        if age.is_none_or(|a| a < STALE_TEMP_AGE) {
            return Ok(false);
        }
    } else {
        let mapped = MappedFile::open(path)?;
        let mut magic = Vec::new();
        let ours = mapped
            .copy(0, 8.min(mapped.len() as usize), &mut magic)
            .is_ok()
            && magic == MAGIC;
        let empty = mapped.len() == 0;
        if !ours && !empty {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "{}: not a topdeck file, left alone; remove it by hand if it is yours",
                    path.display()
                ),
            ));
        }
    }
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(false);
    }
    fs::remove_file(path).map_err(|e| Error::io("cannot remove", path, e))?;
    Ok(true)
}
