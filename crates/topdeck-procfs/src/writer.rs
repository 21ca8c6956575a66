// SPDX-License-Identifier: Apache-2.0
//! Whether a process can be the writer of a file, and whether a writer
//! still runs: the one rule every reader of another process's file
//! applies before it names that process (a registry's writer, a JVM, an
//! Aeron driver, a prometheus_client worker, a PCP MMV client).
//!
//! A file names its writer by pid, and anyone may make a file naming any
//! pid: the pid is taken only for a process that can have written it. Such
//! a process runs as the file's owner (who created a file is its owner;
//! nobody but root can give a file away), and it started no later than the
//! file was last written: a process that started after that is another one
//! that was given the same pid once the writer exited. Where the file
//! records its writer's start in clock ticks (topdeck's registries do),
//! the same process has exactly those ticks.
//!
//! - [`can_have_written`]: the check on an open file, its owner and last
//!   change taken from `fstat`, with a time the file's header gives.
//! - [`check`]: the same check on explicit facts (a uid, a [`Start`]).
//! - [`judge`]: the rule itself, a pure function of what `/proc` showed.
//! - [`runs`]: whether a writer still runs, the same process when its
//!   start is known.
//! - [`host_pids`]: which processes a pid in another pid namespace is.
//! - [`writer_among`]: the one of a view's processes that can have
//!   written a file naming it by its pid there.
//!
//! Each takes the [`Table`] of the look when the caller has one, so a
//! process's `status` and `stat` are read once per look; a caller without
//! one passes `&Table::default()`, whose facts are read from `/proc` as
//! asked.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::process;
use crate::table::Table;

/// How much later than the file says its writer started a process may
/// appear to have started and still count as its writer: the two times
/// come from different clocks and units. The start `/proc` gives is
/// `btime` (whole seconds, rounded down: up to 1 s early, and moved by
/// any step of the wall clock since boot, a leap second among them) plus
/// clock ticks (1/100 s, rounded down); a file's times are set by the
/// kernel from its coarse clock (up to a scheduler tick behind the time of
/// the write); and a time the writer put in its header is one it read from
/// its own clock, rounded to its own unit (milliseconds, seconds). Two
/// seconds cover the rounding of `btime` and one step of a second. It
/// costs little: the kernel hands out pids in turn up to `pid_max`, so a
/// pid given again within two seconds of its file's last change is rare.
pub const START_SLACK: Duration = Duration::from_secs(2);

/// What a file tells of when its writer started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Exactly at these clock ticks since boot, as the writer read its own
    /// start from `/proc/self/stat` (topdeck's registry header): only the
    /// process with these ticks is the writer.
    Ticks(u64),
    /// No later than this: the file's last change, or a time the writer
    /// wrote after it started (Aeron's driver start timestamp).
    By(SystemTime),
    /// Nothing (prometheus_client's files name a pid alone): any process
    /// with the pid counts, a reused one too.
    Any,
}

/// A running process, as `/proc` shows it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// Effective uid (second field of the `Uid:` line of
    /// `/proc/<pid>/status`).
    pub euid: u32,
    /// Start time, clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub start_ticks: u64,
}

impl Process {
    /// Process `pid` now, from `table` when it is in it (read once per
    /// table) and from `/proc` otherwise; `None` when no such process runs
    /// or this reader may not see it (`hidepid`), or pid 0.
    ///
    /// ```
    /// use topdeck_procfs::{table::Table, writer::Process};
    ///
    /// let me = Process::read(&Table::default(), std::process::id()).unwrap();
    /// assert_eq!(Some(me.start_ticks), topdeck_procfs::process::start_ticks(None));
    /// assert_eq!(Process::read(&Table::default(), 0), None);
    /// ```
    pub fn read(table: &Table, pid: u32) -> Option<Self> {
        if pid == 0 {
            return None;
        }
        let euid = status_of(table, pid, |s| s.euid)?;
        Some(Self {
            euid,
            start_ticks: table.start_ticks(pid)?,
        })
    }
}

/// Whether a process can have written a file: what [`can_have_written`],
/// [`check`] and [`judge`] answer.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It runs as the file's owner and did not start after the file was
    /// written: it can be the writer (nothing proves it is).
    Could,
    /// No process has the pid (or this reader may not see it).
    Gone,
    /// A process has the pid but started after the file was written, or
    /// at other ticks than the file records: another process was given
    /// the writer's pid.
    Reused {
        /// The running process's start, clock ticks since boot.
        start_ticks: u64,
    },
    /// A process has the pid but runs as another user than the file's
    /// owner: not its writer (or a writer that changed its uid since,
    /// which is not to be told apart from a forger).
    OtherUser {
        /// The running process's effective uid.
        euid: u32,
    },
    /// Cannot be told, and why.
    Unknown(Unknown),
}

impl Verdict {
    /// Whether the process can be the writer ([`Verdict::Could`]).
    pub fn could(self) -> bool {
        self == Verdict::Could
    }
}

/// Why a [`Verdict`] is [`Verdict::Unknown`].
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// `/proc/stat` gave no boot time, so the process's start (ticks since
    /// boot) cannot be compared with a time of day.
    BootTime,
    /// `fstat` of the file failed, with this error: its owner and times
    /// are not known.
    FileTimes(io::ErrorKind),
}

impl std::fmt::Display for Verdict {
    /// Says why, of "the process" (the caller names the pid and file).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Could => f.write_str("it can have written the file"),
            Verdict::Gone => f.write_str("no such process runs"),
            Verdict::Reused { .. } => {
                f.write_str("it started after the file was written (a reused pid)")
            }
            Verdict::OtherUser { euid } => {
                write!(f, "it runs as uid {euid}, not as the file's owner")
            }
            Verdict::Unknown(Unknown::BootTime) => {
                f.write_str("its start time is unknown (/proc/stat has no btime)")
            }
            Verdict::Unknown(Unknown::FileTimes(kind)) => {
                write!(f, "the file's owner and times are unknown (fstat: {kind})")
            }
        }
    }
}

/// The rule: whether `process` (what `/proc` showed of the pid, `None`
/// when nothing runs there) can be the writer of a file owned by `uid`
/// (any user for `None`) whose writer started as `start` says. `boot` is
/// [`process::boot_time`], needed for [`Start::By`] only. The uid is
/// judged before the start, so a forger's file naming another user's
/// process says [`Verdict::OtherUser`].
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use topdeck_procfs::writer::{judge, Process, Start, Verdict};
///
/// // Started 1000 ticks after a boot at second 1000 (10 s at 100 Hz).
/// let p = Some(Process { euid: 1000, start_ticks: 1000 });
/// let at = |secs| Start::By(UNIX_EPOCH + Duration::from_secs(secs));
/// assert_eq!(judge(p, Some(1000), at(1100), Some(1000)), Verdict::Could);
/// assert_eq!(judge(p, Some(1000), at(900), Some(1000)), Verdict::Reused { start_ticks: 1000 });
/// assert_eq!(judge(p, Some(0), at(1100), Some(1000)), Verdict::OtherUser { euid: 1000 });
/// assert_eq!(judge(p, None, Start::Ticks(1000), None), Verdict::Could);
/// assert_eq!(judge(None, None, Start::Any, None), Verdict::Gone);
/// ```
pub fn judge(
    process: Option<Process>,
    uid: Option<u32>,
    start: Start,
    boot: Option<i64>,
) -> Verdict {
    let Some(p) = process else {
        return Verdict::Gone;
    };
    if uid.is_some_and(|uid| uid != p.euid) {
        return Verdict::OtherUser { euid: p.euid };
    }
    let reused = Verdict::Reused {
        start_ticks: p.start_ticks,
    };
    match start {
        Start::Any => Verdict::Could,
        Start::Ticks(ticks) if ticks == p.start_ticks => Verdict::Could,
        Start::Ticks(_) => reused,
        Start::By(by) => {
            let Some(boot) = boot else {
                return Verdict::Unknown(Unknown::BootTime);
            };
            let started = process::started_at(p.start_ticks, boot);
            match by.checked_add(START_SLACK) {
                Some(latest) if started > latest => reused,
                _ => Verdict::Could,
            }
        }
    }
}

/// [`judge`] on process `pid` as `/proc` (or `table`) shows it now.
///
/// ```
/// use topdeck_procfs::table::Table;
/// use topdeck_procfs::writer::{check, Start, Verdict};
///
/// let me = std::process::id();
/// let ticks = topdeck_procfs::process::start_ticks(None).unwrap();
/// let table = Table::default();
/// assert_eq!(check(&table, me, None, Start::Ticks(ticks)), Verdict::Could);
/// assert_eq!(check(&table, me, None, Start::Ticks(ticks + 1)), Verdict::Reused { start_ticks: ticks });
/// ```
pub fn check(table: &Table, pid: u32, uid: Option<u32>, start: Start) -> Verdict {
    let boot = match start {
        Start::By(_) => table.boot_time(),
        Start::Ticks(_) | Start::Any => None,
    };
    judge(Process::read(table, pid), uid, start, boot)
}

/// Can process `pid`, running as the owner of `file`, have written it by
/// the time it last changed, and by `header_time` (a time its writer
/// wrote into it after starting) when given? The owner and the last
/// change (`st_ctime`, which no user can set) come from `fstat` of the
/// descriptor: the file as the caller opened it, never its path again.
/// The pid is as this reader sees it: a pid the file gives in another
/// pid namespace is mapped first ([`host_pids`]).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use topdeck_procfs::table::Table;
/// use topdeck_procfs::writer::{can_have_written, Verdict};
///
/// // This process made the file, after it started.
/// let file = tempfile::tempfile().unwrap();
/// let table = Table::default();
/// let me = std::process::id();
/// assert_eq!(can_have_written(&table, me, &file, None), Verdict::Could);
/// // A header claiming its writer started a day ago is not this process's.
/// let day_ago = SystemTime::now() - Duration::from_secs(86_400);
/// assert!(matches!(
///     can_have_written(&table, me, &file, Some(day_ago)),
///     Verdict::Reused { .. }
/// ));
/// ```
pub fn can_have_written(
    table: &Table,
    pid: u32,
    file: &impl AsFd,
    header_time: Option<SystemTime>,
) -> Verdict {
    let st = match rustix::fs::fstat(file) {
        Ok(st) => st,
        Err(e) => return Verdict::Unknown(Unknown::FileTimes(io::Error::from(e).kind())),
    };
    let changed = unix_time(st.st_ctime, st.st_ctime_nsec);
    let by = header_time.map_or(changed, |h| h.min(changed));
    check(table, pid, Some(st.st_uid), Start::By(by))
}

/// `secs` and `nanos` since the epoch (before it when negative), as the
/// kernel gives file times (`nanos` is signed on some architectures).
fn unix_time(secs: i64, nanos: impl TryInto<u64>) -> SystemTime {
    let nanos = Duration::from_nanos(nanos.try_into().unwrap_or(0));
    let whole = match u64::try_from(secs) {
        Ok(after) => UNIX_EPOCH.checked_add(Duration::from_secs(after)),
        Err(_) => UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs())),
    };
    whole
        .and_then(|t| t.checked_add(nanos))
        .unwrap_or(UNIX_EPOCH)
}

/// Whether the writer `pid` still runs: for `Some(start_ticks)`, the same
/// process (a reused pid does not count); for `None` (a file that records
/// no start), any process with the pid, as `/proc/<pid>` exists. Pid 0 is
/// no process. The answer for a pid in `table` is as of its first
/// reading in that table.
///
/// ```
/// use topdeck_procfs::{table::Table, writer::runs};
///
/// let table = Table::default();
/// let me = std::process::id();
/// let ticks = topdeck_procfs::process::start_ticks(None).unwrap();
/// assert!(runs(&table, me, Some(ticks)) && runs(&table, me, None));
/// assert!(!runs(&table, me, Some(ticks + 1)), "another start: a reused pid");
/// assert!(!runs(&table, 0, None));
/// ```
pub fn runs(table: &Table, pid: u32, start_ticks: Option<u64>) -> bool {
    if pid == 0 {
        return false;
    }
    match start_ticks {
        Some(ticks) => table.start_ticks(pid) == Some(ticks),
        None => Path::new("/proc").join(pid.to_string()).exists(),
    }
}

/// The processes among `members` (this reader's pids, those of one view
/// or all of `table`'s) that are `nspid` in their own, innermost, pid
/// namespace: a writer in a container writes the pid it sees itself as,
/// and this is the pid it has here. Read from `table`, whose `status` of
/// each member is read once per look however many pids are mapped; more
/// than one when the members span pid namespaces. A member not in
/// `table` (started since its scan, or any, for `Table::default()`) is
/// read from `/proc` now.
///
/// ```
/// use topdeck_procfs::{table::Table, writer::host_pids};
///
/// let table = Table::scan();
/// let me = std::process::id();
/// // In the reader's own pid namespace a process is its own pid.
/// assert!(host_pids(&table, table.pids(), me).any(|p| p == me));
/// ```
pub fn host_pids<'a>(
    table: &'a Table,
    members: impl IntoIterator<Item = u32> + 'a,
    nspid: u32,
) -> impl Iterator<Item = u32> + 'a {
    members
        .into_iter()
        .filter(move |&pid| status_of(table, pid, |s| s.innermost_pid()).flatten() == Some(nspid))
}

/// The writer of the open `file` among `members` (one view's processes,
/// in order), a file that names it as `nspid` in its own pid namespace:
/// the first of them that is `nspid` there ([`host_pids`]) and can have
/// written the file ([`can_have_written`]); `None` when none can.
///
/// ```
/// use topdeck_procfs::{table::Table, writer::writer_among};
///
/// let file = tempfile::tempfile().unwrap();
/// let table = Table::scan();
/// let me = std::process::id();
/// assert_eq!(writer_among(&table, table.pids(), me, &file), Some(me));
/// assert_eq!(writer_among(&table, table.pids(), 0, &file), None);
/// ```
pub fn writer_among(
    table: &Table,
    members: impl IntoIterator<Item = u32>,
    nspid: u32,
    file: &impl AsFd,
) -> Option<u32> {
    host_pids(table, members, nspid).find(|&p| can_have_written(table, p, file, None).could())
}

/// `what` of the `status` of `pid`: from `table` when it is in it (read
/// once per table), else from `/proc` now.
fn status_of<T>(table: &Table, pid: u32, what: impl FnOnce(&process::Status) -> T) -> Option<T> {
    match table.view_of(pid) {
        Some(_) => table.status(pid).map(what),
        None => process::status(Some(pid)).as_ref().map(what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::time::Instant;

    /// A `sleep` child that has started, and its pid.
    fn child() -> Child {
        Command::new("sleep").arg("30").spawn().unwrap()
    }

    fn stop(mut child: Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits until the file's ctime (coarse, whole ticks of the kernel's
    /// clock) is past `START_SLACK` ago, so a process started now is
    /// clearly after it.
    fn age_past_slack(file: &std::fs::File) {
        let deadline = Instant::now() + START_SLACK + Duration::from_secs(2);
        let ctime = |f: &std::fs::File| {
            let st = rustix::fs::fstat(f).unwrap();
            unix_time(st.st_ctime, st.st_ctime_nsec)
        };
        while SystemTime::now() < ctime(file) + START_SLACK + Duration::from_millis(1100) {
            assert!(Instant::now() < deadline, "the clock does not move");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    #[test]
    fn a_child_started_before_the_file_can_have_written_it() {
        let c = child();
        let file = tempfile::tempfile().unwrap();
        let verdict = can_have_written(&Table::default(), c.id(), &file, None);
        stop(c);
        assert_eq!(verdict, Verdict::Could);
    }

    #[test]
    fn a_child_started_after_the_file_is_a_reused_pid() {
        let file = tempfile::tempfile().unwrap();
        age_past_slack(&file);
        let c = child();
        let verdict = can_have_written(&Table::default(), c.id(), &file, None);
        let ticks = process::start_ticks(Some(c.id()));
        stop(c);
        assert_eq!(
            Some(verdict),
            ticks.map(|start_ticks| Verdict::Reused { start_ticks })
        );
    }

    #[test]
    fn a_header_time_before_the_writer_started_is_a_reused_pid_too() {
        let c = child();
        let file = tempfile::tempfile().unwrap();
        let table = Table::default();
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let verdicts = (
            can_have_written(&table, c.id(), &file, Some(SystemTime::now())),
            can_have_written(&table, c.id(), &file, Some(hour_ago)),
        );
        stop(c);
        assert_eq!(verdicts.0, Verdict::Could);
        assert!(matches!(verdicts.1, Verdict::Reused { .. }), "{verdicts:?}");
    }

    #[test]
    fn a_file_owned_by_another_uid_is_not_this_processs() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let me = std::process::id();
        // SAFETY: geteuid has no preconditions.
        let my_uid = unsafe { libc::geteuid() };
        if my_uid != 0 {
            eprintln!("SKIPPED: needs root (to chown a file to another uid)");
            return;
        }
        std::os::unix::fs::chown(file.path(), Some(1000), None).unwrap();
        let verdict = can_have_written(&Table::default(), me, file.as_file(), None);
        assert_eq!(verdict, Verdict::OtherUser { euid: my_uid });
        assert_eq!(
            verdict.to_string(),
            "it runs as uid 0, not as the file's owner"
        );
    }

    #[test]
    fn a_pid_that_exited_is_gone() {
        let file = tempfile::tempfile().unwrap();
        let c = child();
        let (pid, ticks) = (c.id(), process::start_ticks(Some(c.id())));
        stop(c);
        let table = Table::default();
        assert_eq!(can_have_written(&table, pid, &file, None), Verdict::Gone);
        assert!(!runs(&table, pid, ticks));
        assert!(!runs(&table, pid, None));
        assert_eq!(check(&table, pid, None, Start::Any), Verdict::Gone);
    }

    #[test]
    fn a_reused_pid_does_not_run_when_the_start_is_known() {
        // The pid runs, but the file's writer started at other ticks: a
        // later process with its pid.
        let c = child();
        let table = Table::default();
        let pid = c.id();
        let ticks = process::start_ticks(Some(pid)).unwrap();
        let fake = ticks.saturating_sub(50);
        let facts = (
            runs(&table, pid, Some(ticks)),
            runs(&table, pid, Some(fake)),
            runs(&table, pid, None),
            check(&table, pid, None, Start::Ticks(fake)),
        );
        stop(c);
        assert_eq!(
            facts,
            (true, false, true, Verdict::Reused { start_ticks: ticks })
        );
    }

    #[test]
    fn the_slack_is_allowed_and_no_more() {
        let boot = 1_000_000;
        let hz = rustix::param::clock_ticks_per_second();
        let p = Some(Process {
            euid: 7,
            start_ticks: 10 * hz,
        });
        let started = UNIX_EPOCH + Duration::from_secs(1_000_010);
        let at = Start::By;
        assert_eq!(judge(p, Some(7), at(started), Some(boot)), Verdict::Could);
        assert_eq!(
            judge(p, Some(7), at(started - START_SLACK), Some(boot)),
            Verdict::Could
        );
        assert_eq!(
            judge(
                p,
                Some(7),
                at(started - START_SLACK - Duration::from_millis(10)),
                Some(boot)
            ),
            Verdict::Reused {
                start_ticks: 10 * hz
            }
        );
        assert_eq!(
            judge(p, Some(7), at(started), None),
            Verdict::Unknown(Unknown::BootTime)
        );
        assert_eq!(
            judge(p, Some(8), at(started), None),
            Verdict::OtherUser { euid: 7 },
            "the uid is judged first"
        );
    }

    #[test]
    fn host_pids_map_a_namespace_pid_through_nspid() {
        let c = child();
        let table = Table::scan();
        let pid = c.id();
        let mapped: Vec<u32> = host_pids(&table, table.pids(), pid).collect();
        let none: Vec<u32> = host_pids(&table, [], pid).collect();
        let direct: Vec<u32> = host_pids(&Table::default(), [1, pid], pid).collect();
        stop(c);
        // This test runs in one pid namespace: the child is its own pid.
        assert_eq!(mapped, vec![pid]);
        assert!(none.is_empty());
        assert_eq!(
            direct,
            vec![pid],
            "a pid outside the table is read directly"
        );
    }

    #[test]
    fn file_times_before_the_epoch_are_kept() {
        assert_eq!(
            unix_time(-2, 500_000_000),
            UNIX_EPOCH - Duration::from_millis(1500)
        );
        assert_eq!(unix_time(3, 0), UNIX_EPOCH + Duration::from_secs(3));
    }
}
