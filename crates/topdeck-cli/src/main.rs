// SPDX-License-Identifier: Apache-2.0
//! `topdeck`: look at the metrics every process on this host publishes,
//! without disturbing them. Every command is a reader: it maps files
//! read-only and never writes to a writer's memory. This file holds the
//! arguments and the dispatch; each command lives in `cmd/`.

// The doc comments of clap's types are `--help` text, written for a
// terminal, not for rustdoc (brackets and `<command>` mean what they say).
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

mod cmd;
mod policy;
mod recording;
mod render;
mod select;
mod skip_log;
mod sources;
mod stop;
mod top;

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

/// Continuous, non-interfering visibility for Linux hosts.
///
/// Reads the registries in `TOPDECK_DIR` if it is set, else in every
/// `/dev/shm/topdeck-<uid>` directory. Files that cannot be read are
/// reported as warnings on stderr; the rest are still shown.
#[derive(Debug, Parser)]
#[command(name = "topdeck", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every source: topdeck's registries and other runtimes'
    /// portholes (JVMs, prometheus_client directories, Aeron drivers, PCP
    /// MMV files): source, pid, process, metrics, alive or dead, age,
    /// container, file.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        sources: sources::PortholeArgs,
    },
    /// Show every metric of one registry or porthole; histograms as count,
    /// p50, p90, p99, max.
    Show {
        /// A pid; a process, registry or container name, or a kind (`jvm`,
        /// `python`, `aeron`, `mmv`, `topdeck`), whatever the case; a file
        /// name; or the path of a source (a registry file, a JVM's
        /// hsperfdata file, a prometheus_client directory, an Aeron
        /// cnc.dat, a PCP MMV file). A pid shows every source of that
        /// process (its registries, a JVM's hsperfdata, ...), one after
        /// the other; `--json` then prints an array of them. Otherwise,
        /// when several match, a live one is shown first, then topdeck's
        /// registries before other runtimes', then the newest; the others
        /// are named on stderr.
        target: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Show it as the flight recorder (`topdeck record`) recorded it
        /// at TIME: the last frame at or before it, chosen among the
        /// sources recorded then. TIME: `03:12`, `03:12:30`, `yesterday
        /// 03:12`, `2026-11-29 03:12` (local), `-10m`, or RFC 3339. The
        /// JSON then says `recorded_at`.
        #[arg(
            long,
            value_name = "TIME",
            value_parser = recording::parse_when,
            allow_hyphen_values = true,
            conflicts_with_all = ["prommp", "portholes", "no_portholes"]
        )]
        at: Option<recording::When>,
        /// The recorder's store (default: record's, /var/lib/topdeck/history
        /// for root, else $XDG_STATE_HOME/topdeck/history).
        #[arg(long, value_name = "DIR", requires = "at")]
        history: Option<std::path::PathBuf>,
        #[command(flatten)]
        sources: sources::PortholeArgs,
    },
    /// Re-read one source every interval and print what changed: counters
    /// as rates, gauges as values, histograms over the interval. With
    /// --from, replay what the flight recorder recorded instead.
    Watch {
        /// What `show` takes: a pid; a process, registry or container name or
        /// a kind, whatever the case; a file name; or a source's path.
        target: String,
        /// Metric names, or name prefixes, to watch; all when none are given.
        metrics: Vec<String>,
        /// Time between reads, e.g. `1s` or `500ms` (10ms to 1 day;
        /// default 1s). With --from, the least time between two frames
        /// shown (default: every frame recorded).
        #[arg(long, value_parser = parse_interval)]
        interval: Option<Duration>,
        /// Stop after this many intervals (default: until interrupted;
        /// with --from, at --to).
        #[arg(long, value_parser = parse_count)]
        count: Option<u64>,
        /// Replay the intervals the flight recorder (`topdeck record`)
        /// recorded from TIME on, as fast as they print, each stamped with
        /// its frame's time; the first ends at the first frame after TIME.
        /// TIME as `show --at` takes it.
        #[arg(
            long,
            value_name = "TIME",
            value_parser = recording::parse_when,
            allow_hyphen_values = true,
            conflicts_with_all = ["prommp", "portholes", "no_portholes"]
        )]
        from: Option<recording::When>,
        /// With --from: stop at TIME (default: the end of the recording).
        #[arg(
            long,
            value_name = "TIME",
            value_parser = recording::parse_when,
            allow_hyphen_values = true,
            requires = "from"
        )]
        to: Option<recording::When>,
        /// With --from: the recorder's store (default: record's).
        #[arg(long, value_name = "DIR", requires = "from")]
        history: Option<std::path::PathBuf>,
        #[command(flatten)]
        sources: sources::PortholeArgs,
    },
    /// Is it my code, or did my threads wait for a CPU, and behind whom?
    /// Each window, a service's latency histograms beside the CPU its
    /// threads waited for and who held the CPU, with one verdict per
    /// histogram; with --at TIME, the windows from TIME on as `topdeck
    /// record` kept them (its threads' wait not recorded: unknown).
    Explain(cmd::explain::Args),
    /// This host's clock for timers: the source and why, its calibration,
    /// the TSC skew between CPUs, and its reads timed against clock_gettime.
    Clock {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Wait this long first (e.g. `4s`), so the calibration covers a
        /// longer window.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        wait: Duration,
    },
    /// Serve every registry on the host to Prometheus: `GET /metrics` in
    /// the text format, OpenMetrics or protobuf with native histograms, as
    /// the scraper asks; dead and unreadable files are skipped and counted.
    /// A histogram is native, every bucket, to a scraper that asks for
    /// protobuf; to a classic one, at most 33 `le` series, the same at
    /// every scrape (for seconds, the powers of two from 2^-20 s to
    /// 2^11 s and +Inf).
    Serve {
        /// Address to listen on, or `unix:/path/to/socket`. The default is
        /// loopback only; listening on other interfaces shows every
        /// process's metrics to the network, so it must be asked for (e.g.
        /// `0.0.0.0:9464`). Port 0 picks a free port; the address is
        /// printed on the first line of stdout. A Unix socket is made mode
        /// 0600 (0660 with --socket-group), so only this user (and that
        /// group) can connect: unlike loopback, it keeps --all-users from
        /// other local users (scrape it with `curl --unix-socket PATH
        /// http://localhost/metrics`, or a proxy; Prometheus cannot).
        #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR|unix:PATH")]
        listen: cmd::serve::Listen,
        /// The group that may also connect to the --listen unix: socket
        /// (a name or gid; the socket is then mode 0660).
        #[arg(long, value_name = "GROUP", value_parser = parse_group)]
        socket_group: Option<u32>,
        /// Answer only requests that carry `Authorization: Bearer TOKEN`,
        /// TOKEN being this file's contents (surrounding whitespace
        /// ignored); others get 401 before any work is done for them. The
        /// file must not be readable by others. Prometheus sends it with
        /// `authorization: {credentials_file: FILE}` in its scrape config.
        /// With --all-users on a shared host, use this or a Unix socket:
        /// loopback is open to every local user.
        #[arg(long, value_name = "FILE")]
        bearer_token_file: Option<std::path::PathBuf>,
        /// Compress responses for scrapers that accept gzip. Worth it across
        /// a network (text shrinks about 10×); on loopback it costs more CPU
        /// than the scrape itself, so it is off unless asked for.
        #[arg(long)]
        gzip: bool,
        /// Export every user's registries and portholes, containers'
        /// included, each registry's series labelled with its owner's uid
        /// (root only). Without it, serve exports the registries and
        /// portholes of the user it runs as, in its own mount namespace.
        /// Other users' series are then capped (2000 per registry, 5000 and
        /// 4MiB per user, 50000 and 64MiB in all; see --max-*), so one user
        /// cannot flood the fleet's Prometheus; the caller's own are never
        /// capped. What is left out is counted in
        /// topdeck_export_dropped_series_total{reason,owner_uid}. Loopback
        /// is not private: every local user can connect to 127.0.0.1 and
        /// read what --all-users exports; serve it to the fleet's scraper
        /// alone with --bearer-token-file or --listen unix:PATH.
        #[arg(long)]
        all_users: bool,
        /// Connections served at once (default 256, and at most half the
        /// open-file limit).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
        max_connections: Option<u32>,
        #[command(flatten)]
        sources: sources::PortholeArgs,
        #[command(flatten)]
        policy: policy::PolicyArgs,
    },
    /// Push every registry and porthole serve would export to an
    /// OpenTelemetry receiver (OTLP/HTTP protobuf, e.g. a collector) every
    /// interval, or once.
    ///
    /// Where to: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (as is), else
    /// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/metrics appended, else
    /// http://localhost:4318/v1/metrics; headers, timeout and compression
    /// from OTEL_EXPORTER_OTLP_{,METRICS_}{HEADERS,TIMEOUT,COMPRESSION};
    /// the flags override them. Requests the receiver cannot take wait in
    /// a bounded queue and are retried with backoff; what does not fit is
    /// dropped, oldest first, and counted in topdeck_push_dropped_total.
    Push {
        /// Time between batches, e.g. `10s` (10ms to 1 day).
        #[arg(long, default_value = "10s", value_parser = parse_interval)]
        interval: std::time::Duration,
        /// Push one batch and exit; fails if it was not delivered.
        #[arg(long)]
        once: bool,
        /// Requests kept while the receiver is unreachable (a batch is one
        /// request, or one per 4 MiB; at most 64 MiB in all); beyond, the
        /// oldest is dropped.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        queue: u32,
        /// Push every user's registries and portholes, containers'
        /// included (root only). Without it, your own. Other users' series
        /// are capped as serve --all-users caps them (see --max-*); the
        /// caller's own never are.
        #[arg(long)]
        all_users: bool,
        #[command(flatten)]
        otlp: cmd::push::config::Flags,
        #[command(flatten)]
        sources: sources::PortholeArgs,
        #[command(flatten)]
        policy: policy::PolicyArgs,
    },
    /// Run the scheduler agent (root): eBPF run-queue latency and noisy
    /// neighbour verdicts per cgroup, published as the `topdeck-agent`
    /// registry. Without eBPF, says why and publishes coarse figures.
    Agent(cmd::agent::Args),
    /// Run-queue latency per cgroup: p50/p99, preemptions by cause, top
    /// culprits and verdicts, over one window; with --at TIME, over the
    /// window before TIME as `topdeck record` kept the agent's registry.
    Sched(cmd::sched::Args),
    /// The host as it runs, on one screen: containers, their processes, their metrics.
    ///
    /// A row per container (the system as one): CPU used, weight, quota,
    /// CPUs, run-queue p99 and trend, whom it waited behind, the agent's
    /// verdict, its apps' latency p99 and the share of it that was CPU wait.
    /// Enter opens a container on its processes (pid, command, CPU, threads,
    /// sources), Enter again a process's metrics: counters as rates,
    /// histograms as p50/p99 over the interval, gauges as values. Keys:
    /// arrows or j/k move, Enter opens, Esc goes back (or clears the filter),
    /// Tab switches pane, / filters (container, process, registry, source or
    /// metric names), s sorts (busy, name, pid), ? helps, q quits.
    ///
    /// With --at TIME, the same screen as `topdeck record` recorded it: [ and
    /// ] (or ← and →) step a recorded frame back and on, { and } a minute;
    /// nothing moves otherwise. What is not recorded (a process's CPU and
    /// threads, a container's limits, the host line) shows as `-`.
    Top {
        /// Time between reads, e.g. `1s` or `500ms` (10ms to 1 day).
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        interval: Duration,
        /// Read twice, an interval apart, print what the screen would show and
        /// exit, without touching the terminal (into a pipe: COLUMNS × LINES
        /// where set, else 80 × 24). With --at: the recorded frame, at once.
        #[arg(long)]
        once: bool,
        /// With `--once`: print the harvest as JSON instead.
        #[arg(long, requires = "once")]
        json: bool,
        /// Show the host as recorded at TIME (the last frame at or before
        /// it): `03:12`, `yesterday 03:12`, `-10m` or RFC 3339. Rates are
        /// over the interval from the frame before.
        #[arg(
            long,
            value_name = "TIME",
            value_parser = recording::parse_when,
            allow_hyphen_values = true,
            conflicts_with = "interval"
        )]
        at: Option<recording::When>,
        /// The recording to read (default: where `topdeck record` keeps it:
        /// /var/lib/topdeck/history for root, else
        /// $XDG_STATE_HOME/topdeck/history).
        #[arg(long, value_name = "DIR", requires = "at")]
        history: Option<std::path::PathBuf>,
        #[command(flatten)]
        sources: sources::PortholeArgs,
    },
    /// The flight recorder: every source the views see, recorded every
    /// interval (1 s by default) into a store kept by age and size, so
    /// that `show --at`, `watch --from`, `top --at`, `sched --at` and
    /// `explain --at` go back to any moment it kept. Runs until stopped (SIGTERM, SIGINT).
    Record(cmd::record::Args),
    /// What the flight recorder kept: span, frames, sources, series, bytes
    /// and damage; `history export` writes a stretch of it as OpenMetrics
    /// with timestamps (for `promtool tsdb create-blocks-from openmetrics`).
    History(cmd::history::Args),
    /// Remove the files of dead writers, and only those. Exits 1 when a
    /// namespace directory of your own cannot be read (as `ls` does);
    /// another user's is only said.
    Gc {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Say which files would be removed, and remove none.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print a completion script for a shell, e.g.
    /// `topdeck completions bash > /etc/bash_completion.d/topdeck`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `topdeck man | man -l -`; with
    /// --dir, write it and one page per command (`topdeck-ls.1`, ...), the
    /// pages it refers to, into that directory.
    Man {
        /// Write topdeck.1 and topdeck-<command>.1 here instead of
        /// printing topdeck.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

/// Writes `topdeck.1` and a page per command, named as `topdeck.1`'s SEE
/// ALSO names them (`topdeck-ls.1`), into `dir`.
fn manual_pages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let write = |name: &str, man: clap_mangen::Man| -> anyhow::Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut file = std::fs::File::create(&path)
            .with_context(|| format!("cannot write the manual page {}", path.display()))?;
        man.render(&mut file)
            .with_context(|| format!("cannot write the manual page {}", path.display()))
    };
    let top = Cli::command();
    write("topdeck", clap_mangen::Man::new(top.clone()))?;
    for sub in top.get_subcommands() {
        let name = format!("topdeck-{}", sub.get_name());
        write(&name, clap_mangen::Man::new(sub.clone().name(name.clone())))?;
    }
    Ok(())
}

/// `watch`'s interval unless told otherwise.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// Longest `watch` interval: anything longer is surely a typo.
const MAX_INTERVAL: Duration = Duration::from_secs(86_400);

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (try `1s` or `500ms`)"))?;
    if d < Duration::from_millis(10) {
        return Err("the interval must be at least 10ms".into());
    }
    if d > MAX_INTERVAL {
        return Err("the interval must be at most 1 day".into());
    }
    Ok(d)
}

/// A group by name or gid (`--socket-group`).
fn parse_group(s: &str) -> Result<u32, String> {
    topdeck::dir::gid_of(s.as_ref()).ok_or_else(|| {
        format!("no group named {s:?} on this host: give a name from /etc/group or a gid")
    })
}

fn parse_count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("the count must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e} (a whole number of intervals)")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = io::stdout().lock();
    let result = match cli.command {
        Command::Ls { json, sources } => cmd::ls::run(&mut out, &sources, json),
        Command::Show {
            target,
            json,
            at: None,
            sources,
            ..
        } => cmd::show::run(&mut out, &target, &sources, json),
        Command::Show {
            target,
            json,
            at: Some(at),
            history,
            ..
        } => cmd::show::run_at(&mut out, &target, json, &at, &cmd::record::store(&history)),
        Command::Watch {
            target,
            metrics,
            interval,
            count,
            from: None,
            sources,
            ..
        } => {
            let interval = interval.unwrap_or(DEFAULT_INTERVAL);
            cmd::watch::run(&mut out, &target, &sources, &metrics, interval, count)
        }
        Command::Watch {
            target,
            metrics,
            interval,
            count,
            from: Some(from),
            to,
            history,
            ..
        } => cmd::watch::replay(
            &mut out,
            &target,
            &metrics,
            &from,
            to.as_ref(),
            interval,
            count,
            &cmd::record::store(&history),
        ),
        Command::Explain(args) => cmd::explain::run(&mut out, &args),
        Command::Top {
            once,
            json,
            at: Some(at),
            history,
            ..
        } => match once {
            true => top::once_at(&mut out, &history, at.unix_ns, json),
            false => top::run_at(&history, at.unix_ns),
        },
        Command::Top {
            interval,
            once,
            json,
            at: None,
            sources,
            ..
        } => match once {
            true => top::once(&mut out, interval, &sources, json),
            false => top::run(interval, &sources),
        },
        Command::Serve {
            listen,
            socket_group,
            bearer_token_file,
            gzip,
            all_users,
            max_connections,
            sources,
            policy,
        } => {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let caller = unsafe { libc::geteuid() };
            policy.policy(all_users, caller).and_then(|policy| {
                let options = cmd::serve::Options {
                    policy,
                    gzip,
                    all_users,
                    max_connections: max_connections.map(|n| n as usize),
                    // Like the registries: your own, unless every user's is asked for.
                    portholes: sources.portholes_of((!all_users).then_some(caller)),
                    bearer_token_file,
                    socket_group,
                };
                cmd::serve::run(&mut out, listen, options)
            })
        }
        Command::Push {
            interval,
            once,
            queue,
            all_users,
            otlp,
            sources,
            policy,
        } => cmd::push::config::Config::resolve(&otlp, |k| std::env::var(k).ok()).and_then(
            |config| {
                let options = cmd::push::Options {
                    // SAFETY: geteuid has no preconditions and cannot fail.
                    policy: policy.policy(all_users, unsafe { libc::geteuid() })?,
                    all_users,
                    // SAFETY: geteuid has no preconditions and cannot fail.
                    portholes: sources
                        .portholes_of((!all_users).then(|| unsafe { libc::geteuid() })),
                    interval,
                    once,
                    queue: queue as usize,
                    config,
                };
                cmd::push::run(&mut out, options)
            },
        ),
        Command::Record(args) => cmd::record::run(&mut out, &args),
        Command::History(args) => cmd::history::run(&mut out, &args),
        Command::Gc { json, dry_run } => cmd::gc::run(&mut out, json, dry_run),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "topdeck", &mut out);
            Ok(())
        }
        Command::Man { dir: None } => clap_mangen::Man::new(Cli::command())
            .render(&mut out)
            .map_err(Into::into),
        Command::Man { dir: Some(dir) } => manual_pages(&dir),
        Command::Clock { json, wait } => cmd::clock::run(&mut out, json, wait),
        Command::Agent(args) => cmd::agent::run(&mut out, &args),
        Command::Sched(args) => cmd::sched::run(&mut out, &args),
    }
    .and_then(|()| Ok(out.flush()?));
    if let Some(sig) = stop::signalled() {
        // A long-running command stopped for a signal, its cleanup done:
        // end as the signal would have, whatever the command returned
        // (an error then is most likely the stop's own doing, a dead
        // terminal after a hang-up, and nobody may be left to read it).
        drop(out);
        stop::die_of(sig);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`topdeck ls | head -1`): nothing
        // is wrong, and nobody is left to tell.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io::stderr(), "error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        let kind = match (
            c.downcast_ref::<io::Error>(),
            c.downcast_ref::<serde_json::Error>(),
        ) {
            (Some(io), _) => Some(io.kind()),
            // `--json` output fails inside serde_json, which keeps only the kind.
            (None, Some(json)) => json.io_error_kind(),
            (None, None) => None,
        };
        kind == Some(io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_humantime_within_bounds() {
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert!(parse_interval("5ms").is_err());
        assert!(parse_interval("2days").is_err());
        assert!(parse_interval("soon").is_err());
    }

    #[test]
    fn counts_start_at_one() {
        assert_eq!(parse_count("3"), Ok(3));
        assert!(parse_count("0").is_err());
        assert!(parse_count("-1").is_err());
    }

    #[test]
    fn serve_listens_on_loopback_unless_told_otherwise() {
        let Command::Serve {
            listen,
            socket_group,
            bearer_token_file,
            gzip,
            all_users,
            max_connections,
            sources,
            policy,
        } = Cli::parse_from(["topdeck", "serve"]).command
        else {
            panic!("not serve");
        };
        let cmd::serve::Listen::Tcp(listen) = listen else {
            panic!("not TCP: {listen}");
        };
        assert!(listen.ip().is_loopback());
        assert_eq!(listen.port(), 9464);
        assert!(socket_group.is_none() && bearer_token_file.is_none());
        assert!(!gzip);
        assert!(!all_users, "only the user's own registries unless asked");
        assert_eq!(max_connections, None);
        assert!(policy.policy.is_none() && policy.deny_user.is_empty());
        assert!(sources.prommp.is_empty() && !sources.portholes && !sources.no_portholes);
        let Command::Serve { listen, .. } =
            Cli::parse_from(["topdeck", "serve", "--listen", "0.0.0.0:9000"]).command
        else {
            panic!("not serve");
        };
        assert_eq!(listen.to_string(), "0.0.0.0:9000");
    }

    #[test]
    fn every_page_the_manual_refers_to_is_written() {
        let dir = tempfile::tempdir().unwrap();
        manual_pages(dir.path()).unwrap();
        let top = std::fs::read_to_string(dir.path().join("topdeck.1")).unwrap();
        let mut referred = 0;
        for sub in Cli::command().get_subcommands() {
            let name = format!("topdeck\\-{}", sub.get_name());
            if top.contains(&format!("{name}(1)")) {
                referred += 1;
            }
            let page = dir.path().join(format!("topdeck-{}.1", sub.get_name()));
            let text = std::fs::read_to_string(&page).unwrap();
            let title = format!(".TH topdeck-{} 1", sub.get_name());
            assert!(text.contains(&title), "{}: {text}", page.display());
        }
        assert!(
            referred > 10,
            "topdeck.1 refers to the commands' pages:\n{top}"
        );
    }

    #[test]
    fn completions_and_the_manual_cover_every_command() {
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        assert!(names.len() > 10, "{names:?}");
        let mut man = Vec::new();
        clap_mangen::Man::new(Cli::command())
            .render(&mut man)
            .unwrap();
        let man = String::from_utf8(man).unwrap();
        assert!(man.contains(".TH topdeck 1"), "{man}");
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "topdeck", &mut script);
            let script = String::from_utf8(script).unwrap();
            for n in &names {
                assert!(man.contains(n.as_str()), "the manual lacks {n}");
                assert!(script.contains(n.as_str()), "{shell} completion lacks {n}");
            }
        }
    }

    #[test]
    fn the_arguments_are_consistent() {
        Cli::command().debug_assert();
    }
}
