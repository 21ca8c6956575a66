// SPDX-License-Identifier: Apache-2.0
//! A fast monotonic clock: the TSC, calibrated against `CLOCK_MONOTONIC`,
//! where that beats `clock_gettime`, and the OS clock everywhere else.
//!
//! [`now()`] returns `CLOCK_MONOTONIC`-scale nanoseconds from one TSC read,
//! a multiply and an add; [`wall()`] adds the realtime offset to the same
//! read; [`now_ordered()`] waits for earlier instructions first; [`ticks()`]
//! and [`ticks_to_ns()`] let callers store raw counts and convert later.
//!
//! On first use the clock decides, once, whether the TSC may be used
//! (CPUID says invariant *and* the kernel's clocksource is `tsc`),
//! calibrates for a millisecond (a least-squares line through ~400
//! bracketed samples; a TSC slower than 1.05 GHz, which no x86_64 server
//! has, is left to the OS: the read keeps the rate below one ns per tick),
//! and races its read path against `clock_gettime`: if the OS is as fast,
//! it steps aside. When it keeps the TSC it starts one
//! thread that recalibrates 4, 16, 64 and 256 ms and 1 s after start-up,
//! measures the skew between CPUs once (per-CPU offsets only if a skew
//! exceeds its measurement error), and then recalibrates every 3 s,
//! sleeping in between. Recalibration averages the narrowest of many
//! bracketed `(clock_gettime, rdtsc, clock_gettime)` samples, ignores a
//! sample whose brackets are all wide (a preempted or slowed thread), takes
//! a rate over a window that grows from the first millisecond to 64 s, and
//! publishes new parameters through a seqlock that start exactly where the
//! old ones were and run slightly fast or slow until the error is gone
//! (slewing): no step, monotone across threads by construction. Each
//! thread also clamps to the last value it returned, and counts when that
//! was needed ([`stats()`]). [`source()`] says which source is in force and
//! why.
//!
//! # Bound
//!
//! On the TSC with one global calibration, [`bound()`] says what holds:
//!
//! - `|now() - CLOCK_MONOTONIC|` stays within **100 ns** from the first
//!   call on, start-up included, and a recalibration taken while every CPU
//!   is busy does not change that (measured on a 2-vCPU AMD EPYC Zen 5
//!   KVM guest over 10 minutes from start: drift at most 10 ns, error at
//!   most 21 ns, where a start-up calibration from two samples had drifted
//!   30-591 ns by the first second; docs/PERFORMANCE.md, `clock_lab`).
//!   Not included: what
//!   the Caveats below list (suspend, VM migration, NTP changing
//!   `CLOCK_MONOTONIC`'s rate, which adds up to 3 s times that change).
//! - [`now_ordered()`] read after synchronising with another thread
//!   (a lock, an acquire load of what it published) is never below that
//!   thread's earlier reading (0 in ~10^8 hand-offs); in per-CPU mode, up
//!   to the skew's measurement error.
//! - [`now()`] has no such promise across threads (see Ordering below);
//!   per thread it never goes backwards.
//!
//! ```
//! let t0 = topdeck_clock::now();
//! let t1 = topdeck_clock::now();
//! assert!(t1 >= t0);
//! let src = topdeck_clock::source();
//! println!("{}: {}", src.kind.name(), src.reason);
//! ```
//!
//! # Which read
//!
//! Each guarantee has a price, paid in the latency a read adds after the
//! counter (what shows when the next instruction waits for the result;
//! back to back on Zen all of these cost what `rdtsc` does). Measured with
//! an `lfence` after each read on an AMD EPYC Zen 4 (docs/PERFORMANCE.md,
//! "Clock: the line from count zero"; Intel not measured):
//!
//! | read | what it gives | each read waited for |
//! |---|---|---:|
//! | [`ticks()`] | the raw count: nothing converted, not clamped; convert a difference with [`ticks_delta_to_ns()`] | 18.53 ns (`rdtsc` 18.57, minstant 18.81) |
//! | [`now()`] | ns, never below this thread's last reading, within the drift bound | 20.18 ns |
//! | [`now_ordered()`] | as `now()`, and read only after every earlier instruction | 19.89 ns back to back (`rdtscp` 18.27) |
//!
//! Of what `now()` adds to `ticks()`, the clamp (per-thread monotonicity)
//! is about 0.34 ns and the sequence check nothing measurable; the rest,
//! about 1.3 ns, is the conversion, a multiply and a carry add. A timer
//! that takes two readings and converts once uses `ticks()`, as the
//! library's does.
//!
//! ```
//! let t0 = topdeck_clock::ticks();
//! let t1 = topdeck_clock::ticks();
//! let ns = topdeck_clock::ticks_delta_to_ns(t1.saturating_sub(t0));
//! assert!(ns < 1_000_000_000);
//! ```
//!
//! # Environment
//!
//! - `TOPDECK_CLOCK=os|tsc|auto`: `os` always uses `clock_gettime`; `tsc`
//!   uses an invariant TSC even if the kernel's clocksource is another or
//!   the OS read is as fast.
//! - `TOPDECK_CLOCK_FORCE=no-invariant,clocksource,os-faster,skew,step`
//!   (test hooks): pretend CPUID reports no invariant TSC, the clocksource
//!   is not `tsc`, the OS read won the race, the CPUs are skewed, or the
//!   kernel clock stepped before the first recalibration.
//!
//! # Caveats
//!
//! - **Suspend**: detected at the next recalibration (≤ 3 s later) from a
//!   change of `CLOCK_BOOTTIME - CLOCK_MONOTONIC`; until then the clock may
//!   be off by the jump. It then calibrates from scratch: forward without
//!   slewing, backward by slewing at up to 5 %, or, if more than 1 s ahead,
//!   by a step that each thread's clamp turns into a pause.
//! - **VM migration** to a host with another TSC rate or offset: caught as
//!   an error beyond 1 ms at the next recalibration, as above. Three such
//!   resets within 60 s and the clock switches to the OS for good.
//! - **CPU hotplug**: a CPU brought online after start-up is not in the
//!   skew measurement; in per-CPU mode its offset is taken as 0.
//! - **Drift**: between recalibrations the error grows with the rate error
//!   (under a part per million from the first millisecond, parts per
//!   billion after the first seconds) and with NTP's changes to
//!   `CLOCK_MONOTONIC`'s rate. The TSC of some CPUs (AMD Zen, here)
//!   advances in ~10 ns steps, so single readings of any TSC clock are
//!   that coarse.
//! - **`wall()`** follows a step of `CLOCK_REALTIME` (settimeofday) only at
//!   the next recalibration, and steps with it: it is not monotone.
//! - **fork**: the child has no recalibration thread; it keeps the last
//!   parameters, whose rate and slew then drift by parts per billion, or
//!   up to ~1 ppm if it was forked in the clock's first second (the early
//!   recalibrations' shorter windows and horizons).
//! - **Switching sources** (to per-CPU offsets after the skew check, or to
//!   the OS after repeated resets) may move the clock by up to the skew or
//!   the error; each thread's clamp keeps it monotone per thread.
//! - **Ordering**: [`now()`] uses plain RDTSC, which the CPU may execute
//!   before earlier instructions finish: this is the hardware's, and every
//!   clock built on plain RDTSC (minstant, quanta) shares it. After taking
//!   a spin lock another thread released, a reading was below that
//!   thread's less than once per million, by up to ~100 ns; after a plain
//!   acquire load of a word another thread published, 0.01-25 % of readings
//!   were below it, by up to 17 µs on a KVM guest whose vCPUs are far
//!   apart (`clock_lab cross`, docs/PERFORMANCE.md), for minstant and
//!   quanta alike: the count is read while the load still waits. Fencing
//!   the read costs ~12 ns, more than `now()` itself, so it is opt-in: use
//!   [`now_ordered()`] when readings on different threads must follow
//!   their synchronisation.
//! - **Saturation**: every conversion saturates instead of wrapping or
//!   panicking: ticks before a parameter anchor convert to the anchor, and
//!   values past `u64::MAX` ns (year 2554) stay there.

mod background;
mod calibrate;
mod detection;
mod error;
mod instant;
mod os;
mod params;
mod skew;
mod state;
#[cfg(target_arch = "x86_64")]
mod tsc;

use std::sync::atomic::Ordering;

pub use detection::Race;
pub use error::{Error, ErrorKind, Result};
pub use instant::Instant;
pub use params::{Params, SourceKind};
pub use skew::{CpuSkew, SkewReport};

/// What the clock promises in its current mode (see the crate's Bound
/// section); the Caveats list what voids it.
///
/// ```
/// let b = topdeck_clock::bound();
/// assert!(b.ordered_cross_thread_ns <= b.max_error_ns);
/// println!("{b}");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The source the bound is for.
    pub kind: SourceKind,
    /// Largest `|now() - CLOCK_MONOTONIC|`, ns, from the first call on;
    /// 0 on the OS clock, which is `CLOCK_MONOTONIC`.
    pub max_error_ns: u64,
    /// How far a [`now_ordered()`] reading taken after synchronising with
    /// another thread can be below that thread's earlier reading, ns: 0,
    /// or in per-CPU mode the skew's measurement error.
    pub ordered_cross_thread_ns: u64,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind == SourceKind::Os {
            return write!(f, "now() is CLOCK_MONOTONIC (0 ns); ordered across threads");
        }
        let ordered = match self.ordered_cross_thread_ns {
            0 => "never below its reading".to_owned(),
            ns => format!("at most {ns} ns below its reading"),
        };
        write!(
            f,
            "|now() - CLOCK_MONOTONIC| <= {} ns from the first call (plus 3 s x any NTP rate change; \
             not across suspend or VM migration); now_ordered() after a hand-off from another \
             thread: {ordered}; now() across threads: unordered (plain RDTSC)",
            self.max_error_ns
        )
    }
}

/// `|now() - CLOCK_MONOTONIC|` bound on the TSC, ns (see [`Bound`]).
const MAX_ERROR_NS: u64 = 100;

/// The bound in force now; see [`Bound`].
pub fn bound() -> Bound {
    init_if_needed();
    let kind = SourceKind::from_code(state::kind()).unwrap_or(SourceKind::Os);
    let skew_error_ns = || {
        let hz = params().ticks_per_sec.max(1) as u128;
        skew().map_or(0, |s| {
            u64::try_from(s.max_error_ticks() as u128 * 1_000_000_000 / hz).unwrap_or(u64::MAX)
        })
    };
    match kind {
        SourceKind::Os => Bound {
            kind,
            max_error_ns: 0,
            ordered_cross_thread_ns: 0,
        },
        SourceKind::Tsc => Bound {
            kind,
            max_error_ns: MAX_ERROR_NS,
            ordered_cross_thread_ns: 0,
        },
        SourceKind::TscPerCpu => {
            let skew = skew_error_ns();
            Bound {
                kind,
                max_error_ns: MAX_ERROR_NS.saturating_add(skew),
                ordered_cross_thread_ns: skew,
            }
        }
    }
}

/// Which source serves the clock, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The source.
    pub kind: SourceKind,
    /// Why it was chosen, with the measurements behind the choice.
    pub reason: String,
}

/// Counters since the process started; all only increase.
///
/// ```
/// let before = topdeck_clock::stats();
/// let _ = topdeck_clock::now();
/// assert!(topdeck_clock::stats().clamps >= before.clamps);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Recalibrations that published new parameters (resets included).
    pub recalibrations: u64,
    /// Recalibrations from scratch: error beyond 1 ms, suspend, clock step.
    pub resets: u64,
    /// Reads raised to the calling thread's previous value.
    pub clamps: u64,
    /// Times the OS clock was chosen or switched to although not requested.
    pub fallbacks: u64,
}

/// The last calibration, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// Our clock minus `CLOCK_MONOTONIC` when last measured, ns.
    pub last_error_ns: i64,
    /// Width of that measurement's bracket, ns (its uncertainty is half).
    pub last_bracket_ns: u64,
    /// Window the rate was taken from, ns.
    pub window_ns: u64,
}

/// Monotonic nanoseconds (`CLOCK_MONOTONIC` scale). Never smaller than the
/// previous value this thread got.
#[inline]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(ns) = state::read_ns_with(state::KIND_TSC, tsc::rdtsc) {
        return state::clamp(ns);
    }
    slow_now()
}

/// [`now()`] off the TSC path: returns in a register, so the fast path
/// needs no stack frame for the slow one's result.
#[cold]
#[inline(never)]
fn slow_now() -> u64 {
    slow(false).0
}

/// As [`now()`], but the counter is read only after every earlier
/// instruction has completed (`rdtscp`, or `lfence; rdtsc` on CPUs without
/// it), for timing a section whose start must not be hoisted above
/// preceding work.
#[inline]
pub fn now_ordered() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // The tick first, so that it does not also wait for the sequence
        // and parameter loads. Parameters published just after it are
        // anchored where the old ones ended, and a tick before their
        // anchor converts to the anchor, so pairing it with them moves the
        // result by the slew over a few ns, far below a nanosecond.
        let t = tsc::read_ordered();
        if let Some(ns) = state::read_ns_with(state::KIND_TSC, || t) {
            return state::clamp(ns);
        }
    }
    slow(true).0
}

/// Nanoseconds since the Unix epoch, from the same single read as
/// [`now()`] plus the calibrated `CLOCK_REALTIME - CLOCK_MONOTONIC` offset.
/// Saturates at 0 and `u64::MAX`.
#[inline]
pub fn wall() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if let Some((ns, offset)) = state::read_wall_with(state::KIND_TSC, tsc::rdtsc) {
        return state::clamp(ns).saturating_add_signed(offset);
    }
    match slow(false) {
        (mono, Some(offset)) => mono.saturating_add_signed(offset),
        (_, None) => os::realtime(),
    }
}

/// Reads for the kinds off the fast path: uninitialised, OS, per-CPU.
/// Returns the clamped monotonic ns and, on the TSC, the wall offset.
#[cold]
#[inline(never)]
fn slow(ordered: bool) -> (u64, Option<i64>) {
    loop {
        let kind = state::kind();
        let read = match kind {
            state::KIND_UNINIT => {
                background::init();
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            state::KIND_TSC => {
                let f: fn() -> u64 = if ordered {
                    tsc::read_ordered
                } else {
                    tsc::rdtsc
                };
                state::read_with(kind, f)
            }
            #[cfg(target_arch = "x86_64")]
            state::KIND_TSC_PER_CPU => state::read_with(kind, state::ticks_per_cpu),
            _ => return (state::clamp(os::monotonic()), None),
        };
        if let Some((s, t)) = read {
            return (state::clamp(s.ns_at(t)), Some(s.wall_offset));
        }
    }
}

/// A raw tick count for storing and converting later with
/// [`ticks_to_ns()`] or [`Params::ticks_to_ns`]: the TSC (per-CPU
/// corrected in per-CPU mode), or ns on the OS clock. Not clamped.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if state::kind() == state::KIND_TSC {
        return tsc::rdtsc();
    }
    ticks_slow()
}

/// [`ticks()`] off the plain-TSC path, out of line so that a timer's start
/// and stop stay a load, a compare and `rdtsc` without spilling registers.
#[cold]
#[inline(never)]
fn ticks_slow() -> u64 {
    loop {
        match state::kind() {
            #[cfg(target_arch = "x86_64")]
            state::KIND_TSC => return tsc::rdtsc(),
            #[cfg(target_arch = "x86_64")]
            state::KIND_TSC_PER_CPU => return state::ticks_per_cpu(),
            state::KIND_UNINIT => background::init(),
            _ => return os::monotonic(),
        }
    }
}

/// Converts a difference of two [`ticks()`] readings to ns at the current
/// rate: one load and a multiply, no seqlock, for timing a section (a
/// timer reads `ticks()` twice and converts once). Saturates. A source
/// switch between the two readings makes that one difference meaningless.
///
/// ```
/// let t0 = topdeck_clock::ticks();
/// let t1 = topdeck_clock::ticks();
/// assert!(topdeck_clock::ticks_delta_to_ns(t1.saturating_sub(t0)) < 1_000_000_000);
/// ```
#[inline]
pub fn ticks_delta_to_ns(delta: u64) -> u64 {
    let ns = (delta as u128 * state::rate() as u128) >> state::SHIFT;
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// As [`ticks_delta_to_ns`], in seconds: the rate becomes a factor while
/// the counter is still being read, so the elapsed time costs one convert
/// and one multiply after the second read (a timer's record waits on it).
///
/// ```
/// let t0 = topdeck_clock::ticks();
/// let t1 = topdeck_clock::ticks();
/// assert!(topdeck_clock::ticks_delta_to_secs(t1.saturating_sub(t0)) < 1.0);
/// ```
#[inline]
pub fn ticks_delta_to_secs(delta: u64) -> f64 {
    // Fits in an i64 (a delta of 2^63 ticks is decades), and x86_64
    // converts a signed integer in one instruction but an unsigned one in
    // five, which the elapsed time would wait on.
    delta.min(i64::MAX as u64) as i64 as f64 * secs_per_tick()
}

/// Seconds per tick at the current rate: the factor
/// [`ticks_delta_to_secs`] multiplies by, for callers that keep work in
/// ticks and convert once (a timer picks its bucket from the tick count).
///
/// ```
/// let t0 = topdeck_clock::ticks();
/// let elapsed = topdeck_clock::ticks().saturating_sub(t0);
/// let f = topdeck_clock::secs_per_tick();
/// assert!(f > 0.0 && f < 1e-6, "a counter faster than 1 MHz");
/// assert!((elapsed as f64 * f) < 1.0);
/// ```
#[inline]
pub fn secs_per_tick() -> f64 {
    const SECS_PER_UNIT: f64 = 1e-9 / (1u64 << state::SHIFT) as f64;
    if state::kind() == state::KIND_UNINIT {
        background::init();
    }
    state::rate().min(i64::MAX as u64) as i64 as f64 * SECS_PER_UNIT
}

/// Converts [`ticks()`] to monotonic ns with the current parameters.
/// Ticks from before a source switch convert wrongly; see [`Params`].
#[inline]
pub fn ticks_to_ns(ticks: u64) -> u64 {
    params().ticks_to_ns(ticks)
}

/// The current conversion parameters (128-byte encodable).
pub fn params() -> Params {
    if state::kind() == state::KIND_UNINIT {
        background::init();
    }
    Params::from_snap(
        &state::snapshot(),
        background::FREQ_MULT.load(Ordering::Relaxed),
    )
}

/// The source in force and why.
pub fn source() -> Source {
    background::lock(&background::control().source).clone()
}

/// The skew measured between CPUs; `None` on the OS clock or until the
/// recalibration thread has measured it (a few ms after first use).
pub fn skew() -> Option<SkewReport> {
    background::lock(&background::control().skew).clone()
}

/// The start-up race between this clock's read and `clock_gettime`;
/// `None` if none was run (OS clock chosen before racing).
pub fn race() -> Option<Race> {
    *background::lock(&background::control().race)
}

/// The last calibration; `None` on the OS clock.
pub fn calibration() -> Option<Calibration> {
    let control = background::control();
    let cal = background::lock(&control.calibrator);
    let c = cal.as_ref()?;
    (state::kind() != state::KIND_OS).then_some(Calibration {
        last_error_ns: c.last_error_ns,
        last_bracket_ns: c.last_width_ns,
        window_ns: c.window_ns,
    })
}

/// Recalibrates now instead of waiting for the thread (for tests and
/// tools), retrying a sample too disturbed to use up to 10 times, 1 ms
/// apart. Returns false on the OS clock.
pub fn recalibrate() -> bool {
    for _ in 0..10 {
        match background::control().recalibrate(calibrate::PERIOD_NS) {
            None => return false,
            Some(calibrate::Outcome::Disturbed) => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Some(_) => return true,
        }
    }
    true
}

/// Counters: recalibrations, resets, clamps, fallbacks.
pub fn stats() -> Stats {
    init_if_needed();
    Stats {
        recalibrations: state::RECALIBRATIONS.load(Ordering::Relaxed),
        resets: state::RESETS.load(Ordering::Relaxed),
        clamps: state::CLAMPS.load(Ordering::Relaxed),
        fallbacks: state::FALLBACKS.load(Ordering::Relaxed),
    }
}

fn init_if_needed() {
    if state::kind() == state::KIND_UNINIT {
        background::init();
    }
}

/// Runs `f` with fresh [`Stats`] after every recalibration (every ~3 s
/// on the recalibration thread; never on the OS clock), e.g. to export
/// them. Returns an id for [`remove_observer()`]. `f` must be quick and
/// must not call [`recalibrate()`] or add observers.
///
/// ```
/// let id = topdeck_clock::on_recalibrate(|s| println!("{} recalibrations", s.recalibrations));
/// assert!(topdeck_clock::remove_observer(id));
/// ```
pub fn on_recalibrate(f: impl Fn(&Stats) + Send + Sync + 'static) -> u64 {
    background::add_observer(Box::new(f))
}

/// Removes an observer added by [`on_recalibrate()`]; false if unknown.
pub fn remove_observer(id: u64) -> bool {
    background::remove_observer(id)
}

/// The kernel's current clocksource, as `topdeck clock` reports it.
pub fn kernel_clocksource() -> Option<String> {
    detection::current_clocksource()
}
