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

use crate::select::warn;

/// The `--json` shape: `{"removed":[paths],"errors":[messages]}`.
#[derive(Serialize)]
struct Report {
    removed: Vec<String>,
    errors: Vec<String>,
}

/// Collects dead writers' files; files left alone for a reason are
/// warnings (or `errors` in JSON), not a failure of the command.
pub fn run(out: &mut impl Write, json: bool) -> Result<()> {
    let report = Namespace::host().gc();
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
        return Ok(());
    }
    for e in &report.errors {
        warn(e);
    }
    for p in &report.removed {
        writeln!(out, "removed {}", p.display())?;
    }
    let n = report.removed.len();
    writeln!(
        out,
        "{n} file{} of dead writers removed",
        if n == 1 { "" } else { "s" }
    )?;
    Ok(())
}
