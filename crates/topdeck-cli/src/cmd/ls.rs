// SPDX-License-Identifier: Apache-2.0
//! `topdeck ls`: the registries in the namespace, with their writers'
//! liveness, and other runtimes' portholes beside them.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, Result};
use serde::Serialize;
use topdeck::{Namespace, RegistryEntry};
use topdeck_sources::{Found, Look};

use crate::render;
use crate::select::warn;
use crate::sources::PortholeArgs;

/// The `--json` shape: `{"registries":[...],"portholes":[...],"errors":[...]}`.
#[derive(Serialize)]
struct Listing<'a> {
    registries: Vec<Entry<'a>>,
    /// Other runtimes' sources (JVMs, prometheus_client directories,
    /// Aeron drivers).
    portholes: Vec<Porthole<'a>>,
    errors: Vec<String>,
    /// Other users' directories this reader may not open.
    private_dirs: usize,
}

/// A porthole in `--json`.
#[derive(Serialize)]
struct Porthole<'a> {
    #[serde(flatten)]
    found: &'a Found,
    state: &'static str,
    metrics: usize,
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
pub fn run(out: &mut impl Write, sources: &PortholeArgs, json: bool) -> Result<()> {
    let ns = Namespace::host();
    let listing = ns.list();
    let look = sources
        .portholes()
        .map(|mut p| p.look())
        .unwrap_or_default();
    if json {
        let shape = Listing {
            registries: listing.entries.iter().map(Entry::from).collect(),
            portholes: look
                .readings
                .iter()
                .map(|r| Porthole {
                    found: &r.found,
                    state: state(&r.found),
                    metrics: r.snapshot.len(),
                })
                .collect(),
            errors: listing
                .errors
                .iter()
                .map(ToString::to_string)
                .chain(look.errors.iter().cloned())
                .collect(),
            private_dirs: listing.private.len(),
        };
        serde_json::to_writer_pretty(&mut *out, &shape)?;
        writeln!(out)?;
        return unusable(&listing);
    }
    for e in &listing.errors {
        warn(e);
    }
    for e in &look.errors {
        warn(e);
    }
    if !listing.private.is_empty() {
        eprintln!(
            "note: {} other users' directories are private to them; run as root to list them",
            listing.private.len()
        );
    }
    list(out, &ns, &listing, &look)?;
    unusable(&listing)
}

fn state(found: &Found) -> &'static str {
    match found.alive {
        true => "alive",
        false => "dead",
    }
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

fn list(
    out: &mut impl Write,
    ns: &Namespace,
    listing: &topdeck::Listing,
    look: &Look,
) -> Result<()> {
    if listing.entries.is_empty() && look.readings.is_empty() {
        writeln!(out, "no registries in {}", ns.describe())?;
        return Ok(());
    }
    let mut rows = vec![[
        "SOURCE",
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
            "topdeck".to_owned(),
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
    rows.extend(look.readings.iter().map(|r| {
        let f = &r.found;
        let uid = std::fs::symlink_metadata(&f.path).map_or_else(
            |_| "-".into(),
            |m| std::os::unix::fs::MetadataExt::uid(&m).to_string(),
        );
        vec![
            f.kind.name().to_owned(),
            f.pid.map_or_else(|| "-".into(), |p| p.to_string()),
            uid,
            f.process.clone(),
            "-".to_owned(),
            r.snapshot.len().to_string(),
            state(f).to_owned(),
            "-".to_owned(),
            f.container.clone().unwrap_or_else(|| "-".into()),
            f.path.display().to_string(),
        ]
    }));
    for line in render::table(&rows) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
