// SPDX-License-Identifier: Apache-2.0
//! Granted write `flock`s from `/proc/locks`: proof that a process holds a
//! file it made, without taking a lock on it (a reader's lock can disturb a
//! writer that checks for one at start-up).

use std::io;

/// One granted `FLOCK … WRITE` line of `/proc/locks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriteFlock {
    /// The locked file's device number, major part.
    pub major: u32,
    /// The locked file's device number, minor part.
    pub minor: u32,
    /// The locked file's inode number.
    pub ino: u64,
    /// The holder's pid in the reader's pid namespace; `None` when the
    /// holder is not visible there (the kernel shows 0).
    pub pid: Option<u32>,
}

impl WriteFlock {
    /// Whether this lock is on the file with `st_dev` `dev` and inode `ino`.
    ///
    /// ```
    /// use topdeck_procfs::locks::write_flocks;
    /// let lock = write_flocks("1: FLOCK  ADVISORY  WRITE 42 08:01:77 0 EOF\n").next().unwrap();
    /// assert!(lock.is_on(0x801, 77));
    /// assert!(!lock.is_on(0x801, 78));
    /// ```
    pub fn is_on(&self, dev: u64, ino: u64) -> bool {
        (self.major, self.minor, self.ino) == (major(dev), minor(dev), ino)
    }
}

/// Reads `/proc/locks` whole. The table grows with the locks on the host:
/// read it once for every question a listing has, after the files asked
/// about were opened (it shows only locks taken before it was read).
///
/// ```
/// let table = topdeck_procfs::locks::read().unwrap();
/// assert!(topdeck_procfs::locks::write_flocks(&table).count() < 1 << 30);
/// ```
pub fn read() -> io::Result<String> {
    std::fs::read_to_string("/proc/locks")
}

/// The granted write `flock`s of a `/proc/locks` text. Waiters (`->`) hold
/// nothing, and POSIX, OFD and read locks are not a writer's, so all are
/// skipped; so are lines that do not parse.
///
/// ```
/// use topdeck_procfs::locks::write_flocks;
/// let table = "1: FLOCK  ADVISORY  WRITE 4242 00:1a:77 0 EOF\n\
///              1: -> FLOCK  ADVISORY  WRITE 4343 00:1a:77 0 EOF\n\
///              2: FLOCK  ADVISORY  WRITE 0 fd:01:80 0 EOF\n";
/// let pids: Vec<_> = write_flocks(table).map(|l| l.pid).collect();
/// assert_eq!(pids, [Some(4242), None]);
/// ```
pub fn write_flocks(table: &str) -> impl Iterator<Item = WriteFlock> + '_ {
    table.lines().filter_map(|line| {
        let mut f = line.split_whitespace().skip(1);
        let (kind, _, access, pid, file) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        if kind != "FLOCK" || access != "WRITE" {
            return None;
        }
        let (major, minor, ino) = parse_file(file)?;
        Some(WriteFlock {
            major,
            minor,
            ino,
            pid: pid.parse::<u32>().ok().filter(|&p| p > 0),
        })
    })
}

/// `MAJ:MIN:INODE`, major and minor in hex (fs/locks.c `lock_get_status`).
fn parse_file(s: &str) -> Option<(u32, u32, u64)> {
    let mut p = s.split(':');
    let major = u32::from_str_radix(p.next()?, 16).ok()?;
    let minor = u32::from_str_radix(p.next()?, 16).ok()?;
    let ino = p.next()?.parse().ok()?;
    Some((major, minor, ino))
}

/// The major part of a `st_dev`, as glibc's `gnu_dev_major` splits it.
///
/// ```
/// assert_eq!(topdeck_procfs::locks::major(0x1000_0010_0302), 0x1003);
/// ```
pub fn major(dev: u64) -> u32 {
    (((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000)) as u32
}

/// The minor part of a `st_dev`, as glibc's `gnu_dev_minor` splits it.
///
/// ```
/// assert_eq!(topdeck_procfs::locks::minor(0x1000_0010_0302), 0x102);
/// ```
pub fn minor(dev: u64) -> u32 {
    ((dev & 0xff) | ((dev >> 12) & 0xffff_ff00)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
1: FLOCK  ADVISORY  WRITE 4242 00:1a:77 0 EOF
1: -> FLOCK  ADVISORY  WRITE 4343 00:1a:77 0 EOF
2: FLOCK  ADVISORY  READ 4444 00:1a:78 0 EOF
3: POSIX  ADVISORY  WRITE 4545 00:1a:79 0 EOF
4: FLOCK  ADVISORY  WRITE 0 fd:01:80 0 EOF
5: FLOCK  ADVISORY  WRITE 12 zz:01:80 0 EOF
6: FLOCK  ADVISORY
";

    #[test]
    fn granted_write_flocks_only_and_invisible_holders_are_none() {
        let locks: Vec<_> = write_flocks(TABLE).collect();
        assert_eq!(
            locks,
            [
                WriteFlock {
                    major: 0,
                    minor: 0x1a,
                    ino: 77,
                    pid: Some(4242)
                },
                WriteFlock {
                    major: 0xfd,
                    minor: 1,
                    ino: 80,
                    pid: None
                },
            ],
            "waiters, read locks, POSIX locks and garbage are skipped"
        );
    }

    #[test]
    fn device_numbers_split_as_glibc_does() {
        assert_eq!((major(0x801), minor(0x801)), (8, 1));
        assert_eq!(
            (major(0x1000_0010_0302), minor(0x1000_0010_0302)),
            (0x1003, 0x102)
        );
    }

    #[test]
    fn this_process_holding_a_lock_is_listed() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let path = std::env::temp_dir().join(format!("procfs-locks-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let m = f.metadata().unwrap();
        let mine = || {
            write_flocks(&read().unwrap())
                .any(|l| l.is_on(m.dev(), m.ino()) && l.pid == Some(std::process::id()))
        };
        assert!(!mine());
        // SAFETY: flock on a descriptor this test owns.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(rc, 0);
        assert!(mine());
    }
}
