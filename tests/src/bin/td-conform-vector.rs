// SPDX-License-Identifier: Apache-2.0
//! Turns a registry file written by the conformance writer into a
//! reference file for conformance/vectors/: `td-conform-vector <file> <out>`.
//!
//! The file is packed as the fuzz seeds are (sections at 8-byte
//! alignment; pid, start time and creation time fixed), and what depends
//! on the run rather than on the script is made canonical: the clock area
//! (the writer's clock calibration) is zeroed, which the format reads as
//! "no clock parameters", and the shards in use are sorted by their bytes,
//! since which thread got which shard index is the scheduler's choice.
//! With `td-conform-writer --fixed-durations` the result is then the same
//! on every run.

use std::path::PathBuf;

use anyhow::{Context, Result};
use topdeck_format::layout::{CLOCK_LEN, CLOCK_OFFSET};
use topdeck_format::Header;
use topdeck_tests::packed;

fn main() -> Result<()> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let (Some(file), Some(out)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: td-conform-vector <registry file> <out>");
    };
    let bytes = std::fs::read(&file).with_context(|| format!("read {}", file.display()))?;
    Header::parse(&bytes, bytes.len() as u64)
        .with_context(|| format!("{} is not a registry file", file.display()))?;
    let mut v = packed(&bytes);
    v[CLOCK_OFFSET..CLOCK_OFFSET + CLOCK_LEN].fill(0);
    let h = Header::parse(&v, v.len() as u64).context("the packed file parses")?;
    let (start, len) = (h.shards_offset as usize, (h.shard_len as usize).max(1));
    // Shards in use only; the overflow shard stays last.
    let mut shards: Vec<Vec<u8>> = v[start..start + h.shards_in_use as usize * len]
        .chunks(len)
        .map(<[u8]>::to_vec)
        .collect();
    shards.sort();
    v[start..start + shards.len() * len].copy_from_slice(&shards.concat());
    std::fs::write(&out, &v).with_context(|| format!("write {}", out.display()))
}
