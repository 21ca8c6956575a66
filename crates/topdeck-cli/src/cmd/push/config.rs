// SPDX-License-Identifier: Apache-2.0
//! Where and how `push` sends: the OpenTelemetry exporter variables
//! (<https://opentelemetry.io/docs/specs/otel/protocol/exporter/>), then the
//! command's flags over them.
//!
//! - `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is the URL, used as is;
//!   otherwise `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/metrics` appended to
//!   its path; otherwise `http://localhost:4318/v1/metrics`. The flags
//!   `--metrics-endpoint` and `--endpoint` mean the same, and win.
//! - Headers: `OTEL_EXPORTER_OTLP_HEADERS`, then the `_METRICS_` one, then
//!   `--header`, later ones replacing earlier ones of the same name; values
//!   are percent-decoded as the specification's W3C baggage format says.
//! - Timeout (per request): `_TIMEOUT` in milliseconds, default 10 s.
//! - Compression: `_COMPRESSION`, `gzip` or `none` (the default).
//! - Protocol: `_PROTOCOL` must be `http/protobuf` when set; gRPC and
//!   JSON are not built in.
//!
//! TLS is not built in either: an `https` endpoint is refused with what to
//! do instead.

use std::time::Duration;

use anyhow::{bail, Context, Result};

/// The specification's default for OTLP/HTTP.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/metrics";
/// The specification's default timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How requests are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// Sent as is.
    None,
    /// `Content-Encoding: gzip`.
    Gzip,
}

/// What the flags say, each overriding its variable when given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Flags {
    /// Base URL of an OTLP/HTTP receiver; `/v1/metrics` is appended to its
    /// path (as to OTEL_EXPORTER_OTLP_ENDPOINT). Default
    /// http://localhost:4318, a collector on this host.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// The full URL to POST metrics to, used as is (as
    /// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT).
    #[arg(long, value_name = "URL", conflicts_with = "endpoint")]
    pub metrics_endpoint: Option<String>,
    /// A header sent with every request, `name=value` (e.g. an API key);
    /// may be repeated. Added to OTEL_EXPORTER_OTLP_HEADERS.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,
    /// Time one request may take, e.g. `10s` (OTEL_EXPORTER_OTLP_TIMEOUT).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Compress requests (OTEL_EXPORTER_OTLP_COMPRESSION).
    #[arg(long, value_enum)]
    pub compression: Option<Compression>,
}

/// Where and how to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The URL requests are POSTed to.
    pub url: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Per request.
    pub timeout: Duration,
    /// Of request bodies.
    pub compression: Compression,
}

impl Config {
    /// The configuration from `env` (a variable's value by name) and `flags`.
    pub fn resolve(flags: &Flags, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        // The signal-specific variable wins over the generic one.
        let var = |name: &str| {
            env(&format!("OTEL_EXPORTER_OTLP_METRICS_{name}"))
                .or_else(|| env(&format!("OTEL_EXPORTER_OTLP_{name}")))
                .filter(|v| !v.trim().is_empty())
        };
        if let Some(p) = var("PROTOCOL") {
            if p.trim() != "http/protobuf" {
                bail!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL is {p:?}: topdeck push speaks http/protobuf only; \
                     unset it or set it to http/protobuf (a collector's otlp receiver accepts both)"
                );
            }
        }
        let url = match (&flags.metrics_endpoint, &flags.endpoint) {
            (Some(u), _) => u.clone(),
            (None, Some(base)) => with_metrics_path(base),
            (None, None) => {
                match env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").filter(|v| !v.trim().is_empty()) {
                    Some(u) => u,
                    None => env("OTEL_EXPORTER_OTLP_ENDPOINT")
                        .filter(|v| !v.trim().is_empty())
                        .map_or_else(|| DEFAULT_ENDPOINT.to_owned(), |b| with_metrics_path(&b)),
                }
            }
        };
        let url = url.trim().to_owned();
        check_url(&url)?;
        let mut headers = Vec::new();
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        ] {
            if let Some(v) = env(name) {
                for (k, v) in parse_headers(&v).with_context(|| format!("in {name}"))? {
                    set_header(&mut headers, k, v).with_context(|| format!("in {name}"))?;
                }
            }
        }
        for h in &flags.headers {
            let (k, v) = h
                .split_once('=')
                .with_context(|| format!("--header {h:?}: write it as name=value"))?;
            set_header(&mut headers, k.trim().to_owned(), v.trim().to_owned())
                .with_context(|| format!("--header {h:?}"))?;
        }
        let timeout = match (flags.timeout, var("TIMEOUT")) {
            (Some(t), _) => t,
            (None, Some(ms)) => Duration::from_millis(ms.trim().parse().with_context(|| {
                format!("OTEL_EXPORTER_OTLP_TIMEOUT is {ms:?}: give milliseconds, e.g. 10000")
            })?),
            (None, None) => DEFAULT_TIMEOUT,
        };
        if timeout.is_zero() {
            bail!("the timeout must be more than 0");
        }
        let compression = match (flags.compression, var("COMPRESSION")) {
            (Some(c), _) => c,
            (None, Some(c)) => match c.trim() {
                "gzip" => Compression::Gzip,
                "none" => Compression::None,
                other => bail!("OTEL_EXPORTER_OTLP_COMPRESSION is {other:?}: use gzip or none"),
            },
            (None, None) => Compression::None,
        };
        Ok(Self {
            url,
            headers,
            timeout,
            compression,
        })
    }
}

/// The generic endpoint's rule: `/v1/metrics` appended to its path.
fn with_metrics_path(base: &str) -> String {
    format!("{}/v1/metrics", base.trim().trim_end_matches('/'))
}

fn check_url(url: &str) -> Result<()> {
    if url.starts_with("https://") {
        bail!(
            "{url}: TLS is not built into topdeck push; push over http to a collector on this \
             host or network (its otlp receiver can forward over TLS), or through a \
             TLS-terminating proxy"
        );
    }
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("{url}: not an http:// URL (e.g. http://localhost:4318/v1/metrics)");
    };
    if rest.is_empty() || rest.starts_with('/') {
        bail!("{url}: no host (e.g. http://localhost:4318/v1/metrics)");
    }
    // What the sender will parse it as, refused now rather than at every send.
    if let Err(e) = url.parse::<hyper::Uri>() {
        bail!("{url}: not a URL ({e}; e.g. http://localhost:4318/v1/metrics)");
    }
    Ok(())
}

/// `name=value` pairs separated by commas, values percent-encoded.
fn parse_headers(s: &str) -> Result<Vec<(String, String)>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .with_context(|| format!("{p:?} is not name=value"))?;
            Ok((k.trim().to_owned(), percent_decode(v.trim())?))
        })
        .collect()
}

fn percent_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .with_context(|| format!("{s:?}: a % not followed by two hex digits"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).with_context(|| format!("{s:?} does not decode to UTF-8"))
}

/// Header names are case-insensitive: a later one replaces an earlier one.
/// Sets header `name` (replacing one of any case), refusing a name or
/// value HTTP cannot carry now rather than at every send.
fn set_header(headers: &mut Vec<(String, String)>, name: String, value: String) -> Result<()> {
    if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        bail!("header {name:?}: not a valid HTTP header name");
    }
    if hyper::header::HeaderValue::from_str(&value).is_err() {
        bail!("header {name}: its value is not valid in HTTP (control characters?)");
    }
    headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&name));
    headers.push((name, value));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(flags: &Flags, vars: &[(&str, &str)]) -> Result<Config> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::resolve(flags, |k| vars.get(k).cloned())
    }

    #[test]
    fn the_generic_endpoint_gets_the_path_and_the_metrics_one_is_used_as_is() {
        let none = Flags::default();
        assert_eq!(resolve(&none, &[]).unwrap().url, DEFAULT_ENDPOINT);
        let c = resolve(
            &none,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/otlp/")],
        )
        .unwrap();
        assert_eq!(c.url, "http://c:4318/otlp/v1/metrics");
        let c = resolve(
            &none,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:9/ingest"),
            ],
        )
        .unwrap();
        assert_eq!(c.url, "http://m:9/ingest");
        let flags = Flags {
            endpoint: Some("http://f:1".into()),
            ..Flags::default()
        };
        let c = resolve(
            &flags,
            &[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:9/x")],
        )
        .unwrap();
        assert_eq!(
            c.url, "http://f:1/v1/metrics",
            "a flag beats every variable"
        );
        let flags = Flags {
            metrics_endpoint: Some("http://f:1/custom".into()),
            ..Flags::default()
        };
        assert_eq!(resolve(&flags, &[]).unwrap().url, "http://f:1/custom");
    }

    #[test]
    fn headers_merge_decoded_with_later_ones_winning() {
        let flags = Flags {
            headers: vec!["X-Team=b".into()],
            ..Flags::default()
        };
        let c = resolve(
            &flags,
            &[
                ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b%3Dc, x-team=a"),
                ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "API-KEY=z"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.headers,
            [
                ("API-KEY".into(), "z".into()),
                ("X-Team".into(), "b".into())
            ]
        );
        let c = resolve(
            &Flags::default(),
            &[("OTEL_EXPORTER_OTLP_HEADERS", "k=a%20b%3Dc")],
        )
        .unwrap();
        assert_eq!(c.headers, [("k".into(), "a b=c".into())]);
        assert!(resolve(
            &Flags::default(),
            &[("OTEL_EXPORTER_OTLP_HEADERS", "k=%zz")]
        )
        .is_err());
        assert!(resolve(
            &Flags::default(),
            &[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")]
        )
        .is_err());
    }

    #[test]
    fn timeout_compression_and_protocol_follow_the_variables() {
        let c = resolve(&Flags::default(), &[]).unwrap();
        assert_eq!(
            (c.timeout, c.compression),
            (DEFAULT_TIMEOUT, Compression::None)
        );
        let c = resolve(
            &Flags::default(),
            &[
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "gzip"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ],
        )
        .unwrap();
        assert_eq!(
            (c.timeout, c.compression),
            (Duration::from_millis(2500), Compression::Gzip)
        );
        let flags = Flags {
            timeout: Some(Duration::from_secs(1)),
            compression: Some(Compression::None),
            ..Flags::default()
        };
        let c = resolve(&flags, &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")]).unwrap();
        assert_eq!(
            (c.timeout, c.compression),
            (Duration::from_secs(1), Compression::None)
        );
        for bad in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c d:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "bad name=1"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-token=a%0Ab"),
        ] {
            let e = resolve(&Flags::default(), &[bad]).unwrap_err();
            assert!(!format!("{e:#}").is_empty(), "{bad:?}");
        }
    }
}
