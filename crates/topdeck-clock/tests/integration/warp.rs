// SPDX-License-Identifier: Apache-2.0
//! Warp test: one thread pinned to each CPU; under a lock each reads the
//! clock and compares with the last value any thread read. Any decrease
//! of `now_ordered()` is time running backwards between CPUs. `now()` is
//! counted but not held to zero: its RDTSC may execute before the lock is
//! taken (it is not ordered), so it can read up to the CPU's reordering
//! window (tens of ns) early; see the crate's Caveats.

use std::sync::{Arc, Mutex};

#[test]
fn no_thread_sees_time_go_back_from_another_threads_last_read() {
    let cpus = crate::allowed_cpus();
    let last = Arc::new(Mutex::new(0u64));
    let _ = topdeck_clock::now();
    let threads: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            let last = Arc::clone(&last);
            std::thread::spawn(move || {
                crate::pin(cpu);
                // [plain, ordered]: backward steps and the largest one, ns.
                let mut backwards = [0u64; 2];
                let mut worst = [0u64; 2];
                for i in 0..100_000usize {
                    let mut l = last.lock().unwrap();
                    let v = if i % 2 == 0 {
                        topdeck_clock::now()
                    } else {
                        topdeck_clock::now_ordered()
                    };
                    if v < *l {
                        backwards[i % 2] += 1;
                        worst[i % 2] = worst[i % 2].max(*l - v);
                    }
                    *l = (*l).max(v);
                }
                println!(
                    "CPU {cpu}: now() {} back (worst {} ns), now_ordered() {} back (worst {} ns)",
                    backwards[0], worst[0], backwards[1], worst[1]
                );
                backwards[1]
            })
        })
        .collect();
    let backwards: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        backwards,
        0,
        "now_ordered(): {backwards} backward steps across {} CPUs",
        cpus.len()
    );
}
