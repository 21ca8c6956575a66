// SPDX-License-Identifier: Apache-2.0
//! What the looks need of other processes: their names, their host pids,
//! and the prometheus_client directories their environments name.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use topdeck_procfs::{process, view};

/// The variables prometheus_client takes its directory from, current
/// spelling first (the lower-case one is its deprecated alias).
pub(crate) const PROMMP_VARS: &[&str] = &["PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"];

/// A process's name (`comm`).
pub(crate) fn comm(pid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let name = text.trim_end_matches('\n');
    (!name.is_empty()).then(|| name.to_owned())
}

/// The directories that running processes' environments name in one of
/// `vars`, each once (by device and inode), with the lowest pid naming it
/// (a pre-forking server's parent). A process in another mount namespace
/// has its directory reached through `/proc/<pid>/root`. Processes whose
/// environment this reader may not read are skipped: only their owner and
/// root may.
pub(crate) fn environ_dirs(vars: &[&str]) -> Vec<(PathBuf, u32)> {
    let Ok(listing) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own_ns = fs::metadata("/proc/self/ns/mnt").map(|m| m.ino()).ok();
    let mut pids: Vec<u32> = listing
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for pid in pids {
        let Some(dir) = environ_var(pid, vars) else {
            continue;
        };
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let ns = fs::metadata(proc_dir.join("ns/mnt")).map(|m| m.ino()).ok();
        let path = if ns.is_some() && ns != own_ns {
            proc_dir
                .join("root")
                .join(dir.strip_prefix("/").unwrap_or(&dir))
        } else {
            dir
        };
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() && seen.insert((meta.dev(), meta.ino())) {
            out.push((path, pid));
        }
    }
    out
}

/// The value of the first of `vars` set in `pid`'s environment, if it is
/// an absolute path. The environment is read once for all of `vars`.
fn environ_var(pid: u32, vars: &[&str]) -> Option<PathBuf> {
    let file = fs::File::open(format!("/proc/{pid}/environ")).ok()?;
    let mut bytes = Vec::new();
    file.take(process::MAX_ENVIRON as u64)
        .read_to_end(&mut bytes)
        .ok()?;
    vars.iter().find_map(|var| {
        let value = process::parse_environ_var(&bytes, var)?;
        let path = Path::new(std::ffi::OsStr::from_bytes(value.as_bytes()));
        path.is_absolute().then(|| path.to_path_buf())
    })
}

/// The host pid of the process that is `nspid` in its own pid namespace
/// and shares the view of the file system of `via` (a process through
/// whose root a file was found). `None` when none does, or when the
/// reader may not inspect them.
pub(crate) fn host_pid(via: u32, nspid: u32) -> Option<u32> {
    let wanted = view::of(Some(via)).ok()?;
    let views = view::all();
    views
        .members
        .get(&wanted)?
        .iter()
        .copied()
        .find(|&pid| process::status(Some(pid)).and_then(|s| s.innermost_pid()) == Some(nspid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_with_the_variable_names_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("PROMETHEUS_MULTIPROC_DIR", dir.path())
            .spawn()
            .unwrap();
        let found = environ_dirs(PROMMP_VARS);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            found
                .iter()
                .any(|(d, pid)| d == dir.path() && *pid == child.id()),
            "{found:?}"
        );
        assert!(comm(std::process::id()).is_some());
    }
}
