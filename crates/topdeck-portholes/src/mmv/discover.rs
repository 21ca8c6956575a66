// SPDX-License-Identifier: Apache-2.0
//! Finding MMV files, on the host and in containers: `$PCP_TMP_DIR/mmv`
//! of every view of the file system (mount namespace and root), with
//! `PCP_TMP_DIR` read from that view's own `/etc/pcp.conf`, each opened
//! inside its root so that a link planted in a container leads only
//! within it.
//!
//! A file is judged by `fstat` of the descriptor discovery opened (its
//! owner, that it is a regular file with one link) before anything is
//! read from it, and its contents are later read from that descriptor,
//! never by name again. Liveness is the caller's: the header's
//! [`process`](super::Header::process) with [`Flags::PROCESS`](super::Flags::PROCESS),
//! judged by pid and start time against [`MmvFile::changed`].

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use topdeck_procfs::budget::{DirBudget, MAX_NAMES_PER_DIR};
use topdeck_procfs::table::Table;
use topdeck_procfs::view::View;

use super::error::{Error, ErrorKind, Result};
use super::file::read_open;
use super::Mmv;
use crate::copy::open_regular;
use crate::views::each_view_dir;

/// `PCP_TMP_DIR` when `/etc/pcp.conf` does not set it (Debian's value).
pub const DEFAULT_PCP_TMP_DIR: &str = "/var/lib/pcp/tmp";
/// Most bytes of `/etc/pcp.conf` read (Debian's is 4 KiB).
const MAX_CONF_SIZE: u64 = 64 << 10;

/// What [`discover`] found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// The files found, in path order, whatever their state (a crashed
    /// writer's file stays; reading tells whether it is published).
    pub files: Vec<MmvFile>,
    /// Directories and files that could not be looked at, each with its path.
    pub errors: Vec<Error>,
}

/// One MMV file, opened.
#[derive(Debug, Clone)]
pub struct MmvFile {
    /// The file, through `/proc/<pid>/root` for another view.
    pub path: PathBuf,
    /// Its name, which PCP names its metrics after (`mmv.<name>.…`).
    pub name: String,
    /// Its owner, from `fstat` of the file as discovery opened it.
    pub uid: u32,
    /// Its last modification, seconds since the epoch (values are stored
    /// through a mapping, which need not update it).
    pub modified: i64,
    /// Its last status change, seconds since the epoch: a writer made it
    /// no later than this, so only a process started before can be its
    /// writer.
    pub changed: i64,
    /// The view of the file system it was found in.
    pub view: Option<View>,
    /// The file as discovery opened and judged it.
    file: Arc<File>,
}

impl PartialEq for MmvFile {
    /// The same file, found the same way (the open file aside).
    fn eq(&self, other: &Self) -> bool {
        (
            &self.path,
            &self.name,
            self.uid,
            self.modified,
            self.changed,
            self.view,
        ) == (
            &other.path,
            &other.name,
            other.uid,
            other.modified,
            other.changed,
            other.view,
        )
    }
}

impl std::os::fd::AsFd for MmvFile {
    /// The file as discovery opened it: what a writer check judges.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl MmvFile {
    /// Copies and parses the file through the descriptor discovery
    /// opened: a file renamed over this one meanwhile cannot make this
    /// read another file than the one found.
    pub fn read(&self) -> Result<Mmv> {
        read_open(&self.file, &self.path)
    }
}

/// `PCP_TMP_DIR` as `/etc/pcp.conf`'s text `conf` sets it (its last
/// setting, quotes removed), [`DEFAULT_PCP_TMP_DIR`] when it does not or
/// sets a relative path.
///
/// ```
/// use std::path::Path;
/// use topdeck_portholes::mmv::pcp_tmp_dir;
///
/// let conf = "# comment\nPCP_VAR_DIR=/var/lib/pcp\nPCP_TMP_DIR=\"/run/pcp/tmp\"\n";
/// assert_eq!(pcp_tmp_dir(conf), Path::new("/run/pcp/tmp"));
/// assert_eq!(pcp_tmp_dir(""), Path::new("/var/lib/pcp/tmp"));
/// ```
pub fn pcp_tmp_dir(conf: &str) -> PathBuf {
    conf.lines()
        .filter_map(|line| line.trim().strip_prefix("PCP_TMP_DIR="))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\''))
        .rfind(|v| v.starts_with('/'))
        .map_or_else(|| PathBuf::from(DEFAULT_PCP_TMP_DIR), PathBuf::from)
}

/// Lists the MMV files of this host and its containers.
///
/// ```no_run
/// let found = topdeck_portholes::mmv::discover();
/// for file in &found.files {
///     match file.read() {
///         Ok(mmv) => println!("{}: {} metrics", file.path.display(), mmv.metrics.len()),
///         Err(e) if e.is_not_ready() => {} // look again next time
///         Err(e) => eprintln!("{e}"),
///     }
/// }
/// ```
pub fn discover() -> Discovery {
    discover_with(&Table::scan())
}

/// [`discover`], with the processes of `table`: one walk of `/proc`
/// shared with the look's other readers.
///
/// ```no_run
/// let table = topdeck_procfs::table::Table::scan();
/// let found = topdeck_portholes::mmv::discover_with(&table);
/// println!("{} MMV files", found.files.len());
/// ```
pub fn discover_with(table: &Table) -> Discovery {
    discover_for(table, None)
}

/// [`discover_with`], keeping only the files of `uid` in this reader's
/// own view of the file system: other views are not looked into, and
/// another user's file is judged by `fstat` of its open descriptor and
/// left unread.
///
/// ```no_run
/// let table = topdeck_procfs::table::Table::scan();
/// // SAFETY: geteuid has no preconditions.
/// let me = unsafe { libc::geteuid() };
/// let found = topdeck_portholes::mmv::discover_owned_by(&table, me);
/// assert!(found.files.iter().all(|f| f.uid == me));
/// ```
pub fn discover_owned_by(table: &Table, uid: u32) -> Discovery {
    discover_for(table, Some(uid))
}

fn discover_for(table: &Table, owner: Option<u32>) -> Discovery {
    let mut found = Discovery::default();
    let mut seen = HashSet::new();
    each_view_dir(
        table,
        owner,
        true,
        &mut found,
        |found| &mut found.errors,
        |look| {
            let conf = look
                .open(Path::new("/etc"))
                .ok()
                .and_then(|etc| read_conf(&etc))
                .unwrap_or_default();
            pcp_tmp_dir(&conf).join("mmv")
        },
        |look, dir, shown, found| scan_dir(&dir, shown, look.view, owner, &mut seen, found),
    );
    found
}

/// `pcp.conf` of the open `/etc`, bounded, when it is a regular file.
fn read_conf(etc: &impl AsFd) -> Option<String> {
    let file = topdeck_procfs::root::open_file_at(etc, OsStr::new("pcp.conf")).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_CONF_SIZE).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The files of one mmv directory, within one look's budget for a
/// directory: a user who fills it slows only its own reading, and is told
/// once.
fn scan_dir(
    dir: &impl AsFd,
    dir_path: &Path,
    view: Option<View>,
    owner: Option<u32>,
    seen: &mut HashSet<(u64, u64)>,
    found: &mut Discovery,
) {
    let (mut names, complete) = match topdeck_procfs::budget::names_up_to(dir, MAX_NAMES_PER_DIR) {
        Ok(listed) => listed,
        Err(e) => {
            found
                .errors
                .push(Error::io("listing the directory", dir_path, e));
            return;
        }
    };
    names.sort();
    let mut budget = DirBudget::new();
    // pmdammv skips names starting with '.'.
    for name in names.iter().filter(|n| !n.as_bytes().starts_with(b".")) {
        if !budget.open() {
            continue;
        }
        let path = dir_path.join(name);
        let (file, meta) = match open_regular(dir, name, &path) {
            Ok(opened) => opened,
            Err(e) => {
                if owner.is_none() && budget.error() {
                    found.errors.push(e);
                }
                continue;
            }
        };
        // Another user's file is none of this look's business: judged by
        // its open descriptor, never read.
        if owner.is_some_and(|uid| uid != meta.uid()) {
            continue;
        }
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        found.files.push(MmvFile {
            path,
            name: name.to_string_lossy().into_owned(),
            uid: meta.uid(),
            modified: meta.mtime(),
            changed: meta.ctime(),
            view,
            file: Arc::new(file),
        });
    }
    if let Some(what) = budget.summary(complete) {
        found
            .errors
            .push(Error::new(ErrorKind::LeftOut { what }).at(dir_path));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmv::{SyntheticBuffer, SyntheticMetric, Type};
    use std::fs;
    use topdeck_procfs::budget::{MAX_ERRORS_PER_DIR, MAX_FILES_PER_DIR};

    fn scan(dir: &Path, owner: Option<u32>) -> Discovery {
        let fd = File::open(dir).unwrap();
        let mut found = Discovery::default();
        scan_dir(&fd, dir, None, owner, &mut HashSet::new(), &mut found);
        found
    }

    fn valid_file() -> Vec<u8> {
        SyntheticBuffer::new(1)
            .metric(SyntheticMetric::new("up", 1, Type::U32))
            .value(1, None, 1u64.to_ne_bytes(), 0)
            .build()
    }

    #[test]
    fn a_directory_over_the_budget_is_read_up_to_it_and_named_once() {
        let tmp = tempfile::tempdir().unwrap();
        let files = MAX_FILES_PER_DIR + 50;
        for i in 0..files {
            File::create(tmp.path().join(format!("f{i}"))).unwrap();
        }
        let found = scan(tmp.path(), None);
        assert!(found.files.len() <= MAX_FILES_PER_DIR);
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        assert!(
            matches!(errors.as_slice(), [one] if one.contains(&format!("{} files were not read", files - found.files.len()))),
            "{errors:?}"
        );
    }

    #[test]
    fn links_and_dot_files_are_not_read_and_errors_past_the_first_few_are_counted() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join(".hidden"), valid_file()).unwrap();
        fs::write(tmp.path().join("app"), valid_file()).unwrap();
        let bad = MAX_ERRORS_PER_DIR + 5;
        for i in 0..bad {
            std::os::unix::fs::symlink("/etc/hostname", tmp.path().join(format!("l{i}"))).unwrap();
        }
        fs::hard_link(tmp.path().join("app"), tmp.path().join("app2")).unwrap();
        let found = scan(tmp.path(), None);
        assert!(found.files.is_empty(), "{:?}", found.files);
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), MAX_ERRORS_PER_DIR + 1, "{errors:?}");
        assert!(errors[..MAX_ERRORS_PER_DIR]
            .iter()
            .all(|e| e.contains("not a regular file") || e.contains("hard links")));
        assert!(errors[MAX_ERRORS_PER_DIR].contains("more files could not be read"));
    }

    #[test]
    fn another_users_file_is_judged_by_its_descriptor_and_left_unread() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("app"), valid_file()).unwrap();
        let mine = fs::metadata(tmp.path().join("app")).unwrap().uid();
        let theirs = scan(tmp.path(), Some(mine.wrapping_add(1)));
        assert!(
            theirs.files.is_empty() && theirs.errors.is_empty(),
            "{theirs:?}"
        );
        let found = scan(tmp.path(), Some(mine));
        assert_eq!(found.files.len(), 1);
        let file = &found.files[0];
        assert_eq!((file.name.as_str(), file.uid), ("app", mine));
        assert!(file.changed > 0 && file.modified > 0);
        assert_eq!(file.read().unwrap().metrics[0].pcp_name, "mmv.app.up");
    }

    #[test]
    fn a_file_is_read_from_the_descriptor_discovery_opened() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("app"), b"MMV\0").unwrap();
        let found = scan(tmp.path(), None);
        let [file] = found.files.as_slice() else {
            panic!("{found:?}")
        };
        // The name now names a valid file; the one found was truncated.
        fs::write(tmp.path().join("new"), valid_file()).unwrap();
        fs::rename(tmp.path().join("new"), tmp.path().join("app")).unwrap();
        let err = file.read().unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Truncated { .. }), "{err}");
        assert!(err.to_string().contains(&file.path.display().to_string()));
        assert!(crate::mmv::read(&file.path).is_ok());
    }

    #[test]
    fn this_hosts_view_is_found_through_a_table() {
        // Whatever this host holds, a look completes and names only mmv files.
        let found = discover_with(&Table::scan());
        for file in &found.files {
            assert!(
                file.path.parent().is_some_and(|p| p.ends_with("mmv")),
                "{file:?}"
            );
        }
    }
}
