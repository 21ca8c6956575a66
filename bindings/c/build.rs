// SPDX-License-Identifier: Apache-2.0
//! Gives the shared library the soname it is installed under, so programs
//! linked with `-ltopdeck` load `libtopdeck.so.0` whatever cargo named it.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtopdeck.so.0");
}
