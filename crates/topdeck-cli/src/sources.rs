// SPDX-License-Identifier: Apache-2.0
//! Which other runtimes' portholes a view reads besides topdeck's
//! registries: every one found on the host when reading the host (no
//! `TOPDECK_DIR`), none when pointed at one directory unless asked. And
//! the one place the exporters (`serve`, `push`) take their series from:
//! the same namespace, scraper and portholes, so both export one set.

use std::path::PathBuf;

use anyhow::{bail, Result};
use topdeck::Namespace;
use topdeck_sources::{Config, Portholes};

pub use crate::skip_log::SkipLog;

/// The registries an exporter (`command`) exports: the user's own, or
/// with `all_users` (root only) every user's; `TOPDECK_DIR` if set, either
/// way.
pub fn namespace(all_users: bool, command: &str) -> Result<Namespace> {
    if !all_users {
        return Ok(Namespace::own());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "--all-users needs root: other users' registries are private to them; \
             without it, {command} exports your own"
        );
    }
    Ok(Namespace::host())
}

/// The options every view shares.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PortholeArgs {
    /// Also read this prometheus_client multiprocess directory (the
    /// directories named by running processes' PROMETHEUS_MULTIPROC_DIR
    /// are found without it). May be repeated.
    #[arg(long = "prommp", value_name = "DIR")]
    pub prommp: Vec<PathBuf>,
    /// Find other runtimes' portholes (JVMs' hsperfdata, prometheus_client
    /// directories, Aeron drivers, PCP MMV files) even when TOPDECK_DIR is set.
    #[arg(long, conflicts_with = "no_portholes")]
    pub portholes: bool,
    /// Read topdeck's registries only (and the --prommp directories).
    #[arg(long)]
    pub no_portholes: bool,
}

impl PortholeArgs {
    /// The portholes to read, if any.
    pub fn portholes(&self) -> Option<Portholes> {
        self.portholes_of(None)
    }

    /// The portholes to read, if any; with `owner`, only that user's in
    /// this reader's own view (and the `--prommp` directories).
    pub fn portholes_of(&self, owner: Option<u32>) -> Option<Portholes> {
        let discover = if self.no_portholes {
            false
        } else {
            self.portholes || std::env::var_os(topdeck::dir::ENV_DIR).is_none()
        };
        if !discover && self.prommp.is_empty() {
            return None;
        }
        Some(Portholes::new(Config {
            prommp_dirs: self.prommp.clone(),
            prommp_from_environ: discover,
            jvm: discover,
            aeron: discover,
            mmv: discover,
            owner,
        }))
    }
}
