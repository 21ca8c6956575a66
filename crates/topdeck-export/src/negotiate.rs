// SPDX-License-Identifier: Apache-2.0
//! Content negotiation: which format a scraper asked for in its `Accept`
//! header (RFC 9110 §12.5.1 media ranges with `q` weights), and whether it
//! takes gzip (`Accept-Encoding`).
//!
//! What Prometheus sends, for reference: without native histograms,
//! OpenMetrics first, then text 0.0.4; with `--enable-feature=native-histograms`,
//! the delimited protobuf first. Anything not understood falls back to the
//! text format, which every scraper reads.

use crate::format::Format;

/// The format to answer an `Accept` header with: the acceptable media range
/// with the highest `q`, the first listed among equals; text when there is
/// no header or nothing in it is understood.
///
/// ```
/// use topdeck_export::{negotiate, Format};
/// let prometheus_native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;\
///     encoding=delimited;q=0.8,application/openmetrics-text;version=1.0.0;q=0.5,\
///     text/plain;version=0.0.4;q=0.4,*/*;q=0.1";
/// assert_eq!(negotiate(Some(prometheus_native)), Format::Protobuf);
/// assert_eq!(negotiate(Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")), Format::OpenMetrics);
/// assert_eq!(negotiate(None), Format::Text);
/// ```
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let mut best: Option<(f32, Format)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        let (mut proto, mut encoding, mut version) = (None, None, None);
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "q" => q = v.parse().unwrap_or(0.0),
                "proto" => proto = Some(v),
                "encoding" => encoding = Some(v),
                "version" => version = Some(v),
                _ => {}
            }
        }
        let format = match media.as_str() {
            "application/vnd.google.protobuf"
                if proto == Some("io.prometheus.client.MetricFamily")
                    && encoding == Some("delimited") =>
            {
                Format::Protobuf
            }
            "application/openmetrics-text"
                if matches!(version, None | Some("1.0.0") | Some("0.0.1")) =>
            {
                Format::OpenMetrics
            }
            "text/plain" if matches!(version, None | Some("0.0.4")) => Format::Text,
            "text/*" | "*/*" => Format::Text,
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, format));
        }
    }
    best.map_or(Format::Text, |(_, f)| f)
}

/// Whether an `Accept-Encoding` header accepts gzip (`gzip` or `*` with a
/// non-zero `q`).
///
/// ```
/// assert!(topdeck_export::accepts_gzip(Some("gzip, deflate")));
/// assert!(!topdeck_export::accepts_gzip(Some("gzip;q=0, identity")));
/// assert!(!topdeck_export::accepts_gzip(None));
/// ```
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|h| {
        h.split(',').any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim() == "q")
                .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0));
            (name.eq_ignore_ascii_case("gzip") || name == "*") && q > 0.0
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Prometheus 2.42 sends without and with native histograms.
    const PROMETHEUS_DEFAULT: &str = "application/openmetrics-text;version=1.0.0,\
        application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const PROMETHEUS_NATIVE: &str = "application/vnd.google.protobuf;\
        proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.8,\
        application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1";

    #[test]
    fn prometheus_gets_what_it_prefers() {
        assert_eq!(negotiate(Some(PROMETHEUS_DEFAULT)), Format::OpenMetrics);
        assert_eq!(negotiate(Some(PROMETHEUS_NATIVE)), Format::Protobuf);
    }

    #[test]
    fn q_decides_and_the_first_listed_wins_ties() {
        assert_eq!(
            negotiate(Some("text/plain;q=0.9, application/openmetrics-text")),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(Some("text/plain, application/openmetrics-text")),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0, text/plain;q=0.1")),
            Format::Text
        );
    }

    #[test]
    fn unknown_or_incomplete_ranges_fall_back_to_text() {
        assert_eq!(negotiate(Some("application/json")), Format::Text);
        assert_eq!(negotiate(Some("")), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        // Protobuf without the delimited encoding is not something we write.
        assert_eq!(
            negotiate(Some(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily"
            )),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;version=2.0.0")),
            Format::Text
        );
        assert_eq!(negotiate(Some("text/plain;q=abc")), Format::Text);
    }

    #[test]
    fn gzip_is_taken_unless_refused() {
        assert!(accepts_gzip(Some("GZIP")));
        assert!(accepts_gzip(Some("*")));
        assert!(accepts_gzip(Some("identity, gzip;q=0.5")));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
    }
}
