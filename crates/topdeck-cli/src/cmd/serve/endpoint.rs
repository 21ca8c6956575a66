// SPDX-License-Identifier: Apache-2.0
//! What `topdeck serve` answers: `/metrics` with the [`Scraper`]'s
//! exposition, `/` with where the metrics are, and fixed errors for
//! anything else ([`route`] decides which from the request alone).
//!
//! Each scrape lists the namespace, snapshots every live registry
//! (readers are kept between scrapes, so descriptors are decoded once per
//! file) and encodes in the format the scraper negotiated, gzipped if
//! `--gzip` was given and the scraper accepts it. Scrapes are serialised
//! on purpose: the scraper sits behind an async mutex and runs on a
//! blocking thread (at most one is busy at a time), so the endpoint uses
//! about one CPU however many scrapers there are. The body is copied out
//! of the scraper's buffers (or gzipped from them) before the lock is
//! released, so a client that stops reading holds its own copy, never the
//! scraper (the copy costs about 1 ms of CPU for 22 MB of text, a tenth of
//! the scrape: docs/PERFORMANCE.md). Bodies not yet sent hold at most
//! [`BODY_BUDGET`] bytes in all; beyond it a scrape gets 503 and
//! `Retry-After`. A scrape's time and bytes are recorded once its body is
//! sent (or its client gone) and appear in the next scrape.

use std::io::{self, Write};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use topdeck_export::{Format, Scraper};

use super::auth::BearerToken;
use super::route::{route, Route};
use crate::sources::SkipLog;

/// Bytes of response bodies held at once, in all: each scrape's body is a
/// copy that lives until it is sent or its client dropped, so without a
/// bound, clients that ask and never read would hold one copy each.
pub const BODY_BUDGET: usize = 256 << 20;

/// The budget's unit: a semaphore counts permits in `u32`.
const BUDGET_UNIT: usize = 1 << 10;

/// The monotonic clock of the endpoint's own timing, in one place so the
/// TSC clock can replace it.
fn now() -> Instant {
    Instant::now()
}

/// What answers requests: the scraper, one scrape at a time, and the
/// bodies it handed out that are not sent yet.
pub struct Endpoint {
    scraping: Arc<tokio::sync::Mutex<Scraping>>,
    /// Units of [`BUDGET_UNIT`] bytes of bodies not yet sent.
    budget: Arc<Semaphore>,
    /// Scrapes answered since the last scrape, recorded by the next one.
    sent: Arc<StdMutex<Vec<Sent>>>,
    /// Whether to compress for scrapers that accept gzip.
    gzip: bool,
    /// The token every request must carry (`--bearer-token-file`).
    token: Option<BearerToken>,
}

impl Endpoint {
    /// Answers scrapes with `scraper`'s exposition, compressed for
    /// scrapers that accept gzip if `gzip` (`--gzip`), to requests that
    /// carry `token` if one is given.
    pub fn new(scraper: Scraper, gzip: bool, token: Option<BearerToken>) -> Self {
        Self {
            scraping: Arc::new(tokio::sync::Mutex::new(Scraping {
                scraper,
                skips: SkipLog::new("serve"),
            })),
            budget: Arc::new(Semaphore::new(BODY_BUDGET / BUDGET_UNIT)),
            sent: Arc::new(StdMutex::new(Vec::new())),
            gzip,
            token,
        }
    }

    /// Answers `request`. `until_sent` (the connection's busy mark) is
    /// held until the response's body has been sent, or its connection
    /// dropped.
    pub async fn respond<H: Send + 'static>(
        &self,
        request: Request<Incoming>,
        until_sent: H,
    ) -> Response<Full<Bytes>> {
        let start = now();
        // Before anything else: a request without the token costs no
        // scrape and no body.
        if self
            .token
            .as_ref()
            .is_some_and(|t| !t.admits(request.headers()))
        {
            let mut r = plain(
                StatusCode::UNAUTHORIZED,
                "this endpoint needs Authorization: Bearer <the token in serve's --bearer-token-file>\n"
                    .into(),
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"topdeck\""),
            );
            return r;
        }
        let path = request.uri().path();
        match route(request.method(), path, request.headers(), self.gzip) {
            Route::Metrics { format, gzip } => self.metrics(format, gzip, start, until_sent).await,
            Route::Index => plain(
                StatusCode::OK,
                "topdeck: the metrics of every registry on this host are at /metrics\n".into(),
            ),
            Route::NotFound => plain(StatusCode::NOT_FOUND, "not found: try /metrics\n".into()),
            Route::MethodNotAllowed => {
                let mut r = plain(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "only GET and HEAD are served\n".into(),
                );
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
                r
            }
        }
    }

    /// Answers a scrape. The time and bytes are recorded when the body has
    /// been sent (or its client dropped), and counted by the next scrape.
    async fn metrics<H: Send + 'static>(
        &self,
        format: Format,
        gzip: bool,
        start: Instant,
        until_sent: H,
    ) -> Response<Full<Bytes>> {
        // One scrape at a time, on a blocking thread: the lock is taken
        // here, so waiting scrapes hold no thread.
        let mut scraping = self.scraping.clone().lock_owned().await;
        let (budget, sent) = (self.budget.clone(), self.sent.clone());
        let encoded = tokio::task::spawn_blocking(move || {
            for s in sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
            {
                scraping.scraper.observe(s.format, s.elapsed, s.bytes);
            }
            scraping.encode(format, gzip, &budget)
        })
        .await;
        let (body, gzipped, permit) = match encoded {
            Ok(Ok(Some(encoded))) => encoded,
            Ok(Ok(None)) => {
                let mut r = plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many responses are waiting for their clients to read them\n".into(),
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return r;
            }
            Ok(Err(e)) => {
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("cannot encode the exposition: {e}\n"),
                )
            }
            Err(e) => {
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the scrape failed: {e}\n"),
                )
            }
        };
        let bytes = body.len() as u64;
        let body = Bytes::from_owner(Unsent {
            body,
            _permit: permit,
            _until_sent: until_sent,
            sent: Some((
                self.sent.clone(),
                Sent {
                    format,
                    start,
                    elapsed: Duration::ZERO,
                    bytes,
                },
            )),
        });
        let mut r = Response::new(Full::new(body));
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        );
        h.insert(
            header::VARY,
            HeaderValue::from_static("Accept, Accept-Encoding"),
        );
        if gzipped {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        r
    }
}

/// A scrape answered, for the scraper's own metrics.
struct Sent {
    format: Format,
    start: Instant,
    elapsed: Duration,
    bytes: u64,
}

/// A body being sent, with its share of the budget and its connection's
/// busy mark: hyper drops it once written, or with the connection.
struct Unsent<H> {
    body: Vec<u8>,
    _permit: OwnedSemaphorePermit,
    _until_sent: H,
    sent: Option<(Arc<StdMutex<Vec<Sent>>>, Sent)>,
}

impl<H> AsRef<[u8]> for Unsent<H> {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

impl<H> Drop for Unsent<H> {
    fn drop(&mut self) {
        if let Some((to, mut sent)) = self.sent.take() {
            sent.elapsed = now().saturating_duration_since(sent.start);
            to.lock().unwrap_or_else(PoisonError::into_inner).push(sent);
        }
    }
}

/// The scraper, and what it has said on stderr.
struct Scraping {
    scraper: Scraper,
    /// Problems of the last scrape, each reported once while it lasts.
    skips: SkipLog,
}

impl Scraping {
    /// Scrapes, and copies (or compresses) the body out of the scraper's
    /// buffers so that the scraper is free before the body is sent. `None`
    /// if the budget of unsent bodies has no room for it.
    fn encode(
        &mut self,
        format: Format,
        gzip: bool,
        budget: &Arc<Semaphore>,
    ) -> io::Result<Option<(Vec<u8>, bool, OwnedSemaphorePermit)>> {
        let Self { scraper, skips } = self;
        let (report, body) = scraper.scrape_body(format)?;
        skips.log(&report.notices());
        let compressed = if gzip {
            gzipped(body.chunks()).ok()
        } else {
            None
        };
        let size = compressed.as_ref().map_or_else(|| body.len(), Vec::len);
        let units = size
            .div_ceil(BUDGET_UNIT)
            .clamp(1, BODY_BUDGET / BUDGET_UNIT);
        let Ok(permit) = budget.clone().try_acquire_many_owned(units as u32) else {
            return Ok(None);
        };
        Ok(Some(match compressed {
            Some(z) => (z, true, permit),
            None => {
                let mut copy = Vec::with_capacity(size);
                body.chunks().for_each(|c| copy.extend_from_slice(c));
                (copy, false, permit)
            }
        }))
    }
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Fast compression: the text is repetitive (labels), so level 1 already
/// shrinks it several times over at a fraction of the default level's cost.
fn gzipped<'b>(chunks: impl Iterator<Item = &'b [u8]>) -> io::Result<Vec<u8>> {
    let mut z = GzEncoder::new(Vec::with_capacity(64 << 10), Compression::fast());
    for c in chunks {
        z.write_all(c)?;
    }
    z.finish()
}
