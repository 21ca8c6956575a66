// SPDX-License-Identifier: Apache-2.0
//! Finding drivers: the default `aeron.dir` is `/dev/shm/aeron-<user>`, in
//! this mount namespace and in every other one (containers), reached
//! through `/proc/<pid>/root`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use topdeck_procfs::table::Table;
use topdeck_procfs::view::{View, Views};

/// A `cnc.dat` found by [`discover`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The path to read it through.
    pub path: PathBuf,
    /// For a file in another mount namespace, the process whose root it was
    /// found through (in topdeck's pid namespace); `None` for our own
    /// `/dev/shm`.
    pub via_pid: Option<u32>,
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
    discover_in(Path::new("/"), table.views(), table.own_view())
}

/// The files under `root`'s `/dev/shm`, then under each other view's
/// (`own` is the reader's, already covered by `root`).
fn discover_in(root: &Path, views: &Views, own: Option<View>) -> Vec<Source> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut add = |dir: PathBuf, via_pid| {
        for path in cnc_files(&dir) {
            // Symlinks are not followed: the same check `read` makes.
            if let Ok(m) = std::fs::symlink_metadata(&path) {
                if m.file_type().is_file() && seen.insert((m.dev(), m.ino())) {
                    out.push(Source { path, via_pid });
                }
            }
        }
    };
    add(root.join("dev/shm"), None);
    // One process per view is enough to see its /dev/shm.
    for (view, pids) in &views.members {
        if Some(*view) == own {
            continue;
        }
        if let Some(&pid) = pids.first() {
            add(
                Path::new("/proc")
                    .join(pid.to_string())
                    .join("root/dev/shm"),
                Some(pid),
            );
        }
    }
    out
}

fn cnc_files(shm: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(shm) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("aeron-"))
        })
        .map(|e| e.path().join("cnc.dat"))
        .collect();
    files.sort();
    files
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
        let found = discover_in(tmp.path(), &Views::default(), None);
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
}
