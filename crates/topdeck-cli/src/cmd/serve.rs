// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve`: every registry on the host as a Prometheus endpoint.
//!
//! One thread answers one request at a time: each `GET /metrics` lists the
//! namespace, snapshots every live registry (readers are kept between
//! scrapes, so descriptors are decoded once per file) and encodes in the
//! format the scraper negotiated, gzipped if `--gzip` was given and the
//! scraper accepts it (off by default: on loopback, compressing 18 MB of
//! text costs more CPU than the scrape itself, see docs/PERFORMANCE.md). Scrapes are
//! serialised on purpose: the endpoint never uses more than one CPU, however
//! many scrapers there are. Writers are never touched; the endpoint's own
//! cost is part of the exposition (`topdeck_scrape_*`).

use std::collections::HashSet;
use std::io::{Cursor, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use flate2::write::GzEncoder;
use flate2::Compression;
use tiny_http::{Header, Method, Request, Response, Server, StatusCode};
use topdeck::Namespace;
use topdeck_export::{accepts_gzip, negotiate, Scraper};

/// The monotonic clock of the endpoint's own timing, in one place so the
/// TSC clock can replace it.
fn now() -> Instant {
    Instant::now()
}

/// Serves until the process is stopped. Prints the address it listens on
/// (useful with port 0) as the first line of `out`.
pub fn run(out: &mut impl Write, listen: SocketAddr, gzip: bool) -> Result<()> {
    let server = Server::http(listen).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| anyhow!("listening on {listen} gave no IP address"))?;
    let namespace = Namespace::host();
    writeln!(out, "listening on http://{addr}/metrics")?;
    out.flush()?;
    let dirs: Vec<String> = namespace
        .dirs()
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    eprintln!("topdeck serve: reading registries in {}", dirs.join(", "));
    let mut endpoint = Endpoint {
        scraper: Scraper::new(namespace),
        logged: HashSet::new(),
        gzip,
    };
    for request in server.incoming_requests() {
        endpoint.handle(request);
    }
    Ok(())
}

struct Endpoint {
    scraper: Scraper,
    /// Problems already reported on stderr: each is said once, not at every scrape.
    logged: HashSet<String>,
    /// Whether to compress for scrapers that accept gzip.
    gzip: bool,
}

impl Endpoint {
    fn handle(&mut self, request: Request) {
        let start = now();
        let path = request.url().split('?').next().unwrap_or("");
        let readable = matches!(request.method(), Method::Get | Method::Head);
        let response = match (readable, path) {
            (true, "/metrics") => return self.metrics(request, start),
            (true, "/") => Response::from_string(
                "topdeck: the metrics of every registry on this host are at /metrics\n",
            )
            .with_header(header("Content-Type", "text/plain; charset=utf-8")),
            (true, _) => Response::from_string("not found: try /metrics\n").with_status_code(404),
            (false, _) => Response::from_string("only GET and HEAD are served\n")
                .with_status_code(405)
                .with_header(header("Allow", "GET, HEAD")),
        };
        // A client that hangs up early is its own problem, not the endpoint's.
        let _ = request.respond(response);
    }

    /// Answers a scrape and records what it cost.
    fn metrics(&mut self, request: Request, start: Instant) {
        let format = negotiate(joined(&request, "Accept").as_deref());
        let gzip = self.gzip && accepts_gzip(joined(&request, "Accept-Encoding").as_deref());
        let Self {
            scraper, logged, ..
        } = self;
        let (report, body) = match scraper.scrape_body(format) {
            Ok(r) => r,
            Err(e) => {
                let _ = request.respond(
                    Response::from_string(format!("cannot encode the exposition: {e}\n"))
                        .with_status_code(500),
                );
                return;
            }
        };
        for s in report.skipped {
            if logged.insert(s.message.clone()) {
                eprintln!("topdeck serve: skipped ({}): {}", s.reason, s.message);
            }
        }
        let mut headers = vec![
            header("Content-Type", format.content_type()),
            header("Vary", "Accept, Accept-Encoding"),
        ];
        let compressed = if gzip {
            gzipped(body.chunks()).ok()
        } else {
            None
        };
        let sent = match compressed {
            Some(z) => {
                headers.push(header("Content-Encoding", "gzip"));
                let n = z.len();
                let _ = request.respond(Response::new(
                    StatusCode(200),
                    headers,
                    Cursor::new(z),
                    Some(n),
                    None,
                ));
                n
            }
            None => {
                // Sent piece by piece from the scraper's buffers: a large
                // exposition is never copied into one more buffer.
                let n = body.len();
                let _ = request.respond(Response::new(
                    StatusCode(200),
                    headers,
                    body.reader(),
                    Some(n),
                    None,
                ));
                n
            }
        };
        scraper.observe(format, elapsed(start), sent as u64);
    }
}

fn elapsed(start: Instant) -> Duration {
    now().saturating_duration_since(start)
}

/// Every value of a request header, comma-joined as RFC 9110 allows.
fn joined(request: &Request, name: &'static str) -> Option<String> {
    let values: Vec<&str> = request
        .headers()
        .iter()
        .filter(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// Fast compression: the text is repetitive (labels), so level 1 already
/// shrinks it several times over at a fraction of the default level's cost.
fn gzipped<'b>(chunks: impl Iterator<Item = &'b [u8]>) -> std::io::Result<Vec<u8>> {
    let mut z = GzEncoder::new(Vec::with_capacity(64 << 10), Compression::fast());
    for c in chunks {
        z.write_all(c)?;
    }
    z.finish()
}

fn header(name: &'static str, value: &'static str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid static header")
}
