// SPDX-License-Identifier: Apache-2.0
//! `topdeck ls`: the registries on this host.

use anyhow::Result;
use serde::Serialize;
use topdeck::{Namespace, RegistryEntry};

use crate::render;

#[derive(Serialize)]
struct Listing<'a> {
    registries: Vec<Entry<'a>>,
    errors: Vec<String>,
}

#[derive(Serialize)]
struct Entry<'a> {
    path: &'a std::path::Path,
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

pub fn run(json: bool) -> Result<()> {
    let ns = Namespace::host();
    let listing = ns.list();
    if json {
        let out = Listing {
            registries: listing.entries.iter().map(Entry::from).collect(),
            errors: listing.errors.iter().map(ToString::to_string).collect(),
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    for e in &listing.errors {
        eprintln!("warning: {e}");
    }
    println!(
        "{:>8}  {:<24} {:<10} {:>7}  {:<5} {:>5}  FILE",
        "PID", "PROCESS", "REGISTRY", "METRICS", "STATE", "AGE"
    );
    for e in &listing.entries {
        println!(
            "{:>8}  {:<24} {:<10} {:>7}  {:<5} {:>5}  {}",
            e.pid,
            e.process_name,
            e.registry_name,
            e.metrics,
            render::state(e.liveness),
            render::age(e.created_unix_ns),
            e.path.display()
        );
    }
    if listing.entries.is_empty() {
        let dirs: Vec<String> = ns.dirs().iter().map(|d| d.display().to_string()).collect();
        println!("(no registries in {})", dirs.join(", "));
    }
    Ok(())
}
