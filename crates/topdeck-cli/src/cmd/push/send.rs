// SPDX-License-Identifier: Apache-2.0
//! One OTLP/HTTP request and what its answer means, after the OTLP
//! specification (<https://opentelemetry.io/docs/specs/otlp/#otlphttp-response>):
//! 2xx is delivered (a partial success names what was refused); 429, 502,
//! 503 and 504 are worth retrying, after `Retry-After` when given; any
//! other status is a refusal for good (retrying the same bytes would be
//! refused again); no answer at all (refused connection, timeout) is
//! retried.

use std::io::Read;
use std::time::{Duration, SystemTime};

use prost::Message;
use topdeck_export::otlp::proto::collector::ExportMetricsServiceResponse;

use super::config::{Compression, Config};

/// The most of a response body read (an error message, a partial success).
const MAX_RESPONSE: u64 = 64 << 10;

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

/// Sends request bodies to one receiver.
pub struct Sender {
    agent: ureq::Agent,
    config: Config,
}

impl Sender {
    pub fn new(config: Config) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout(config.timeout)
            // A POST is never replayed elsewhere.
            .redirects(0)
            .user_agent(concat!("topdeck/", env!("CARGO_PKG_VERSION")))
            .build();
        Self { agent, config }
    }

    pub fn url(&self) -> &str {
        &self.config.url
    }

    /// POSTs `body` (already compressed as configured).
    pub fn send(&self, body: &[u8]) -> Outcome {
        let mut req = self
            .agent
            .post(&self.config.url)
            .set("Content-Type", "application/x-protobuf");
        if self.config.compression == Compression::Gzip {
            req = req.set("Content-Encoding", "gzip");
        }
        for (k, v) in &self.config.headers {
            req = req.set(k, v);
        }
        match req.send_bytes(body) {
            Ok(resp) => {
                let (rejected, message) = partial_success(resp);
                Outcome::Delivered { rejected, message }
            }
            Err(ureq::Error::Status(code, resp)) => {
                let retry_after = resp.header("Retry-After").and_then(retry_after);
                let why = format!("HTTP {code}: {}", status_message(resp));
                if matches!(code, 429 | 502 | 503 | 504) {
                    Outcome::Retry { why, retry_after }
                } else {
                    Outcome::Refused { why }
                }
            }
            Err(ureq::Error::Transport(t)) => Outcome::Retry {
                why: no_answer(&t, self.config.timeout),
                retry_after: None,
            },
        }
    }
}

/// Why a request got no answer, in words that say what to look at: a
/// timeout and after how long, a refused or reset connection, a name that
/// does not resolve. Without the URL (its Display repeats it): the caller
/// names it.
fn no_answer(t: &ureq::Transport, timeout: Duration) -> String {
    use std::io::ErrorKind as Io;
    let io = std::error::Error::source(t).and_then(|e| e.downcast_ref::<std::io::Error>());
    let limit = humantime::format_duration(timeout);
    let connecting = t.kind() == ureq::ErrorKind::ConnectionFailed;
    match (t.kind(), io.map(std::io::Error::kind)) {
        (_, Some(Io::TimedOut | Io::WouldBlock)) if connecting => format!(
            "timed out after {limit} connecting (nothing answered: a host that is down, or a              firewall dropping packets; the limit is --timeout or OTEL_EXPORTER_OTLP_TIMEOUT)"
        ),
        (_, Some(Io::TimedOut | Io::WouldBlock)) => format!(
            "timed out after {limit} waiting for an answer (connected, but the receiver did not              answer in time; the limit is --timeout or OTEL_EXPORTER_OTLP_TIMEOUT)"
        ),
        (_, Some(Io::ConnectionRefused)) => {
            "connection refused (nothing listens at that address and port)".into()
        }
        (_, Some(Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe)) => {
            "the connection was reset before an answer (the receiver closed it)".into()
        }
        (_, Some(Io::UnexpectedEof)) => {
            "the connection was closed before an answer (the receiver closed it)".into()
        }
        (ureq::ErrorKind::Dns, _) => format!(
            "cannot resolve the host name ({}): check the name, or /etc/resolv.conf",
            t.message().unwrap_or("no address")
        ),
        (kind, _) => match (t.message(), io) {
            (Some(m), Some(e)) => format!("{kind}: {m}: {e}"),
            (Some(m), None) => format!("{kind}: {m}"),
            (None, Some(e)) => format!("{kind}: {e}"),
            (None, None) => kind.to_string(),
        },
    }
}

/// The partial success of a 2xx response, if its body says so.
fn partial_success(resp: ureq::Response) -> (i64, String) {
    let protobuf = resp.content_type() == "application/x-protobuf";
    let mut body = Vec::new();
    if resp
        .into_reader()
        .take(MAX_RESPONSE)
        .read_to_end(&mut body)
        .is_err()
        || !protobuf
    {
        return (0, String::new());
    }
    match ExportMetricsServiceResponse::decode(&body[..]) {
        Ok(r) => r.partial_success.map_or((0, String::new()), |p| {
            (p.rejected_data_points, p.error_message)
        }),
        Err(_) => (0, String::new()),
    }
}

/// What an error response says: the `google.rpc.Status` message of a
/// protobuf body is its field 2; other bodies are shown as text, cut short.
fn status_message(resp: ureq::Response) -> String {
    let protobuf = resp.content_type() == "application/x-protobuf";
    let mut body = Vec::new();
    let _ = resp.into_reader().take(MAX_RESPONSE).read_to_end(&mut body);
    if protobuf {
        #[derive(Clone, PartialEq, prost::Message)]
        struct Status {
            #[prost(string, tag = "2")]
            message: String,
        }
        if let Ok(s) = Status::decode(&body[..]) {
            return s.message;
        }
    }
    let text = String::from_utf8_lossy(&body);
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
    use std::io::Write;
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
