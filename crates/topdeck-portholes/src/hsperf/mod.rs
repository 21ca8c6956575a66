// SPDX-License-Identifier: Apache-2.0
//! The HotSpot JVM's performance counters: the `hsperfdata_<user>/<pid>`
//! file every JVM started without `-XX:-UsePerfData` keeps in `/tmp`
//! (PerfData 2.0, the format `jstat`, `jps` and `jcmd PerfCounter.print`
//! read).
//!
//! Layout (openjdk/jdk `src/hotspot/share/runtime/perfMemory.hpp`,
//! `perfData.hpp`; the reader `sun/jvmstat/perfdata/monitor/v2_0/PerfDataBuffer.java`):
//! a 32-byte prologue (magic `CA FE C0 C0`, byte order at byte 4, version
//! 2.0, `accessible`, `used`, `overflow`, `mod_time_stamp`, `entry_offset`,
//! `num_entries`), then entries laid end to end, each a 20-byte header, a
//! NUL-terminated name and an `i64` or a byte array.
//!
//! Reading it never disturbs the JVM: [`read`] copies the file with one
//! `pread` (never a mapping, which a JVM truncating a reused file would
//! turn into SIGBUS) and never takes a lock (a JVM that finds its file
//! locked at start-up runs without shared counters); [`discover`] tells a
//! live JVM's file from a stale one through `/proc/locks` and the pid's
//! start time, again without a lock.
//!
//! ```
//! use topdeck_portholes::hsperf::{self, SyntheticBuffer, Units, Value, Variability};
//!
//! let bytes = SyntheticBuffer::new()
//!     .long("sun.os.hrt.frequency", Units::Hertz, Variability::Constant, 1_000_000_000)
//!     .long("sun.gc.collector.0.time", Units::Ticks, Variability::Monotonic, 250_000_000)
//!     .string("java.property.java.vm.name", Variability::Constant, "OpenJDK 64-Bit Server VM")
//!     .build();
//! let perf = hsperf::parse(&bytes)?;
//! assert_eq!(perf.prologue.num_entries, 3);
//! assert_eq!(perf.hrt_frequency(), Some(1_000_000_000));
//! assert_eq!(perf.seconds("sun.gc.collector.0.time"), Some(0.25));
//! assert_eq!(
//!     perf.get("java.property.java.vm.name").map(|e| &e.value),
//!     Some(&Value::String("OpenJDK 64-Bit Server VM".into()))
//! );
//! # Ok::<(), hsperf::Error>(())
//! ```

mod discover;
mod error;
mod file;
mod parse;
mod synthetic;

pub use discover::{
    discover, discover_owned_by, discover_remembering, discover_with, read_judged, Discovery, Jvm,
    Liveness, Unreadable,
};
pub use error::{Error, ErrorKind, Result};
pub use file::{read, read_when_accessible, HsperfDir, MAX_FILE_SIZE};
pub use parse::parse;
pub use synthetic::SyntheticBuffer;

/// Byte order of every field after the magic (byte 4 of the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// Byte 4 is 0.
    Big,
    /// Byte 4 is 1 (x86-64, aarch64).
    Little,
}

/// The 32-byte header of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prologue {
    /// Byte order of every field after the magic.
    pub byte_order: ByteOrder,
    /// Format major version (2).
    pub major: u8,
    /// Format minor version (0).
    pub minor: u8,
    /// Whether the JVM has finished initialising the buffer; [`parse`]
    /// returns [`ErrorKind::NotAccessible`] while it has not.
    pub accessible: bool,
    /// Bytes of the buffer in use, prologue included.
    pub used: u32,
    /// Bytes of counters that did not fit and live in the JVM's heap,
    /// invisible to every reader of the file; non-zero means counters are
    /// missing.
    pub overflow: u32,
    /// Ticks (see [`PerfData::hrt_frequency`]) of the last time an entry
    /// was added.
    pub mod_time_stamp: i64,
    /// Offset of the first entry (32).
    pub entry_offset: u32,
    /// Entries the JVM has allocated, including one it may still be filling.
    pub num_entries: u32,
}

/// What a counter counts (`PerfData::Units` in perfData.hpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units {
    /// A plain number (1).
    None,
    /// Bytes (2).
    Bytes,
    /// High-resolution ticks, [`PerfData::hrt_frequency`] per second (3).
    Ticks,
    /// A count of events (4).
    Events,
    /// A string (5).
    String,
    /// A frequency (6).
    Hertz,
}

/// How a counter changes (`PerfData::Variability` in perfData.hpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variability {
    /// Set once at start-up (1).
    Constant,
    /// Only grows (2).
    Monotonic,
    /// Goes up and down (3).
    Variable,
}

/// A counter's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A scalar `jlong` (type `'J'`).
    Long(i64),
    /// A byte array with [`Units::String`], up to its first NUL, decoded
    /// lossily (property values follow the JVM's locale).
    String(String),
    /// Any other byte array, as stored.
    Bytes(Vec<u8>),
}

/// One counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name, e.g. `sun.gc.collector.0.invocations`.
    pub name: String,
    /// Its value when the file was copied.
    pub value: Value,
    /// What it counts.
    pub units: Units,
    /// How it changes.
    pub variability: Variability,
    /// Whether it is a supported, stable interface (`java.*`, `com.sun.*`)
    /// rather than a HotSpot internal (`sun.*`) that may change.
    pub supported: bool,
}

/// A parsed copy of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfData {
    /// The header.
    pub prologue: Prologue,
    /// The counters, in the order the JVM created them.
    pub entries: Vec<Entry>,
}

/// Name of the counter holding the tick frequency.
const HRT_FREQUENCY: &str = "sun.os.hrt.frequency";

impl PerfData {
    /// The counter called `name` (a linear search: a JVM has about 200).
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The counter called `name` when it is an `i64`.
    pub fn long(&self, name: &str) -> Option<i64> {
        match self.get(name)?.value {
            Value::Long(v) => Some(v),
            _ => None,
        }
    }

    /// Ticks per second of the [`Units::Ticks`] counters
    /// (`sun.os.hrt.frequency`), when present and positive.
    pub fn hrt_frequency(&self) -> Option<u64> {
        self.long(HRT_FREQUENCY)
            .and_then(|v| u64::try_from(v).ok())
            .filter(|&v| v > 0)
    }

    /// `ticks` converted to seconds with [`PerfData::hrt_frequency`].
    pub fn ticks_to_seconds(&self, ticks: i64) -> Option<f64> {
        self.hrt_frequency().map(|hz| ticks as f64 / hz as f64)
    }

    /// The [`Units::Ticks`] counter called `name`, in seconds (`None` for
    /// a counter in other units).
    pub fn seconds(&self, name: &str) -> Option<f64> {
        let entry = self.get(name)?;
        match (entry.units, &entry.value) {
            (Units::Ticks, Value::Long(ticks)) => self.ticks_to_seconds(*ticks),
            _ => None,
        }
    }
}
