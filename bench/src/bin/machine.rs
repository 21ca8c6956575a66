// SPDX-License-Identifier: Apache-2.0
//! The machine a figure was measured on, in one line for docs/PERFORMANCE.md:
//! CPU model and generation, CPUs, and whether two vCPUs behave as one
//! physical core (a VM shows no SMT siblings, so it is measured: a cache line
//! passed between SMT siblings costs a few ns a trip, between cores tens).
//!
//! `cargo run --release -p topdeck-bench --bin machine [CPU_A CPU_B]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

const USAGE: topdeck_bench::Usage = topdeck_bench::Usage::new(
    "machine",
    "[CPU_A CPU_B]
  The CPU model and whether CPU_A and CPU_B (0 and 1) behave as one core.",
);

fn main() -> Result<()> {
    let args: Vec<usize> = USAGE
        .args()
        .iter()
        .map(|a| USAGE.parse("a CPU number", Some(a)))
        .collect();
    let (a, b) = match args[..] {
        [] => (0, 1),
        [a, b] if a != b => (a, b),
        [_, _] => USAGE.fail("give two different CPUs"),
        _ => USAGE.fail("give two CPU numbers, or none for 0 and 1"),
    };
    let cpu = cpu_model()?;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let siblings = std::fs::read_to_string(format!(
        "/sys/devices/system/cpu/cpu{a}/topology/thread_siblings_list"
    ))
    .map(|s| s.trim().to_string())
    .unwrap_or_else(|_| "unknown".into());
    print!("{cpu}, {cpus} CPUs; SMT siblings of cpu{a} as the guest sees them: {siblings}; ");
    if cpus < 2 {
        println!("one CPU, no cross-CPU trip to measure");
        return Ok(());
    }
    let trip = round_trip_ns(a, b)?;
    let verdict = if trip < 30.0 {
        "as SMT siblings of one physical core do"
    } else if trip < 150.0 {
        "as separate cores sharing a cache do"
    } else {
        "as cores on separate dies do (or vCPUs the host does not run at the same time)"
    };
    let shared = contended_add_ns(a, b)?;
    println!(
        "a cache line between cpu{a} and cpu{b}: {trip:.1} ns a round trip (median of 21), {verdict}; \
         two threads adding to one word: {shared:.2} ns an add (median of 21; a few ns means \
         each thread mostly finds the line already its own)"
    );
    Ok(())
}

/// Median ns per `fetch_add` while threads on CPUs `a` and `b` both add
/// to one word: what "two threads on one counter" figures pay.
fn contended_add_ns(a: usize, b: usize) -> Result<f64> {
    const ADDS: u64 = 1_000_000;
    let word = Arc::new(AtomicU64::new(0));
    let go = Arc::new(std::sync::Barrier::new(2));
    let (w, g) = (Arc::clone(&word), Arc::clone(&go));
    let other = std::thread::spawn(move || -> Result<()> {
        pin(b)?;
        for _ in 0..21 {
            g.wait();
            for _ in 0..ADDS {
                w.fetch_add(1, Ordering::Relaxed);
            }
            g.wait();
        }
        Ok(())
    });
    pin(a)?;
    let mut rounds = Vec::new();
    for _ in 0..21 {
        go.wait();
        let t = Instant::now();
        for _ in 0..ADDS {
            word.fetch_add(1, Ordering::Relaxed);
        }
        rounds.push(t.elapsed().as_nanos() as f64 / ADDS as f64);
        go.wait();
    }
    other.join().expect("the adding thread does not panic")?;
    Ok(topdeck_bench::median(&rounds))
}

/// Model name, family and model from /proc/cpuinfo, with the AMD Zen
/// generation they mean (the model name in a VM is often just "AMD EPYC").
fn cpu_model() -> Result<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").context("reading /proc/cpuinfo")?;
    let field = |key: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let name = field("model name").unwrap_or_else(|| "unknown CPU".into());
    let family: u32 = field("cpu family")
        .and_then(|f| f.parse().ok())
        .unwrap_or(0);
    let model: u32 = field("model").and_then(|m| m.parse().ok()).unwrap_or(0);
    let zen = match field("vendor_id").as_deref() {
        Some("AuthenticAMD") => zen(family, model),
        _ => None,
    };
    Ok(match zen {
        Some(z) => format!("{name} (family {family}, model {model}: {z})"),
        None => format!("{name} (family {family}, model {model})"),
    })
}

/// AMD's families and model ranges per Zen generation (server parts named).
fn zen(family: u32, model: u32) -> Option<&'static str> {
    Some(match (family, model) {
        (0x17, 0x00..=0x0f) => "Zen 1 (Naples)",
        (0x17, 0x10..=0x2f) => "Zen 1/Zen+",
        (0x17, 0x30..=0xff) => "Zen 2 (Rome)",
        (0x19, 0x00..=0x0f) => "Zen 3 (Milan)",
        (0x19, 0x10..=0x1f) => "Zen 4 (Genoa)",
        (0x19, 0x20..=0x5f) => "Zen 3",
        (0x19, 0x60..=0x7f) => "Zen 4",
        (0x19, 0xa0..=0xaf) => "Zen 4c (Bergamo)",
        (0x1a, 0x00..=0x1f) => "Zen 5 (Turin)",
        (0x1a, _) => "Zen 5",
        _ => return None,
    })
}

/// Median round trip of a cache line bounced between two threads pinned
/// to CPUs `a` and `b`.
fn round_trip_ns(a: usize, b: usize) -> Result<f64> {
    const TRIPS: u64 = 20_000;
    let line = Arc::new(AtomicU64::new(0));
    let other = Arc::clone(&line);
    let echo = std::thread::spawn(move || -> Result<()> {
        pin(b)?;
        // Answers every odd value with the next even one until told to stop.
        loop {
            let v = other.load(Ordering::Acquire);
            if v == u64::MAX {
                return Ok(());
            }
            if v % 2 == 1 {
                other.store(v + 1, Ordering::Release);
            }
        }
    });
    pin(a)?;
    let mut rounds = Vec::new();
    let mut next = 1;
    for _ in 0..21 {
        let t = Instant::now();
        for _ in 0..TRIPS {
            line.store(next, Ordering::Release);
            while line.load(Ordering::Acquire) != next + 1 {
                std::hint::spin_loop();
            }
            next += 2;
        }
        rounds.push(t.elapsed().as_nanos() as f64 / TRIPS as f64);
    }
    line.store(u64::MAX, Ordering::Release);
    echo.join().expect("the echo thread does not panic")?;
    Ok(topdeck_bench::median(&rounds))
}

fn pin(cpu: usize) -> Result<()> {
    topdeck_bench::pin_to([cpu])
        .with_context(|| format!("pinning to cpu{cpu}; name two CPUs this process may use"))
}

#[cfg(test)]
mod tests {
    use super::zen;

    #[test]
    fn families_and_models_name_their_generation() {
        assert_eq!(zen(23, 1), Some("Zen 1 (Naples)"));
        assert_eq!(zen(23, 49), Some("Zen 2 (Rome)"));
        assert_eq!(zen(25, 1), Some("Zen 3 (Milan)"));
        assert_eq!(zen(25, 17), Some("Zen 4 (Genoa)"));
        assert_eq!(zen(26, 2), Some("Zen 5 (Turin)"));
        assert_eq!(zen(6, 85), None, "an Intel family");
    }
}
