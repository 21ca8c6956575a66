// SPDX-License-Identifier: Apache-2.0
//! What the benchmarks share: running one operation on several threads at
//! once and timing the slowest, realistic latency values to record, and a
//! namespace directory for topdeck's files.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// How many latencies [`latencies`] returns: a power of two, so a loop
/// index masked with `LATENCIES - 1` picks one without a bounds check.
pub const LATENCIES: usize = 4096;

/// Runs `run(&mut state, iters)`, which must do `iters` operations, on each
/// of `threads` threads released together by a barrier, and returns the
/// slowest thread's time: the per-thread cost of `iters` operations under
/// that much contention. Each thread makes its `state` with `init` and
/// does one untimed operation first, so per-thread set-up (a thread-bound
/// handle, a shard claimed on first use, a lock's first touch) stays
/// outside the timing.
///
/// The loop is written in `run`, not here, so that the operation is
/// inlined into it as in real code; a call per operation would add a few
/// nanoseconds to every contender.
pub fn per_thread<S, I, F>(threads: usize, iters: u64, init: &I, run: &F) -> Duration
where
    I: Fn() -> S + Sync,
    F: Fn(&mut S, u64) + Sync,
{
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut state = init();
                    run(&mut state, 1);
                    barrier.wait();
                    let t = Instant::now();
                    run(&mut state, iters);
                    let elapsed = t.elapsed();
                    drop(state);
                    elapsed
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a benchmark thread panicked"))
            .max()
            .unwrap_or_default()
    })
}

/// [`per_thread`] for operations that need no per-thread state: `run(n)`
/// does `n` operations.
pub fn per_thread_loop<F: Fn(u64) + Sync>(threads: usize, iters: u64, run: &F) -> Duration {
    per_thread(threads, iters, &|| (), &|_: &mut (), n| run(n))
}

/// [`LATENCIES`] request latencies in seconds, log-normally spread around
/// 1 ms (median 1 ms, about 95% between 60 µs and 17 ms), from a fixed seed
/// so every run and every library records the same values.
pub fn latencies() -> Box<[f64; LATENCIES]> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut out = Box::new([0.0; LATENCIES]);
    for v in out.iter_mut() {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // A sum of four uniforms is close to normal (sd 0.577); scaled by
        // 2.5 and exponentiated it is log-normal with sd ≈ 1.44 in ln.
        let n: f64 = (0..4)
            .map(|k| ((x >> (16 * k)) & 0xffff) as f64 / 65535.0)
            .sum::<f64>()
            - 2.0;
        *v = 1e-3 * (n * 2.5).exp();
    }
    out
}

/// A namespace directory for a benchmark's registries (in /dev/shm, where
/// topdeck puts them by default), removed on drop.
pub fn namespace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("topdeck-bench-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::Builder::new().prefix("topdeck-bench-").tempdir())
        .expect("a temporary directory in /dev/shm or $TMPDIR")
}

/// `clock_gettime(clock)` in nanoseconds: `libc::CLOCK_MONOTONIC` as the
/// reference the clock benches compare against, `CLOCK_THREAD_CPUTIME_ID`
/// for a thread's own CPU time.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The median of `v` (the upper one of an even count); NaN when empty.
///
/// ```
/// assert_eq!(topdeck_bench::median(&[3.0, 1.0, 2.0]), 2.0);
/// assert!(topdeck_bench::median(&[]).is_nan());
/// ```
pub fn median(v: &[f64]) -> f64 {
    let mut sorted = v.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Lets the calling thread run only on `cpus` (ids past the set's size
/// are left out).
pub fn pin_to(cpus: impl IntoIterator<Item = usize>) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // inside it for ids below CPU_SETSIZE; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in cpus.into_iter().filter(|&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A bench binary's command line, checked before it measures anything:
/// `--help` (or `-h`) prints the usage on stdout and exits 0; a bad or
/// missing argument prints what is wrong and the usage on stderr and exits
/// 2. Neither ever panics or prints a backtrace, whatever `RUST_BACKTRACE`
/// says.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    name: &'static str,
    text: &'static str,
}

impl Usage {
    /// `name`'s usage: `text` starts with the line after `usage: ` (the
    /// arguments, after the name) and may go on with lines that explain
    /// them.
    pub const fn new(name: &'static str, text: &'static str) -> Self {
        Self { name, text }
    }

    /// This process's arguments after its name. Any that is `--help` or
    /// `-h` prints the usage and exits 0; one that is not UTF-8 is a bad
    /// argument.
    pub fn args(&self) -> Vec<String> {
        let args: Vec<String> = std::env::args_os()
            .skip(1)
            .map(|a| {
                a.into_string()
                    .unwrap_or_else(|a| self.fail(format_args!("argument {a:?} is not UTF-8")))
            })
            .collect();
        if args.iter().any(|a| a == "--help" || a == "-h") {
            println!("usage: {} {}", self.name, self.text);
            std::process::exit(0);
        }
        args
    }

    /// Prints `why` and the usage line on stderr and exits 2.
    pub fn fail(&self, why: impl std::fmt::Display) -> ! {
        let (line, more) = match self.text.split_once('\n') {
            Some((line, _)) => (line, format!("\n{} --help says more", self.name)),
            None => (self.text, String::new()),
        };
        eprintln!("{}: {why}\nusage: {} {line}{more}", self.name, self.name);
        std::process::exit(2)
    }

    /// `value`, the argument of `what`, parsed; missing or not a `T`, a
    /// bad argument.
    pub fn parse<T>(&self, what: &str, value: Option<&str>) -> T
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        let Some(v) = value else {
            self.fail(format_args!("{what} needs a value"))
        };
        v.parse()
            .unwrap_or_else(|e| self.fail(format_args!("{what}: {v:?} is not valid: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_centre_on_one_millisecond() {
        let mut v = latencies().to_vec();
        v.sort_by(f64::total_cmp);
        let median = v[LATENCIES / 2];
        assert!((0.7e-3..1.4e-3).contains(&median), "median {median}");
        assert!(
            v[0] > 1e-6 && v[LATENCIES - 1] < 1.0,
            "{} {}",
            v[0],
            v[LATENCIES - 1]
        );
    }

    #[test]
    fn per_thread_runs_every_iteration_on_every_thread() {
        let n = std::sync::atomic::AtomicU64::new(0);
        per_thread_loop(2, 1000, &|iters| {
            for _ in 0..iters {
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        // 1000 timed + 1 untimed warm-up operation per thread.
        assert_eq!(n.into_inner(), 2 * 1001);
    }
}
