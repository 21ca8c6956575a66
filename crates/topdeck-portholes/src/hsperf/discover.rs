// SPDX-License-Identifier: Apache-2.0
//! Finding JVMs' hsperfdata files, on the host and in containers, and
//! telling a live JVM's file from a stale one without taking a lock (a
//! reader's lock at the instant a new JVM reuses the pid would disable that
//! JVM's shared counters).
//!
//! As `jps` does, every process's `/proc/<pid>/root/tmp` is scanned, once
//! per view of the file system (mount namespace and root directory): a
//! containerised JVM's file is named after its pid in its own pid
//! namespace, and its host pid is the process with the same view whose
//! `NSpid` ends with that name.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use topdeck_procfs::locks::{major, minor, write_flocks};
use topdeck_procfs::process::started_secs;
use topdeck_procfs::table::Table;
use topdeck_procfs::view::View;

use super::error::{Error, Result};
use super::file::HsperfDir;
use super::PerfData;

/// Prefix of the per-user directories in a `/tmp`.
const DIR_PREFIX: &str = "hsperfdata_";
/// Slack between a process's start (whole seconds of `btime` plus clock
/// ticks) and its file's change time, for [`Jvm::host_pid`].
const START_SLACK_SECS: i64 = 2;

/// What [`discover`] found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// The files found, live or stale, in path order.
    pub jvms: Vec<Jvm>,
    /// Directories and files that could not be looked at (often permission:
    /// another user's `hsperfdata_<user>` directory is readable only by
    /// root), each with its path.
    pub errors: Vec<Error>,
}

/// One hsperfdata file.
#[derive(Debug, Clone)]
pub struct Jvm {
    /// The file, through `/proc/<pid>/root` for another mount namespace.
    pub path: PathBuf,
    /// The user of its directory name (`hsperfdata_<user>`).
    pub user: String,
    /// Its name: the JVM's pid in its own pid namespace.
    pub pid: u32,
    /// Its owner, from `fstat` of the file as discovery opened it.
    pub uid: u32,
    /// The JVM's pid as this process sees it: a process with the file's
    /// root and that namespace pid, running as the file's owner and
    /// started before the file last changed; `None` when no process can
    /// be shown to have written it (a stale file, or one another user
    /// named after a process of theirs).
    pub host_pid: Option<u32>,
    /// Whether a JVM still owns the file.
    pub liveness: Liveness,
    /// The directory as [`discover`] opened it, to read the file through
    /// without walking `path` again.
    dir: Arc<HsperfDir>,
}

impl PartialEq for Jvm {
    /// The same file, found the same way (the open directory aside).
    fn eq(&self, other: &Self) -> bool {
        (
            &self.path,
            &self.user,
            self.pid,
            self.uid,
            self.host_pid,
            self.liveness,
        ) == (
            &other.path,
            &other.user,
            other.pid,
            other.uid,
            other.host_pid,
            other.liveness,
        )
    }
}

impl Eq for Jvm {}

/// Whether the file belongs to a running JVM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// `/proc/locks` lists the JVM's `flock` on it (JDK 17.0.x and later
    /// take one); `holder` is the locker's pid, `None` when it is in
    /// another pid namespace (the kernel shows 0). On overlayfs the lock
    /// is listed on the underlying file's device, so a container's JVM may
    /// show as [`Liveness::Running`] instead.
    Locked {
        /// The pid holding the lock, as /proc/locks shows it.
        holder: Option<u32>,
    },
    /// Not locked (an older JDK), but [`Jvm::host_pid`] names its JVM.
    Running,
    /// No JVM owns it: a JVM killed with SIGKILL leaves its file behind.
    Stale,
}

impl Jvm {
    /// Copies and parses the file, opened in the directory [`discover`]
    /// opened: a container that swaps its `/tmp` meanwhile cannot make
    /// this read another file than the one found.
    pub fn read(&self) -> Result<PerfData> {
        self.dir.read(self.pid.to_string().as_ref())
    }
}

/// Lists the hsperfdata files of this host's JVMs and its containers'.
///
/// ```no_run
/// let found = topdeck_portholes::hsperf::discover();
/// for jvm in &found.jvms {
///     println!("{} {:?} {:?}", jvm.path.display(), jvm.host_pid, jvm.liveness);
/// }
/// for error in &found.errors {
///     eprintln!("{error}");
/// }
/// ```
pub fn discover() -> Discovery {
    discover_with(&Table::scan())
}

/// [`discover`], with the processes of `table`: one walk of `/proc`
/// shared with the look's other readers. A process's `status` is read
/// only in the views that hold hsperfdata files, and its `stat` only
/// for the process a file names.
///
/// ```no_run
/// let table = topdeck_procfs::table::Table::scan();
/// let found = topdeck_portholes::hsperf::discover_with(&table);
/// println!("{} hsperfdata files", found.jvms.len());
/// ```
pub fn discover_with(table: &Table) -> Discovery {
    let mut found = Discovery::default();
    let locks = flocks(&topdeck_procfs::locks::read().unwrap_or_default());
    let boot = topdeck_procfs::process::boot_time();
    let no_members = Vec::new();
    let mut roots: BTreeMap<View, (PathBuf, &Vec<u32>)> = BTreeMap::new();
    if let Some(own) = table.own_view() {
        roots.insert(own, (PathBuf::from("/"), &no_members));
    }
    for (view, members) in &table.views().members {
        let Some(first) = members.first() else {
            continue;
        };
        let root = roots.entry(*view).or_insert_with(|| {
            (
                Path::new("/proc").join(first.to_string()).join("root"),
                &no_members,
            )
        });
        root.1 = members;
    }
    let mut seen = HashSet::new();
    for (prefix, members) in roots.values() {
        // Another view's /tmp is opened inside its root: a link planted
        // there leads only within it.
        let tmp_path = prefix.join("tmp");
        let tmp = match topdeck_procfs::root::open_dir(&tmp_path) {
            Ok(tmp) => tmp,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                found
                    .errors
                    .push(Error::io("opening the directory", &tmp_path, e));
                continue;
            }
        };
        let mut names = match topdeck_procfs::root::names(&tmp) {
            Ok(names) => names,
            Err(e) => {
                found
                    .errors
                    .push(Error::io("listing the directory", &tmp_path, e));
                continue;
            }
        };
        names.sort();
        let dirs = names.into_iter().filter_map(|name| {
            let user = name.to_str()?.strip_prefix(DIR_PREFIX)?.to_owned();
            Some((name, user))
        });
        for (name, user) in dirs {
            let dir_path = tmp_path.join(&name);
            let dir =
                match HsperfDir::open_at(&tmp, &name, &dir_path).and_then(|d| Ok((d.pids()?, d))) {
                    Ok(dir) => dir,
                    Err(e) => {
                        found.errors.push(e);
                        continue;
                    }
                };
            let (pids, dir) = dir;
            let dir = Arc::new(dir);
            for pid in pids {
                let meta = match dir.open_file(pid.to_string().as_ref()) {
                    Ok((_, meta)) => meta,
                    Err(e) => {
                        found.errors.push(e);
                        continue;
                    }
                };
                if !seen.insert((meta.dev(), meta.ino())) {
                    continue;
                }
                // Only a process that can have written the file is named:
                // one running as the file's owner, started before it last
                // changed (anyone may make a file named after any pid).
                let host = host_of(table, members, pid, meta.uid()).filter(|&(_, start)| {
                    boot.is_some_and(|boot| {
                        started_secs(start, boot) <= meta.ctime() + START_SLACK_SECS
                    })
                });
                let liveness = match locks.get(&(major(meta.dev()), minor(meta.dev()), meta.ino()))
                {
                    Some(&holder) => Liveness::Locked {
                        holder: (holder != 0).then_some(holder),
                    },
                    None if host.is_some() => Liveness::Running,
                    None => Liveness::Stale,
                };
                found.jvms.push(Jvm {
                    path: dir_path.join(pid.to_string()),
                    user: user.clone(),
                    pid,
                    uid: meta.uid(),
                    host_pid: host.map(|(p, _)| p),
                    liveness,
                    dir: dir.clone(),
                });
            }
        }
    }
    found
}

/// The lowest of `members` (one view's processes, ascending) that is
/// `nspid` in its own pid namespace and runs as `uid` (its effective uid,
/// the owner of the files it makes), with its start time; only processes
/// whose `status` and `stat` this reader may read count (an unprivileged
/// reader cannot see other users' roots, and their files are not readable
/// to it anyway).
fn host_of(table: &Table, members: &[u32], nspid: u32, uid: u32) -> Option<(u32, u64)> {
    members.iter().find_map(|&pid| {
        let status = table.status(pid)?;
        if status.innermost_pid().unwrap_or(pid) != nspid || status.euid != uid {
            return None;
        }
        Some((pid, table.start_ticks(pid)?))
    })
}

/// Granted `FLOCK … WRITE` locks of /proc/locks, by (major, minor,
/// inode), to the holder's pid (0 when it is in another pid namespace).
fn flocks(text: &str) -> HashMap<(u32, u32, u64), u32> {
    write_flocks(text)
        .map(|l| ((l.major, l.minor, l.ino), l.pid.unwrap_or(0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flocks_keeps_granted_write_flocks_and_skips_waiters_and_posix_locks() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 99 08:01:1234567 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 77 00:1a:55 0 EOF\n\
                    3: FLOCK  ADVISORY  READ 5 08:01:9 0 EOF\n\
                    4: FLOCK  ADVISORY  WRITE 0 00:2f:31 0 EOF\n";
        let locks = flocks(text);
        assert_eq!(locks.len(), 2);
        assert_eq!(locks.get(&(8, 1, 1_234_567)), Some(&4242));
        assert_eq!(locks.get(&(0, 0x2f, 31)), Some(&0));
    }
}
