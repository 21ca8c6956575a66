// SPDX-License-Identifier: Apache-2.0
//! Turning what the user typed (pid, process name or path) into one
//! source: a registry's path is opened as it is; anything else goes
//! through `Namespace::find`, whose first match (alive, then newest) wins;
//! when no registry matches, other runtimes' portholes are looked at.

use std::io::{self, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use topdeck::dir::FILE_SUFFIX;
use topdeck::{Liveness, Namespace, RegistryEntry, RegistryReader, Snapshot};
use topdeck_sources::{Found, Portholes};

use crate::sources::PortholeArgs;

/// How many of the other matches are named in the note.
const OTHERS_NAMED: usize = 3;

/// Prints a warning on stderr. Losing a warning is better than failing the
/// command for it, so a closed stderr is ignored.
pub fn warn(message: impl std::fmt::Display) {
    let _ = writeln!(io::stderr(), "warning: {message}");
}

/// One source a view follows: a registry, or another runtime's porthole.
pub enum Target {
    /// A topdeck registry.
    Registry(Box<RegistryReader>),
    /// A JVM, a prometheus_client directory or an Aeron driver, as last read.
    Porthole(Portholes, Found),
}

impl Target {
    /// Its metrics now.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        match self {
            Target::Registry(r) => r.snapshot().context("cannot read the metrics"),
            Target::Porthole(portholes, found) => {
                let reading = portholes
                    .reread(found)
                    .map_err(|e| anyhow!("cannot read the metrics: {e}"))?;
                *found = reading.found;
                Ok(reading.snapshot)
            }
        }
    }

    /// Whether its writer still runs (as of the last snapshot, for a porthole).
    pub fn liveness(&self) -> Liveness {
        match self {
            Target::Registry(r) => r.liveness(),
            Target::Porthole(_, f) if f.alive => Liveness::Alive,
            Target::Porthole(..) => Liveness::Dead,
        }
    }

    /// The file (or directory) read.
    pub fn path(&self) -> &Path {
        match self {
            Target::Registry(r) => r.path(),
            Target::Porthole(_, f) => &f.path,
        }
    }

    /// The writer's pid, 0 when unknown.
    pub fn pid(&self) -> u32 {
        match self {
            Target::Registry(r) => r.header().pid,
            Target::Porthole(_, f) => f.pid.unwrap_or(0),
        }
    }

    /// The writer's name.
    pub fn process(&self) -> &str {
        match self {
            Target::Registry(r) => &r.header().process_name,
            Target::Porthole(_, f) => &f.process,
        }
    }

    /// The registry's name; a porthole's kind.
    pub fn registry(&self) -> &str {
        match self {
            Target::Registry(r) => &r.header().registry_name,
            Target::Porthole(_, f) => f.kind.name(),
        }
    }

    /// `topdeck`, or the porthole's kind (`jvm`, `python`, `aeron`).
    pub fn source(&self) -> &'static str {
        match self {
            Target::Registry(_) => "topdeck",
            Target::Porthole(_, f) => f.kind.name(),
        }
    }
}

/// Opens the source `target` names, printing a warning for each bad file
/// met on the way and a note when several registries match. Registries
/// come first; portholes are looked at when none matches.
pub fn open(target: &str, sources: &PortholeArgs) -> Result<Target> {
    if looks_like_path(target) {
        let path = Path::new(target);
        if path.is_file() && path.to_string_lossy().ends_with(FILE_SUFFIX) {
            // Library errors name the file already: the context does not repeat it.
            let reader = RegistryReader::open(path).context("cannot open the registry")?;
            return Ok(Target::Registry(Box::new(reader)));
        }
    }
    let (found, errors) = Namespace::host().find(target);
    for e in &errors {
        warn(e);
    }
    if let Some(first) = found.first() {
        if found.len() > 1 {
            note_others(target, first, &found[1..]);
        }
        let reader = first.open().context("cannot open the registry")?;
        return Ok(Target::Registry(Box::new(reader)));
    }
    let mut what = "registry";
    if let Some(mut portholes) = sources.portholes() {
        if let Some(found) = porthole(&mut portholes, target) {
            return Ok(Target::Porthole(portholes, found));
        }
        what = "registry or porthole";
    }
    if looks_like_path(target) && Path::new(target).exists() {
        // Not a porthole found on the host: read it as a registry, whose
        // error says what is wrong with it.
        let reader = RegistryReader::open(Path::new(target)).context("cannot open the registry")?;
        return Ok(Target::Registry(Box::new(reader)));
    }
    bail!("no {what} matches {target:?}; run `topdeck ls` to see what exists");
}

/// The porthole `target` names: by path, pid, or process name; a live one
/// first.
fn porthole(portholes: &mut Portholes, target: &str) -> Option<Found> {
    let look = portholes.look();
    let pid: Option<u32> = target.parse().ok();
    let path = Path::new(target);
    let mut matches: Vec<Found> = look
        .readings
        .into_iter()
        .map(|r| r.found)
        .filter(|f| {
            f.path == path
                || (pid.is_some() && f.pid == pid)
                || f.process == target
                || f.kind.name() == target
        })
        .collect();
    matches.sort_by_key(|f| !f.alive);
    matches.into_iter().next()
}

/// A process name never holds a `/`, and registry files end in `.topdeck`.
fn looks_like_path(target: &str) -> bool {
    target.contains('/') || target.ends_with(FILE_SUFFIX)
}

fn note_others(target: &str, chosen: &RegistryEntry, others: &[RegistryEntry]) {
    let n = others.len();
    let mut note = format!(
        "note: {n} other {} {target:?}; using {} (pid {}, {}, registry {}). \
         To pick another, give its path:",
        if n == 1 {
            "registry also matches"
        } else {
            "registries also match"
        },
        chosen.path.display(),
        chosen.pid,
        crate::render::state(chosen.liveness),
        chosen.registry_name,
    );
    for e in others.iter().take(OTHERS_NAMED) {
        note += &format!(
            "\n  {} (pid {}, {}, registry {})",
            e.path.display(),
            e.pid,
            crate::render::state(e.liveness),
            e.registry_name
        );
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
