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
            // Without the URL its Display repeats: the caller names it.
            Err(ureq::Error::Transport(t)) => Outcome::Retry {
                why: match t.message() {
                    Some(m) => format!("{}: {m}", t.kind()),
                    None => t.kind().to_string(),
                },
                retry_after: None,
            },
        }
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
