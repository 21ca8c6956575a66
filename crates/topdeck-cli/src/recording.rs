// SPDX-License-Identifier: Apache-2.0
//! The recording as `top --at` and `sched --at` read it: the store, the
//! time asked for, and errors that say what the store does hold.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use topdeck_history::{Filter, History, Moment};

/// The store `dir` names (`--history`, else the default of `record`),
/// opened: an error that says how to record when there is none.
pub fn open(dir: &Option<PathBuf>) -> Result<(PathBuf, History)> {
    let dir = crate::cmd::record::store(dir);
    let history = History::open(&dir)?;
    Ok((dir, history))
}

/// TIME as typed (`03:12`, `yesterday 03:12`, `-10m`, RFC 3339), ns since
/// the Unix epoch.
pub fn time(text: &str) -> Result<u64> {
    Ok(topdeck_history::parse_time(text, SystemTime::now())?)
}

/// `unix_ns` as local time to the second, as the views name a moment.
pub fn when(unix_ns: u64) -> String {
    topdeck_history::format_time(unix_ns)
}

/// What the store holds, in words: `2026-11-29T03:00:00+00:00 to
/// 2026-11-29T04:00:00+00:00 (3600 frames)`.
pub fn span(history: &History) -> Result<String> {
    let s = history.summary(false)?;
    Ok(match (s.from_unix_ns, s.to_unix_ns) {
        (Some(from), Some(to)) => format!("{} to {} ({} frames)", when(from), when(to), s.frames),
        _ => "no whole frame".to_owned(),
    })
}

/// The frame at or before `at` with the sources `filter` keeps: an error
/// that gives the recorded span when nothing was recorded by then.
pub fn moment_at(history: &History, dir: &Path, at: u64, filter: Filter) -> Result<Moment> {
    let found = history
        .at(at, filter)
        .with_context(|| format!("cannot read the recording in {}", dir.display()))?;
    match found {
        Some(m) => Ok(m),
        None => anyhow::bail!(
            "nothing was recorded in {} at or before {}: it holds {}",
            dir.display(),
            when(at),
            span(history)?
        ),
    }
}
