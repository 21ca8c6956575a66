// SPDX-License-Identifier: Apache-2.0
//! Where discovery looks: this reader's own view of the file system and,
//! unless only one user's files are wanted, every other view (mount
//! namespace and root: a container) through one of its processes, each
//! directory opened inside that view's root so that a link planted there
//! leads only within it.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use topdeck_procfs::table::Table;
use topdeck_procfs::view::View;

use crate::file_error::{FileError, FileErrorKind};

/// One view of the file system to look in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look<'t> {
    /// The view; `None` for the host's paths when this reader's own view
    /// is unknown (no `/proc/self/ns`).
    pub view: Option<View>,
    /// The process the view is reached through; `None` for this reader's
    /// own.
    pub via: Option<u32>,
    /// The view's processes, as the table lists them.
    pub members: &'t [u32],
}

impl Look<'_> {
    /// Opens the directory `path` (absolute, as the view sees it) inside
    /// the view's root, through [`Look::via`] while it is still in it.
    pub(crate) fn open(&self, path: &Path) -> io::Result<OwnedFd> {
        match (self.via, self.view) {
            (Some(pid), Some(view)) => topdeck_procfs::root::open_dir_in_view(pid, &view, path),
            _ => topdeck_procfs::root::open_dir(path),
        }
    }

    /// `path` as this reader shows it: through `/proc/<pid>/root` for
    /// another view.
    pub(crate) fn shown(&self, path: &Path) -> PathBuf {
        match self.via {
            Some(pid) => Path::new("/proc")
                .join(pid.to_string())
                .join("root")
                .join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_path_buf(),
        }
    }
}

/// The views to look in, in view order: this reader's own, and the
/// others unless `owner` is given (only one user's files, in this
/// reader's own view). With no view of its own to key on, the host's
/// paths come first when `host_without_own_view`.
fn looks(table: &Table, owner: Option<u32>, host_without_own_view: bool) -> Vec<Look<'_>> {
    let own = table.own_view();
    let mut by_view: BTreeMap<View, Look<'_>> = BTreeMap::new();
    if let Some(own) = own {
        by_view.insert(
            own,
            Look {
                view: Some(own),
                via: None,
                members: &[],
            },
        );
    }
    for (view, members) in &table.views().members {
        if owner.is_some() && Some(*view) != own {
            continue;
        }
        let Some(&first) = members.first() else {
            continue;
        };
        by_view
            .entry(*view)
            .or_insert(Look {
                view: Some(*view),
                via: Some(first),
                members: &[],
            })
            .members = members;
    }
    let host = (own.is_none() && host_without_own_view).then_some(Look {
        view: None,
        via: None,
        members: &[],
    });
    host.into_iter().chain(by_view.into_values()).collect()
}

/// Opens in each view to look in (see [`looks`]) the directory `dir_in`
/// names there, and hands it to `each` with the path it is shown as. A
/// view without that directory, or whose process has gone or moved since
/// the table was taken, is passed over; any other failure to open it is
/// an error in `errors(found)`.
pub(crate) fn each_view_dir<D, K: FileErrorKind>(
    table: &Table,
    owner: Option<u32>,
    host_without_own_view: bool,
    found: &mut D,
    errors: impl Fn(&mut D) -> &mut Vec<FileError<K>>,
    dir_in: impl Fn(&Look<'_>) -> PathBuf,
    mut each: impl FnMut(&Look<'_>, OwnedFd, &Path, &mut D),
) {
    for look in looks(table, owner, host_without_own_view) {
        let path = dir_in(&look);
        let shown = look.shown(&path);
        match look.open(&path) {
            Ok(dir) => each(&look, dir, &shown, found),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => errors(found).push(FileError::io("opening the directory", &shown, e)),
        }
    }
}
