// SPDX-License-Identifier: Apache-2.0
//! Builds the SIGBUS-guarded copy used by readers.

fn main() {
    println!("cargo:rerun-if-changed=csrc/fault_guard.c");
    cc::Build::new()
        .file("csrc/fault_guard.c")
        .warnings(true)
        .flag_if_supported("-O2")
        .compile("topdeck_fault_guard");
}
