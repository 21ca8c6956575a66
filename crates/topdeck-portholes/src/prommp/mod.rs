// SPDX-License-Identifier: Apache-2.0
//! Python prometheus_client's multiprocess mode: the `*.db` files each
//! worker writes into `PROMETHEUS_MULTIPROC_DIR`, read without the library
//! and merged as its `MultiProcessCollector` (0.26.0) merges them.
//!
//! - [`parse`]: one file's bytes to [`Entry`]s.
//! - [`read_dir`]: every `*.db` file of a directory, copied with `pread`,
//!   its worker's liveness looked up, merged into [`Merged`], whose
//!   [`Merged::to_text`] is what `generate_latest(MultiProcessCollector(…))`
//!   prints for the same files.
//!
//! Nothing here writes, deletes, compacts, locks or maps a file: the files
//! are the only copy of dead workers' counters, and compacting them was
//! rejected upstream as racy.
//!
//! Where it differs from upstream, on files upstream would not write:
//! - a file that cannot be read or parsed is reported in
//!   [`Merged::errors`] and left out (upstream's scrape raises instead);
//! - names must be `<counter|histogram|summary>_<pid>.db` or
//!   `gauge_<mode>_<pid>.db` with a numeric pid and one of the ten modes
//!   (upstream takes any text as a gauge's pid and any mode as `all`);
//! - an entry must end within `used` (upstream reads its value past it);
//! - a bucket whose `le` is NaN or spelled with `_` is left out, and noted.
//!
//! With [`DeadWorkers::DropLiveGauges`] (the default) a worker whose
//! `/proc/<pid>` is gone has its `live*` gauge files left out, as if
//! `mark_process_dead` had deleted them; a reused pid counts as alive.

mod build;
mod files;
mod float;
mod merge;
mod parse;
mod text;

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use topdeck_procfs::budget;

use files::Copy;

pub use build::file_of;
pub use files::{GaugeMode, Kind, MAX_FILE};
pub use float::float_to_go_string;
pub use merge::{Family, Sample};
pub use parse::{parse, Entry, ParseError};

/// What to do with the `live*` gauge files of workers that are gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeadWorkers {
    /// Leave them out, as upstream does once `mark_process_dead(pid)` has
    /// deleted them: what a `live*` mode means. Every other file of a dead
    /// worker still counts (a counter must not go backwards).
    #[default]
    DropLiveGauges,
    /// Merge every file present, as upstream's collector does when nobody
    /// called `mark_process_dead` (a `livesum` then still counts the dead).
    KeepAll,
}

/// One `*.db` file that was read.
#[derive(Clone, Debug, PartialEq)]
pub struct DbFile {
    /// Its path.
    pub path: PathBuf,
    /// What its name says it holds.
    pub kind: Kind,
    /// The writer's pid, from the name.
    pub pid: u32,
    /// Whether its worker runs: `/proc/<pid>` exists (or what the liveness
    /// given to [`read_dir_with_liveness`] says). A pid reused by another
    /// process counts as alive: the files carry no start time to tell them
    /// apart.
    pub alive: bool,
    /// Entries it holds.
    pub entries: usize,
    /// Whether its entries are in the merge (a dead worker's `live*` gauge
    /// file is not, with [`DeadWorkers::DropLiveGauges`]).
    pub merged: bool,
}

/// A file that could not be read, merged without it; or (with the
/// directory's path) a bucket that could not be merged.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{}: {why}", path.display())]
pub struct FileError {
    /// The file (the directory, for a bucket left out of the merge).
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

/// Why a directory could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// It could not be opened or listed.
    #[error("cannot list the prometheus_client multiprocess directory {}: {source}; check PROMETHEUS_MULTIPROC_DIR and that it is readable", path.display())]
    List {
        /// The directory.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// It holds more than one look reads from one directory (see
    /// [`MAX_BYTES_PER_DIR`], [`MAX_KEYS_PER_DIR`]); none of it is merged,
    /// as a merge of some of its files would show sums that go backwards.
    #[error("{}: {why}; none of it was merged into this look (a merge of only some of its files would show its counters going backwards), and it is left out until it holds less", path.display())]
    TooLarge {
        /// The directory.
        path: PathBuf,
        /// What it holds, and the budget.
        why: String,
    },
}

impl DirError {
    /// The directory.
    pub fn path(&self) -> &Path {
        match self {
            DirError::List { path, .. } | DirError::TooLarge { path, .. } => path,
        }
    }
}

/// Most bytes in use, summed over its files, one look copies from one
/// directory: 64 workers whose files each hold 1 MiB of keys (a file
/// starts at 64 KiB; most stay there).
pub const MAX_BYTES_PER_DIR: u64 = 64 << 20;
/// Most distinct keys (sample and label set) one look decodes from one
/// directory: decoding a new key is what a file of distinct keys costs,
/// and 100,000 series are ten times what Prometheus's own guidance calls
/// a large target.
pub const MAX_KEYS_PER_DIR: usize = 100_000;

/// A directory's files, merged.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// Families in upstream's order: first seen, files in directory order.
    pub families: Vec<Family>,
    /// Every file read, in directory order.
    pub files: Vec<DbFile>,
    /// Files left out, and why; also buckets left out of a family.
    pub errors: Vec<FileError>,
}

impl Merged {
    /// The Prometheus text exposition (0.0.4), as upstream's
    /// `generate_latest` writes it for the same merge.
    pub fn to_text(&self) -> String {
        text::exposition(&self.families)
    }
}

/// Reads every `*.db` file of `dir` (not those starting with `.`, as
/// Python's `glob` skips them) in directory order, as upstream's `glob`
/// lists them, and merges them; a worker is alive if `/proc/<pid>` exists.
/// A file that cannot be read or parsed is reported in [`Merged::errors`]
/// and the rest still merge.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use topdeck_portholes::prommp::read_dir;
///
/// let dir = std::env::temp_dir().join(format!("prommp-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let key = br#"["jobs", "jobs_total", {}, "Jobs done"]"#;
/// let mut entry = (key.len() as i32).to_ne_bytes().to_vec();
/// entry.extend_from_slice(key);
/// entry.extend(std::iter::repeat(b' ').take(8 - (key.len() + 4) % 8));
/// entry.extend_from_slice(&5.0f64.to_ne_bytes());
/// entry.extend_from_slice(&0.0f64.to_ne_bytes());
/// let mut file = ((8 + entry.len()) as i32).to_ne_bytes().to_vec();
/// file.extend_from_slice(&[0; 4]);
/// file.extend_from_slice(&entry);
/// std::fs::write(dir.join("counter_1.db"), &file)?;
/// std::fs::write(dir.join("counter_2.db"), &file)?;
///
/// let merged = read_dir(&dir)?;
/// assert!(merged.errors.is_empty(), "{:?}", merged.errors);
/// assert_eq!(
///     merged.to_text(),
///     "# HELP jobs_total Jobs done\n# TYPE jobs_total counter\njobs_total 10.0\n"
/// );
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
pub fn read_dir(dir: &Path) -> Result<Merged, DirError> {
    read_dir_with(dir, DeadWorkers::default())
}

/// [`read_dir`], choosing what a dead worker's `live*` gauge files count for.
pub fn read_dir_with(dir: &Path, dead: DeadWorkers) -> Result<Merged, DirError> {
    read_dir_with_liveness(dir, dead, files::alive)
}

/// [`read_dir_with`], with `alive` saying whether the worker a file is
/// named after runs (asked once per pid). The files are named after each
/// worker's pid in its own pid namespace: for a directory of workers in
/// another pid namespace (a container's), `/proc/<pid>` of the reader
/// names other processes, and `alive` must look the pid up in theirs.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use topdeck_portholes::prommp::{read_dir_with_liveness, DeadWorkers};
///
/// let dir = std::env::temp_dir().join(format!("prommp-liveness-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// std::fs::write(dir.join("counter_7.db"), 8i32.to_ne_bytes().iter().chain(&[0; 4]).copied().collect::<Vec<u8>>())?;
/// // Worker 7 runs in the container's pid namespace, whatever pid 7 is here.
/// let merged = read_dir_with_liveness(&dir, DeadWorkers::default(), |pid| pid == 7)?;
/// assert_eq!((merged.files[0].pid, merged.files[0].alive), (7, true));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
pub fn read_dir_with_liveness(
    dir: &Path,
    dead: DeadWorkers,
    alive_pid: impl FnMut(u32) -> bool,
) -> Result<Merged, DirError> {
    let handle = files::open_dir(dir).map_err(|source| DirError::List {
        path: dir.to_path_buf(),
        source,
    })?;
    read_open_dir(&handle, dir, dead, alive_pid)
}

/// [`read_dir_with_liveness`] on a directory already open as `handle`
/// (shown as `dir`): listed and its files opened through the descriptor,
/// never by path, so a directory found in a container and opened inside
/// its root (see `topdeck_procfs::root::open_dir_in`) is the one read.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use topdeck_portholes::prommp::{read_open_dir, DeadWorkers};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("counter_7.db"), 8i32.to_ne_bytes().iter().chain(&[0; 4]).copied().collect::<Vec<u8>>())?;
/// let handle = std::fs::File::open(dir.path())?;
/// let merged = read_open_dir(&handle, dir.path(), DeadWorkers::default(), |_| true)?;
/// assert_eq!(merged.files[0].path, dir.path().join("counter_7.db"));
/// # Ok(())
/// # }
/// ```
pub fn read_open_dir(
    handle: &impl AsFd,
    dir: &Path,
    dead: DeadWorkers,
    mut alive_pid: impl FnMut(u32) -> bool,
) -> Result<Merged, DirError> {
    let too_large = |why: String| DirError::TooLarge {
        path: dir.to_path_buf(),
        why,
    };
    let (names, complete) =
        budget::names_up_to(handle, budget::MAX_NAMES_PER_DIR).map_err(|source| {
            DirError::List {
                path: dir.to_path_buf(),
                source,
            }
        })?;
    let names: Vec<&str> = names
        .iter()
        .filter_map(|name| name.to_str())
        .filter(|name| name.ends_with(".db") && !name.starts_with('.'))
        .collect();
    // Counted before any is opened: the budget is the same at every look,
    // never a matter of timing, so a directory is merged whole or not.
    if !complete || names.len() > budget::MAX_FILES_PER_DIR {
        let more = if complete { "" } else { " or more" };
        return Err(too_large(format!(
            "it holds {}{more} *.db files, more than the {} one look reads from a directory",
            names.len(),
            budget::MAX_FILES_PER_DIR
        )));
    }
    let mut merger = merge::Merger::new();
    merger.keys().max_keys = Some(MAX_KEYS_PER_DIR);
    let mut files = Vec::new();
    let mut errors = Vec::new();
    let mut spent = budget::DirBudget::new();
    let mut copied = 0u64;
    let mut alive = std::collections::HashMap::new();
    let mut bytes = Vec::new();
    // Bytes in use in the last file of each kind: the files of one kind
    // hold about the same keys, so this is how much to read at first.
    let mut guesses: Vec<(Kind, usize)> = Vec::new();
    for name in names {
        let path = dir.join(name);
        let read = files::name_kind_pid(name).and_then(|(kind, pid_text, pid)| {
            let guess = guesses.iter().find(|(k, _)| *k == kind).map_or(0, |g| g.1);
            let room = MAX_BYTES_PER_DIR - copied;
            if let Copy::OverBudget { want } =
                files::copy_into(handle, name, guess, room, &mut bytes)?
            {
                return Ok(Err(format!(
                    "its files hold more than the {} MiB of keys one look copies from a directory ({name} alone {want} bytes)",
                    MAX_BYTES_PER_DIR >> 20
                )));
            }
            copied += bytes.len() as u64;
            match guesses.iter_mut().find(|(k, _)| *k == kind) {
                Some(g) => g.1 = bytes.len(),
                None => guesses.push((kind, bytes.len())),
            }
            match parse::parse_keyed(&bytes, merger.keys()) {
                Ok(entries) => Ok(Ok((kind, pid_text, pid, entries))),
                Err(ParseError::TooManyKeys { max, .. }) => Ok(Err(format!(
                    "its files hold more than the {max} distinct keys one look decodes from a directory"
                ))),
                Err(e) => Err(e.to_string()),
            }
        });
        match read {
            Ok(Ok((kind, pid_text, pid, entries))) => {
                let alive = *alive.entry(pid).or_insert_with(|| pid != 0 && alive_pid(pid));
                let live_gauge = matches!(kind, Kind::Gauge(m) if m.is_live());
                let merged = alive || !live_gauge || dead == DeadWorkers::KeepAll;
                files.push(DbFile {
                    path,
                    kind,
                    pid,
                    alive,
                    entries: entries.len(),
                    merged,
                });
                if merged {
                    merger.add(kind, &pid_text, &entries);
                }
            }
            Ok(Err(over)) => return Err(too_large(over)),
            Err(why) if spent.error() => errors.push(FileError {
                path,
                why: format!("{why}; this reader left it out and merged the directory's other files without it"),
            }),
            Err(_) => {}
        }
    }
    if let Some(why) = spent.summary(true) {
        errors.push(FileError {
            path: dir.to_path_buf(),
            why: format!("{why}; each was left out of the merge"),
        });
    }
    let (families, skipped) = merger.finish();
    errors.extend(skipped.into_iter().map(|why| FileError {
        path: dir.to_path_buf(),
        why,
    }));
    Ok(Merged {
        families,
        files,
        errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `*.db` file holding one sample `value` of `key` (a JSON key as
    /// prometheus_client writes it).
    fn db(key: &str, value: f64) -> Vec<u8> {
        let mut entry = (key.len() as i32).to_ne_bytes().to_vec();
        entry.extend_from_slice(key.as_bytes());
        // As upstream pads: 1 to 8 spaces, 8 when already aligned.
        entry.resize(entry.len() + 8 - entry.len() % 8, b' ');
        entry.extend_from_slice(&value.to_ne_bytes());
        entry.extend_from_slice(&0.0f64.to_ne_bytes());
        let mut file = ((8 + entry.len()) as i32).to_ne_bytes().to_vec();
        file.extend_from_slice(&[0; 4]);
        file.extend_from_slice(&entry);
        file
    }

    #[test]
    fn the_liveness_given_decides_which_live_gauges_merge_and_is_asked_once_per_pid() {
        let dir = tempfile::tempdir().unwrap();
        let gauge = r#"["busy", "busy", {}, "Busy"]"#;
        let counter = r#"["jobs", "jobs_total", {}, "Jobs"]"#;
        for pid in [7, 8] {
            std::fs::write(
                dir.path().join(format!("gauge_livesum_{pid}.db")),
                db(gauge, 1.0),
            )
            .unwrap();
            std::fs::write(
                dir.path().join(format!("counter_{pid}.db")),
                db(counter, 2.0),
            )
            .unwrap();
        }
        // Pids 7 and 8 of another pid namespace: 7 runs there, 8 does not,
        // whatever this reader's pids 7 and 8 are.
        let mut asked = Vec::new();
        let merged = read_dir_with_liveness(dir.path(), DeadWorkers::default(), |pid| {
            asked.push(pid);
            pid == 7
        })
        .unwrap();
        assert!(merged.errors.is_empty(), "{:?}", merged.errors);
        asked.sort_unstable();
        assert_eq!(asked, [7, 8]);
        for f in &merged.files {
            assert_eq!(f.alive, f.pid == 7, "{f:?}");
            let live_gauge = matches!(f.kind, Kind::Gauge(_));
            assert_eq!(f.merged, f.pid == 7 || !live_gauge, "{f:?}");
        }
        let text = merged.to_text();
        assert!(text.contains("\nbusy 1.0\n"), "{text}");
        assert!(text.contains("\njobs_total 4.0\n"), "{text}");
        // Everyone dead: the gauge has no worker left, the counters count.
        let merged = read_dir_with_liveness(dir.path(), DeadWorkers::default(), |_| false).unwrap();
        assert!(merged.files.iter().all(|f| !f.alive));
        assert!(!merged.to_text().contains("\nbusy "));
        assert!(merged.to_text().contains("\njobs_total 4.0\n"));
    }
}
