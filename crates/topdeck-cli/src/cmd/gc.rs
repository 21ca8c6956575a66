// SPDX-License-Identifier: Apache-2.0
//! `topdeck gc`: remove the files of dead writers.

use anyhow::Result;
use serde::Serialize;
use topdeck::Namespace;

#[derive(Serialize)]
struct Report {
    removed: Vec<String>,
    errors: Vec<String>,
}

pub fn run(json: bool) -> Result<()> {
    let report = Namespace::host().gc();
    if json {
        let out = Report {
            removed: report
                .removed
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            errors: report.errors.iter().map(ToString::to_string).collect(),
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    for e in &report.errors {
        eprintln!("warning: {e}");
    }
    for p in &report.removed {
        println!("removed {}", p.display());
    }
    println!("{} file(s) of dead writers removed", report.removed.len());
    Ok(())
}
