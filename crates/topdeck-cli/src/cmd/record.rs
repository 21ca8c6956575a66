// SPDX-License-Identifier: Apache-2.0
//! `topdeck record`: the flight recorder. Every interval, every source the
//! views see (registries, portholes, the agent's registry and its
//! verdicts) is read as `ls` and `show` read it and appended to a store
//! (`topdeck-history`), so that `show --at`, `watch --from`, `top --at`
//! and `sched --at` can go back to any moment it kept.
//!
//! An observer like the others: it reads without writing what it reads,
//! takes no lock on anyone's file, and costs no writer anything. Its own
//! cost is published in its own registry, `topdeck-record`:
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `topdeck_record_frames_total` | counter | frames written, one per interval |
//! | `topdeck_record_lost_frames_total` | counter | frames not written (a full disk, a failed write) |
//! | `topdeck_record_bytes_total` | counter | bytes appended to the store |
//! | `topdeck_record_samples_total` | counter | series values recorded |
//! | `topdeck_record_sources` | gauge | sources in the last frame |
//! | `topdeck_record_cpu_seconds` | gauge | CPU the recorder used so far (user + system) |
//! | `topdeck_record_frame_seconds` | histogram | time to read every source and write a frame |
//!
//! SIGTERM, SIGINT and SIGHUP end it between two frames.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use topdeck::{Registry, Snapshot};
use topdeck_history::{Options, Recorder};
use topdeck_sources::{Source, Tracker};

use crate::sources::PortholeArgs;

/// Arguments of `topdeck record`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store (default: /var/lib/topdeck/history for root, else
    /// $XDG_STATE_HOME/topdeck/history).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Time between frames, e.g. `1s` (10ms to 1 day).
    #[arg(long, default_value = "1s", value_parser = crate::parse_interval)]
    pub interval: Duration,
    /// Keep this long, e.g. `7d` or `12h`; older segments are removed.
    #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
    pub retain: Duration,
    /// Keep at most this many bytes, e.g. `2GiB` or `500MB`; beyond, the
    /// oldest segments are removed.
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    pub max_size: u64,
    /// How often to look for new sources with a walk of /proc (the costly
    /// part of a look); the frames between re-read the sources found last,
    /// and look again only when a registry directory or a JVM's hsperfdata
    /// directory changed (a few stat calls). A prometheus_client directory
    /// or a container that appears is recorded from the next look on.
    #[arg(long, default_value = "10s", value_parser = crate::parse_interval)]
    pub rescan: Duration,
    /// Record every user's registries and portholes, containers' included
    /// (root only). Without it, your own.
    #[arg(long)]
    pub all_users: bool,
    #[command(flatten)]
    pub sources: PortholeArgs,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let n = parse_size::parse_size(s).map_err(|e| format!("{e} (try `2GiB` or `500MB`)"))?;
    if n < 1 << 20 {
        return Err("the store needs at least 1MiB".into());
    }
    Ok(n)
}

/// Where the store is: `--dir`, else the default for this user.
pub fn store(dir: &Option<PathBuf>) -> PathBuf {
    dir.clone().unwrap_or_else(topdeck_history::default_dir)
}

/// Records until SIGTERM, SIGINT or SIGHUP.
pub fn run(out: &mut impl Write, args: &Args) -> Result<()> {
    let namespace = crate::sources::namespace(args.all_users, "record")?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let owner = (!args.all_users).then(|| unsafe { libc::geteuid() });
    let dirs = namespace.describe();
    let mut tracker = Tracker::<()>::new(namespace, args.sources.portholes_of(owner));
    let dir = store(&args.dir);
    let mut recorder = Recorder::open(&dir, Options::sized(args.retain, args.max_size))?;
    let own = Own::new().context("cannot publish the recorder's own registry")?;
    let stop = crate::stop::install().context("cannot handle the stop signals")?;
    writeln!(
        out,
        "topdeck record: reading {dirs}; recording every {} into {} (keeping {}, at most {})",
        humantime::format_duration(args.interval),
        dir.display(),
        humantime::format_duration(args.retain),
        crate::render::value(args.max_size as f64, "bytes")
    )?;
    out.flush()?;
    let mut problem: Option<String> = None;
    let mut next = Instant::now();
    let mut found: Vec<Source> = Vec::new();
    // When the last look was, and the directories it watches since.
    let mut looked: Option<(Instant, Vec<Stamp>)> = None;
    // What a look could not read, said once while it lasts, as serve says it.
    let mut skips = crate::sources::SkipLog::new("record");
    loop {
        let started = Instant::now();
        let due = looked.as_ref().is_none_or(|(at, watched)| {
            started.duration_since(*at) >= args.rescan || changed(watched)
        });
        if due {
            let watched = watched_dirs();
            let look = tracker.look();
            let skipped: Vec<topdeck_export::Skipped> = look
                .errors
                .iter()
                .map(|e| topdeck_export::Skipped {
                    reason: topdeck_export::reason(e.kind()),
                    message: e.to_string(),
                })
                .collect();
            skips.log(&skipped);
            found = look.sources;
            looked = Some((started, watched));
        }
        let (sources, snaps): (Vec<Source>, Vec<Snapshot>) =
            read_all(&mut tracker, &mut found).into_iter().unzip();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        match recorder.record(now, sources.iter().zip(snaps)) {
            Ok(_) => {
                if let Some(was) = problem.take() {
                    eprintln!("topdeck record: recording again (after: {was})");
                }
            }
            // Said once per episode; the next interval tries again.
            Err(e) => {
                let said = e.to_string();
                if problem.is_none() {
                    eprintln!("topdeck record: not recording: {said}");
                }
                problem = Some(said);
            }
        }
        own.update(&recorder, sources.len(), started.elapsed());
        if !stop.tick(&mut next, args.interval, None) {
            break;
        }
    }
    let s = recorder.stats();
    eprintln!(
        "topdeck record: stopped after {} frames ({} bytes, {} lost)",
        s.frames, s.bytes, s.lost_frames
    );
    Ok(())
}

/// A directory where new sources appear as files, and when it last changed.
type Stamp = (PathBuf, Option<SystemTime>);

fn stamp(dir: PathBuf) -> Stamp {
    let t = std::fs::metadata(&dir).and_then(|m| m.modified()).ok();
    (dir, t)
}

/// Whether a file was made or removed in a watched directory since: a
/// `statx` each, where a look walks all of `/proc`.
fn changed(watched: &[Stamp]) -> bool {
    watched.iter().any(|(dir, t)| stamp(dir.clone()).1 != *t)
}

/// The directories a new registry or JVM shows up in, with their
/// modification times, listed at a look: `TOPDECK_DIR`, or every
/// `/dev/shm/topdeck-*`, and every `/tmp/hsperfdata_*`. Not `/dev/shm` or
/// `/tmp` themselves, which other programs change all the time: a user's
/// first directory is found by the next look.
fn watched_dirs() -> Vec<Stamp> {
    let matching = |dir: &str, prefix: &str| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .map(|e| e.path())
            .collect()
    };
    let mut dirs = match std::env::var_os(topdeck::dir::ENV_DIR) {
        Some(d) => vec![PathBuf::from(d)],
        None => matching(topdeck::dir::SHM_ROOT, "topdeck-"),
    };
    dirs.extend(matching("/tmp", "hsperfdata_"));
    dirs.into_iter().map(stamp).collect()
}

/// Every source `found`, with its snapshot now; one that cannot be read
/// is gone from this frame on (as from `ls`), until a look finds it again.
fn read_all(tracker: &mut Tracker<()>, found: &mut Vec<Source>) -> Vec<(Source, Snapshot)> {
    let mut read = Vec::with_capacity(found.len());
    found.retain(
        |source| match tracker.open(source).and_then(|t| t.snapshot()) {
            Ok(snap) => {
                read.push((source.clone(), snap));
                true
            }
            Err(_) => {
                tracker.forget(&source.path);
                false
            }
        },
    );
    // One read of /proc/locks for every registry, made after all were
    // opened, as its answers must be.
    let locks = topdeck::LockTable::new();
    for (source, _) in &mut read {
        if let Some(t) = tracker.get(&source.path) {
            source.liveness = t.liveness_in(&locks);
        }
    }
    read
}

/// The recorder's own registry.
struct Own {
    _registry: Registry,
    frames: topdeck::Counter,
    lost: topdeck::Counter,
    bytes: topdeck::Counter,
    samples: topdeck::Counter,
    sources: topdeck::Gauge,
    cpu: topdeck::GaugeF64,
    frame: topdeck::Histogram,
}

impl Own {
    fn new() -> topdeck::Result<Self> {
        let r = Registry::builder().name("topdeck-record").build()?;
        Ok(Self {
            frames: r.counter(
                "topdeck_record_frames_total",
                &[],
                "Frames written, one per interval.",
                "",
            )?,
            lost: r.counter(
                "topdeck_record_lost_frames_total",
                &[],
                "Frames not written: a full disk or a failed write.",
                "",
            )?,
            bytes: r.counter(
                "topdeck_record_bytes_total",
                &[],
                "Bytes appended to the store.",
                "bytes",
            )?,
            samples: r.counter(
                "topdeck_record_samples_total",
                &[],
                "Series values recorded.",
                "",
            )?,
            sources: r.gauge(
                "topdeck_record_sources",
                &[],
                "Sources in the last frame.",
                "",
            )?,
            cpu: r.gauge_f64(
                "topdeck_record_cpu_seconds",
                &[],
                "CPU the recorder used so far, user and system.",
                "seconds",
            )?,
            frame: r.histogram(
                "topdeck_record_frame_seconds",
                &[],
                "Time to read every source and write one frame.",
                "seconds",
            )?,
            _registry: r,
        })
    }

    fn update(&self, recorder: &Recorder, sources: usize, took: Duration) {
        let s = recorder.stats();
        // The recorder's counts only grow: each counter catches up.
        for (c, total) in [
            (&self.frames, s.frames),
            (&self.lost, s.lost_frames),
            (&self.bytes, s.bytes),
            (&self.samples, s.samples),
        ] {
            c.add(total.saturating_sub(c.get()));
        }
        self.sources.set(sources as i64);
        self.cpu.set(own_cpu_seconds());
        self.frame.record(took.as_secs_f64());
    }
}

/// CPU this process used, user and system.
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}
