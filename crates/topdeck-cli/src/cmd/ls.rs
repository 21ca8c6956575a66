// SPDX-License-Identifier: Apache-2.0
//! `topdeck ls`: the registries in the namespace, with their writers' liveness.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, Result};
use serde::Serialize;
use topdeck::{Namespace, RegistryEntry};

use crate::render;
use crate::select::warn;

/// The `--json` shape: `{"registries":[...],"errors":[...]}`.
#[derive(Serialize)]
struct Listing<'a> {
    registries: Vec<Entry<'a>>,
    errors: Vec<String>,
    /// Other users' directories this reader may not open.
    private_dirs: usize,
}

#[derive(Serialize)]
struct Entry<'a> {
    path: &'a Path,
    pid: u32,
    uid: u32,
    start_ticks: u64,
    process: &'a str,
    registry: &'a str,
    metrics: u32,
    state: &'static str,
    created_unix_ns: u64,
    /// The writer's container, from its cgroup; null for the system's.
    container: Option<&'a str>,
}

impl<'a> From<&'a RegistryEntry> for Entry<'a> {
    fn from(e: &'a RegistryEntry) -> Self {
        Self {
            path: &e.path,
            pid: e.pid,
            uid: e.uid,
            start_ticks: e.start_ticks,
            process: &e.process_name,
            registry: &e.registry_name,
            metrics: e.metrics,
            state: render::state(e.liveness),
            created_unix_ns: e.created_unix_ns,
            container: e.container.as_deref(),
        }
    }
}

/// Lists the namespace; unreadable files are warnings (or `errors` in
/// JSON). A namespace directory that cannot be read at all (unsafe,
/// unreadable, or a `TOPDECK_DIR` that is missing) fails the command once
/// everything else is listed.
pub fn run(out: &mut impl Write, json: bool) -> Result<()> {
    let ns = Namespace::host();
    let listing = ns.list();
    if json {
        let shape = Listing {
            registries: listing.entries.iter().map(Entry::from).collect(),
            errors: listing.errors.iter().map(ToString::to_string).collect(),
            private_dirs: listing.private.len(),
        };
        serde_json::to_writer_pretty(&mut *out, &shape)?;
        writeln!(out)?;
        return unusable(&listing);
    }
    for e in &listing.errors {
        warn(e);
    }
    if !listing.private.is_empty() {
        eprintln!(
            "note: {} other users' directories are private to them; run as root to list them",
            listing.private.len()
        );
    }
    list(out, &ns, &listing)?;
    unusable(&listing)
}

fn unusable(listing: &topdeck::Listing) -> Result<()> {
    match listing.unusable.as_slice() {
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

fn list(out: &mut impl Write, ns: &Namespace, listing: &topdeck::Listing) -> Result<()> {
    if listing.entries.is_empty() {
        writeln!(out, "no registries in {}", ns.describe())?;
        return Ok(());
    }
    let mut rows = vec![[
        "PID",
        "UID",
        "PROCESS",
        "REGISTRY",
        "METRICS",
        "STATE",
        "AGE",
        "CONTAINER",
        "FILE",
    ]
    .map(String::from)
    .to_vec()];
    rows.extend(listing.entries.iter().map(|e| {
        vec![
            e.pid.to_string(),
            e.uid.to_string(),
            e.process_name.clone(),
            e.registry_name.clone(),
            e.metrics.to_string(),
            render::state(e.liveness).to_owned(),
            render::age(e.created_unix_ns),
            e.container.clone().unwrap_or_else(|| "-".into()),
            e.path.display().to_string(),
        ]
    }));
    for line in render::table(&rows) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
