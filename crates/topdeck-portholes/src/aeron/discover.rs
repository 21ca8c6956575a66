// SPDX-License-Identifier: Apache-2.0
//! Finding drivers: the default `aeron.dir` is `/dev/shm/aeron-<user>`, in
//! this mount namespace and in every other one (containers), reached
//! through `/proc/<pid>/root`.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use topdeck_procfs::budget;
use topdeck_procfs::root::{open_dir_at, open_file_at};

use topdeck_procfs::table::Table;
use topdeck_procfs::view::{View, Views};

use super::file::CNC_FILE;
use super::{Cnc, Error};

/// A `cnc.dat` found by [`discover`].
#[derive(Clone, Debug)]
pub struct Source {
    /// The path to read it through.
    pub path: PathBuf,
    /// For a file in another mount namespace, the process whose root it was
    /// found through (in topdeck's pid namespace); `None` for our own
    /// `/dev/shm`.
    pub via_pid: Option<u32>,
    /// Its owner, from `fstat` of the file as discovery opened it: the
    /// user a driver that wrote it runs as (see [`Source::writer`]).
    pub uid: u32,
    /// The file as discovery opened it, to read without walking `path`
    /// again.
    pub(super) file: Arc<File>,
}

impl PartialEq for Source {
    /// The same path, found the same way (the open file aside).
    fn eq(&self, other: &Self) -> bool {
        (&self.path, self.via_pid, self.uid) == (&other.path, other.via_pid, other.uid)
    }
}

impl Eq for Source {}

impl Source {
    /// Copies and decodes the file, through the descriptor discovery
    /// opened: a container that swaps its `/dev/shm` meanwhile cannot make
    /// this read another file than the one found.
    pub fn read(&self) -> Result<Cnc, Error> {
        let file = self.file.try_clone().map_err(|source| Error::Io {
            path: self.path.clone(),
            source,
        })?;
        super::file::read_open(file, self.path.clone())
    }
}

/// What [`discover_checked`] found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// The files, as [`discover`] lists them.
    pub sources: Vec<Source>,
    /// What was refused or could not be looked at, each naming its path:
    /// an `aeron-*` entry that is a symbolic link (not followed: a driver
    /// makes its directory, a link there is someone else's), a `/dev/shm`
    /// that cannot be listed.
    pub errors: Vec<Error>,
}

/// Every `aeron-*/cnc.dat` under `/dev/shm`, here and in other mount
/// namespaces, each file once (by device and inode). Stale files of exited
/// drivers are listed too: [`super::Cnc::liveness`] tells them apart.
pub fn discover() -> Vec<Source> {
    discover_with(&Table::scan())
}

/// [`discover`], through the views of `table`: one walk of `/proc`
/// shared with the look's other readers.
///
/// ```no_run
/// let table = topdeck_procfs::table::Table::scan();
/// for source in topdeck_portholes::aeron::discover_with(&table) {
///     println!("{} {:?}", source.path.display(), source.via_pid);
/// }
/// ```
pub fn discover_with(table: &Table) -> Vec<Source> {
    discover_checked(table).sources
}

/// [`discover_with`], with what was refused and why. Another view's
/// `/dev/shm` is opened inside its root (see
/// [`topdeck_procfs::root::open_dir_in`]), and every entry under it
/// without following a link, so what a container plants there cannot lead
/// this reader to a file outside it.
///
/// ```no_run
/// let table = topdeck_procfs::table::Table::scan();
/// let found = topdeck_portholes::aeron::discover_checked(&table);
/// for source in &found.sources {
///     println!("{} {:?}", source.path.display(), source.read().map(|c| c.counters.len()));
/// }
/// for error in &found.errors {
///     eprintln!("{error}");
/// }
/// ```
pub fn discover_checked(table: &Table) -> Discovery {
    discover_in(Path::new("/"), table.views(), table.own_view(), None)
}

/// [`discover_checked`], keeping only the drivers of `uid` in this
/// reader's own `/dev/shm`: other views are not looked into, and an
/// `aeron-*` directory or `cnc.dat` another user owns (by `fstat` of the
/// descriptor opened) is left without its file being read.
///
/// ```no_run
/// let table = topdeck_procfs::table::Table::scan();
/// // SAFETY: geteuid has no preconditions.
/// let me = unsafe { libc::geteuid() };
/// let found = topdeck_portholes::aeron::discover_owned_by(&table, me);
/// assert!(found.sources.iter().all(|s| s.uid == me));
/// ```
pub fn discover_owned_by(table: &Table, uid: u32) -> Discovery {
    discover_in(Path::new("/"), table.views(), table.own_view(), Some(uid))
}

/// The files under `root`'s `/dev/shm`, then under each other view's
/// (`own` is the reader's, already covered by `root`); only `owner`'s,
/// when given.
pub(super) fn discover_in(
    root: &Path,
    views: &Views,
    own: Option<View>,
    owner: Option<u32>,
) -> Discovery {
    let mut seen = HashSet::new();
    let mut out = Discovery::default();
    let mut add = |shm: std::io::Result<std::os::fd::OwnedFd>, shown: PathBuf, via_pid| {
        let shm = match shm {
            Ok(shm) => shm,
            // No /dev/shm there, or gone meanwhile.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => return,
            Err(source) => {
                out.errors.push(Error::Io {
                    path: shown,
                    source,
                });
                return;
            }
        };
        for (path, file) in cnc_files(&shm, &shown, owner, &mut out.errors) {
            if let Ok(m) = file.metadata() {
                let theirs = owner.is_some_and(|uid| uid != m.uid());
                if m.file_type().is_file() && !theirs && seen.insert((m.dev(), m.ino())) {
                    out.sources.push(Source {
                        path,
                        via_pid,
                        uid: m.uid(),
                        file: Arc::new(file),
                    });
                }
            }
        }
    };
    let shm = Path::new(SHM);
    add(
        topdeck_procfs::root::open_dir_in(root, shm),
        root.join(SHM),
        None,
    );
    // One process per view is enough to see its /dev/shm.
    for (view, pids) in &views.members {
        if Some(*view) == own || owner.is_some() {
            continue;
        }
        if let Some(&pid) = pids.first() {
            let root = Path::new("/proc").join(pid.to_string()).join("root");
            let opened = topdeck_procfs::root::open_dir_in_view(pid, view, shm);
            add(opened, root.join(SHM), Some(pid));
        }
    }
    out
}

/// Where drivers make their directories, inside a root.
const SHM: &str = "dev/shm";

/// The `aeron-*/cnc.dat` files of the open `/dev/shm` `shm` (shown as
/// `shown`), sorted, opened without following a link; a linked `aeron-*`
/// entry is an error, a file or a missing `cnc.dat` is no driver's. Only
/// the directories `owner` owns, when given (by `fstat` of each one
/// opened). Within one look's budget for a directory: a user who fills
/// `/dev/shm` with `aeron-*` entries is told once, and slows the look by
/// at most that budget.
fn cnc_files(
    shm: &OwnedFd,
    shown: &Path,
    owner: Option<u32>,
    errors: &mut Vec<Error>,
) -> Vec<(PathBuf, File)> {
    let Ok((mut names, complete)) = budget::names_up_to(shm, budget::MAX_NAMES_PER_DIR) else {
        return Vec::new();
    };
    names.sort();
    let mut spent = budget::DirBudget::new();
    let mut files = Vec::new();
    for name in names {
        if !name.as_bytes().starts_with(b"aeron-") || !spent.open() {
            continue;
        }
        let dir_path = shown.join(&name);
        let dir = match open_dir_at(shm, &name) {
            Ok(dir) => dir,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                if spent.error() {
                    errors.push(Error::Link { path: dir_path });
                }
                continue;
            }
            Err(_) => continue,
        };
        if owner.is_some() && owner_of(&dir) != owner {
            continue;
        }
        let path = dir_path.join(CNC_FILE);
        match open_file_at(&dir, CNC_FILE.as_ref()) {
            Ok(file) => files.push((path, file)),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                if spent.error() {
                    errors.push(Error::Link { path });
                }
            }
            Err(_) => {}
        }
    }
    if let Some(what) = spent.summary(complete) {
        errors.push(Error::LeftOut {
            path: shown.to_path_buf(),
            what,
        });
    }
    files
}

/// The owner of the open directory `dir`, from `fstat`.
fn owner_of(dir: &OwnedFd) -> Option<u32> {
    File::from(dir.try_clone().ok()?)
        .metadata()
        .ok()
        .map(|m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cnc_files_in_aeron_dirs_only_and_each_file_once() {
        let tmp = tempfile::tempdir().unwrap();
        let shm = tmp.path().join("dev/shm");
        for dir in ["aeron-root", "aeron-app", "other"] {
            std::fs::create_dir_all(shm.join(dir)).unwrap();
            std::fs::write(shm.join(dir).join("cnc.dat"), b"x").unwrap();
        }
        std::fs::create_dir_all(shm.join("aeron-empty")).unwrap();
        std::fs::create_dir_all(shm.join("aeron-link")).unwrap();
        std::os::unix::fs::symlink(
            shm.join("aeron-app/cnc.dat"),
            shm.join("aeron-link/cnc.dat"),
        )
        .unwrap();
        let found = discover_in(tmp.path(), &Views::default(), None, None);
        let links: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        assert!(
            matches!(links.as_slice(), [one] if one.contains("aeron-link/cnc.dat") && one.contains("symbolic link")),
            "{links:?}"
        );
        let found = found.sources;
        let names: Vec<_> = found
            .iter()
            .map(|s| s.path.strip_prefix(&shm).unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                PathBuf::from("aeron-app/cnc.dat"),
                PathBuf::from("aeron-root/cnc.dat")
            ]
        );
        assert!(found.iter().all(|s| s.via_pid.is_none()));
    }

    #[test]
    fn a_dev_shm_over_the_budget_is_read_up_to_it_and_named_once() {
        use topdeck_procfs::budget::MAX_FILES_PER_DIR;
        let tmp = tempfile::tempdir().unwrap();
        let shm = tmp.path().join("dev/shm");
        let drivers = MAX_FILES_PER_DIR + 50;
        for n in 0..drivers {
            let dir = shm.join(format!("aeron-{n}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cnc.dat"), b"x").unwrap();
        }
        let found = discover_in(tmp.path(), &Views::default(), None, None);
        assert!(
            found.sources.len() <= MAX_FILES_PER_DIR,
            "{}",
            found.sources.len()
        );
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        let left = drivers - found.sources.len();
        assert!(
            matches!(errors.as_slice(), [one] if one.starts_with(&format!("{}:", shm.display()))
                && one.contains(&format!("{left} files were not read"))),
            "{errors:?}"
        );
    }

    #[test]
    fn only_the_owners_drivers_are_kept_when_an_owner_is_given() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dev/shm/aeron-me");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cnc.dat"), b"x").unwrap();
        let me = std::fs::metadata(&dir).unwrap().uid();
        let mine = discover_in(tmp.path(), &Views::default(), None, Some(me));
        assert_eq!(mine.sources.len(), 1);
        assert_eq!(mine.sources[0].uid, me);
        let theirs = discover_in(
            tmp.path(),
            &Views::default(),
            None,
            Some(me.wrapping_add(1)),
        );
        assert!(
            theirs.sources.is_empty() && theirs.errors.is_empty(),
            "{theirs:?}"
        );
    }
}
