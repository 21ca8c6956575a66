// SPDX-License-Identifier: Apache-2.0
//! What another user's porthole files cost root's looks, the way `ls`
//! and `serve --all-users` look (every user's) and the way `serve` looks
//! without `--all-users` (its own user's only): a `/tmp/hsperfdata_<x>`
//! of `--files` empty files, and a prometheus_client directory holding one
//! `counter_1.db` of `--keys` distinct keys, named by a process of that
//! user. Root only; the other user is `--uid` (1000). Prints one JSON line
//! per scenario and look: the median, min and max of `--rounds` looks, ms,
//! and how many errors the last look reported.
//!
//! `cargo run --release -p topdeck-bench --bin porthole_budget -- --files 200000 --keys 1000000`

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use topdeck_sources::{Config, Portholes, Tracker};

const USAGE: topdeck_bench::Usage = topdeck_bench::Usage::new(
    "porthole_budget",
    "[--files N] [--keys N] [--rounds N] [--uid N]
  --files N:  files in the other user's hsperfdata directory (200000)
  --keys N:   keys in its prometheus_client file (1000000)
  --rounds N: looks timed per scenario (5)
  --uid N:    the other user (1000)
Root only.",
);

fn main() -> Result<()> {
    let (mut files, mut keys, mut rounds, mut uid) =
        (200_000usize, 1_000_000usize, 5usize, 1000u32);
    let mut args = USAGE.args().into_iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--files" => files = USAGE.parse(&a, args.next().as_deref()),
            "--keys" => keys = USAGE.parse(&a, args.next().as_deref()),
            "--rounds" => rounds = USAGE.parse(&a, args.next().as_deref()),
            "--uid" => uid = USAGE.parse(&a, args.next().as_deref()),
            other => USAGE.fail(format_args!("unknown argument {other:?}")),
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("run as root: the looks measured are root's, of another user's files");
    }
    let me = std::process::id();

    let jvms = Removed(PathBuf::from(format!("/tmp/hsperfdata_tdbudget{me}")));
    make_dir(&jvms.0, uid)?;
    for i in 0..files {
        let f = jvms.0.join((4_000_000 + i).to_string());
        std::fs::File::create(&f)?;
        chown(&f, uid)?;
    }
    let only = |jvm, prommp| Config {
        jvm,
        aeron: false,
        mmv: false,
        prommp_from_environ: prommp,
        ..Config::default()
    };
    measure("hsperfdata", files, rounds, only(true, false))?;
    drop(jvms);

    let python = Removed(PathBuf::from(format!("/tmp/td-budget-prommp-{me}")));
    make_dir(&python.0, uid)?;
    let db = python.0.join("counter_1.db");
    std::fs::write(&db, counter_db(keys))?;
    chown(&db, uid)?;
    let _worker = Killed(
        Command::new("setpriv")
            .args([
                "--reuid",
                &uid.to_string(),
                "--regid",
                &uid.to_string(),
                "--clear-groups",
            ])
            .args(["sleep", "600"])
            .env("PROMETHEUS_MULTIPROC_DIR", &python.0)
            .stdin(Stdio::null())
            .spawn()
            .context("starting a process of the other user (setpriv)")?,
    );
    std::thread::sleep(Duration::from_millis(200));
    measure("prommp", keys, rounds, only(false, true))?;
    Ok(())
}

/// Times `rounds` looks of every user's portholes, then of root's own.
fn measure(scenario: &str, size: usize, rounds: usize, config: Config) -> Result<()> {
    for (look, owner) in [("every_user", None), ("own_user", Some(0))] {
        // The portholes alone: a namespace of no registries.
        let none = tempfile::tempdir()?;
        let portholes = Portholes::new(Config {
            owner,
            ..config.clone()
        });
        let mut p = Tracker::<()>::new(topdeck::Namespace::at(none.path()), Some(portholes));
        let mut ms = Vec::with_capacity(rounds);
        let mut errors = 0;
        for _ in 0..rounds {
            let t = Instant::now();
            let l = p.look();
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            errors = l.errors.len();
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "{}",
            serde_json::json!({
                "scenario": scenario, "size": size, "look": look,
                "median_ms": ms[ms.len() / 2], "min_ms": ms[0], "max_ms": ms[ms.len() - 1],
                "errors": errors,
            })
        );
    }
    Ok(())
}

/// A prometheus_client `counter_*.db` of `keys` distinct keys.
fn counter_db(keys: usize) -> Vec<u8> {
    let keys: Vec<String> = (0..keys)
        .map(|i| format!(r#"["c", "c_total", {{"k": "{i}"}}, "c"]"#))
        .collect();
    let entries: Vec<(&[u8], f64, f64)> = keys.iter().map(|k| (k.as_bytes(), 1.0, 0.0)).collect();
    topdeck_portholes::prommp::file_of(&entries)
}

fn make_dir(dir: &Path, uid: u32) -> Result<()> {
    std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    chown(dir, uid)
}

fn chown(path: &Path, uid: u32) -> Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(uid))
        .with_context(|| format!("chown {}", path.display()))
}

/// A directory this bench made, removed with everything in it.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A process this bench started, killed by its pid.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
