// SPDX-License-Identifier: Apache-2.0
//! Which process wrote a `cnc.dat`. The pid in its header is whatever the
//! file's writer put there, and any user may make an `aeron-*` directory
//! in `/dev/shm`: a pid is named only for a process that can be the
//! driver that wrote the file, never taken as written.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use topdeck_procfs::locks::{major, minor};
use topdeck_procfs::table::Table;
use topdeck_procfs::writer::{can_have_written, host_pids, Verdict};

use super::{Error, Header, Source};

impl Source {
    /// The driver that wrote `header` (this file's, as read), as this
    /// reader's pid: a process that is the header's pid in its own pid
    /// namespace, runs as the file's owner ([`Source::uid`]) and started
    /// no later than the header says the driver did, nor after the file
    /// last changed ([`can_have_written`], with its slack). A file found through
    /// another view's root is a driver's of that view; one in this
    /// reader's own `/dev/shm` may be a driver's in any pid namespace (a
    /// container run with `--ipc=host` shares it), the pid mapped through
    /// each process's `NSpid`. Should several processes qualify, the one
    /// that maps the file (a driver maps its `cnc.dat` while it runs).
    ///
    /// `Ok(None)` when no process is that pid (the driver is gone); an
    /// error naming the file when processes are but none can be shown to
    /// be its writer (a file another user wrote naming someone else's
    /// process, a reused pid) or more than one can.
    ///
    /// ```no_run
    /// let table = topdeck_procfs::table::Table::scan();
    /// for source in topdeck_portholes::aeron::discover_with(&table) {
    ///     let Ok(cnc) = source.read() else { continue };
    ///     match source.writer(&table, &cnc.header) {
    ///         Ok(pid) => println!("{} {pid:?}", source.path.display()),
    ///         Err(e) => eprintln!("{e}"),
    ///     }
    /// }
    /// ```
    pub fn writer(&self, table: &Table, header: &Header) -> Result<Option<u32>, Error> {
        let Some(nspid) = u32::try_from(header.pid).ok().filter(|&p| p != 0) else {
            return Ok(None);
        };
        let named: Vec<u32> = match self.via_pid {
            Some(via) => {
                let Some(view) = table.view_of(via) else {
                    return Ok(None);
                };
                let members = table.views().members.get(&view);
                host_pids(table, members.into_iter().flatten().copied(), nspid).collect()
            }
            None => host_pids(table, table.pids(), nspid).collect(),
        };
        if named.is_empty() {
            return Ok(None);
        }
        let started = since_epoch_ms(header.start_timestamp_ms);
        let mut why = Vec::new();
        let mut writers: Vec<u32> = named
            .iter()
            .copied()
            .filter(
                |&p| match can_have_written(table, p, &*self.file, Some(started)) {
                    Verdict::Could => true,
                    verdict => {
                        why.push(self.why_not(p, verdict));
                        false
                    }
                },
            )
            .collect();
        if writers.len() > 1 {
            if let Ok(meta) = self.file.metadata() {
                let mapping: Vec<u32> = writers
                    .iter()
                    .copied()
                    .filter(|&p| maps_file(p, meta.dev(), meta.ino()))
                    .collect();
                if mapping.len() == 1 {
                    writers = mapping;
                }
            }
        }
        match writers.as_slice() {
            [one] => Ok(Some(*one)),
            [] => Err(self.not_writer(format!(
                "its header names pid {nspid}, but {}",
                why.join("; ")
            ))),
            several => Err(self.not_writer(format!(
                "its header names pid {nspid}, and processes {several:?} could each be its driver"
            ))),
        }
    }

    /// Why process `pid` is not the driver that wrote the file, from the
    /// [`Verdict`] of [`can_have_written`].
    fn why_not(&self, pid: u32, verdict: Verdict) -> String {
        match verdict {
            Verdict::OtherUser { euid } => format!(
                "process {pid} runs as uid {euid} and the file is owned by uid {}",
                self.uid
            ),
            Verdict::Reused { .. } => {
                format!("process {pid} started after the driver did (a reused pid)")
            }
            Verdict::Gone => format!("process {pid} has exited"),
            other => format!("process {pid}: {other}"),
        }
    }

    fn not_writer(&self, why: String) -> Error {
        Error::NotWriter {
            path: self.path.clone(),
            why,
        }
    }
}

/// A time in milliseconds since the epoch, as Aeron writes them (before
/// the epoch when negative: a forged header, which no process started
/// after).
fn since_epoch_ms(ms: i64) -> SystemTime {
    let d = Duration::from_millis(ms.unsigned_abs());
    let t = if ms >= 0 {
        UNIX_EPOCH.checked_add(d)
    } else {
        UNIX_EPOCH.checked_sub(d)
    };
    t.unwrap_or(UNIX_EPOCH)
}

/// Whether `pid` maps the file `(dev, ino)`, as its `/proc/<pid>/maps`
/// shows (`major:minor` in hex, then the inode).
fn maps_file(pid: u32, dev: u64, ino: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    let dev = format!("{:02x}:{:02x}", major(dev), minor(dev));
    let ino = ino.to_string();
    maps.lines().any(|line| {
        let mut fields = line.split_whitespace().skip(3);
        fields.next() == Some(dev.as_str()) && fields.next() == Some(ino.as_str())
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::discover::discover_in;
    use super::super::{now_ms, read, CncBuilder};
    use super::*;

    /// The writer named for a `cnc.dat` written here with `pid` and the
    /// start time `start_ms`, owned by `uid` when given.
    fn writer_of(pid: u32, start_ms: i64, uid: Option<u32>) -> Result<Option<u32>, Error> {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dev/shm/aeron-test");
        std::fs::create_dir_all(&dir).unwrap();
        let bytes = CncBuilder::new()
            .pid(pid.into())
            .heartbeat_ms(now_ms())
            .start_ms(start_ms)
            .build();
        std::fs::write(dir.join("cnc.dat"), bytes).unwrap();
        if let Some(uid) = uid {
            std::os::unix::fs::chown(dir.join("cnc.dat"), Some(uid), None).unwrap();
        }
        let found = discover_in(tmp.path(), &Default::default(), None, None);
        let [source] = found.sources.as_slice() else {
            panic!("{:?}", found.sources);
        };
        let header = read(Path::new(&source.path)).unwrap().header;
        source.writer(&Table::scan(), &header)
    }

    #[test]
    fn a_pid_is_named_only_for_a_process_that_can_have_written_the_file() {
        let me = std::process::id();
        assert_eq!(writer_of(me, now_ms(), None).unwrap(), Some(me));
        let earlier = writer_of(me, now_ms() - 3_600_000, None).unwrap_err();
        assert!(
            earlier.to_string().contains("started after the driver did"),
            "{earlier}"
        );
        // No process is that pid (pid_max is at most 2^22).
        assert_eq!(writer_of(1 << 23, now_ms(), None).unwrap(), None);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: a file owned by another uid needs root to chown");
            return;
        }
        let other = writer_of(me, now_ms(), Some(1000)).unwrap_err();
        assert!(
            other.to_string().contains(&format!(
                "process {me} runs as uid 0 and the file is owned by uid 1000"
            )),
            "{other}"
        );
    }

    #[test]
    fn a_file_mapped_by_a_process_is_seen_in_its_maps() {
        use std::os::fd::AsRawFd;

        let file = tempfile::NamedTempFile::new().unwrap();
        file.as_file().set_len(4096).unwrap();
        let meta = file.as_file().metadata().unwrap();
        let me = std::process::id();
        assert!(!maps_file(me, meta.dev(), meta.ino()));
        // SAFETY: a fresh private read-only mapping of our own file, unmapped
        // below before the file is dropped; nothing reads through it.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_file().as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        let mapped = maps_file(me, meta.dev(), meta.ino());
        // SAFETY: `at` is the 4096-byte mapping made above.
        unsafe { libc::munmap(at, 4096) };
        assert!(mapped);
    }
}
