// SPDX-License-Identifier: Apache-2.0
//! An observer's registries from one listing to the next: one reader kept
//! per registry file, so descriptors are decoded once per file, not once
//! per look.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::namespace::{Listing, Namespace, RegistryEntry};
use super::registry_reader::RegistryReader;
use super::since::Changes;
use super::snapshot::Snapshot;
use crate::error::Result;

/// A [`Namespace`] and a reader for each of its registries, kept from one
/// [`refresh`](Self::refresh) to the next. A reader is opened when a
/// registry is first [`open`](Self::open)ed, and replaced when the file at
/// its path is another registry (another inode or creation time); it is
/// [detached](RegistryReader::detach), so however many registries there
/// are, a tracker holds no descriptor for each. Registries no longer
/// listed are dropped, mappings and all, at the next refresh; so are
/// those a listing left out of a directory over its budget
/// ([`MAX_FILES_PER_DIR`](crate::MAX_FILES_PER_DIR)), reopened when listed
/// again.
///
/// Each registry carries a `T` of the caller's (default `()`): what it
/// derives from that registry and keeps while the file stays the same.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use topdeck::{Change, Namespace, Registry, Tracker};
/// let registry = Registry::builder().dir(dir.path()).build()?;
/// let jobs = registry.counter("jobs_total", &[], "", "")?;
/// let mut tracker: Tracker = Tracker::new(Namespace::at(dir.path()));
///
/// jobs.add(5);
/// let entry = tracker.refresh().entries.remove(0);
/// // Since start on the first look,
/// let first = tracker.open(&entry)?.advance()?.iter().next().unwrap().change();
/// assert_eq!(first, Change::Counter(5));
/// jobs.add(2);
/// let entry = tracker.refresh().entries.remove(0);
/// // then since the last look, through the same reader.
/// let second = tracker.open(&entry)?.advance()?.iter().next().unwrap().change();
/// assert_eq!(second, Change::Counter(2));
/// assert_eq!(tracker.len(), 1);
///
/// drop(registry); // removes its file
/// assert!(tracker.refresh().entries.is_empty());
/// assert_eq!(tracker.len(), 0);
/// # Ok::<(), topdeck::Error>(())
/// ```
#[derive(Debug)]
pub struct Tracker<T = ()> {
    namespace: Namespace,
    tracked: HashMap<PathBuf, Tracked<T>>,
}

/// One registry of a [`Tracker`]: its reader, the snapshots
/// [`advance`](Self::advance) keeps, and the caller's `state`.
#[derive(Debug)]
pub struct Tracked<T = ()> {
    reader: RegistryReader,
    /// The file's inode and creation time ([`RegistryEntry::file_id`]).
    file: (u64, u64),
    kept: Snapshots,
    /// The caller's, kept while the file stays the same; a new file at the
    /// path starts from `T::default()`.
    pub state: T,
}

impl<T> Tracker<T> {
    /// A tracker of `namespace`; nothing is listed or opened until asked.
    pub fn new(namespace: Namespace) -> Self {
        Self {
            namespace,
            tracked: HashMap::new(),
        }
    }

    /// The namespace tracked.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// Lists the namespace, within its budgets ([`Namespace::list`]), and
    /// drops the registries that are no longer listed or whose path now
    /// holds another file. Listed registries are not opened: that waits
    /// for [`open`](Self::open), so a caller who skips some pays nothing
    /// for them.
    pub fn refresh(&mut self) -> Listing {
        self.refresh_with(|_, _| {})
    }

    /// [`refresh`](Self::refresh), handing each registry dropped to `gone`
    /// (a view that carries a rotated file's history over to its successor
    /// takes it from there).
    pub fn refresh_with(&mut self, mut gone: impl FnMut(PathBuf, Tracked<T>)) -> Listing {
        let listing = self.namespace.list();
        if !self.tracked.is_empty() {
            let listed: HashSet<(&Path, (u64, u64))> = listing
                .entries
                .iter()
                .map(|e| (e.path.as_path(), e.file_id()))
                .collect();
            let stale: Vec<PathBuf> = self
                .tracked
                .iter()
                .filter(|(p, t)| !listed.contains(&(p.as_path(), t.file)))
                .map(|(p, _)| p.clone())
                .collect();
            for p in stale {
                if let Some(t) = self.tracked.remove(&p) {
                    gone(p, t);
                }
            }
        }
        listing
    }

    /// The registry at `path`, if it is tracked.
    pub fn get(&self, path: &Path) -> Option<&Tracked<T>> {
        self.tracked.get(path)
    }

    /// The registry at `path`, if it is tracked.
    pub fn get_mut(&mut self, path: &Path) -> Option<&mut Tracked<T>> {
        self.tracked.get_mut(path)
    }

    /// Stops tracking the registry at `path` (a dead writer's, or one that
    /// failed to read: the next [`open`](Self::open) starts afresh).
    pub fn forget(&mut self, path: &Path) -> Option<Tracked<T>> {
        self.tracked.remove(path)
    }

    /// Registries tracked (opened and not since dropped).
    pub fn len(&self) -> usize {
        self.tracked.len()
    }

    /// Whether no registry is tracked.
    pub fn is_empty(&self) -> bool {
        self.tracked.is_empty()
    }

    /// The registries tracked, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Path, &Tracked<T>)> {
        self.tracked.iter().map(|(p, t)| (p.as_path(), t))
    }
}

impl<T: Default> Tracker<T> {
    /// The tracked registry of `entry` (from this tracker's last listing):
    /// its kept reader, or a reader opened now if it has none or the file
    /// at its path is another registry.
    pub fn open(&mut self, entry: &RegistryEntry) -> Result<&mut Tracked<T>> {
        // Looked up by reference first: the path is copied only for a
        // registry seen for the first time.
        let kept = self
            .tracked
            .get(&entry.path)
            .is_some_and(|t| t.file == entry.file_id());
        if !kept {
            let fresh = Tracked::open(entry)?;
            self.tracked.insert(entry.path.clone(), fresh);
        }
        Ok(self
            .tracked
            .get_mut(&entry.path)
            .expect("kept or inserted above"))
    }
}

impl<T: Default> Tracked<T> {
    fn open(entry: &RegistryEntry) -> Result<Self> {
        let mut reader = entry.open()?;
        reader.detach();
        Ok(Self {
            reader,
            file: entry.file_id(),
            kept: Snapshots::default(),
            state: T::default(),
        })
    }
}

impl<T> Tracked<T> {
    /// The reader, opened once for this file.
    pub fn reader(&self) -> &RegistryReader {
        &self.reader
    }

    /// The reader, to snapshot it or change its limits.
    pub fn reader_mut(&mut self) -> &mut RegistryReader {
        &mut self.reader
    }

    /// A snapshot, not kept (see [`advance`](Self::advance)).
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        self.reader.snapshot()
    }

    /// Takes a snapshot, keeps it as the latest (the one it replaces
    /// becomes the previous), and returns what changed since the previous:
    /// since start the first time. On an error, nothing kept changes.
    pub fn advance(&mut self) -> Result<Changes<'_>> {
        let snap = self.reader.snapshot()?;
        Ok(self.kept.push(snap))
    }

    /// The snapshots [`advance`](Self::advance) kept.
    pub fn kept(&self) -> &Snapshots {
        &self.kept
    }

    /// The snapshots [`advance`](Self::advance) kept, to hand them over
    /// (see [`Snapshots::take`]).
    pub fn kept_mut(&mut self) -> &mut Snapshots {
        &mut self.kept
    }
}

/// The latest two snapshots of one source, for what changed between them:
/// what every observer that follows a source over time keeps.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
/// let jobs = registry.counter("jobs_total", &[], "", "")?;
/// let mut reader = topdeck::RegistryReader::open(registry.path())?;
/// let mut kept = topdeck::Snapshots::default();
/// jobs.add(4);
/// kept.push(reader.snapshot()?);
/// jobs.add(3);
/// let changes = kept.push(reader.snapshot()?);
/// assert_eq!(changes.iter().next().unwrap().change(), topdeck::Change::Counter(3));
/// # Ok::<(), topdeck::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Snapshots {
    latest: Option<Snapshot>,
    previous: Option<Snapshot>,
}

impl Snapshots {
    /// Keeps `snap` as the latest (the one it replaces becomes the
    /// previous) and returns what changed since the previous: since start
    /// the first time.
    pub fn push(&mut self, snap: Snapshot) -> Changes<'_> {
        self.previous = self.latest.replace(snap);
        self.changes().expect("a snapshot was just kept")
    }

    /// What changed between the previous and the latest kept snapshots
    /// (since start when there is only one); `None` before the first
    /// [`push`](Self::push).
    pub fn changes(&self) -> Option<Changes<'_>> {
        let latest = self.latest.as_ref()?;
        Some(match &self.previous {
            Some(p) => latest.since(p),
            None => latest.since_start(),
        })
    }

    /// The snapshot pushed last.
    pub fn latest(&self) -> Option<&Snapshot> {
        self.latest.as_ref()
    }

    /// The snapshot before that.
    pub fn previous(&self) -> Option<&Snapshot> {
        self.previous.as_ref()
    }

    /// Hands over the kept snapshots, as a source's successor takes them
    /// over (a writer that rotated to a new file with its values).
    pub fn take(&mut self) -> (Option<Snapshot>, Option<Snapshot>) {
        (self.previous.take(), self.latest.take())
    }

    /// Keeps `latest` as the latest snapshot, as if [`push`](Self::push)ed:
    /// the next one's changes are since it (another file's, paired by name).
    pub fn set_latest(&mut self, latest: Option<Snapshot>) {
        self.previous = None;
        self.latest = latest;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Change, Liveness, Registry};

    /// Descriptors of this process open on files of `dir`.
    fn fds_in(dir: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.parent() == Some(dir))
            .count()
    }

    #[test]
    fn readers_are_kept_detached_and_dropped_with_their_files() {
        let tmp = tempfile::tempdir().unwrap();
        let mut regs: Vec<Registry> = (0..3)
            .map(|_| Registry::builder().dir(tmp.path()).build().unwrap())
            .collect();
        let writers = fds_in(tmp.path());
        let mut tracker: Tracker<u32> = Tracker::new(Namespace::at(tmp.path()));
        for _ in 0..2 {
            for e in tracker.refresh().entries {
                tracker.open(&e).unwrap().state += 1;
            }
        }
        assert_eq!(tracker.len(), 3);
        assert_eq!(fds_in(tmp.path()), writers, "no descriptor per registry");
        assert!(
            tracker.iter().all(|(_, t)| t.state == 2),
            "kept, not reopened"
        );
        // A writer that ends removes its file.
        let gone_path = regs[0].path().to_owned();
        drop(regs.remove(0));
        let mut gone = Vec::new();
        let listing = tracker.refresh_with(|p, _| gone.push(p));
        assert_eq!(gone, [gone_path]);
        assert_eq!(tracker.len(), 2);
        assert!(listing
            .entries
            .iter()
            .all(|e| e.liveness == Liveness::Alive));
    }

    #[test]
    fn another_registry_at_the_same_path_gets_a_new_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let ns = tmp.path().join("ns");
        std::fs::create_dir(&ns).unwrap();
        let mut tracker: Tracker<u32> = Tracker::new(Namespace::at(&ns));
        let first = Registry::builder().dir(tmp.path()).build().unwrap();
        first.counter("a_total", &[], "", "").unwrap().add(1);
        let second = Registry::builder().dir(tmp.path()).build().unwrap();
        second.counter("b_total", &[], "", "").unwrap().add(2);
        let at = ns.join("1-1-1.topdeck");
        let read = |tracker: &mut Tracker<u32>| {
            let entries = tracker.refresh().entries;
            let t = tracker.open(&entries[0]).unwrap();
            t.state += 1;
            let snap = t.snapshot().unwrap();
            let (m, _) = snap.iter().next().unwrap();
            (m.name.clone(), t.state)
        };
        std::fs::copy(first.path(), &at).unwrap();
        assert_eq!(read(&mut tracker), ("a_total".into(), 1));
        assert_eq!(read(&mut tracker), ("a_total".into(), 2));
        // Replaced under the same name: another inode, another registry.
        let tmp_copy = ns.join("next");
        std::fs::copy(second.path(), &tmp_copy).unwrap();
        std::fs::rename(&tmp_copy, &at).unwrap();
        assert_eq!(read(&mut tracker), ("b_total".into(), 1));
    }

    #[test]
    fn advance_keeps_the_previous_snapshot_for_since() {
        let tmp = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(tmp.path()).build().unwrap();
        let c = r.counter("a_total", &[], "", "").unwrap();
        let mut tracker: Tracker = Tracker::new(Namespace::at(tmp.path()));
        let entry = tracker.refresh().entries.remove(0);
        let t = tracker.open(&entry).unwrap();
        assert!(t.kept().changes().is_none());
        c.add(4);
        let first: Vec<Change> = t.advance().unwrap().iter().map(|s| s.change()).collect();
        assert_eq!(first, [Change::Counter(4)]);
        c.add(3);
        let second: Vec<Change> = t.advance().unwrap().iter().map(|s| s.change()).collect();
        assert_eq!(second, [Change::Counter(3)]);
        assert_eq!(t.kept().previous().unwrap().len(), 1);
        // A successor file takes over the kept snapshot: its counter is
        // paired by name.
        let (_, latest) = t.kept_mut().take();
        let next = Registry::builder().dir(tmp.path()).build().unwrap();
        next.counter("a_total", &[], "", "").unwrap().add(10);
        let entries = tracker.refresh().entries;
        let entry = entries.iter().find(|e| e.path == next.path()).unwrap();
        let t = tracker.open(entry).unwrap();
        t.kept_mut().set_latest(latest);
        let after: Vec<Change> = t.advance().unwrap().iter().map(|s| s.change()).collect();
        assert_eq!(after, [Change::Counter(3)]);
    }
}
