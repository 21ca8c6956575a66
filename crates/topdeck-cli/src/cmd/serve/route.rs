// SPDX-License-Identifier: Apache-2.0
//! What `topdeck serve` answers a request with, decided from its method,
//! path and headers alone. hyper parses the request; this is the part of
//! request handling that is ours, kept free of I/O so that it is fuzzed
//! directly (`fuzz/fuzz_targets/serve_request.rs` includes this file).

use hyper::header::{self, HeaderMap};
use hyper::Method;
use topdeck_export::{accepts_gzip, negotiate, Format};

/// The answer a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET` or `HEAD /metrics`: a scrape, in `format`, gzipped if `gzip`.
    Metrics {
        /// The format negotiated from `Accept`.
        format: Format,
        /// Whether to compress: the endpoint does and `Accept-Encoding` takes it.
        gzip: bool,
    },
    /// `GET` or `HEAD /`: where the metrics are.
    Index,
    /// Any other path: 404.
    NotFound,
    /// Any other method: 405, with `Allow: GET, HEAD`.
    MethodNotAllowed,
}

/// Routes a request. `gzip` is whether the endpoint compresses at all
/// (`--gzip`).
pub fn route(method: &Method, path: &str, headers: &HeaderMap, gzip: bool) -> Route {
    let readable = matches!(*method, Method::GET | Method::HEAD);
    match (readable, path) {
        (true, "/metrics") => Route::Metrics {
            format: negotiate(joined(headers, header::ACCEPT).as_deref()),
            gzip: gzip && accepts_gzip(joined(headers, header::ACCEPT_ENCODING).as_deref()),
        },
        (true, "/") => Route::Index,
        (true, _) => Route::NotFound,
        (false, _) => Route::MethodNotAllowed,
    }
}

/// Every value of a request header, comma-joined as RFC 9110 allows;
/// values that are not visible ASCII are left out.
pub fn joined(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn scrapes_negotiate_and_everything_else_is_fixed() {
        let prometheus = headers(&[
            (
                header::ACCEPT,
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
            ),
            (header::ACCEPT_ENCODING, "gzip"),
        ]);
        let scrape = |method: &Method, gzip| route(method, "/metrics", &prometheus, gzip);
        let om = |gzip| Route::Metrics {
            format: Format::OpenMetrics,
            gzip,
        };
        assert_eq!(scrape(&Method::GET, true), om(true));
        assert_eq!(scrape(&Method::HEAD, false), om(false));
        assert_eq!(scrape(&Method::POST, true), Route::MethodNotAllowed);
        let none = HeaderMap::new();
        assert_eq!(route(&Method::GET, "/", &none, true), Route::Index);
        assert_eq!(
            route(&Method::GET, "/metrics/", &none, true),
            Route::NotFound
        );
    }

    #[test]
    fn repeated_headers_are_joined_and_opaque_values_left_out() {
        let mut h = headers(&[
            (header::ACCEPT, "text/plain;q=0.1"),
            (header::ACCEPT, "application/openmetrics-text"),
        ]);
        h.append(header::ACCEPT, HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(
            joined(&h, header::ACCEPT).as_deref(),
            Some("text/plain;q=0.1,application/openmetrics-text")
        );
        assert_eq!(
            route(&Method::GET, "/metrics", &h, false),
            Route::Metrics {
                format: Format::OpenMetrics,
                gzip: false
            }
        );
    }
}
