// SPDX-License-Identifier: Apache-2.0
//! Who holds a file's `flock`, from `/proc/locks` (proc(5)): a writer's
//! lock proves it is alive only if the writer holds it, not a reader who
//! could open the file and lock it too.

use std::cell::OnceCell;

use topdeck_procfs::locks::write_flocks;
use topdeck_procfs::table::Table;
use topdeck_procfs::writer::{check, runs, Start, Verdict};

/// `/proc/locks`, read once for as many questions as a listing has (twice
/// when a lock is not found, below): the table grows with the locks on the
/// host, so reading it per file would make a listing quadratic. A table
/// answers for locks taken before it was read: make one after the files
/// asked about were opened (their writers lock them before they are
/// named); it is read at the first question and not again after its
/// second read: make a new one for each round of questions.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
/// let mut reader = topdeck::RegistryReader::open(registry.path())?;
/// reader.detach();
/// // One read of /proc/locks for every reader asked this round.
/// let locks = topdeck::LockTable::new();
/// assert_eq!(reader.liveness_in(&locks), topdeck::Liveness::Alive);
/// # Ok::<(), topdeck::Error>(())
/// ```
///
/// `/proc/locks` is read page by page, not as one snapshot: a line can be
/// skipped while other processes take and drop locks. So a lock not found
/// in the first read is looked for in a second, taken at the first such
/// miss (one more read per round, only when some file looks dead): a file
/// is called dead only if neither read shows its writer's lock, as calling
/// a live file dead would let `gc` remove it.
#[derive(Debug, Default)]
pub struct LockTable(OnceCell<Option<String>>, OnceCell<Option<String>>);

impl LockTable {
    /// A table not read yet.
    pub fn new() -> Self {
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
        let procs = Table::default();
        [&self.0, &self.1].into_iter().any(|read| {
            match read.get_or_init(|| topdeck_procfs::locks::read().ok()) {
                Some(table) => holds(table, &procs, dev, ino, owner, writer),
                None => true,
            }
        })
    }
}

/// Whether `table` shows the writer's write `flock` on `(dev, ino)`; see
/// [`LockTable::writer_holds_lock`].
fn holds(
    table: &str,
    procs: &Table,
    dev: u64,
    ino: u64,
    owner: u32,
    writer: Option<(u32, u64)>,
) -> bool {
    write_flocks(table)
        .filter(|l| l.is_on(dev, ino))
        .any(|l| match l.pid {
            // Another user's process is the writer only if it is the very
            // process the header names; one gone since the table was read
            // cannot be asked, and counts.
            Some(pid) => match check(procs, pid, Some(owner), Start::Any) {
                Verdict::OtherUser { .. } => {
                    writer.is_some_and(|(wpid, start)| wpid == pid && runs(procs, pid, Some(start)))
                }
                _ => true,
            },
            None => true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let empty = || OnceCell::from(Some(String::new()));
        let before = LockTable(empty(), empty());
        assert!(
            !before.writer_holds_lock(m.dev(), m.ino(), m.uid(), None),
            "reads made before the lock was taken do not show it"
        );
        let skipped = LockTable(empty(), OnceCell::new());
        assert!(
            skipped.writer_holds_lock(m.dev(), m.ino(), m.uid(), None),
            "a lock one read missed is found in the second"
        );
    }
}
