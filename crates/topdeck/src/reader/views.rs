// SPDX-License-Identifier: Apache-2.0
//! Registry directories of other views of the file system: a container
//! with its own `/dev/shm` (a private mount namespace, or another root)
//! keeps its writers' directories there, out of the host's sight. Each
//! view is looked into once, through `/proc/<pid>/root` of one of its
//! processes, with the container's own symlinks resolved inside its root
//! (`openat2` with `RESOLVE_IN_ROOT`): what the container holds may steer
//! the reader only within the container. The writers' pids are mapped to
//! this reader's pid namespace through `NSpid`, and their start times
//! checked, so their liveness is checked on the right process.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use rustix::fs as rfs;
use rustix::io::Errno;
use topdeck_procfs::table::Table;
use topdeck_procfs::{process, writer};

use crate::dir::{self, VerifiedDir, SHM_ROOT};
use crate::error::{Error, ErrorKind};

/// The processes that may have written a directory's files, to find a
/// writer's pid in this reader's pid namespace.
#[derive(Debug)]
pub(crate) struct Writers<'t> {
    /// Processes of the views that share the directory; empty for this
    /// reader's own view, whose writers' pids are this reader's.
    members: Vec<u32>,
    /// The processes of the look, walked once for every view and every
    /// kind of source: their `status` (the `NSpid` that maps a member's
    /// pid) and `stat` (its start) are read at the first question and
    /// kept; a pid not in it (an empty table) is read from `/proc`.
    table: &'t Table,
}

impl Writers<'_> {
    /// The pid in this reader's pid namespace of the writer that calls
    /// itself `pid` and started at `start` (clock ticks since boot, which
    /// both sides read from the same clock unless the writer is in a time
    /// namespace with a boot-time offset). `None` if no such process runs:
    /// it is gone, or its pid is not visible from here.
    pub(crate) fn host_pid(&self, pid: u32, start: u64) -> Option<u32> {
        // A container sharing this reader's pid namespace (or none at
        // all) names its writers by their pid here.
        if writer::runs(self.table, pid, Some(start)) {
            return Some(pid);
        }
        writer::host_pids(self.table, self.members.iter().copied(), pid)
            .find(|&m| writer::runs(self.table, m, Some(start)))
    }

    /// The pid to show for a writer [`host_pid`](Self::host_pid) did not
    /// find: in this reader's view, the pid it saw, which is this reader's
    /// too; in another, 0, since its pid there may name another process
    /// here.
    pub(crate) fn unmapped_pid(&self, pid: u32) -> u32 {
        if self.members.is_empty() {
            pid
        } else {
            0
        }
    }
}

/// A registry directory and the processes that may have written in it.
pub(crate) type FoundDir<'t> = (Arc<VerifiedDir>, Rc<Writers<'t>>);

/// The writers of this reader's own view, among `table`'s processes.
pub(crate) fn own_writers(table: &Table) -> Rc<Writers<'_>> {
    Rc::new(Writers {
        members: Vec::new(),
        table,
    })
}

/// The `topdeck-<uid>` directories under `/dev/shm` of every view of
/// `table` other than this reader's, each opened and verified as a local one is; `seen`
/// holds the (device, inode) of directories already listed, and those met
/// again through another view are skipped. A view this reader may not look
/// into is one error for all of them; a container's unsafe directory is an
/// error for that directory, but never makes the host's listing unusable.
pub(crate) fn other_views<'t>(
    table: &'t Table,
    errors: &mut Vec<Error>,
    private: &mut Vec<PathBuf>,
    seen: &mut HashSet<(u64, u64)>,
) -> Vec<FoundDir<'t>> {
    let own = table.own_view();
    let own_shm = rfs::stat(SHM_ROOT).ok().map(|st| (st.st_dev, st.st_ino));
    // Views sharing one /dev/shm (the containers of a pod, a chroot with
    // the host's bind-mounted) are looked into once, their processes
    // pooled for the pid mapping.
    let mut shms: Vec<(PathBuf, OwnedFd, Vec<u32>)> = Vec::new();
    let mut by_id: HashMap<(u64, u64), usize> = HashMap::new();
    let mut denied: Vec<PathBuf> = Vec::new();
    for (&v, pids) in &table.views().members {
        let Some(&first) = pids.first() else { continue };
        if Some(v) == own {
            continue;
        }
        let root = PathBuf::from(format!("/proc/{first}/root"));
        // Resolved inside that root: an absolute symlink or `..` planted
        // in the container cannot lead outside it.
        let fd = match topdeck_procfs::root::open_dir_in_view(first, &v, Path::new(SHM_ROOT)) {
            Ok(fd) => fd,
            Err(e) => match Errno::from_io_error(&e) {
                Some(Errno::ACCESS | Errno::PERM) => {
                    denied.push(root);
                    continue;
                }
                // Gone meanwhile, or no /dev/shm there.
                Some(Errno::NOENT | Errno::SRCH | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => {
                    continue
                }
                _ => {
                    let shm = root.join("dev/shm");
                    errors.push(Error::io(
                        "cannot look into another mount namespace's /dev/shm",
                        &shm,
                        e,
                    ));
                    continue;
                }
            },
        };
        let Ok(st) = rfs::fstat(&fd) else { continue };
        let id = (st.st_dev, st.st_ino);
        if Some(id) == own_shm {
            continue;
        }
        match by_id.get(&id) {
            Some(&i) => shms[i].2.extend(pids),
            None => {
                by_id.insert(id, shms.len());
                shms.push((root.join("dev/shm"), fd, pids.clone()));
            }
        }
    }
    if let Some(first) = denied.first() {
        errors.push(Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "{}: cannot look into {} other mount namespace(s) (containers), this one among \
                 them; their registries are not listed: run as root (or as their user) to list them",
                first.display(),
                denied.len()
            ),
        ));
    }
    let mut found = Vec::new();
    for (shm, fd, members) in shms {
        // Its directories are named by uids of its user namespace.
        let first = members.first().copied();
        let writers = Rc::new(Writers { members, table });
        for (name, inner) in user_dirs(&fd) {
            let path = shm.join(&name);
            let Some(uid) = first.and_then(|p| process::outer_uid(p, inner)) else {
                errors.push(Error::new(
                    ErrorKind::UnsafeDirectory,
                    format!(
                        "{}: uid {inner} has no uid on this host (its user namespace does not \
                         map it), so nobody here can be its owner; left unread",
                        path.display()
                    ),
                ));
                continue;
            };
            match VerifiedDir::open_at(&fd, &name, &path, uid) {
                Ok(d) => {
                    if d.id().is_none_or(|id| seen.insert(id)) {
                        found.push((Arc::new(d), writers.clone()));
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) if e.kind() == ErrorKind::PermissionDenied => private.push(path),
                Err(e) => errors.push(e),
            }
        }
    }
    found
}

/// `topdeck-<uid>` and `topdeck-<uid>.<tag>` entries of a `/dev/shm`, with
/// the uid each claims, sorted.
fn user_dirs(shm: &OwnedFd) -> Vec<(String, u32)> {
    let Ok(listing) = rfs::Dir::read_from(shm) else {
        return Vec::new();
    };
    let mut out: Vec<(String, u32)> = listing
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_str().ok()?.to_owned();
            let uid = dir::named_uid(&name)?;
            Some((name, uid))
        })
        .collect();
    out.sort();
    out
}
