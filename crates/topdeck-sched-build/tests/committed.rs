// SPDX-License-Identifier: Apache-2.0
//! The committed probe is what its sources build.

#[test]
fn the_committed_probe_is_what_its_sources_build() {
    let built = topdeck_sched_build::build().unwrap_or_else(|e| panic!("{e}"));
    if let Some(what) = topdeck_sched_build::differs(&built) {
        panic!(
            "{what}: the probe's sources changed without its build; run \
             `cargo run -p topdeck-sched-build` and commit both files"
        );
    }
}
