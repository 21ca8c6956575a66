// SPDX-License-Identifier: Apache-2.0
//! Other runtimes' portholes on the host and in its containers: discovery,
//! the writer of each, and its series, read read-only (nothing locked,
//! written or mapped). The [`Tracker`](crate::Tracker) looks at them beside
//! topdeck's registries, with one walk of `/proc` for both.

use std::path::{Path, PathBuf};

use topdeck::{ErrorKind, Liveness};
use topdeck_portholes::{aeron as cnc, hsperf, mmv as pcp, prommp};
use topdeck_procfs::cgroup::container_of;
use topdeck_procfs::table::Table;
use topdeck_procfs::writer;

use crate::error::Error;
use crate::procs;
use crate::source::{Kind, Source};
use crate::spent::Spent;
use crate::{aeron, jvm, mmv, python};

/// What one [`Portholes::look_with`] found: each source with its series,
/// in no kept order (the tracker keeps it, see `assembly.rs`).
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Sources read, by kind then path.
    pub(crate) readings: Vec<(Source, Series)>,
    /// Sources, directories or files that could not be read, each saying
    /// which and why; the others are still read.
    pub(crate) errors: Vec<Error>,
}

/// Where to look.
#[derive(Debug, Clone)]
pub struct Config {
    /// prometheus_client directories to read besides those found.
    pub prommp_dirs: Vec<PathBuf>,
    /// Find prometheus_client directories in running processes'
    /// `PROMETHEUS_MULTIPROC_DIR`.
    pub prommp_from_environ: bool,
    /// Find JVMs' hsperfdata.
    pub jvm: bool,
    /// Find Aeron drivers' `cnc.dat`.
    pub aeron: bool,
    /// Find PCP's MMV files (`$PCP_TMP_DIR/mmv`).
    pub mmv: bool,
    /// Keep only the sources found in this reader's own view of the file
    /// system whose file this user owns (an endpoint exporting "your own"
    /// metrics, as it exports only your own registries); `None` keeps every
    /// source found. Ownership is judged by `fstat` of what discovery
    /// opened, before anything is read: another user's files are never
    /// opened for their contents. The `prommp_dirs` given are always read.
    pub owner: Option<u32>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            prommp_dirs: Vec::new(),
            prommp_from_environ: true,
            jvm: true,
            aeron: true,
            mmv: true,
            owner: None,
        }
    }
}

/// Where the portholes are found, and what is kept between looks to find
/// them again cheaply; the [`Tracker`](crate::Tracker) reads them.
///
/// ```no_run
/// let portholes = topdeck_sources::Portholes::new(Default::default());
/// let mut tracker = topdeck_sources::Tracker::<()>::new(topdeck::Namespace::host(), Some(portholes));
/// for s in tracker.look().sources {
///     println!("{} {} {:?}", s.kind, s.process, s.pid);
/// }
/// ```
#[derive(Debug, Default)]
pub struct Portholes {
    config: Config,
    /// Environments read at earlier looks (see `EnvironCache`); boxed,
    /// as views hold a `Portholes` beside smaller things.
    environ: Box<procs::EnvironCache>,
    /// hsperfdata files that could not be read, not opened again until
    /// they change.
    unreadable_jvms: Box<hsperf::Unreadable>,
}

impl Portholes {
    /// Portholes found as `config` says.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            environ: Box::default(),
            unreadable_jvms: Box::default(),
        }
    }

    /// Finds and reads every source, with the processes of `table` (the
    /// look's one walk of `/proc`). From the second look on, a process
    /// whose environment was read at an earlier look is not read again
    /// (only its `stat`, which tells whether it is still the same program).
    pub(crate) fn look_with(&mut self, table: &Table) -> Found {
        let mut look = Found::default();
        // Whose sources to keep is decided from what discovery opened,
        // before anything is read: another user's files are not read.
        let owner = self.config.owner;
        if self.config.jvm {
            jvms(table, owner, &mut self.unreadable_jvms, &mut look);
        }
        if !self.config.prommp_dirs.is_empty() || self.config.prommp_from_environ {
            pythons(&self.config, table, &mut self.environ, &mut look);
        }
        if self.config.aeron {
            drivers(table, owner, &mut look);
        }
        if self.config.mmv {
            mmvs(table, owner, &mut look);
        }
        look.readings.sort_by(|a, b| a.0.key().cmp(&b.0.key()));
        look
    }
}

/// Reads `source` again, and only it (a view that follows one source).
/// Its liveness is judged again where that is cheap: a JVM as the look
/// judged it, a Python directory by its workers, a driver by its
/// heartbeat, an MMV file by whether the writer the look named still runs.
pub(crate) fn reread(source: &Source) -> Result<(Source, Series), Error> {
    let mut f = source.clone();
    let series = match f.kind {
        Kind::Jvm => {
            // Judged as the look judged it: its lock, or a process that
            // can have written its file.
            let (perf, judged) =
                hsperf::read_judged(&f.path, f.pid).map_err(|e| Error::from(&e))?;
            f.liveness = liveness(judged != hsperf::Liveness::Stale);
            jvm::series(&perf)
        }
        Kind::Python => {
            // The pid namespace of the process that named it says
            // which processes its files' pids are; a table only when
            // that is not this reader's.
            let table = f
                .pid
                .filter(|&p| !procs::in_own_pid_ns(p))
                .map(|_| Table::scan());
            let merged = match (&table, f.pid) {
                (Some(table), Some(via)) => {
                    prommp::read_dir_with_liveness(&f.path, prommp::DeadWorkers::default(), |pid| {
                        procs::worker_alive(table, via, pid)
                    })
                }
                _ => prommp::read_dir(&f.path),
            }
            .map_err(|e| Error::from(&e))?;
            f.liveness = liveness(still_runs(&f) || merged.files.iter().any(|x| x.alive));
            python::series(&merged)
        }
        Kind::Aeron => {
            let c = cnc::read(f.path.clone()).map_err(|e| Error::from(&e))?;
            f.liveness = liveness(c.liveness(cnc::now_ms()).alive);
            aeron::series(&c)
        }
        Kind::Mmv => {
            let file = pcp::read(&f.path).map_err(|e| Error::from(&e))?;
            // Its writer was judged at the look: it is dead once that
            // process (that pid and start) is gone.
            if f.pid.is_some() && !still_runs(&f) {
                f.liveness = Liveness::Dead;
            }
            f.texts = mmv::texts(&file);
            mmv::series(&file, pcp::now_us())
        }
        Kind::Topdeck => {
            let why = "a topdeck registry, read through its own reader, not as a porthole";
            let message = format!("{}: {why}", f.path.display());
            return Err(Error::new(
                f.kind,
                ErrorKind::NotFound,
                Some(&f.path),
                message,
            ));
        }
    };
    Ok((f, series))
}

/// Whether the process a look named as `f`'s (its pid and start) runs.
fn still_runs(f: &Source) -> bool {
    f.pid
        .is_some_and(|pid| writer::runs(&Table::default(), pid, f.start_ticks))
}

fn liveness(alive: bool) -> Liveness {
    if alive {
        Liveness::Alive
    } else {
        Liveness::Dead
    }
}

/// A porthole found by a look, with its `series`.
fn found(
    table: &Table,
    (kind, path): (Kind, PathBuf),
    (pid, uid): (Option<u32>, Option<u32>),
    process: String,
    alive: bool,
    series: Series,
) -> (Source, Series) {
    let source = Source {
        pid,
        start_ticks: pid.and_then(|p| table.start_ticks(p)),
        uid,
        container: pid.and_then(container_of),
        liveness: liveness(alive),
        metrics: series.len(),
        ..Source::new(kind, path, process)
    };
    (source, series)
}

pub(crate) type Series = Vec<(topdeck::MetricInfo, topdeck::Value)>;

/// Whether a directory found at `path` and opened as `opened` is `uid`'s
/// in this reader's own view (not reached through another process's
/// `/proc/<pid>/root`): judged by `fstat` of the descriptor, never by
/// looking `path` up again, which a user who swaps a parent directory
/// meanwhile would answer.
fn owned_here(path: &Path, opened: &std::fs::File, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    !path.starts_with("/proc") && opened.metadata().is_ok_and(|m| m.uid() == uid)
}

fn jvms(table: &Table, owner: Option<u32>, unreadable: &mut hsperf::Unreadable, look: &mut Found) {
    // Files that could not be read at an earlier look are not opened
    // again while they do not change.
    let discovery = hsperf::discover_remembering(table, owner, unreadable);
    look.errors.extend(discovery.errors.iter().map(Error::from));
    // Reading is held to the directory's budget, as discovery was, and
    // files that cannot be read are reported in full only up to a few per
    // directory: a directory of a thousand bad files is one line more.
    let mut spent = Spent::default();
    for j in discovery.jvms {
        let budget = spent.of(j.path.parent().unwrap_or(&j.path));
        if !budget.open() {
            continue;
        }
        let perf = match j.read() {
            Ok(perf) => perf,
            Err(e) => {
                unreadable.remember(&j, &e);
                if budget.error() {
                    look.errors.push(Error::from(&e));
                }
                continue;
            }
        };
        let alive = j.liveness != hsperf::Liveness::Stale;
        let process = jvm::main_class(&perf)
            .or_else(|| j.host_pid.and_then(procs::comm))
            .unwrap_or_else(|| "java".into());
        let series = jvm::series(&perf);
        let ids = (j.host_pid, Some(j.uid));
        look.readings.push(found(
            table,
            (Kind::Jvm, j.path),
            ids,
            process,
            alive,
            series,
        ));
    }
    spent.report(Kind::Jvm, &mut look.errors);
}

fn pythons(config: &Config, table: &Table, environ: &mut procs::EnvironCache, look: &mut Found) {
    // Every directory is opened once, given or found, and its owner and
    // files taken through that descriptor: a path looked up again can name
    // another directory by then.
    let mut dirs: Vec<(PathBuf, Option<u32>, std::fs::File)> = Vec::new();
    for dir in &config.prommp_dirs {
        match topdeck_procfs::root::open_dir(dir) {
            Ok(opened) => dirs.push((dir.clone(), None, opened.into())),
            Err(source) => look.errors.push(Error::from(&prommp::DirError::List {
                path: dir.clone(),
                source,
            })),
        }
    }
    if config.prommp_from_environ {
        for (dir, pid, opened) in procs::environ_dirs(table, procs::PROMMP_VARS, environ) {
            if config
                .owner
                .is_some_and(|uid| !owned_here(&dir, &opened, uid))
            {
                continue;
            }
            if !dirs.iter().any(|(_, _, given)| same_dir(given, &opened)) {
                dirs.push((dir, Some(pid), opened));
            }
        }
    }
    for (dir, pid, opened) in dirs {
        let uid = opened
            .metadata()
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        // Its files are named by pids of the namespace of the process
        // whose environment named it; one given is read by this reader's.
        let read =
            prommp::read_open_dir(
                &opened,
                &dir,
                prommp::DeadWorkers::default(),
                |worker| match pid {
                    Some(via) => procs::worker_alive(table, via, worker),
                    None => writer::runs(table, worker, None),
                },
            );
        let merged = match read {
            Ok(m) => m,
            Err(e) => {
                look.errors.push(Error::from(&e));
                continue;
            }
        };
        look.errors.extend(merged.errors.iter().map(Error::from));
        let alive = pid.is_some() || merged.files.iter().any(|f| f.alive);
        let process = pid.and_then(procs::comm).unwrap_or_else(|| "python".into());
        let series = python::series(&merged);
        look.readings.push(found(
            table,
            (Kind::Python, dir),
            (pid, uid),
            process,
            alive,
            series,
        ));
    }
}

/// Whether two open directories are one (a `--prommp` given and the same
/// directory found in a process's environment).
fn same_dir(a: &std::fs::File, b: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (a.metadata(), b.metadata()) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

fn drivers(table: &Table, owner: Option<u32>, look: &mut Found) {
    let now = cnc::now_ms();
    let discovery = match owner {
        Some(uid) => cnc::discover_owned_by(table, uid),
        None => cnc::discover_checked(table),
    };
    look.errors.extend(discovery.errors.iter().map(Error::from));
    // Read within the budget of their `/dev/shm`, as discovered.
    let mut spent = Spent::default();
    for source in discovery.sources {
        let shm = source.path.ancestors().nth(2).unwrap_or(&source.path);
        let budget = spent.of(shm);
        if !budget.open() {
            continue;
        }
        let c = match source.read() {
            Ok(c) => c,
            Err(e) => {
                if budget.error() {
                    look.errors.push(Error::from(&e));
                }
                continue;
            }
        };
        let alive = c.liveness(now).alive;
        // The header's pid is what the file's writer put there: named only
        // when a running process can be shown to have written it.
        let pid = if alive {
            source.writer(table, &c.header).unwrap_or_else(|e| {
                if budget.error() {
                    look.errors.push(Error::from(&e));
                }
                None
            })
        } else {
            None
        };
        let process = pid.and_then(procs::comm).unwrap_or_else(|| "aeron".into());
        let series = aeron::series(&c);
        let ids = (pid, Some(source.uid));
        look.readings.push(found(
            table,
            (Kind::Aeron, source.path),
            ids,
            process,
            alive,
            series,
        ));
    }
    spent.report(Kind::Aeron, &mut look.errors);
}

fn mmvs(table: &Table, owner: Option<u32>, look: &mut Found) {
    let discovery = match owner {
        Some(uid) => pcp::discover_owned_by(table, uid),
        None => pcp::discover_with(table),
    };
    look.errors.extend(discovery.errors.iter().map(Error::from));
    let now = pcp::now_us();
    let mut spent = Spent::default();
    for file in discovery.files {
        let budget = spent.of(file.path.parent().unwrap_or(&file.path));
        if !budget.open() {
            continue;
        }
        let read = match file.read() {
            Ok(read) => read,
            // Not published yet: read again at the next look.
            Err(e) if e.is_not_ready() => continue,
            Err(e) => {
                if budget.error() {
                    look.errors.push(Error::from(&e));
                }
                continue;
            }
        };
        // A file without the PROCESS flag outlives its writers by design
        // (pmdammv serves it while it exists); one with it is its
        // writer's while that process runs.
        let (pid, alive) = match read.header.flags.process() {
            false => (None, true),
            true => {
                let pid = u32::try_from(read.header.process)
                    .ok()
                    .and_then(|pid| mmv_writer(table, &file, pid));
                (pid, pid.is_some())
            }
        };
        let process = pid
            .and_then(procs::comm)
            .unwrap_or_else(|| file.name.clone());
        let series = mmv::series(&read, now);
        let ids = (pid, Some(file.uid));
        let (mut source, series) =
            found(table, (Kind::Mmv, file.path), ids, process, alive, series);
        source.texts = mmv::texts(&read);
        look.readings.push((source, series));
    }
    spent.report(Kind::Mmv, &mut look.errors);
}

/// The host pid of the process that calls itself `pid` in the file's
/// view and can have written `file` (the one writer check: it runs as the
/// file's owner and started before the file last changed).
fn mmv_writer(table: &Table, file: &pcp::MmvFile, pid: u32) -> Option<u32> {
    // In this reader's view the pid is this reader's; in another, one of
    // that view's processes has it as its innermost pid.
    let members = match file.view.filter(|v| Some(*v) != table.own_view()) {
        None => vec![pid],
        Some(v) => table.views().members.get(&v).cloned().unwrap_or_default(),
    };
    writer::writer_among(table, members, pid, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_own_files_in_this_view_are_owned_here() {
        let dir = tempfile::tempdir().unwrap();
        let opened = std::fs::File::open(dir.path()).unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert!(owned_here(dir.path(), &opened, me));
        assert!(!owned_here(dir.path(), &opened, me.wrapping_add(1)));
        let through_root = Path::new("/proc/self/root").join(dir.path().strip_prefix("/").unwrap());
        assert!(through_root.exists());
        assert!(
            !owned_here(&through_root, &opened, me),
            "another view's path is not ours"
        );
    }
}
