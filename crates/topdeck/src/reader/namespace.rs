// SPDX-License-Identifier: Apache-2.0
//! The namespace: every registry file on the host (or in `TOPDECK_DIR`),
//! listed with its writer's liveness, and the removal of dead writers' files.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use topdeck_format::layout::MAGIC;
use topdeck_procfs::table::Table;
use topdeck_procfs::unreadable::Stamp;

use super::locks::LockTable;
use super::mapped::{Liveness, MappedFile, Probe};
use super::registry_reader::RegistryReader;
use super::views::{self, FoundDir, Writers};
use crate::dir::{self, Scope, VerifiedDir, FILE_SUFFIX, TEMP_PREFIX};
use crate::error::{Error, ErrorKind, Result};

/// A file left half-created this long ago by a writer that is gone is removed by `gc`.
const STALE_TEMP_AGE: Duration = Duration::from_secs(60);

use topdeck_procfs::budget::{DirBudget, MAX_NAMES_PER_DIR};
/// Most files one listing opens in one directory, besides those it already
/// knows are dead, and most CPU time it spends there: the budget every
/// reader of other users' directories keeps (portholes' too), so a user
/// who fills their directory slows only their own listing.
pub use topdeck_procfs::budget::{MAX_ERRORS_PER_DIR, MAX_FILES_PER_DIR, MAX_TIME_PER_DIR};
/// Most dead and unreadable files a namespace remembers (about 300 bytes
/// each).
const MAX_DEAD_REMEMBERED: usize = topdeck_procfs::unreadable::MAX_REMEMBERED;
/// Most fallback directories (`/dev/shm/topdeck-<uid>.<tag>`) of one user
/// a listing reads, in name order. A writer makes one only when its
/// default directory is taken, and then reuses the first safe one, so a
/// user with more made them for another reason; each would otherwise add
/// a directory's budget to every listing.
pub const MAX_FALLBACKS_PER_USER: usize = topdeck_procfs::budget::MAX_DIRS_PER_USER;

/// One registry file and what its header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryEntry {
    /// The file; for a file in another mount namespace (a container's
    /// `/dev/shm`), the path to it through `/proc/<pid>/root`.
    pub path: PathBuf,
    /// Writer's pid in this reader's pid namespace. A writer in a
    /// container with its own pid namespace names itself by its pid there;
    /// that pid is mapped to this reader's through `NSpid`. When no running
    /// process matches (the writer is gone), the pid the writer saw, or 0
    /// for a writer in another mount namespace (its pid there may name
    /// another process here).
    pub pid: u32,
    /// Writer's start time, clock ticks since boot.
    pub start_ticks: u64,
    /// Writer's process name, as the writer gave it (its `argv[0]`): a
    /// claim, not a proof; [`uid`](Self::uid) is what the system vouches for.
    pub process_name: String,
    /// Registry name.
    pub registry_name: String,
    /// Metrics published when listed.
    pub metrics: u32,
    /// Whether the writer is alive.
    pub liveness: Liveness,
    /// When the registry was created, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// The file's owner: the writer's effective uid.
    pub uid: u32,
    /// The container the writer runs in, named from its cgroup (see
    /// `topdeck_procfs::cgroup::container_of`); `None` when it runs in the
    /// root cgroup (the system itself) or is gone.
    pub container: Option<String>,
    origin: Origin,
}

/// Where a listed file was found: the verified directory and the inode it
/// had, so reopening it cannot be redirected to another file.
#[derive(Debug, Clone)]
struct Origin {
    dir: Arc<VerifiedDir>,
    name: String,
    ino: u64,
}

impl PartialEq for Origin {
    fn eq(&self, other: &Self) -> bool {
        (self.dir.path(), &self.name, self.ino) == (other.dir.path(), &other.name, other.ino)
    }
}

impl Eq for Origin {}

impl RegistryEntry {
    /// Opens a reader on this registry: the same file that was listed,
    /// reopened through its directory's descriptor.
    pub fn open(&self) -> Result<RegistryReader> {
        let (file, st) = self.origin.dir.open_file(&self.origin.name)?;
        if st.st_ino != self.origin.ino {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{}: replaced since it was listed", self.path.display()),
            )
            .with_path(&self.path));
        }
        let mut reader = RegistryReader::from_mapped(MappedFile::from_file(file, &self.path)?)?;
        reader.set_writer_pid(self.pid);
        Ok(reader)
    }

    /// Which file this is: its inode and the registry's creation time. A
    /// path that names another of these names another registry.
    pub fn file_id(&self) -> (u64, u64) {
        (self.origin.ino, self.created_unix_ns)
    }
}

/// Registries found, and the files that could not be read (each error names its file).
#[derive(Debug, Default)]
pub struct Listing {
    /// Readable registries, sorted by pid then path.
    pub entries: Vec<RegistryEntry>,
    /// One error per unreadable file or unsafe directory.
    pub errors: Vec<Error>,
    /// Directories of other users this reader may not open (private to them).
    pub private: Vec<PathBuf>,
    /// The caller's own directories that could not be read at all (unsafe,
    /// unreadable, or a named directory that is missing); each also has its
    /// error in `errors`. Another user's that cannot be read is only in
    /// `errors`: not the caller's to fix.
    pub unusable: Vec<PathBuf>,
}

/// What `gc` did.
#[derive(Debug, Default)]
pub struct GcReport {
    /// Files removed.
    pub removed: Vec<PathBuf>,
    /// Files left alone, and why (not topdeck files, or removal failed).
    pub errors: Vec<Error>,
    /// The caller's own directories that could not be read at all, as in
    /// [`Listing::unusable`]: nothing in them was collected.
    pub unusable: Vec<PathBuf>,
}

/// The set of namespace directories a reader looks at.
///
/// Each directory is opened once per listing without following links and
/// checked through its descriptor; its files are opened through that
/// descriptor and must belong to the directory's owner. Files of dead
/// writers are remembered by name and inode, so a directory full of them
/// costs a listing one `getdents`, not an open per file.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let listing = topdeck::Namespace::at(dir.path()).list();
/// assert_eq!(listing.entries.len(), 1);
/// assert_eq!(listing.entries[0].liveness, topdeck::Liveness::Alive);
/// # drop(registry);
/// ```
#[derive(Debug, Clone)]
pub struct Namespace {
    /// A fixed directory, or `None` for the user directories in `scope`.
    dir: Option<PathBuf>,
    scope: Scope,
    /// Whether other mount namespaces' `/dev/shm` are looked into too.
    other_views: bool,
    dead: Arc<Mutex<Remembered>>,
}

impl Namespace {
    /// `TOPDECK_DIR` if set, else every user's directory under `/dev/shm`,
    /// this mount namespace's and every other one's (containers with a
    /// `/dev/shm` of their own, looked into through `/proc/<pid>/root`);
    /// looked up again at every listing, so users and containers that
    /// start later are seen.
    pub fn host() -> Self {
        Self {
            other_views: true,
            ..Self::scoped(Scope::AllUsers)
        }
    }

    /// `TOPDECK_DIR` if set, else this user's own directories.
    pub fn own() -> Self {
        Self::scoped(Scope::User(dir::euid()))
    }

    fn scoped(scope: Scope) -> Self {
        Self {
            dir: None,
            scope,
            other_views: false,
            dead: Arc::default(),
        }
    }

    /// One directory.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: Some(dir.into()),
            scope: Scope::AllUsers,
            other_views: false,
            dead: Arc::default(),
        }
    }

    /// The directories looked at, as of now: user directories are looked
    /// up again at every listing, so users whose first writer starts later
    /// are seen.
    pub fn dirs(&self) -> Vec<PathBuf> {
        match &self.dir {
            Some(d) => vec![d.clone()],
            None => dir::reader_dirs(self.scope),
        }
    }

    /// Where this namespace looks, in words: the directory, or which user
    /// directories under `/dev/shm` (looked up at every listing, so it
    /// also says how many exist now).
    ///
    /// ```
    /// assert_eq!(topdeck::Namespace::at("/tmp/ns").describe(), "/tmp/ns");
    /// ```
    pub fn describe(&self) -> String {
        if let Some(d) = self.dir.clone().or_else(dir::explicit_dir) {
            return d.display().to_string();
        }
        let whose = match self.scope {
            Scope::AllUsers => format!("every user's {}/topdeck-<uid>", dir::SHM_ROOT),
            Scope::User(uid) => format!("{}/topdeck-{uid} (and its fallbacks)", dir::SHM_ROOT),
        };
        let containers = if self.other_views {
            ", and those of other mount namespaces (containers)"
        } else {
            ""
        };
        match self.dirs().len() {
            0 => format!("{whose}: none yet here{containers}, looked for again at every listing"),
            n => format!("{whose}: {n} now here{containers}, looked for again at every listing"),
        }
    }

    /// Lists every registry; unreadable files become errors and the rest are still listed.
    pub fn list(&self) -> Listing {
        // Other views are found by a walk of /proc; without them, writers'
        // pids are read from /proc as asked.
        let table = match self.other_views() {
            true => Table::scan(),
            false => Table::default(),
        };
        self.list_with(&table)
    }

    /// Whether a listing looks into other mount namespaces (containers),
    /// which it finds among a table's processes: without, a listing needs
    /// no walk of `/proc` (`list_with(&Table::default())` is enough).
    ///
    /// ```
    /// assert!(!topdeck::Namespace::at("/tmp/ns").other_views());
    /// ```
    pub fn other_views(&self) -> bool {
        self.other_views && self.dir.is_none() && dir::explicit_dir().is_none()
    }

    /// [`list`](Self::list), with the processes of `table`: a caller that
    /// also looks for other runtimes' files in the same instant walks
    /// `/proc` once for both (other mount namespaces are found among
    /// `table`'s views instead of by a walk of their own).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// let table = topdeck_procfs::table::Table::scan();
    /// let listing = topdeck::Namespace::at(dir.path()).list_with(&table);
    /// assert_eq!(listing.entries.len(), 1);
    /// # drop(registry);
    /// ```
    pub fn list_with(&self, table: &Table) -> Listing {
        let mut out = Listing::default();
        let mut memory = self.dead.lock().unwrap_or_else(|e| e.into_inner());
        let Remembered { dead, unreadable } = &mut *memory;
        unreadable.new_look();
        let mut dead_remembered = dead.values().map(HashMap::len).sum::<usize>();
        let mut kept = DeadFiles::new();
        let mut dirs = self.open_dirs(&mut out, table, self.other_views);
        // One budget per user across all of that user's directories (its
        // own, its fallbacks, its containers'): each user's are read one
        // after another, so the budget's CPU time is theirs alone.
        dirs.sort_by_key(|(d, _)| d.owner());
        let mut user: Option<(u32, DirBudget)> = None;
        for (d, writers) in dirs {
            if user.as_ref().is_none_or(|(uid, _)| *uid != d.owner()) {
                user = Some((d.owner(), DirBudget::new()));
            }
            let Some((_, budget)) = user.as_mut() else {
                continue;
            };
            // Errors about single files are shown up to a few per
            // directory, the rest counted.
            let mut errors = DirBudget::new();
            let (names, complete) = match d.names(|n| n.ends_with(FILE_SUFFIX), MAX_NAMES_PER_DIR) {
                Ok(n) => n,
                Err(e) => {
                    out.errors.push(e);
                    continue;
                }
            };
            // Known dead files cost no open; the budget goes to the others,
            // and at most a budget's worth of the dead are listed. Known
            // unreadable ones cost a `stat`, to see they did not change.
            let (mut known, mut left) = (0, 0);
            let mut was = dead.remove(d.path()).unwrap_or_default();
            let mut now = HashMap::new();
            let mut probed = Vec::new();
            for (name, ino) in &names {
                let key = (name.clone(), *ino);
                if let Some(mut e) = was.remove(&key) {
                    // Through this listing's descriptor from now on: the one
                    // it was found through is let go.
                    e.origin.dir = d.clone();
                    if known < MAX_FILES_PER_DIR {
                        out.entries.push(e.clone());
                        known += 1;
                    } else {
                        left += 1;
                    }
                    now.insert(key, e);
                    continue;
                }
                let stamp = || d.stat_at(name).map(|st| Stamp::of(&st));
                if let Some(bad) = unreadable.still(d.path(), name, stamp()) {
                    if errors.error() {
                        out.errors.push(bad.error(&d.path().join(name)));
                    }
                    continue;
                }
                if !budget.open() {
                    left += 1;
                    continue;
                }
                match entry(&d, &writers, name, *ino) {
                    Ok(found) => probed.push((key, found)),
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => {
                        if dead_remembered + unreadable.len() < MAX_DEAD_REMEMBERED {
                            if let Some((st, bad)) = Unreadable::of(&d, name, &e) {
                                unreadable.remember(d.path(), name, st, bad);
                            }
                        }
                        if errors.error() {
                            out.errors.push(e);
                        }
                    }
                }
            }
            // One read of /proc/locks for every shared file whose lock is
            // taken, after all of them were opened.
            let table = LockTable::new();
            for (key, (mut e, probe)) in probed {
                e.liveness = probe.answer(&table);
                if e.liveness == Liveness::Dead
                    && dead_remembered + unreadable.len() < MAX_DEAD_REMEMBERED
                {
                    now.insert(key, e.clone());
                    dead_remembered += 1;
                }
                out.entries.push(e);
            }
            if left > 0 || !complete {
                let more = if complete { "" } else { " or more" };
                out.errors.push(over_budget(
                    d.path(),
                    &format!(
                        "it holds {}{more} registry files; {left} were not read or listed this \
                         time (at most {MAX_FILES_PER_DIR} files of one user's directories opened \
                         in {MAX_TIME_PER_DIR:?} of CPU, and {MAX_FILES_PER_DIR} of a directory's \
                         dead writers' files listed)",
                        names.len()
                    ),
                ));
            }
            if let Some(what) = errors.summary(true) {
                out.errors.push(over_budget(d.path(), &what));
            }
            dead_remembered -= was.len();
            if !now.is_empty() {
                kept.insert(d.path().to_owned(), now);
            }
        }
        *dead = kept;
        out.entries
            .sort_by(|a, b| (a.pid, &a.path).cmp(&(b.pid, &b.path)));
        out
    }

    /// Registries whose pid or process name is `key`; live ones first.
    pub fn find(&self, key: &str) -> (Vec<RegistryEntry>, Vec<Error>) {
        let listing = self.list();
        let pid = key.parse::<u32>().ok();
        let path = fs::canonicalize(key).ok();
        let mut found: Vec<RegistryEntry> = listing
            .entries
            .into_iter()
            .filter(|e| {
                Some(e.pid) == pid
                    || e.process_name == key
                    || e.path == Path::new(key)
                    // A path through another namespace's /proc/<pid>/root
                    // canonicalizes to a path in this one: only its own
                    // spelling names it.
                    || (path.is_some()
                        && !e.path.starts_with("/proc")
                        && fs::canonicalize(&e.path).ok() == path)
            })
            .collect();
        found.sort_by_key(|e| {
            (
                e.liveness != Liveness::Alive,
                std::cmp::Reverse(e.created_unix_ns),
            )
        });
        (found, listing.errors)
    }

    /// Removes the files of dead writers, and only those: a file is removed
    /// through its directory's descriptor, only if it is still the inode
    /// that was proven dead (its lock free, or held by nobody who could
    /// be its writer).
    pub fn gc(&self) -> GcReport {
        self.sweep(true)
    }

    /// What [`gc`](Self::gc) would remove now, removing nothing: the same
    /// proof of each writer's death (its lock taken, then let go), the
    /// files listed in `removed`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// let ns = topdeck::Namespace::at(dir.path());
    /// assert!(ns.gc_dry_run().removed.is_empty(), "its writer lives");
    /// # drop(registry);
    /// ```
    pub fn gc_dry_run(&self) -> GcReport {
        self.sweep(false)
    }

    fn sweep(&self, remove: bool) -> GcReport {
        let mut report = GcReport::default();
        let mut listing = Listing::default();
        // Local directories only: a container's dead files go with its
        // /dev/shm, and removing files inside another mount namespace is
        // more than a listing needs to trust.
        for (d, _) in self.open_dirs(&mut listing, &Table::default(), false) {
            let keep = |n: &str| n.ends_with(FILE_SUFFIX) || n.starts_with(TEMP_PREFIX);
            let names = match d.names(keep, usize::MAX) {
                Ok((n, _)) => n,
                Err(e) => {
                    report.errors.push(e);
                    continue;
                }
            };
            for (name, _) in names {
                match collect(&d, &name, remove) {
                    Ok(true) => report.removed.push(d.path().join(&name)),
                    Ok(false) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => report.errors.push(e),
                }
            }
        }
        report.errors.extend(listing.errors);
        report.unusable = listing.unusable;
        report
    }

    /// Whether a user directory found by listing is the caller's own (named
    /// after its uid): its problems are the caller's to fix.
    fn callers(&self, d: &Path) -> bool {
        let name = d.file_name().and_then(|n| n.to_str());
        name.and_then(dir::named_uid) == Some(dir::euid())
    }

    /// Each directory opened and verified once; missing ones are skipped,
    /// others' private ones noted, unsafe ones reported. With
    /// `other_views`, those of other mount namespaces (among `table`'s)
    /// follow.
    fn open_dirs<'t>(
        &self,
        out: &mut Listing,
        table: &'t Table,
        other_views: bool,
    ) -> Vec<FoundDir<'t>> {
        let found = self.dirs();
        let mut dirs = Vec::with_capacity(found.len());
        // Found by listing /dev/shm, not named by the caller or TOPDECK_DIR:
        // one that is gone, or private to another user, is no error.
        let listed = self.dir.is_none() && dir::explicit_dir().is_none();
        let mut seen = HashSet::new();
        let own = views::own_writers(table);
        // Other users' unusable directories are said up to a few, the
        // rest counted: anyone can make many.
        let mut others_unusable = DirBudget::new();
        for d in found {
            match VerifiedDir::open(&d, None) {
                Ok(v) => {
                    seen.extend(v.id());
                    dirs.push((Arc::new(v), own.clone()));
                }
                Err(e) if e.kind() == ErrorKind::NotFound && listed => {}
                Err(e) if e.kind() == ErrorKind::PermissionDenied && listed => out.private.push(d),
                // Another user's directory found by listing that cannot be
                // read (a link, unsafe modes) is that user's problem: said,
                // never made the caller's.
                Err(e) if listed && !self.callers(&d) => {
                    if others_unusable.error() {
                        out.errors.push(e);
                    }
                }
                Err(e) => {
                    out.errors.push(e);
                    out.unusable.push(d);
                }
            }
        }
        if others_unusable.errors_not_shown() > 0 {
            out.errors.push(Error::new(
                ErrorKind::UnsafeDirectory,
                format!(
                    "{}: {} more directories named topdeck-<uid> could not be used (the first \
                     {MAX_ERRORS_PER_DIR} are named above); their owners should remove them",
                    dir::SHM_ROOT,
                    others_unusable.errors_not_shown()
                ),
            ));
        }
        if other_views && listed {
            dirs.extend(views::other_views(
                table,
                &mut out.errors,
                &mut out.private,
                &mut seen,
            ));
        }
        capped_fallbacks(dirs, &mut out.errors)
    }
}

/// `dirs` with at most [`MAX_FALLBACKS_PER_USER`] fallback directories of
/// each owner (the first found, in name order as found), and one error per
/// owner who has more, saying how many were not read.
fn capped_fallbacks<'t>(dirs: Vec<FoundDir<'t>>, errors: &mut Vec<Error>) -> Vec<FoundDir<'t>> {
    let mut fallbacks = topdeck_procfs::budget::DirsPerUser::default();
    let kept = dirs
        .into_iter()
        .filter(|(d, _)| !d.is_fallback() || fallbacks.admit(d.owner()))
        .collect();
    for (uid, n) in fallbacks.over() {
        errors.push(Error::new(
            ErrorKind::TooLarge,
            format!(
                "{}: uid {uid} has {n} fallback directories (topdeck-{uid}.<tag>); only the first \
                 {MAX_FALLBACKS_PER_USER} are read. A writer makes one only when its own directory \
                 is taken, and reuses it: uid {uid} should remove the others",
                dir::SHM_ROOT
            ),
        ));
    }
    kept
}

/// Dead writers' files by directory, then name and inode: a dead file
/// stays dead (its writer's lock is gone for good), so it is read once.
type DeadFiles = HashMap<PathBuf, HashMap<(String, u64), RegistryEntry>>;

/// What a namespace remembers from one listing to the next, so that a
/// directory of dead or unreadable files costs one `getdents` (and a
/// `stat` per unreadable file), not an open of each. Unreadable files are
/// remembered as the portholes' readers remember theirs
/// (`topdeck_procfs::unreadable`), until they change.
#[derive(Debug, Default)]
struct Remembered {
    dead: DeadFiles,
    unreadable: topdeck_procfs::unreadable::Unreadable<Unreadable>,
}

/// Why a file could not be read, for a reason of its own contents (not
/// a passing one: an I/O error, a file not ready yet).
#[derive(Debug)]
struct Unreadable {
    kind: ErrorKind,
    message: String,
}

impl Unreadable {
    /// `err`, about entry `name` of `dir`, to remember with the file's
    /// stamp, if it lasts.
    fn of(dir: &VerifiedDir, name: &str, err: &Error) -> Option<(Stamp, Self)> {
        let lasts = matches!(
            err.kind(),
            ErrorKind::Corrupt
                | ErrorKind::Planted
                | ErrorKind::TooLarge
                | ErrorKind::InvalidName
                | ErrorKind::UnsupportedVersion
        );
        let st = dir.stat_at(name).filter(|_| lasts)?;
        let what = Self {
            kind: err.kind(),
            message: err.message().to_owned(),
        };
        Some((Stamp::of(&st), what))
    }

    /// The error, as it was said.
    fn error(&self, path: &Path) -> Error {
        Error::new(self.kind, self.message.clone()).with_path(path)
    }
}

fn over_budget(dir: &Path, what: &str) -> Error {
    Error::new(
        ErrorKind::TooLarge,
        format!(
            "{}: {what}; its owner should run `topdeck gc` or stop creating registries",
            dir.display()
        ),
    )
    .with_path(dir)
}

/// An entry, its liveness still to be answered from the probe. Its
/// writer, if it runs, is found among `writers` by the pid and start time
/// the header names; its liveness is then checked on that process.
fn entry(
    dir: &Arc<VerifiedDir>,
    writers: &Writers,
    name: &str,
    ino: u64,
) -> Result<(RegistryEntry, Probe)> {
    let path = dir.path().join(name);
    let (file, _) = dir.open_file(name)?;
    let mut reader = RegistryReader::from_mapped(MappedFile::from_file(file, &path)?)?;
    let h = reader.header().clone();
    let host = writers.host_pid(h.pid, h.start_ticks);
    let pid = host.unwrap_or_else(|| writers.unmapped_pid(h.pid));
    reader.set_writer_pid(pid);
    let entry = RegistryEntry {
        pid,
        container: host.and_then(topdeck_procfs::cgroup::container_of),
        start_ticks: h.start_ticks,
        process_name: h.process_name.clone(),
        registry_name: h.registry_name.clone(),
        metrics: h.desc_count,
        liveness: Liveness::Dead,
        created_unix_ns: h.created_unix_ns,
        uid: reader.owner(),
        path,
        origin: Origin {
            dir: dir.clone(),
            name: name.to_owned(),
            ino,
        },
    };
    Ok((entry, reader.probe()))
}

/// Removes `name` if its writer is dead (only says so, without `remove`);
/// `Ok(false)` if it is alive (or the name now holds another file).
fn collect(dir: &VerifiedDir, name: &str, remove: bool) -> Result<bool> {
    let path = dir.path().join(name);
    let (file, st) = dir.open_file(name)?;
    if name.starts_with(TEMP_PREFIX) {
        let age = file
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok());
        if age.is_none_or(|a| a < STALE_TEMP_AGE) {
            return Ok(false);
        }
        let mapped = MappedFile::from_file(file, &path)?;
        return match mapped.lock_for_removal(None) {
            true if remove => dir.remove_if_same(name, &st),
            dead => Ok(dead),
        };
    }
    let mapped = MappedFile::from_file(file, &path)?;
    let mut magic = Vec::new();
    let ours = mapped
        .copy(0, 8.min(mapped.len() as usize), &mut magic)
        .is_ok()
        && magic == MAGIC;
    if !ours && mapped.len() != 0 {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "{}: not a topdeck file, left alone; find out who put it there",
                path.display()
            ),
        )
        .with_path(&path));
    }
    let writer = mapped.header().ok().map(|h| (h.pid, h.start_ticks));
    if !mapped.lock_for_removal(writer) {
        return Ok(false);
    }
    if !remove {
        return Ok(true);
    }
    dir.remove_if_same(name, &st)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Descriptors of this process open on `dir`.
    fn open_on(dir: &Path) -> usize {
        fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l == dir)
            .count()
    }

    #[test]
    fn remembered_dead_files_keep_no_old_directory_descriptor_open() {
        let tmp = tempfile::tempdir().unwrap();
        let r = crate::Registry::builder().dir(tmp.path()).build().unwrap();
        let ns = Namespace::at(tmp.path());
        // A writer dies before each listing (a copy of a live file holds
        // no lock: a dead writer's file), so each listing finds one more.
        for i in 0..20 {
            fs::copy(r.path(), tmp.path().join(format!("1-1-{i}.topdeck"))).unwrap();
            let listing = ns.list();
            assert_eq!(listing.entries.len(), i + 2, "{:?}", listing.errors);
        }
        // The registry's own descriptor, and the one the remembered dead
        // files share with the last listing.
        assert!(
            open_on(tmp.path()) <= 2,
            "{} descriptors",
            open_on(tmp.path())
        );
        let dead = ns
            .list()
            .entries
            .iter()
            .filter(|e| e.liveness == Liveness::Dead)
            .count();
        assert_eq!(dead, 20);
    }
}
