// SPDX-License-Identifier: Apache-2.0
//! The scheduler probe's overhead, in one run (root): a pipe ping-pong
//! between two threads pinned to one CPU (two wakeups and two switches per
//! round trip), measured
//!
//! 1. without any probe, with our probe, with the per-event ring-buffer
//!    variant (and its reader thread) and with empty programs, all with BPF
//!    run-time stats off, interleaved, `--reps` times: round trips per second;
//! 2. with BPF run-time stats on (they cost by themselves, so only here):
//!    ns per run of each program, for ours, the ring-buffer variant, the
//!    empty floor, and bcc's libbpf-tools `runqlat` if installed;
//! 3. the agent's own user-space CPU with 1 s reads during the ping-pong.
//!
//! `sched_overhead load` runs the other scenario instead, rare events on
//! cold caches: CPU hogs and a 1 ms sleeper (see `load.rs`).
//!
//! `--probe-only` keeps only the figures of the topdeck probe (none vs
//! probe, its ns per run and share of the host), for before/after runs of
//! two builds in turns; `--raw` adds one tab-separated `RAW` line per
//! measurement for a script to aggregate.
//!
//! `--thread-waits PATH` loads the probe with its thread-waits array on,
//! pinned at PATH (sized as the agent sizes it), to compare with and
//! without it (off by default here, as for every `Probe::load`).
//!
//! Prints a Markdown report. Run it under `flock /tmp/topdeck-bench.lock`.

mod load;

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};
use topdeck_bench::median;
use topdeck_sched::{
    Agent, AgentConfig, BpfStats, Clock, Hierarchy, LoadOptions, Probe, ProgramStats,
};

/// `--thread-waits PATH`: where the measured probe pins its thread-waits
/// array; unset, the array is off.
static THREAD_WAITS: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// The probe measured here: defaults, with thread waits as `--thread-waits`
/// says.
fn load_probe(h: &Hierarchy) -> Result<Probe> {
    Ok(Probe::load_opts(
        h,
        &LoadOptions {
            thread_waits: THREAD_WAITS.get().cloned(),
            ..LoadOptions::default()
        },
    )?)
}

/// The comparison programs, built from `bench/bpf/` by `bench/build.rs`.
#[allow(
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    unused_imports
)]
mod baseline {
    /// One ring-buffer event per wait, in the style of Netflix's monitor.
    pub mod ringbuf {
        include!(concat!(env!("OUT_DIR"), "/ringbuf.skel.rs"));
    }
    /// Programs that do nothing, on the same tracepoints.
    pub mod floor {
        include!(concat!(env!("OUT_DIR"), "/floor.skel.rs"));
    }
}

use baseline::{floor, ringbuf};

const CPU: usize = 1;
const READER_CPU: usize = 0;

/// Pins the calling thread; a CPU it may not use leaves it where it was
/// (the figures then carry more noise, nothing worse).
fn pin(cpu: usize) {
    let _ = topdeck_bench::pin_to([cpu]);
}

fn thread_cpu_ns() -> u64 {
    topdeck_bench::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Round trips per second of a pipe ping-pong pinned to `CPU` for `d`.
fn ping_pong(d: Duration) -> Result<f64> {
    let mut a = [0i32; 2];
    let mut b = [0i32; 2];
    // SAFETY: each array holds the two descriptors pipe() writes.
    if unsafe { libc::pipe(a.as_mut_ptr()) } != 0 || unsafe { libc::pipe(b.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    let (a_r, a_w, b_r, b_w) = (a[0], a[1], b[0], b[1]);
    let echo = std::thread::spawn(move || {
        pin(CPU);
        let mut byte = 0u8;
        // SAFETY: one-byte reads and writes into a local byte on our pipes.
        while unsafe { libc::read(a_r, (&mut byte as *mut u8).cast(), 1) } == 1 {
            // SAFETY: as above.
            unsafe { libc::write(b_w, (&byte as *const u8).cast(), 1) };
        }
        // SAFETY: closing the descriptors this thread owns.
        unsafe {
            libc::close(a_r);
            libc::close(b_w);
        }
    });
    pin(CPU);
    let start = Instant::now();
    let mut trips = 0u64;
    let mut byte = 0u8;
    while trips % 1024 != 0 || start.elapsed() < d {
        // SAFETY: as above.
        unsafe {
            libc::write(a_w, (&byte as *const u8).cast(), 1);
            libc::read(b_r, (&mut byte as *mut u8).cast(), 1);
        }
        trips += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    // SAFETY: closing our ends ends the echo thread's loop.
    unsafe {
        libc::close(a_w);
        libc::close(b_r);
    }
    echo.join().expect("echo thread");
    // Unpin the main thread again.
    let _ = topdeck_bench::pin_to(0..libc::CPU_SETSIZE as usize);
    Ok(trips as f64 / secs)
}

fn leak_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}

/// The per-event variant, attached, with a reader thread draining it.
struct RingBuf {
    _links: Vec<Link>,
    skel: ringbuf::RingbufSkel<'static>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<(u64, u64)>>,
    started: Instant,
}

impl RingBuf {
    fn start(cpu_v1: bool) -> Result<Self> {
        let mut open = ringbuf::RingbufSkelBuilder::default().open(leak_storage())?;
        open.maps
            .rodata_data
            .as_deref_mut()
            .context("rodata")?
            .cpu_v1 = cpu_v1;
        let skel = open.load()?;
        let p = &skel.progs;
        let links = vec![
            p.rb_wakeup.attach()?,
            p.rb_wakeup_new.attach()?,
            p.rb_switch.attach()?,
        ];
        let stop = Arc::new(AtomicBool::new(false));
        // The reader aggregates like a user-space agent would: a histogram
        // of log2 buckets per (victim, culprit).
        let map_id = libbpf_rs::MapInfo::new(skel.maps.events.as_fd())?.info.id;
        let s = stop.clone();
        let reader = std::thread::spawn(move || {
            // On the other CPU than the ping-pong, as an agent would be on
            // a host with spare CPUs.
            pin(READER_CPU);
            let cpu0 = thread_cpu_ns();
            let mut hist: HashMap<(u64, u64), [u64; 64]> = HashMap::new();
            let mut n = 0u64;
            let mut rb = libbpf_rs::RingBufferBuilder::new();
            let mh = libbpf_rs::MapHandle::from_map_id(map_id).expect("ring buffer handle");
            rb.add(&mh, |data: &[u8]| {
                if data.len() >= 24 {
                    let w =
                        |i: usize| u64::from_ne_bytes(data[i * 8..i * 8 + 8].try_into().unwrap());
                    let (victim, culprit, wait) = (w(0), w(1), w(2));
                    hist.entry((victim, culprit)).or_insert([0; 64])
                        [63 - wait.max(1).leading_zeros() as usize] += 1;
                    n += 1;
                }
                0
            })
            .expect("ring buffer callback");
            let rb = rb.build().expect("ring buffer");
            while !s.load(Ordering::Relaxed) {
                let _ = rb.poll(Duration::from_millis(100));
            }
            let _ = rb.consume();
            drop(rb);
            (n, thread_cpu_ns() - cpu0)
        });
        Ok(Self {
            _links: links,
            skel,
            stop,
            reader: Some(reader),
            started: Instant::now(),
        })
    }

    fn stats(&self) -> Result<Vec<ProgramStats>> {
        let p = &self.skel.progs;
        [("rb_wakeup", &p.rb_wakeup), ("rb_switch", &p.rb_switch)]
            .iter()
            .map(|(n, prog)| Ok(ProgramStats::of_fd(prog.as_fd().as_raw_fd(), n)?))
            .collect()
    }

    /// Stops the reader: (events read, reader CPU share of one core, lost).
    fn stop(mut self) -> (u64, f64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let (n, cpu) = self.reader.take().unwrap().join().unwrap();
        let wall = self.started.elapsed().as_nanos() as f64;
        let lost = self
            .skel
            .maps
            .lost
            .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .ok()
            .flatten()
            .map_or(0, |v| {
                v.iter()
                    .map(|b| u64::from_ne_bytes(b[..8].try_into().unwrap()))
                    .sum()
            });
        (n, cpu as f64 / wall, lost)
    }
}

use libbpf_rs::MapCore;

struct Floor {
    _links: Vec<Link>,
    skel: floor::FloorSkel<'static>,
}

impl Floor {
    /// The empty programs, and the clock-only one if `clock`.
    fn start(clock: bool) -> Result<Self> {
        let skel = floor::FloorSkelBuilder::default()
            .open(leak_storage())?
            .load()?;
        let p = &skel.progs;
        let mut links = vec![
            p.floor_wakeup.attach()?,
            p.floor_wakeup_new.attach()?,
            p.floor_switch.attach()?,
        ];
        if clock {
            links.push(p.floor_clock.attach()?);
        }
        Ok(Self {
            _links: links,
            skel,
        })
    }

    fn stats(&self) -> Result<Vec<ProgramStats>> {
        let p = &self.skel.progs;
        [
            ("floor_wakeup", &p.floor_wakeup),
            ("floor_switch", &p.floor_switch),
            ("floor_clock (switch, reads the clock)", &p.floor_clock),
        ]
        .iter()
        .map(|(n, prog)| Ok(ProgramStats::of_fd(prog.as_fd().as_raw_fd(), n)?))
        .collect()
    }
}

/// Ids and names of every loaded BPF program.
fn all_programs() -> Vec<(u32, i32)> {
    let mut out = Vec::new();
    let mut id = 0u32;
    // SAFETY: plain id iteration and fd-by-id calls; fds are closed by the caller.
    unsafe {
        while libbpf_rs::libbpf_sys::bpf_prog_get_next_id(id, &mut id) == 0 {
            let fd = libbpf_rs::libbpf_sys::bpf_prog_get_fd_by_id(id);
            if fd >= 0 {
                out.push((id, fd));
            }
        }
    }
    out
}

fn prog_name(fd: i32) -> String {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: `info` is writable and `len` its size.
    unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    let bytes: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// bcc's libbpf-tools runqlat, running, with the fds of its programs.
struct RunqLat {
    child: Child,
    progs: Vec<(String, i32)>,
}

impl RunqLat {
    fn start() -> Option<Self> {
        let before: Vec<u32> = all_programs()
            .into_iter()
            .map(|(id, fd)| {
                // SAFETY: closing an fd all_programs opened.
                unsafe { libc::close(fd) };
                id
            })
            .collect();
        let max = before.iter().copied().max().unwrap_or(0);
        let child = Command::new("runqlat")
            .args(["60", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(100));
            let progs: Vec<(String, i32)> = all_programs()
                .into_iter()
                .filter_map(|(id, fd)| {
                    let name = prog_name(fd);
                    if id > max && (name == "sched_switch" || name == "sched_wakeup") {
                        Some((name, fd))
                    } else {
                        // SAFETY: closing an fd we do not keep.
                        unsafe { libc::close(fd) };
                        None
                    }
                })
                .collect();
            if progs.len() >= 2 {
                return Some(Self { child, progs });
            }
        }
        None
    }

    fn stats(&self) -> Result<Vec<ProgramStats>> {
        self.progs
            .iter()
            .map(|(n, fd)| Ok(ProgramStats::of_fd(*fd, &format!("runqlat {n}"))?))
            .collect()
    }
}

impl Drop for RunqLat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for (_, fd) in &self.progs {
            // SAFETY: closing fds we opened.
            unsafe { libc::close(*fd) };
        }
    }
}

fn spread(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{:.0}k–{:.0}k", lo / 1e3, hi / 1e3)
}

/// `RAW` lines for a script, when asked for.
pub struct Raw(bool);

impl Raw {
    /// One measurement: `RAW <scenario> <measure> <value>`, tab-separated.
    pub fn row(&self, scenario: &str, measure: &str, value: f64) {
        if self.0 {
            println!("RAW\t{scenario}\t{measure}\t{value}");
        }
    }
}

/// Per program: name, ns per run, runs.
type PerRun = Vec<(String, f64, u64)>;

/// One program's figures over a stats-on window.
struct Window {
    name: String,
    events: u64,
    ns_per_event: f64,
    run_ns: u64,
}

/// Runs `work` with BPF stats on and returns each program's window over
/// it and the wall time, ns.
fn stats_over<T>(
    stats: &dyn Fn() -> Result<Vec<ProgramStats>>,
    work: impl FnOnce() -> Result<T>,
) -> Result<(Vec<Window>, f64)> {
    let _on = BpfStats::enable()?;
    let before = stats()?;
    let t0 = Instant::now();
    work()?;
    let wall = t0.elapsed().as_nanos() as f64;
    let after = stats()?;
    let windows = after
        .iter()
        .zip(&before)
        .map(|(a, b)| Window {
            name: a.name.clone(),
            events: a.run_cnt - b.run_cnt,
            ns_per_event: a.ns_per_run_since(b).unwrap_or(f64::NAN),
            run_ns: a.run_time_ns - b.run_time_ns,
        })
        .collect();
    Ok((windows, wall))
}

/// Online CPUs: the host's capacity, per second of wall time.
fn online_cpus() -> f64 {
    // SAFETY: sysconf with a constant name.
    (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as f64
}

/// The programs' run time in `windows` over `wall_ns` as a percent of the
/// host's `cpus`.
fn host_pct(windows: &[Window], wall_ns: f64, cpus: f64) -> f64 {
    let run: u64 = windows.iter().map(|w| w.run_ns).sum();
    run as f64 / (wall_ns * cpus) * 100.0
}

/// ns per run of each program over a ping-pong of `d`, stats on, and the
/// programs' run time as a share of the host's CPUs (percent).
fn ns_per_run(stats: impl Fn() -> Result<Vec<ProgramStats>>, d: Duration) -> Result<(PerRun, f64)> {
    let (windows, wall) = stats_over(&stats, || ping_pong(d))?;
    let per_run = windows
        .iter()
        .map(|w| (w.name.clone(), w.ns_per_event, w.events))
        .collect();
    Ok((per_run, host_pct(&windows, wall, online_cpus())))
}

const USAGE: topdeck_bench::Usage = topdeck_bench::Usage::new(
    "sched_overhead",
    "[load [--hog-mib N]] [--reps N] [--secs N] [--probe-only] [--raw] [--thread-waits PATH]
  load:            CPU hogs and a 1 ms sleeper instead of the pipe ping-pong
  --hog-mib N:     memory each hog walks, MiB (8)
  --reps N:        interleaved rounds (5)
  --secs N:        seconds per measurement (2)
  --probe-only:    only the topdeck probe's figures
  --raw:           a tab-separated RAW line per measurement
  --thread-waits PATH: the probe's thread-waits array on, pinned at PATH
Root, with BPF; run it under `flock /tmp/topdeck-bench.lock`.",
);

fn main() -> Result<()> {
    // The arguments first, so that --help and a bad one are answered
    // without root or BPF.
    let mut args = USAGE.args().into_iter();
    let mut reps = 5usize;
    let mut secs = 2u64;
    let (mut under_load, mut probe_only, mut raw) = (false, false, false);
    let mut hog_mib = 8usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "load" => under_load = true,
            "--reps" => reps = USAGE.parse(&a, args.next().as_deref()),
            "--secs" => secs = USAGE.parse(&a, args.next().as_deref()),
            "--probe-only" => probe_only = true,
            "--raw" => raw = true,
            "--hog-mib" => hog_mib = USAGE.parse(&a, args.next().as_deref()),
            "--thread-waits" => {
                let Some(path) = args.next() else {
                    USAGE.fail("--thread-waits needs a value")
                };
                let _ = THREAD_WAITS.set(path.into());
            }
            other => USAGE.fail(format_args!("unknown argument {other:?}")),
        }
    }
    if reps == 0 || secs == 0 {
        USAGE.fail("--reps and --secs must be at least 1");
    }
    if let Some(e) = topdeck_sched::unavailable() {
        bail!("{e}");
    }
    let d = Duration::from_secs(secs);
    let h = Hierarchy::detect()?;
    let raw = Raw(raw);
    if under_load {
        // Forked before this process starts any thread.
        let workers = load::Workers::start(&h, hog_mib)?;
        return load::run(&h, &workers, reps, d, probe_only, &raw, hog_mib);
    }
    ping_pong_report(&h, reps, secs, probe_only, &raw)
}

/// The ping-pong scenario, printed as Markdown.
fn ping_pong_report(
    h: &Hierarchy,
    reps: usize,
    secs: u64,
    probe_only: bool,
    raw: &Raw,
) -> Result<()> {
    let d = Duration::from_secs(secs);
    // 1. Throughput, stats off, interleaved; and the probe's ns per run
    // with stats on, in the same rounds.
    let (mut none, mut ours, mut rb, mut fl) = (vec![], vec![], vec![], vec![]);
    let mut rb_reader = vec![];
    let mut rb_lost = 0;
    let mut drops_during = [0u64; topdeck_sched::maps::NR_DROPS];
    let (mut ours_ns, mut ours_host) = (Vec::<PerRun>::new(), vec![]);
    for _ in 0..reps {
        none.push(ping_pong(d)?);
        raw.row("pingpong", "round_trips_none", *none.last().unwrap());
        {
            let probe = load_probe(h)?;
            ping_pong(Duration::from_millis(200))?; // warm: task storage, map entries
            let t0 = probe.read()?;
            ours.push(ping_pong(d)?);
            let t1 = probe.read()?;
            raw.row("pingpong", "round_trips_probe", *ours.last().unwrap());
            for (i, x) in drops_during.iter_mut().enumerate() {
                *x += t1.drops[i] - t0.drops[i];
            }
            let (per_run, host) = ns_per_run(|| Ok(probe.program_stats()?), d)?;
            for (n, ns, _) in &per_run {
                raw.row("pingpong", &format!("ns_per_event {n}"), *ns);
            }
            raw.row("pingpong", "host_pct", host);
            ours_ns.push(per_run);
            ours_host.push(host);
        }
        if probe_only {
            continue;
        }
        {
            let r = RingBuf::start(h.cpu_v1)?;
            rb.push(ping_pong(d)?);
            let (_, cpu, lost) = r.stop();
            rb_reader.push(cpu);
            rb_lost += lost;
        }
        {
            let _f = Floor::start(false)?;
            fl.push(ping_pong(d)?);
        }
    }
    // The probe's figures per program: medians over the rounds.
    let ours_ns: PerRun = (0..ours_ns[0].len())
        .map(|i| {
            let ns: Vec<f64> = ours_ns
                .iter()
                .map(|r| r[i].1)
                .filter(|x| !x.is_nan())
                .collect();
            let runs: Vec<f64> = ours_ns.iter().map(|r| r[i].2 as f64).collect();
            (ours_ns[0][i].0.clone(), median(&ns), median(&runs) as u64)
        })
        .collect();
    let ours_host = median(&ours_host);

    let m_none = median(&none);
    let row = |name: &str, v: &[f64]| {
        let m = median(v);
        format!(
            "| {name} | {:.0}k | {} | {:+.1}% |",
            m / 1e3,
            spread(v),
            (m / m_none - 1.0) * 100.0
        )
    };
    println!("### Throughput of the pinned pipe ping-pong, BPF stats off ({reps} × {secs} s, interleaved)\n");
    println!("| probe | round trips/s (median) | range | vs none |\n|---|---:|---:|---:|");
    println!("{}", row("none", &none));
    if !probe_only {
        println!("{}", row("empty programs (floor)", &fl));
    }
    println!("{}", row("topdeck probe (in-kernel aggregation)", &ours));
    if !probe_only {
        println!("{}", row("per-event ring buffer + reader", &rb));
    }
    println!();
    println!(
        "### ns per run from BPF run-time stats (stats on for this part only, {secs} s each; the probe: median of {reps})\n"
    );
    println!("| variant | program | ns/run | runs | % of host CPU |\n|---|---|---:|---:|---:|");
    let print = |variant: &str, (v, host): &(PerRun, f64)| {
        for (i, (n, ns, runs)) in v.iter().enumerate() {
            let host = if i == 0 {
                format!("{host:.2}%")
            } else {
                String::new()
            };
            println!("| {variant} | {n} | {ns:.0} | {runs} | {host} |");
        }
    };
    print("topdeck probe", &(ours_ns, ours_host));
    if probe_only {
        return Ok(());
    }

    // 2. ns per run of the others, stats on.
    let probe = Probe::load_with(h, None, Clock::RunQueue)?;
    ping_pong(Duration::from_millis(200))?;
    let ours_rq_ns = ns_per_run(|| Ok(probe.program_stats()?), d)?;
    drop(probe);
    let r = RingBuf::start(h.cpu_v1)?;
    let rb_ns = ns_per_run(|| r.stats(), d)?;
    let _ = r.stop();
    let f = Floor::start(true)?;
    let floor_ns = ns_per_run(|| f.stats(), d)?;
    drop(f);
    let runqlat_ns = match RunqLat::start() {
        Some(rq) => Some(ns_per_run(|| rq.stats(), d)?),
        None => None,
    };
    print("empty (floor)", &floor_ns);
    print("topdeck probe, run-queue clock", &ours_rq_ns);
    print("per-event ring buffer", &rb_ns);
    match &runqlat_ns {
        Some(v) => print("bcc libbpf-tools runqlat", v),
        None => println!("| bcc libbpf-tools runqlat | (not installed) | | | |"),
    }
    println!();

    // 3. The agent's user-space CPU with 1 s reads, during the ping-pong.
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let agent_dir = tempfile::tempdir()?;
    let dir = agent_dir.path().to_path_buf();
    let agent = std::thread::spawn(move || -> Result<(f64, u64)> {
        let mut agent = Agent::start(AgentConfig {
            dir: Some(dir),
            cost_every: None,
            // No pin: a running agent owns the default one.
            thread_waits: None,
            ..AgentConfig::default()
        })?;
        let cpu0 = thread_cpu_ns();
        let t0 = Instant::now();
        let mut ticks = 0;
        agent.run(&s, |_| ticks += 1)?;
        Ok((
            (thread_cpu_ns() - cpu0) as f64 / t0.elapsed().as_nanos() as f64,
            ticks,
        ))
    });
    std::thread::sleep(Duration::from_millis(500));
    ping_pong(Duration::from_secs(secs.max(5)))?;
    stop.store(true, Ordering::Relaxed);
    let (agent_cpu, ticks) = agent.join().expect("agent thread")?;

    println!("### Other figures\n");
    println!(
        "- per-event reader thread CPU: median {:.1}% of one core; ring-buffer events lost: {rb_lost}",
        median(&rb_reader.iter().map(|x| x * 100.0).collect::<Vec<_>>())
    );
    println!("- agent user-space CPU with 1 s reads during the ping-pong: {:.2}% of one core ({ticks} reads)", agent_cpu * 100.0);
    println!(
        "- topdeck probe samples not counted during the timed runs: {:?} ({:?})",
        drops_during,
        topdeck_sched::maps::DROPS
    );
    Ok(())
}
