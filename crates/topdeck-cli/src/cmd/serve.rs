// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve`: every registry on the host as a Prometheus endpoint.
//!
//! One thread answers one request at a time: each `GET /metrics` lists the
//! namespace, snapshots every live registry (readers are kept between
//! scrapes, so descriptors are decoded once per file) and encodes in the
//! format the scraper negotiated, gzipped if it accepts that. Scrapes are
//! serialised on purpose: the endpoint never uses more than one CPU, however
//! many scrapers there are. Writers are never touched; the endpoint's own
//! cost is part of the exposition (`topdeck_scrape_*`).

use std::collections::HashSet;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use flate2::write::GzEncoder;
use flate2::Compression;
use tiny_http::{Header, Method, Request, Response, Server};
use topdeck::Namespace;
use topdeck_export::{accepts_gzip, negotiate, Scraper};

/// The monotonic clock of the endpoint's own timing, in one place so the
/// TSC clock can replace it.
fn now() -> Instant {
    Instant::now()
}

/// Serves until the process is stopped. Prints the address it listens on
/// (useful with port 0) as the first line of `out`.
pub fn run(out: &mut impl Write, listen: SocketAddr) -> Result<()> {
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
}

impl Endpoint {
    fn handle(&mut self, request: Request) {
        let start = now();
        let path = request.url().split('?').next().unwrap_or("");
        let response = match (request.method(), path) {
            (Method::Get | Method::Head, "/metrics") => self.metrics(&request),
            (Method::Get | Method::Head, "/") => Response::from_string(
                "topdeck: the metrics of every registry on this host are at /metrics\n",
            )
            .with_header(header("Content-Type", "text/plain; charset=utf-8")),
            (Method::Get | Method::Head, _) => {
                Response::from_string("not found: try /metrics\n").with_status_code(404)
            }
            _ => Response::from_string("only GET and HEAD are served\n")
                .with_status_code(405)
                .with_header(header("Allow", "GET, HEAD")),
        };
        let scrape = (path == "/metrics" && response.status_code().0 == 200)
            .then(|| negotiate(joined(&request, "Accept").as_deref()));
        let bytes = response.data_length().unwrap_or(0) as u64;
        // A scraper that hangs up early is its own problem, not the endpoint's.
        let _ = request.respond(response);
        if let Some(format) = scrape {
            self.scraper.observe(format, elapsed(start), bytes);
        }
    }

    fn metrics(&mut self, request: &Request) -> Response<std::io::Cursor<Vec<u8>>> {
        let accept = joined(request, "Accept");
        let format = negotiate(accept.as_deref());
        let mut body = Vec::with_capacity(64 << 10);
        let report = match self.scraper.scrape(format, &mut body) {
            Ok(r) => r,
            Err(e) => {
                return Response::from_string(format!("cannot encode the exposition: {e}\n"))
                    .with_status_code(500)
            }
        };
        for s in report.skipped {
            if self.logged.insert(s.message.clone()) {
                eprintln!("topdeck serve: skipped ({}): {}", s.reason, s.message);
            }
        }
        let gzip = accepts_gzip(joined(request, "Accept-Encoding").as_deref());
        let mut response = if gzip {
            match gzipped(&body) {
                Ok(z) => Response::from_data(z).with_header(header("Content-Encoding", "gzip")),
                Err(_) => Response::from_data(body),
            }
        } else {
            Response::from_data(body)
        };
        response.add_header(header("Content-Type", format.content_type()));
        response.add_header(header("Vary", "Accept, Accept-Encoding"));
        response
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
fn gzipped(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut z = GzEncoder::new(Vec::with_capacity(body.len() / 4), Compression::fast());
    z.write_all(body)?;
    z.finish()
}

fn header(name: &'static str, value: &'static str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid static header")
}
