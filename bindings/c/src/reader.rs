// SPDX-License-Identifier: Apache-2.0
//! The reader side for C: list a namespace directory, open a registry,
//! take snapshots and walk their metrics. Everything a snapshot or a
//! listing hands out is owned by it and valid until it is freed.

use std::ffi::{c_char, CString};
use std::path::Path;

use topdeck::{Liveness, Namespace, RegistryEntry, RegistryReader, Snapshot, Value};

use crate::args::{self, td_label};
use crate::status::c_string;
use crate::status::{guard, quietly, td_status, Failure};

/// One registry found by `td_list`. Strings are owned by the listing.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct td_entry {
    /// The file's path.
    pub path: *const c_char,
    /// The file's name, without its directory.
    pub file_name: *const c_char,
    /// The registry's name, as its writer gave it.
    pub registry_name: *const c_char,
    /// The writer's process name (its `argv[0]`): a claim, not a proof.
    pub process_name: *const c_char,
    /// The writer's pid.
    pub pid: u32,
    /// Metrics published when listed.
    pub metrics: u32,
    /// Whether the writer was alive when listed (it holds its lock).
    pub alive: bool,
}

/// A file `td_list` could not read as a registry, and why.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct td_rejected {
    /// The file's path ("" for an error about no one file).
    pub path: *const c_char,
    /// What is wrong and what to do.
    pub message: *const c_char,
}

/// The registries of a namespace directory, as listed once.
#[allow(non_camel_case_types)]
pub struct td_listing {
    found: Vec<RegistryEntry>,
    entries: Vec<td_entry>,
    rejected: Vec<td_rejected>,
    /// What `entries` and `rejected` point into.
    _strings: Vec<CString>,
}

/// Keeps C strings alive and hands out pointers to them.
#[derive(Default)]
struct Strings(Vec<CString>);

impl Strings {
    fn add(&mut self, s: &str) -> *const c_char {
        let c = c_string(s);
        // The bytes live on the heap: moving the CString into the vector
        // does not move them.
        let p = c.as_ptr();
        self.0.push(c);
        p
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Lists the registries in `dir` (NULL: this user's namespace, i.e.
/// `TOPDECK_DIR` if set, else `/dev/shm/topdeck-<uid>` and its
/// fallbacks). Unreadable files do not fail the call: they are listed as
/// rejected. Fails only if the named `dir` itself cannot be read. On
/// success `*out` is the listing, to free with `td_listing_free`.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn td_list(dir: *const c_char, out: *mut *mut td_listing) -> td_status {
    guard(|| {
        // SAFETY: the caller's promises, passed on (also below).
        unsafe { args::clear(out) };
        // SAFETY: see above.
        let dir = unsafe { args::text_or(dir, "dir", "") }?;
        let named = !dir.is_empty();
        let ns = if named {
            Namespace::at(dir)
        } else {
            Namespace::own()
        };
        let listing = ns.list();
        if named && !listing.unusable.is_empty() {
            let why = listing.errors.into_iter().next().map_or_else(
                || Failure {
                    status: td_status::TD_ERR_IO,
                    message: format!("{dir}: cannot be read as a namespace directory"),
                },
                Failure::from,
            );
            return Err(why);
        }
        let mut strings = Strings::default();
        let entries = listing
            .entries
            .iter()
            .map(|e| td_entry {
                path: strings.add(&e.path.to_string_lossy()),
                file_name: strings.add(&file_name(&e.path)),
                registry_name: strings.add(&e.registry_name),
                process_name: strings.add(&e.process_name),
                pid: e.pid,
                metrics: e.metrics,
                alive: e.liveness == Liveness::Alive,
            })
            .collect();
        let rejected = listing
            .errors
            .iter()
            .map(|e| td_rejected {
                path: strings.add(&e.path().map(|p| p.to_string_lossy()).unwrap_or_default()),
                message: strings.add(&e.to_string()),
            })
            .collect();
        let listing = td_listing {
            found: listing.entries,
            entries,
            rejected,
            _strings: strings.0,
        };
        // SAFETY: see above.
        unsafe { args::give(out, listing) }
    })
}

/// Registries in the listing (NULL: 0).
///
/// # Safety
/// `listing` is NULL or a live listing.
#[no_mangle]
pub unsafe extern "C" fn td_listing_count(listing: *const td_listing) -> usize {
    // SAFETY: the caller's promise.
    unsafe { listing.as_ref() }.map_or(0, |l| l.entries.len())
}

/// Registry `i` of the listing (sorted by pid, then path), or NULL when
/// `i` is out of range. Owned by the listing.
///
/// # Safety
/// `listing` is NULL or a live listing.
#[no_mangle]
pub unsafe extern "C" fn td_listing_entry(listing: *const td_listing, i: usize) -> *const td_entry {
    // SAFETY: the caller's promise.
    unsafe { listing.as_ref() }
        .and_then(|l| l.entries.get(i))
        .map_or(std::ptr::null(), |e| e as *const td_entry)
}

/// Files the listing could not read (NULL: 0).
///
/// # Safety
/// `listing` is NULL or a live listing.
#[no_mangle]
pub unsafe extern "C" fn td_listing_rejected_count(listing: *const td_listing) -> usize {
    // SAFETY: the caller's promise.
    unsafe { listing.as_ref() }.map_or(0, |l| l.rejected.len())
}

/// Rejected file `i`, or NULL when `i` is out of range. Owned by the listing.
///
/// # Safety
/// `listing` is NULL or a live listing.
#[no_mangle]
pub unsafe extern "C" fn td_listing_rejected(
    listing: *const td_listing,
    i: usize,
) -> *const td_rejected {
    // SAFETY: the caller's promise.
    unsafe { listing.as_ref() }
        .and_then(|l| l.rejected.get(i))
        .map_or(std::ptr::null(), |r| r as *const td_rejected)
}

/// Frees a listing and everything it handed out. NULL is ignored.
///
/// # Safety
/// `listing` is NULL or a live listing, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_listing_free(listing: *mut td_listing) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(listing) })
}

/// A reader on one registry: read-only, takes no lock the writer waits
/// on. Use it from one thread at a time.
#[allow(non_camel_case_types)]
pub struct td_reader(RegistryReader);

/// Opens registry `i` of a listing: the very file that was listed. The
/// listing may be freed afterwards. On success `*out` is the reader, to
/// close with `td_reader_close`.
///
/// # Safety
/// `listing` is a live listing; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn td_reader_open(
    listing: *const td_listing,
    i: usize,
    out: *mut *mut td_reader,
) -> td_status {
    guard(|| {
        // SAFETY: the caller's promises, passed on (also below).
        unsafe { args::clear(out) };
        // SAFETY: see above.
        let l = unsafe { args::handle(listing, "listing") }?;
        let entry = l.found.get(i).ok_or_else(|| {
            Failure::invalid(format!(
                "registry {i} asked of a listing of {}; pass an index below td_listing_count()",
                l.found.len()
            ))
        })?;
        let reader = entry.open()?;
        // SAFETY: see above.
        unsafe { args::give(out, td_reader(reader)) }
    })
}

/// Opens the registry file at `path`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn td_reader_open_path(
    path: *const c_char,
    out: *mut *mut td_reader,
) -> td_status {
    guard(|| {
        // SAFETY: the caller's promises, passed on (also below).
        unsafe { args::clear(out) };
        // SAFETY: see above.
        let path = unsafe { args::text(path, "path") }?;
        let reader = RegistryReader::open(Path::new(path))?;
        // SAFETY: see above.
        unsafe { args::give(out, td_reader(reader)) }
    })
}

/// Whether the registry's writer is alive now (it holds its lock); false
/// for NULL.
///
/// # Safety
/// `reader` is NULL or a live reader.
#[no_mangle]
pub unsafe extern "C" fn td_reader_alive(reader: *const td_reader) -> bool {
    // SAFETY: the caller's promise.
    unsafe { reader.as_ref() }.is_some_and(|r| quietly(false, || r.0.liveness() == Liveness::Alive))
}

/// Closes a reader. Snapshots taken from it stay valid. NULL is ignored.
///
/// # Safety
/// `reader` is NULL or a live reader, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_reader_close(reader: *mut td_reader) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(reader) })
}

/// The kind of a metric in a snapshot.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum td_kind {
    /// Monotonic counter: `counter` holds the value.
    TD_KIND_COUNTER = 0,
    /// Integer gauge: `gauge` holds the value.
    TD_KIND_GAUGE = 1,
    /// Floating-point gauge: `gauge_f64` holds the value.
    TD_KIND_GAUGE_F64 = 2,
    /// Exponential histogram (timers too): `histogram` holds the value.
    TD_KIND_HISTOGRAM = 3,
}

/// A histogram's value, summed over the writer's threads.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct td_histogram_value {
    /// Bucket schema: bucket boundaries grow by 2^(2^-schema).
    pub schema: i8,
    /// Upper bound of the zero bucket.
    pub zero_threshold: f64,
    /// Observations in the zero bucket.
    pub zero_count: u64,
    /// Index of `buckets[0]`; bucket `i` covers (base^(i-1), base^i].
    pub min_index: i32,
    /// Observations per bucket (NULL when `bucket_count` is 0).
    pub buckets: *const u64,
    /// Length of `buckets`.
    pub bucket_count: usize,
    /// Total observations (zero bucket included).
    pub count: u64,
    /// Sum of observations.
    pub sum: f64,
    /// Largest observation, when `has_max`.
    pub max: f64,
    /// Whether anything was recorded, so that `max` means something.
    pub has_max: bool,
}

/// One metric of a snapshot. Strings are NUL-terminated UTF-8 (a NUL
/// inside one, possible only in a hostile file, cuts it there); all are
/// owned by the snapshot. Only the field that `kind` names holds the value.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct td_metric {
    /// Kind, which says which value field is set.
    pub kind: td_kind,
    /// Name.
    pub name: *const c_char,
    /// Labels in registration order (NULL when `label_count` is 0).
    pub labels: *const td_label,
    /// Length of `labels`.
    pub label_count: usize,
    /// Help text (may be "").
    pub help: *const c_char,
    /// Unit (may be "").
    pub unit: *const c_char,
    /// A counter's value.
    pub counter: u64,
    /// An integer gauge's value.
    pub gauge: i64,
    /// A floating-point gauge's value.
    pub gauge_f64: f64,
    /// A histogram's value.
    pub histogram: td_histogram_value,
}

/// One registry's metrics as read at one moment.
#[allow(non_camel_case_types)]
pub struct td_snapshot {
    metrics: Vec<td_metric>,
    /// What `metrics` point into: each vector's heap buffer stays put.
    _strings: Vec<CString>,
    _labels: Vec<Vec<td_label>>,
    _buckets: Vec<Vec<u64>>,
}

const NO_HISTOGRAM: td_histogram_value = td_histogram_value {
    schema: 0,
    zero_threshold: 0.0,
    zero_count: 0,
    min_index: 0,
    buckets: std::ptr::null(),
    bucket_count: 0,
    count: 0,
    sum: 0.0,
    max: 0.0,
    has_max: false,
};

fn ptr_or_null<T>(v: &[T]) -> *const T {
    if v.is_empty() {
        std::ptr::null()
    } else {
        v.as_ptr()
    }
}

impl td_snapshot {
    fn new(snap: &Snapshot) -> Self {
        let mut strings = Strings::default();
        let mut labels = Vec::new();
        let mut buckets = Vec::new();
        let mut metrics = Vec::with_capacity(snap.len());
        for (info, value) in snap.iter() {
            let own: Vec<td_label> = info
                .labels
                .iter()
                .map(|(k, v)| td_label {
                    key: strings.add(k),
                    value: strings.add(v),
                })
                .collect();
            let mut m = td_metric {
                kind: td_kind::TD_KIND_COUNTER,
                name: strings.add(&info.name),
                labels: ptr_or_null(&own),
                label_count: own.len(),
                help: strings.add(&info.help),
                unit: strings.add(&info.unit),
                counter: 0,
                gauge: 0,
                gauge_f64: 0.0,
                histogram: NO_HISTOGRAM,
            };
            labels.push(own);
            match value {
                Value::Counter(n) => m.counter = *n,
                Value::Gauge(n) => (m.kind, m.gauge) = (td_kind::TD_KIND_GAUGE, *n),
                Value::GaugeF64(v) => (m.kind, m.gauge_f64) = (td_kind::TD_KIND_GAUGE_F64, *v),
                Value::Histogram(h) => {
                    // Moving `own` into `buckets` leaves its heap buffer,
                    // which the pointer names, where it is.
                    let own = h.buckets.clone();
                    m.kind = td_kind::TD_KIND_HISTOGRAM;
                    m.histogram = td_histogram_value {
                        schema: h.schema,
                        zero_threshold: h.zero_threshold,
                        zero_count: h.zero_count,
                        min_index: h.min_index,
                        buckets: ptr_or_null(&own),
                        bucket_count: own.len(),
                        count: h.count,
                        sum: h.sum,
                        max: h.max.unwrap_or(0.0),
                        has_max: h.max.is_some(),
                    };
                    buckets.push(own);
                }
                // Other runtimes' values come from foreign readers, never
                // from a registry's snapshot.
                _ => continue,
            }
            metrics.push(m);
        }
        Self {
            metrics,
            _strings: strings.0,
            _labels: labels,
            _buckets: buckets,
        }
    }
}

/// Reads every metric of the registry now. On success `*out` is the
/// snapshot, to free with `td_snapshot_free`.
///
/// # Safety
/// `reader` is a live reader not used by another thread during the call;
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn td_reader_snapshot(
    reader: *mut td_reader,
    out: *mut *mut td_snapshot,
) -> td_status {
    guard(|| {
        // SAFETY: the caller's promises, passed on (also below).
        unsafe { args::clear(out) };
        // SAFETY: see above; the caller promises exclusive use.
        let r = unsafe { reader.as_mut() }.ok_or_else(|| Failure::invalid("reader is NULL"))?;
        let snap = td_snapshot::new(&r.0.snapshot()?);
        // SAFETY: see above.
        unsafe { args::give(out, snap) }
    })
}

/// Metrics in the snapshot (NULL: 0).
///
/// # Safety
/// `snapshot` is NULL or a live snapshot.
#[no_mangle]
pub unsafe extern "C" fn td_snapshot_count(snapshot: *const td_snapshot) -> usize {
    // SAFETY: the caller's promise.
    unsafe { snapshot.as_ref() }.map_or(0, |s| s.metrics.len())
}

/// Metric `i` in registration order, or NULL when `i` is out of range.
/// Owned by the snapshot.
///
/// # Safety
/// `snapshot` is NULL or a live snapshot.
#[no_mangle]
pub unsafe extern "C" fn td_snapshot_metric(
    snapshot: *const td_snapshot,
    i: usize,
) -> *const td_metric {
    // SAFETY: the caller's promise.
    unsafe { snapshot.as_ref() }
        .and_then(|s| s.metrics.get(i))
        .map_or(std::ptr::null(), |m| m as *const td_metric)
}

/// Frees a snapshot and everything it handed out. NULL is ignored.
///
/// # Safety
/// `snapshot` is NULL or a live snapshot, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_snapshot_free(snapshot: *mut td_snapshot) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(snapshot) })
}
