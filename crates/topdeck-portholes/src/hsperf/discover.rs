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

use std::collections::{HashMap, HashSet};
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use topdeck_procfs::budget::{
    DirBudget, DirsPerUser, MAX_DIRS_PER_USER, MAX_FILES_PER_DIR, MAX_TIME_PER_DIR,
};
use topdeck_procfs::locks::{major, minor, write_flocks};
use topdeck_procfs::table::Table;
use topdeck_procfs::unreadable::Stamp;
use topdeck_procfs::writer::writer_among;

use super::error::{Error, ErrorKind, Result};
use super::file::{read_open, HsperfDir};
use super::PerfData;
use crate::views::each_view_dir;

/// Prefix of the per-user directories in a `/tmp`.
const DIR_PREFIX: &str = "hsperfdata_";
/// How long a bad file must have been left unchanged to be remembered as
/// bad: a JVM fills its file within moments of making it, and on tmpfs its
/// writes through the mapping do not change the file's `ctime`.
const SETTLED: Duration = Duration::from_secs(1);

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
    /// The file as [`discover`] opened it and judged its liveness from:
    /// its contents are read from the same file, never by name again.
    file: Arc<File>,
    /// The file's stamp when it was opened, to remember it by if it
    /// cannot be read.
    stamp: Stamp,
}

impl PartialEq for Jvm {
    /// The same file, found the same way (the open file aside).
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
    /// Copies and parses the file, through the descriptor [`discover`]
    /// opened and judged its liveness from: a container that swaps its
    /// `/tmp`, or a file renamed over this one meanwhile, cannot make this
    /// read another file than the one found.
    pub fn read(&self) -> Result<PerfData> {
        read_open(&self.file, &self.path)
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
    discover_for(table, None, &mut Unreadable::default())
}

/// [`discover_with`], keeping only the files of `uid` in this reader's own
/// view of the file system: other views are not looked into, and another
/// user's `hsperfdata_<user>` directory is judged by `fstat` of its open
/// descriptor and left unlisted, so none of its files is opened or read
/// (an endpoint exporting only its own user's JVMs reads nothing else).
///
/// ```no_run
/// let table = topdeck_procfs::table::Table::scan();
/// // SAFETY: geteuid has no preconditions.
/// let me = unsafe { libc::geteuid() };
/// let found = topdeck_portholes::hsperf::discover_owned_by(&table, me);
/// assert!(found.jvms.iter().all(|j| j.uid == me));
/// ```
pub fn discover_owned_by(table: &Table, uid: u32) -> Discovery {
    discover_for(table, Some(uid), &mut Unreadable::default())
}

/// [`discover_with`] (all users) or [`discover_owned_by`] (`owner`'s
/// only), for a reader that looks again and again: files that could not
/// be read, at this look or at the last (see [`Unreadable::remember`]),
/// are remembered in `unreadable` and not opened again while they do not
/// change (a `stat` tells), their error said again from memory.
///
/// ```no_run
/// use topdeck_portholes::hsperf::{discover_remembering, Unreadable};
/// let mut unreadable = Unreadable::default();
/// for _ in 0..3 {
///     let table = topdeck_procfs::table::Table::scan();
///     let found = discover_remembering(&table, None, &mut unreadable);
///     for jvm in &found.jvms {
///         if let Err(e) = jvm.read() {
///             unreadable.remember(jvm, &e);
///         }
///     }
/// }
/// ```
pub fn discover_remembering(
    table: &Table,
    owner: Option<u32>,
    unreadable: &mut Unreadable,
) -> Discovery {
    discover_for(table, owner, unreadable)
}

/// hsperfdata files that could not be read for a reason of their own (a
/// FIFO, a link, another owner's file, garbage or a truncated buffer),
/// remembered by directory, name, inode, size and `ctime` until they
/// change, so that a directory of bad files costs a look a `stat` of each,
/// not an open and a read. Only files left unchanged for a moment are
/// remembered, and, for their contents, only those no running JVM can
/// have written (a starting JVM's file is briefly unreadable).
#[derive(Debug, Default)]
pub struct Unreadable(topdeck_procfs::unreadable::Unreadable<ErrorKind>);

impl Unreadable {
    /// Remembers that `jvm`'s file, as discovery found it, could not be
    /// read for `err`, if that lasts: a file JVM still runs for, one that
    /// changed a moment ago, or a passing error (I/O, a JVM not ready yet)
    /// is opened again at the next look.
    pub fn remember(&mut self, jvm: &Jvm, err: &Error) {
        let (Some(dir), Some(name)) = (jvm.path.parent(), jvm.path.file_name()) else {
            return;
        };
        if jvm.liveness == Liveness::Stale {
            if let Some(name) = name.to_str() {
                self.add(dir, name, jvm.stamp, err.kind());
            }
        }
    }

    /// Files remembered.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no file is remembered.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn add(&mut self, dir: &Path, name: &str, stamp: Stamp, kind: &ErrorKind) {
        let lasts = matches!(
            kind,
            ErrorKind::Truncated { .. }
                | ErrorKind::BadMagic { .. }
                | ErrorKind::BadByteOrder { .. }
                | ErrorKind::UnsupportedVersion { .. }
                | ErrorKind::Corrupt { .. }
                | ErrorKind::TooLarge { .. }
                | ErrorKind::NotRegularFile
                | ErrorKind::HardLinked { .. }
                | ErrorKind::OwnerMismatch { .. }
        );
        if lasts && stamp.unchanged_for(SETTLED) {
            self.0.remember(dir, name, stamp, kind.clone());
        }
    }
}

/// What a look needs to judge each file it opens.
struct Judge<'a> {
    table: &'a Table,
    locks: HashMap<(u32, u32, u64), u32>,
    seen: HashSet<(u64, u64)>,
    /// One budget per user across all of that user's `hsperfdata_*`
    /// directories, in every view.
    users: HashMap<u32, DirBudget>,
    /// Files known to be unreadable, from earlier looks.
    unreadable: &'a mut Unreadable,
}

fn discover_for(table: &Table, owner: Option<u32>, unreadable: &mut Unreadable) -> Discovery {
    let mut found = Discovery::default();
    unreadable.0.new_look();
    let mut judge = Judge {
        table,
        locks: flocks(&topdeck_procfs::locks::read().unwrap_or_default()),
        seen: HashSet::new(),
        users: HashMap::new(),
        unreadable,
    };
    // With no view of its own to key on, no JVM could be named in the
    // host's paths: only the views of processes are looked in.
    each_view_dir(
        table,
        owner,
        false,
        &mut found,
        |found| &mut found.errors,
        |_| PathBuf::from("/tmp"),
        |look, tmp, tmp_path, found| {
            scan_tmp(&tmp, tmp_path, look.members, owner, &mut judge, found);
        },
    );
    found
}

/// The `hsperfdata_<user>` directories of the open `/tmp` `tmp` (shown as
/// `tmp_path`), of `owner` only when given.
fn scan_tmp(
    tmp: &impl std::os::fd::AsFd,
    tmp_path: &Path,
    members: &[u32],
    owner: Option<u32>,
    judge: &mut Judge<'_>,
    found: &mut Discovery,
) {
    let mut names = match topdeck_procfs::root::names(tmp) {
        Ok(names) => names,
        Err(e) => {
            found
                .errors
                .push(Error::io("listing the directory", tmp_path, e));
            return;
        }
    };
    names.sort();
    let dirs = names.into_iter().filter_map(|name| {
        let user = name.to_str()?.strip_prefix(DIR_PREFIX)?.to_owned();
        Some((name, user))
    });
    // Directories read in this view, by owner: a JVM makes one, named
    // after its user, so a user with more made them for another reason.
    let mut read = DirsPerUser::default();
    for (name, user) in dirs {
        let dir_path = tmp_path.join(&name);
        let dir = match HsperfDir::open_at(tmp, &name, &dir_path) {
            Ok(dir) => dir,
            // Another user's directory is none of this look's business.
            Err(_) if owner.is_some() => continue,
            Err(e) => {
                found.errors.push(e);
                continue;
            }
        };
        if owner.is_some_and(|uid| uid != dir.uid()) {
            continue;
        }
        if !read.admit(dir.uid()) {
            continue;
        }
        scan_dir(&dir, &user, members, judge, found);
    }
    for (uid, n) in read.over() {
        found.errors.push(
            Error::new(ErrorKind::LeftOut {
                what: format!(
                    "uid {uid} owns {n} hsperfdata_<user> directories here; only the first \
                     {MAX_DIRS_PER_USER} are read (a JVM makes one, named after its user)"
                ),
            })
            .at(tmp_path),
        );
    }
}

/// The files of one `hsperfdata_<user>` directory, within one look's
/// budget for a directory: a user who fills theirs with files slows only
/// the reading of their own JVMs, and is told once.
fn scan_dir(
    dir: &HsperfDir,
    user: &str,
    members: &[u32],
    judge: &mut Judge<'_>,
    found: &mut Discovery,
) {
    let (pids, complete) = match dir.pids_up_to(topdeck_procfs::budget::MAX_NAMES_PER_DIR) {
        Ok(listed) => listed,
        Err(e) => {
            found.errors.push(e);
            return;
        }
    };
    // The user's budget, shared by all of its directories; errors are
    // shown up to a few per directory.
    let left_before = judge.users.entry(dir.uid()).or_default().left();
    let mut errors = DirBudget::new();
    for pid in pids {
        let name = pid.to_string();
        // A file known to be bad costs a `stat`, to see it did not change.
        if let Some(kind) = judge
            .unreadable
            .0
            .still(dir.path(), &name, dir.stamp(&name))
        {
            if errors.error() {
                let error = Error::new(kind.clone()).at(&dir.path().join(&name));
                found.errors.push(error);
            }
            continue;
        }
        let budget = judge.users.entry(dir.uid()).or_default();
        if !budget.open() {
            continue;
        }
        let (file, meta) = match dir.open_file(name.as_ref()) {
            Ok(opened) => opened,
            Err(e) => {
                if let Some(stamp) = dir.stamp(&name) {
                    judge.unreadable.add(dir.path(), &name, stamp, e.kind());
                }
                if errors.error() {
                    found.errors.push(e);
                }
                continue;
            }
        };
        if !judge.seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        let (host, liveness) = judged(
            judge.table,
            &judge.locks,
            members.iter().copied(),
            Some(pid),
            &file,
            &meta,
        );
        found.jvms.push(Jvm {
            path: dir.path().join(pid.to_string()),
            user: user.to_owned(),
            pid,
            uid: meta.uid(),
            host_pid: host,
            liveness,
            file: Arc::new(file),
            stamp: Stamp::of_metadata(&meta),
        });
    }
    let spent = judge.users.get(&dir.uid()).map_or(0, DirBudget::left);
    let mut what: Vec<String> = errors.summary(complete).into_iter().collect();
    if spent > left_before {
        what.insert(
            0,
            format!(
                "{} files were not read this time: one look opens at most {MAX_FILES_PER_DIR} \
                 files of one user's hsperfdata directories in {MAX_TIME_PER_DIR:?} of CPU time",
                spent - left_before
            ),
        );
    }
    if !what.is_empty() {
        let what = what.join("; ");
        found
            .errors
            .push(Error::new(ErrorKind::LeftOut { what }).at(dir.path()));
    }
}

/// The JVM of the open file `file` (`meta` its `fstat`), named `nspid`,
/// among `members`, and whether it runs. Only a process that can have
/// written the file is named (anyone may make a file named after any
/// pid): the lowest of `members` that is `nspid` in its own pid namespace,
/// runs as the file's owner and started before the file last changed
/// ([`writer_among`]). The file is [`Liveness::Locked`] when `locks`
/// lists a write `flock` on it, else [`Liveness::Running`] when a JVM is
/// named.
fn judged(
    table: &Table,
    locks: &HashMap<(u32, u32, u64), u32>,
    members: impl IntoIterator<Item = u32>,
    nspid: Option<u32>,
    file: &File,
    meta: &Metadata,
) -> (Option<u32>, Liveness) {
    let host = nspid.and_then(|nspid| writer_among(table, members, nspid, file));
    let lock = locks.get(&(major(meta.dev()), minor(meta.dev()), meta.ino()));
    let liveness = match lock {
        Some(&holder) => Liveness::Locked {
            holder: (holder != 0).then_some(holder),
        },
        None if host.is_some() => Liveness::Running,
        None => Liveness::Stale,
    };
    (host, liveness)
}

/// [`read`](super::read), with the file's liveness judged again as
/// [`discover`] judged it: a write `flock` on it, else a JVM that can have
/// written it, here `host_pid` (the one discovery named,
/// [`Jvm::host_pid`]) if it still is the file's pid in its own pid
/// namespace. A view that follows one JVM asks this at each refresh, and
/// calls it live exactly when a look would.
///
/// ```no_run
/// use topdeck_portholes::hsperf::{read_judged, Liveness};
///
/// let (perf, liveness) = read_judged("/tmp/hsperfdata_app/4242".as_ref(), Some(4242))?;
/// println!("{} entries, live: {}", perf.entries.len(), liveness != Liveness::Stale);
/// # Ok::<(), topdeck_portholes::hsperf::Error>(())
/// ```
pub fn read_judged(path: &Path, host_pid: Option<u32>) -> Result<(PerfData, Liveness)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::io(
            "splitting the path into directory and file name",
            path,
            io::Error::from(io::ErrorKind::InvalidInput),
        ));
    };
    let (file, meta) = HsperfDir::open(dir)?.open_file(name)?;
    let locks = flocks(&topdeck_procfs::locks::read().unwrap_or_default());
    let nspid = name.to_str().and_then(|n| n.parse().ok());
    let table = Table::default();
    let (_, liveness) = judged(&table, &locks, host_pid, nspid, &file, &meta);
    Ok((read_open(&file, path)?, liveness))
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
    use std::fs;
    use topdeck_procfs::budget::{MAX_ERRORS_PER_DIR, MAX_FILES_PER_DIR};

    /// `hsperfdata_app` in a fresh directory standing for `/tmp`, opened
    /// as discovery opens it, with `files` empty files named 1, 2, …
    fn directory_of(files: u32) -> (tempfile::TempDir, HsperfDir) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("hsperfdata_app");
        fs::create_dir(&path).unwrap();
        for pid in 1..=files {
            File::create(path.join(pid.to_string())).unwrap();
        }
        let parent = File::open(tmp.path()).unwrap();
        let dir = HsperfDir::open_at(&parent, "hsperfdata_app".as_ref(), &path).unwrap();
        (tmp, dir)
    }

    /// A judge with no process or lock: every file is stale.
    fn judge<'a>(table: &'a Table, unreadable: &'a mut Unreadable) -> Judge<'a> {
        Judge {
            table,
            locks: HashMap::new(),
            seen: HashSet::new(),
            users: HashMap::new(),
            unreadable,
        }
    }

    fn scan(dir: &HsperfDir) -> Discovery {
        let table = Table::default();
        let mut unreadable = Unreadable::default();
        let mut judge = judge(&table, &mut unreadable);
        let mut found = Discovery::default();
        scan_dir(dir, "app", &[], &mut judge, &mut found);
        found
    }

    #[test]
    fn a_directory_over_the_budget_is_read_up_to_it_and_named_once() {
        let files = (MAX_FILES_PER_DIR + 100) as u32;
        let (_tmp, dir) = directory_of(files);
        let found = scan(&dir);
        assert!(
            found.jvms.len() <= MAX_FILES_PER_DIR,
            "{}",
            found.jvms.len()
        );
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        assert!(
            matches!(errors.as_slice(), [one] if one.contains(&dir.path().display().to_string())
                && one.contains(&format!("{} files were not read", files as usize - found.jvms.len()))),
            "{errors:?}"
        );
    }

    #[test]
    fn bad_files_past_the_first_few_are_counted_in_one_line() {
        let (_tmp, dir) = directory_of(0);
        let bad = MAX_ERRORS_PER_DIR + 12;
        for pid in 1..=bad {
            std::os::unix::fs::symlink("/etc/hostname", dir.path().join(pid.to_string())).unwrap();
        }
        let found = scan(&dir);
        assert!(found.jvms.is_empty());
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), MAX_ERRORS_PER_DIR + 1, "{errors:?}");
        assert!(errors[..MAX_ERRORS_PER_DIR]
            .iter()
            .all(|e| e.contains("not a regular file")));
        assert!(
            errors[MAX_ERRORS_PER_DIR].contains("12 more files could not be read"),
            "{errors:?}"
        );
    }

    #[test]
    fn another_users_directory_is_not_listed_when_an_owner_is_given() {
        let (tmp, dir) = directory_of(3);
        let tmp_fd = File::open(tmp.path()).unwrap();
        let table = Table::default();
        let mut unreadable = Unreadable::default();
        let mut judge = judge(&table, &mut unreadable);
        let mut theirs = Discovery::default();
        let other = dir.uid().wrapping_add(1);
        scan_tmp(
            &tmp_fd,
            tmp.path(),
            &[],
            Some(other),
            &mut judge,
            &mut theirs,
        );
        assert!(
            theirs.jvms.is_empty() && theirs.errors.is_empty(),
            "{theirs:?}"
        );
        let mut mine = Discovery::default();
        scan_tmp(
            &tmp_fd,
            tmp.path(),
            &[],
            Some(dir.uid()),
            &mut judge,
            &mut mine,
        );
        assert_eq!(mine.jvms.len(), 3, "{mine:?}");
        assert!(mine.jvms.iter().all(|j| j.uid == dir.uid()));
    }

    #[test]
    fn a_jvm_is_read_from_the_file_its_liveness_was_judged_from() {
        let (_tmp, dir) = directory_of(1);
        let found = scan(&dir);
        let [jvm] = found.jvms.as_slice() else {
            panic!("{:?}", found.jvms)
        };
        // The name now names another file, a valid one; the one found was
        // empty, and reading it must say so.
        let other = super::super::SyntheticBuffer::new().build();
        let replacement = dir.path().join("replacement");
        fs::write(&replacement, other).unwrap();
        fs::rename(&replacement, dir.path().join("1")).unwrap();
        let err = jvm.read().unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Truncated { .. }), "{err}");
        assert!(
            super::super::read(&jvm.path).is_ok(),
            "the name now names a valid file"
        );
    }

    #[test]
    fn a_file_read_again_is_judged_as_discovery_judged_it() {
        let (_tmp, dir) = directory_of(0);
        let me = std::process::id();
        let path = dir.path().join(me.to_string());
        fs::write(&path, super::super::SyntheticBuffer::new().build()).unwrap();
        let table = Table::scan();
        let mut judge = Judge {
            table: &table,
            locks: HashMap::new(),
            seen: HashSet::new(),
            users: HashMap::new(),
            unreadable: &mut Unreadable::default(),
        };
        let mut found = Discovery::default();
        scan_dir(&dir, "app", &[me], &mut judge, &mut found);
        let [jvm] = found.jvms.as_slice() else {
            panic!("{found:?}")
        };
        assert_eq!((jvm.host_pid, jvm.liveness), (Some(me), Liveness::Running));
        let again = |host| read_judged(&path, host).unwrap().1;
        assert_eq!(again(Some(me)), Liveness::Running);
        assert_eq!(again(None), Liveness::Stale);
        // A process that is not the file's pid is not its JVM, and one
        // that exited is none.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let other = again(Some(child.id()));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(other, Liveness::Stale);
        assert_eq!(again(Some(child.id())), Liveness::Stale);
        // A write lock on it is a JVM's (JDK 17 and later take one).
        let file = File::open(&path).unwrap();
        // SAFETY: flock on a descriptor this test owns, open until the end.
        let locked = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        };
        assert_eq!(locked, 0);
        assert_eq!(again(None), Liveness::Locked { holder: Some(me) });
    }

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
