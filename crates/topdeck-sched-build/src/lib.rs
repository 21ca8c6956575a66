// SPDX-License-Identifier: Apache-2.0
//! Builds the scheduler probe (`crates/topdeck-sched/src/bpf`) with clang
//! into its BPF object and libbpf-rs skeleton, which `topdeck-sched`
//! commits beside the sources (`sched.bpf.o`, `sched.skel.rs`): building
//! topdeck then needs neither clang nor this generator and its
//! dependencies, the largest part of the probe's build. This crate's test
//! fails when the committed pair is not what the sources build; its binary
//! writes them:
//!
//! ```sh
//! cargo run -p topdeck-sched-build    # after changing src/bpf; commit both files
//! ```
//!
//! The object is the same byte for byte wherever the tree is checked out:
//! clang is given the sources by absolute path and names them from the
//! probe crate's root (`-ffile-prefix-map`), and the BTF line information
//! keeps no other path.

use std::io;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

/// What clang is given besides the generator's own `-g -O2 -target bpf`,
/// with the include directory and the prefix map.
const CLANG_ARGS: &[&str] = &["-Wall", "-O2", "-D__TARGET_ARCH_x86"];

/// The committed object, from the probe crate's root.
pub const OBJECT: &str = "src/bpf/sched.bpf.o";
/// The committed skeleton, which includes [`OBJECT`] by its file name.
pub const SKELETON: &str = "src/bpf/sched.skel.rs";

/// The probe crate's root.
pub fn probe_crate() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../topdeck-sched")
}

/// The probe as its sources build it now.
#[derive(Debug)]
pub struct Built {
    /// The BPF object.
    pub object: Vec<u8>,
    /// Its skeleton, including the object as `sched.bpf.o` (beside it).
    pub skeleton: String,
}

/// Builds the probe from the sources under [`probe_crate`].
///
/// ```no_run
/// let built = topdeck_sched_build::build().unwrap();
/// assert!(built.skeleton.contains("include_bytes!(\"sched.bpf.o\")"));
/// ```
pub fn build() -> io::Result<Built> {
    let root = probe_crate().canonicalize()?;
    let out = tempfile::tempdir()?;
    let obj = out.path().join("sched.bpf.o");
    let skel = out.path().join("sched.skel.rs");
    let include = format!("-I{}", root.join("src/bpf").display());
    let map = format!("-ffile-prefix-map={}=/topdeck-sched", root.display());
    let mut args = CLANG_ARGS.to_vec();
    args.extend([include.as_str(), map.as_str()]);
    SkeletonBuilder::new()
        .source(root.join("src/bpf/sched.bpf.c"))
        .obj(&obj)
        .reference_obj(true)
        .clang_args(args)
        .build_and_generate(&skel)
        .map_err(|e| {
            io::Error::other(format!(
                "building the probe from src/bpf (clang and llvm-strip are needed: \
                 scripts/deps.sh installs them): {e:#}"
            ))
        })?;
    let object = std::fs::read(&obj)?;
    // The generator includes the object by the absolute path it built to.
    let built_at = format!("include_bytes!(\"{}\")", obj.canonicalize()?.display());
    let skeleton = std::fs::read_to_string(&skel)?;
    if !skeleton.contains(&built_at) {
        return Err(io::Error::other(format!(
            "the generated skeleton does not include its object as {built_at}"
        )));
    }
    let skeleton = skeleton.replace(&built_at, "include_bytes!(\"sched.bpf.o\")");
    Ok(Built { object, skeleton })
}

/// Writes `built` where `topdeck-sched` includes it from.
pub fn write(built: &Built) -> io::Result<()> {
    let root = probe_crate();
    std::fs::write(root.join(OBJECT), &built.object)?;
    std::fs::write(root.join(SKELETON), &built.skeleton)
}

/// What differs between `built` and the committed pair, if anything; the
/// skeleton is compared token by token, so a rustfmt that lays it out
/// otherwise does not count.
pub fn differs(built: &Built) -> Option<String> {
    let root = probe_crate();
    let object = std::fs::read(root.join(OBJECT)).unwrap_or_default();
    if object != built.object {
        return Some(format!(
            "{OBJECT} ({} bytes) is not what src/bpf builds ({} bytes)",
            object.len(),
            built.object.len()
        ));
    }
    let tokens = |s: &str| s.split_whitespace().collect::<String>();
    let skeleton = std::fs::read_to_string(root.join(SKELETON)).unwrap_or_default();
    (tokens(&skeleton) != tokens(&built.skeleton))
        .then(|| format!("{SKELETON} is not the skeleton of what src/bpf builds"))
}
