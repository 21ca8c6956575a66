// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve`'s connections: accepting them, their limits, reading
//! their requests and writing their responses, each connection a task on
//! the runtime's one thread. What a request is answered with is the
//! [`Endpoint`]'s. Hostile clients meet limits:
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
//! - bodies are streamed a run of about
//!   [`WINDOW`](super::endpoint::WINDOW) bytes at a time as the client
//!   takes them, and runs waiting to be sent hold at most
//!   [`BODY_BUDGET`](super::endpoint::BODY_BUDGET) bytes in all; a scrape
//!   whose first run finds no room gets 503 and `Retry-After` (the
//!   endpoint's budget: it knows each run's size);
//! - a connection is never kept in one of the last [`HEADROOM`]
//!   descriptors, which stay for scrapes; running out of file descriptors
//!   (or memory) in `accept`, or into those, lowers the
//!   connection limit to [`HEADROOM`] below the connections open, closes
//!   idle ones down to it and tries again, or, with none idle, waits
//!   [`ACCEPT_BACKOFF`]; losing the listening socket ends the process with
//!   an error, so that a supervisor restarts it.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Notify;
use tokio::time::Sleep;

use super::endpoint::Endpoint;
use super::listen::Listener;

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
/// down to this many fewer (see [`Server::shed`]).
const HEADROOM: usize = 16;

/// Listens on `addr` with a longer queue of connections waiting to be
/// accepted than the standard library's 128: under a flood, a connection
/// that finds the queue full has its SYN dropped and waits a second for
/// the retry. The kernel caps it at `net.core.somaxconn`.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
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
pub fn raise_file_limit() -> u64 {
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
pub fn connection_limit(files: u64) -> usize {
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

/// Accepts connections (TCP or Unix) until the listening socket fails.
pub async fn accept<L: Listener>(listener: &L, server: &Arc<Server>) -> io::Error {
    loop {
        server.room().await;
        let failure = match std::future::poll_fn(|cx| listener.poll_next(cx)).await {
            // Descriptors are numbered lowest first, so a connection's
            // number says how many are open: one among the last HEADROOM
            // would leave a scrape none to open the namespace with.
            Ok(stream) if stream.as_raw_fd() as u64 + HEADROOM as u64 >= server.files => {
                drop(stream);
                AcceptFailure::Resources
            }
            Ok(stream) => {
                server.admit(stream);
                continue;
            }
            Err(e) => match accept_failure(&e) {
                AcceptFailure::Listener => return e,
                f => f,
            },
        };
        if failure == AcceptFailure::Resources {
            if server.shed() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// What every connection shares: the endpoint that answers its requests,
/// and the table of connections.
pub struct Server {
    endpoint: Endpoint,
    conns: StdMutex<Conns>,
    /// Told when a connection ends.
    freed: Notify,
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

impl Server {
    /// Serves `endpoint` on at most `limit` connections, with `files`
    /// descriptors (the soft limit: see [`raise_file_limit`]).
    pub fn new(endpoint: Endpoint, limit: usize, files: u64) -> Self {
        Self {
            endpoint,
            conns: StdMutex::new(Conns {
                limit,
                ..Conns::default()
            }),
            freed: Notify::new(),
            files,
        }
    }

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
    fn admit<S: AsyncRead + AsyncWrite + AsRawFd + Unpin + Send + 'static>(
        self: &Arc<Self>,
        stream: S,
    ) {
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

    async fn connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
        self: Arc<Self>,
        stream: S,
        id: u64,
        conn: Arc<Conn>,
    ) {
        let service = service_fn(|request| {
            let server = self.clone();
            // Held until the response's body is sent: see `Conns::evict_idle`.
            let busy = Busy::new(&conn);
            async move {
                Ok::<_, std::convert::Infallible>(server.endpoint.respond(request, busy).await)
            }
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
}

/// A socket that gives up on a client that stops reading: once a write
/// blocks, [`STALL_PROGRESS`] bytes must go out within [`STALL_TIMEOUT`],
/// or writes fail with `TimedOut` and hyper drops the connection. Bytes
/// read from the client (its next request) also count as life.
struct Stalling<S> {
    io: S,
    deadline: Option<Pin<Box<Sleep>>>,
    /// Bytes written since the deadline was set.
    progress: usize,
}

impl<S: AsyncWrite + Unpin> Stalling<S> {
    fn new(io: S) -> Self {
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

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stalling<S> {
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

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalling<S> {
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
