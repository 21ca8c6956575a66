// SPDX-License-Identifier: Apache-2.0
//! What the looks need of other processes: their names, their host pids,
//! and the prometheus_client directories their environments name.

use std::collections::HashMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use topdeck_procfs::process;
use topdeck_procfs::table::Table;
use topdeck_procfs::writer;

/// The variables prometheus_client takes its directory from, current
/// spelling first (the lower-case one is its deprecated alias).
pub(crate) const PROMMP_VARS: &[&str] = &["PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"];

/// A process's name (`comm`).
pub(crate) fn comm(pid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let name = text.trim_end_matches('\n');
    (!name.is_empty()).then(|| name.to_owned())
}

/// What a process's environment names, kept between looks by
/// [`EnvironCache`].
type Named = Option<PathBuf>;

/// The environment variables already read, by process and program: the
/// pid, its start time and where its environment lies in its memory
/// (`env_start`, `env_end` of its `stat`). A process's `environ` is the
/// environment it `exec`ed with, which later `setenv` calls do not change;
/// an `exec` starts a new program at a new place (the start time stays,
/// the addresses move), and a reused pid has another start time: either
/// is read afresh. So at every look after the first, a process already
/// seen costs one read of its `stat`, not of its environment (which takes
/// the target's memory map lock, and is the larger read). What a process
/// does to its own environment's memory after it started (a
/// `setproctitle` writing a title over it) is not seen: the value kept is
/// the one it started with, which is the one that names its directory.
#[derive(Debug, Default)]
pub(crate) struct EnvironCache {
    /// Whether a look has been made: the first look of a program that
    /// looks once (`ls`) reads environments directly, not paying a
    /// `stat` per process for a cache it will not use.
    warm: bool,
    named: HashMap<(u32, u64, (u64, u64)), Named>,
}

impl EnvironCache {
    /// The first of `vars` that `pid`'s environment sets to an absolute
    /// path; `None` when none does or it cannot be read.
    fn named(
        &self,
        now: &mut HashMap<(u32, u64, (u64, u64)), Named>,
        table: &Table,
        pid: u32,
        vars: &[&str],
        buf: &mut Vec<u8>,
    ) -> Named {
        if !self.warm {
            return environ_var(pid, vars, buf);
        }
        let Some(stat) = table.stat(pid) else {
            return environ_var(pid, vars, buf);
        };
        let key = (pid, stat.start_ticks, stat.env);
        if let Some(named) = self.named.get(&key) {
            now.insert(key, named.clone());
            return named.clone();
        }
        // A kernel thread has no environment to read.
        let named = if stat.kernel_thread {
            None
        } else {
            environ_var(pid, vars, buf)
        };
        now.insert(key, named.clone());
        named
    }
}

/// The directories that running processes' environments name in one of
/// `vars`, each once (by device and inode), with the oldest process naming
/// it among those running as its owner (a pre-forking server's master;
/// a process of another user naming it is not its user), and the directory opened, to be read
/// through that descriptor. A process in another mount namespace has its
/// directory shown through `/proc/<pid>/root` and opened inside that root:
/// a link there (the variable naming `/tmp/prom`, a link to
/// `/var/lib/host-stuff`) leads where it leads in the container, never to
/// this reader's files of that name. Processes whose
/// environment this reader may not read are skipped: only their owner and
/// root may, as only they may see its view, so only `table`'s processes
/// are asked. `cache` keeps what was read for the next look.
pub(crate) fn environ_dirs(
    table: &Table,
    vars: &[&str],
    cache: &mut EnvironCache,
) -> Vec<(PathBuf, u32, fs::File)> {
    let own_ns = table.own_view().map(|v| v.namespace);
    let mut seen: HashMap<(u64, u64), (usize, u64)> = HashMap::new();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut now = HashMap::new();
    for pid in table.pids() {
        let Some(dir) = cache.named(&mut now, table, pid, vars, &mut buf) else {
            continue;
        };
        // Another view's directory is opened inside its root, through this
        // process while it is still in that view.
        let (path, opened) = match table.view_of(pid).filter(|v| Some(v.namespace) != own_ns) {
            Some(view) => (
                PathBuf::from(format!("/proc/{pid}/root"))
                    .join(dir.strip_prefix("/").unwrap_or(&dir)),
                topdeck_procfs::root::open_dir_in_view(pid, &view, &dir),
            ),
            None => {
                let opened = topdeck_procfs::root::open_dir(&dir);
                (dir, opened)
            }
        };
        let Ok(opened) = opened.map(fs::File::from) else {
            continue;
        };
        let Ok(meta) = opened.metadata() else {
            continue;
        };
        // Only a process running as the directory's owner is taken as its
        // user, as a JVM's or a driver's must be its file's: anyone may
        // name anyone's directory in their environment, and would
        // otherwise lend it their process name, pid and life.
        if !writer::check(table, pid, Some(meta.uid()), writer::Start::Any).could() {
            continue;
        }
        // The oldest process naming it stands for it: a pre-forking
        // server's master, whatever its workers do (a worker respawned
        // under a lower pid does not take its place).
        let started = table.start_ticks(pid).unwrap_or(u64::MAX);
        match seen.get(&(meta.dev(), meta.ino())) {
            None => {
                seen.insert((meta.dev(), meta.ino()), (out.len(), started));
                out.push((path, pid, opened));
            }
            Some(&(at, first)) if started < first => {
                seen.insert((meta.dev(), meta.ino()), (at, started));
                out[at] = (path, pid, opened);
            }
            Some(_) => {}
        }
    }
    // Only the processes of this look are kept: the others are gone.
    cache.named = now;
    cache.warm = true;
    out
}

/// The value of the first of `vars` set in `pid`'s environment, if it is
/// an absolute path. The environment is read once for all of `vars`.
fn environ_var(pid: u32, vars: &[&str], buf: &mut Vec<u8>) -> Option<PathBuf> {
    let n = process::read_environ(pid, buf).ok()?;
    let bytes = &buf[..n];
    vars.iter().find_map(|var| {
        let value = process::parse_environ_var(bytes, var)?;
        let path = Path::new(std::ffi::OsStr::from_bytes(value.as_bytes()));
        path.is_absolute().then(|| path.to_path_buf())
    })
}

/// Whether `pid` is in this reader's pid namespace; `false` when that
/// cannot be told (it is gone, or the reader may not inspect it).
pub(crate) fn in_own_pid_ns(pid: u32) -> bool {
    let ns = |path: String| fs::metadata(path).ok().map(|m| m.ino());
    let theirs = ns(format!("/proc/{pid}/ns/pid"));
    theirs.is_some() && theirs == ns("/proc/self/ns/pid".to_owned())
}

/// Whether the worker that is `pid` in the pid namespace of `via` (the
/// process whose environment named a prometheus_client directory: its
/// workers write their files under their pids there) runs: a process of
/// `table` in that namespace has `pid` as its innermost pid. In this
/// reader's own namespace, or when `via`'s cannot be read (it is gone),
/// `/proc/<pid>` exists, as prometheus_client's own reading would have it.
pub(crate) fn worker_alive(table: &Table, via: u32, pid: u32) -> bool {
    let theirs = table.pid_ns(via);
    if theirs.is_none() || theirs == table.own_pid_ns() {
        return writer::runs(table, pid, None);
    }
    writer::host_pids(table, table.pids(), pid).any(|p| table.pid_ns(p) == theirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `sleep` started with `PROMETHEUS_MULTIPROC_DIR` naming a new
    /// directory, once it has exec'd.
    fn worker() -> (tempfile::TempDir, std::process::Child) {
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new("sleep")
            .arg("30")
            .env("PROMETHEUS_MULTIPROC_DIR", dir.path())
            .spawn()
            .unwrap();
        wait_for_exec(child.id(), dir.path());
        (dir, child)
    }

    /// Waits until `pid` has exec'd with `PROMETHEUS_MULTIPROC_DIR=dir`:
    /// until then its environment is its parent's (or, during the exec,
    /// empty), and a look that fast would rightly not find it.
    fn wait_for_exec(pid: u32, dir: &Path) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while process::environ_var(pid, PROMMP_VARS[0])
            .unwrap()
            .as_deref()
            != Some(dir.as_os_str())
        {
            assert!(std::time::Instant::now() < deadline, "{pid} never exec'd");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn a_child_with_the_variable_names_its_directory() {
        let (dir, mut child) = worker();
        let found = environ_dirs(&Table::scan(), PROMMP_VARS, &mut EnvironCache::default());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            found
                .iter()
                .any(|(d, pid, _)| d == dir.path() && *pid == child.id()),
            "{found:?}"
        );
        assert!(comm(std::process::id()).is_some());
    }

    #[test]
    fn a_warm_cache_answers_for_the_same_program_and_reads_a_new_one() {
        let (dir, mut child) = worker();
        let pid = child.id();
        let mut cache = EnvironCache::default();
        let cold = environ_dirs(&Table::scan(), PROMMP_VARS, &mut cache);
        let warm = environ_dirs(&Table::scan(), PROMMP_VARS, &mut cache);
        // What the cache holds for the child is what a third look uses:
        // planted, it proves the environment was not read again.
        let table = Table::scan();
        let stat = table.stat(pid).unwrap();
        let planted = tempfile::tempdir().unwrap();
        let key = (pid, stat.start_ticks, stat.env);
        assert!(cache.named.contains_key(&key), "the second look keeps it");
        cache.named.insert(key, Some(planted.path().to_path_buf()));
        let cached = environ_dirs(&table, PROMMP_VARS, &mut cache);
        // Another program (other env addresses) under the same pid and
        // start time is read afresh.
        let other = (pid, stat.start_ticks, (stat.env.0 + 8, stat.env.1 + 8));
        cache.named = HashMap::from([(other, Some(planted.path().to_path_buf()))]);
        let fresh = environ_dirs(&Table::scan(), PROMMP_VARS, &mut cache);
        child.kill().unwrap();
        child.wait().unwrap();
        let named = |found: &[(PathBuf, u32, fs::File)], dir: &Path| {
            found.iter().any(|(d, p, _)| d == dir && *p == pid)
        };
        assert!(named(&cold, dir.path()), "{cold:?}");
        assert!(named(&warm, dir.path()), "{warm:?}");
        assert!(named(&cached, planted.path()), "{cached:?}");
        assert!(!named(&cached, dir.path()), "{cached:?}");
        assert!(named(&fresh, dir.path()), "{fresh:?}");
    }

    #[test]
    fn workers_in_another_pid_namespace_are_alive_by_their_pid_there() {
        if process::status(None).map(|s| s.euid) != Some(0) {
            eprintln!("SKIPPED: a new pid namespace needs root; run the tests as root");
            return;
        }
        // A "server" (sh, pid 1 there) with a "worker" (sleep) in a new pid
        // namespace, as a container's would be.
        let mut server = std::process::Command::new("unshare")
            .args([
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
                "sh",
                "-c",
                "sleep 30 & wait",
            ])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut inside = None;
        while inside.is_none() && std::time::Instant::now() < deadline {
            let table = Table::scan();
            inside = table.pids().find_map(|p| {
                let s = table.status(p)?;
                (s.nspid.len() >= 2
                    && s.innermost_pid() == Some(2)
                    && comm(p).as_deref() == Some("sleep"))
                .then_some(p)
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let table = Table::scan();
        let facts = inside.map(|worker| {
            (
                worker_alive(&table, worker, 2),
                worker_alive(&table, worker, 1),
                worker_alive(&table, worker, std::process::id()),
                worker_alive(&table, std::process::id(), std::process::id()),
            )
        });
        let _ = server.kill();
        let _ = server.wait();
        let Some(facts) = facts else {
            if std::env::var_os("CI").is_some() {
                panic!(
                    "no worker appeared in a new pid namespace (unshare --pid --fork --mount-proc)"
                );
            }
            eprintln!("SKIPPED: unshare --pid --fork --mount-proc started no worker here");
            return;
        };
        // 2 and 1 run there; this test's pid is another process's there
        // (or none), though /proc/<it> exists here.
        assert_eq!(facts, (true, true, false, true));
    }
}
