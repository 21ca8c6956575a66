// SPDX-License-Identifier: Apache-2.0
//! One OTLP/HTTP request and what its answer means, after the OTLP
//! specification (<https://opentelemetry.io/docs/specs/otlp/#otlphttp-response>):
//! 2xx is delivered (a partial success names what was refused); 429, 502,
//! 503 and 504 are worth retrying, after `Retry-After` when given; any
//! other status is a refusal for good (retrying the same bytes would be
//! refused again); no answer at all (refused connection, timeout) is
//! retried.

use std::io::ErrorKind as Io;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderName, HeaderValue, CONTENT_ENCODING, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use prost::Message;
use tokio::net::TcpStream;
use topdeck_export::otlp::proto::collector::ExportMetricsServiceResponse;

use super::config::{Compression, Config};

/// The most of a response body read (an error message, a partial success).
const MAX_RESPONSE: usize = 64 << 10;

/// What became of one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Accepted; `rejected` points refused by a partial success, and why.
    Delivered { rejected: i64, message: String },
    /// Not delivered, worth retrying (after `retry_after`, if the
    /// receiver said).
    Retry {
        why: String,
        retry_after: Option<Duration>,
    },
    /// Refused for good.
    Refused { why: String },
}

/// Sends request bodies to one receiver: one HTTP/1.1 POST per body on a
/// connection of its own, through hyper (as `serve` answers), driven by a
/// runtime of one thread that the push loop blocks on.
pub struct Sender {
    rt: tokio::runtime::Runtime,
    config: Config,
    /// Where requests go, or why the URL cannot be used.
    target: Result<Target, String>,
}

/// The parts of the URL a request needs.
struct Target {
    host: String,
    port: u16,
    authority: String,
    path: String,
}

impl Target {
    fn of(url: &str) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|e| format!("{url}: not a URL ({e})"))?;
        let (Some(host), Some(authority)) = (uri.host(), uri.authority()) else {
            return Err(format!("{url}: no host"));
        };
        Ok(Self {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: uri.port_u16().unwrap_or(80),
            authority: authority.to_string(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
        })
    }
}

/// A request that got no answer, before it is put in words.
enum NoAnswer {
    Resolve(std::io::Error),
    Connect(std::io::Error),
    Exchange(hyper::Error),
    ConnectTimeout,
    AnswerTimeout,
}

impl Sender {
    pub fn new(config: Config) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .expect("a runtime of one thread for push's requests");
        let target = Target::of(&config.url);
        Self { rt, config, target }
    }

    pub fn url(&self) -> &str {
        &self.config.url
    }

    /// POSTs `body` (already compressed as configured).
    pub fn send(&self, body: &[u8]) -> Outcome {
        let target = match &self.target {
            Ok(t) => t,
            Err(why) => return Outcome::Refused { why: why.clone() },
        };
        let req = match self.request(target, Bytes::copy_from_slice(body)) {
            Ok(r) => r,
            Err(why) => return Outcome::Refused { why },
        };
        match self.rt.block_on(exchange(target, req, self.config.timeout)) {
            Ok((status, protobuf, retry_after, body)) => {
                if status.is_success() {
                    let (rejected, message) = partial_success(protobuf, &body);
                    return Outcome::Delivered { rejected, message };
                }
                let why = format!(
                    "HTTP {}: {}",
                    status.as_u16(),
                    status_message(protobuf, &body)
                );
                if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
                    Outcome::Retry { why, retry_after }
                } else {
                    Outcome::Refused { why }
                }
            }
            Err(e) => Outcome::Retry {
                why: no_answer(e, self.config.timeout),
                retry_after: None,
            },
        }
    }

    fn request(&self, t: &Target, body: Bytes) -> Result<Request<Full<Bytes>>, String> {
        let mut req = Request::post(t.path.as_str())
            .header(HOST, t.authority.as_str())
            .header(CONTENT_TYPE, "application/x-protobuf")
            .header(USER_AGENT, concat!("topdeck/", env!("CARGO_PKG_VERSION")));
        if self.config.compression == Compression::Gzip {
            req = req.header(CONTENT_ENCODING, "gzip");
        }
        for (k, v) in &self.config.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("header {k:?}: not a valid HTTP header name"))?;
            let value = HeaderValue::from_str(v)
                .map_err(|_| format!("header {k}: its value is not valid in HTTP"))?;
            req = req.header(name, value);
        }
        req.body(Full::new(body))
            .map_err(|e| format!("the request: {e}"))
    }
}

/// Status, whether the body is protobuf, `Retry-After`, and the body's
/// first [`MAX_RESPONSE`] bytes. Connecting (the name resolved included)
/// and the exchange each have the whole `limit`, as a connect timeout and
/// a read timeout would.
async fn exchange(
    t: &Target,
    req: Request<Full<Bytes>>,
    limit: Duration,
) -> Result<(StatusCode, bool, Option<Duration>, Bytes), NoAnswer> {
    let connect = async {
        let addrs = tokio::net::lookup_host((t.host.as_str(), t.port))
            .await
            .map_err(NoAnswer::Resolve)?;
        let mut last = None;
        for a in addrs {
            match TcpStream::connect(a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => NoAnswer::Connect(e),
            None => NoAnswer::Resolve(std::io::Error::new(Io::NotFound, "no address")),
        })
    };
    let stream = tokio::time::timeout(limit, connect)
        .await
        .map_err(|_| NoAnswer::ConnectTimeout)??;
    let answer = async {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(NoAnswer::Exchange)?;
        // The connection's own task reads and writes while the request waits.
        let conn = tokio::spawn(conn);
        let resp = send.send_request(req).await.map_err(NoAnswer::Exchange)?;
        let status = resp.status();
        let protobuf = resp
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/x-protobuf"));
        let retry = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after);
        // A body cut short or too long still leaves the status to go by.
        let body = Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        conn.abort();
        Ok((status, protobuf, retry, body))
    };
    tokio::time::timeout(limit, answer)
        .await
        .map_err(|_| NoAnswer::AnswerTimeout)?
}

/// Why a request got no answer, in words that say what to look at: a
/// timeout and after how long, a refused or reset connection, a name that
/// does not resolve. Without the URL: the caller names it.
fn no_answer(e: NoAnswer, timeout: Duration) -> String {
    let limit = humantime::format_duration(timeout);
    let io_kind = |e: &hyper::Error| {
        std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind)
    };
    match e {
        NoAnswer::ConnectTimeout => format!(
            "timed out after {limit} connecting (nothing answered: a host that is down, or a \
             firewall dropping packets; the limit is --timeout or OTEL_EXPORTER_OTLP_TIMEOUT)"
        ),
        NoAnswer::AnswerTimeout => format!(
            "timed out after {limit} waiting for an answer (connected, but the receiver did not \
             answer in time; the limit is --timeout or OTEL_EXPORTER_OTLP_TIMEOUT)"
        ),
        NoAnswer::Resolve(e) => {
            format!("cannot resolve the host name ({e}): check the name, or /etc/resolv.conf")
        }
        NoAnswer::Connect(e) if e.kind() == Io::ConnectionRefused => {
            "connection refused (nothing listens at that address and port)".into()
        }
        NoAnswer::Connect(e) => format!("cannot connect: {e}"),
        NoAnswer::Exchange(e) => match io_kind(&e) {
            Some(Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe) => {
                "the connection was reset before an answer (the receiver closed it)".into()
            }
            _ if e.is_incomplete_message() || io_kind(&e) == Some(Io::UnexpectedEof) => {
                "the connection was closed before an answer (the receiver closed it)".into()
            }
            _ => format!("the exchange failed: {e}"),
        },
    }
}

/// The partial success of a 2xx response, if its body says so.
fn partial_success(protobuf: bool, body: &[u8]) -> (i64, String) {
    if !protobuf {
        return (0, String::new());
    }
    match ExportMetricsServiceResponse::decode(body) {
        Ok(r) => r.partial_success.map_or((0, String::new()), |p| {
            (p.rejected_data_points, p.error_message)
        }),
        Err(_) => (0, String::new()),
    }
}

/// What an error response says: the `google.rpc.Status` message of a
/// protobuf body is its field 2; other bodies are shown as text, cut short.
fn status_message(protobuf: bool, body: &[u8]) -> String {
    if protobuf {
        #[derive(Clone, PartialEq, prost::Message)]
        struct Status {
            #[prost(string, tag = "2")]
            message: String,
        }
        if let Ok(s) = Status::decode(body) {
            return s.message;
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// `Retry-After`: seconds, or an HTTP date.
fn retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A receiver that answers one request with `response`, and the
    /// sender pointed at it.
    fn answering(response: Vec<u8>) -> Sender {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            // The whole request (every test sends a 1-byte body) before
            // answering: closing on unread bytes would reset the answer.
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let complete = |got: &[u8]| {
                got.windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .is_some_and(|end| got.len() > end + 4)
            };
            while !complete(&got) {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            conn.write_all(&response).unwrap();
        });
        Sender::new(Config {
            url: format!("http://127.0.0.1:{port}/v1/metrics"),
            headers: Vec::new(),
            timeout: Duration::from_secs(5),
            compression: Compression::None,
        })
    }

    fn response(status: &str, headers: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
        let mut r = format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn answers_are_delivered_retried_or_refused_as_otlp_says() {
        use topdeck_export::otlp::proto::collector::ExportMetricsPartialSuccess;
        let partial = ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: 3,
                error_message: "bad names".into(),
            }),
        }
        .encode_to_vec();
        let ok = answering(response("200 OK", "", "application/x-protobuf", &partial));
        assert_eq!(
            ok.send(b"x"),
            Outcome::Delivered {
                rejected: 3,
                message: "bad names".into()
            }
        );
        let busy = answering(response(
            "503 Service Unavailable",
            "Retry-After: 4\r\n",
            "text/plain",
            b"overloaded",
        ));
        assert_eq!(
            busy.send(b"x"),
            Outcome::Retry {
                why: "HTTP 503: overloaded".into(),
                retry_after: Some(Duration::from_secs(4))
            }
        );
        let limited = answering(response("429 Too Many Requests", "", "text/plain", b""));
        assert!(matches!(
            limited.send(b"x"),
            Outcome::Retry {
                retry_after: None,
                ..
            }
        ));
        // google.rpc.Status { code: 3, message: "no" }: field 2 is the message.
        let refused = answering(response(
            "400 Bad Request",
            "",
            "application/x-protobuf",
            &[0x08, 0x03, 0x12, 0x02, b'n', b'o'],
        ));
        assert_eq!(
            refused.send(b"x"),
            Outcome::Refused {
                why: "HTTP 400: no".into()
            }
        );
        // Nobody listening: retried.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let gone = Sender::new(Config {
            url: format!("http://127.0.0.1:{port}/v1/metrics"),
            headers: Vec::new(),
            timeout: Duration::from_secs(5),
            compression: Compression::None,
        });
        let Outcome::Retry { why, .. } = gone.send(b"x") else {
            panic!("not retried")
        };
        assert!(why.starts_with("connection refused"), "{why}");
    }

    fn sender(url: String, timeout: Duration) -> Sender {
        Sender::new(Config {
            url,
            headers: Vec::new(),
            timeout,
            compression: Compression::None,
        })
    }

    /// A receiver that accepts and never reads nor answers: a timeout,
    /// said as one with its length.
    #[test]
    fn a_receiver_that_never_answers_is_a_timeout_and_says_after_how_long() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/metrics", listener.local_addr().unwrap());
        // Held, never read: the kernel completes the connection.
        let held = std::thread::spawn(move || listener.accept().map(|(c, _)| c));
        let timeout = Duration::from_millis(300);
        let Outcome::Retry { why, retry_after } = sender(url, timeout).send(b"x") else {
            panic!("not retried")
        };
        assert_eq!(retry_after, None);
        assert!(
            why.starts_with("timed out after 300ms waiting for an answer"),
            "{why}"
        );
        drop(held.join());
    }

    /// A receiver that reads the request and closes without answering.
    #[test]
    fn a_receiver_that_closes_without_answering_says_so() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/metrics", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            // The whole request is small: one read, then close.
            let _ = c.read(&mut buf);
        });
        let Outcome::Retry { why, .. } = sender(url, Duration::from_secs(5)).send(b"x") else {
            panic!("not retried")
        };
        assert!(why.contains("before an answer"), "{why}");
    }

    #[test]
    fn a_host_name_that_does_not_resolve_says_so() {
        // .invalid never resolves (RFC 6761).
        let url = "http://collector.invalid:4318/v1/metrics".to_owned();
        let Outcome::Retry { why, .. } = sender(url, Duration::from_secs(5)).send(b"x") else {
            panic!("not retried")
        };
        assert!(why.starts_with("cannot resolve the host name"), "{why}");
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        assert_eq!(retry_after(" 7 "), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(120);
        let d = retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(
            d > Duration::from_secs(110) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO),
            "a date past is now"
        );
        assert_eq!(retry_after("soon"), None);
    }
}
