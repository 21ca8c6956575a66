// SPDX-License-Identifier: Apache-2.0
//! What the fuzz targets share: a registry file on disk made of the
//! fuzzer's bytes, and a walk over everything a snapshot offers, so that
//! the maths behind each accessor runs on hostile values too.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use topdeck::{RegistryReader, Snapshot, Value};
use topdeck_format::layout::{FILE_LEN_OFFSET, MAX_FILE_LEN};

/// One file per fuzzing process, rewritten for every input and removed
/// once read (a crash may leave the last one behind, in the temporary
/// directory).
fn scratch() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("topdeck-fuzz-{}.topdeck", std::process::id()))
    })
}

/// The `file_len` the bytes claim, if they reach that far.
fn claimed_len(data: &[u8]) -> Option<u64> {
    let b = data.get(FILE_LEN_OFFSET..FILE_LEN_OFFSET + 8)?;
    Some(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// Writes `data` as a registry file and opens a reader on it. A file that
/// claims more bytes than it has (up to the format's limit) is extended
/// with a hole to that length first, as a hostile user's sparse file is:
/// its claims then cost its author nothing, and the reader must still
/// bound what it reads. The file is unlinked before `f` runs; the
/// reader's mapping keeps it readable.
pub fn with_reader<R>(data: &[u8], f: impl FnOnce(&mut RegistryReader) -> R) -> Option<R> {
    let path = scratch();
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("create the scratch file");
    file.write_all(data).expect("write the scratch file");
    if let Some(claim) = claimed_len(data) {
        if claim > data.len() as u64 && claim <= MAX_FILE_LEN {
            file.set_len(claim).expect("extend the scratch file");
        }
    }
    drop(file);
    let reader = RegistryReader::open(path);
    std::fs::remove_file(path).expect("remove the scratch file");
    let mut reader = reader.ok()?;
    Some(f(&mut reader))
}

/// Calls every accessor of every value: quantiles, means and bucket
/// bounds are computed from the file's numbers.
pub fn exercise(snap: &Snapshot) {
    let _ = snap.len();
    for (info, value) in snap.iter() {
        assert!(!info.name.is_empty());
        if let Value::Histogram(h) = value {
            for q in [0.0, 0.01, 0.5, 0.99, 1.0] {
                let _ = h.quantile(q);
            }
            let _ = h.mean();
            for (bound, n) in h.nonzero_buckets() {
                assert!(n > 0);
                assert!(!bound.is_nan(), "a bucket bound is NaN in {h:?}");
            }
        }
    }
}
