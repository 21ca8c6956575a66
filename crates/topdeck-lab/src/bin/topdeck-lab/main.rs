// SPDX-License-Identifier: Apache-2.0
//! `topdeck-lab`: the interference lab's command. It is a binary of its
//! own, not a `topdeck` subcommand, so the `topdeck` every host installs
//! carries no benchmark code (the lab links the prometheus crate for
//! contrast and plotters for its report). This file holds the entry point;
//! the arguments and dispatch are in `cli.rs`.

mod cli;
mod sibling;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::LabArgs::parse();
    let mut out = io::stdout().lock();
    let result = cli::run(&mut out, args).and_then(|()| Ok(out.flush()?));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io::stderr(), "topdeck-lab: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
