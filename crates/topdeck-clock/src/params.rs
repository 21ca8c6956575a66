// SPDX-License-Identifier: Apache-2.0
//! The conversion parameters as a value: what [`crate::ticks`] means in
//! nanoseconds, and their 128-byte encoding in a topdeck registry header
//! (layout in `topdeck_format::layout`, `C_*`).

use topdeck_format::layout::{
    CLOCK_LEN, CLOCK_VERSION, C_BASE_FRAC, C_BASE_NS, C_BASE_TICKS, C_MULT, C_SHIFT, C_SOURCE,
    C_TICKS_PER_SEC, C_VERSION, C_WALL_OFFSET,
};

use crate::error::{Error, ErrorKind, Result};
use crate::state::{self, Snap, SHIFT};

/// Which source serves the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// `clock_gettime`; ticks are nanoseconds.
    Os,
    /// The TSC with one global calibration.
    Tsc,
    /// The TSC corrected by a per-CPU offset (RDTSCP names the CPU).
    TscPerCpu,
}

impl SourceKind {
    /// The code stored in the registry header's `source` field.
    pub fn code(self) -> u32 {
        match self {
            Self::Os => state::KIND_OS,
            Self::Tsc => state::KIND_TSC,
            Self::TscPerCpu => state::KIND_TSC_PER_CPU,
        }
    }

    /// The kind for a stored code.
    pub fn from_code(code: u32) -> Option<Self> {
        match code {
            state::KIND_OS => Some(Self::Os),
            state::KIND_TSC => Some(Self::Tsc),
            state::KIND_TSC_PER_CPU => Some(Self::TscPerCpu),
            _ => None,
        }
    }

    /// A short name: `os`, `tsc`, `tsc-per-cpu`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Os => "os",
            Self::Tsc => "tsc",
            Self::TscPerCpu => "tsc-per-cpu",
        }
    }
}

/// Parameters that turn ticks into `CLOCK_MONOTONIC` nanoseconds:
/// `ns = base_ns + ((ticks - base_ticks) * mult >> shift)`, with
/// `base_frac` (2^-shift ns) carried into the sum.
///
/// ```
/// let p = topdeck_clock::params();
/// let bytes = p.to_bytes();
/// let back = topdeck_clock::Params::from_bytes(&bytes).unwrap().unwrap();
/// assert_eq!(back, p);
/// let t = topdeck_clock::ticks();
/// assert_eq!(back.ticks_to_ns(t), p.ticks_to_ns(t));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// The source the ticks come from.
    pub source: SourceKind,
    /// Fractional bits of `mult`.
    pub shift: u32,
    /// ns per tick << `shift`.
    pub mult: u64,
    /// Ticks at the anchor.
    pub base_ticks: u64,
    /// `CLOCK_MONOTONIC` ns at the anchor.
    pub base_ns: u64,
    /// Fraction of `base_ns`, 2^-`shift` ns.
    pub base_frac: u32,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC`, ns.
    pub wall_offset_ns: i64,
    /// Calibrated ticks per second, rounded (informational).
    pub ticks_per_sec: u64,
}

impl Params {
    pub(crate) fn from_snap(s: &Snap, freq_mult: u64) -> Self {
        let source = SourceKind::from_code(s.kind).unwrap_or(SourceKind::Os);
        let (mult, freq_mult) = if source == SourceKind::Os {
            (1 << SHIFT, 1 << SHIFT)
        } else {
            (s.mult, freq_mult)
        };
        let ticks_per_sec = if freq_mult == 0 {
            0
        } else {
            u64::try_from((1_000_000_000u128 << SHIFT) / freq_mult as u128).unwrap_or(u64::MAX)
        };
        Self {
            source,
            shift: SHIFT,
            mult,
            base_ticks: if source == SourceKind::Os {
                0
            } else {
                s.base_ticks
            },
            base_ns: if source == SourceKind::Os {
                0
            } else {
                s.base_ns
            },
            base_frac: if source == SourceKind::Os {
                0
            } else {
                s.base_frac as u32
            },
            wall_offset_ns: s.wall_offset,
            ticks_per_sec,
        }
    }

    /// Nanoseconds (`CLOCK_MONOTONIC` scale) at `ticks`. Ticks before the
    /// anchor give the anchor's time; the result saturates at `u64::MAX`.
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        let delta = ticks.wrapping_sub(self.base_ticks);
        let delta = if delta > i64::MAX as u64 { 0 } else { delta };
        let shift = self.shift.min(64);
        let base = (self.base_ns as u128) << shift | self.base_frac as u128;
        let fp = base.saturating_add(delta as u128 * self.mult as u128);
        u64::try_from(fp >> shift).unwrap_or(u64::MAX)
    }

    /// The 128-byte clock area of a topdeck registry header.
    pub fn to_bytes(&self) -> [u8; CLOCK_LEN] {
        let mut b = [0u8; CLOCK_LEN];
        let mut put = |at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        put(C_VERSION, &CLOCK_VERSION.to_le_bytes());
        put(C_SOURCE, &self.source.code().to_le_bytes());
        put(C_SHIFT, &self.shift.to_le_bytes());
        put(C_BASE_FRAC, &self.base_frac.to_le_bytes());
        put(C_MULT, &self.mult.to_le_bytes());
        put(C_BASE_TICKS, &self.base_ticks.to_le_bytes());
        put(C_BASE_NS, &self.base_ns.to_le_bytes());
        put(C_WALL_OFFSET, &self.wall_offset_ns.to_le_bytes());
        put(C_TICKS_PER_SEC, &self.ticks_per_sec.to_le_bytes());
        b
    }

    /// Decodes a clock area: `Ok(None)` when the writer recorded none
    /// (`clock_version` 0).
    pub fn from_bytes(b: &[u8]) -> Result<Option<Self>> {
        if b.len() < CLOCK_LEN {
            return Err(Error::new(
                ErrorKind::Truncated,
                format!("clock area is {} bytes, needs {CLOCK_LEN}", b.len()),
            ));
        }
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        match u32_at(C_VERSION) {
            0 => return Ok(None),
            CLOCK_VERSION => {}
            v => {
                return Err(Error::new(
                    ErrorKind::UnknownVersion,
                    format!(
                    "clock parameters version {v} is unknown (this reader knows {CLOCK_VERSION})"
                ),
                ))
            }
        }
        let code = u32_at(C_SOURCE);
        let source = SourceKind::from_code(code).ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid,
                format!("clock source code {code} is unknown"),
            )
        })?;
        let shift = u32_at(C_SHIFT);
        if !(1..=64).contains(&shift) {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!("clock shift {shift} is outside 1..=64"),
            ));
        }
        Ok(Some(Self {
            source,
            shift,
            mult: u64_at(C_MULT),
            base_ticks: u64_at(C_BASE_TICKS),
            base_ns: u64_at(C_BASE_NS),
            base_frac: u32_at(C_BASE_FRAC),
            wall_offset_ns: u64_at(C_WALL_OFFSET) as i64,
            ticks_per_sec: u64_at(C_TICKS_PER_SEC),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Params {
        Params {
            source: SourceKind::Tsc,
            shift: 32,
            mult: 1 << 31,
            base_ticks: 1000,
            base_ns: 5_000,
            base_frac: 1 << 31,
            wall_offset_ns: -7,
            ticks_per_sec: 2_000_000_000,
        }
    }

    #[test]
    fn ticks_convert_with_the_fraction_carried() {
        let p = sample();
        assert_eq!(p.ticks_to_ns(1000), 5_000);
        assert_eq!(p.ticks_to_ns(1001), 5_001);
        assert_eq!(p.ticks_to_ns(3000), 6_000);
        assert_eq!(
            p.ticks_to_ns(999),
            5_000,
            "before the anchor saturates to it"
        );
        let far = Params {
            base_ns: u64::MAX - 1,
            ..p
        };
        assert_eq!(far.ticks_to_ns(u64::MAX / 4), u64::MAX);
    }

    #[test]
    fn bytes_round_trip_and_zero_means_absent() {
        let p = sample();
        assert_eq!(Params::from_bytes(&p.to_bytes()).unwrap(), Some(p));
        assert_eq!(Params::from_bytes(&[0u8; CLOCK_LEN]).unwrap(), None);
        assert_eq!(
            Params::from_bytes(&[0u8; 10]).unwrap_err().kind(),
            ErrorKind::Truncated
        );
        let mut b = p.to_bytes();
        b[C_VERSION] = 9;
        assert_eq!(
            Params::from_bytes(&b).unwrap_err().kind(),
            ErrorKind::UnknownVersion
        );
        let mut b = p.to_bytes();
        b[C_SOURCE] = 77;
        assert_eq!(
            Params::from_bytes(&b).unwrap_err().kind(),
            ErrorKind::Invalid
        );
        let mut b = p.to_bytes();
        b[C_SHIFT] = 0;
        assert_eq!(
            Params::from_bytes(&b).unwrap_err().kind(),
            ErrorKind::Invalid
        );
    }
}
