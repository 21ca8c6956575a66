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
//! about one CPU however many scrapers there are.
//!
//! The body is streamed, never built whole: the scrape takes every
//! snapshot at once (one moment per scrape) and encodes the first run of
//! families of about [`WINDOW`] bytes under the lock; each further run is
//! encoded (and compressed) on a blocking thread when hyper asks for more,
//! that is once the client has taken the previous one, and apart from the
//! scraper, which is free for other scrapes as soon as the snapshots are
//! taken. A client that stops reading holds its snapshots and at most a
//! run or two encoded, not its body. Encoded runs not yet sent hold at
//! most [`BODY_BUDGET`] bytes in all: a scrape whose first run finds no
//! room gets 503 and `Retry-After`, a later run waits for room. A scrape's
//! time and bytes are recorded once its body is sent (or its client gone)
//! and appear in the next scrape.

use std::future::Future;
use std::io::{self, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use http_body_util::{Either, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use topdeck_export::{Chunks, Format, Scraper};

use super::auth::BearerToken;
use super::route::{route, Route};
use crate::sources::SkipLog;

/// Bytes of encoded runs of bodies not yet sent, in all: each scrape's
/// body is encoded a run of about [`WINDOW`] bytes at a time as its client
/// takes it, so this bounds what unread responses hold (beside their
/// snapshots) however many there are.
pub const BODY_BUDGET: usize = 256 << 20;

/// Bytes of exposition (estimated, before compression) encoded at a time
/// for one response: a family larger than that is encoded alone.
pub const WINDOW: usize = 1 << 20;

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
    ) -> Response<Reply<H>> {
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
    ) -> Response<Reply<H>> {
        // One scrape at a time, on a blocking thread: the lock is taken
        // here, so waiting scrapes hold no thread.
        let mut scraping = self.scraping.clone().lock_owned().await;
        let (budget, sent) = (self.budget.clone(), self.sent.clone());
        let started = tokio::task::spawn_blocking(move || {
            for s in sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
            {
                scraping.scraper.observe(s.format, s.elapsed, s.bytes);
            }
            scraping.start(format, gzip, &budget)
        })
        .await;
        let (state, gzipped) = match started {
            Ok(Ok(Some(started))) => started,
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
        let body = Streamed {
            state,
            budget: self.budget.clone(),
            bytes: 0,
            sent: Some((
                self.sent.clone(),
                Sent {
                    format,
                    start,
                    elapsed: Duration::ZERO,
                    bytes: 0,
                },
            )),
            _until_sent: Box::new(until_sent),
        };
        let mut r = Response::new(Either::Right(body));
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

/// What a request is answered with: a fixed text, or a scrape's body.
pub type Reply<H> = Either<Full<Bytes>, Streamed<H>>;

/// A scrape answered, for the scraper's own metrics.
struct Sent {
    format: Format,
    start: Instant,
    elapsed: Duration,
    bytes: u64,
}

/// A scrape's body, encoded a run at a time as hyper asks for it, with its
/// connection's busy mark: hyper drops it once it is all written, or with
/// the connection.
pub struct Streamed<H> {
    state: State,
    budget: Arc<Semaphore>,
    /// Bytes handed to hyper so far.
    bytes: u64,
    sent: Option<(Arc<StdMutex<Vec<Sent>>>, Sent)>,
    _until_sent: Box<H>,
}

/// Where a [`Streamed`] body is.
enum State {
    /// Waiting for hyper to ask for more.
    Idle(Box<Job>),
    /// The next run being encoded on a blocking thread.
    Encoding(JoinHandle<Encoded>),
    /// A run encoded, waiting for room in the budget.
    Waiting(Box<Job>, Vec<u8>, Acquiring),
    /// A run encoded with its share of the budget, to hand over.
    Ready(Box<Job>, Vec<u8>, OwnedSemaphorePermit),
    /// Everything handed over (or failed).
    Done,
}

/// A job back from encoding a run, with the run (`None` at the end).
type Encoded = (Box<Job>, io::Result<Option<Vec<u8>>>);

type Acquiring =
    Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send + Sync>>;

/// What is left of a body to encode: the scrape's snapshots, and the
/// compressor's state if it is gzipped.
struct Job {
    chunks: Chunks,
    zip: Option<GzEncoder<Vec<u8>>>,
    done: bool,
}

impl Job {
    /// The next bytes to send (compressed, if asked), or `None` at the end.
    fn next(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let run = self.chunks.next().transpose()?;
            let out = match (run, &mut self.zip) {
                (Some(run), None) => run,
                (Some(run), Some(z)) => {
                    z.write_all(&run)?;
                    std::mem::take(z.get_mut())
                }
                (None, zip) => {
                    self.done = true;
                    match zip.take() {
                        Some(z) => z.finish()?,
                        None => return Ok(None),
                    }
                }
            };
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
    }
}

/// The budget's units for `bytes`.
fn units(bytes: usize) -> u32 {
    bytes
        .div_ceil(BUDGET_UNIT)
        .clamp(1, BODY_BUDGET / BUDGET_UNIT) as u32
}

impl<H> Body for Streamed<H> {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Idle(mut job) => {
                    this.state = State::Encoding(tokio::task::spawn_blocking(move || {
                        let next = job.next();
                        (job, next)
                    }));
                }
                State::Encoding(mut encoding) => match Pin::new(&mut encoding).poll(cx) {
                    Poll::Pending => {
                        this.state = State::Encoding(encoding);
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(io::Error::other(e)))),
                    Poll::Ready(Ok((_, Err(e)))) => return Poll::Ready(Some(Err(e))),
                    Poll::Ready(Ok((_, Ok(None)))) => return Poll::Ready(None),
                    Poll::Ready(Ok((job, Ok(Some(run))))) => {
                        let room = this.budget.clone().acquire_many_owned(units(run.len()));
                        this.state = State::Waiting(job, run, Box::pin(room));
                    }
                },
                State::Waiting(job, run, mut room) => match room.as_mut().poll(cx) {
                    Poll::Pending => {
                        this.state = State::Waiting(job, run, room);
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(io::Error::other(e)))),
                    Poll::Ready(Ok(permit)) => this.state = State::Ready(job, run, permit),
                },
                State::Ready(job, run, permit) => {
                    this.bytes += run.len() as u64;
                    this.state = State::Idle(job);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_owner(Unsent {
                        run,
                        _permit: permit,
                    })))));
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

impl<H> Drop for Streamed<H> {
    fn drop(&mut self) {
        if let Some((to, mut sent)) = self.sent.take() {
            sent.elapsed = now().saturating_duration_since(sent.start);
            sent.bytes = self.bytes;
            to.lock().unwrap_or_else(PoisonError::into_inner).push(sent);
        }
    }
}

/// A run handed to hyper, with its share of the budget: hyper drops it
/// once written, or with the connection.
struct Unsent {
    run: Vec<u8>,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Unsent {
    fn as_ref(&self) -> &[u8] {
        &self.run
    }
}

/// The scraper, and what it has said on stderr.
struct Scraping {
    scraper: Scraper,
    /// Problems of the last scrape, each reported once while it lasts.
    skips: SkipLog,
}

impl Scraping {
    /// Scrapes (every snapshot, now) and encodes the first run of the
    /// body, so that the scraper is free before anything is sent, and
    /// whether it is gzipped. `None` if the budget of unsent runs has no
    /// room for the first.
    fn start(
        &mut self,
        format: Format,
        gzip: bool,
        budget: &Arc<Semaphore>,
    ) -> io::Result<Option<(State, bool)>> {
        let Self { scraper, skips } = self;
        let (report, chunks) = scraper.scrape_chunks(format, WINDOW);
        skips.log(&report.notices());
        // Fast compression: the text is repetitive (labels), so level 1
        // already shrinks it several times over at a fraction of the
        // default level's cost.
        let zip = gzip.then(|| GzEncoder::new(Vec::with_capacity(64 << 10), Compression::fast()));
        let mut job = Box::new(Job {
            chunks,
            zip,
            done: false,
        });
        let Some(first) = job.next()? else {
            return Ok(Some((State::Done, gzip)));
        };
        let Ok(permit) = budget.clone().try_acquire_many_owned(units(first.len())) else {
            return Ok(None);
        };
        Ok(Some((State::Ready(job, first, permit), gzip)))
    }
}

fn plain<H>(status: StatusCode, text: String) -> Response<Reply<H>> {
    let mut r = Response::new(Either::Left(Full::new(Bytes::from(text))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
