// SPDX-License-Identifier: Apache-2.0
//! PCP's `pmUnits`: the dimensions (space, time, count) and scales of a
//! metric's value, packed in 32 bits, and the conversion to base units
//! (bytes, seconds, ones) that a Prometheus exposition wants.

/// A metric's units, decoded from the `pmUnits` bit field as a
/// little-endian host lays it out (`pcp/pmapi.h`, not `HAVE_BITFIELDS_LTOR`):
/// bits 8–11 `scaleCount` (signed), 12–15 `scaleTime`, 16–19 `scaleSpace`,
/// 20–23 `dimCount`, 24–27 `dimTime`, 28–31 `dimSpace` (dims signed).
///
/// ```
/// use topdeck_portholes::mmv::Units;
///
/// // MMV_UNITS(0,1,0,0,PM_TIME_MSEC,0): milliseconds.
/// let ms = Units::from_bits(0x0100_2000);
/// assert_eq!((ms.dim_time, ms.scale_time), (1, 2));
/// assert_eq!(ms.base_unit(), "seconds");
/// assert_eq!(ms.to_base(1500.0), Some(1.5));
/// // KiB.
/// let kib = Units::from_bits(0x1001_0000);
/// assert_eq!((kib.base_unit(), kib.to_base(2.0)), ("bytes", Some(2048.0)));
/// // count x 10^3.
/// let kilo = Units::from_bits(0x0010_0300);
/// assert_eq!((kilo.base_unit(), kilo.to_base(12.0)), ("", Some(12_000.0)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Units {
    /// Space dimension (1 for bytes, -1 for per byte).
    pub dim_space: i8,
    /// Time dimension (1 for a duration, -1 for a rate).
    pub dim_time: i8,
    /// Count dimension.
    pub dim_count: i8,
    /// `PM_SPACE_*`: 0 bytes, 1 KiB, … 8 YiB (powers of 1024).
    pub scale_space: u8,
    /// `PM_TIME_*`: 0 ns, 1 µs, 2 ms, 3 s, 4 min, 5 h.
    pub scale_time: u8,
    /// `PM_COUNT_*`: a power of ten.
    pub scale_count: i8,
}

/// A 4-bit field of `bits` at `shift`, sign-extended.
fn signed4(bits: u32, shift: u32) -> i8 {
    (((bits >> shift) & 0xf) as i8) << 4 >> 4
}

fn unsigned4(bits: u32, shift: u32) -> u8 {
    ((bits >> shift) & 0xf) as u8
}

impl Units {
    /// Microseconds, as pmdammv serves every `ELAPSED` metric.
    pub const MICROSECONDS: Units = Units {
        dim_space: 0,
        dim_time: 1,
        dim_count: 0,
        scale_space: 0,
        scale_time: 1,
        scale_count: 0,
    };

    /// The units packed in `bits` (the file's 32-bit field, host order).
    pub fn from_bits(bits: u32) -> Units {
        Units {
            scale_count: signed4(bits, 8),
            scale_time: unsigned4(bits, 12),
            scale_space: unsigned4(bits, 16),
            dim_count: signed4(bits, 20),
            dim_time: signed4(bits, 24),
            dim_space: signed4(bits, 28),
        }
    }

    /// The 32 bits of these units (the pad byte 0).
    pub fn to_bits(self) -> u32 {
        let nibble = |v: i8| u32::from(v as u8 & 0xf);
        nibble(self.scale_count) << 8
            | u32::from(self.scale_time & 0xf) << 12
            | u32::from(self.scale_space & 0xf) << 16
            | nibble(self.dim_count) << 20
            | nibble(self.dim_time) << 24
            | nibble(self.dim_space) << 28
    }

    /// Whether the value is a plain number (no dimension).
    pub fn is_none(self) -> bool {
        self.dim_space == 0 && self.dim_time == 0 && self.dim_count == 0
    }

    /// The base unit of a value converted by [`to_base`](Self::to_base):
    /// `seconds` for a duration, `bytes` for a size, `` for anything else
    /// (counts, plain numbers, rates and other compounds).
    pub fn base_unit(self) -> &'static str {
        match (self.dim_space, self.dim_time, self.dim_count) {
            (0, 1, 0) => "seconds",
            (1, 0, 0) => "bytes",
            _ => "",
        }
    }

    /// How many base units (bytes, seconds, ones) one of these units is,
    /// `None` for a scale PCP does not define.
    pub fn factor(self) -> Option<f64> {
        // A scale matters only for a dimension the units have.
        let space = match self.scale_space {
            _ if self.dim_space == 0 => 1.0,
            s @ 0..=8 => 1024f64.powi(i32::from(s)),
            _ => return None,
        };
        let time: f64 = match self.scale_time {
            _ if self.dim_time == 0 => 1.0,
            0 => 1e-9,
            1 => 1e-6,
            2 => 1e-3,
            3 => 1.0,
            4 => 60.0,
            5 => 3600.0,
            _ => return None,
        };
        let count = 10f64.powi(i32::from(self.scale_count));
        Some(
            space.powi(i32::from(self.dim_space))
                * time.powi(i32::from(self.dim_time))
                * count.powi(i32::from(self.dim_count)),
        )
    }

    /// `value` in base units: seconds, bytes, ones (counts scaled by
    /// 10^`scale_count`), and their products for compound units; `None`
    /// for a scale PCP does not define.
    pub fn to_base(self, value: f64) -> Option<f64> {
        Some(value * self.factor()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_and_sign_extend() {
        for bits in [
            0u32,
            0x0100_2000,
            0x1001_0000,
            0x0010_0300,
            0x0f13_0000,
            0xfff0_0f00,
        ] {
            assert_eq!(Units::from_bits(bits).to_bits(), bits & !0xff, "{bits:#x}");
        }
        // MMV_UNITS(0,-1,1,0,PM_TIME_SEC,PM_COUNT_ONE): count / sec.
        let rate = Units::from_bits(0x0f13_0000 | 0x3000);
        assert_eq!((rate.dim_time, rate.dim_count, rate.scale_time), (-1, 1, 3));
        assert_eq!(rate.to_base(4.0), Some(4.0));
        assert_eq!(rate.base_unit(), "");
        let per_ms = Units {
            scale_time: 2,
            ..rate
        };
        assert_eq!(per_ms.to_base(1.0), Some(1000.0));
        let milli_count = Units::from_bits(0x0010_0f00);
        assert_eq!(milli_count.scale_count, -1);
        assert!((milli_count.to_base(5.0).unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn undefined_scales_convert_to_nothing() {
        let odd_time = Units {
            dim_time: 1,
            scale_time: 9,
            ..Units::default()
        };
        assert_eq!(odd_time.to_base(1.0), None);
        let odd_space = Units {
            dim_space: 1,
            scale_space: 12,
            ..Units::default()
        };
        assert_eq!(odd_space.to_base(1.0), None);
        let unused_scale = Units {
            scale_time: 9,
            ..Units::default()
        };
        assert_eq!(unused_scale.to_base(3.0), Some(3.0));
        assert_eq!(Units::MICROSECONDS.to_base(2_500_000.0), Some(2.5));
    }
}
