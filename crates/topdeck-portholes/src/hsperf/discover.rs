// SPDX-License-Identifier: Apache-2.0
//! Finding JVMs' hsperfdata files, on the host and in containers, and
//! telling a live JVM's file from a stale one without taking a lock (a
//! reader's lock at the instant a new JVM reuses the pid would disable that
//! JVM's shared counters).
//!
//! As `jps` does, every process's `/proc/<pid>/root/tmp` is scanned, once
//! per view of the file system (mount namespace and root directory): a
//! containerised JVM's file is named after its pid in its own pid
//! namespace, and its host pid is the process with the same view whose
//! `NSpid` ends with that name.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::error::{Error, Result};
use super::file::{read, HsperfDir};
use super::PerfData;

/// Prefix of the per-user directories in a `/tmp`.
const DIR_PREFIX: &str = "hsperfdata_";
/// Slack between a process's start (whole seconds of `btime` plus clock
/// ticks) and its file's change time, for [`Liveness::Running`].
const START_SLACK_SECS: i64 = 2;

/// What [`discover`] found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// The files found, live or stale, in path order.
    pub jvms: Vec<Jvm>,
    /// Directories and files that could not be looked at (often permission:
    /// another user's `hsperfdata_<user>` directory is readable only by
    /// root), each with its path.
    pub errors: Vec<Error>,
}

/// One hsperfdata file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jvm {
    /// The file, through `/proc/<pid>/root` for another mount namespace.
    pub path: PathBuf,
    /// The user of its directory name (`hsperfdata_<user>`).
    pub user: String,
    /// Its name: the JVM's pid in its own pid namespace.
    pub pid: u32,
    /// The JVM's pid as this process sees it, when a process with the
    /// file's root and that namespace pid exists.
    pub host_pid: Option<u32>,
    /// Whether a JVM still owns the file.
    pub liveness: Liveness,
}

/// Whether the file belongs to a running JVM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// `/proc/locks` lists the JVM's `flock` on it (JDK 17.0.x and later
    /// take one); `holder` is the locker's pid, `None` when it is in
    /// another pid namespace (the kernel shows 0). On overlayfs the lock
    /// is listed on the underlying file's device, so a container's JVM may
    /// show as [`Liveness::Running`] instead.
    Locked {
        /// The pid holding the lock, as /proc/locks shows it.
        holder: Option<u32>,
    },
    /// Not locked (an older JDK), but [`Jvm::host_pid`] is a process that
    /// started before the file last changed.
    Running,
    /// No JVM owns it: a JVM killed with SIGKILL leaves its file behind.
    Stale,
}

impl Jvm {
    /// Copies and parses the file.
    pub fn read(&self) -> Result<PerfData> {
        read(&self.path)
    }
}

/// Lists the hsperfdata files of this host's JVMs and its containers'.
///
/// ```no_run
/// let found = topdeck_portholes::hsperf::discover();
/// for jvm in &found.jvms {
///     println!("{} {:?} {:?}", jvm.path.display(), jvm.host_pid, jvm.liveness);
/// }
/// for error in &found.errors {
///     eprintln!("{error}");
/// }
/// ```
pub fn discover() -> Discovery {
    let mut found = Discovery::default();
    let procs = processes();
    let locks = flocks(&fs::read_to_string("/proc/locks").unwrap_or_default());
    let boot = boot_time();
    let mut roots: BTreeMap<View, (PathBuf, Vec<&Process>)> = BTreeMap::new();
    if let Some(own) = view(Path::new("/proc/self")) {
        roots.insert(own, (PathBuf::from("/"), Vec::new()));
    }
    for process in &procs {
        roots
            .entry(process.view)
            .or_insert_with(|| {
                (
                    Path::new("/proc")
                        .join(process.pid.to_string())
                        .join("root"),
                    Vec::new(),
                )
            })
            .1
            .push(process);
    }
    let mut seen = HashSet::new();
    for (prefix, members) in roots.values() {
        let tmp = prefix.join("tmp");
        let listing = match fs::read_dir(&tmp) {
            Ok(listing) => listing,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                found
                    .errors
                    .push(Error::io("listing the directory", &tmp, e));
                continue;
            }
        };
        let mut dirs: Vec<(PathBuf, String)> = listing
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                let user = name.strip_prefix(DIR_PREFIX)?.to_owned();
                Some((tmp.join(&name), user))
            })
            .collect();
        dirs.sort();
        for (dir_path, user) in dirs {
            let dir = match HsperfDir::open(&dir_path).and_then(|d| Ok((d.pids()?, d))) {
                Ok(dir) => dir,
                Err(e) => {
                    found.errors.push(e);
                    continue;
                }
            };
            let (pids, dir) = dir;
            for pid in pids {
                let meta = match dir.open_file(pid.to_string().as_ref()) {
                    Ok((_, meta)) => meta,
                    Err(e) => {
                        found.errors.push(e);
                        continue;
                    }
                };
                if !seen.insert((meta.dev(), meta.ino())) {
                    continue;
                }
                let host = members.iter().find(|p| p.nspid == pid);
                let liveness = match locks.get(&(dev_major_minor(meta.dev()), meta.ino())) {
                    Some(&holder) => Liveness::Locked {
                        holder: (holder != 0).then_some(holder),
                    },
                    None => match (host, boot) {
                        (Some(p), Some(boot))
                            if p.started(boot) <= meta.ctime() + START_SLACK_SECS =>
                        {
                            Liveness::Running
                        }
                        _ => Liveness::Stale,
                    },
                };
                found.jvms.push(Jvm {
                    path: dir_path.join(pid.to_string()),
                    user: user.clone(),
                    pid,
                    host_pid: host.map(|p| p.pid),
                    liveness,
                });
            }
        }
    }
    found
}

/// What discovery needs of a process.
#[derive(Debug)]
struct Process {
    pid: u32,
    /// How it sees the file system.
    view: View,
    /// Its pid in its own (innermost) pid namespace.
    nspid: u32,
    /// Clock ticks from boot to its start.
    start_ticks: u64,
}

impl Process {
    /// Seconds since the epoch at which it started.
    fn started(&self, boot: i64) -> i64 {
        // SAFETY: sysconf reads a constant and touches no memory of ours.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        boot.saturating_add(i64::try_from(self.start_ticks / ticks).unwrap_or(i64::MAX))
    }
}

/// A view of the file system: the inode of a process's mount namespace,
/// and the device and inode of its root directory (a chroot in the same
/// namespace sees another `/tmp`; another namespace may mount its own `/tmp`
/// over the same root).
type View = (u64, u64, u64);

/// The view of the process whose /proc directory is `dir`.
fn view(dir: &Path) -> Option<View> {
    let mnt = fs::metadata(dir.join("ns/mnt")).ok()?;
    let root = fs::metadata(dir.join("root")).ok()?;
    Some((mnt.ino(), root.dev(), root.ino()))
}

/// Every process whose root, status and stat this process may read
/// (others are skipped: an unprivileged reader cannot see other users'
/// roots, and their files are not readable to it anyway).
fn processes() -> Vec<Process> {
    let Ok(listing) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    listing
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let dir = Path::new("/proc").join(pid.to_string());
            let view = view(&dir)?;
            let status = fs::read_to_string(dir.join("status")).ok()?;
            let stat = fs::read_to_string(dir.join("stat")).ok()?;
            Some(Process {
                pid,
                view,
                nspid: innermost_nspid(&status).unwrap_or(pid),
                start_ticks: start_ticks(&stat)?,
            })
        })
        .collect()
}

/// The last field of the `NSpid:` line of /proc/<pid>/status.
fn innermost_nspid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// Field 22 (`starttime`) of /proc/<pid>/stat, counted after the command
/// name, which may hold spaces and parentheses.
fn start_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// `btime` of /proc/stat: the boot time in seconds since the epoch.
fn boot_time() -> Option<i64> {
    fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime"))?
        .trim()
        .parse()
        .ok()
}

/// The `(major, minor)` of a `st_dev`, as glibc's `gnu_dev_major` and
/// `gnu_dev_minor` split it.
fn dev_major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

/// Granted `FLOCK … WRITE` locks of /proc/locks, by ((major, minor), inode),
/// to the holder's pid (0 when it is in another pid namespace). Lines look
/// like `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF`, device numbers
/// in hex; waiters (`1: -> FLOCK …`) are skipped.
fn flocks(text: &str) -> HashMap<((u64, u64), u64), u32> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, "FLOCK", _, "WRITE", pid, id, ..] = fields.as_slice() else {
                return None;
            };
            let mut parts = id.split(':');
            let major = u64::from_str_radix(parts.next()?, 16).ok()?;
            let minor = u64::from_str_radix(parts.next()?, 16).ok()?;
            let inode = parts.next()?.parse().ok()?;
            Some((((major, minor), inode), pid.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flocks_keeps_granted_write_flocks_and_skips_waiters_and_posix_locks() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 99 08:01:1234567 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 77 00:1a:55 0 EOF\n\
                    3: FLOCK  ADVISORY  READ 5 08:01:9 0 EOF\n\
                    4: FLOCK  ADVISORY  WRITE 0 00:2f:31 0 EOF\n";
        let locks = flocks(text);
        assert_eq!(locks.len(), 2);
        assert_eq!(locks.get(&((8, 1), 1_234_567)), Some(&4242));
        assert_eq!(locks.get(&((0, 0x2f), 31)), Some(&0));
    }

    #[test]
    fn start_ticks_counts_fields_after_a_command_name_with_spaces() {
        let stat = "42 (java (main) x) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 9 0 123456 7 8";
        assert_eq!(start_ticks(stat), Some(123_456));
    }

    #[test]
    fn innermost_nspid_is_the_last_field() {
        assert_eq!(innermost_nspid("Name:\tjava\nNSpid:\t31337\t1\n"), Some(1));
        assert_eq!(innermost_nspid("NSpid:\t8\n"), Some(8));
    }

    #[test]
    fn dev_major_minor_splits_as_glibc_does() {
        assert_eq!(dev_major_minor(0x801), (8, 1));
        assert_eq!(dev_major_minor(0x1000_0010_0302), (0x1003, 0x102));
    }
}
