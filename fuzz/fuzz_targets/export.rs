// SPDX-License-Identifier: Apache-2.0
//! What an endpoint does with a hostile registry: read it (as the `reader`
//! target does), then encode its snapshot, labelled with the header's own
//! process and registry names, in all three exposition formats, next to a
//! second source with the same metrics (so families merge), regrouped by
//! shape and with prepared labels as the scraper does. The encodings must
//! not panic, the text formats must be UTF-8 ending in a line feed
//! (OpenMetrics in `# EOF`), and the protobuf stream must decode as
//! delimited `MetricFamily` messages.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use topdeck_export::client_model::MetricFamily;
use topdeck_export::{Exposition, Format, Prepared, Source};
use topdeck_fuzz::with_reader;

fuzz_target!(|data: &[u8]| {
    with_reader(data, |r| {
        let Ok(snap) = r.snapshot() else { return };
        let h = r.header();
        let sources = [
            Source::new(&h.process_name, h.pid, &h.registry_name, snap.iter()),
            Source::new("second", 2, "main", snap.iter()),
        ];
        let exp = Exposition::group(&sources);
        let _ = exp.conflicts();
        for format in [Format::Text, Format::OpenMetrics, Format::Protobuf] {
            let mut out = Vec::new();
            format.encode(&mut out, &exp).expect("encoding into memory");
            check(format, &out);
        }
        // The scraper's path: labels rendered once, the grouping reused.
        let mut prepared = [Prepared::default(), Prepared::default()];
        for (p, s) in prepared.iter_mut().zip(&sources) {
            p.update(s);
        }
        let again = [
            Source::new(&h.process_name, h.pid, &h.registry_name, snap.iter())
                .with_prepared(&prepared[0]),
            Source::new("second", 2, "main", snap.iter()).with_prepared(&prepared[1]),
        ];
        let shape = exp.shape();
        let exp2 = Exposition::regroup(&again, &shape).unwrap_or_else(|| Exposition::group(&again));
        for format in [Format::Text, Format::OpenMetrics, Format::Protobuf] {
            let mut first = Vec::new();
            format
                .encode(&mut first, &exp)
                .expect("encoding into memory");
            let mut out = Vec::new();
            format
                .encode(&mut out, &exp2)
                .expect("encoding into memory");
            assert_eq!(
                out, first,
                "{format:?}: prepared labels changed the exposition"
            );
        }
    });
});

fn check(format: Format, out: &[u8]) {
    match format {
        Format::Text | Format::OpenMetrics => {
            let text = std::str::from_utf8(out).expect("a text exposition is UTF-8");
            assert!(text.is_empty() || text.ends_with('\n'));
            if format == Format::OpenMetrics {
                assert!(text.ends_with("# EOF\n"));
            }
        }
        Format::Protobuf => {
            let mut rest = out;
            while !rest.is_empty() {
                MetricFamily::decode_length_delimited(&mut rest)
                    .expect("the protobuf stream decodes");
            }
        }
    }
}
