// SPDX-License-Identifier: Apache-2.0
//! Builds the SIGBUS-guarded copy that readers use (csrc/fault_guard.c).

fn main() {
    println!("cargo:rerun-if-changed=csrc/fault_guard.c");
    cc::Build::new()
        .file("csrc/fault_guard.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("topdeck_fault_guard");
}
