// SPDX-License-Identifier: Apache-2.0
//! `topdeck serve`'s own request handling: the route a request takes and
//! the format and compression negotiated from its `Accept` and
//! `Accept-Encoding` headers (`crates/topdeck-cli/src/cmd/serve/route.rs`,
//! included as is), on any method, request target and header values that
//! hyper would hand over. hyper's own parsing is hyper's to fuzz.
//!
//! Input: lines. The first is the method, the second the request target;
//! each further line is a header value, for `Accept` if it starts with
//! `a`, else for `Accept-Encoding`; the rest of the first byte decides
//! whether the endpoint gzips at all.
#![no_main]

use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Uri};
use libfuzzer_sys::fuzz_target;
use topdeck_export::{accepts_gzip, negotiate, Format};

#[path = "../../crates/topdeck-cli/src/cmd/serve/route.rs"]
#[allow(dead_code)]
mod route;
use route::{joined, route, Route};

fuzz_target!(|data: &[u8]| {
    // The header functions on any string, as a value hyper passed on.
    if let Ok(s) = std::str::from_utf8(data) {
        let f = negotiate(Some(s));
        let _ = f.content_type();
        let _ = accepts_gzip(Some(s));
        if f == Format::Protobuf {
            assert!(
                s.contains("delimited"),
                "protobuf chosen without asking for it"
            );
        }
    }
    let mut lines = data.split(|&b| b == b'\n');
    let Some(method) = lines.next().and_then(|m| Method::from_bytes(m).ok()) else {
        return;
    };
    let Some(uri) = lines.next().and_then(|u| Uri::try_from(u).ok()) else {
        return;
    };
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some((&which, value)) = line.split_first() else {
            continue;
        };
        let Ok(value) = HeaderValue::from_bytes(value) else {
            continue;
        };
        let name = if which == b'a' {
            header::ACCEPT
        } else {
            header::ACCEPT_ENCODING
        };
        headers.append(name, value);
    }
    let gzip = data[0] & 1 == 1;
    let got = route(&method, uri.path(), &headers, gzip);
    let readable = method == Method::GET || method == Method::HEAD;
    match got {
        Route::Metrics { format, gzip: z } => {
            assert!(readable && uri.path() == "/metrics");
            let accept = joined(&headers, header::ACCEPT);
            assert_eq!(format, negotiate(accept.as_deref()));
            assert!(!z || gzip);
        }
        Route::Index => assert!(readable && uri.path() == "/"),
        Route::NotFound => assert!(readable),
        Route::MethodNotAllowed => assert!(!readable),
    }
});
