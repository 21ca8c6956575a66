// SPDX-License-Identifier: Apache-2.0
//! `topdeck gc`: remove the files of dead writers, and only those. The
//! library removes a file only when no process that could be its writer
//! holds its lock, and only through the directory descriptor it verified,
//! so neither a live registry nor another user's file can be removed by
//! mistake or by a swapped path.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;
use topdeck::Namespace;

use crate::select::{unusable, warn};

/// The `--json` shape: `{"removed":[paths],"errors":[messages]}` (with
/// `--dry-run`, `removed` lists what would be).
#[derive(Serialize)]
struct Report {
    removed: Vec<String>,
    errors: Vec<String>,
}

/// Collects dead writers' files (with `dry_run`, lists what it would
/// remove); files left alone for a reason are warnings (or `errors` in
/// JSON), not a failure of the command. A namespace directory of the
/// caller's that cannot be read at all fails it, as it fails `ls`.
pub fn run(out: &mut impl Write, json: bool, dry_run: bool) -> Result<()> {
    let report = match dry_run {
        true => Namespace::host().gc_dry_run(),
        false => Namespace::host().gc(),
    };
    let (verb, done) = match dry_run {
        true => ("would remove", "would be removed (dry run: nothing was)"),
        false => ("removed", "removed"),
    };
    if json {
        let shape = Report {
            removed: report
                .removed
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            errors: report.errors.iter().map(ToString::to_string).collect(),
        };
        serde_json::to_writer_pretty(&mut *out, &shape)?;
        writeln!(out)?;
        return unusable(&report.unusable);
    }
    for e in &report.errors {
        warn(e);
    }
    for p in &report.removed {
        writeln!(out, "{verb} {}", p.display())?;
    }
    let n = report.removed.len();
    writeln!(
        out,
        "{n} file{} of dead writers {done}",
        if n == 1 { "" } else { "s" }
    )?;
    unusable(&report.unusable)
}
