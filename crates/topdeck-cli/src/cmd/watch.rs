// SPDX-License-Identifier: Apache-2.0
//! `topdeck watch`: re-read a source each interval (every source of a
//! process, for a pid) and print what happened in it: counters as rates,
//! gauges as values, histograms as a rate and quantiles of the
//! observations made during the interval (the difference of bucket
//! counts between two snapshots, not since start), summaries as a rate
//! and the mean of the interval's observations.
//!
//! Between lines it sleeps on the stop request and on stdout: SIGTERM,
//! SIGINT or SIGHUP, or the reader of its output going away (`| head -1`,
//! a closed terminal), end it at once instead of after the interval.
//!
//! With `--from`, it replays what the flight recorder recorded instead,
//! as fast as it can print: the same lines, each interval between two
//! recorded frames, its rates over the frames' own timestamps, its time
//! the frame's. It follows the sources it chose at the start as a live
//! watch follows those it opened: to the end, or until every writer is
//! gone (a source no longer recorded is gone, as from `ls`).

use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use topdeck::{Change, Liveness, MetricInfo, Snapshot};
use topdeck_history::{format_time, History};
use topdeck_sources::Source;

use crate::recording::{self, When};
use crate::sources::PortholeArgs;
use crate::stop;
use crate::{render, select};

/// Quantiles shown for each interval.
const QUANTILES: [(&str, f64); 2] = [("p50", 0.5), ("p99", 0.99)];

/// One read of every source watched, in the order they were chosen.
struct Read {
    /// Its wall-clock time: now, or the frame's.
    wall: SystemTime,
    /// Since the first read.
    elapsed: Duration,
    snaps: Vec<Snapshot>,
    /// Whether every writer is gone.
    all_dead: bool,
}

/// Where the reads after the first come from: the host, or a recording.
trait Feed {
    /// The next read; `None` when there is none (a stop, the end of the
    /// recording).
    fn next(&mut self) -> Result<Option<Read>>;
}

/// Watches `target` every `interval`, `count` times or until interrupted.
/// Stops early, saying so, when the writer dies; quietly when its output
/// is gone; and on a stop signal, which `main` then dies of.
pub fn run(
    out: &mut impl Write,
    target: &str,
    sources: &PortholeArgs,
    filters: &[String],
    interval: Duration,
    count: Option<u64>,
) -> Result<()> {
    let stop = stop::install().context("cannot handle the stop signals")?;
    // A pid is every source of that process (a JVM's hsperfdata and its
    // topdeck registry); any other target, the one it names.
    let readers = select::open_process(target, sources)?;
    let mut live = Live {
        readers,
        stop,
        interval,
        first: Instant::now(),
        next: Instant::now(),
    };
    let first = live.read()?;
    let until = match count {
        Some(n) => times(n),
        None => "until interrupted".into(),
    };
    let how = format!("every {}, {until}", humantime::format_duration(interval));
    let watched: Vec<Source> = live.readers.iter().map(|r| r.source.clone()).collect();
    live.next = Instant::now();
    follow(out, &mut live, &watched, first, &how, filters, count)
}

/// Replays `target` as the store at `dir` recorded it from `from` to `to`
/// (the end of the recording if `None`), a frame at least `step` after
/// the last one shown (every frame if `None`), `count` times at most.
#[allow(clippy::too_many_arguments)]
pub fn replay(
    out: &mut impl Write,
    target: &str,
    filters: &[String],
    from: &When,
    to: Option<&When>,
    step: Option<Duration>,
    count: Option<u64>,
    dir: &Path,
) -> Result<()> {
    let to_ns = to.map_or(u64::MAX, |t| t.unix_ns);
    if to_ns < from.unix_ns {
        bail!(
            "--to {} is before --from {}",
            to.map(When::said).unwrap_or_default(),
            from.said()
        );
    }
    let history = History::open(dir)?;
    // The first read is the frame at or before `from`, as a live watch
    // reads first at its start: the first interval is the one `from`
    // falls in.
    let start = history
        .at(from.unix_ns, &|_| false)?
        .map_or(from.unix_ns, |m| m.unix_ns);
    let span = match to {
        Some(to) => format!("from {} to {}", from.said(), to.said()),
        None => format!("from {} on", from.said()),
    };
    let named = select::naming(target);
    let mut frames = history.replay(start, to_ns, &named);
    let mut first_ns = None;
    let (at, chosen) = loop {
        let Some(moment) = frames.next() else {
            return Err(match first_ns {
                None => recording::nothing_recorded(&history, dir, &span),
                Some(ns) => recording::not_recorded(&history, target, &span, ns),
            });
        };
        let moment = moment?;
        first_ns.get_or_insert(moment.unix_ns);
        if let Some(damage) = &moment.damage {
            select::warn(damage);
        }
        // The first frame the target is in: it may have started later.
        let chosen = select::choose(target, moment.sources, true, |(s, _)| s);
        if !chosen.is_empty() {
            break (moment.unix_ns, chosen);
        }
    };
    let (watched, snaps): (Vec<Source>, Vec<Snapshot>) = chosen.into_iter().unzip();
    let first = Read {
        wall: UNIX_EPOCH + Duration::from_nanos(at),
        elapsed: Duration::ZERO,
        snaps: snaps.clone(),
        all_dead: watched.iter().all(|s| s.liveness == Liveness::Dead),
    };
    let end = match to {
        Some(to) => format_time(to.unix_ns),
        None => "the end of the recording".into(),
    };
    let mut how = format!("as recorded from {} to {end}, ", format_time(at));
    how += &match step {
        Some(d) => format!("every {} or more", humantime::format_duration(d)),
        None => "every frame".into(),
    };
    if let Some(n) = count {
        how += &format!(", {} at most", times(n));
    }
    let mut recorded = Recorded {
        frames,
        alive: watched
            .iter()
            .map(|s| s.liveness == Liveness::Alive)
            .collect(),
        watched: watched.clone(),
        latest: snaps,
        first_ns: at,
        shown_ns: at,
        step_ns: step.map_or(1, |d| (d.as_nanos() as u64).max(1)),
    };
    follow(out, &mut recorded, &watched, first, &how, filters, count)
}

/// `1 time`, `3 times`.
fn times(n: u64) -> String {
    format!("{n} time{}", if n == 1 { "" } else { "s" })
}

/// Prints a line naming what is watched and `how`, then what happened
/// in each interval between the reads `feed` gives, `count` times at
/// most; stops early, saying so, when every writer is gone.
fn follow(
    out: &mut impl Write,
    feed: &mut impl Feed,
    watched: &[Source],
    first: Read,
    how: &str,
    filters: &[String],
    count: Option<u64>,
) -> Result<()> {
    let styled = io::stdout().is_terminal();
    let wanted = |m: &MetricInfo| {
        filters.is_empty() || filters.iter().any(|f| m.name.starts_with(f.as_str()))
    };
    if !filters.is_empty()
        && !first
            .snaps
            .iter()
            .flat_map(|s| s.iter())
            .any(|(m, _)| wanted(m))
    {
        select::warn(format!(
            "no metric of {} starts with {}; watching in case one is registered",
            watched[0].path.display(),
            filters.join(" or ")
        ));
    }
    let names: Vec<String> = watched.iter().map(source_name).collect();
    writeln!(
        out,
        "watching {} (pid {}), {}, {how}",
        watched[0].process,
        watched[0].pid.map_or_else(|| "-".into(), |p| p.to_string()),
        names.join(" + "),
    )?;
    if first.all_dead {
        writeln!(
            out,
            "state: dead (the writer is gone; its values no longer change; `topdeck show` prints them)"
        )?;
        return Ok(());
    }
    let mut prev = first;
    let mut n = 0u64;
    while count.is_none_or(|c| n < c) {
        let Some(now) = feed.next()? else {
            break;
        };
        n += 1;
        let secs = now.elapsed.saturating_sub(prev.elapsed).as_secs_f64();
        // The wall-clock time, to line the interval up with logs and
        // dashboards, and the time since the watch began.
        let head = format!(
            "--- {} +{:.1}s",
            humantime::format_rfc3339_seconds(now.wall),
            now.elapsed.as_secs_f64()
        );
        writeln!(out, "{}", render::bold(&head, styled))?;
        for ((before, snap), name) in prev.snaps.iter().zip(&now.snaps).zip(&names) {
            if watched.len() > 1 {
                writeln!(out, "  {name}")?;
            }
            let rows: Vec<Vec<String>> = interval_rows(before, snap, secs, &wanted);
            for line in render::table(&rows) {
                writeln!(out, "  {line}")?;
            }
        }
        out.flush()?;
        if now.all_dead {
            writeln!(out, "state: dead (the writer is gone); stopping")?;
            break;
        }
        prev = now;
    }
    Ok(())
}

/// The sources on the host, read every interval.
struct Live {
    readers: Vec<select::Target>,
    stop: stop::Stop,
    interval: Duration,
    /// The first read.
    first: Instant,
    /// When the next read is due.
    next: Instant,
}

impl Live {
    fn read(&mut self) -> Result<Read> {
        let snaps = self
            .readers
            .iter_mut()
            .map(select::Target::snapshot)
            .collect::<Result<Vec<Snapshot>>>()?;
        Ok(Read {
            wall: SystemTime::now(),
            elapsed: self.first.elapsed(),
            snaps,
            all_dead: self
                .readers
                .iter()
                .all(|r| r.source.liveness == Liveness::Dead),
        })
    }
}

impl Feed for Live {
    fn next(&mut self) -> Result<Option<Read>> {
        // Nobody left to read ends it too: the next line would only fail.
        if !self
            .stop
            .tick(&mut self.next, self.interval, Some(io::stdout().as_fd()))
        {
            return Ok(None);
        }
        self.read().map(Some)
    }
}

/// The sources chosen, in the frames of a recording.
struct Recorded<'f> {
    frames: topdeck_history::Replay<'f>,
    watched: Vec<Source>,
    /// Each one's latest snapshot, and whether its writer was alive.
    latest: Vec<Snapshot>,
    alive: Vec<bool>,
    /// The first frame's time, and the last shown's.
    first_ns: u64,
    shown_ns: u64,
    /// The least time between two frames shown.
    step_ns: u64,
}

impl Recorded<'_> {
    /// Takes the watched sources' snapshots from a frame. One the frame
    /// lacks is gone: its last values stay (as a live watch's mapping of
    /// a removed file keeps them), and its writer is dead.
    fn take(&mut self, sources: Vec<(Source, Snapshot)>) {
        let mut seen = vec![false; self.watched.len()];
        for (source, snap) in sources {
            if let Some(i) = self.watched.iter().position(|w| same_writer(w, &source)) {
                self.latest[i] = snap;
                self.alive[i] = source.liveness == Liveness::Alive;
                seen[i] = true;
            }
        }
        for (alive, seen) in self.alive.iter_mut().zip(seen) {
            *alive &= seen;
        }
    }
}

impl Feed for Recorded<'_> {
    fn next(&mut self) -> Result<Option<Read>> {
        while let Some(moment) = self.frames.next() {
            let moment = moment?;
            if let Some(damage) = &moment.damage {
                select::warn(damage);
            }
            self.take(moment.sources);
            let all_dead = !self.alive.contains(&true);
            let since = moment.unix_ns.saturating_sub(self.shown_ns);
            // The frame where the last writer is gone is shown, due or
            // not: there is nothing after it.
            if since >= self.step_ns || (all_dead && since > 0) {
                self.shown_ns = moment.unix_ns;
                return Ok(Some(Read {
                    wall: UNIX_EPOCH + Duration::from_nanos(moment.unix_ns),
                    elapsed: Duration::from_nanos(moment.unix_ns - self.first_ns),
                    snaps: self.latest.clone(),
                    all_dead,
                }));
            }
        }
        Ok(None)
    }
}

/// Whether two sources are the same writer's same file: a file's path,
/// and who made it when.
fn same_writer(a: &Source, b: &Source) -> bool {
    (a.kind, &a.path, a.pid, a.start_ticks, a.created_unix_ns)
        == (b.kind, &b.path, b.pid, b.start_ticks, b.created_unix_ns)
}

/// `registry <name>`, or the kind of another runtime's source.
fn source_name(s: &topdeck_sources::Source) -> String {
    match s.registry {
        Some(_) => format!("registry {}", s.registry_or_kind()),
        None => format!("source {}", s.registry_or_kind()),
    }
}

/// One `[series, what happened]` row per wanted metric of `now`.
fn interval_rows(
    before: &Snapshot,
    now: &Snapshot,
    secs: f64,
    wanted: &dyn Fn(&MetricInfo) -> bool,
) -> Vec<Vec<String>> {
    now.since(before)
        .iter()
        .filter(|s| wanted(s.info))
        .map(|s| {
            vec![
                render::series(s.info),
                interval_text(s.info, &s.change(), secs),
            ]
        })
        .collect()
}

/// What one metric did over an interval of `secs`.
fn interval_text(m: &MetricInfo, change: &Change, secs: f64) -> String {
    match change {
        Change::Counter(d) => format!("{}  +{d}", render::rate(*d as f64 / secs, &m.unit)),
        Change::CounterReset { before, now } => format!("reset: {before} -> {now}"),
        Change::Gauge(g) => render::integer(i128::from(*g), &m.unit),
        Change::GaugeF64(g) => render::value(*g, &m.unit),
        Change::Histogram(d) => format!(
            "{}  +{}  {}",
            render::rate(d.count as f64 / secs, ""),
            d.count,
            render::quantiles(|q| d.quantile(q), &QUANTILES, &m.unit)
        ),
        Change::CounterF64(d) => format!(
            "{}  +{}",
            render::rate(d / secs, &m.unit),
            render::value(*d, &m.unit)
        ),
        Change::CounterF64Reset { before, now } => format!(
            "reset: {} -> {}",
            render::number(*before),
            render::number(*now)
        ),
        Change::Buckets(d) => format!(
            "{}  +{}  {}  mean {}",
            render::rate(d.count / secs, ""),
            render::number(d.count),
            render::quantiles(|q| d.quantile(q), &QUANTILES, &m.unit),
            d.mean().map_or("-".into(), |v| render::value(v, &m.unit))
        ),
        Change::Summary { count, sum } => format!(
            "{}  +{}  mean {}",
            render::rate(count / secs, ""),
            render::number(*count),
            if *count > 0.0 {
                render::value(sum / count, &m.unit)
            } else {
                "-".into()
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck::{HistogramValue, MetricKind};

    fn hist(buckets: Vec<u64>) -> HistogramValue {
        HistogramValue {
            schema: 0,
            zero_threshold: 0.0,
            zero_count: 0,
            min_index: 0,
            count: buckets.iter().sum(),
            buckets,
            sum: 0.0,
            max: Some(1e9),
        }
    }

    fn info(kind: MetricKind, unit: &str) -> MetricInfo {
        MetricInfo {
            kind,
            name: "x".into(),
            labels: vec![],
            help: String::new(),
            unit: unit.into(),
        }
    }

    #[test]
    fn interval_histograms_hold_only_the_new_observations() {
        // Since start, most observations are in bucket 0 ((0.5, 1]); during
        // the interval, all 10 new ones fell in bucket 2 ((2, 4]).
        let m = info(MetricKind::Histogram, "seconds");
        let d = hist(vec![50, 1, 10]).since(&hist(vec![50, 1, 0]));
        let t = interval_text(&m, &Change::Histogram(d), 1.0);
        assert!(t.starts_with("10.0/s  +10  p50 2."), "{t}");
    }

    #[test]
    fn counters_show_rate_and_increase() {
        let m = info(MetricKind::Counter, "");
        let t = interval_text(&m, &Change::Counter(100), 0.5);
        assert_eq!(t, "200.0/s  +100");
        let b = info(MetricKind::Counter, "bytes");
        let t = interval_text(&b, &Change::Counter(2048), 1.0);
        assert_eq!(t, "2.0KiB/s  +2048");
        let reset = Change::CounterReset { before: 5, now: 1 };
        assert_eq!(interval_text(&m, &reset, 1.0), "reset: 5 -> 1");
    }

    #[test]
    fn foreign_values_show_rates_quantiles_and_means() {
        let m = info(MetricKind::Counter, "seconds");
        let t = interval_text(&m, &Change::CounterF64(0.25), 0.5);
        assert_eq!(t, "500ms/s  +250ms");
        let reset = Change::CounterF64Reset {
            before: 9.5,
            now: 0.25,
        };
        assert_eq!(interval_text(&m, &reset, 1.0), "reset: 9.5000 -> 0.2500");
        let h = info(MetricKind::Histogram, "seconds");
        let d = topdeck::BucketsValue {
            buckets: vec![(0.1, 0.0), (0.2, 10.0), (f64::INFINITY, 10.0)],
            count: 10.0,
            sum: 1.5,
        };
        let t = interval_text(&h, &Change::Buckets(d), 2.0);
        assert_eq!(t, "5.00/s  +10  p50 150ms  p99 199ms  mean 150ms");
        let s = Change::Summary {
            count: 4.0,
            sum: 1.0,
        };
        assert_eq!(interval_text(&h, &s, 1.0), "4.00/s  +4  mean 250ms");
        let quiet = Change::Summary {
            count: 0.0,
            sum: 0.0,
        };
        assert_eq!(interval_text(&h, &quiet, 1.0), "0/s  +0  mean -");
    }

    #[test]
    fn a_quiet_histogram_has_no_quantiles() {
        let m = info(MetricKind::Histogram, "seconds");
        let h = hist(vec![3, 0, 0]);
        assert_eq!(
            interval_text(&m, &Change::Histogram(h.since(&h)), 1.0),
            "0/s  +0  p50 -  p99 -"
        );
    }

    /// Reads given in advance.
    struct Given(std::vec::IntoIter<Read>);

    impl Feed for Given {
        fn next(&mut self) -> Result<Option<Read>> {
            Ok(self.0.next())
        }
    }

    /// `2026-11-29T05:12:00Z` and `secs` after it.
    fn at(secs: f64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_795_929_120) + Duration::from_secs_f64(secs)
    }

    #[test]
    fn each_interval_is_stamped_with_its_read_and_its_rates_are_over_the_reads_own_times() {
        let dir = tempfile::tempdir().unwrap();
        let registry = topdeck::Registry::builder()
            .dir(dir.path())
            .name("main")
            .build()
            .unwrap();
        let jobs = registry.counter("jobs_total", &[], "", "").unwrap();
        let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
        let mut snaps = Vec::new();
        for add in [0, 10, 30] {
            jobs.add(add);
            snaps.push(reader.snapshot().unwrap());
        }
        let read = |secs: f64, snap: &Snapshot, all_dead| Read {
            wall: at(secs),
            elapsed: Duration::from_secs_f64(secs),
            snaps: vec![snap.clone()],
            all_dead,
        };
        let mut feed =
            Given(vec![read(2.0, &snaps[1], false), read(2.5, &snaps[2], true)].into_iter());
        let mut source = Source::new(topdeck_sources::Kind::Topdeck, registry.path(), "billing");
        (source.pid, source.registry) = (Some(1), Some("main".into()));
        let mut out = Vec::new();
        let first = read(0.0, &snaps[0], false);
        follow(&mut out, &mut feed, &[source], first, "HOW", &[], None).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "watching billing (pid 1), registry main, HOW\n\
             --- 2026-11-29T05:12:02Z +2.0s\n  jobs_total  5.00/s  +10\n\
             --- 2026-11-29T05:12:02Z +2.5s\n  jobs_total  60.0/s  +30\n\
             state: dead (the writer is gone); stopping\n"
        );
    }

    #[test]
    fn a_replay_follows_its_source_until_the_frames_lack_it() {
        let (dir, store) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let registry = topdeck::Registry::builder()
            .dir(dir.path())
            .name("main")
            .build()
            .unwrap();
        let jobs = registry.counter("jobs_total", &[], "", "").unwrap();
        let reader = topdeck::RegistryReader::open(registry.path()).unwrap();
        let (source, mut tracked) = topdeck_sources::Tracked::<()>::of_reader(reader);
        let mut recorder =
            topdeck_history::Recorder::open(store.path(), topdeck_history::Options::default())
                .unwrap();
        let t0 = 1_795_929_120_000_000_000u64;
        // Frames 1 s apart, 10 more jobs each; the 5th lacks the source.
        for k in 0..5u64 {
            jobs.add(10);
            let snap = tracked.snapshot().unwrap();
            let recorded = (k < 4).then_some((&source, snap));
            recorder.record(t0 + k * 1_000_000_000, recorded).unwrap();
        }
        let replayed = |step: Option<Duration>, count: Option<u64>| {
            let from = When {
                text: "then".into(),
                unix_ns: t0 + 500_000_000,
            };
            let mut out = Vec::new();
            replay(
                &mut out,
                "main",
                &[],
                &from,
                None,
                step,
                count,
                store.path(),
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        };
        let all = replayed(None, None);
        let heads: Vec<&str> = all.lines().filter(|l| l.starts_with("---")).collect();
        assert_eq!(
            heads,
            [
                "--- 2026-11-29T05:12:01Z +1.0s",
                "--- 2026-11-29T05:12:02Z +2.0s",
                "--- 2026-11-29T05:12:03Z +3.0s",
                "--- 2026-11-29T05:12:04Z +4.0s",
            ],
            "{all}"
        );
        assert!(all.contains("as recorded from "), "{all}");
        assert_eq!(all.matches("jobs_total  10.0/s  +10").count(), 3, "{all}");
        // Gone: its last values stay, and its writer with them.
        assert!(
            all.ends_with("jobs_total  0/s  +0\nstate: dead (the writer is gone); stopping\n"),
            "{all}"
        );
        // Every other frame; the last shown at its own time, though gone.
        let spaced = replayed(Some(Duration::from_millis(1500)), None);
        assert!(
            spaced.contains("+2.0s\n  jobs_total  10.0/s  +20\n"),
            "{spaced}"
        );
        assert!(
            spaced.contains("+4.0s\n  jobs_total  5.00/s  +10\n"),
            "{spaced}"
        );
        assert_eq!(spaced.matches("\n---").count(), 2, "{spaced}");
        assert_eq!(replayed(None, Some(2)).matches("\n---").count(), 2);
    }
}
