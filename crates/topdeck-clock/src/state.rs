// SPDX-License-Identifier: Apache-2.0
//! The published conversion parameters, one cache line behind a seqlock,
//! plus the per-CPU offsets, the per-thread clamp and the counters.
//!
//! Readers load the sequence, the fields and the TSC, then check the
//! sequence again: the TSC read sits inside the critical section, so a
//! reader only ever pairs parameters with a count read while they were
//! current. The single writer makes the sequence odd, fences, and only then
//! reads the TSC for its anchor, so every reading made with the old
//! parameters has a smaller count than the anchor; the new parameters start
//! exactly where the old ones were at the anchor, so time is continuous and
//! monotone across the switch by construction.

use std::cell::Cell;
use std::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Fractional bits of `mult` and of the fixed-point nanoseconds.
pub(crate) const SHIFT: u32 = 32;

/// Largest `mult` the line can hold: it keeps the rate and the anchor's
/// fraction with 64 fractional bits (`mult << 32`), so that the read's
/// result is the high word of its product, with no shift after it. The
/// calibration keeps a TSC rate below this (a TSC of at least 1.05 GHz,
/// see `calibrate::MAX_TSC_MULT`).
pub(crate) const MAX_MULT: u64 = (1 << SHIFT) - 1;

/// Parameters not yet chosen: the first reader initialises.
pub(crate) const KIND_UNINIT: u32 = 0;
/// `clock_gettime` serves every read.
pub(crate) const KIND_OS: u32 = 1;
/// TSC, one global calibration.
pub(crate) const KIND_TSC: u32 = 2;
/// TSC minus a per-CPU offset, CPU from RDTSCP.
pub(crate) const KIND_TSC_PER_CPU: u32 = 3;

/// Slots for per-CPU offsets: Linux puts the CPU in the low 12 bits of
/// `IA32_TSC_AUX`, so every value it can report has a slot.
pub(crate) const MAX_CPUS: usize = 4096;

/// The seqlock-protected parameters, alone in their line so that readers
/// share it read-only except every few seconds. The rate and the anchor's
/// fraction are kept with 64 fractional bits (a [`Snap`]'s `mult` and
/// `base_frac` shifted left by [`SHIFT`], exactly), and the line's value
/// extended back to count zero ([`origin`]) so that the fast read
/// converts with a multiply and an add.
#[repr(C, align(64))]
struct Line {
    seq: AtomicU32,
    kind: AtomicU32,
    mult64: AtomicU64,
    base_ticks: AtomicU64,
    base_ns: AtomicU64,
    frac64: AtomicU64,
    wall_offset: AtomicI64,
    origin_lo: AtomicU64,
    origin_hi: AtomicU64,
}

static LINE: Line = Line {
    seq: AtomicU32::new(0),
    kind: AtomicU32::new(KIND_UNINIT),
    mult64: AtomicU64::new(0),
    base_ticks: AtomicU64::new(0),
    base_ns: AtomicU64::new(0),
    frac64: AtomicU64::new(0),
    wall_offset: AtomicI64::new(0),
    origin_lo: AtomicU64::new(0),
    origin_hi: AtomicU64::new(0),
};

const _: () = assert!(std::mem::size_of::<Line>() == 64);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicI64 = AtomicI64::new(0);
/// Per-CPU TSC offsets in ticks (this CPU minus the reference CPU), used
/// only in per-CPU mode. Written before the mode is published.
static OFFSETS: [AtomicI64; MAX_CPUS] = [ZERO; MAX_CPUS];

/// Recalibrations done (each publishes new parameters).
pub(crate) static RECALIBRATIONS: AtomicU64 = AtomicU64::new(0);
/// Recalibrations from scratch (error beyond the limit, suspend, step).
pub(crate) static RESETS: AtomicU64 = AtomicU64::new(0);
/// Reads a thread's clamp raised to its previous value.
pub(crate) static CLAMPS: AtomicU64 = AtomicU64::new(0);
/// Times the OS clock was chosen, or switched to, instead of the TSC.
pub(crate) static FALLBACKS: AtomicU64 = AtomicU64::new(0);
/// Whether ticks are per-CPU corrected (mirrors `kind`, for the writer).
static PER_CPU: AtomicBool = AtomicBool::new(false);

/// One consistent copy of the parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Snap {
    pub kind: u32,
    /// ns per tick, `SHIFT` fractional bits.
    pub mult: u64,
    pub base_ticks: u64,
    pub base_ns: u64,
    /// Fraction of `base_ns` in 2^-SHIFT ns (below 2^SHIFT).
    pub base_frac: u64,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` in ns.
    pub wall_offset: i64,
}

impl Snap {
    /// Fixed-point ns (`SHIFT` fractional bits) at `ticks`. Counts before
    /// the anchor saturate to the anchor.
    #[inline(always)]
    pub fn fp_at(&self, ticks: u64) -> u128 {
        let delta = ticks.wrapping_sub(self.base_ticks);
        // A count before the anchor shows up as a huge delta; treat it as 0.
        let delta = if delta > i64::MAX as u64 { 0 } else { delta };
        ((self.base_ns as u128) << SHIFT | self.base_frac as u128)
            .saturating_add(delta as u128 * self.mult as u128)
    }

    /// Whole ns at `ticks`: [`ns_at`] with these parameters.
    #[inline(always)]
    pub fn ns_at(&self, ticks: u64) -> u64 {
        ns_at(self.mult << SHIFT, self.base_ticks, self.origin(), ticks)
    }

    /// [`origin`] with these parameters.
    #[inline(always)]
    pub fn origin(&self) -> u128 {
        origin(
            self.mult << SHIFT,
            self.base_ticks,
            self.base_ns,
            self.base_frac << SHIFT,
        )
    }

    /// Parameters anchored at fixed-point time `fp` at `ticks`.
    pub fn anchored(self, ticks: u64, fp: u128, mult: u64) -> Self {
        Self {
            mult,
            base_ticks: ticks,
            base_ns: u64::try_from(fp >> SHIFT).unwrap_or(u64::MAX),
            base_frac: (fp & ((1u128 << SHIFT) - 1)) as u64,
            ..self
        }
    }
}

/// The line extended back to count zero: the fixed-point ns (64
/// fractional bits) it would give there, modulo 2^128, from the anchor
/// (`base_ns` and the fraction `frac64`, at `base_ticks`) and the rate
/// `mult64`. Computed once per publication so that the read need not
/// subtract the anchor's count before it multiplies.
#[inline(always)]
pub(crate) fn origin(mult64: u64, base_ticks: u64, base_ns: u64, frac64: u64) -> u128 {
    ((base_ns as u128) << 64 | frac64 as u128).wrapping_sub(base_ticks as u128 * mult64 as u128)
}

/// Whole ns at `ticks` on the line through [`origin`] with rate `mult64`:
/// the high word of `ticks * mult64 + origin`. The read is a chain from
/// the counter, and on CPUs whose counter read is fast the chain is what
/// a read costs beyond it: here a multiply and a carry add, with nothing
/// subtracted before and no shift after. The same to the nanosecond as
/// the fixed-point `fp_at >> SHIFT` (the sum modulo 2^128 is the anchor's
/// value plus `(ticks - base_ticks) * mult64`, exactly, while the result
/// is below 2^64 ns, 584 years). Counts before the anchor give the anchor,
/// through a branch that is never taken in practice rather than a select
/// the multiply would wait on.
#[inline(always)]
pub(crate) fn ns_at(mult64: u64, base_ticks: u64, origin: u128, ticks: u64) -> u64 {
    let at = |ticks: u64| ((ticks as u128 * mult64 as u128).wrapping_add(origin) >> 64) as u64;
    if ticks < base_ticks {
        return at(base_ticks);
    }
    at(ticks)
}

/// Monotonic ns from a tick count read inside the sequence check, loading
/// only the four words the conversion needs (not the anchor's ns and the
/// wall offset the other reads use); `None` when the kind is not `want`.
#[inline(always)]
pub(crate) fn read_ns_with(want: u32, tick: impl Fn() -> u64) -> Option<u64> {
    read_converted(want, tick, |_| ()).map(|(ns, ())| ns)
}

/// As [`read_ns_with`], with the wall offset read in the same check.
#[inline(always)]
pub(crate) fn read_wall_with(want: u32, tick: impl Fn() -> u64) -> Option<(u64, i64)> {
    read_converted(want, tick, |_| LINE.wall_offset.load(Ordering::Relaxed))
}

/// The published conversion ([`ns_at`] through the stored [`origin`]) of a
/// tick read inside the sequence check, with whatever else `more` loads of
/// the line.
#[inline(always)]
fn read_converted<T>(
    want: u32,
    tick: impl Fn() -> u64,
    more: impl Fn(u32) -> T,
) -> Option<(u64, T)> {
    let fields = |kind| {
        (
            LINE.mult64.load(Ordering::Relaxed),
            LINE.base_ticks.load(Ordering::Relaxed),
            LINE.origin_lo.load(Ordering::Relaxed),
            LINE.origin_hi.load(Ordering::Relaxed),
            more(kind),
        )
    };
    let ((mult64, base_ticks, lo, hi, more), t) = read_fields(want, tick, fields)?;
    let ns = ns_at(mult64, base_ticks, (hi as u128) << 64 | lo as u128, t);
    Some((ns, more))
}

/// The current kind, for dispatch.
#[inline(always)]
pub(crate) fn kind() -> u32 {
    LINE.kind.load(Ordering::Acquire)
}

/// A consistent snapshot taken together with a tick count from `tick`.
/// `None` when the kind is not `want` (the caller takes its slow path).
#[inline(always)]
pub(crate) fn read_with(want: u32, tick: impl Fn() -> u64) -> Option<(Snap, u64)> {
    read_fields(want, tick, load_snap)
}

/// The line's fields as a [`Snap`] (the caller checks the sequence).
#[inline(always)]
fn load_snap(kind: u32) -> Snap {
    Snap {
        kind,
        mult: LINE.mult64.load(Ordering::Relaxed) >> SHIFT,
        base_ticks: LINE.base_ticks.load(Ordering::Relaxed),
        base_ns: LINE.base_ns.load(Ordering::Relaxed),
        base_frac: LINE.frac64.load(Ordering::Relaxed) >> SHIFT,
        wall_offset: LINE.wall_offset.load(Ordering::Relaxed),
    }
}

/// The sequence check both reads share: `fields` loads what the caller
/// needs of the line (given the kind), and the tick is read inside the
/// check, so a reader only pairs parameters with a count read while they
/// were current.
#[inline(always)]
fn read_fields<T>(
    want: u32,
    tick: impl Fn() -> u64,
    fields: impl Fn(u32) -> T,
) -> Option<(T, u64)> {
    loop {
        let s1 = LINE.seq.load(Ordering::Acquire);
        let kind = LINE.kind.load(Ordering::Relaxed);
        if kind != want {
            return None;
        }
        let got = fields(kind);
        let t = tick();
        // Keeps the loads above before the re-check of the sequence.
        fence(Ordering::Acquire);
        if s1 & 1 == 0 && LINE.seq.load(Ordering::Relaxed) == s1 {
            return Some((got, t));
        }
        std::hint::spin_loop();
    }
}

/// The current rate, ns per tick << SHIFT; ticks are ns on the OS clock.
#[inline(always)]
pub(crate) fn rate() -> u64 {
    if kind() == KIND_OS {
        1 << SHIFT
    } else {
        LINE.mult64.load(Ordering::Relaxed) >> SHIFT
    }
}

/// A consistent snapshot without a tick count.
pub(crate) fn snapshot() -> Snap {
    loop {
        let k = kind();
        if let Some((s, _)) = read_with(k, || 0) {
            return s;
        }
    }
}

/// Publishes parameters computed by `f` from the current ones and a tick
/// count read after the sequence went odd. Callers serialise (one writer).
pub(crate) fn publish(f: impl FnOnce(Snap, u64) -> Snap) -> Snap {
    let s = LINE.seq.load(Ordering::Relaxed);
    LINE.seq.store(s.wrapping_add(1), Ordering::Relaxed);
    // Full fence: the odd sequence is visible to every CPU before the
    // anchor count is read (ticks_ordered waits for the fence to retire).
    fence(Ordering::SeqCst);
    let old = load_snap(LINE.kind.load(Ordering::Relaxed));
    let new = f(old, ticks_ordered());
    // The line holds a rate below one ns per tick: a slewed rate at the
    // edge of the TSCs the calibration admits stops there. A fraction is
    // below 2^SHIFT by construction (`Snap::anchored`).
    debug_assert!(new.base_frac <= MAX_MULT, "{new:?}");
    let new = Snap {
        mult: new.mult.min(MAX_MULT),
        ..new
    };
    LINE.kind.store(new.kind, Ordering::Relaxed);
    LINE.mult64.store(new.mult << SHIFT, Ordering::Relaxed);
    LINE.base_ticks.store(new.base_ticks, Ordering::Relaxed);
    LINE.base_ns.store(new.base_ns, Ordering::Relaxed);
    LINE.frac64.store(new.base_frac << SHIFT, Ordering::Relaxed);
    LINE.wall_offset.store(new.wall_offset, Ordering::Relaxed);
    let origin = new.origin();
    LINE.origin_lo.store(origin as u64, Ordering::Relaxed);
    LINE.origin_hi
        .store((origin >> 64) as u64, Ordering::Relaxed);
    PER_CPU.store(new.kind == KIND_TSC_PER_CPU, Ordering::Relaxed);
    LINE.seq.store(s.wrapping_add(2), Ordering::Release);
    new
}

/// Sets the per-CPU offsets (ticks, this CPU minus the reference) and
/// makes the writer's own reads use them; then publish per-CPU mode.
pub(crate) fn set_offsets(offsets: &[(usize, i64)]) {
    for &(cpu, off) in offsets {
        if let Some(slot) = OFFSETS.get(cpu) {
            slot.store(off, Ordering::Relaxed);
        }
    }
    PER_CPU.store(true, Ordering::SeqCst);
}

/// The TSC corrected by this CPU's offset, with RDTSCP.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn ticks_per_cpu() -> u64 {
    let (t, aux) = crate::tsc::rdtscp();
    let off = OFFSETS
        .get(crate::tsc::aux_cpu(aux))
        .map_or(0, |o| o.load(Ordering::Relaxed));
    t.wrapping_sub(off as u64)
}

/// An ordered tick count in the current mode's terms (OS mode: ns).
#[inline]
pub(crate) fn ticks_ordered() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if PER_CPU.load(Ordering::Relaxed) {
            ticks_per_cpu()
        } else if kind() == KIND_OS {
            crate::os::monotonic()
        } else {
            crate::tsc::read_ordered()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        crate::os::monotonic()
    }
}

thread_local! {
    /// The last value this thread returned; no destructor, so always there.
    static LAST: Cell<u64> = const { Cell::new(0) };
}

/// Returns `v`, or this thread's previous value if `v` is smaller (and
/// counts the clamp).
#[inline(always)]
pub(crate) fn clamp(v: u64) -> u64 {
    LAST.try_with(|last| {
        let prev = last.get();
        if v >= prev {
            last.set(v);
            v
        } else {
            CLAMPS.fetch_add(1, Ordering::Relaxed);
            prev
        }
    })
    .unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read's conversion against the fixed-point one it replaces, over
    /// rates from 1.05 to 6 GHz, fractions, anchors and deltas up to 2^62
    /// ticks.
    #[test]
    fn the_high_word_read_matches_the_fixed_point_conversion() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..200_000u64 {
            let mult = (1u64 << SHIFT) / 6 + next() % (MAX_MULT - (1u64 << SHIFT) / 6);
            let snap = Snap {
                kind: KIND_TSC,
                mult,
                base_ticks: next() >> 2,
                base_ns: next() >> 2,
                base_frac: next() & MAX_MULT,
                wall_offset: 0,
            };
            let delta = match i % 3 {
                0 => next() % 10_000_000_000,
                1 => next() >> 2,
                _ => next() % 1_000,
            };
            let ticks = snap.base_ticks.wrapping_add(delta);
            let want = (snap.fp_at(ticks) >> SHIFT) as u64;
            assert_eq!(snap.ns_at(ticks), want, "{snap:?} delta {delta}");
        }
        // A count before the anchor gives the anchor.
        let snap = Snap {
            kind: KIND_TSC,
            mult: MAX_MULT,
            base_ticks: 1_000,
            base_ns: 77,
            base_frac: MAX_MULT,
            wall_offset: 0,
        };
        assert_eq!(snap.ns_at(999), 77);
        assert_eq!(snap.ns_at(0), 77);
    }
}
