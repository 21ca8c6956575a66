// SPDX-License-Identifier: Apache-2.0
//! `topdeck ls`: every source on the host, topdeck's registries and other
//! runtimes' portholes alike, with their writers and liveness, from one
//! look (one walk of `/proc`).

use std::io::Write;

use anyhow::Result;
use serde::Serialize;
use topdeck::Namespace;
use topdeck_sources::{Kind, Look, Source, Tracker};

use crate::render;
use crate::select::{unusable, warn};
use crate::sources::PortholeArgs;

/// The `--json` shape: `{"registries":[...],"portholes":[...],"errors":[...]}`,
/// every entry a source as the look found it.
#[derive(Serialize)]
struct Listing<'a> {
    /// topdeck's own registries.
    registries: Vec<&'a Source>,
    /// Other runtimes' sources (JVMs, prometheus_client directories,
    /// Aeron drivers).
    portholes: Vec<&'a Source>,
    errors: Vec<String>,
    /// Other users' directories this reader may not open.
    private_dirs: usize,
}

/// Lists every source; unreadable files are warnings (or `errors` in
/// JSON). A namespace directory that cannot be read at all (unsafe,
/// unreadable, or a `TOPDECK_DIR` that is missing) fails the command once
/// everything else is listed.
pub fn run(out: &mut impl Write, sources: &PortholeArgs, json: bool) -> Result<()> {
    let mut tracker = Tracker::<()>::new(Namespace::host(), sources.portholes());
    let look = tracker.look();
    if json {
        let (registries, portholes) = look.sources.iter().partition(|s| s.kind == Kind::Topdeck);
        let shape = Listing {
            registries,
            portholes,
            errors: look.errors.iter().map(ToString::to_string).collect(),
            private_dirs: look.private.len(),
        };
        serde_json::to_writer_pretty(&mut *out, &shape)?;
        writeln!(out)?;
        return unusable(&look.unusable);
    }
    for e in &look.errors {
        warn(e);
    }
    if !look.private.is_empty() {
        eprintln!(
            "note: {} other users' directories are private to them; run as root to list them",
            look.private.len()
        );
    }
    list(out, tracker.namespace(), &look)?;
    unusable(&look.unusable)
}

fn list(out: &mut impl Write, ns: &Namespace, look: &Look) -> Result<()> {
    if look.sources.is_empty() {
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
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    rows.extend(look.sources.iter().map(|s| {
        vec![
            s.kind.name().to_owned(),
            or_dash(s.pid.map(|p| p.to_string())),
            or_dash(s.uid.map(|u| u.to_string())),
            s.process.clone(),
            or_dash(s.registry.clone()),
            s.metrics.to_string(),
            render::state(s.liveness).to_owned(),
            or_dash(s.created_unix_ns.map(render::age)),
            or_dash(s.container.clone()),
            s.path.display().to_string(),
        ]
    }));
    for line in render::table(&rows) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
