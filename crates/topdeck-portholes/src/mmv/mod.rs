// SPDX-License-Identifier: Apache-2.0
//! Performance Co-Pilot's memory-mapped values (MMV): the files that
//! applications instrumented with libpcp_mmv (C, Python's `pcp.mmv`, Perl,
//! Go's `speed`, Java's Parfait) keep in `$PCP_TMP_DIR/mmv/`, and PCP's
//! `pmdammv` serves as `mmv.<file>.<metric>`.
//!
//! Format versions 1 to 3 (layout in `layout.rs`, from PCP's
//! `pcp/mmv_dev.h`): a header, a table of contents whose entries point at
//! the sections (instance domains, instances, metrics, values, strings,
//! labels), in no promised order. A writer publishes its file by setting
//! the second generation field equal to the first once everything is
//! written, and never changes metadata afterwards (a new metric means a
//! new file); values are plain stores, so a string may tear.
//!
//! Reading one never disturbs its writer: [`read`] copies the whole file
//! with `pread` (never a mapping, which a truncation would turn into
//! SIGBUS; never a lock or a write) and [`parse`] checks every offset and
//! count against the copy. [`discover`] finds the files on the host and in
//! every container's view of the file system.
//!
//! ```
//! use topdeck_portholes::mmv::{self, Semantics, SyntheticBuffer, SyntheticMetric, Type, Value};
//!
//! let bytes = SyntheticBuffer::new(1)
//!     .indom(7, &[(0, "high"), (1, "low")], "queues", "")
//!     .metric(SyntheticMetric::new("requests", 1, Type::U64).indom(7).semantics(1))
//!     .value(1, Some(0), 41u64.to_ne_bytes(), 0)
//!     .value(1, Some(1), 7u64.to_ne_bytes(), 0)
//!     .build();
//! let file = mmv::parse(&bytes, "app")?;
//! let requests = &file.metrics[0];
//! assert_eq!(requests.pcp_name, "mmv.app.requests");
//! assert_eq!(requests.semantics, Semantics::Counter);
//! let low = &requests.values[1];
//! assert_eq!(low.instance.as_ref().map(|i| i.name.as_str()), Some("low"));
//! assert_eq!(low.value, Some(Value::U64(7)));
//! # Ok::<(), mmv::Error>(())
//! ```

mod discover;
mod error;
mod file;
mod layout;
mod parse;
mod synthetic;
mod units;

pub use discover::{
    discover, discover_owned_by, discover_with, pcp_tmp_dir, Discovery, MmvFile,
    DEFAULT_PCP_TMP_DIR,
};
pub use error::{Error, ErrorKind, Result};
pub use file::{read, MAX_FILE_SIZE};
pub use parse::parse;
pub use synthetic::{SyntheticBuffer, SyntheticMetric};
pub use units::Units;

use std::time::{SystemTime, UNIX_EPOCH};

/// The header's flags (`mmv_stats_flags_t`).
///
/// ```
/// let flags = topdeck_portholes::mmv::Flags(0x6);
/// assert!(flags.process() && flags.sentinel() && !flags.noprefix());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(pub u32);

impl Flags {
    /// `MMV_FLAG_NOPREFIX`: names are `mmv.<metric>`, not `mmv.<file>.<metric>`.
    pub const NOPREFIX: u32 = 0x1;
    /// `MMV_FLAG_PROCESS`: [`Header::process`] names the writer, and the
    /// file is stale once that process is gone.
    pub const PROCESS: u32 = 0x2;
    /// `MMV_FLAG_SENTINEL`: some values mean "no value" (see [`Sample::value`]).
    pub const SENTINEL: u32 = 0x4;

    /// Whether names go without the file's name.
    pub fn noprefix(self) -> bool {
        self.0 & Self::NOPREFIX != 0
    }

    /// Whether the file belongs to the process [`Header::process`].
    pub fn process(self) -> bool {
        self.0 & Self::PROCESS != 0
    }

    /// Whether sentinel values stand for "no value".
    pub fn sentinel(self) -> bool {
        self.0 & Self::SENTINEL != 0
    }
}

/// The 40-byte header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Format version: 1 (inline names of up to 63 bytes), 2 (names as
    /// strings) or 3 (2 plus labels).
    pub version: i32,
    /// The generation (`g1`, equal to `g2` in a published file): a writer
    /// that restarts makes a new file with a new generation.
    pub generation: u64,
    /// Table of contents entries.
    pub tocs: u32,
    /// The flags.
    pub flags: Flags,
    /// The writer's pid, in its own pid namespace, as it wrote it.
    /// Meaningful for liveness only with [`Flags::process`]: judge it by
    /// pid *and* start time (a pid is reused), against the file's change
    /// time ([`MmvFile::changed`]); this reader does not.
    pub process: i32,
    /// The PMID cluster the writer asked for (pmdammv may pick another).
    pub cluster: i32,
}

/// A metric's value type (`mmv_metric_type_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// `MMV_TYPE_I32` (0).
    I32,
    /// `MMV_TYPE_U32` (1).
    U32,
    /// `MMV_TYPE_I64` (2).
    I64,
    /// `MMV_TYPE_U64` (3).
    U64,
    /// `MMV_TYPE_FLOAT` (4).
    Float,
    /// `MMV_TYPE_DOUBLE` (5).
    Double,
    /// `MMV_TYPE_STRING` (6): the value's `extra` is a string's offset.
    String,
    /// `MMV_TYPE_ELAPSED` (9): microseconds, with a timing possibly in
    /// progress (see [`Value::Elapsed`]).
    Elapsed,
}

impl Type {
    /// The type of code `code`, `None` for `NOSUPPORT` (-1) and codes this
    /// reader does not know (skipped, as pmdammv does).
    pub fn from_code(code: i32) -> Option<Type> {
        Some(match code {
            0 => Type::I32,
            1 => Type::U32,
            2 => Type::I64,
            3 => Type::U64,
            4 => Type::Float,
            5 => Type::Double,
            6 => Type::String,
            9 => Type::Elapsed,
            _ => return None,
        })
    }

    /// The code the file holds.
    pub fn code(self) -> i32 {
        match self {
            Type::I32 => 0,
            Type::U32 => 1,
            Type::I64 => 2,
            Type::U64 => 3,
            Type::Float => 4,
            Type::Double => 5,
            Type::String => 6,
            Type::Elapsed => 9,
        }
    }
}

/// How a metric's value changes (PCP's `PM_SEM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Semantics {
    /// Not given (0): pmdammv serves it as a counter, but nothing in the
    /// file says the value only grows (Debian 12's python3-pcp never
    /// stores the semantics it is given).
    Unspecified,
    /// Cumulative, only grows (1, and every [`Type::Elapsed`] metric).
    Counter,
    /// A value at an instant, continuous (3).
    Instant,
    /// A value at an instant that changes rarely (4).
    Discrete,
}

impl Semantics {
    /// The semantics of code `code`, `None` for codes PCP does not define
    /// for MMV.
    pub fn from_code(code: u32) -> Option<Semantics> {
        match code {
            0 => Some(Semantics::Unspecified),
            1 => Some(Semantics::Counter),
            3 => Some(Semantics::Instant),
            4 => Some(Semantics::Discrete),
            _ => None,
        }
    }
}

/// A value as the file holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// [`Type::I32`].
    I32(i32),
    /// [`Type::U32`].
    U32(u32),
    /// [`Type::I64`].
    I64(i64),
    /// [`Type::U64`].
    U64(u64),
    /// [`Type::Float`].
    Float(f32),
    /// [`Type::Double`].
    Double(f64),
    /// [`Type::String`], decoded lossily (a writer may be changing it).
    String(String),
    /// [`Type::Elapsed`]: `value` microseconds of finished timings and,
    /// when `extra` is negative, one in progress that started at `-extra`
    /// microseconds since the epoch (`mmv_stats_interval_start`).
    Elapsed {
        /// Microseconds of finished timings.
        value: i64,
        /// Minus the start of the timing in progress (µs since the
        /// epoch), or 0 (a positive value is a writer's bug; ignored as
        /// pmdammv ignores it).
        extra: i64,
    },
}

impl Value {
    /// The value as a number, `None` for a string: an [`Value::Elapsed`]
    /// counts its timing in progress up to `now_us` (microseconds since
    /// the epoch, [`now_us`] in production), as pmdammv does.
    ///
    /// ```
    /// use topdeck_portholes::mmv::Value;
    ///
    /// let running = Value::Elapsed { value: 500, extra: -1_000_000 };
    /// assert_eq!(running.as_f64(1_000_250), Some(750.0));
    /// assert_eq!(Value::Elapsed { value: 500, extra: 0 }.as_f64(1_000_250), Some(500.0));
    /// assert_eq!(Value::String("x".into()).as_f64(0), None);
    /// ```
    pub fn as_f64(&self, now_us: i64) -> Option<f64> {
        Some(match self {
            Value::I32(v) => f64::from(*v),
            Value::U32(v) => f64::from(*v),
            Value::I64(v) => *v as f64,
            Value::U64(v) => *v as f64,
            Value::Float(v) => f64::from(*v),
            Value::Double(v) => *v,
            Value::String(_) => return None,
            Value::Elapsed { .. } => self.elapsed_us(now_us)? as f64,
        })
    }

    /// For a [`Value::Elapsed`], its microseconds at `now_us`: `value`,
    /// plus `now_us + extra` while a timing is in progress (i128, so a
    /// hostile `extra` cannot overflow).
    pub fn elapsed_us(&self, now_us: i64) -> Option<i128> {
        match *self {
            Value::Elapsed { value, extra } if extra < 0 => {
                Some(i128::from(value) + i128::from(now_us) + i128::from(extra))
            }
            Value::Elapsed { value, .. } => Some(value.into()),
            _ => None,
        }
    }
}

/// Microseconds since the epoch now, for [`Value::as_f64`].
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One instance of an instance domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Its internal identifier.
    pub internal: i32,
    /// Its external name (PCP's instance name).
    pub name: String,
}

/// An instance domain: the set of instances a metric has one value for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indom {
    /// Its serial number, which metrics name.
    pub serial: u32,
    /// Its instances, in file order.
    pub instances: Vec<Instance>,
    /// One-line help, empty when none.
    pub short_help: String,
    /// Long help, empty when none.
    pub long_help: String,
}

/// One value of a metric: one per instance for a metric with an indom.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The instance, for a metric with an indom.
    pub instance: Option<Instance>,
    /// The value; `None` when the file has the [`Flags::SENTINEL`] flag
    /// and the value is the sentinel meaning "no value" (pmdammv's
    /// `mmv_fetchCallBack`): all eight bytes 0xff for an integer or
    /// elapsed, NaN for a float or double, an empty string.
    pub value: Option<Value>,
}

/// One metric, with its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Its name in the file, e.g. `requests.total`.
    pub name: String,
    /// Its name as pmdammv serves it: `mmv.<file>.<name>`, or
    /// `mmv.<name>` with [`Flags::NOPREFIX`].
    pub pcp_name: String,
    /// Its item number (unique in the file).
    pub item: u32,
    /// Its value type.
    pub kind: Type,
    /// Its semantics as pmdammv serves them (an [`Type::Elapsed`] metric
    /// is a counter).
    pub semantics: Semantics,
    /// Its units as pmdammv serves them (microseconds for an
    /// [`Type::Elapsed`] metric).
    pub units: Units,
    /// The serial of its instance domain, `None` for a single value.
    pub indom: Option<u32>,
    /// One-line help, empty when none.
    pub short_help: String,
    /// Long help, empty when none.
    pub long_help: String,
    /// Its values, in file order.
    pub values: Vec<Sample>,
}

/// One label (format version 3): a name and a JSON value, from the label
/// record's JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    /// `PM_LABEL_*` bits: what it applies to (context 0x1, domain 0x2,
    /// indom 0x4, cluster 0x8, item 0x10, instances 0x20) and optional 0x80.
    pub flags: u32,
    /// The indom serial, cluster or item it applies to.
    pub identity: u32,
    /// The instance it applies to (`PM_IN_NULL`, -1, when none).
    pub internal: i32,
    /// The label's name.
    pub name: String,
    /// The label's value.
    pub value: serde_json::Value,
}

/// A metric pmdammv would not serve, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its name in the file, decoded lossily.
    pub name: String,
    /// Why it was left out.
    pub why: &'static str,
}

/// A parsed copy of an MMV file.
#[derive(Debug, Clone, PartialEq)]
pub struct Mmv {
    /// The header.
    pub header: Header,
    /// Its instance domains.
    pub indoms: Vec<Indom>,
    /// Its metrics, in file order.
    pub metrics: Vec<Metric>,
    /// Its labels (version 3), those whose JSON text could be read.
    pub labels: Vec<Label>,
    /// Label records left out: their layout differs between PCP releases,
    /// and a label never makes the file unreadable.
    pub labels_skipped: usize,
    /// Metrics left out as pmdammv leaves them out.
    pub skipped: Vec<Skipped>,
}

impl Mmv {
    /// The metric whose name in the file is `name`.
    pub fn get(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }
}
