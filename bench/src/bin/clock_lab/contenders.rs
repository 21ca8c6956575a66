// SPDX-License-Identifier: Apache-2.0
//! The clocks compared, each as ns from an origin of its own, and the
//! tight `CLOCK_MONOTONIC` bracket they are measured against.

use topdeck::clock;

/// `CLOCK_MONOTONIC`, ns (the vDSO).
pub fn mono() -> u64 {
    topdeck_bench::clock_ns(libc::CLOCK_MONOTONIC)
}

/// Names, in the order of [`Contenders::read`].
pub const NAMES: [&str; 3] = ["topdeck", "minstant", "quanta"];

/// topdeck's `now()`, minstant and quanta, each started in `new`.
pub struct Contenders {
    quanta: quanta::Clock,
    quanta_origin: quanta::Instant,
    minstant_origin: minstant::Instant,
}

impl Contenders {
    /// Starts every clock: topdeck calibrates on its first read, quanta in
    /// `Clock::new`, minstant already did at load time.
    pub fn new() -> Self {
        let _ = clock::now();
        let quanta = quanta::Clock::new();
        Self {
            quanta_origin: quanta.now(),
            minstant_origin: minstant::Instant::now(),
            quanta,
        }
    }

    /// Clock `i` of [`NAMES`], ns.
    #[inline]
    pub fn read(&self, i: usize) -> u64 {
        match i {
            0 => clock::now(),
            1 => self.minstant_origin.elapsed().as_nanos() as u64,
            _ => self
                .quanta
                .now()
                .duration_since(self.quanta_origin)
                .as_nanos() as u64,
        }
    }
}

/// `f() - CLOCK_MONOTONIC` from the tightest of `tries` brackets (two vDSO
/// reads around the clock's read), averaged over every bracket of that
/// width (a TSC that advances in ~10 ns steps puts one bracket's midpoint
/// up to 5 ns off; brackets at different phases of the step average that
/// out), and that width.
pub fn error_of(tries: usize, f: impl Fn() -> u64) -> (i64, u64) {
    let mut width = u64::MAX;
    let (mut sum, mut n) = (0i64, 0i64);
    for _ in 0..tries {
        let a = mono();
        let v = f();
        let b = mono();
        let w = b.saturating_sub(a);
        // Twice the error, so that a midpoint is an integer.
        let e2 = 2 * v as i64 - (2 * a + w) as i64;
        if w < width {
            (width, sum, n) = (w, e2, 1);
        } else if w == width {
            sum += e2;
            n += 1;
        }
    }
    ((sum / n.max(1) + 1).div_euclid(2), width)
}
