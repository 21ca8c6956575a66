// SPDX-License-Identifier: Apache-2.0
//! `topdeck history`: what the flight recorder kept (span, frames,
//! sources, series, bytes, damage), and `history export`, a stretch of it
//! as OpenMetrics text with timestamps, the series named and labelled
//! exactly as `serve` exports them, which
//! `promtool tsdb create-blocks-from openmetrics` imports; or as JSON
//! lines, one moment a line, each source in `show --json`'s shape.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::Serialize;
use topdeck_history::{format_time, parse_time, History, Moment, Summary};

use crate::render;

/// Arguments of `topdeck history`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store (default: /var/lib/topdeck/history for root, else
    /// $XDG_STATE_HOME/topdeck/history).
    #[arg(long, value_name = "DIR", global = true)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Check every frame's checksum (reads the whole store) and list the
    /// damage found.
    #[arg(long)]
    pub verify: bool,
    #[command(subcommand)]
    pub export: Option<Export>,
}

/// `history export`.
#[derive(Debug, clap::Subcommand)]
pub enum Export {
    /// A stretch of the recording as OpenMetrics text with timestamps, on
    /// stdout: every source's series as `serve` names and labels them,
    /// each family once, its samples in time order, `# EOF` at the end.
    Export {
        /// From this time: `03:12`, `yesterday 03:12`, `-10m` or RFC 3339.
        #[arg(long, allow_hyphen_values = true)]
        from: String,
        /// To this time (default: now).
        #[arg(long, default_value = "now", allow_hyphen_values = true)]
        to: String,
        /// `openmetrics`, or `json`: one line per moment,
        /// `{"recorded_at", "sources": [...]}`, each source as
        /// `show --at --json` prints it.
        #[arg(long, value_enum, default_value = "openmetrics")]
        format: Format,
    },
}

/// What `history export` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// OpenMetrics text with timestamps.
    Openmetrics,
    /// JSON lines, a moment each.
    Json,
}

/// The `--json` shape: the summary, with its times readable.
#[derive(Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    from: Option<String>,
    to: Option<String>,
}

pub fn run(out: &mut impl Write, args: &Args) -> Result<()> {
    let dir = crate::cmd::record::store(&args.dir);
    let history = History::open(&dir)?;
    if let Some(Export::Export { from, to, format }) = &args.export {
        let now = SystemTime::now();
        let (from, to) = (parse_time(from, now)?, parse_time(to, now)?);
        return match format {
            Format::Openmetrics => export(out, &history, from, to),
            Format::Json => export_json(out, &history, from, to),
        };
    }
    let s = history.summary(args.verify)?;
    if args.json {
        let shown = Shown {
            summary: &s,
            from: s.from_unix_ns.map(format_time),
            to: s.to_unix_ns.map(format_time),
        };
        serde_json::to_writer_pretty(&mut *out, &shown)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "store     {}", dir.display())?;
    match (s.from_unix_ns, s.to_unix_ns) {
        (Some(a), Some(b)) => writeln!(
            out,
            "span      {} .. {} ({})",
            format_time(a),
            format_time(b),
            humantime::format_duration(std::time::Duration::from_secs((b - a) / 1_000_000_000))
        )?,
        _ => writeln!(out, "span      no whole frame yet")?,
    }
    writeln!(out, "frames    {} ({} samples)", s.frames, s.samples)?;
    writeln!(out, "last      {} sources, {} series", s.sources, s.series)?;
    let per_sample = match s.samples {
        0 => String::new(),
        n => format!(", {:.2} bytes per sample", s.bytes as f64 / n as f64),
    };
    writeln!(
        out,
        "size      {} in {} segments{per_sample}",
        render::value(s.bytes as f64, "bytes"),
        s.segments
    )?;
    match (s.damage.is_empty(), args.verify) {
        (true, true) => writeln!(out, "damage    none (every frame checked)")?,
        (true, false) => writeln!(out, "damage    none seen (--verify checks every frame)")?,
        (false, _) => {
            writeln!(out, "damage    {} stretches:", s.damage.len())?;
            for d in &s.damage {
                writeln!(out, "  {d}")?;
            }
        }
    }
    Ok(())
}

/// Hands every moment from `from` to `to` to `each`, in order, warning of
/// damage met; an error when there is none.
fn each_moment(
    history: &History,
    from: u64,
    to: u64,
    mut each: impl FnMut(Moment) -> Result<()>,
) -> Result<()> {
    let mut moments = 0u64;
    for moment in history.replay(from, to, &|_| true) {
        let moment = moment?;
        if let Some(d) = &moment.damage {
            crate::select::warn(d);
        }
        moments += 1;
        each(moment)?;
    }
    if moments == 0 {
        anyhow::bail!(
            "nothing was recorded from {} to {}; `topdeck history` shows what is",
            format_time(from),
            format_time(to)
        );
    }
    Ok(())
}

/// Writes every moment from `from` to `to` as a JSON line.
fn export_json(out: &mut impl Write, history: &History, from: u64, to: u64) -> Result<()> {
    #[derive(Serialize)]
    struct Line<'a> {
        recorded_at: &'a str,
        sources: Vec<serde_json::Value>,
    }
    each_moment(history, from, to, |moment| {
        let at = crate::recording::exact(moment.unix_ns);
        let sources = moment
            .sources
            .iter()
            .map(|(s, snap)| crate::cmd::show::json_of(s, snap, Some(&at)))
            .collect::<Result<_>>()?;
        serde_json::to_writer(
            &mut *out,
            &Line {
                recorded_at: &at,
                sources,
            },
        )?;
        writeln!(out)?;
        Ok(())
    })
}

/// One family of the export: its header lines, then its samples.
struct Family {
    header: Vec<u8>,
    samples: Vec<u8>,
}

/// Writes every moment from `from` to `to` as OpenMetrics with
/// timestamps. Each moment is encoded as `serve` would have served it
/// then; the families are then put together across moments (OpenMetrics
/// wants each family once).
fn export(out: &mut impl Write, history: &History, from: u64, to: u64) -> Result<()> {
    let mut families: Vec<Family> = Vec::new();
    let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut body = Vec::new();
    each_moment(history, from, to, |moment| {
        let sources: Vec<topdeck_export::Source> = moment
            .sources
            .iter()
            .map(|(s, snap)| topdeck_export::Source::of(s, snap))
            .collect();
        let exposition = topdeck_export::Exposition::group(&sources);
        body.clear();
        topdeck_export::Format::OpenMetrics.encode(&mut body, &exposition)?;
        let stamp = format!(
            " {}.{:03}\n",
            moment.unix_ns / 1_000_000_000,
            moment.unix_ns / 1_000_000 % 1000
        );
        // The family being read, and whether this moment is its first.
        let mut current: Option<(usize, bool)> = None;
        for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            if let Some(name) = line.strip_prefix(b"# TYPE ") {
                let name = name.split(|&b| b == b' ').next().unwrap_or(name).to_vec();
                let next = families.len();
                let i = *index.entry(name).or_insert(next);
                if i == next {
                    families.push(Family {
                        header: Vec::new(),
                        samples: Vec::new(),
                    });
                }
                current = Some((i, i == next));
            }
            let Some((i, first)) = current else { continue };
            let f = &mut families[i];
            match line.first() {
                // `# EOF` is written once, at the end.
                Some(b'#') if line == b"# EOF" => {}
                Some(b'#') if first => {
                    f.header.extend_from_slice(line);
                    f.header.push(b'\n');
                }
                Some(b'#') => {}
                _ => {
                    f.samples.extend_from_slice(line);
                    f.samples.extend_from_slice(stamp.as_bytes());
                }
            }
        }
        Ok(())
    })?;
    for f in &families {
        out.write_all(&f.header)
            .and_then(|()| out.write_all(&f.samples))
            .context("cannot write the export")?;
    }
    out.write_all(b"# EOF\n")?;
    Ok(())
}
