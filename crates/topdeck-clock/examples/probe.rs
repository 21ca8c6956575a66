// SPDX-License-Identifier: Apache-2.0
//! Prints the clock's source, parameters, skew and counters, then its
//! error against CLOCK_MONOTONIC every second for `$1` seconds (default 5).

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let _ = topdeck_clock::now();
    println!("source: {:?}", topdeck_clock::source());
    println!("params: {:?}", topdeck_clock::params());
    let mono = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_nsec as u64
    };
    fn raw() -> u64 {
        // SAFETY: baseline instruction.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    fn fenced() -> u64 {
        // SAFETY: baseline instructions.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }
    fn rdtscp() -> u64 {
        let mut aux = 0;
        // SAFETY: RDTSCP present on this machine (checked by /proc/cpuinfo).
        unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
    }
    println!(
        "ns/call: rdtsc {:.1} lfence;rdtsc {:.1} rdtscp {:.1}",
        per_call(raw),
        per_call(fenced),
        per_call(rdtscp)
    );
    println!(
        "ns/call: now {:.1} ordered {:.1} wall {:.1} clock_gettime {:.1}",
        per_call(topdeck_clock::now),
        per_call(topdeck_clock::now_ordered),
        per_call(topdeck_clock::wall),
        per_call(mono)
    );
    for _ in 0..secs {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let mono = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: valid timespec.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            ts.tv_sec * 1_000_000_000 + ts.tv_nsec
        };
        let mut best = (i64::MAX, 0);
        for _ in 0..100 {
            let a = mono();
            let ours = topdeck_clock::now() as i64;
            let b = mono();
            if b - a < best.0 {
                best = (b - a, ours - (a + (b - a) / 2));
            }
        }
        println!(
            "error now-os {} ns (bracket {} ns), cal {:?}, stats {:?}",
            best.1,
            best.0,
            topdeck_clock::calibration(),
            topdeck_clock::stats()
        );
    }
    println!("skew: {:?}", topdeck_clock::skew());
    println!("source: {:?}", topdeck_clock::source());
}

/// ns per call of `f`, best of 5 batches of 1M.
#[allow(dead_code)]
pub fn per_call(f: fn() -> u64) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let mut acc = 0u64;
        for _ in 0..1_000_000 {
            acc = acc.wrapping_add(std::hint::black_box(f()));
        }
        std::hint::black_box(acc);
        best = best.min(t.elapsed().as_nanos() as f64 / 1e6);
    }
    best
}
