// SPDX-License-Identifier: Apache-2.0
//! Every source on the host, followed from one look to the next: one walk
//! of `/proc` per look lists topdeck's registries and finds other
//! runtimes' portholes; each source keeps what reading it again needs (a
//! registry's reader, a porthole's series order) and its last two
//! snapshots, so every view asks "what changed" the same way of all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use topdeck::{Changes, Liveness, Namespace, RegistryReader, Snapshot, Snapshots};
use topdeck_procfs::table::Table;

use crate::assembly::Assembly;
use crate::error::Error;
use crate::portholes::{self, Portholes, Series};
use crate::source::{Kind, Source};

/// What one [`Tracker::look`] found.
#[derive(Debug, Default)]
pub struct Look {
    /// Every source, registries first (by pid, then path), then other
    /// runtimes' (by kind, then path).
    pub sources: Vec<Source>,
    /// Sources, directories or files that could not be read, each saying
    /// which and why; the others are still listed.
    pub errors: Vec<Error>,
    /// Other users' registry directories this reader may not open.
    pub private: Vec<PathBuf>,
    /// Registry directories that could not be read at all; each also has
    /// its error in `errors`.
    pub unusable: Vec<PathBuf>,
}

/// topdeck's registries in a [`Namespace`] and, when given, other
/// runtimes' [`Portholes`], each source followed from one
/// [`look`](Self::look) to the next with a `T` of the caller's.
///
/// A registry is opened at its first [`open`](Self::open) and its reader
/// kept without a descriptor; a porthole is read by the look that finds
/// it (discovery and reading are one for them). Sources no longer found,
/// or whose path now holds another file, are dropped at the next look.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use topdeck::Change;
/// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
/// let jobs = registry.counter("jobs_total", &[], "", "")?;
/// let mut tracker = topdeck_sources::Tracker::<()>::new(topdeck::Namespace::at(dir.path()), None);
///
/// jobs.add(5);
/// let source = tracker.look().sources.remove(0);
/// let first = tracker.open(&source)?.advance()?.iter().next().unwrap().change();
/// assert_eq!(first, Change::Counter(5));
/// jobs.add(2);
/// let source = tracker.look().sources.remove(0);
/// let second = tracker.open(&source)?.advance()?.iter().next().unwrap().change();
/// assert_eq!(second, Change::Counter(2));
/// # Ok::<(), topdeck_sources::Error>(())
/// ```
#[derive(Debug)]
pub struct Tracker<T = ()> {
    namespace: Namespace,
    portholes: Option<Portholes>,
    /// By path: a registry's file and a porthole's file or directory never
    /// share one.
    tracked: HashMap<PathBuf, Tracked<T>>,
}

/// One source of a [`Tracker`] (or one followed alone, see
/// [`Tracked::open`]): how to read it, the snapshots
/// [`advance`](Self::advance) keeps, and the caller's `state`.
#[derive(Debug)]
pub struct Tracked<T = ()> {
    reader: Reader,
    kept: Snapshots,
    /// The caller's, kept while the source stays the same; a new file at
    /// its path starts from `T::default()`.
    pub state: T,
}

/// How a source is read again: the only place its kind matters.
#[derive(Debug)]
enum Reader {
    Registry {
        reader: Box<RegistryReader>,
        /// The file's inode and creation time: another at the same path
        /// is another registry.
        file: (u64, u64),
    },
    Porthole {
        source: Box<Source>,
        /// Series the last look read, not yet taken by a snapshot.
        fresh: Option<Series>,
        assembly: Assembly,
    },
}

impl<T: Default> Tracker<T> {
    /// A tracker of `namespace`'s registries and `portholes`; nothing is
    /// read until [`look`](Self::look).
    pub fn new(namespace: Namespace, portholes: Option<Portholes>) -> Self {
        Self {
            namespace,
            portholes,
            tracked: HashMap::new(),
        }
    }

    /// Lists every source, walking `/proc` once for registries and
    /// portholes alike; sources no longer found, or whose path holds
    /// another file, are dropped.
    pub fn look(&mut self) -> Look {
        self.look_with(|_, _| {})
    }

    /// [`look`](Self::look), handing each source dropped to `gone` (a view
    /// that carries a rotated file's history over to its successor takes it
    /// from there).
    pub fn look_with(&mut self, mut gone: impl FnMut(PathBuf, Tracked<T>)) -> Look {
        // One walk of /proc for all, when anything looks beyond this
        // reader's own directories; none otherwise.
        let table = match self.portholes.is_some() || self.namespace.other_views() {
            true => Table::scan(),
            false => Table::default(),
        };
        let listing = self.namespace.list_with(&table);
        let mut look = Look {
            sources: Vec::with_capacity(listing.entries.len()),
            errors: listing.errors.iter().map(Error::from).collect(),
            private: listing.private,
            unusable: listing.unusable,
        };
        look.sources
            .extend(listing.entries.into_iter().map(Source::of_registry));
        if let Some(portholes) = &mut self.portholes {
            let found = portholes.look_with(&table);
            look.errors.extend(found.errors);
            for (source, series) in found.readings {
                match self.tracked.get_mut(&source.path) {
                    // The same porthole: its series order and state kept.
                    Some(t) if t.is(&source) => {
                        if let Reader::Porthole {
                            source: kept,
                            fresh,
                            ..
                        } = &mut t.reader
                        {
                            **kept = source.clone();
                            *fresh = Some(series);
                        }
                    }
                    _ => {
                        let t = Tracked::porthole(source.clone(), series);
                        self.tracked.insert(source.path.clone(), t);
                    }
                }
                look.sources.push(source);
            }
        }
        if !self.tracked.is_empty() {
            let listed: HashMap<&Path, &Source> =
                look.sources.iter().map(|s| (s.path.as_path(), s)).collect();
            let stale: Vec<PathBuf> = self
                .tracked
                .iter()
                .filter(|(p, t)| listed.get(p.as_path()).is_none_or(|s| !t.is(s)))
                .map(|(p, _)| p.clone())
                .collect();
            for p in stale {
                if let Some(t) = self.tracked.remove(&p) {
                    gone(p, t);
                }
            }
        }
        look
    }

    /// The tracked `source` (from this tracker's last look): its kept
    /// reader, or one opened now if it has none or the file at its path is
    /// another.
    pub fn open(&mut self, source: &Source) -> Result<&mut Tracked<T>, Error> {
        let kept = self.tracked.get(&source.path).is_some_and(|t| t.is(source));
        if !kept {
            let mut fresh = Tracked::open(source)?;
            if let Reader::Registry { reader, .. } = &mut fresh.reader {
                // However many registries there are, no descriptor each.
                reader.detach();
            }
            self.tracked.insert(source.path.clone(), fresh);
        }
        Ok(self
            .tracked
            .get_mut(&source.path)
            .expect("kept or inserted above"))
    }
}

impl<T> Tracker<T> {
    /// The registries' namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The tracked source at `path`, if any.
    pub fn get(&self, path: &Path) -> Option<&Tracked<T>> {
        self.tracked.get(path)
    }

    /// The tracked source at `path`, if any.
    pub fn get_mut(&mut self, path: &Path) -> Option<&mut Tracked<T>> {
        self.tracked.get_mut(path)
    }

    /// Stops tracking the source at `path` (a dead writer's, or one that
    /// failed to read: the next [`open`](Self::open) starts afresh).
    pub fn forget(&mut self, path: &Path) -> Option<Tracked<T>> {
        self.tracked.remove(path)
    }

    /// Sources tracked.
    pub fn len(&self) -> usize {
        self.tracked.len()
    }

    /// Whether no source is tracked.
    pub fn is_empty(&self) -> bool {
        self.tracked.is_empty()
    }
}

impl<T: Default> Tracked<T> {
    /// `source` followed on its own (a view of one source, such as `show`
    /// or `watch`): a registry's reader opened now, a porthole read now.
    pub fn open(source: &Source) -> Result<Self, Error> {
        match source.registry_entry() {
            Some(entry) => {
                let reader = entry.open()?;
                Ok(Self::registry(reader, entry.file_id()))
            }
            None => {
                let (source, series) = portholes::reread(source)?;
                Ok(Self::porthole(source, series))
            }
        }
    }

    /// A registry opened by its path, followed on its own, and the source
    /// its header names.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
    /// let reader = topdeck::RegistryReader::open(registry.path())?;
    /// let (source, _tracked) = topdeck_sources::Tracked::<()>::of_reader(reader);
    /// assert_eq!(source.pid, Some(std::process::id()));
    /// # Ok::<(), topdeck::Error>(())
    /// ```
    pub fn of_reader(reader: RegistryReader) -> (Source, Self) {
        let h = reader.header();
        let source = Source {
            kind: Kind::Topdeck,
            path: reader.path().to_path_buf(),
            pid: (h.pid != 0).then_some(h.pid),
            start_ticks: Some(h.start_ticks),
            uid: Some(reader.owner()),
            process: h.process_name.clone(),
            registry: Some(h.registry_name.clone()),
            container: None,
            liveness: reader.liveness(),
            metrics: h.desc_count as usize,
            texts: Vec::new(),
            created_unix_ns: Some(h.created_unix_ns),
            entry: None,
        };
        (source, Self::registry(reader, (0, 0)))
    }

    fn registry(reader: RegistryReader, file: (u64, u64)) -> Self {
        Self {
            reader: Reader::Registry {
                reader: Box::new(reader),
                file,
            },
            kept: Snapshots::default(),
            state: T::default(),
        }
    }

    /// A porthole as a look (or a read of it alone) found it, with the
    /// series that read gave, not yet taken by a snapshot.
    fn porthole(source: Source, series: Series) -> Self {
        Self {
            reader: Reader::Porthole {
                source: Box::new(source),
                fresh: Some(series),
                assembly: Assembly::default(),
            },
            kept: Snapshots::default(),
            state: T::default(),
        }
    }
}

impl<T> Tracked<T> {
    /// Whether this follows `source` as a look found it: the same file
    /// for a registry, the same kind for a porthole.
    fn is(&self, source: &Source) -> bool {
        match &self.reader {
            Reader::Registry { file, .. } => {
                source.registry_entry().map(|e| e.file_id()) == Some(*file)
            }
            Reader::Porthole { source: kept, .. } => kept.kind == source.kind,
        }
    }

    /// A snapshot, not kept (see [`advance`](Self::advance)): a registry
    /// read now; a porthole as the last look read it, or read again now
    /// when that was taken already.
    pub fn snapshot(&mut self) -> Result<Snapshot, Error> {
        match &mut self.reader {
            Reader::Registry { reader, .. } => Ok(reader.snapshot()?),
            Reader::Porthole {
                source,
                fresh,
                assembly,
            } => {
                let series = match fresh.take() {
                    Some(series) => series,
                    None => {
                        let (again, series) = portholes::reread(source)?;
                        **source = again;
                        series
                    }
                };
                Ok(assembly.snapshot(series))
            }
        }
    }

    /// Takes a snapshot, keeps it as the latest (the one it replaces
    /// becomes the previous), and returns what changed since the previous:
    /// since start the first time. On an error, nothing kept changes.
    pub fn advance(&mut self) -> Result<Changes<'_>, Error> {
        let snap = self.snapshot()?;
        Ok(self.kept.push(snap))
    }

    /// Whether its writer still runs: a registry's asked now, a porthole's
    /// as of its last read.
    pub fn liveness(&self) -> Liveness {
        self.liveness_in(&topdeck::LockTable::new())
    }

    /// [`liveness`](Self::liveness), a registry's `/proc/locks` question
    /// answered from `locks`: one read of it for every source asked in a
    /// round, however many registries there are.
    pub fn liveness_in(&self, locks: &topdeck::LockTable) -> Liveness {
        match &self.reader {
            Reader::Registry { reader, .. } => reader.liveness_in(locks),
            Reader::Porthole { source, .. } => source.liveness,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::portholes::Config;
    use topdeck::{Change, Registry};

    /// Descriptors of this process open on files of `dir`.
    fn fds_in(dir: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.parent() == Some(dir))
            .count()
    }

    fn changes(t: &mut Tracked<u32>) -> Vec<Change> {
        t.advance().unwrap().iter().map(|s| s.change()).collect()
    }

    #[test]
    fn readers_are_kept_detached_and_dropped_with_their_files() {
        let tmp = tempfile::tempdir().unwrap();
        let mut regs: Vec<Registry> = (0..3)
            .map(|_| Registry::builder().dir(tmp.path()).build().unwrap())
            .collect();
        let writers = fds_in(tmp.path());
        let mut tracker: Tracker<u32> = Tracker::new(Namespace::at(tmp.path()), None);
        for _ in 0..2 {
            for s in tracker.look().sources {
                tracker.open(&s).unwrap().state += 1;
            }
        }
        assert_eq!(tracker.len(), 3);
        assert_eq!(fds_in(tmp.path()), writers, "no descriptor per registry");
        for r in &regs {
            assert_eq!(
                tracker.get(r.path()).unwrap().state,
                2,
                "kept, not reopened"
            );
        }
        // A writer that ends removes its file.
        let gone_path = regs[0].path().to_owned();
        drop(regs.remove(0));
        let mut gone = Vec::new();
        let look = tracker.look_with(|p, _| gone.push(p));
        assert_eq!(gone, [gone_path]);
        assert_eq!(tracker.len(), 2);
        assert!(look.sources.iter().all(|s| s.liveness == Liveness::Alive));
    }

    #[test]
    fn another_registry_at_the_same_path_gets_a_new_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let ns = tmp.path().join("ns");
        std::fs::create_dir(&ns).unwrap();
        let mut tracker: Tracker<u32> = Tracker::new(Namespace::at(&ns), None);
        let first = Registry::builder().dir(tmp.path()).build().unwrap();
        first.counter("a_total", &[], "", "").unwrap().add(1);
        let second = Registry::builder().dir(tmp.path()).build().unwrap();
        second.counter("b_total", &[], "", "").unwrap().add(2);
        let at = ns.join("1-1-1.topdeck");
        let read = |tracker: &mut Tracker<u32>| {
            let sources = tracker.look().sources;
            let t = tracker.open(&sources[0]).unwrap();
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
    fn advance_keeps_the_previous_snapshot_for_since_and_a_successor_takes_it_over() {
        let tmp = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(tmp.path()).build().unwrap();
        let c = r.counter("a_total", &[], "", "").unwrap();
        let mut tracker: Tracker<u32> = Tracker::new(Namespace::at(tmp.path()), None);
        let source = tracker.look().sources.remove(0);
        let t = tracker.open(&source).unwrap();
        assert!(t.kept().changes().is_none());
        c.add(4);
        assert_eq!(changes(t), [Change::Counter(4)]);
        c.add(3);
        assert_eq!(changes(t), [Change::Counter(3)]);
        assert_eq!(t.kept().previous().unwrap().len(), 1);
        // A successor file takes over the kept snapshot: its counter is
        // paired by name.
        let (_, latest) = t.kept_mut().take();
        let next = Registry::builder().dir(tmp.path()).build().unwrap();
        next.counter("a_total", &[], "", "").unwrap().add(10);
        let sources = tracker.look().sources;
        let source = sources.iter().find(|s| s.path == next.path()).unwrap();
        let t = tracker.open(source).unwrap();
        t.kept_mut().set_latest(latest);
        assert_eq!(changes(t), [Change::Counter(3)]);
    }

    #[test]
    fn a_registry_and_a_porthole_are_followed_the_same_way() {
        let tmp = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(tmp.path()).build().unwrap();
        let jobs = r.counter("jobs_total", &[], "", "").unwrap();
        let prom = tempfile::tempdir().unwrap();
        let write = |n: f64| {
            let key = br#"["done", "done_total", {}, "Done."]"#;
            let bytes = topdeck_portholes::prommp::file_of(&[(key.as_slice(), n, 0.0)]);
            std::fs::write(prom.path().join("counter_1.db"), bytes).unwrap();
        };
        let config = Config {
            prommp_dirs: vec![prom.path().to_owned()],
            prommp_from_environ: false,
            jvm: false,
            aeron: false,
            mmv: false,
            owner: None,
        };
        let mut tracker: Tracker<u32> =
            Tracker::new(Namespace::at(tmp.path()), Some(Portholes::new(config)));
        let pass = |tracker: &mut Tracker<u32>| {
            let look = tracker.look();
            assert!(look.errors.is_empty(), "{:?}", look.errors);
            let kinds: Vec<Kind> = look.sources.iter().map(|s| s.kind).collect();
            assert_eq!(kinds, [Kind::Topdeck, Kind::Python]);
            look.sources
                .iter()
                .map(|s| changes(tracker.open(s).unwrap()))
                .collect::<Vec<_>>()
        };
        jobs.add(2);
        write(5.0);
        assert_eq!(
            pass(&mut tracker),
            [vec![Change::Counter(2)], vec![Change::CounterF64(5.0)]]
        );
        jobs.add(1);
        write(7.5);
        assert_eq!(
            pass(&mut tracker),
            [vec![Change::Counter(1)], vec![Change::CounterF64(2.5)]]
        );
        assert_eq!(tracker.len(), 2);
    }
}
