// SPDX-License-Identifier: Apache-2.0
//! Writes the scheduler probe's object and skeleton into
//! `crates/topdeck-sched/src/bpf` (see the library's docs).

fn main() {
    match topdeck_sched_build::build().and_then(|b| {
        topdeck_sched_build::write(&b)?;
        Ok(b.object.len())
    }) {
        Ok(n) => println!(
            "wrote crates/topdeck-sched/{} ({n} bytes) and {}; commit both",
            topdeck_sched_build::OBJECT,
            topdeck_sched_build::SKELETON
        ),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
