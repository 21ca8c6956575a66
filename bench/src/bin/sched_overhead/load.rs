// SPDX-License-Identifier: Apache-2.0
//! The probe under real load, as users run it: three CPU hogs (busy loops
//! in a cgroup of their own, each walking a buffer of `--hog-mib` MiB, 8 by
//! default, so that together they overflow the caches as real work does;
//! 0 makes them plain arithmetic loops) share the host's CPUs with a
//! latency-sensitive process that sleeps 1 ms in a loop (in another
//! cgroup). Events are rare (a few thousand per second) and land on caches
//! the hogs have just used, unlike the ping-pong's hot loop. While the
//! probe is attached its maps are read once per second, as the agent does
//! (totals and the waits-in-progress iterator).
//!
//! Two figures, because BPF run-time stats cost by themselves (two clock
//! reads per program run):
//!
//! - stats off: the hogs' total work rate (loop iterations per second)
//!   with the probe detached and attached, interleaved (detached, attached,
//!   then attached, detached, ...), so what the probe takes from the host
//!   shows without any instrument of the kernel's;
//! - stats on: per program, events, ns per event (run_time_ns / run_cnt)
//!   and the probe's total CPU as a share of the host (sum of run_time_ns
//!   over wall time × online CPUs), beside empty programs on the same
//!   tracepoints (the floor) in the same load.
//!
//! The workers are forked before the process has any other thread, and die
//! with it (PR_SET_PDEATHSIG).

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use topdeck_sched::{Hierarchy, Probe, ProgramStats};

use super::{host_pct, online_cpus, stats_over, Floor, Raw, Window};
use topdeck_bench::median;

/// Busy loops: one more than the host's 2 CPUs, so they queue.
const HOGS: usize = 3;
/// Counter slots: one per hog, then the sleeper's wakeups and the sum of
/// its oversleep in ns. One cache line each, so that the hogs' stores do
/// not bounce a shared line between CPUs.
const SLOT_SLEEPS: usize = HOGS;
const SLOT_OVERSLEEP: usize = HOGS + 1;
const SLOTS: usize = HOGS + 2;
const LINE: usize = 64;
const SLEEP_NS: u64 = 1_000_000;

/// Counters in memory shared with the forked workers.
struct Shared {
    base: *mut u8,
}

impl Shared {
    fn new() -> Result<Self> {
        // SAFETY: a fresh anonymous shared mapping; no address hint.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SLOTS * LINE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!(
                "mmap of the workers' counters: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Self { base: p.cast() })
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        assert!(i < SLOTS);
        // SAFETY: inside the mapping, 64-byte aligned, zero-initialised,
        // only ever accessed as an AtomicU64.
        unsafe { &*self.base.add(i * LINE).cast::<AtomicU64>() }
    }

    fn hog_iterations(&self) -> u64 {
        (0..HOGS)
            .map(|i| self.slot(i).load(Ordering::Relaxed))
            .sum()
    }
}

/// A cgroup directory this run made, removed (after its tasks) on drop.
struct Cgroup(PathBuf);

impl Cgroup {
    fn make(h: &Hierarchy, name: &str) -> Result<Self> {
        let dir = h.dir(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("mkdir {}", dir.display())),
        }
        Ok(Self(dir))
    }

    fn add(&self, pid: libc::pid_t) -> Result<()> {
        let procs = self.0.join("cgroup.procs");
        fs::write(&procs, pid.to_string())
            .with_context(|| format!("moving pid {pid} into {}", procs.display()))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// The forked hogs and sleeper with their cgroups; killed, reaped and
/// removed on drop.
pub struct Workers {
    pids: Vec<libc::pid_t>,
    shared: Shared,
    // After `pids` in drop order: a cgroup can go only once its tasks have.
    _groups: Vec<Cgroup>,
}

/// Forks a child that runs `body` for ever and dies with its parent.
fn fork_worker(body: impl FnOnce()) -> Result<libc::pid_t> {
    // SAFETY: called while the process has a single thread (see
    // `Workers::start`), so the child may run ordinary code; it only
    // loops, reads the clock and sleeps.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => bail!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            // SAFETY: prctl with constant arguments.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            body();
            // SAFETY: the bodies never return; should one, the child must
            // not run on into its parent's code.
            unsafe { libc::_exit(0) }
        }
        pid => Ok(pid),
    }
}

impl Workers {
    /// Starts the workers. Must run before the process starts a thread.
    pub fn start(h: &Hierarchy, hog_mib: usize) -> Result<Self> {
        let hogs = Cgroup::make(h, "td-overhead-hogs")?;
        let quiet = Cgroup::make(h, "td-overhead-sleeper")?;
        let shared = Shared::new()?;
        let mut w = Self {
            pids: Vec::new(),
            shared,
            _groups: Vec::new(),
        };
        for i in 0..HOGS {
            let slot = w.shared.slot(i);
            let pid = fork_worker(|| hog(slot, hog_mib))?;
            w.pids.push(pid);
            hogs.add(pid)?;
        }
        let (sleeps, oversleep) = (w.shared.slot(SLOT_SLEEPS), w.shared.slot(SLOT_OVERSLEEP));
        let pid = fork_worker(|| sleeper(sleeps, oversleep))?;
        w.pids.push(pid);
        quiet.add(pid)?;
        w._groups = vec![hogs, quiet];
        Ok(w)
    }

    /// Loop iterations of all hogs per second, the sleeper's mean
    /// oversleep in µs, over `d`.
    fn rates(&self, d: Duration) -> (f64, f64) {
        self.rates_reading(d, None)
    }

    /// Like `rates`, reading `probe`'s maps once per second meanwhile, as
    /// the agent does.
    fn rates_reading(&self, d: Duration, probe: Option<&Probe>) -> (f64, f64) {
        let s = &self.shared;
        let (n0, w0, o0) = (
            s.hog_iterations(),
            s.slot(SLOT_SLEEPS).load(Ordering::Relaxed),
            s.slot(SLOT_OVERSLEEP).load(Ordering::Relaxed),
        );
        let t0 = Instant::now();
        match probe {
            None => std::thread::sleep(d),
            Some(p) => {
                let mut next = t0;
                while next < t0 + d {
                    // Errors only cost the read; the figures stand.
                    let _ = p.read();
                    let _ = p.waiting();
                    next += Duration::from_secs(1);
                    std::thread::sleep(next.min(t0 + d).saturating_duration_since(Instant::now()));
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let (n1, w1, o1) = (
            s.hog_iterations(),
            s.slot(SLOT_SLEEPS).load(Ordering::Relaxed),
            s.slot(SLOT_OVERSLEEP).load(Ordering::Relaxed),
        );
        let wakeups = (w1 - w0).max(1) as f64;
        ((n1 - n0) as f64 / secs, (o1 - o0) as f64 / wakeups / 1e3)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for &pid in &self.pids {
            // SAFETY: signalling and reaping our own children.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        // SAFETY: the mapping made in Shared::new, no longer referenced.
        unsafe { libc::munmap(self.shared.base.cast(), SLOTS * LINE) };
    }
}

/// A busy loop, its count published every 4096 steps. With a buffer
/// (`mib` > 0), a step adds one to a word of the next cache line in a
/// full-period scramble of the buffer's lines, which the prefetchers do not
/// follow; without, a step is a dependent multiply-add.
fn hog(slot: &AtomicU64, mib: usize) -> ! {
    let mut n = 0u64;
    if mib == 0 {
        let mut x = 1u64;
        loop {
            for _ in 0..4096 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
            n += 4096;
            slot.store(n, Ordering::Relaxed);
        }
    }
    let lines = (mib << 20) / LINE;
    let lines = 1usize << lines.ilog2();
    let mut buf = vec![0u64; lines * (LINE / 8)];
    let mut i = 0usize;
    loop {
        for _ in 0..4096 {
            // An LCG modulo a power of two with a = 1 (mod 4) and c odd
            // visits every line once per period.
            i = (i.wrapping_mul(5).wrapping_add(1)) & (lines - 1);
            buf[i * (LINE / 8)] += 1;
        }
        std::hint::black_box(&mut buf);
        n += 4096;
        slot.store(n, Ordering::Relaxed);
    }
}

/// Sleeps 1 ms in a loop and sums how much longer than that each sleep took.
fn sleeper(sleeps: &AtomicU64, oversleep: &AtomicU64) -> ! {
    let (mut n, mut over) = (0u64, 0u64);
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: SLEEP_NS as i64,
    };
    loop {
        let t0 = topdeck_bench::clock_ns(libc::CLOCK_MONOTONIC);
        // SAFETY: a valid relative timespec; no remainder wanted.
        unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &ts, std::ptr::null_mut()) };
        let took = topdeck_bench::clock_ns(libc::CLOCK_MONOTONIC) - t0;
        n += 1;
        over += took.saturating_sub(SLEEP_NS);
        sleeps.store(n, Ordering::Relaxed);
        oversleep.store(over, Ordering::Relaxed);
    }
}

/// Runs `d` of the load with BPF stats on and returns each program's
/// window and the wall time.
fn stats_window(
    w: &Workers,
    stats: &dyn Fn() -> Result<Vec<ProgramStats>>,
    probe: Option<&Probe>,
    d: Duration,
) -> Result<(Vec<Window>, f64)> {
    stats_over(stats, || {
        w.rates_reading(d, probe);
        Ok(())
    })
}

/// Per program across rounds: events/s, ns/event; and % of host per round.
#[derive(Default)]
struct Series {
    names: Vec<String>,
    events_per_s: Vec<Vec<f64>>,
    ns: Vec<Vec<f64>>,
    host_pct: Vec<f64>,
}

impl Series {
    fn push(&mut self, windows: &[Window], wall_ns: f64, cpus: f64) {
        if self.names.is_empty() {
            self.names = windows.iter().map(|w| w.name.clone()).collect();
            self.events_per_s = vec![Vec::new(); windows.len()];
            self.ns = vec![Vec::new(); windows.len()];
        }
        for (i, w) in windows.iter().enumerate() {
            self.events_per_s[i].push(w.events as f64 / (wall_ns / 1e9));
            if w.events > 0 {
                self.ns[i].push(w.ns_per_event);
            }
        }
        self.host_pct.push(host_pct(windows, wall_ns, cpus));
    }
}

fn range(v: &[f64], digits: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.digits$}–{hi:.digits$}")
}

/// The whole scenario: `reps` interleaved rounds of `d` per state.
pub fn run(
    h: &Hierarchy,
    w: &Workers,
    reps: usize,
    d: Duration,
    probe_only: bool,
    raw: &Raw,
    hog_mib: usize,
) -> Result<()> {
    let cpus = online_cpus();
    // Let the workers settle into their cgroups and the CPUs' frequency.
    w.rates(Duration::from_millis(500));
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let (mut sleep_off, mut sleep_on) = (Vec::new(), Vec::new());
    let (mut ours, mut floor, mut clock) =
        (Series::default(), Series::default(), Series::default());
    for rep in 0..reps {
        // ABBA order, so that a drift in the host's speed over a round
        // falls on both states alike.
        for attached in [rep % 2 == 1, rep % 2 == 0] {
            if attached {
                let probe = crate::load_probe(h)?;
                w.rates(Duration::from_millis(200)); // warm: task storage, map entries
                let (rate, sleep) = w.rates_reading(d, Some(&probe));
                on.push(rate);
                sleep_on.push(sleep);
                raw.row("load", "hog_rate_attached", rate);
                raw.row("load", "oversleep_us_attached", sleep);
                let (wins, wall) =
                    stats_window(w, &|| Ok(probe.program_stats()?), Some(&probe), d)?;
                ours.push(&wins, wall, cpus);
                for x in &wins {
                    raw.row(
                        "load",
                        &format!("events_per_s {}", x.name),
                        x.events as f64 / (wall / 1e9),
                    );
                    raw.row("load", &format!("ns_per_event {}", x.name), x.ns_per_event);
                }
                raw.row("load", "host_pct", *ours.host_pct.last().unwrap());
            } else {
                let (rate, sleep) = w.rates(d);
                off.push(rate);
                sleep_off.push(sleep);
                raw.row("load", "hog_rate_detached", rate);
                raw.row("load", "oversleep_us_detached", sleep);
            }
        }
        if !probe_only {
            let f = Floor::start(false)?;
            let (wins, wall) = stats_window(w, &|| f.stats(), None, d)?;
            floor.push(&wins[..2], wall, cpus);
            drop(f);
            let f = Floor::start(true)?;
            let (wins, wall) = stats_window(w, &|| f.stats(), None, d)?;
            // Only the clock-reading program: its cost is per switch.
            clock.push(&wins[2..], wall, cpus);
        }
    }

    let secs = d.as_secs_f64();
    println!(
        "### Under load: {HOGS} CPU hogs ({hog_mib} MiB each) and a 1 ms sleeper on {cpus} CPUs ({reps} × {secs} s per state, interleaved)\n"
    );
    println!("Stats off: the hogs' work, with the probe detached and attached.\n");
    println!("| probe | hog loop iterations/s (median) | range | sleeper oversleep µs (median) |");
    println!("|---|---:|---:|---:|");
    println!(
        "| detached | {:.4e} | {} | {:.1} |",
        median(&off),
        range(&off.iter().map(|x| x / 1e9).collect::<Vec<_>>(), 4) + " ×1e9",
        median(&sleep_off)
    );
    println!(
        "| attached | {:.4e} | {} | {:.1} |",
        median(&on),
        range(&on.iter().map(|x| x / 1e9).collect::<Vec<_>>(), 4) + " ×1e9",
        median(&sleep_on)
    );
    // Paired by round: each attached window beside the detached one next to it.
    let loss: Vec<f64> = off
        .iter()
        .zip(&on)
        .map(|(a, b)| (1.0 - b / a) * 100.0)
        .collect();
    println!(
        "\nWork lost to the probe, paired per round: median {:.2}% of the hogs' work (range {} %); \
         the hogs hold all {cpus} CPUs, so that is the probe's share of the host, stats off.\n",
        median(&loss),
        range(&loss, 2)
    );
    raw.row("load", "work_lost_pct", median(&loss));
    println!("Stats on: per program, {secs} s windows, median [range] over {reps} rounds.\n");
    println!("| variant | program | events/s | ns/event | range |\n|---|---|---:|---:|---:|");
    let print = |variant: &str, s: &Series| {
        for (i, n) in s.names.iter().enumerate() {
            println!(
                "| {variant} | {n} | {:.0} | {:.0} | {} |",
                median(&s.events_per_s[i]),
                median(&s.ns[i]),
                range(&s.ns[i], 0)
            );
        }
    };
    if !probe_only {
        print("empty (floor)", &floor);
        print("clock only", &clock);
    }
    print("topdeck probe", &ours);
    println!(
        "\nThe probe's CPU, stats on: median **{:.3}% of the host** (range {} %), i.e. {:.2} ms of CPU per second per CPU.",
        median(&ours.host_pct),
        range(&ours.host_pct, 3),
        median(&ours.host_pct) * 10.0
    );
    if !probe_only {
        println!(
            "Empty programs on the same tracepoints: {:.3}% of the host.",
            median(&floor.host_pct)
        );
    }
    Ok(())
}
