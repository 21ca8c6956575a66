// SPDX-License-Identifier: Apache-2.0
//! Backward steps across threads: one thread pinned per CPU, each in a
//! loop loads a shared word (the latest reading any thread published),
//! reads the clock, counts a backward step if its reading is below the
//! word, and publishes with `fetch_max`. The word's value was read before
//! it was published, and the load comes before the read in program order,
//! so a smaller reading means the read ran ahead of the load (or the
//! clocks of two CPUs disagree). The clocks take turns every 10 ms in the
//! same run, each with a word of its own.
//!
//! With `lock`, the same under a test-and-set spin lock (the `warp`
//! experiment): the read then follows a locked read-modify-write, which
//! also orders it on x86.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use topdeck::clock;

use super::contenders::Contenders;

const NAMES: [&str; 6] = [
    "topdeck now()",
    "topdeck now_ordered()",
    "minstant",
    "quanta",
    "raw rdtsc (topdeck ticks())",
    "raw rdtscp",
];

/// One 64-byte line per word, so the clocks do not share a line.
#[repr(align(64))]
#[derive(Default)]
struct Word(AtomicU64);

#[inline]
fn read(c: &Contenders, k: usize) -> u64 {
    match k {
        0 => clock::now(),
        1 => clock::now_ordered(),
        2 => c.read(1),
        3 => c.read(2),
        4 => clock::ticks(),
        _ => {
            let mut aux = 0u32;
            // SAFETY: RDTSCP exists on every x86_64 CPU this lab runs on
            // (checked by topdeck's start-up as well); `aux` is writable.
            unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
        }
    }
}

pub fn run(secs: u64, cpus: &[usize], lock: bool) -> (String, serde_json::Value) {
    let c = Contenders::new();
    let words: Vec<Word> = (0..NAMES.len()).map(|_| Word::default()).collect();
    let turn = AtomicUsize::new(0);
    let held = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    // Per thread, per clock: reads, backward steps, worst step (clock units).
    let results: Vec<Vec<[u64; 3]>> = std::thread::scope(|s| {
        let handles: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                let (c, words, turn, stop, held) = (&c, &words, &turn, &stop, &held);
                s.spawn(move || {
                    super::pin(cpu);
                    let mut r = vec![[0u64; 3]; NAMES.len()];
                    while !stop.load(Ordering::Relaxed) {
                        let k = turn.load(Ordering::Relaxed);
                        for _ in 0..64 {
                            while lock && held.swap(true, Ordering::Acquire) {
                                std::hint::spin_loop();
                            }
                            let x = words[k].0.load(Ordering::Acquire);
                            let v = read(c, k);
                            if v < x {
                                r[k][1] += 1;
                                r[k][2] = r[k][2].max(x - v);
                            }
                            words[k].0.fetch_max(v, Ordering::AcqRel);
                            if lock {
                                held.store(false, Ordering::Release);
                            }
                            r[k][0] += 1;
                        }
                    }
                    r
                })
            })
            .collect();
        let slices = secs * 100;
        for i in 0..slices {
            turn.store((i as usize) % NAMES.len(), Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("cross thread"))
            .collect()
    });
    let mut table = String::from(
        "| clock | reads | backward steps | per million reads | worst step ns |\n|---|---:|---:|---:|---:|\n",
    );
    let mut out = Vec::new();
    for (k, name) in NAMES.iter().enumerate() {
        let reads: u64 = results.iter().map(|r| r[k][0]).sum();
        let back: u64 = results.iter().map(|r| r[k][1]).sum();
        let worst = results.iter().map(|r| r[k][2]).max().unwrap_or(0);
        // Raw counts are ticks; the others are ns already.
        let worst_ns = if k >= 4 {
            clock::ticks_delta_to_ns(worst)
        } else {
            worst
        };
        let per_m = back as f64 * 1e6 / reads.max(1) as f64;
        table.push_str(&format!(
            "| {name} | {reads} | {back} | {per_m:.2} | {worst_ns} |\n"
        ));
        out.push(json!({"clock": name, "reads": reads, "backward_steps": back, "worst_backward_ns": worst_ns}));
    }
    (
        table,
        json!({
            "experiment": if lock { "warp" } else { "cross" },
            "seconds": secs,
            "cpus": cpus,
            "clocks": out,
            "clamps": clock::stats().clamps,
            "source": clock::source().kind.name(),
        }),
    )
}
