// SPDX-License-Identifier: Apache-2.0
//! What one look may spend in one directory of files other users write:
//! topdeck's registry directories and the portholes' (`hsperfdata_<user>`,
//! a prometheus_client directory, a `/dev/shm`) alike, so that a user who
//! fills a directory slows only the reading of that directory, never the
//! reading of anyone else's.

use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

/// Most files one look opens in one directory: a user who fills their
/// directory slows only their own reading, never anyone else's.
pub const MAX_FILES_PER_DIR: usize = 4096;
/// Most CPU time one look spends opening the files of one directory; the
/// rest wait for the next look. CPU time, not wall time: on a loaded host
/// a look is descheduled, and a wall-clock budget would then leave out an
/// ordinary user's files for reasons that are nobody's doing.
pub const MAX_TIME_PER_DIR: Duration = Duration::from_millis(100);
/// Most names one look takes from one directory (see [`names_up_to`]).
pub const MAX_NAMES_PER_DIR: usize = 16 * MAX_FILES_PER_DIR;
/// Most directories of one user one look reads where a user may make any
/// number (`/dev/shm/topdeck-<uid>.<tag>`, `hsperfdata_<name>`), in name
/// order: each would otherwise add a directory's budget to every look.
pub const MAX_DIRS_PER_USER: usize = 8;
/// Most errors about single files one look reports in full for one
/// directory; the others are counted in one line.
pub const MAX_ERRORS_PER_DIR: usize = 16;

/// The directories of each user one look reads, at most
/// [`MAX_DIRS_PER_USER`] each, and the users who have more, for one line
/// each saying how many were left out.
///
/// ```
/// use topdeck_procfs::budget::{DirsPerUser, MAX_DIRS_PER_USER};
/// let mut per_user = DirsPerUser::default();
/// let read = (0..MAX_DIRS_PER_USER + 3).filter(|_| per_user.admit(1000)).count();
/// assert!(per_user.admit(0));
/// assert_eq!(read, MAX_DIRS_PER_USER);
/// assert_eq!(per_user.over(), [(1000, MAX_DIRS_PER_USER + 3)]);
/// ```
#[derive(Debug, Default)]
pub struct DirsPerUser {
    seen: std::collections::HashMap<u32, usize>,
}

impl DirsPerUser {
    /// Counts one more directory of `uid`: whether it is read.
    pub fn admit(&mut self, uid: u32) -> bool {
        let n = self.seen.entry(uid).or_default();
        *n += 1;
        *n <= MAX_DIRS_PER_USER
    }

    /// The users with more than [`MAX_DIRS_PER_USER`] directories, by uid,
    /// with how many each has.
    pub fn over(self) -> Vec<(u32, usize)> {
        let mut over: Vec<(u32, usize)> = self
            .seen
            .into_iter()
            .filter(|&(_, n)| n > MAX_DIRS_PER_USER)
            .collect();
        over.sort_unstable();
        over
    }
}

/// CPU time this thread has used.
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The names of the open directory `dir` (not `.` and `..`), in directory
/// order, at most `max` of them, and whether that is all of them: a
/// directory of a million names costs a look no more than `max`.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// for name in ["a", "b", "c"] {
///     std::fs::write(dir.path().join(name), b"")?;
/// }
/// let fd = std::fs::File::open(dir.path())?;
/// let (names, complete) = topdeck_procfs::budget::names_up_to(&fd, 2)?;
/// assert_eq!((names.len(), complete), (2, false));
/// let (names, complete) = topdeck_procfs::budget::names_up_to(&fd, 3)?;
/// assert_eq!((names.len(), complete), (3, true));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn names_up_to(dir: impl AsFd, max: usize) -> io::Result<(Vec<OsString>, bool)> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if out.len() == max {
            return Ok((out, false));
        }
        out.push(OsString::from(std::ffi::OsStr::from_bytes(name)));
    }
    Ok((out, true))
}

/// One look's spending in one directory: files opened and CPU time since
/// it began ([`MAX_FILES_PER_DIR`], [`MAX_TIME_PER_DIR`]), files left out
/// once either is spent, and errors about single files, of which the
/// first [`MAX_ERRORS_PER_DIR`] are reported in full.
///
/// ```
/// use topdeck_procfs::budget::{DirBudget, MAX_ERRORS_PER_DIR, MAX_FILES_PER_DIR};
///
/// let mut budget = DirBudget::new();
/// let opened = (0..MAX_FILES_PER_DIR + 3).filter(|_| budget.open()).count();
/// assert!(opened <= MAX_FILES_PER_DIR);
/// assert_eq!(budget.left(), MAX_FILES_PER_DIR + 3 - opened);
/// let shown = (0..40).filter(|_| budget.error()).count();
/// assert_eq!((shown, budget.errors_not_shown()), (MAX_ERRORS_PER_DIR, 40 - MAX_ERRORS_PER_DIR));
/// ```
#[derive(Debug)]
pub struct DirBudget {
    started: Duration,
    opened: usize,
    left: usize,
    errors: usize,
}

impl Default for DirBudget {
    fn default() -> Self {
        Self::new()
    }
}

impl DirBudget {
    /// A budget whose CPU time starts now.
    pub fn new() -> Self {
        Self {
            started: thread_cpu(),
            opened: 0,
            left: 0,
            errors: 0,
        }
    }

    /// Whether one more file may be opened; counted as opened if so, as
    /// left out if not.
    pub fn open(&mut self) -> bool {
        if self.opened >= MAX_FILES_PER_DIR
            || thread_cpu().saturating_sub(self.started) > MAX_TIME_PER_DIR
        {
            self.left += 1;
            return false;
        }
        self.opened += 1;
        true
    }

    /// Files opened so far.
    pub fn opened(&self) -> usize {
        self.opened
    }

    /// Files left out because the budget was spent.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Counts an error about one file; whether to report it in full (the
    /// first [`MAX_ERRORS_PER_DIR`]) rather than only count it.
    pub fn error(&mut self) -> bool {
        self.errors += 1;
        self.errors <= MAX_ERRORS_PER_DIR
    }

    /// Errors counted but not reported in full.
    pub fn errors_not_shown(&self) -> usize {
        self.errors.saturating_sub(MAX_ERRORS_PER_DIR)
    }

    /// What was left out of the directory, in one sentence (without the
    /// directory, which the caller's error names), or `None` when nothing
    /// was: files over the budget (`complete` is false when the listing
    /// itself stopped at [`MAX_NAMES_PER_DIR`]) and errors not shown.
    pub fn summary(&self, complete: bool) -> Option<String> {
        let mut parts = Vec::new();
        if self.left > 0 || !complete {
            let (more, stopped) = if complete {
                ("", String::new())
            } else {
                (
                    " or more",
                    format!(" (its listing stopped at {MAX_NAMES_PER_DIR} names)"),
                )
            };
            parts.push(format!(
                "{}{more} files were not read this time{stopped}: one look opens at most {MAX_FILES_PER_DIR} files of a directory in {MAX_TIME_PER_DIR:?} of CPU time",
                self.left
            ));
        }
        if self.errors_not_shown() > 0 {
            parts.push(format!(
                "{} more files could not be read (the first {MAX_ERRORS_PER_DIR} errors are shown)",
                self.errors_not_shown()
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}
