// SPDX-License-Identifier: Apache-2.0
//! Turning what the user typed (pid, process or registry name, path) into
//! one source: a registry's path is opened as it is; anything else is
//! looked for among every source on the host, whose first match (alive,
//! then topdeck's own, then newest) wins.

use std::io::{self, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use topdeck::dir::FILE_SUFFIX;
use topdeck::{Liveness, Namespace, RegistryReader, Snapshot};
use topdeck_sources::{Kind, Source, Tracked, Tracker};

use crate::sources::PortholeArgs;

/// How many of the other matches are named in the note.
const OTHERS_NAMED: usize = 3;

/// Prints a warning on stderr. Losing a warning is better than failing the
/// command for it, so a closed stderr is ignored.
pub fn warn(message: impl std::fmt::Display) {
    let _ = writeln!(io::stderr(), "warning: {message}");
}

/// The one source a view follows, whatever wrote it.
pub struct Target {
    /// What the look found of it (its liveness as of the last snapshot).
    pub source: Source,
    tracked: Tracked,
}

impl Target {
    /// Its metrics now.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let snap = self
            .tracked
            .snapshot()
            .map_err(|e| anyhow!("cannot read the metrics: {e}"))?;
        self.source.liveness = self.tracked.liveness();
        Ok(snap)
    }
}

/// Opens the source `target` names (a path, a pid, a process or registry
/// name, a kind), printing a warning for each bad file met on the way and
/// a note when several match: a live one first, topdeck's registries
/// before other runtimes', the newest first.
pub fn open(target: &str, sources: &PortholeArgs) -> Result<Target> {
    let mut all = open_matches(target, sources, false)?;
    Ok(all.swap_remove(0))
}

/// As [`open`], but a pid names every source of that process (its
/// topdeck registries, a JVM's hsperfdata, ...), in [`open`]'s order.
pub fn open_process(target: &str, sources: &PortholeArgs) -> Result<Vec<Target>> {
    open_matches(target, sources, true)
}

/// The sources `target` names, best first: one, or with `whole_process`
/// and a pid for a target, every source of that process.
fn open_matches(target: &str, sources: &PortholeArgs, whole_process: bool) -> Result<Vec<Target>> {
    let registry_file = |path: &Path| -> Result<Vec<Target>> {
        // Library errors name the file already: the context does not repeat it.
        let reader = RegistryReader::open(path).context("cannot open the registry")?;
        let (source, tracked) = Tracked::of_reader(reader);
        Ok(vec![Target { source, tracked }])
    };
    if looks_like_path(target) {
        let path = Path::new(target);
        if path.is_file() && path.to_string_lossy().ends_with(FILE_SUFFIX) {
            return registry_file(path);
        }
    }
    let portholes = sources.portholes();
    let what = match portholes {
        Some(_) => "registry or porthole",
        None => "registry",
    };
    let look = Tracker::<()>::new(Namespace::host(), portholes).look();
    for e in &look.errors {
        warn(e);
    }
    // A local path names a source by what it resolves to too; one through
    // another namespace's /proc/<pid>/root resolves to a path in this
    // one, so only its own spelling names it.
    let canonical = std::fs::canonicalize(target).ok();
    let mut found: Vec<Source> = look
        .sources
        .into_iter()
        .filter(|s| {
            s.is_named(target)
                || (canonical.is_some()
                    && !s.path.starts_with("/proc")
                    && std::fs::canonicalize(&s.path).ok() == canonical)
        })
        .collect();
    found.sort_by_key(|s| {
        (
            s.liveness != Liveness::Alive,
            s.kind != Kind::Topdeck,
            std::cmp::Reverse(s.created_unix_ns),
        )
    });
    // A process is its pid and its start: a file left by an earlier
    // process of the same pid is not this one's.
    let pid = target.parse::<u32>().ok();
    let best = found
        .iter()
        .find(|s| pid.is_some() && s.pid == pid)
        .map(|s| (s.start_ticks, s.liveness));
    let same_process = |s: &Source| {
        s.pid == pid
            && best.is_some_and(|(start, alive)| match (s.start_ticks, start) {
                (Some(a), Some(b)) => a == b,
                _ => s.liveness == alive,
            })
    };
    if whole_process && found.iter().filter(|s| same_process(s)).count() > 1 {
        found.retain(same_process);
        return found
            .into_iter()
            .map(|source| {
                let tracked = Tracked::open(&source)
                    .map_err(|e| anyhow!("cannot open {}: {e}", source.path.display()))?;
                Ok(Target { source, tracked })
            })
            .collect();
    }
    if let Some(first) = found.first() {
        if found.len() > 1 {
            note_others(target, first, &found[1..]);
        }
        let tracked = Tracked::open(first).map_err(|e| anyhow!("cannot open {target:?}: {e}"))?;
        return Ok(vec![Target {
            source: found.swap_remove(0),
            tracked,
        }]);
    }
    if looks_like_path(target) && Path::new(target).exists() {
        // Not a source found on the host: read it as a registry, whose
        // error says what is wrong with it.
        return registry_file(Path::new(target));
    }
    bail!("no {what} matches {target:?}; run `topdeck ls` to see what exists");
}

/// A process name never holds a `/`, and registry files end in `.topdeck`.
fn looks_like_path(target: &str) -> bool {
    target.contains('/') || target.ends_with(FILE_SUFFIX)
}

fn note_others(target: &str, chosen: &Source, others: &[Source]) {
    let n = others.len();
    // pid, state, and the registry's name or the runtime's kind.
    let about = |s: &Source| {
        format!(
            "pid {}, {}, {} {}",
            s.pid.unwrap_or(0),
            crate::render::state(s.liveness),
            if s.registry.is_some() {
                "registry"
            } else {
                "source"
            },
            s.registry_or_kind(),
        )
    };
    let mut note = format!(
        "note: {n} other {} {target:?}; using {} ({}). To pick another, give its path:",
        if n == 1 {
            "source also matches"
        } else {
            "sources also match"
        },
        chosen.path.display(),
        about(chosen),
    );
    for s in others.iter().take(OTHERS_NAMED) {
        note += &format!("\n  {} ({})", s.path.display(), about(s));
    }
    if n > OTHERS_NAMED {
        note += &format!(
            "\n  ... and {} more (`topdeck ls` lists them)",
            n - OTHERS_NAMED
        );
    }
    let _ = writeln!(io::stderr(), "{note}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_told_from_names_and_pids() {
        assert!(looks_like_path("/dev/shm/topdeck-0/1-2-0.topdeck"));
        assert!(looks_like_path("./x"));
        assert!(looks_like_path("1-2-0.topdeck"));
        assert!(!looks_like_path("1234"));
        assert!(!looks_like_path("nginx"));
    }
}
