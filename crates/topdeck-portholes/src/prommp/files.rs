// SPDX-License-Identifier: Apache-2.0
//! Finding, naming and copying the `*.db` files of a multiprocess directory.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// What a file holds, from its name (the file itself never says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `counter_<pid>.db`
    Counter,
    /// `gauge_<mode>_<pid>.db`
    Gauge(GaugeMode),
    /// `histogram_<pid>.db`
    Histogram,
    /// `summary_<pid>.db`
    Summary,
}

/// A gauge's `multiprocess_mode`: how its workers' values merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaugeMode {
    /// One sample per worker, with a `pid` label.
    All,
    /// As `All`, live workers only.
    LiveAll,
    /// The smallest value.
    Min,
    /// As `Min`, live workers only.
    LiveMin,
    /// The largest value.
    Max,
    /// As `Max`, live workers only.
    LiveMax,
    /// The sum.
    Sum,
    /// As `Sum`, live workers only.
    LiveSum,
    /// The value with the newest timestamp.
    MostRecent,
    /// As `MostRecent`, live workers only.
    LiveMostRecent,
}

const MODES: [(&str, GaugeMode); 10] = [
    ("all", GaugeMode::All),
    ("liveall", GaugeMode::LiveAll),
    ("min", GaugeMode::Min),
    ("livemin", GaugeMode::LiveMin),
    ("max", GaugeMode::Max),
    ("livemax", GaugeMode::LiveMax),
    ("sum", GaugeMode::Sum),
    ("livesum", GaugeMode::LiveSum),
    ("mostrecent", GaugeMode::MostRecent),
    ("livemostrecent", GaugeMode::LiveMostRecent),
];

impl GaugeMode {
    /// The mode's name in file names and in `Gauge(multiprocess_mode=…)`.
    pub fn name(self) -> &'static str {
        MODES
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("all", |(n, _)| n)
    }

    /// Whether a dead worker's file stops counting (upstream's
    /// `mark_process_dead` deletes exactly these).
    pub fn is_live(self) -> bool {
        self.name().starts_with("live")
    }
}

impl Kind {
    /// The metric type upstream takes from the file name.
    pub fn type_name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge(_) => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// Splits `<type>_<pid>.db` or `gauge_<mode>_<pid>.db` into kind and pid
/// (as written, and as a number). Stricter than upstream, which takes any
/// text as a gauge's pid and does not look at other files' pids: here the
/// pid is what says whether the worker lives.
pub(crate) fn name_kind_pid(name: &str) -> Result<(Kind, String, u32), String> {
    let stem = name
        .strip_suffix(".db")
        .ok_or("the name does not end in .db")?;
    let parts: Vec<&str> = stem.split('_').collect();
    let (kind, pid) = match parts.as_slice() {
        ["counter", pid] => (Kind::Counter, pid),
        ["histogram", pid] => (Kind::Histogram, pid),
        ["summary", pid] => (Kind::Summary, pid),
        ["gauge", mode, pid] => {
            let (_, mode) = MODES.iter().find(|(n, _)| n == mode).ok_or_else(|| {
                format!("{mode:?} is not a gauge mode of prometheus_client (all, liveall, min, livemin, max, livemax, sum, livesum, mostrecent, livemostrecent)")
            })?;
            (Kind::Gauge(*mode), pid)
        }
        _ => {
            return Err(
                "the name is not <counter|histogram|summary>_<pid>.db or gauge_<mode>_<pid>.db"
                    .into(),
            )
        }
    };
    let number = if pid.bytes().all(|b| b.is_ascii_digit()) {
        pid.parse().ok()
    } else {
        None
    };
    let number = number.ok_or_else(|| format!("{pid:?} in the name is not a process id"))?;
    Ok((kind, (*pid).to_string(), number))
}

/// Whether a process with this id exists now. The files carry no start
/// time, so a pid the kernel has given to another process counts as
/// alive, exactly as upstream (which has no liveness test of its own:
/// only `mark_process_dead`) would have it.
pub(crate) fn alive(pid: u32) -> bool {
    topdeck_procfs::writer::runs(&topdeck_procfs::table::Table::default(), pid, None)
}

/// The largest file copied: files start at 64 KiB and double when full, so
/// a larger one is a runaway writer or not prometheus_client's.
pub const MAX_FILE: u64 = 256 << 20;

/// The directory, opened once, so that each file is opened relative to it
/// (no path walk per file); through another view's `/proc/<pid>/root`,
/// resolved inside that root.
pub(crate) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    topdeck_procfs::root::open_dir(path)
}

/// Copies the bytes in use of the `*.db` file `name` of `dir` into `bytes`
/// (a buffer reused from file to file, `guess` bytes long at first), with
/// `pread` on a descriptor
/// opened read-only and without following a symbolic link: never a
/// mapping (a truncation would be SIGBUS), never a lock (the writers take
/// none either).
///
/// A file whose header says more bytes are in use than `room` (what is
/// left of the directory's budget) is not copied further:
/// [`Copy::OverBudget`] says how many it wanted.
pub(crate) fn copy_into(
    dir: &impl AsFd,
    name: &str,
    guess: usize,
    room: u64,
    bytes: &mut Vec<u8>,
) -> Result<Copy, String> {
    let file = topdeck_procfs::root::open_file_at(dir, name.as_ref())
        .map_err(|e| format!("cannot open it: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    // One pread for most files: as many bytes as the caller guesses are in
    // use (what the last file of this kind had); a second for the rest.
    let first = guess.clamp(8, MAX_FILE.min(room.max(8)) as usize);
    bytes.clear();
    bytes.resize(first, 0);
    let got = read_full(&file, bytes, 0)?;
    if got < 4 {
        return Err(format!("{got} bytes, shorter than the header"));
    }
    let used = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let want = u64::try_from(used).unwrap_or(0).max(got.min(8) as u64);
    if want > MAX_FILE {
        return Err(format!(
            "its header says {used} bytes are in use, more than the {} MiB this reader copies; if a worker really wrote that much, it is a runaway label set",
            MAX_FILE >> 20
        ));
    }
    // What the file holds, not what its header claims: a file claiming
    // more than it holds is its own error, found when it is parsed.
    if want.min(meta.len()) > room {
        return Ok(Copy::OverBudget { want });
    }
    let want = want as usize;
    if want <= got {
        bytes.truncate(want);
    } else if got == first {
        bytes.resize(want, 0);
        let more = read_full(&file, &mut bytes[got..], got as u64)?;
        bytes.truncate(got + more);
    } else {
        bytes.truncate(got); // the file ends before `used`
    }
    Ok(Copy::Done)
}

/// What [`copy_into`] did with a file it could open.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Copy {
    /// Its bytes in use are in the buffer.
    Done,
    /// Its header says `want` bytes are in use, more than the room left.
    OverBudget {
        /// Bytes in use, from its header.
        want: u64,
    },
}

fn read_full(file: &File, buf: &mut [u8], at: u64) -> Result<usize, String> {
    crate::copy::read_full(file, buf, at).map_err(|e| format!("cannot read it: {e}"))
}
