// SPDX-License-Identifier: Apache-2.0
//! One look at every porthole on the host: discovery, liveness and a
//! snapshot of each, with the series order kept from one look to the next
//! (see `assembly.rs`) so the views' intervals pair series by position.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use topdeck::Snapshot;
use topdeck_portholes::{aeron as cnc, hsperf, prommp};
use topdeck_procfs::cgroup::container_of;
use topdeck_procfs::table::Table;

use crate::assembly::Assembly;
use crate::procs;
use crate::spent::Spent;
use crate::{aeron, jvm, python};

/// Which runtime publishes a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A HotSpot JVM's hsperfdata.
    Jvm,
    /// A prometheus_client multiprocess directory.
    Python,
    /// An Aeron media driver's `cnc.dat`.
    Aeron,
}

impl Kind {
    /// The name views show: `jvm`, `python`, `aeron`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Jvm => "jvm",
            Kind::Python => "python",
            Kind::Aeron => "aeron",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One source found by a look.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    /// Which runtime.
    #[serde(rename = "source")]
    pub kind: Kind,
    /// The file (a directory for Python), through `/proc/<pid>/root` for
    /// another mount namespace.
    pub path: PathBuf,
    /// The publishing process as this reader sees it: the JVM, the driver,
    /// or the process whose environment names the Python directory.
    pub pid: Option<u32>,
    /// What a person calls it: a JVM's main class, else the process name.
    pub process: String,
    /// The owner of its file (of its directory, for Python), as the kernel
    /// reports it: who wrote it, whatever it says of itself; `None` when
    /// that could not be read.
    pub uid: Option<u32>,
    /// The container its process runs in, named from its cgroup as the
    /// scheduler probe names it; `None` for the host's root cgroup or an
    /// unknown process.
    pub container: Option<String>,
    /// Whether its runtime still writes it (files outlive their writers).
    /// In JSON, as `state` beside it, as registries have it.
    #[serde(skip)]
    pub alive: bool,
}

/// A source and what it held.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The source.
    pub found: Found,
    /// Its series.
    pub snapshot: Snapshot,
}

/// What one [`Portholes::look`] found.
#[derive(Debug, Default)]
pub struct Look {
    /// Sources read, by kind then path.
    pub readings: Vec<Reading>,
    /// Sources, directories or files that could not be read, each saying
    /// which and why; the others are still read.
    pub errors: Vec<String>,
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
            owner: None,
        }
    }
}

/// Every porthole on the host and in its containers, read read-only
/// (nothing locked, written or mapped), with each source's series kept in
/// a stable order between looks.
///
/// ```no_run
/// let mut portholes = topdeck_sources::Portholes::new(Default::default());
/// let look = portholes.look();
/// for r in &look.readings {
///     println!("{} {} {} series", r.found.kind, r.found.process, r.snapshot.len());
/// }
/// for e in &look.errors {
///     eprintln!("warning: {e}");
/// }
/// ```
#[derive(Debug, Default)]
pub struct Portholes {
    config: Config,
    kept: HashMap<(Kind, PathBuf), Assembly>,
    /// Environments read at earlier looks (see `EnvironCache`); boxed,
    /// as views hold a `Portholes` beside smaller things.
    environ: Box<procs::EnvironCache>,
}

impl Portholes {
    /// Portholes found as `config` says.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            kept: HashMap::new(),
            environ: Box::default(),
        }
    }

    /// Finds and reads every source; sources gone since the last look are
    /// forgotten. `/proc` is walked once for all of it (see
    /// [`look_with`](Self::look_with)).
    pub fn look(&mut self) -> Look {
        self.look_with(&Table::scan())
    }

    /// [`look`](Self::look), with the processes of `table`: a caller that
    /// also lists topdeck's registries in the same instant walks `/proc`
    /// once for both. From the second look on, a process whose environment
    /// was read at an earlier look is not read again (only its `stat`,
    /// which tells whether it is still the same program).
    ///
    /// ```no_run
    /// let table = topdeck_procfs::table::Table::scan();
    /// let mut portholes = topdeck_sources::Portholes::new(Default::default());
    /// let look = portholes.look_with(&table);
    /// println!("{} sources", look.readings.len());
    /// ```
    pub fn look_with(&mut self, table: &Table) -> Look {
        let mut look = Look::default();
        let mut found: Vec<(Found, Vec<(topdeck::MetricInfo, topdeck::Value)>)> = Vec::new();
        // Whose sources to keep is decided from what discovery opened,
        // before anything is read: another user's files are not read.
        let owner = self.config.owner;
        if self.config.jvm {
            jvms(table, owner, &mut found, &mut look.errors);
        }
        if !self.config.prommp_dirs.is_empty() || self.config.prommp_from_environ {
            let environ = &mut self.environ;
            pythons(&self.config, table, environ, &mut found, &mut look.errors);
        }
        if self.config.aeron {
            drivers(table, owner, &mut found, &mut look.errors);
        }
        found.sort_by(|a, b| (a.0.kind, &a.0.path).cmp(&(b.0.kind, &b.0.path)));
        let mut kept = std::mem::take(&mut self.kept);
        for (f, series) in found {
            let mut assembly = kept.remove(&(f.kind, f.path.clone())).unwrap_or_default();
            let snapshot = assembly.snapshot(series);
            self.kept.insert((f.kind, f.path.clone()), assembly);
            look.readings.push(Reading { found: f, snapshot });
        }
        look
    }
}

impl Portholes {
    /// Reads `found` again, and only it (a view that follows one source),
    /// in the order kept for it. Its liveness is judged again where that
    /// is cheap: a Python directory by its workers, a driver by its
    /// heartbeat; a JVM as the look judged it (its lock, or a process that
    /// can have written its file).
    pub fn reread(&mut self, found: &Found) -> Result<Reading, String> {
        let mut f = found.clone();
        let series = match f.kind {
            Kind::Jvm => {
                let (perf, liveness) =
                    hsperf::read_judged(&f.path, f.pid).map_err(|e| e.to_string())?;
                f.alive = liveness != hsperf::Liveness::Stale;
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
                    (Some(table), Some(via)) => prommp::read_dir_with_liveness(
                        &f.path,
                        prommp::DeadWorkers::default(),
                        |pid| procs::worker_alive(table, via, pid),
                    ),
                    _ => prommp::read_dir(&f.path),
                }
                .map_err(|e| e.to_string())?;
                f.alive = f.pid.is_some_and(procs::runs) || merged.files.iter().any(|x| x.alive);
                python::series(&merged)
            }
            Kind::Aeron => {
                let c = cnc::read(f.path.clone()).map_err(|e| e.to_string())?;
                f.alive = c.liveness(cnc::now_ms()).alive;
                aeron::series(&c)
            }
        };
        let snapshot = self
            .kept
            .entry((f.kind, f.path.clone()))
            .or_default()
            .snapshot(series);
        Ok(Reading { found: f, snapshot })
    }
}

type Series = Vec<(topdeck::MetricInfo, topdeck::Value)>;

/// Whether a directory found at `path` and opened as `opened` is `uid`'s
/// in this reader's own view (not reached through another process's
/// `/proc/<pid>/root`): judged by `fstat` of the descriptor, never by
/// looking `path` up again, which a user who swaps a parent directory
/// meanwhile would answer.
fn owned_here(path: &Path, opened: &std::fs::File, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    !path.starts_with("/proc") && opened.metadata().is_ok_and(|m| m.uid() == uid)
}

fn jvms(
    table: &Table,
    owner: Option<u32>,
    found: &mut Vec<(Found, Series)>,
    errors: &mut Vec<String>,
) {
    let discovery = match owner {
        Some(uid) => hsperf::discover_owned_by(table, uid),
        None => hsperf::discover_with(table),
    };
    errors.extend(discovery.errors.iter().map(ToString::to_string));
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
                if budget.error() {
                    errors.push(e.to_string());
                }
                continue;
            }
        };
        let alive = j.liveness != hsperf::Liveness::Stale;
        let process = jvm::main_class(&perf)
            .or_else(|| j.host_pid.and_then(procs::comm))
            .unwrap_or_else(|| "java".into());
        let f = Found {
            kind: Kind::Jvm,
            path: j.path,
            pid: j.host_pid,
            uid: Some(j.uid),
            process,
            container: j.host_pid.and_then(container_of),
            alive,
        };
        found.push((f, jvm::series(&perf)));
    }
    spent.report(errors);
}

fn pythons(
    config: &Config,
    table: &Table,
    environ: &mut procs::EnvironCache,
    found: &mut Vec<(Found, Series)>,
    errors: &mut Vec<String>,
) {
    let mut dirs: Vec<(PathBuf, Option<u32>, Option<std::fs::File>)> = config
        .prommp_dirs
        .iter()
        .map(|d| (d.clone(), None, None))
        .collect();
    if config.prommp_from_environ {
        for (dir, pid, opened) in procs::environ_dirs(table, procs::PROMMP_VARS, environ) {
            if config
                .owner
                .is_some_and(|uid| !owned_here(&dir, &opened, uid))
            {
                continue;
            }
            if !dirs.iter().any(|(d, _, _)| same_dir(d, &dir, &opened)) {
                dirs.push((dir, Some(pid), Some(opened)));
            }
        }
    }
    for (dir, pid, opened) in dirs {
        // The owner of the directory found is that of the one opened; one
        // given is the operator's word for where to look.
        let uid = match &opened {
            Some(opened) => opened.metadata(),
            None => std::fs::metadata(&dir),
        }
        .ok()
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        // Its files are named by pids of the namespace of the process
        // whose environment named it; one given is read by this reader's.
        // One found is read through the directory opened when found.
        let read = match (pid, opened) {
            (Some(via), Some(opened)) => {
                prommp::read_open_dir(&opened, &dir, prommp::DeadWorkers::default(), |worker| {
                    procs::worker_alive(table, via, worker)
                })
            }
            _ => prommp::read_dir(&dir),
        };
        let merged = match read {
            Ok(m) => m,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        errors.extend(
            merged
                .errors
                .iter()
                .map(|e| format!("{}: {}", e.path.display(), e.why)),
        );
        let alive = pid.is_some() || merged.files.iter().any(|f| f.alive);
        let process = pid.and_then(procs::comm).unwrap_or_else(|| "python".into());
        let f = Found {
            kind: Kind::Python,
            path: dir,
            pid,
            uid,
            process,
            container: pid.and_then(container_of),
            alive,
        };
        found.push((f, python::series(&merged)));
    }
}

/// Whether a directory given (`a`) is the one found at `b` and opened as
/// `opened` (a `--prommp` given and the same directory found in a
/// process's environment); the one found is not walked again by path.
fn same_dir(a: &Path, b: &Path, opened: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), opened.metadata()) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => a == b,
    }
}

fn drivers(
    table: &Table,
    owner: Option<u32>,
    found: &mut Vec<(Found, Series)>,
    errors: &mut Vec<String>,
) {
    let now = cnc::now_ms();
    let discovery = match owner {
        Some(uid) => cnc::discover_owned_by(table, uid),
        None => cnc::discover_checked(table),
    };
    errors.extend(discovery.errors.iter().map(ToString::to_string));
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
                    errors.push(e.to_string());
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
                    errors.push(e.to_string());
                }
                None
            })
        } else {
            None
        };
        let process = pid.and_then(procs::comm).unwrap_or_else(|| "aeron".into());
        let f = Found {
            kind: Kind::Aeron,
            path: source.path,
            pid,
            uid: Some(source.uid),
            process,
            container: pid.and_then(container_of),
            alive,
        };
        found.push((f, aeron::series(&c)));
    }
    spent.report(errors);
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
