// SPDX-License-Identifier: Apache-2.0
//! The experiments. Each has a `Config` (with a `quick` form that runs in
//! seconds for `make test`), a `run` returning a serialisable result, and
//! text tables of that result; [`save`] writes a result where the report
//! finds it.

pub mod contend;
pub mod idle;
pub mod observer;
pub mod selftest;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{Error, Result};

/// Writes `result` as `<dir>/<name>.json` (creating `dir`) and returns the path.
pub fn save(dir: &Path, name: &str, result: &impl Serialize) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let path = dir.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(result)
        .map_err(|e| Error::new(crate::ErrorKind::Report, format!("encode {name}: {e}")))?;
    std::fs::write(&path, text).map_err(|e| Error::io(format!("write {}", path.display()), e))?;
    Ok(path)
}

/// Seconds since the Unix epoch, for stamping results.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A one-line description of the machine: CPUs, kernel, model name.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    format!("{cpus} CPUs, Linux {kernel}, {model}")
}

/// Median of `v` (sorts it); 0 when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
