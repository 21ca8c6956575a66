// SPDX-License-Identifier: Apache-2.0
//! Which process wrote a `cnc.dat`. The pid in its header is whatever the
//! file's writer put there, and any user may make an `aeron-*` directory
//! in `/dev/shm`: a pid is named only for a process that can be the
//! driver that wrote the file, never taken as written.

use std::os::unix::fs::MetadataExt;

use topdeck_procfs::locks::{major, minor};
use topdeck_procfs::process::{boot_time, started_secs};
use topdeck_procfs::table::Table;

use super::{Error, Header, Source};

/// Slack between a process's start as `/proc` gives it (whole seconds of
/// the boot time plus clock ticks, rounded down) and the start timestamp
/// its driver wrote.
const START_SLACK_MS: i64 = 2_000;

impl Source {
    /// The driver that wrote `header` (this file's, as read), as this
    /// reader's pid: a process that is the header's pid in its own pid
    /// namespace, runs as the file's owner ([`Source::uid`]) and started
    /// no later than the header says the driver did. A file found through
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
                members.into_iter().flatten().copied().collect()
            }
            None => table.pids().collect(),
        };
        let named: Vec<u32> = named
            .into_iter()
            .filter(|&p| table.innermost_pid(p) == Some(nspid))
            .collect();
        if named.is_empty() {
            return Ok(None);
        }
        let boot = boot_time();
        let mut why = Vec::new();
        let mut writers: Vec<u32> = named
            .iter()
            .copied()
            .filter(|&p| match self.can_have_written(table, header, boot, p) {
                Ok(()) => true,
                Err(reason) => {
                    why.push(reason);
                    false
                }
            })
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

    /// Whether process `pid` can be the driver that wrote `header`: it runs
    /// as the file's owner and did not start after the driver did; else
    /// why not.
    fn can_have_written(
        &self,
        table: &Table,
        header: &Header,
        boot: Option<i64>,
        pid: u32,
    ) -> Result<(), String> {
        let euid = table.status(pid).map(|s| s.euid);
        if euid != Some(self.uid) {
            let euid = euid.map_or("an unknown uid".to_owned(), |u| format!("uid {u}"));
            return Err(format!(
                "process {pid} runs as {euid} and the file is owned by uid {}",
                self.uid
            ));
        }
        let started_ms = match (table.start_ticks(pid), boot) {
            (Some(ticks), Some(boot)) => started_secs(ticks, boot).saturating_mul(1000),
            _ => return Err(format!("the start time of process {pid} is unknown")),
        };
        if started_ms > header.start_timestamp_ms.saturating_add(START_SLACK_MS) {
            return Err(format!(
                "process {pid} started after the driver did (a reused pid)"
            ));
        }
        Ok(())
    }

    fn not_writer(&self, why: String) -> Error {
        Error::NotWriter {
            path: self.path.clone(),
            why,
        }
    }
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
