// SPDX-License-Identifier: Apache-2.0
//! Compiles the BPF programs with clang and generates their libbpf-rs
//! skeletons into OUT_DIR. vmlinux.h is pinned in the source tree (generated
//! once with `bpftool btf dump file /sys/kernel/btf/vmlinux format c`), so
//! the build never depends on the build host's kernel.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// (source, skeleton file) pairs: the probe the agent loads. The overhead
/// benchmark's baselines are built by `bench/build.rs`.
const PROGRAMS: &[(&str, &str)] = &[("src/bpf/sched.bpf.c", "sched.skel.rs")];

const HEADERS: &[&str] = &[
    "src/bpf/sched.h",
    "src/bpf/core_fixes.bpf.h",
    "src/bpf/vmlinux/x86_64/vmlinux.h",
];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets the target arch");
    if arch != "x86_64" {
        panic!("topdeck-sched pins vmlinux.h for x86_64 only; generate src/bpf/vmlinux/{arch}/vmlinux.h");
    }
    for h in HEADERS {
        println!("cargo:rerun-if-changed={h}");
    }
    for (src, skel) in PROGRAMS {
        println!("cargo:rerun-if-changed={src}");
        SkeletonBuilder::new()
            .source(src)
            .clang_args(["-Wall", "-O2", "-D__TARGET_ARCH_x86", "-Isrc/bpf"])
            .build_and_generate(out.join(skel))
            .unwrap_or_else(|e| panic!("building {src}: {e:#}"));
    }
}
