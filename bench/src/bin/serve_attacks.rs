// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve` under attack: how long a well-behaved scrape takes while
//! hostile clients on the same machine do their worst, and what the server
//! holds meanwhile (resident memory, threads, descriptors, CPU).
//!
//! For each attack a fresh `topdeck serve` reads a namespace of REGISTRIES
//! registries of 1,000 metrics each (written by this process); the attack
//! runs for one second to reach its steady state, then for SECONDS more
//! while a scraper opens a new connection and scrapes every 50 ms (the
//! harshest way for a connection attack: Prometheus would keep its
//! connection). The integration tests (crates/topdeck-cli/tests/integration/
//! serve.rs) assert the same attacks fail; this measures how fast the
//! endpoint still is under them.
//!
//! ```sh
//! serve_attacks [--topdeck PATH] [--seconds N] [--registries N] [--only TEXT]
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How often the well-behaved scraper scrapes.
const SCRAPE_EVERY: Duration = Duration::from_millis(50);
/// How long one scrape may take before it counts as failed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(20);
/// The latency the endpoint is held to under attack.
const TARGET: Duration = Duration::from_millis(100);
const REQUEST: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    None,
    /// Up to 1,000 connections that send a request line and wait,
    /// reopened as the server closes them, against a server limited to 64
    /// descriptors. (Connections that send nothing at all are held by the
    /// kernel: `serve` sets TCP_DEFER_ACCEPT.)
    IdleConnections,
    /// Two clients looping: connect, send `GET /metrics HTTP/2.0`, close.
    Http2Flood,
    /// Eight connections that pipeline requests and never read.
    NotReading,
    /// Two clients streaming 100 MB header lines.
    HugeHeaders,
    /// 500 connections sending their request head a byte a second.
    SlowHeads,
}

impl Attack {
    const ALL: [Attack; 6] = [
        Attack::None,
        Attack::IdleConnections,
        Attack::Http2Flood,
        Attack::NotReading,
        Attack::HugeHeaders,
        Attack::SlowHeads,
    ];

    fn name(self) -> &'static str {
        match self {
            Attack::None => "none",
            Attack::IdleConnections => {
                "1,000 idle connections after a request line, server at 64 fds"
            }
            Attack::Http2Flood => "HTTP/2.0 request lines, 2 looping clients",
            Attack::NotReading => "8 pipelining clients that never read",
            Attack::HugeHeaders => "100 MB headers, 2 looping clients",
            Attack::SlowHeads => "500 slow request heads (1 byte/s)",
        }
    }

    /// The server's descriptor limit (soft and hard), if lowered.
    fn files(self) -> Option<u64> {
        (self == Attack::IdleConnections).then_some(64)
    }
}

struct Args {
    topdeck: PathBuf,
    seconds: u64,
    registries: usize,
    /// Only the attacks whose name contains this.
    only: Option<String>,
}

const USAGE: topdeck_bench::Usage = topdeck_bench::Usage::new(
    "serve_attacks",
    "[--topdeck PATH] [--seconds N] [--registries N] [--only TEXT]
  --topdeck PATH:   the topdeck to serve (target/release/topdeck)
  --seconds N:      seconds of scraping per attack (10)
  --registries N:   registries of 1,000 metrics in the namespace (10)
  --only TEXT:      only the attacks whose name contains TEXT",
);

fn args() -> Args {
    let mut a = Args {
        topdeck: PathBuf::from("target/release/topdeck"),
        seconds: 10,
        registries: 10,
        only: None,
    };
    let mut it = USAGE.args().into_iter();
    while let Some(flag) = it.next() {
        let value = it.next();
        match flag.as_str() {
            "--topdeck" => a.topdeck = USAGE.parse::<PathBuf>(&flag, value.as_deref()),
            "--seconds" => a.seconds = USAGE.parse(&flag, value.as_deref()),
            "--registries" => a.registries = USAGE.parse(&flag, value.as_deref()),
            "--only" => a.only = Some(USAGE.parse(&flag, value.as_deref())),
            _ => USAGE.fail(format_args!("unknown argument {flag:?}")),
        }
    }
    a
}

fn main() -> Result<()> {
    let args = args();
    let dir = topdeck_bench::namespace();
    let _registries: Vec<_> = (0..args.registries)
        .map(|n| service(&dir, n))
        .collect::<Result<_>>()?;
    println!(
        "{} registries of 1,000 metrics; {} s of each attack after 1 s of warm-up; a scrape on a new connection every {} ms",
        args.registries,
        args.seconds,
        SCRAPE_EVERY.as_millis()
    );
    println!();
    println!("| attack | scrapes ok | median | p99 | max | within {} ms | server RSS max | threads max | fds max | server CPU | attacker's work |", TARGET.as_millis());
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for attack in Attack::ALL {
        if args
            .only
            .as_ref()
            .is_some_and(|o| !attack.name().contains(o.as_str()))
        {
            continue;
        }
        let r = run(&args, &dir, attack)?;
        println!("{r}");
    }
    Ok(())
}

/// One registry of 1,000 metrics: 900 counters, 90 gauges, 10 histograms.
fn service(dir: &tempfile::TempDir, n: usize) -> Result<topdeck::Registry> {
    let registry = topdeck::Registry::builder()
        .dir(dir.path())
        .name(format!("svc{n}"))
        .build()?;
    let lat = topdeck_bench::latencies();
    for i in 0..900 {
        registry
            .counter(&format!("app_events_{i}_total"), &[], "Events.", "")?
            .add(i as u64);
    }
    for i in 0..90 {
        registry
            .gauge(&format!("app_level_{i}"), &[], "A level.", "")?
            .set(i);
    }
    for i in 0..10 {
        let h = registry.histogram(&format!("app_latency_{i}_seconds"), &[], "Time.", "seconds")?;
        lat.iter().skip(i).step_by(4).for_each(|v| h.record(*v));
    }
    Ok(registry)
}

/// A `topdeck serve`, killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &Args, dir: &tempfile::TempDir, files: Option<u64>) -> Result<Server> {
    let mut cmd = Command::new(&args.topdeck);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env("TOPDECK_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(n) = files {
        // SAFETY: setrlimit is async-signal-safe and touches nothing else.
        unsafe {
            cmd.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            })
        };
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("start {}", args.topdeck.display()))?;
    let mut line = Vec::new();
    let mut out = child.stdout.take().context("stdout")?;
    let mut b = [0u8];
    while out.read(&mut b)? == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8(line)?;
    let addr = line
        .strip_prefix("listening on http://")
        .and_then(|s| s.strip_suffix("/metrics"))
        .with_context(|| format!("unexpected first line {line:?}"))?
        .parse()?;
    Ok(Server { child, addr })
}

/// One scrape on a new connection; the body's length.
fn scrape(addr: SocketAddr) -> Result<usize> {
    let mut s = TcpStream::connect_timeout(&addr, SCRAPE_TIMEOUT)?;
    s.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
    let mut response = Vec::with_capacity(4 << 20);
    s.read_to_end(&mut response)?;
    if !response.starts_with(b"HTTP/1.1 200 ") {
        bail!(
            "{:?}",
            String::from_utf8_lossy(&response[..response.len().min(40)])
        );
    }
    let head = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of head")?;
    Ok(response.len() - head - 4)
}

/// What the server holds, read from /proc.
#[derive(Default, Clone, Copy)]
struct Usage {
    rss_kb: u64,
    threads: u64,
    fds: u64,
}

fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Usage {
        rss_kb: field("VmRSS"),
        threads: field("Threads"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64),
    }
}

/// The server's CPU time so far (user + system).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name in parentheses: fields 14 and 15 are utime, stime.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_micros(ticks * 1_000_000 / tick)
}

/// One attack's row.
struct Row {
    attack: Attack,
    ok: usize,
    total: usize,
    latencies: Vec<Duration>,
    max: Usage,
    cpu_share: f64,
    work: String,
    /// The first failed scrape's error.
    error: Option<String>,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.latencies;
        let q = |p: f64| {
            l.get(((l.len() as f64 * p).ceil() as usize).saturating_sub(1))
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
        };
        let within = l.iter().filter(|d| **d <= TARGET).count();
        write!(
            f,
            "| {} | {}/{}{} | {:.1} ms | {:.1} ms | {:.1} ms | {}/{} | {:.1} MB | {} | {} | {:.0}% | {} |",
            self.attack.name(),
            self.ok,
            self.total,
            self.error
                .as_ref()
                .map_or(String::new(), |e| format!(" (first failure: {e})")),
            q(0.5),
            q(0.99),
            q(1.0),
            within,
            self.total,
            self.max.rss_kb as f64 / 1024.0,
            self.max.threads,
            self.max.fds,
            self.cpu_share * 100.0,
            self.work
        )
    }
}

fn run(args: &Args, dir: &tempfile::TempDir, attack: Attack) -> Result<Row> {
    let mut server = start(args, dir, attack.files())?;
    let pid = server.child.id();
    let addr = server.addr;
    scrape(addr).context("a scrape before the attack")?;
    let stop = Arc::new(AtomicBool::new(false));
    let work = Arc::new(AtomicU64::new(0));
    let attackers = launch(attack, addr, &stop, &work);
    std::thread::sleep(Duration::from_secs(1));

    let sampling = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = sampling.clone();
        std::thread::spawn(move || {
            let mut max = Usage::default();
            while !done.load(Ordering::Relaxed) {
                let u = usage(pid);
                max.rss_kb = max.rss_kb.max(u.rss_kb);
                max.threads = max.threads.max(u.threads);
                max.fds = max.fds.max(u.fds);
                std::thread::sleep(Duration::from_millis(100));
            }
            max
        })
    };
    let (cpu0, t0) = (cpu(pid), Instant::now());
    let end = t0 + Duration::from_secs(args.seconds);
    let (mut ok, mut total, mut latencies, mut error) = (0, 0, Vec::new(), None);
    let mut next = Instant::now();
    while Instant::now() < end {
        let start = Instant::now();
        let r = scrape(addr);
        let took = start.elapsed();
        total += 1;
        match r {
            Ok(_) => ok += 1,
            Err(e) => {
                error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
        latencies.push(took);
        next += SCRAPE_EVERY;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let cpu_share = (cpu(pid) - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    sampling.store(true, Ordering::Relaxed);
    let max = sampler.join().expect("the sampler");
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        let _ = a.join();
    }
    latencies.sort();
    let n = work.load(Ordering::Relaxed);
    let work = match attack {
        Attack::None => String::new(),
        Attack::IdleConnections | Attack::SlowHeads => format!("{n} connections opened"),
        Attack::Http2Flood => format!("{n} requests sent"),
        Attack::NotReading => format!("{:.0} MB of pipelined requests written", n as f64 / 1e6),
        Attack::HugeHeaders => format!("{n} connections refused"),
    };
    if let Ok(Some(status)) = server.child.try_wait() {
        bail!("topdeck serve exited during {}: {status}", attack.name());
    }
    Ok(Row {
        attack,
        ok,
        total,
        latencies,
        max,
        cpu_share,
        work,
        error,
    })
}

fn launch(
    attack: Attack,
    addr: SocketAddr,
    stop: &Arc<AtomicBool>,
    work: &Arc<AtomicU64>,
) -> Vec<JoinHandle<()>> {
    let spawn = |n: usize, f: fn(SocketAddr, &AtomicBool, &AtomicU64)| {
        (0..n)
            .map(|_| {
                let (stop, work) = (stop.clone(), work.clone());
                std::thread::spawn(move || f(addr, &stop, &work))
            })
            .collect()
    };
    match attack {
        Attack::None => Vec::new(),
        Attack::IdleConnections => spawn(1, idle),
        Attack::Http2Flood => spawn(2, http2),
        Attack::NotReading => spawn(8, not_reading),
        Attack::HugeHeaders => spawn(2, huge_header),
        Attack::SlowHeads => spawn(1, slow_heads),
    }
}

/// Whether the server has closed `s` (without reading anything from it).
fn closed(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    let _ = s.set_nonblocking(true);
    let r = s.peek(&mut b);
    let _ = s.set_nonblocking(false);
    match r {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

fn idle(addr: SocketAddr, stop: &AtomicBool, work: &AtomicU64) {
    let mut open: Vec<TcpStream> = Vec::new();
    let mut checked = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if open.len() < 1000 {
            if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                if s.write_all(b"GET /metrics HTTP/1.1\r\n").is_ok() {
                    open.push(s);
                    work.fetch_add(1, Ordering::Relaxed);
                }
            }
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
        if checked.elapsed() > Duration::from_millis(200) {
            open.retain(|s| !closed(s));
            checked = Instant::now();
        }
    }
}

fn http2(addr: SocketAddr, stop: &AtomicBool, work: &AtomicU64) {
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut s) = TcpStream::connect(addr) {
            let _ = s.write_all(b"GET /metrics HTTP/2.0\r\n\r\n");
            work.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn not_reading(addr: SocketAddr, stop: &AtomicBool, work: &AtomicU64) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(addr) else {
            continue;
        };
        let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
        // Pipelined until the server stops reading, then held until it
        // gives up on this connection.
        while !stop.load(Ordering::Relaxed) {
            match s.write(REQUEST) {
                Ok(n) => {
                    work.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break,
            }
        }
    }
}

fn huge_header(addr: SocketAddr, stop: &AtomicBool, work: &AtomicU64) {
    let chunk = vec![b'a'; 64 << 10];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(addr) else {
            continue;
        };
        let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
        if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nX-Big: ")
            .is_err()
        {
            continue;
        }
        let mut sent = 0;
        let mut refused = false;
        while sent < 100 << 20 && !stop.load(Ordering::Relaxed) {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => {
                    refused = true;
                    break;
                }
            }
        }
        // Most of the bytes written only ever reached the kernel's
        // buffers: connections are the measure.
        if refused {
            work.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn slow_heads(addr: SocketAddr, stop: &AtomicBool, work: &AtomicU64) {
    let mut open: Vec<TcpStream> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let round = Instant::now();
        while open.len() < 500 && round.elapsed() < Duration::from_millis(500) {
            if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                let _ = s.set_write_timeout(Some(Duration::from_millis(10)));
                if s.write_all(b"GET /metrics HTTP/1.1\r\n").is_ok() {
                    open.push(s);
                    work.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // One more byte of header on each, every second.
        open.retain_mut(|s| s.write_all(b"X").is_ok() && !closed(s));
        if let Some(rest) = Duration::from_secs(1).checked_sub(round.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}
