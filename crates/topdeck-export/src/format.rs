// SPDX-License-Identifier: Apache-2.0
//! The exposition formats, and the one way in to their encoders: every
//! format takes an [`Exposition`] and fills [`Buffers`], and callers pick
//! the format as a value ([`negotiate`](crate::negotiate) picks it from an
//! `Accept` header).

use std::io::{self, Write};

use crate::body::{Body, Buffers};
use crate::model::{Exposition, Run};
use crate::protobuf;
use crate::text::{self, Flavour};

/// An exposition format.
///
/// ```
/// use topdeck_export::{Exposition, Format, Source};
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.counter("jobs_total", &[], "Jobs done.", "").unwrap().add(3);
/// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
/// let snap = reader.snapshot().unwrap();
/// let sources = [Source::new("worker", 42, "main", snap.iter())];
///
/// let mut out = Vec::new();
/// Format::OpenMetrics.encode(&mut out, &Exposition::group(&sources)).unwrap();
/// assert_eq!(
///     String::from_utf8(out).unwrap(),
///     "# TYPE jobs counter\n# HELP jobs Jobs done.\n\
///      jobs_total{process=\"worker\",pid=\"42\"} 3\n# EOF\n"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Prometheus text 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
    /// Delimited `io.prometheus.client.MetricFamily` protobuf.
    Protobuf,
}

impl Format {
    /// The `Content-Type` to answer with.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Text => "text/plain; version=0.0.4; charset=utf-8",
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Protobuf => {
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
            }
        }
    }

    /// Writes `exp` in this format.
    pub fn encode(self, w: &mut impl Write, exp: &Exposition<'_>) -> io::Result<()> {
        self.encode_with(w, exp, &mut Buffers::default())
    }

    /// Writes `exp` in this format, with buffers kept from a previous encoding.
    pub fn encode_with(
        self,
        w: &mut impl Write,
        exp: &Exposition<'_>,
        buffers: &mut Buffers,
    ) -> io::Result<()> {
        self.encode_body(exp, buffers)?.write_to(w)
    }

    /// Encodes `exp` into `buffers` and returns the body, in pieces.
    pub fn encode_body<'b>(
        self,
        exp: &Exposition<'_>,
        buffers: &'b mut Buffers,
    ) -> io::Result<Body<'b>> {
        self.encode_families(exp, buffers, &Run::whole(0..exp.len()))
    }

    /// Encodes one run of `exp`'s families (one of [`Exposition::runs`]) into `buffers` and returns them, in
    /// pieces: the runs of an exposition encoded one after another are,
    /// byte for byte, its whole encoding.
    pub fn encode_families<'b>(
        self,
        exp: &Exposition<'_>,
        buffers: &'b mut Buffers,
        run: &Run,
    ) -> io::Result<Body<'b>> {
        match self {
            Self::Text => text::encode_body(Flavour::Prometheus, exp, buffers, run),
            Self::OpenMetrics => text::encode_body(Flavour::OpenMetrics, exp, buffers, run),
            Self::Protobuf => protobuf::encode_body(exp, buffers, run),
        }
    }

    /// A short name, for labels and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::OpenMetrics => "openmetrics",
            Self::Protobuf => "protobuf",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_name_the_versions() {
        assert!(Format::Text.content_type().contains("version=0.0.4"));
        assert!(Format::OpenMetrics.content_type().contains("version=1.0.0"));
        assert!(Format::Protobuf
            .content_type()
            .contains("encoding=delimited"));
    }
}
