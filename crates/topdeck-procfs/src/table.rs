// SPDX-License-Identifier: Apache-2.0
//! One walk of `/proc` shared by every reader of one look: each process's
//! view of the file system is taken once (one `statx`), and what only
//! some readers need (its `status`, its `stat`, its pid namespace) is read
//! the first time one asks, then kept for the others. A host with
//! thousands of processes is walked once per look, not once per reader,
//! and a process nobody asks about costs its one `statx` only.
//!
//! A table is a snapshot: a process started after [`Table::scan`] is not
//! in it (the lazily read facts of a process that exits meanwhile are
//! `None`). Build one per look, not one per program.

use std::cell::OnceCell;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;

use crate::process::{self, Status};
use crate::view::{self, View, Views};

/// `PF_KTHREAD` in the `flags` field of `/proc/<pid>/stat`
/// (include/linux/sched.h): a kernel thread, which has no environment.
const PF_KTHREAD: u64 = 0x0020_0000;

/// What topdeck takes from a `/proc/<pid>/stat` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Clock ticks from boot to its start (field 22).
    pub start_ticks: u64,
    /// Whether it is a kernel thread (`PF_KTHREAD` in field 9).
    pub kernel_thread: bool,
    /// Where its environment lies in its memory (fields 48 and 49, Linux
    /// 3.5 and later; 0 when the reader may not see them). They change
    /// when it `exec`s, which its start time does not.
    pub env: (u64, u64),
}

/// Parses a `/proc/<pid>/stat` text; `None` without a start time.
///
/// ```
/// // Fields 23 to 47 are zeros here.
/// let stat = format!("7 (a) b) S 1 7 7 0 -1 2097216 0 0 0 0 0 0 0 0 20 0 1 0 99 {}4096 4200 0", "0 ".repeat(25));
/// let s = topdeck_procfs::table::parse_stat(&stat).unwrap();
/// assert_eq!((s.start_ticks, s.kernel_thread, s.env), (99, true, (4096, 4200)));
/// ```
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name: field k is the (k-3)th.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let number = |k: usize| fields.get(k - 3).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        start_ticks: number(22)?,
        kernel_thread: number(9).is_some_and(|f| f & PF_KTHREAD != 0),
        env: (number(48).unwrap_or(0), number(49).unwrap_or(0)),
    })
}

/// A process and what was read of it so far.
#[derive(Debug)]
struct Entry {
    pid: u32,
    view: View,
    status: OnceCell<Option<Status>>,
    stat: OnceCell<Option<Stat>>,
    pid_ns: OnceCell<Option<u64>>,
}

/// Every process of `/proc` at one instant, grouped by view, with its
/// other facts read on demand and kept.
///
/// ```
/// let table = topdeck_procfs::table::Table::scan();
/// let me = std::process::id();
/// let view = table.view_of(me).unwrap();
/// assert!(table.views().members[&view].contains(&me));
/// assert_eq!(table.status(me).unwrap().innermost_pid(), Some(me));
/// assert_eq!(table.start_ticks(me), topdeck_procfs::process::start_ticks(None));
/// ```
#[derive(Debug, Default)]
pub struct Table {
    /// Ascending by pid.
    entries: Vec<Entry>,
    views: Views,
    own: Option<View>,
    own_pid_ns: OnceCell<Option<u64>>,
    boot: OnceCell<Option<i64>>,
}

impl Table {
    /// Walks `/proc` once: one `statx` per process, as
    /// [`view::all`] does, and nothing else.
    pub fn scan() -> Self {
        let views = view::all();
        let mut entries: Vec<Entry> = views
            .members
            .iter()
            .flat_map(|(view, pids)| {
                pids.iter().map(|&pid| Entry {
                    pid,
                    view: *view,
                    status: OnceCell::new(),
                    stat: OnceCell::new(),
                    pid_ns: OnceCell::new(),
                })
            })
            .collect();
        entries.sort_unstable_by_key(|e| e.pid);
        Self {
            entries,
            views,
            own: view::of(None).ok(),
            own_pid_ns: OnceCell::new(),
            boot: OnceCell::new(),
        }
    }

    /// The processes by view, and how many the reader may not inspect.
    pub fn views(&self) -> &Views {
        &self.views
    }

    /// The reader's own view, if it could be read.
    pub fn own_view(&self) -> Option<View> {
        self.own
    }

    /// Every pid whose view is known, ascending.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().map(|e| e.pid)
    }

    fn entry(&self, pid: u32) -> Option<&Entry> {
        let i = self.entries.binary_search_by_key(&pid, |e| e.pid).ok()?;
        self.entries.get(i)
    }

    /// The view of `pid`; `None` when it is not in the table.
    pub fn view_of(&self, pid: u32) -> Option<View> {
        self.entry(pid).map(|e| e.view)
    }

    /// [`process::status`] of `pid`, read once per table; `None` for a
    /// pid not in the table (it started after the scan, or its view could
    /// not be read): the facts below read such a pid directly instead.
    pub fn status(&self, pid: u32) -> Option<&Status> {
        self.entry(pid)?
            .status
            .get_or_init(|| process::status(Some(pid)))
            .as_ref()
    }

    /// Its pid in its own (innermost) pid namespace, from [`Self::status`].
    pub fn innermost_pid(&self, pid: u32) -> Option<u32> {
        self.status(pid)?.innermost_pid()
    }

    /// The [`Stat`] of `pid`, read once per table.
    pub fn stat(&self, pid: u32) -> Option<Stat> {
        match self.entry(pid) {
            Some(e) => *e.stat.get_or_init(|| read_stat(pid)),
            None => read_stat(pid),
        }
    }

    /// [`process::start_ticks`] of `pid`, read once per table (for a pid
    /// in it).
    pub fn start_ticks(&self, pid: u32) -> Option<u64> {
        self.stat(pid).map(|s| s.start_ticks)
    }

    /// The inode of `pid`'s pid namespace (`/proc/<pid>/ns/pid`): two
    /// processes share the namespace if and only if these are equal.
    pub fn pid_ns(&self, pid: u32) -> Option<u64> {
        match self.entry(pid) {
            Some(e) => *e.pid_ns.get_or_init(|| pid_ns(Some(pid))),
            None => pid_ns(Some(pid)),
        }
    }

    /// The reader's own pid namespace (see [`Self::pid_ns`]).
    pub fn own_pid_ns(&self) -> Option<u64> {
        *self.own_pid_ns.get_or_init(|| pid_ns(None))
    }

    /// [`process::boot_time`], read once per table (`/proc/stat` has a
    /// line per CPU: a look that dates many processes reads it once).
    pub fn boot_time(&self) -> Option<i64> {
        *self.boot.get_or_init(process::boot_time)
    }
}

/// The inode of `/proc/<pid>/ns/pid` (`/proc/self` for `None`).
fn pid_ns(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/ns/pid"),
        None => "/proc/self/ns/pid".to_owned(),
    };
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// `/proc/<pid>/stat` in one `read` for the usual length (a few hundred
/// bytes, much less than the buffer), parsed.
fn read_stat(pid: u32) -> Option<Stat> {
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut buf = [0u8; 1024];
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        // A seq_file read short of the buffer returned everything there was.
        if len < buf.len() {
            break;
        }
        // A stat longer than the buffer: not a kernel's, refuse it.
        return None;
    }
    parse_stat(std::str::from_utf8(&buf[..len]).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_in_the_table_with_its_facts() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let table = Table::scan();
        let pid = child.id();
        let facts = (
            table.view_of(pid),
            table.start_ticks(pid),
            table.stat(pid).map(|s| s.kernel_thread),
            table.innermost_pid(pid),
            table.pid_ns(pid),
        );
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(facts.0, view::of(None).ok());
        assert!(facts.1.is_some());
        assert_eq!(facts.2, Some(false));
        assert_eq!(facts.3, Some(pid));
        assert_eq!(facts.4, table.own_pid_ns());
        // Read once, kept: the child is gone, the table still knows.
        assert_eq!(table.start_ticks(pid), facts.1);
    }

    #[test]
    fn stat_agrees_with_start_ticks_and_damaged_texts_are_none() {
        let me = std::process::id();
        assert_eq!(
            read_stat(me).map(|s| s.start_ticks),
            process::start_ticks(None)
        );
        assert_ne!(read_stat(me).unwrap().env, (0, 0));
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
        assert_eq!(read_stat(u32::MAX), None);
        let short = "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 77";
        assert_eq!(
            parse_stat(short),
            Some(Stat {
                start_ticks: 77,
                kernel_thread: false,
                env: (0, 0)
            })
        );
    }

    #[test]
    fn a_pid_outside_the_table_is_read_directly() {
        let table = Table::default();
        let me = std::process::id();
        assert_eq!(table.view_of(me), None);
        assert_eq!(table.start_ticks(me), process::start_ticks(None));
        assert_eq!(table.status(me), None);
    }
}
