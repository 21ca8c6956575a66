// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve`: every registry on the host as a Prometheus endpoint.
//!
//! Each `GET /metrics` lists the namespace, snapshots every live registry
//! (readers are kept between scrapes, so descriptors are decoded once per
//! file) and encodes in the format the scraper negotiated, gzipped if
//! `--gzip` was given and the scraper accepts it (off by default: on
//! loopback, compressing 18 MB of text costs more CPU than the scrape
//! itself, see docs/PERFORMANCE.md). Writers are never touched; the
//! endpoint's own cost is part of the exposition (`topdeck_scrape_*`).
//!
//! The server is hyper (HTTP/1.1 only) on a single-threaded tokio runtime:
//! every connection is a task on one thread, never a thread of its own.
//! Scrapes are serialised on purpose: the scraper sits behind an async
//! mutex and runs on a blocking thread (at most one is busy at a time), so
//! the endpoint uses about one CPU however many scrapers there are. The
//! body is copied out of the scraper's buffers (or gzipped from them)
//! before the lock is released, so a client that stops reading holds its
//! own copy, never the scraper (the copy costs about 1 ms of CPU for 22 MB
//! of text, a tenth of the scrape: docs/PERFORMANCE.md). A scrape's time
//! and bytes are recorded once its body is sent (or its client gone) and
//! appear in the next scrape. Hostile clients meet limits:
//!
//! - at most [`MAX_CONNECTIONS`] connections (and half the file limit,
//!   which is raised to its hard limit at start); beyond it, the oldest
//!   connection waiting for a request (with none unread in its socket) is
//!   closed to make room, and with none such, new connections wait in the
//!   kernel's queue (of [`BACKLOG`]) until one ends; a connection that
//!   sends nothing is never accepted at all (`TCP_DEFER_ACCEPT`, see
//!   [`bind`]);
//! - request heads of at most [`MAX_HEAD`] bytes, read within
//!   [`HEAD_TIMEOUT`] (which also closes idle keep-alive connections);
//! - a response must drain at least [`STALL_PROGRESS`] bytes every
//!   [`STALL_TIMEOUT`] once the socket is full, or the connection is
//!   dropped;
//! - bodies waiting to be sent hold at most [`BODY_BUDGET`] bytes in all;
//!   beyond it a scrape gets 503 and `Retry-After`;
//! - a connection is never kept in one of the last [`HEADROOM`]
//!   descriptors, which stay for scrapes; running out of file descriptors
//!   (or memory) in `accept`, or into those, lowers the
//!   connection limit to [`HEADROOM`] below the connections open, closes
//!   idle ones down to it and tries again, or, with none idle, waits
//!   [`ACCEPT_BACKOFF`]; losing the listening socket ends the process with
//!   an error, so that a supervisor restarts it.
//!
//! It stops as every command does ([`crate::stop`]): SIGTERM, SIGINT or
//! SIGHUP (unless started with it ignored, as under `nohup`) end it as the
//! signal would, a second one at once. Neither responses in flight nor a
//! scrape in progress are waited for.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _, Result};
use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use topdeck_export::{Format, Scraper};

use crate::sources::SkipLog;

mod route;
use route::{route, Route};

/// Connections open at once, at most: a metrics endpoint has a handful of
/// scrapers, and each connection costs a file descriptor and a read buffer.
pub const MAX_CONNECTIONS: usize = 256;
/// The largest request head (request line and headers) read. Prometheus
/// sends well under 1 KiB; hyper answers 431 beyond this and closes.
pub const MAX_HEAD: usize = 16 << 10;
/// Time a client gets to send a request head, counted from the connection
/// or from the previous response: a keep-alive connection idle for longer
/// is closed, and Prometheus simply reconnects.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Once a write blocks, the client must take [`STALL_PROGRESS`] bytes
/// within this time (or send its next request), or it is dropped.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// See [`STALL_TIMEOUT`]: a minimum rate (6.4 KiB/s) rather than any
/// progress, so that a client reading a byte at a time is dropped too.
pub const STALL_PROGRESS: usize = 64 << 10;
/// Bytes of response bodies held at once, in all: each scrape's body is a
/// copy that lives until it is sent or its client dropped, so without a
/// bound, clients that ask and never read would hold one copy each.
pub const BODY_BUDGET: usize = 256 << 20;
/// How long `accept` waits after running out of file descriptors (or
/// memory) before trying again.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Idle connections looked at for one that can be closed to make room.
const EVICTION_CANDIDATES: usize = 32;
/// How often a full table is looked at again when no connection ended.
const ROOM_RECHECK: Duration = Duration::from_millis(50);
/// Connections the kernel queues for `accept`: see [`bind`].
const BACKLOG: u32 = 1024;
/// Descriptors left to scrapes: `accept` never keeps a connection in one
/// of the last of them, and connections that used up the rest are shed
/// down to this many fewer (see [`Shared::shed`]).
const HEADROOM: usize = 16;
/// The budget's unit: a semaphore counts permits in `u32`.
const BUDGET_UNIT: usize = 1 << 10;

/// The monotonic clock of the endpoint's own timing, in one place so the
/// TSC clock can replace it.
fn now() -> Instant {
    Instant::now()
}

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
}

/// Serves until a stop is requested ([`crate::stop`]). Prints the address
/// it listens on (useful with port 0) as the first line of `out`.
pub fn run(out: &mut impl Write, listen: SocketAddr, options: Options) -> Result<()> {
    // Before the address is printed: whoever reads it may signal at once.
    let stop = crate::stop::install().context("cannot handle the stop signals")?;
    let namespace = crate::sources::namespace(options.all_users, "serve")?;
    let files = raise_file_limit();
    let gzip = options.gzip;
    // One thread for every connection; scrapes on a blocking thread of
    // their own (one at a time, see `Shared::metrics`), the second allowed
    // blocking thread only a spare.
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
    let shared = Arc::new(Shared {
        endpoint: Arc::new(tokio::sync::Mutex::new(Endpoint {
            scraper: topdeck_export::Scraper::of(namespace, options.portholes),
            skips: SkipLog::new("serve"),
        })),
        budget: Arc::new(Semaphore::new(BODY_BUDGET / BUDGET_UNIT)),
        sent: Arc::new(StdMutex::new(Vec::new())),
        conns: StdMutex::new(Conns {
            limit: options
                .max_connections
                .map_or_else(|| connection_limit(files), |n| n.max(1)),
            ..Conns::default()
        }),
        freed: Notify::new(),
        gzip,
        files,
    });
    let result = runtime.block_on(async {
        writeln!(out, "listening on http://{addr}/metrics")?;
        out.flush()?;
        eprintln!("topdeck serve: reading registries in {dirs}");
        tokio::select! {
            e = accept(&listener, &shared) => Err(anyhow!(
                "topdeck serve: lost the listening socket on {addr}: {e}; exiting so that a supervisor can restart it"
            )),
            stopped = stop.stopped() => stopped.context("cannot wait for the stop signals"),
        }
    });
    // Neither in-flight responses nor a scrape in progress are waited for.
    runtime.shutdown_background();
    result
}

/// Listens on `addr` with a longer queue of connections waiting to be
/// accepted than the standard library's 128: under a flood, a connection
/// that finds the queue full has its SYN dropped and waits a second for
/// the retry. The kernel caps it at `net.core.somaxconn`.
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // As the standard library does: a restarted server can bind at once.
    socket.set_reuseaddr(true)?;
    // A connection is handed to `accept` only once its request has begun
    // to arrive: connections that send nothing stay in the kernel, costing
    // no descriptor and no task, and a scraper's connection never reaches
    // the table before its request (see `Conns::evict_idle`). Best effort:
    // without it, idle connections are closed as the table fills.
    let seconds = HEAD_TIMEOUT.as_secs() as libc::c_int;
    // SAFETY: setsockopt reads one int, which we own, on a socket we own.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&seconds as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Raises the soft limit on open files to the hard limit, as servers
/// commonly do: the soft limit (often 1,024) only protects programs that
/// use `select(2)`, and every connection costs a descriptor. Returns the
/// soft limit in force.
fn raise_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    limit.rlim_cur
}

/// Connections allowed with `files` descriptors: half of them, so the
/// other half is left to the registries a scrape opens.
fn connection_limit(files: u64) -> usize {
    usize::try_from(files / 2)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CONNECTIONS)
}

/// What to do after `accept` failed.
#[derive(Debug, PartialEq, Eq)]
enum AcceptFailure {
    /// The error belongs to one connection (Linux reports a new
    /// connection's network errors from `accept`): take the next one.
    Connection,
    /// Out of descriptors or memory: wait for some to be freed.
    Resources,
    /// The listening socket itself is broken.
    Listener,
}

fn accept_failure(e: &io::Error) -> AcceptFailure {
    match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
            AcceptFailure::Resources
        }
        // accept(2): these, and EAGAIN and EINTR (which tokio handles),
        // "should be treated like EAGAIN".
        Some(
            libc::ECONNABORTED
            | libc::EPROTO
            | libc::EPERM
            | libc::ENETDOWN
            | libc::ENOPROTOOPT
            | libc::EHOSTDOWN
            | libc::ENONET
            | libc::EHOSTUNREACH
            | libc::EOPNOTSUPP
            | libc::ENETUNREACH
            | libc::ETIMEDOUT
            | libc::ECONNRESET
            | libc::EINTR
            | libc::EAGAIN,
        ) => AcceptFailure::Connection,
        _ => AcceptFailure::Listener,
    }
}

/// Accepts connections until the listening socket fails.
async fn accept(listener: &TcpListener, shared: &Arc<Shared>) -> io::Error {
    loop {
        shared.room().await;
        let failure = match listener.accept().await {
            // Descriptors are numbered lowest first, so a connection's
            // number says how many are open: one among the last HEADROOM
            // would leave a scrape none to open the namespace with.
            Ok((stream, _)) if stream.as_raw_fd() as u64 + HEADROOM as u64 >= shared.files => {
                drop(stream);
                AcceptFailure::Resources
            }
            Ok((stream, _)) => {
                shared.admit(stream);
                continue;
            }
            Err(e) => match accept_failure(&e) {
                AcceptFailure::Listener => return e,
                f => f,
            },
        };
        if failure == AcceptFailure::Resources {
            if shared.shed() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// What every connection shares.
struct Shared {
    endpoint: Arc<tokio::sync::Mutex<Endpoint>>,
    /// Units of [`BUDGET_UNIT`] bytes of bodies not yet sent.
    budget: Arc<Semaphore>,
    /// Scrapes answered since the last scrape, recorded by the next one.
    sent: Arc<StdMutex<Vec<Sent>>>,
    conns: StdMutex<Conns>,
    /// Told when a connection ends.
    freed: Notify,
    /// Whether to compress for scrapers that accept gzip.
    gzip: bool,
    /// The soft limit on open descriptors.
    files: u64,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Conns {
    next: u64,
    open: BTreeMap<u64, Arc<Conn>>,
    /// Connections allowed; lowered when descriptors run out.
    limit: usize,
}

impl Conns {
    /// Closes the oldest connection waiting for a request (idle keep-alive,
    /// or a slow request head) with nothing left unread in its socket. One
    /// with a response in progress is left alone, and so is one whose
    /// request has arrived but not been read yet (under a flood of new
    /// connections, a scraper's could otherwise be closed before its
    /// request is seen). Returns whether there was one.
    fn evict_idle(&mut self) -> bool {
        let idle = self
            .open
            .iter()
            .filter(|(_, c)| c.busy.load(Ordering::Relaxed) == 0)
            // A bound on the system calls per eviction under a flood.
            .take(EVICTION_CANDIDATES)
            .find(|(_, c)| unread(c.fd) == 0)
            .map(|(&id, _)| id);
        match idle.and_then(|id| self.open.remove(&id)) {
            Some(old) => {
                old.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Bytes waiting to be read on socket `fd` (0 if it cannot say).
fn unread(fd: RawFd) -> libc::c_int {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int, which we own. The descriptor is
    // open: connections leave the table before closing their socket, and
    // both happen on the runtime's one thread, as evictions do.
    match unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } {
        0 => n,
        _ => 0,
    }
}

/// One connection, as the accept loop sees it.
struct Conn {
    /// Its socket, to see whether a request is waiting in it.
    fd: RawFd,
    /// Requests being answered (their responses not yet sent).
    busy: AtomicUsize,
    /// Told to close, to make room for a newer connection.
    evict: Notify,
}

/// Marks a connection busy while it lives.
struct Busy(Arc<Conn>);

impl Busy {
    fn new(conn: &Arc<Conn>) -> Self {
        conn.busy.fetch_add(1, Ordering::Relaxed);
        Self(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// Starts serving `stream`, first closing another connection if the
    /// limit is reached. Returns whether one was closed.
    /// Waits until a connection may be accepted: below the limit, or once
    /// an idle connection is closed to make room. Meanwhile new
    /// connections wait in the kernel's queue.
    async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so that no wake-up is missed.
            freed.as_mut().enable();
            let evicted = {
                let mut conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
                if conns.open.len() < conns.limit {
                    return;
                }
                conns.evict_idle()
            };
            if evicted {
                // Let the connection closed go first, so that its
                // descriptor is free before the next accept.
                tokio::task::yield_now().await;
                return;
            }
            // Every connection is answering or has a request to read: one
            // will be done soon, or idle with nothing unread.
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep(ROOM_RECHECK) => {}
            }
        }
    }

    /// Starts serving `stream`.
    fn admit(self: &Arc<Self>, stream: TcpStream) {
        let conn = Arc::new(Conn {
            fd: stream.as_raw_fd(),
            busy: AtomicUsize::new(0),
            evict: Notify::new(),
        });
        let mut conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        let id = conns.next;
        conns.next += 1;
        conns.open.insert(id, conn.clone());
        drop(conns);
        tokio::spawn(self.clone().connection(stream, id, conn));
    }

    /// After `accept` ran out of descriptors (or memory): allows
    /// [`HEADROOM`] fewer connections than are open now, so that scrapes
    /// can open registries again, and closes idle ones down to that.
    /// Returns whether one was closed.
    fn shed(&self) -> bool {
        let mut conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = conns.open.len().saturating_sub(HEADROOM).max(1);
        if limit < conns.limit {
            eprintln!(
                "topdeck serve: out of file descriptors or memory with {} connections open; \
                 allowing {limit} from now on",
                conns.open.len()
            );
            conns.limit = limit;
        }
        let mut evicted = false;
        while conns.open.len() > conns.limit && conns.evict_idle() {
            evicted = true;
        }
        evicted
    }

    async fn connection(self: Arc<Self>, stream: TcpStream, id: u64, conn: Arc<Conn>) {
        let _ = stream.set_nodelay(true);
        let service = service_fn(|request| {
            let shared = self.clone();
            let busy = Busy::new(&conn);
            async move { Ok::<_, std::convert::Infallible>(shared.respond(request, busy).await) }
        });
        let http = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(Stalling::new(stream)), service);
        // Errors (timeouts, bad requests, clients gone) end the connection;
        // hyper has already answered what deserved an answer.
        tokio::select! {
            _ = http => {}
            _ = conn.evict.notified() => {}
        }
        // The socket is closed (with `http`) just before, with no await
        // between: the table never names a closed descriptor to the
        // accept loop, which runs on this same thread.
        self.conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .remove(&id);
        self.freed.notify_one();
    }

    async fn respond(&self, request: Request<Incoming>, busy: Busy) -> Response<Full<Bytes>> {
        let start = now();
        let path = request.uri().path();
        match route(request.method(), path, request.headers(), self.gzip) {
            Route::Metrics { format, gzip } => self.metrics(format, gzip, start, busy).await,
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
    async fn metrics(
        &self,
        format: Format,
        gzip: bool,
        start: Instant,
        busy: Busy,
    ) -> Response<Full<Bytes>> {
        // One scrape at a time, on a blocking thread: the lock is taken
        // here, so waiting scrapes hold no thread.
        let mut endpoint = self.endpoint.clone().lock_owned().await;
        let (budget, sent) = (self.budget.clone(), self.sent.clone());
        let encoded = tokio::task::spawn_blocking(move || {
            for s in sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
            {
                endpoint.scraper.observe(s.format, s.elapsed, s.bytes);
            }
            endpoint.encode(format, gzip, &budget)
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
            _busy: busy,
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
struct Unsent {
    body: Vec<u8>,
    _permit: OwnedSemaphorePermit,
    _busy: Busy,
    sent: Option<(Arc<StdMutex<Vec<Sent>>>, Sent)>,
}

impl AsRef<[u8]> for Unsent {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if let Some((to, mut sent)) = self.sent.take() {
            sent.elapsed = now().saturating_duration_since(sent.start);
            to.lock().unwrap_or_else(PoisonError::into_inner).push(sent);
        }
    }
}

/// The scraper, and what it has said on stderr.
struct Endpoint {
    scraper: Scraper,
    /// Problems of the last scrape, each reported once while it lasts.
    skips: SkipLog,
}

impl Endpoint {
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
        skips.log(&report.skipped);
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

/// A socket that gives up on a client that stops reading: once a write
/// blocks, [`STALL_PROGRESS`] bytes must go out within [`STALL_TIMEOUT`],
/// or writes fail with `TimedOut` and hyper drops the connection. Bytes
/// read from the client (its next request) also count as life.
struct Stalling {
    io: TcpStream,
    deadline: Option<Pin<Box<Sleep>>>,
    /// Bytes written since the deadline was set.
    progress: usize,
}

impl Stalling {
    fn new(io: TcpStream) -> Self {
        Self {
            io,
            deadline: None,
            progress: 0,
        }
    }

    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                self.progress += n;
                if self.progress >= STALL_PROGRESS {
                    self.deadline = None;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => {
                let deadline = match &mut self.deadline {
                    Some(d) => d,
                    None => {
                        self.progress = 0;
                        self.deadline
                            .insert(Box::pin(tokio::time::sleep(STALL_TIMEOUT)))
                    }
                };
                if deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stopped reading",
                    )));
                }
                Poll::Pending
            }
            r => r,
        }
    }
}

impl AsyncRead for Stalling {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.deadline = None;
            self.progress = 0;
        }
        r
    }
}

impl AsyncWrite for Stalling {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(cx, r)
    }

    // Vectored, so that hyper queues the body's `Bytes` instead of copying
    // it into its own buffer.
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_waits_for_descriptors_and_gives_up_on_a_broken_listener() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(accept_failure(&e(libc::EMFILE)), AcceptFailure::Resources);
        assert_eq!(accept_failure(&e(libc::ENFILE)), AcceptFailure::Resources);
        assert_eq!(
            accept_failure(&e(libc::ECONNABORTED)),
            AcceptFailure::Connection
        );
        assert_eq!(accept_failure(&e(libc::EBADF)), AcceptFailure::Listener);
        assert_eq!(accept_failure(&e(libc::EINVAL)), AcceptFailure::Listener);
        assert_eq!(accept_failure(&e(libc::ENOTSOCK)), AcceptFailure::Listener);
    }

    #[test]
    fn connections_leave_half_the_descriptors_to_registries() {
        assert_eq!(connection_limit(64), 32);
        assert_eq!(connection_limit(1024), MAX_CONNECTIONS);
        assert_eq!(connection_limit(u64::MAX), MAX_CONNECTIONS);
        assert_eq!(connection_limit(1), 1);
    }
}
