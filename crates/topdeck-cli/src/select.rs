// SPDX-License-Identifier: Apache-2.0
//! Turning what the user typed (pid, process or registry name, path) into
//! one source: a registry's path is opened as it is; anything else is
//! looked for among every source on the host, whose first match (alive,
//! then topdeck's own, then newest) wins. The views that go back in time
//! choose among the sources recorded then by the same rules ([`choose`]).

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

/// The failure of a command whose own namespace directories `dirs` could
/// not be read at all (each already said as a warning): `ls` and `gc`
/// fail alike, and never for another user's directory.
pub fn unusable(dirs: &[std::path::PathBuf]) -> Result<()> {
    match dirs {
        [] => Ok(()),
        dirs => {
            let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            Err(anyhow!(
                "cannot read the namespace directory {} (see above)",
                names.join(", ")
            ))
        }
    }
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
    let found = choose(target, look.sources, whole_process, |s| s);
    if !found.is_empty() {
        let several = found.len() > 1;
        return found
            .into_iter()
            .map(|source| {
                let tracked = Tracked::open(&source).map_err(|e| match several {
                    true => anyhow!("cannot open {}: {e}", source.path.display()),
                    false => anyhow!("cannot open {target:?}: {e}"),
                })?;
                Ok(Target { source, tracked })
            })
            .collect();
    }
    if looks_like_path(target) && Path::new(target).exists() {
        // Not a source found on the host: read it as a registry, whose
        // error says what is wrong with it.
        return registry_file(Path::new(target));
    }
    bail!("no {what} matches {target:?}; run `topdeck ls` to see what exists");
}

/// Whether `target` names a source: [`Source::is_named`], or, for a local
/// path, the same file. One through another namespace's
/// `/proc/<pid>/root` resolves to a path in this one, so only its own
/// spelling names it.
pub fn naming(target: &str) -> impl Fn(&Source) -> bool + '_ {
    let canonical = std::fs::canonicalize(target).ok();
    move |s: &Source| {
        s.is_named(target)
            || canonical.as_ref().is_some_and(|c| {
                !s.path.starts_with("/proc")
                    && std::fs::canonicalize(&s.path).ok().as_ref() == Some(c)
            })
    }
}

/// Chooses among `found` (sources, or anything holding one: `source`
/// says where) those `target` names, best first: a live one, then
/// topdeck's registries before other runtimes', then the newest. With
/// `whole_process` and a pid for a target, every source of that process;
/// otherwise the best one, the others named in a note on stderr. Empty
/// when none matches. The live views and the recorded ones both choose
/// here, so a target names the same sources now and in the past.
pub fn choose<T>(
    target: &str,
    mut found: Vec<T>,
    whole_process: bool,
    source: impl Fn(&T) -> &Source,
) -> Vec<T> {
    let named = naming(target);
    found.retain(|t| named(source(t)));
    found.sort_by_key(|t| {
        let s = source(t);
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
        .map(&source)
        .find(|s| pid.is_some() && s.pid == pid)
        .map(|s| (s.start_ticks, s.liveness));
    let same_process = |s: &Source| {
        s.pid == pid
            && best.is_some_and(|(start, alive)| match (s.start_ticks, start) {
                (Some(a), Some(b)) => a == b,
                _ => s.liveness == alive,
            })
    };
    if whole_process && found.iter().filter(|t| same_process(source(t))).count() > 1 {
        found.retain(|t| same_process(source(t)));
        return found;
    }
    if found.len() > 1 {
        note_others(target, source(&found[0]), found[1..].iter().map(&source));
    }
    found.truncate(1);
    found
}

/// A process name never holds a `/`, and registry files end in `.topdeck`.
fn looks_like_path(target: &str) -> bool {
    target.contains('/') || target.ends_with(FILE_SUFFIX)
}

fn note_others<'a>(
    target: &str,
    chosen: &Source,
    others: impl ExactSizeIterator<Item = &'a Source>,
) {
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
    for s in others.take(OTHERS_NAMED) {
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

    fn source(kind: Kind, file: &str, pid: u32, start: u64, created: u64) -> Source {
        let mut s = Source::new(kind, format!("/nowhere/{file}"), "billing");
        s.pid = Some(pid);
        s.start_ticks = Some(start);
        s.created_unix_ns = Some(created);
        s
    }

    fn files(chosen: &[Source]) -> Vec<&str> {
        chosen
            .iter()
            .map(|s| s.path.file_name().unwrap().to_str().unwrap())
            .collect()
    }

    #[test]
    fn the_best_match_is_alive_then_topdecks_then_newest() {
        let mut dead = source(Kind::Topdeck, "dead", 7, 1, 30);
        dead.liveness = Liveness::Dead;
        let found = vec![
            source(Kind::Jvm, "jvm", 8, 1, 40),
            dead,
            source(Kind::Topdeck, "old", 9, 1, 10),
            source(Kind::Topdeck, "new", 10, 1, 20),
            source(Kind::Topdeck, "other", 11, 1, 50),
        ];
        let mut other = found.clone();
        other[4].process = "payments".into();
        assert_eq!(files(&choose("billing", other, false, |s| s)), ["new"]);
        assert_eq!(
            files(&choose("BILLING", found.clone(), true, |s| s)),
            ["other"]
        );
        assert!(choose("nobody", found, false, |s| s).is_empty());
    }

    #[test]
    fn a_pid_names_every_source_of_that_process_only() {
        let found = vec![
            // An earlier process of the same pid left this one.
            source(Kind::Topdeck, "earlier", 7, 1, 10),
            source(Kind::Jvm, "jvm", 7, 2, 0),
            source(Kind::Topdeck, "registry", 7, 2, 20),
            source(Kind::Topdeck, "elsewhere", 8, 2, 30),
        ];
        let both = choose("7", found.clone(), true, |s| s);
        assert_eq!(files(&both), ["registry", "jvm"]);
        assert_eq!(files(&choose("7", found, false, |s| s)), ["registry"]);
        // Anything holding a source: a recorded one with its snapshot.
        let recorded = vec![(source(Kind::Topdeck, "r", 7, 2, 1), Snapshot::default())];
        assert_eq!(choose("7", recorded, true, |(s, _)| s).len(), 1);
    }
}
