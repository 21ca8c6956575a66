// SPDX-License-Identifier: Apache-2.0
//! The writer side for C: a registry and the handles that update it.
//! Every handle is a boxed Rust handle; an update is the Rust update
//! behind one pointer: no allocation, no lock, no system call.

use std::ffi::{c_char, c_void, CString};

use topdeck::{Counter, Gauge, GaugeF64, Histogram, Registry, Timer};

use crate::args::{self, td_label};
use crate::status::{guard, quietly, td_status};

/// A registry: one file in the namespace directory, removed by
/// `td_registry_close`. Registering is thread-safe.
#[allow(non_camel_case_types)]
pub struct td_registry {
    registry: Registry,
    path: CString,
}

/// A counter handle; updates from any thread.
#[allow(non_camel_case_types)]
pub struct td_counter(Counter);

/// An integer gauge handle; updates from any thread.
#[allow(non_camel_case_types)]
pub struct td_gauge(Gauge);

/// A floating-point gauge handle; updates from any thread.
#[allow(non_camel_case_types)]
pub struct td_gauge_f64(GaugeF64);

/// A histogram handle (exponential buckets, schema 3, 1 ns to 10^6 when
/// recording seconds); updates from any thread.
#[allow(non_camel_case_types)]
pub struct td_histogram(Histogram);

/// A timer handle: a histogram of seconds (unit `seconds`) timed with
/// topdeck's clock; updates from any thread. With the topdeck agent's
/// thread-waits array (see `td_timer_begin`), also each request's CPU wait.
#[allow(non_camel_case_types)]
pub struct td_timer(Timer);

/// Creates a registry and publishes its file.
///
/// `name`: the registry's name shown by readers (NULL: "main").
/// `dir`: the namespace directory (NULL: `TOPDECK_DIR` if set, else
/// `/dev/shm/topdeck-<uid>`). On success `*out` is the registry; on
/// failure it is NULL.
///
/// # Safety
/// `name` and `dir` are NULL or NUL-terminated strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn td_registry_open(
    name: *const c_char,
    dir: *const c_char,
    out: *mut *mut td_registry,
) -> td_status {
    guard(|| {
        // SAFETY: the caller's promises, passed on.
        unsafe { args::clear(out) };
        // SAFETY: as above.
        let name = unsafe { args::text_or(name, "name", "main") }?;
        // SAFETY: as above.
        let dir = unsafe { args::text_or(dir, "dir", "") }?;
        let mut builder = Registry::builder().name(name);
        if !dir.is_empty() {
            builder = builder.dir(dir);
        }
        let registry = builder.build()?;
        let path = crate::status::c_string(&registry.path().to_string_lossy());
        // SAFETY: as above.
        unsafe { args::give(out, td_registry { registry, path }) }
    })
}

/// The file this registry publishes (owned by the registry).
///
/// # Safety
/// `registry` is NULL or a live registry. NULL gives "".
#[no_mangle]
pub unsafe extern "C" fn td_registry_path(registry: *const td_registry) -> *const c_char {
    // SAFETY: the caller's promise.
    quietly(c"".as_ptr(), || match unsafe { registry.as_ref() } {
        Some(r) => r.path.as_ptr(),
        None => c"".as_ptr(),
    })
}

/// Closes a registry and removes its file. Handles made from it stay
/// valid (they update a mapping nobody reads any more) until freed.
/// NULL is ignored.
///
/// # Safety
/// `registry` is NULL or a live registry, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_registry_close(registry: *mut td_registry) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(registry) })
}

/// What every registration takes from C, checked.
struct Spec<'a> {
    registry: &'a Registry,
    name: &'a str,
    labels: Vec<(&'a str, &'a str)>,
    help: &'a str,
    unit: &'a str,
}

/// Registers one metric and hands its boxed handle to C.
///
/// # Safety
/// The pointers follow the `td_*_new` contract.
#[allow(clippy::too_many_arguments)]
unsafe fn register<H>(
    registry: *mut td_registry,
    name: *const c_char,
    labels: *const td_label,
    label_count: usize,
    help: *const c_char,
    unit: *const c_char,
    out: *mut *mut H,
    make: impl FnOnce(&Spec<'_>) -> topdeck::Result<H>,
) -> td_status {
    guard(|| {
        // SAFETY: the caller's promises, passed on (also below).
        unsafe { args::clear(out) };
        let spec = Spec {
            // SAFETY: see above.
            registry: &unsafe { args::handle(registry, "registry") }?.registry,
            // SAFETY: see above.
            name: unsafe { args::text(name, "name") }?,
            // SAFETY: see above.
            labels: unsafe { args::labels(labels, label_count) }?,
            // SAFETY: see above.
            help: unsafe { args::text_or(help, "help", "") }?,
            // SAFETY: see above.
            unit: unsafe { args::text_or(unit, "unit", "") }?,
        };
        let handle = make(&spec)?;
        // SAFETY: see above.
        unsafe { args::give(out, handle) }
    })
}

/// Registers a counter. `name` and label keys follow Prometheus rules;
/// the same name and labels may be registered once (`TD_ERR_DUPLICATE`).
/// `labels` is an array of `label_count` pairs (NULL when 0); `help` and
/// `unit` may be NULL (empty). On success `*out` is the handle, to free
/// with `td_counter_free`; on failure NULL.
///
/// # Safety
/// `registry` is a live registry; strings are NUL-terminated; `labels`
/// holds `label_count` labels; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn td_counter_new(
    registry: *mut td_registry,
    name: *const c_char,
    labels: *const td_label,
    label_count: usize,
    help: *const c_char,
    unit: *const c_char,
    out: *mut *mut td_counter,
) -> td_status {
    // SAFETY: the same contract as ours.
    unsafe {
        register(registry, name, labels, label_count, help, unit, out, |s| {
            s.registry
                .counter(s.name, &s.labels, s.help, s.unit)
                .map(td_counter)
        })
    }
}

/// Adds one. A NULL handle is ignored.
///
/// # Safety
/// `counter` is NULL or a live counter.
#[no_mangle]
pub unsafe extern "C" fn td_counter_inc(counter: *const td_counter) {
    // SAFETY: the caller's promise.
    if let Some(c) = unsafe { counter.as_ref() } {
        quietly((), || c.0.inc())
    }
}

/// Adds `n`; a total that would pass 2^64-1 stays at 2^64-1 (a counter
/// stops rather than going backwards). A NULL handle is ignored.
///
/// # Safety
/// `counter` is NULL or a live counter.
#[no_mangle]
pub unsafe extern "C" fn td_counter_add(counter: *const td_counter, n: u64) {
    // SAFETY: the caller's promise.
    if let Some(c) = unsafe { counter.as_ref() } {
        quietly((), || c.0.add(n))
    }
}

/// The counter's total over all threads, as a reader would see it (NULL: 0).
///
/// # Safety
/// `counter` is NULL or a live counter.
#[no_mangle]
pub unsafe extern "C" fn td_counter_get(counter: *const td_counter) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { counter.as_ref() }.map_or(0, |c| quietly(0, || c.0.get()))
}

/// Frees a counter handle (the metric stays in the file). NULL is ignored.
///
/// # Safety
/// `counter` is NULL or a live counter, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_counter_free(counter: *mut td_counter) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(counter) })
}

/// Registers an integer gauge; arguments as `td_counter_new`.
///
/// # Safety
/// As `td_counter_new`.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_new(
    registry: *mut td_registry,
    name: *const c_char,
    labels: *const td_label,
    label_count: usize,
    help: *const c_char,
    unit: *const c_char,
    out: *mut *mut td_gauge,
) -> td_status {
    // SAFETY: the same contract as ours.
    unsafe {
        register(registry, name, labels, label_count, help, unit, out, |s| {
            s.registry
                .gauge(s.name, &s.labels, s.help, s.unit)
                .map(td_gauge)
        })
    }
}

/// Sets the gauge. A NULL handle is ignored.
///
/// # Safety
/// `gauge` is NULL or a live gauge.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_set(gauge: *const td_gauge, value: i64) {
    // SAFETY: the caller's promise.
    if let Some(g) = unsafe { gauge.as_ref() } {
        quietly((), || g.0.set(value))
    }
}

/// Adds `n` (negative to subtract). A NULL handle is ignored.
///
/// # Safety
/// `gauge` is NULL or a live gauge.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_add(gauge: *const td_gauge, n: i64) {
    // SAFETY: the caller's promise.
    if let Some(g) = unsafe { gauge.as_ref() } {
        quietly((), || g.0.add(n))
    }
}

/// The gauge's value (NULL: 0).
///
/// # Safety
/// `gauge` is NULL or a live gauge.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_get(gauge: *const td_gauge) -> i64 {
    // SAFETY: the caller's promise.
    unsafe { gauge.as_ref() }.map_or(0, |g| quietly(0, || g.0.get()))
}

/// Frees a gauge handle. NULL is ignored.
///
/// # Safety
/// `gauge` is NULL or a live gauge, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_free(gauge: *mut td_gauge) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(gauge) })
}

/// Registers a floating-point gauge; arguments as `td_counter_new`.
///
/// # Safety
/// As `td_counter_new`.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_f64_new(
    registry: *mut td_registry,
    name: *const c_char,
    labels: *const td_label,
    label_count: usize,
    help: *const c_char,
    unit: *const c_char,
    out: *mut *mut td_gauge_f64,
) -> td_status {
    // SAFETY: the same contract as ours.
    unsafe {
        register(registry, name, labels, label_count, help, unit, out, |s| {
            s.registry
                .gauge_f64(s.name, &s.labels, s.help, s.unit)
                .map(td_gauge_f64)
        })
    }
}

/// Sets the gauge. A NULL handle is ignored.
///
/// # Safety
/// `gauge` is NULL or a live gauge.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_f64_set(gauge: *const td_gauge_f64, value: f64) {
    // SAFETY: the caller's promise.
    if let Some(g) = unsafe { gauge.as_ref() } {
        quietly((), || g.0.set(value))
    }
}

/// Adds `v` (a compare-and-swap loop). A NULL handle is ignored.
///
/// # Safety
/// `gauge` is NULL or a live gauge.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_f64_add(gauge: *const td_gauge_f64, v: f64) {
    // SAFETY: the caller's promise.
    if let Some(g) = unsafe { gauge.as_ref() } {
        quietly((), || g.0.add(v))
    }
}

/// The gauge's value (NULL: 0).
///
/// # Safety
/// `gauge` is NULL or a live gauge.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_f64_get(gauge: *const td_gauge_f64) -> f64 {
    // SAFETY: the caller's promise.
    unsafe { gauge.as_ref() }.map_or(0.0, |g| quietly(0.0, || g.0.get()))
}

/// Frees a gauge handle. NULL is ignored.
///
/// # Safety
/// `gauge` is NULL or a live gauge, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_gauge_f64_free(gauge: *mut td_gauge_f64) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(gauge) })
}

/// Registers a histogram with the library's default buckets (schema 3,
/// about 9% wide, from 1e-9 to 1e6); arguments as `td_counter_new`.
///
/// # Safety
/// As `td_counter_new`.
#[no_mangle]
pub unsafe extern "C" fn td_histogram_new(
    registry: *mut td_registry,
    name: *const c_char,
    labels: *const td_label,
    label_count: usize,
    help: *const c_char,
    unit: *const c_char,
    out: *mut *mut td_histogram,
) -> td_status {
    // SAFETY: the same contract as ours.
    unsafe {
        register(registry, name, labels, label_count, help, unit, out, |s| {
            s.registry
                .histogram(s.name, &s.labels, s.help, s.unit)
                .map(td_histogram)
        })
    }
}

/// Records one observation. NaN is ignored; values at or below the zero
/// threshold (negatives included) count in the zero bucket. A NULL handle
/// is ignored.
///
/// # Safety
/// `histogram` is NULL or a live histogram.
#[no_mangle]
pub unsafe extern "C" fn td_histogram_record(histogram: *const td_histogram, value: f64) {
    // SAFETY: the caller's promise.
    if let Some(h) = unsafe { histogram.as_ref() } {
        quietly((), || h.0.record(value))
    }
}

/// Observations recorded so far, over all threads (NULL: 0).
///
/// # Safety
/// `histogram` is NULL or a live histogram.
#[no_mangle]
pub unsafe extern "C" fn td_histogram_count(histogram: *const td_histogram) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { histogram.as_ref() }.map_or(0, |h| quietly(0, || h.0.count()))
}

/// Frees a histogram handle. NULL is ignored.
///
/// # Safety
/// `histogram` is NULL or a live histogram, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_histogram_free(histogram: *mut td_histogram) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(histogram) })
}

/// Registers a timer: a histogram of seconds (unit `seconds`); by
/// Prometheus convention `name` ends in `_seconds`. Arguments as
/// `td_counter_new`, without a unit.
///
/// # Safety
/// As `td_counter_new`.
#[no_mangle]
pub unsafe extern "C" fn td_timer_new(
    registry: *mut td_registry,
    name: *const c_char,
    labels: *const td_label,
    label_count: usize,
    help: *const c_char,
    out: *mut *mut td_timer,
) -> td_status {
    // SAFETY: the same contract as ours; a NULL unit is "".
    unsafe {
        register(
            registry,
            name,
            labels,
            label_count,
            help,
            std::ptr::null(),
            out,
            |s| s.registry.timer(s.name, &s.labels, s.help).map(td_timer),
        )
    }
}

/// A timing begun by `td_timer_begin`, to pass unchanged to `td_timer_end`
/// of the same timer. A plain value: keep it on the stack or in a
/// request's struct; dropping it records nothing.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct td_timing {
    /// The clock's raw tick count at the start.
    pub start: u64,
    /// The thread's cumulative CPU wait at the start, in nanoseconds (0
    /// without a slot).
    pub wait: u64,
    /// The thread's slot in the agent's thread-waits array; NULL when the
    /// timer records no CPU wait for this timing.
    pub slot: *const c_void,
    /// The array's state word; NULL with `slot`.
    pub state: *const c_void,
}

/// Starts a timing that also records the CPU wait: the tick count now
/// and, when the registry mapped the topdeck agent's thread-waits array
/// (`TOPDECK_THREAD_WAITS`, default `/sys/fs/bpf/topdeck/thread_waits`;
/// `off`: never), the calling thread's cumulative run-queue wait (one
/// plain load, no system call). `td_timer_end` then records the elapsed
/// time as `td_timer_stop` does and the wait during the section in
/// `<base>_cpu_wait_seconds` (`<base>`: the timer's name without
/// `_seconds`), or, if the agent stopped meanwhile, the elapsed time in
/// `<base>_cpu_wait_unknown_seconds`. The wait is the starting thread's:
/// end a timing on the thread that began it. A NULL timer gives a timing
/// with no wait.
///
/// # Safety
/// `timer` is NULL or a live timer.
#[no_mangle]
pub unsafe extern "C" fn td_timer_begin(timer: *const td_timer) -> td_timing {
    let bare = |start| td_timing {
        start,
        wait: 0,
        slot: std::ptr::null(),
        state: std::ptr::null(),
    };
    // SAFETY: the caller's promise.
    match unsafe { timer.as_ref() } {
        None => quietly(bare(0), || bare(topdeck::clock::ticks())),
        Some(t) => quietly(bare(0), || {
            let (start, wait, slot, state) = t.0.begin().into_raw();
            td_timing {
                start,
                wait,
                slot: slot.cast(),
                state: state.cast(),
            }
        }),
    }
}

/// Ends a timing begun by `td_timer_begin` on the same timer: records it
/// (see there) and returns the elapsed time in nanoseconds. A NULL timer
/// records nothing.
///
/// # Safety
/// `timer` is NULL or a live timer; `timing` came from `td_timer_begin`
/// on that timer, unchanged.
#[no_mangle]
pub unsafe extern "C" fn td_timer_end(timer: *const td_timer, timing: td_timing) -> u64 {
    // SAFETY: the caller's promise.
    match unsafe { timer.as_ref() } {
        None => quietly(0, || {
            topdeck::clock::ticks_delta_to_ns(topdeck::clock::ticks().saturating_sub(timing.start))
        }),
        Some(t) => quietly(0, || {
            // SAFETY: the parts of a timing this timer began (the caller's
            // promise); the timer is alive, so its array is mapped.
            let timing = unsafe {
                topdeck::Timing::from_raw(
                    timing.start,
                    timing.wait,
                    timing.slot.cast(),
                    timing.state.cast(),
                )
            };
            t.0.end(timing).as_nanos() as u64
        }),
    }
}

/// Whether this timer records CPU wait: its registry mapped the agent's
/// thread-waits array when it was opened (NULL: false).
///
/// # Safety
/// `timer` is NULL or a live timer.
#[no_mangle]
pub unsafe extern "C" fn td_timer_has_cpu_wait(timer: *const td_timer) -> bool {
    // SAFETY: the caller's promise.
    unsafe { timer.as_ref() }.is_some_and(|t| t.0.cpu_wait_histogram().is_some())
}

/// Timings whose CPU wait was recorded, over all threads (0 without).
///
/// # Safety
/// `timer` is NULL or a live timer.
#[no_mangle]
pub unsafe extern "C" fn td_timer_cpu_wait_count(timer: *const td_timer) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { timer.as_ref() }.map_or(0, |t| {
        quietly(0, || t.0.cpu_wait_histogram().map_or(0, |h| h.count()))
    })
}

/// Timings whose CPU wait could not be known (the agent stopped during
/// them), over all threads (0 without the array).
///
/// # Safety
/// `timer` is NULL or a live timer.
#[no_mangle]
pub unsafe extern "C" fn td_timer_cpu_wait_unknown_count(timer: *const td_timer) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { timer.as_ref() }.map_or(0, |t| {
        quietly(0, || {
            t.0.cpu_wait_unknown_histogram().map_or(0, |h| h.count())
        })
    })
}

/// Starts a timing: the clock's raw tick count now, to pass to
/// `td_timer_stop`. Any number of timings may run at once, on any thread.
/// Records latency only, never CPU wait: use `td_timer_begin` for that.
///
/// # Safety
/// `timer` is NULL or a live timer (it is not read: the argument keeps
/// start and stop symmetrical).
#[no_mangle]
pub unsafe extern "C" fn td_timer_start(timer: *const td_timer) -> u64 {
    let _ = timer;
    quietly(0, topdeck::clock::ticks)
}

/// Stops a timing begun by `td_timer_start`, records the elapsed time in
/// seconds and returns it in nanoseconds. A NULL handle records nothing.
/// No CPU wait is recorded (`td_timer_end` records it).
///
/// # Safety
/// `timer` is NULL or a live timer.
#[no_mangle]
pub unsafe extern "C" fn td_timer_stop(timer: *const td_timer, start: u64) -> u64 {
    let elapsed = quietly(0, || {
        topdeck::clock::ticks_delta_to_ns(topdeck::clock::ticks().saturating_sub(start))
    });
    // SAFETY: the caller's promise.
    if let Some(t) = unsafe { timer.as_ref() } {
        quietly((), || t.0.record_ns(elapsed))
    }
    elapsed
}

/// Records a duration measured elsewhere, in nanoseconds. A NULL handle
/// is ignored.
///
/// # Safety
/// `timer` is NULL or a live timer.
#[no_mangle]
pub unsafe extern "C" fn td_timer_record_ns(timer: *const td_timer, ns: u64) {
    // SAFETY: the caller's promise.
    if let Some(t) = unsafe { timer.as_ref() } {
        quietly((), || t.0.record_ns(ns))
    }
}

/// Timings recorded so far, over all threads (NULL: 0).
///
/// # Safety
/// `timer` is NULL or a live timer.
#[no_mangle]
pub unsafe extern "C" fn td_timer_count(timer: *const td_timer) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { timer.as_ref() }.map_or(0, |t| quietly(0, || t.0.histogram().count()))
}

/// Frees a timer handle. NULL is ignored.
///
/// # Safety
/// `timer` is NULL or a live timer, not used again.
#[no_mangle]
pub unsafe extern "C" fn td_timer_free(timer: *mut td_timer) {
    // SAFETY: the caller's promise.
    quietly((), || unsafe { args::free(timer) })
}
