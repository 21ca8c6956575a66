// SPDX-License-Identifier: Apache-2.0
//! What the views that go back in time (`show --at`, `watch --from`,
//! `top --at`, `sched --at`) share: the store, TIME as typed, and errors
//! that say what the store holds instead of what was asked.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{anyhow, Context, Result};
use topdeck_history::{format_time, Filter, History, Moment};
use topdeck_sources::Source;

/// The store `dir` names (`--history`, else the default of `record`),
/// opened: an error that says how to record when there is none.
pub fn open(dir: &Option<PathBuf>) -> Result<(PathBuf, History)> {
    let dir = crate::cmd::record::store(dir);
    let history = History::open(&dir)?;
    Ok((dir, history))
}

/// `unix_ns` as local time to the second, as the views name a moment.
pub fn when(unix_ns: u64) -> String {
    topdeck_history::format_time(unix_ns)
}

/// `unix_ns` in UTC to the nanosecond (`2026-11-29T03:12:00.123456789Z`):
/// what JSON says of a recorded frame, and what `--at` takes back to name
/// exactly that frame.
pub fn exact(unix_ns: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(unix_ns);
    humantime::format_rfc3339_nanos(at).to_string()
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

/// How many of the sources recorded then an error names.
const RECORDED_NAMED: usize = 5;

/// A moment asked for: what was typed, and the moment it names.
#[derive(Debug, Clone)]
pub struct When {
    /// As typed (`03:12`, `-10m`, ...), to say it back.
    pub text: String,
    /// ns since the Unix epoch.
    pub unix_ns: u64,
}

/// Reads TIME relative to now (a clap value parser).
pub fn parse_when(text: &str) -> Result<When, String> {
    topdeck_history::parse_time(text, SystemTime::now())
        .map(|unix_ns| When {
            text: text.to_owned(),
            unix_ns,
        })
        .map_err(|e| e.to_string())
}

impl When {
    /// `03:12 (2026-11-29T03:12:00+00:00)`, or only the latter when that
    /// is what was typed.
    pub fn said(&self) -> String {
        let at = format_time(self.unix_ns);
        match self.text == at {
            true => at,
            false => format!("{} ({at})", self.text),
        }
    }
}

/// Nothing was recorded `when` (`at or before …`, `from … to …`): says
/// what the store at `dir` holds instead.
pub fn nothing_recorded(history: &History, dir: &Path, when: &str) -> anyhow::Error {
    let holds = match span(history) {
        Ok(span) => format!("it holds {span}"),
        Err(e) => format!("its span is unknown ({e})"),
    };
    anyhow!("nothing was recorded {when} in {}: {holds}", dir.display())
}

/// No source `target` names was recorded `when`: says a few of those
/// recorded at `unix_ns`.
pub fn not_recorded(history: &History, target: &str, when: &str, unix_ns: u64) -> anyhow::Error {
    let then = match history.at(unix_ns, &|_| true) {
        Ok(Some(m)) => recorded(m.sources.iter().map(|(s, _)| s)),
        Ok(None) => "nothing".into(),
        Err(e) => format!("unknown ({e})"),
    };
    anyhow!("nothing {target:?} names was recorded {when}; recorded then: {then}")
}

/// `billing (pid 12, registry default), ...`, a few of them.
fn recorded<'a>(sources: impl ExactSizeIterator<Item = &'a Source>) -> String {
    let n = sources.len();
    if n == 0 {
        return "nothing".into();
    }
    let mut named: Vec<String> = sources
        .take(RECORDED_NAMED)
        .map(|s| {
            let pid = s.pid.map_or_else(|| "-".into(), |p| p.to_string());
            let what = match s.registry {
                Some(_) => "registry",
                None => "source",
            };
            format!("{} (pid {pid}, {what} {})", s.process, s.registry_or_kind())
        })
        .collect();
    if n > RECORDED_NAMED {
        named.push(format!("and {} more", n - RECORDED_NAMED));
    }
    named.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck_sources::Kind;

    #[test]
    fn times_are_said_back_as_typed_and_as_read() {
        let w = parse_when("-10m").unwrap();
        assert!(w.said().starts_with("-10m ("), "{}", w.said());
        let exact = format_time(w.unix_ns);
        assert_eq!(parse_when(&exact).unwrap().said(), exact);
        assert!(parse_when("at noon").unwrap_err().contains("try"));
    }

    #[test]
    fn a_few_recorded_sources_are_named() {
        let mut s = Source::new(Kind::Topdeck, "/x/1-2-0.topdeck", "billing");
        s.pid = Some(12);
        s.registry = Some("default".into());
        let jvm = Source::new(Kind::Jvm, "/tmp/hsperfdata_u/7", "Main");
        assert_eq!(
            recorded([&s, &jvm].into_iter()),
            "billing (pid 12, registry default), Main (pid -, source jvm)"
        );
        let many = vec![s; 7];
        assert!(recorded(many.iter()).ends_with(", and 2 more"));
        assert_eq!(recorded([].into_iter()), "nothing");
    }
}
