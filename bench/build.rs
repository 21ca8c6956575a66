// SPDX-License-Identifier: Apache-2.0
//! Compiles the overhead benchmark's comparison BPF programs (`bpf/`) with
//! clang and generates their libbpf-rs skeletons into OUT_DIR for
//! `sched_overhead`. They share the probe's headers (its pinned vmlinux.h,
//! `sched.h`, the CO-RE fixes), read from the probe crate's source tree so
//! the baseline stays comparable with the programs the agent loads.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// (source, skeleton file) pairs: the per-event ring-buffer baseline and
/// the empty-program floor.
const PROGRAMS: &[(&str, &str)] = &[
    ("bpf/ringbuf.bpf.c", "ringbuf.skel.rs"),
    ("bpf/floor.bpf.c", "floor.skel.rs"),
];

/// The probe's BPF directory, holding the headers both programs include.
const PROBE_BPF: &str = "../crates/topdeck-sched/src/bpf";

const HEADERS: &[&str] = &["sched.h", "core_fixes.bpf.h", "vmlinux/x86_64/vmlinux.h"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets the target arch");
    if arch != "x86_64" {
        panic!("the probe pins vmlinux.h for x86_64 only; generate {PROBE_BPF}/vmlinux/{arch}/vmlinux.h");
    }
    for h in HEADERS {
        println!("cargo:rerun-if-changed={PROBE_BPF}/{h}");
    }
    for (src, skel) in PROGRAMS {
        println!("cargo:rerun-if-changed={src}");
        SkeletonBuilder::new()
            .source(src)
            .clang_args([
                "-Wall",
                "-O2",
                "-D__TARGET_ARCH_x86",
                &format!("-I{PROBE_BPF}"),
            ])
            .build_and_generate(out.join(skel))
            .unwrap_or_else(|e| panic!("building {src}: {e:#}"));
    }
}
