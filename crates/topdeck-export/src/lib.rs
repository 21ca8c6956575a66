// SPDX-License-Identifier: Apache-2.0
//! topdeck-export: topdeck snapshots as Prometheus and OpenMetrics
//! expositions, for endpoints and anything else that speaks those formats.
//!
//! Three formats, chosen as a [`Format`], share one set of naming and
//! labelling rules ([`rules`]) and one grouping of series into families
//! ([`Exposition`]):
//!
//! - [`Format::Text`]: Prometheus text 0.0.4
//!   (<https://prometheus.io/docs/instrumenting/exposition_formats/>);
//! - [`Format::OpenMetrics`]: OpenMetrics 1.0
//!   (<https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md>),
//!   written by the same text encoder in its OpenMetrics flavour;
//! - [`Format::Protobuf`]: delimited `io.prometheus.client.MetricFamily`
//!   ([`client_model`]), with native histograms
//!   (<https://prometheus.io/docs/specs/native_histograms/>).
//!
//! topdeck histograms already use the native-histogram bucket scheme, so
//! the protobuf encoder passes schema, zero bucket and buckets through
//! unchanged; classic scrapers get cumulative buckets at a fixed set of at
//! most [`histogram::MAX_CLASSIC_BOUNDS`] of the histogram's own bounds
//! and `+Inf`, the same at every scrape ([`histogram::ClassicBounds`]). Other runtimes' values (see
//! `topdeck::ForeignReader`) are written as Prometheus' client_python
//! writes them: float counters as counters, fixed-bucket histograms as
//! classic histograms in every format (in protobuf, counts also in the
//! float fields unless all are whole), summaries as summaries without
//! quantiles (protobuf's summary count is an integer: a fraction is
//! dropped). [`negotiate`] picks the format from an
//! `Accept` header. [`Scraper`] reads a whole namespace for an endpoint and
//! adds the endpoint's own cost; it keeps what does not change between
//! scrapes (readers, rendered labels as [`Prepared`], the grouping as a
//! [`Shape`], buffers as [`Buffers`]) and hands out the exposition as a
//! [`Body`] in pieces, so 100,000 series scrape in about 16 ms
//! (docs/PERFORMANCE.md, "Prometheus endpoint").
//!
//! [`otlp`] maps the same series ([`Scraper::gather`]) to OpenTelemetry's
//! OTLP metrics, for `topdeck push`: cumulative sums and exponential
//! histograms with the same buckets, one resource per registry.
//!
//! The crate has no error type of its own: encoders only fail when the
//! writer they are given fails (an [`std::io::Error`]), and the scraper
//! counts unreadable registries instead of failing.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
//! let latency = registry.histogram("request_duration_seconds", &[], "Latency.", "seconds")?;
//! latency.record(0.004);
//!
//! let mut scraper = topdeck_export::Scraper::new(topdeck::Namespace::at(dir.path()));
//! let format = topdeck_export::negotiate(Some("application/openmetrics-text; version=1.0.0"));
//! let mut body = Vec::new();
//! scraper.scrape(format, &mut body)?;
//! let body = String::from_utf8(body).unwrap();
//! assert!(body.contains("# TYPE request_duration_seconds histogram"));
//! assert!(body.ends_with("# EOF\n"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod body;
pub mod client_model;
pub mod cpu_wait;
mod format;
pub mod histogram;
mod model;
mod negotiate;
pub mod otlp;
mod own;
mod policy;
mod protobuf;
pub mod rules;
mod scrape;
mod source;
#[cfg(test)]
mod testing;
mod text;
mod wire;

pub use body::{Body, BodyReader, Buffers};
pub use format::Format;
pub use model::{Exposition, Family, Kind, Run, Series, Shape};
pub use negotiate::{accepts_gzip, negotiate};
pub use own::OwnMetrics;
pub use policy::{series_bytes, Caps, DropReason, Drops, Policy, Rules, DROPPED};
pub use scrape::{reason, Chunks, Gathered, ScrapeReport, Scraper, Skipped, REASONS};
pub use source::{Prepared, Source};
