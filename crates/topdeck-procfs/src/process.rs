// SPDX-License-Identifier: Apache-2.0
//! Facts about one process: when it started (to tell a reused pid from
//! the original), who it runs as, its pid in each pid namespace, and one
//! variable of its environment.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most bytes of `/proc/<pid>/environ` read: the kernel's own limit on
/// the arguments and environment of an `execve` is a quarter of the stack
/// limit, 2 MiB by default; a bigger one is not read past this.
pub const MAX_ENVIRON: usize = 2 << 20;

/// `/proc/<pid>`, or `/proc/self` for `None`.
fn dir(pid: Option<u32>) -> PathBuf {
    match pid {
        Some(p) => PathBuf::from(format!("/proc/{p}")),
        None => PathBuf::from("/proc/self"),
    }
}

/// Start time of `pid` (this process for `None`) in clock ticks since
/// boot, from its `stat`; `None` if it is gone or unreadable. The clock is
/// the reader's: a process in a time namespace with a boot-time offset
/// sees its own start shifted by that offset.
///
/// ```
/// let mine = topdeck_procfs::process::start_ticks(None).unwrap();
/// assert_eq!(topdeck_procfs::process::start_ticks(Some(std::process::id())), Some(mine));
/// ```
pub fn start_ticks(pid: Option<u32>) -> Option<u64> {
    parse_start_ticks(&std::fs::read_to_string(dir(pid).join("stat")).ok()?)
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` text. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after
/// its last `)`.
///
/// ```
/// let stat = "42 (java (main) x) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 9 0 123456 7 8";
/// assert_eq!(topdeck_procfs::process::parse_start_ticks(stat), Some(123_456));
/// ```
pub fn parse_start_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name come field 3 (state) onwards; field 22 is the 20th of them.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// `btime` of `/proc/stat`: when this system booted, in seconds since
/// the epoch (as the reader's clock has it now: a clock stepped since boot
/// moves it).
///
/// ```
/// let boot = topdeck_procfs::process::boot_time().unwrap();
/// assert!(boot > 0);
/// ```
pub fn boot_time() -> Option<i64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime"))?
        .trim()
        .parse()
        .ok()
}

/// When a process that started `start_ticks` (see [`start_ticks`]) after a
/// boot at `boot` (see [`boot_time`]) started, to the clock tick: never
/// later than it really started, since `btime` is rounded down to the
/// second and the ticks are whole ones.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use topdeck_procfs::process::{boot_time, start_ticks, started_at};
///
/// let me = started_at(start_ticks(None).unwrap(), boot_time().unwrap());
/// let now = SystemTime::now();
/// assert!(me <= now && me > now - Duration::from_secs(3600), "{me:?} {now:?}");
/// ```
pub fn started_at(start_ticks: u64, boot: i64) -> SystemTime {
    let hz = rustix::param::clock_ticks_per_second().max(1);
    let boot = match u64::try_from(boot) {
        Ok(after) => UNIX_EPOCH.checked_add(Duration::from_secs(after)),
        Err(_) => UNIX_EPOCH.checked_sub(Duration::from_secs(boot.unsigned_abs())),
    };
    let since_boot = Duration::from_secs(start_ticks / hz)
        + Duration::from_nanos((start_ticks % hz).saturating_mul(1_000_000_000) / hz);
    boot.and_then(|b| b.checked_add(since_boot))
        .unwrap_or(UNIX_EPOCH)
}

/// What topdeck reads from `/proc/<pid>/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Effective uid (second field of `Uid:`).
    pub euid: u32,
    /// Its pid in each pid namespace it is in, outermost (the reader's,
    /// when the reader is in the initial one) first (`NSpid:`); just the
    /// pid when the kernel predates the line.
    pub nspid: Vec<u32>,
}

impl Status {
    /// Its pid in its own (innermost) pid namespace: the pid it sees
    /// itself as, and writes into the files it makes.
    ///
    /// ```
    /// let s = topdeck_procfs::process::parse_status("Uid:\t0\t0\t0\t0\nNSpid:\t31337\t1\n").unwrap();
    /// assert_eq!(s.innermost_pid(), Some(1));
    /// ```
    pub fn innermost_pid(&self) -> Option<u32> {
        self.nspid.last().copied()
    }
}

/// The [`Status`] of `pid` (this process for `None`); `None` if it is
/// gone, unreadable, or the file lacks a `Uid:` line.
///
/// ```
/// let s = topdeck_procfs::process::status(None).unwrap();
/// assert_eq!(s.innermost_pid(), Some(std::process::id()));
/// ```
pub fn status(pid: Option<u32>) -> Option<Status> {
    let text = std::fs::read_to_string(dir(pid).join("status")).ok()?;
    let mut s = parse_status(&text)?;
    if s.nspid.is_empty() {
        s.nspid.extend(pid.or_else(|| Some(std::process::id())));
    }
    Some(s)
}

/// Parses a `/proc/<pid>/status` text; `None` without a `Uid:` line.
///
/// ```
/// let s = topdeck_procfs::process::parse_status("Name:\tx\nUid:\t1000\t0\t0\t0\nNSpid:\t8\n").unwrap();
/// assert_eq!((s.euid, s.nspid), (0, vec![8]));
/// ```
pub fn parse_status(text: &str) -> Option<Status> {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name));
    let euid = field("Uid:")?.split_whitespace().nth(1)?.parse().ok()?;
    let nspid = field("NSpid:")
        .map(|l| l.split_whitespace().map_while(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    Some(Status { euid, nspid })
}

/// The value of `name` in the environment `pid` started with (its
/// `environ`, which later `setenv` calls do not change), reading at most
/// [`MAX_ENVIRON`] bytes. `Ok(None)` when it is not set; an error when the
/// file cannot be read (another user's process, for a reader not root).
///
/// ```
/// // The test harness's environment is whatever cargo gave it; PATH is in it.
/// let path = topdeck_procfs::process::environ_var(std::process::id(), "PATH").unwrap();
/// assert_eq!(path, std::env::var_os("PATH"));
/// ```
pub fn environ_var(pid: u32, name: &str) -> io::Result<Option<OsString>> {
    let mut bytes = Vec::new();
    std::fs::File::open(dir(Some(pid)).join("environ"))?
        .take(MAX_ENVIRON as u64)
        .read_to_end(&mut bytes)?;
    Ok(parse_environ_var(&bytes, name))
}

/// Reads `pid`'s whole `environ` (at most [`MAX_ENVIRON`] bytes) into
/// `buf`, a buffer the caller reuses from process to process, and returns
/// its length: the environment is `buf[..n]`. `buf` is only ever grown
/// (and zeroed once, when it grows), so a scan of thousands of processes
/// neither allocates nor clears per process, and a read takes the whole
/// environment at once where a growing buffer takes one per doubling. The
/// kernel fills a read up to the end of the environment, so a read that
/// returns less than asked is the last.
///
/// ```
/// let mut buf = Vec::new();
/// let n = topdeck_procfs::process::read_environ(std::process::id(), &mut buf).unwrap();
/// let path = topdeck_procfs::process::parse_environ_var(&buf[..n], "PATH");
/// assert_eq!(path, std::env::var_os("PATH"));
/// ```
pub fn read_environ(pid: u32, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut file = std::fs::File::open(dir(Some(pid)).join("environ"))?;
    if buf.len() < 64 << 10 {
        buf.resize(64 << 10, 0);
    }
    let mut len = 0;
    loop {
        let end = buf.len().min(MAX_ENVIRON);
        if len == end {
            if end == MAX_ENVIRON {
                return Ok(len);
            }
            buf.resize((2 * end).min(MAX_ENVIRON), 0);
            continue;
        }
        match file.read(&mut buf[len..end]) {
            Ok(got) => {
                len += got;
                if len < end {
                    return Ok(len);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The value of `name` in an `environ` image (`NAME=value` entries, each
/// ended by a NUL; the last may lack it, cut short by the read limit). The
/// first of repeated entries wins, as `getenv` does.
///
/// ```
/// let env = b"A=1\0PROMETHEUS_MULTIPROC_DIR=/tmp/m\0A=2\0";
/// let v = topdeck_procfs::process::parse_environ_var(env, "PROMETHEUS_MULTIPROC_DIR");
/// assert_eq!(v, Some("/tmp/m".into()));
/// assert_eq!(topdeck_procfs::process::parse_environ_var(env, "A"), Some("1".into()));
/// assert_eq!(topdeck_procfs::process::parse_environ_var(env, "B"), None);
/// ```
pub fn parse_environ_var(environ: &[u8], name: &str) -> Option<OsString> {
    environ.split(|&b| b == 0).find_map(|entry| {
        let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(OsString::from_vec(value.to_vec()))
    })
}

/// The uid, as this reader sees it, of what `pid`'s user namespace calls
/// `uid` (its `uid_map`); `None` if unmapped or unreadable. A container
/// in a user namespace of its own names its users by its own uids.
///
/// ```
/// // This process's own user namespace maps its uids as it sees them.
/// let me = topdeck_procfs::process::status(None).unwrap().euid;
/// assert_eq!(topdeck_procfs::process::outer_uid(std::process::id(), me), Some(me));
/// ```
pub fn outer_uid(pid: u32, uid: u32) -> Option<u32> {
    parse_uid_map(
        &std::fs::read_to_string(dir(Some(pid)).join("uid_map")).ok()?,
        uid,
    )
}

/// `uid` through a `uid_map` text: lines of `inside outside count`.
///
/// ```
/// let map = "         0     100000      65536\n";
/// assert_eq!(topdeck_procfs::process::parse_uid_map(map, 0), Some(100_000));
/// assert_eq!(topdeck_procfs::process::parse_uid_map(map, 65_536), None);
/// ```
pub fn parse_uid_map(map: &str, uid: u32) -> Option<u32> {
    map.lines().find_map(|line| {
        let mut f = line.split_whitespace().map(|n| n.parse::<u64>().ok());
        let (inside, outside, count) = (f.next()??, f.next()??, f.next()??);
        let offset = u64::from(uid).checked_sub(inside).filter(|&o| o < count)?;
        u32::try_from(outside + offset).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_process_has_no_facts() {
        assert_eq!(start_ticks(Some(u32::MAX)), None);
        assert_eq!(status(Some(u32::MAX)), None);
        assert!(environ_var(u32::MAX, "PATH").is_err());
        assert!(read_environ(u32::MAX, &mut Vec::new()).is_err());
    }

    #[test]
    fn damaged_texts_are_none_not_a_panic() {
        assert_eq!(parse_start_ticks(""), None);
        assert_eq!(parse_start_ticks("1 (x) S 1 2"), None);
        assert_eq!(
            parse_start_ticks("1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -5"),
            None
        );
        assert_eq!(parse_status("NSpid:\t1\n"), None);
        assert_eq!(parse_status("Uid:\tx\n"), None);
        let no_nspid = parse_status("Uid:\t1\t2\t3\t4\n").unwrap();
        assert_eq!((no_nspid.euid, no_nspid.innermost_pid()), (2, None));
    }

    #[test]
    fn environ_entries_match_whole_names_only() {
        let env = b"PATHX=1\0PATH\0PATH=/bin";
        assert_eq!(parse_environ_var(env, "PATH"), Some("/bin".into()));
        assert_eq!(parse_environ_var(b"", "PATH"), None);
        assert_eq!(parse_environ_var(b"=\0", ""), Some("".into()));
    }

    #[test]
    fn a_child_started_with_a_variable_shows_it() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .env("TOPDECK_PROCFS_TEST", "a b\nc")
            .spawn()
            .unwrap();
        // The variable is there once the child has exec'd `sleep`; until
        // then it is a copy of this process.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = None;
        while seen.is_none() && std::time::Instant::now() < deadline {
            seen = environ_var(child.id(), "TOPDECK_PROCFS_TEST").unwrap();
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(seen, Some("a b\nc".into()));
    }
}
