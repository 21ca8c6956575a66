// SPDX-License-Identifier: Apache-2.0
//! Files of other users' directories that could not be read for a reason
//! of their own (garbage, truncated, a FIFO, another owner's file),
//! remembered from one look to the next until they change, so that a
//! directory of bad files costs a look a `stat` of each, not an open and
//! a read: topdeck's registry directories and `hsperfdata_<user>` alike.
//!
//! A file is known by its directory and name, and is the same file while
//! its inode, size and `ctime` are (no user can set a `ctime` back).

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::AtFlags;

use crate::budget::MAX_FILES_PER_DIR;

/// Most files one reader remembers as unreadable (about 200 bytes each,
/// with their paths): as many as sixteen directories' budgets.
pub const MAX_REMEMBERED: usize = 16 * MAX_FILES_PER_DIR;

/// What changes when a file does: its inode, size and `ctime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    ino: u64,
    size: i64,
    ctime: (i64, i64),
}

impl Stamp {
    /// The stamp of a `stat`.
    #[allow(clippy::useless_conversion)] // the field types differ between architectures
    pub fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            ino: u64::from(st.st_ino),
            size: i64::from(st.st_size),
            ctime: (
                i64::from(st.st_ctime),
                i64::try_from(st.st_ctime_nsec).unwrap_or(0),
            ),
        }
    }

    /// The stamp of a file's metadata (`fstat` of an open file).
    pub fn of_metadata(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            ino: m.ino(),
            size: i64::try_from(m.size()).unwrap_or(i64::MAX),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// The stamp of entry `name` of the open directory `dir`, a link
    /// not followed; `None` when it cannot be had (gone, say).
    ///
    /// ```
    /// use topdeck_procfs::unreadable::Stamp;
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("f"), b"1")?;
    /// let fd = std::fs::File::open(dir.path())?;
    /// let was = Stamp::at(&fd, "f").unwrap();
    /// assert_eq!(Stamp::at(&fd, "f"), Some(was));
    /// std::fs::write(dir.path().join("f"), b"12")?;
    /// assert_ne!(Stamp::at(&fd, "f"), Some(was));
    /// assert_eq!(Stamp::at(&fd, "gone"), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn at(dir: impl AsFd, name: &str) -> Option<Self> {
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| Self::of(&st))
    }

    /// Whether the file last changed at least `age` ago: a writer still
    /// filling its file changes it within moments of making it.
    pub fn unchanged_for(&self, age: Duration) -> bool {
        let (secs, nanos) = self.ctime;
        let changed = u64::try_from(secs)
            .ok()
            .map(|s| Duration::new(s, u32::try_from(nanos).unwrap_or(0)));
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok();
        match (now, changed) {
            (Some(now), Some(changed)) => now.saturating_sub(changed) >= age,
            _ => false,
        }
    }
}

/// Files by directory, then name, with the stamp they had when they could
/// not be read and what was wrong.
type Files<T> = HashMap<PathBuf, HashMap<String, (Stamp, T)>>;

/// Unreadable files, with what was wrong with each (`T`), remembered from
/// one look to the next: a look begins with [`new_look`](Self::new_look),
/// finds each remembered file again with [`still`](Self::still) (a `stat`,
/// no open) and adds the new ones with [`remember`](Self::remember); what
/// a look did not find again unchanged is forgotten at the next.
///
/// ```
/// use topdeck_procfs::unreadable::{Stamp, Unreadable};
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("bad"), b"garbage")?;
/// let fd = std::fs::File::open(dir.path())?;
/// let mut bad = Unreadable::default();
/// bad.new_look();
/// assert!(bad.remember(dir.path(), "bad", Stamp::at(&fd, "bad").unwrap(), "garbage"));
/// // The next look knows it without opening it, while it does not change.
/// bad.new_look();
/// assert_eq!(bad.still(dir.path(), "bad", Stamp::at(&fd, "bad")), Some(&"garbage"));
/// std::fs::write(dir.path().join("bad"), b"fixed now")?;
/// bad.new_look();
/// assert_eq!(bad.still(dir.path(), "bad", Stamp::at(&fd, "bad")), None);
/// assert_eq!(bad.len(), 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Unreadable<T> {
    /// What the last look remembered, not yet found again by this one.
    last: Files<T>,
    /// What this look found again or added.
    this: Files<T>,
    /// Files in both.
    len: usize,
}

impl<T> Default for Unreadable<T> {
    fn default() -> Self {
        Self {
            last: HashMap::new(),
            this: HashMap::new(),
            len: 0,
        }
    }
}

impl<T> Unreadable<T> {
    /// Begins a look: what the last one did not find again is forgotten,
    /// and what it kept may be found again by this one.
    pub fn new_look(&mut self) {
        self.last = std::mem::take(&mut self.this);
        self.len = self.last.values().map(HashMap::len).sum();
    }

    /// What was wrong with `name` of `dir` when it could not be read, if
    /// it is remembered and `now` (its stamp at this look) is the stamp it
    /// had then: kept for the next look. A changed or gone file is
    /// forgotten, to be opened again.
    pub fn still(&mut self, dir: &Path, name: &str, now: Option<Stamp>) -> Option<&T> {
        let (stamp, what) = self.last.get_mut(dir)?.remove(name)?;
        if now != Some(stamp) {
            self.len -= 1;
            return None;
        }
        Some(&self.keep(dir, name, stamp, what).1)
    }

    /// Remembers that `name` of `dir`, of stamp `stamp`, could not be read
    /// for `what`; `false` (and nothing remembered) once
    /// [`MAX_REMEMBERED`] files are.
    pub fn remember(&mut self, dir: &Path, name: &str, stamp: Stamp, what: T) -> bool {
        let was = self
            .last
            .get_mut(dir)
            .and_then(|m| m.remove(name))
            .is_some()
            || self.this.get(dir).is_some_and(|m| m.contains_key(name));
        if !was && self.len >= MAX_REMEMBERED {
            return false;
        }
        if !was {
            self.len += 1;
        }
        self.keep(dir, name, stamp, what);
        true
    }

    /// Files remembered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no file is remembered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn keep(&mut self, dir: &Path, name: &str, stamp: Stamp, what: T) -> &(Stamp, T) {
        if !self.this.contains_key(dir) {
            self.this.insert(dir.to_owned(), HashMap::new());
        }
        let files = self.this.get_mut(dir).expect("inserted above");
        files.insert(name.to_owned(), (stamp, what));
        &files[name]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_forgets_what_it_did_not_find_again() {
        let dir = tempfile::tempdir().unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let mut bad = Unreadable::default();
        bad.new_look();
        for name in ["a", "b"] {
            std::fs::write(dir.path().join(name), name).unwrap();
            assert!(bad.remember(dir.path(), name, Stamp::at(&fd, name).unwrap(), name));
        }
        assert_eq!(bad.len(), 2);
        bad.new_look();
        assert_eq!(bad.still(dir.path(), "a", Stamp::at(&fd, "a")), Some(&"a"));
        // "b" was not looked for: gone at the next look.
        bad.new_look();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad.still(dir.path(), "b", Stamp::at(&fd, "b")), None);
        assert_eq!(bad.still(dir.path(), "a", Stamp::at(&fd, "a")), Some(&"a"));
    }

    #[test]
    fn a_file_replaced_by_another_of_the_same_size_is_not_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let mut bad = Unreadable::default();
        bad.new_look();
        bad.remember(dir.path(), "f", Stamp::at(&fd, "f").unwrap(), ());
        // Another file renamed over it: another inode.
        std::fs::write(dir.path().join("g"), b"y").unwrap();
        std::fs::rename(dir.path().join("g"), dir.path().join("f")).unwrap();
        bad.new_look();
        assert_eq!(bad.still(dir.path(), "f", Stamp::at(&fd, "f")), None);
    }

    #[test]
    fn at_most_max_remembered_files_are_remembered() {
        let dir = Path::new("/nowhere");
        let stamp = Stamp {
            ino: 1,
            size: 0,
            ctime: (0, 0),
        };
        let mut bad = Unreadable::default();
        bad.new_look();
        let kept = (0..MAX_REMEMBERED + 10)
            .filter(|i| bad.remember(dir, &i.to_string(), stamp, ()))
            .count();
        assert_eq!((kept, bad.len()), (MAX_REMEMBERED, MAX_REMEMBERED));
        // Said again of a file it holds, it is still remembered.
        assert!(bad.remember(dir, "0", stamp, ()));
        assert_eq!(bad.len(), MAX_REMEMBERED);
    }
}
