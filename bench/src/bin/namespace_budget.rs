// SPDX-License-Identifier: Apache-2.0
//! What a directory full of dead writers' files costs a listing, the
//! first time and every time after: a user who leaves `--files` dead
//! registries (hard links to one, as an attacker makes them cheaply) beside
//! one live registry. Prints one JSON line: the first listing's time, the
//! median, min and max of `--rounds` later ones, and what was listed.
//!
//! `cargo run --release -p topdeck-bench --bin namespace_budget -- --files 100000`

use std::time::{Duration, Instant};

use anyhow::Result;
use topdeck::{Liveness, Namespace, Registry};

const USAGE: topdeck_bench::Usage = topdeck_bench::Usage::new(
    "namespace_budget",
    "[--files N] [--rounds N]
  --files N:  dead registries beside the live one (100000)
  --rounds N: listings timed after the first (20)",
);

fn main() -> Result<()> {
    let mut files = 100_000usize;
    let mut rounds = 20usize;
    let mut args = USAGE.args().into_iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--files" => files = USAGE.parse(&a, args.next().as_deref()),
            "--rounds" => rounds = USAGE.parse(&a, args.next().as_deref()),
            other => USAGE.fail(format_args!("unknown argument {other:?}")),
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("td-budget-")
        .tempdir_in("/dev/shm")?;
    // One dead registry: written by a child that is killed, so its lock is gone.
    let dead = {
        let d = tempfile::Builder::new()
            .prefix("td-budget-src-")
            .tempdir_in("/dev/shm")?;
        let r = Registry::builder().dir(d.path()).metrics(8).build()?;
        r.counter("left_total", &[], "", "")?.inc();
        let bytes = std::fs::read(r.path())?;
        drop(r);
        bytes
    };
    let first = dir.path().join("1-1-0.topdeck");
    std::fs::write(&first, &dead)?;
    for i in 1..files {
        std::fs::hard_link(&first, dir.path().join(format!("1-1-{i}.topdeck")))?;
    }
    let live = Registry::builder().dir(dir.path()).build()?;
    live.counter("alive_total", &[], "", "")?.inc();

    let ns = Namespace::at(dir.path());
    let t = Instant::now();
    let listing = ns.list();
    let first_ms = ms(t.elapsed());
    let mut later = Vec::with_capacity(rounds);
    let mut listed = (0, 0);
    for _ in 0..rounds {
        let t = Instant::now();
        let l = ns.list();
        later.push(ms(t.elapsed()));
        listed = (
            l.entries.len(),
            l.entries
                .iter()
                .filter(|e| e.liveness == Liveness::Alive)
                .count(),
        );
    }
    later.sort_by(f64::total_cmp);
    println!(
        "{}",
        serde_json::json!({
            "files": files,
            "first_ms": first_ms,
            "later_ms": {"min": later[0], "median": later[later.len() / 2], "max": later[later.len() - 1]},
            "listed": listed.0,
            "alive": listed.1,
            "errors": listing.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
