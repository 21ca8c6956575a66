// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve`: every registry on the host as a Prometheus endpoint.
//!
//! Each `GET /metrics` lists the namespace, snapshots every live registry
//! and streams the exposition, encoded a run at a time as the client
//! reads it, in the format the scraper negotiated, gzipped if `--gzip`
//! was given and the scraper accepts it (off by default: on loopback,
//! compressing 18 MB of text costs more CPU than the scrape itself, see
//! docs/PERFORMANCE.md). Writers are never touched; the endpoint's own
//! cost is part of the exposition (`topdeck_scrape_*`).
//!
//! The server is hyper (HTTP/1.1 only) on a single-threaded tokio runtime:
//! every connection is a task on one thread, never a thread of its own,
//! and scrapes run one at a time on a blocking thread. The parts:
//!
//! - [`listen`]: where it listens, a TCP address or a Unix socket;
//! - [`auth`]: the bearer token a request must carry, if one is asked for;
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
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context as _, Result};
use topdeck_export::Scraper;

mod auth;
mod connection;
mod endpoint;
mod listen;
mod route;

use auth::BearerToken;
use connection::{accept, bind, connection_limit, raise_file_limit, Server};
use endpoint::Endpoint;
pub use listen::Listen;

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
    /// A file holding the token every request must carry as
    /// `Authorization: Bearer` (`--bearer-token-file`).
    pub bearer_token_file: Option<PathBuf>,
    /// The group that may connect to a Unix socket too (mode `0660`).
    pub socket_group: Option<u32>,
}

/// Serves until a stop is requested ([`crate::stop`]). Prints where it
/// listens (useful with port 0) as the first line of `out`:
/// `listening on http://ADDR/metrics` or `listening on unix:PATH`.
pub fn run(out: &mut impl Write, listen: Listen, options: Options) -> Result<()> {
    if options.socket_group.is_some() && !matches!(listen, Listen::Unix(_)) {
        bail!("--socket-group is for a Unix socket: use it with --listen unix:/path/to/socket");
    }
    let token = options
        .bearer_token_file
        .as_deref()
        .map(BearerToken::load)
        .transpose()?;
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
        match &listen {
            Listen::Tcp(addr) => {
                Bound::Tcp(bind(*addr).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?)
            }
            Listen::Unix(path) => Bound::Unix(listen::bind_unix(path, options.socket_group)?),
        }
    };
    let (addr, shown) = match &listener {
        Bound::Tcp(l) => {
            let addr = l.local_addr()?.to_string();
            (addr.clone(), format!("http://{addr}/metrics"))
        }
        Bound::Unix(_) => (listen.to_string(), listen.to_string()),
    };
    let dirs = namespace.describe();
    // Every user's series, open to anyone who can connect: said once, at
    // start, with what to do (docs/SECURITY.md, "Loopback is not private").
    let open_to_all = (options.all_users && token.is_none() && matches!(listener, Bound::Tcp(_)))
        .then(|| {
            format!(
                "topdeck serve: every user's series are served on {addr} to anyone who can \
                 connect (on loopback: any local user, who can also hold requests open); give \
                 --bearer-token-file FILE, or --listen unix:PATH, to serve the fleet's scraper alone"
            )
        });
    let endpoint = Endpoint::new(
        Scraper::of(namespace, options.portholes).with_policy(options.policy),
        options.gzip,
        token,
    );
    let limit = options
        .max_connections
        .map_or_else(|| connection_limit(files), |n| n.max(1));
    let server = Arc::new(Server::new(endpoint, limit, files));
    let result = runtime.block_on(async {
        writeln!(out, "listening on {shown}")?;
        out.flush()?;
        // Before the line that says it started (a reader of stderr that
        // sees that line has seen this one).
        if let Some(warning) = &open_to_all {
            eprintln!("{warning}");
        }
        eprintln!("topdeck serve: reading registries in {dirs}");
        let accepting = async {
            match &listener {
                Bound::Tcp(l) => accept(l, &server).await,
                Bound::Unix(l) => accept(l, &server).await,
            }
        };
        tokio::select! {
            e = accepting => Err(anyhow!(
                "topdeck serve: lost the listening socket on {addr}: {e}; exiting so that a supervisor can restart it"
            )),
            stopped = stop.stopped() => stopped.context("cannot wait for the stop signals"),
        }
    });
    // Neither in-flight responses nor a scrape in progress are waited for.
    runtime.shutdown_background();
    result
}

/// The listening socket.
enum Bound {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}
