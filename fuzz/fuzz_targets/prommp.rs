// SPDX-License-Identifier: Apache-2.0
//! prometheus_client multiprocess `*.db` bytes to `prommp::parse`, then, as
//! a file in a directory, to `read_dir` and `to_text` (the merge and the
//! exposition).
//!
//! Input: one byte choosing the file's kind (counter, histogram, summary or
//! one of the gauge modes), then the file's bytes.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use topdeck_portholes::prommp::{parse, read_dir_with, DeadWorkers};

const NAMES: [&str; 13] = [
    "counter_1.db",
    "histogram_1.db",
    "summary_1.db",
    "gauge_all_1.db",
    "gauge_liveall_1.db",
    "gauge_min_1.db",
    "gauge_livemin_1.db",
    "gauge_max_1.db",
    "gauge_livemax_1.db",
    "gauge_sum_1.db",
    "gauge_livesum_1.db",
    "gauge_mostrecent_1.db",
    "gauge_livemostrecent_1.db",
];

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("topdeck-fuzz-prommp-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    let parsed = parse(bytes);
    let dir = dir();
    for name in NAMES {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let name = NAMES[usize::from(kind) % NAMES.len()];
    std::fs::write(dir.join(name), bytes).unwrap();
    let merged = read_dir_with(dir, DeadWorkers::KeepAll).unwrap();
    match &parsed {
        Ok(entries) => {
            assert!(merged.errors.iter().all(|e| e.path == *dir), "{:?}", merged.errors);
            assert_eq!(merged.files.len(), 1);
            assert_eq!(merged.files[0].entries, entries.len());
            // Every entry takes at least 24 bytes: a bound the parser keeps.
            assert!(entries.len() * 24 <= bytes.len());
        }
        Err(_) => {
            assert!(merged.files.is_empty() && merged.families.is_empty());
            assert_eq!(merged.errors.len(), 1);
        }
    }
    let text = merged.to_text();
    assert!(text.is_empty() || text.ends_with('\n'));
    // Same bytes, same text: the merge depends on nothing else.
    assert_eq!(read_dir_with(dir, DeadWorkers::KeepAll).unwrap().to_text(), text);
});
