// SPDX-License-Identifier: Apache-2.0
//! `topdeck ls`: the registries in the namespace, with their writers' liveness.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use topdeck::{Namespace, RegistryEntry};

use crate::render;
use crate::select::warn;

/// The `--json` shape: `{"registries":[...],"errors":[...]}`.
#[derive(Serialize)]
struct Listing<'a> {
    registries: Vec<Entry<'a>>,
    errors: Vec<String>,
}

#[derive(Serialize)]
struct Entry<'a> {
    path: &'a Path,
    pid: u32,
    start_ticks: u64,
    process: &'a str,
    registry: &'a str,
    metrics: u32,
    state: &'static str,
    created_unix_ns: u64,
}

impl<'a> From<&'a RegistryEntry> for Entry<'a> {
    fn from(e: &'a RegistryEntry) -> Self {
        Self {
            path: &e.path,
            pid: e.pid,
            start_ticks: e.start_ticks,
            process: &e.process_name,
            registry: &e.registry_name,
            metrics: e.metrics,
            state: render::state(e.liveness),
            created_unix_ns: e.created_unix_ns,
        }
    }
}

/// Lists the namespace; unreadable files are warnings (or `errors` in
/// JSON), never a failure of the command.
pub fn run(out: &mut impl Write, json: bool) -> Result<()> {
    let ns = Namespace::host();
    let listing = ns.list();
    if json {
        let shape = Listing {
            registries: listing.entries.iter().map(Entry::from).collect(),
            errors: listing.errors.iter().map(ToString::to_string).collect(),
        };
        serde_json::to_writer_pretty(&mut *out, &shape)?;
        writeln!(out)?;
        return Ok(());
    }
    for e in &listing.errors {
        warn(e);
    }
    if listing.entries.is_empty() {
        let dirs: Vec<String> = ns.dirs().iter().map(|d| d.display().to_string()).collect();
        let where_ = if dirs.is_empty() {
            "/dev/shm/topdeck-*".to_owned()
        } else {
            dirs.join(", ")
        };
        writeln!(out, "no registries in {where_}")?;
        return Ok(());
    }
    let mut rows = vec![[
        "PID", "PROCESS", "REGISTRY", "METRICS", "STATE", "AGE", "FILE",
    ]
    .map(String::from)
    .to_vec()];
    rows.extend(listing.entries.iter().map(|e| {
        vec![
            e.pid.to_string(),
            e.process_name.clone(),
            e.registry_name.clone(),
            e.metrics.to_string(),
            render::state(e.liveness).to_owned(),
            render::age(e.created_unix_ns),
            e.path.display().to_string(),
        ]
    }));
    for line in render::table(&rows) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
