// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve`: every registry on the host as a Prometheus endpoint.
//!
//! Each `GET /metrics` lists the namespace, snapshots every live registry
//! and encodes in the format the scraper negotiated, gzipped if `--gzip`
//! was given and the scraper accepts it (off by default: on loopback,
//! compressing 18 MB of text costs more CPU than the scrape itself, see
//! docs/PERFORMANCE.md). Writers are never touched; the endpoint's own
//! cost is part of the exposition (`topdeck_scrape_*`).
//!
//! The server is hyper (HTTP/1.1 only) on a single-threaded tokio runtime:
//! every connection is a task on one thread, never a thread of its own,
//! and scrapes run one at a time on a blocking thread. The parts:
//!
//! - [`connection`]: accepting connections, their limits against hostile
//!   clients, reading requests and writing responses;
//! - [`endpoint`]: what a request is answered with, scrapes and the
//!   budget of bodies not yet sent;
//! - [`route`]: which answer, from the request's method, path and headers
//!   alone (fuzzed).
//!
//! It stops as every command does ([`crate::stop`]): SIGTERM, SIGINT or
//! SIGHUP (unless started with it ignored, as under `nohup`) end it as the
//! signal would, a second one at once. Neither responses in flight nor a
//! scrape in progress are waited for.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{anyhow, Context as _, Result};
use topdeck_export::Scraper;

mod connection;
mod endpoint;
mod route;

use connection::{accept, bind, connection_limit, raise_file_limit, Server};
use endpoint::Endpoint;

/// What `topdeck serve` was asked to do besides where to listen.
#[derive(Debug, Default)]
pub struct Options {
    /// Compress for scrapers that accept gzip.
    pub gzip: bool,
    /// Every user's registries (root only), not only the caller's.
    pub all_users: bool,
    /// Connections served at once, instead of [`connection_limit`]'s
    /// choice; above the file limit, running out of descriptors is met by
    /// closing idle connections and waiting.
    pub max_connections: Option<usize>,
    /// Other runtimes' portholes to export beside the registries.
    pub portholes: Option<topdeck_sources::Portholes>,
    /// Who and how much is exported.
    pub policy: topdeck_export::Policy,
}

/// Serves until a stop is requested ([`crate::stop`]). Prints the address
/// it listens on (useful with port 0) as the first line of `out`.
pub fn run(out: &mut impl Write, listen: SocketAddr, options: Options) -> Result<()> {
    // Before the address is printed: whoever reads it may signal at once.
    let stop = crate::stop::install().context("cannot handle the stop signals")?;
    let namespace = crate::sources::namespace(options.all_users, "serve")?;
    let files = raise_file_limit();
    // One thread for every connection; scrapes on a blocking thread of
    // their own (one at a time, see `Endpoint::metrics`), the second
    // allowed blocking thread only a spare.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(2)
        .build()?;
    let listener = {
        let _in = runtime.enter();
        bind(listen).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?
    };
    let addr = listener.local_addr()?;
    let dirs = namespace.describe();
    let endpoint = Endpoint::new(
        Scraper::of(namespace, options.portholes).with_policy(options.policy),
        options.gzip,
    );
    let limit = options
        .max_connections
        .map_or_else(|| connection_limit(files), |n| n.max(1));
    let server = Arc::new(Server::new(endpoint, limit, files));
    let result = runtime.block_on(async {
        writeln!(out, "listening on http://{addr}/metrics")?;
        out.flush()?;
        eprintln!("topdeck serve: reading registries in {dirs}");
        tokio::select! {
            e = accept(&listener, &server) => Err(anyhow!(
                "topdeck serve: lost the listening socket on {addr}: {e}; exiting so that a supervisor can restart it"
            )),
            stopped = stop.stopped() => stopped.context("cannot wait for the stop signals"),
        }
    });
    // Neither in-flight responses nor a scrape in progress are waited for.
    runtime.shutdown_background();
    result
}
