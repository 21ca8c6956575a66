// SPDX-License-Identifier: Apache-2.0
//! Turning what the user typed (pid, process name or path) into one
//! registry: a path is opened as it is; anything else goes through
//! `Namespace::find`, whose first match (alive, then newest) wins.

use std::io::{self, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use topdeck::dir::FILE_SUFFIX;
use topdeck::{Namespace, RegistryEntry, RegistryReader};

/// How many of the other matches are named in the note.
const OTHERS_NAMED: usize = 3;

/// Prints a warning on stderr. Losing a warning is better than failing the
/// command for it, so a closed stderr is ignored.
pub fn warn(message: impl std::fmt::Display) {
    let _ = writeln!(io::stderr(), "warning: {message}");
}

/// Opens the registry `target` names, printing a warning for each bad file
/// met on the way and a note when several registries match.
pub fn open(target: &str) -> Result<RegistryReader> {
    if looks_like_path(target) {
        let path = Path::new(target);
        if path.exists() {
            // Library errors name the file already: the context does not repeat it.
            return RegistryReader::open(path).context("cannot open the registry");
        }
    }
    let (found, errors) = Namespace::host().find(target);
    for e in &errors {
        warn(e);
    }
    let Some(first) = found.first() else {
        bail!("no registry matches {target:?}; run `topdeck ls` to see what exists");
    };
    if found.len() > 1 {
        note_others(target, first, &found[1..]);
    }
    first.open().context("cannot open the registry")
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
