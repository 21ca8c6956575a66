// SPDX-License-Identifier: Apache-2.0
//! Who holds a file's `flock`, from `/proc/locks` (proc(5)): a writer's
//! lock proves it is alive only if the writer holds it, not a reader who
//! could open the file and lock it too.

use std::cell::OnceCell;

use crate::process;

/// `/proc/locks`, read once for as many questions as a listing has: the
/// table grows with the locks on the host, so reading it per file would
/// make a listing quadratic. A table answers only for locks taken before it
/// was read: make one after the files asked about were opened (their
/// writers lock them before they are named); it is read at the first
/// question.
#[derive(Default)]
pub(crate) struct LockTable(OnceCell<Option<String>>);

impl LockTable {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether the writer holds a write `flock` on the file `(dev, ino)`: a
    /// holder running as `owner`, or the process `writer` (pid, start time)
    /// names, which may have changed its uid since it made the file. A holder
    /// whose pid this reader cannot see (another pid namespace: `/proc/locks`
    /// shows 0) counts as the writer, as does an unreadable table: wrongly
    /// calling a live file dead would let `gc` remove it.
    pub(crate) fn writer_holds_lock(
        &self,
        dev: u64,
        ino: u64,
        owner: u32,
        writer: Option<(u32, u64)>,
    ) -> bool {
        let table = self
            .0
            .get_or_init(|| std::fs::read_to_string("/proc/locks").ok());
        let Some(table) = table else {
            return true;
        };
        let id = (rustix::fs::major(dev), rustix::fs::minor(dev), ino);
        let held = write_lock_holders(table, id).any(|pid| match pid {
            Some(pid) => {
                process_euid(pid).is_none_or(|uid| uid == owner)
                    || writer.is_some_and(|(wpid, start)| {
                        wpid == pid && process::start_ticks(&pid.to_string()) == Some(start)
                    })
            }
            None => true,
        });
        held
    }
}

/// Pids (`None` when not visible here) holding a write `FLOCK` on `id`
/// (major, minor, inode); waiters (`->`) hold nothing and are skipped.
fn write_lock_holders(table: &str, id: (u32, u32, u64)) -> impl Iterator<Item = Option<u32>> + '_ {
    table.lines().filter_map(move |line| {
        let mut f = line.split_whitespace().skip(1);
        let (kind, _, access, pid, file) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        if kind != "FLOCK" || access != "WRITE" || parse_file(file)? != id {
            return None;
        }
        Some(pid.parse::<u32>().ok().filter(|&p| p > 0))
    })
}

/// `MAJ:MIN:INODE`, major and minor in hex (fs/locks.c `lock_get_status`).
fn parse_file(s: &str) -> Option<(u32, u32, u64)> {
    let mut p = s.split(':');
    let major = u32::from_str_radix(p.next()?, 16).ok()?;
    let minor = u32::from_str_radix(p.next()?, 16).ok()?;
    let ino = p.next()?.parse().ok()?;
    Some((major, minor, ino))
}

/// The effective uid of `pid` (second field of `Uid:` in its status).
fn process_euid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
1: FLOCK  ADVISORY  WRITE 4242 00:1a:77 0 EOF
1: -> FLOCK  ADVISORY  WRITE 4343 00:1a:77 0 EOF
2: FLOCK  ADVISORY  READ 4444 00:1a:78 0 EOF
3: POSIX  ADVISORY  WRITE 4545 00:1a:79 0 EOF
4: FLOCK  ADVISORY  WRITE 0 fd:01:80 0 EOF
";

    #[test]
    fn holders_are_read_from_the_table() {
        let holders = |id| write_lock_holders(TABLE, id).collect::<Vec<_>>();
        assert_eq!(
            holders((0, 0x1a, 77)),
            vec![Some(4242)],
            "waiters hold nothing"
        );
        assert!(
            holders((0, 0x1a, 78)).is_empty(),
            "a read lock is no writer"
        );
        assert!(
            holders((0, 0x1a, 79)).is_empty(),
            "POSIX locks are not the writer's"
        );
        assert_eq!(
            holders((0xfd, 1, 80)),
            vec![None],
            "pid 0: not visible here"
        );
    }

    #[test]
    fn this_process_holding_its_own_file_holds_it_and_no_lock_is_nobodys() {
        use std::os::unix::fs::MetadataExt;
        let f = tempfile::tempfile().unwrap();
        let m = f.metadata().unwrap();
        let holds = |uid| LockTable::new().writer_holds_lock(m.dev(), m.ino(), uid, None);
        assert!(!holds(m.uid()));
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        assert!(holds(m.uid()));
        assert!(
            !holds(m.uid() + 1),
            "a lock held by another uid proves nothing"
        );
        let before = LockTable(OnceCell::from(Some(String::new())));
        assert!(
            !before.writer_holds_lock(m.dev(), m.ino(), m.uid(), None),
            "a table read before the lock was taken does not show it"
        );
    }
}
