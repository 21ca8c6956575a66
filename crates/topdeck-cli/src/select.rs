// SPDX-License-Identifier: Apache-2.0
//! Turning what the user typed (pid, process name or path) into one registry.

use std::path::Path;

use anyhow::{bail, Context, Result};
use topdeck::{Namespace, RegistryReader};

/// Opens the registry `target` names: a file path, else the live (then
/// newest) registry whose pid or process name matches.
pub fn open(target: &str) -> Result<RegistryReader> {
    let path = Path::new(target);
    if target.contains('/') && path.exists() {
        return RegistryReader::open(path)
            .with_context(|| format!("cannot read {}", path.display()));
    }
    let (found, _errors) = Namespace::host().find(target);
    let Some(first) = found.first() else {
        bail!("no registry matches {target:?}; run `topdeck ls` to see what exists");
    };
    if found.len() > 1 {
        eprintln!(
            "note: {} registries match {target:?}; showing {} (give a file path to pick another)",
            found.len(),
            first.path.display()
        );
    }
    first
        .open()
        .with_context(|| format!("cannot read {}", first.path.display()))
}
