// SPDX-License-Identifier: Apache-2.0
//! Classic scrapers see each exponential histogram at one fixed set of
//! `le` bounds, from the first scrape on, while values recorded into a real
//! registry between scrapes fill ever more buckets: at most
//! `MAX_CLASSIC_BOUNDS` of them and `+Inf`, the same in text, OpenMetrics
//! and protobuf's classic field, each cumulative count exact. Native
//! (protobuf) and OTLP keep every bucket the writer filled.

use std::collections::BTreeMap;

use prost::Message;
use topdeck::{Namespace, Registry, Value};
use topdeck_export::client_model::MetricFamily;
use topdeck_export::histogram::MAX_CLASSIC_BOUNDS;
use topdeck_export::otlp::proto::metrics::metric::Data;
use topdeck_export::{Format, Scraper};

const NAME: &str = "wait_seconds";

/// The `le` bounds and cumulative counts of `NAME` in a text scrape.
fn text_buckets(scraper: &mut Scraper, format: Format) -> Vec<(String, u64)> {
    let mut body = Vec::new();
    scraper.scrape(format, &mut body).unwrap();
    let body = String::from_utf8(body).unwrap();
    body.lines()
        .filter(|l| l.starts_with(&format!("{NAME}_bucket{{")))
        .map(|l| {
            let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
            let count = l.rsplit(' ').next().unwrap().parse().unwrap();
            (le.to_owned(), count)
        })
        .collect()
}

/// `NAME` in a protobuf scrape: the classic buckets as `(le, count)`, and
/// the native buckets as `index -> count`.
fn protobuf_buckets(scraper: &mut Scraper) -> (Vec<(f64, u64)>, BTreeMap<i32, u64>) {
    let mut body = Vec::new();
    scraper.scrape(Format::Protobuf, &mut body).unwrap();
    let mut bytes = &body[..];
    while !bytes.is_empty() {
        let f = MetricFamily::decode_length_delimited(&mut bytes).unwrap();
        if f.name != NAME {
            continue;
        }
        let h = f.metric[0].histogram.clone().unwrap();
        let classic = h
            .bucket
            .iter()
            .map(|b| (b.upper_bound, b.cumulative_count))
            .collect();
        let mut native = BTreeMap::new();
        let (mut index, mut count, mut deltas) = (0i32, 0i64, h.positive_delta.iter());
        for (k, s) in h.positive_span.iter().enumerate() {
            index = if k == 0 { s.offset } else { index + s.offset };
            for _ in 0..s.length {
                count += deltas.next().unwrap();
                if count != 0 {
                    native.insert(index, count as u64);
                }
                index += 1;
            }
        }
        return (classic, native);
    }
    panic!("no {NAME} in the protobuf scrape")
}

/// The registry's own buckets of `NAME` that hold anything, by index.
fn recorded_buckets(scraper: &mut Scraper) -> BTreeMap<i32, u64> {
    let gathered = scraper.gather();
    let Some(Value::Histogram(h)) = gathered.sources[0].1.get(NAME, &[]) else {
        panic!("{NAME} is not a histogram")
    };
    h.buckets
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(i, &n)| (h.min_index + i as i32, n))
        .collect()
}

#[test]
fn classic_scrapes_keep_one_le_set_while_new_buckets_fill_and_native_keeps_every_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::builder().dir(dir.path()).build().unwrap();
    let wait = registry
        .histogram(NAME, &[], "Time waited.", "seconds")
        .unwrap();
    let mut scraper = Scraper::new(Namespace::at(dir.path()));

    // The first scrape, of an empty histogram, sets the bounds for good.
    let first = text_buckets(&mut scraper, Format::Text);
    let les: Vec<String> = first.iter().map(|(le, _)| le.clone()).collect();
    assert!(
        les.len() <= MAX_CLASSIC_BOUNDS as usize + 1,
        "{} le series: {les:?}",
        les.len()
    );
    assert_eq!(les.last().map(String::as_str), Some("+Inf"));
    assert!(first.iter().all(|&(_, n)| n == 0), "{first:?}");

    let mut recorded: Vec<f64> = Vec::new();
    for round in 0..8 {
        // Each round fills buckets no earlier round did: eight per power
        // of two (schema 3) over four powers of two, from 2^-24 s (below
        // the classic bounds) up to 2^12 s (above them).
        for e in (-24 + 5 * round)..(-20 + 5 * round) {
            for k in 0..8 {
                let v = (f64::from(e) + (f64::from(k) + 0.5) / 8.0).exp2();
                wait.record(v);
                recorded.push(v);
            }
        }
        for format in [Format::Text, Format::OpenMetrics] {
            let now = text_buckets(&mut scraper, format);
            let now_les: Vec<&str> = now.iter().map(|(le, _)| le.as_str()).collect();
            assert_eq!(now_les, les, "{format:?}, round {round}");
            for (le, count) in &now {
                let le: f64 = le.replace("+Inf", "inf").parse().unwrap();
                let want = recorded.iter().filter(|&&v| v <= le).count() as u64;
                assert_eq!(*count, want, "{format:?} le={le} round {round}");
            }
        }
        let (classic, native) = protobuf_buckets(&mut scraper);
        let classic_les: Vec<String> = classic
            .iter()
            .map(|(le, _)| {
                let mut s = Vec::new();
                topdeck_export::rules::write_f64(&mut s, *le).unwrap();
                String::from_utf8(s).unwrap()
            })
            .collect();
        assert_eq!(classic_les, les[..les.len() - 1], "protobuf, round {round}");
        for (le, count) in classic {
            let want = recorded.iter().filter(|&&v| v <= le).count() as u64;
            assert_eq!(count, want, "protobuf le={le} round {round}");
        }
        // Native: every bucket the registry filled, one per recorded value.
        let own = recorded_buckets(&mut scraper);
        assert_eq!(native, own, "native, round {round}");
        assert_eq!(own.len(), recorded.len(), "round {round}");
    }
    assert!(
        recorded.len() > 4 * les.len(),
        "the test fills more buckets than there are bounds"
    );

    // OTLP: every filled bucket too, at the registry's own schema.
    let gathered = scraper.gather();
    let mut encoder = topdeck_export::otlp::Encoder::new("h");
    let batch = encoder.request(&gathered, &[], 1);
    let m = batch.request.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == NAME)
        .unwrap();
    let Some(Data::ExponentialHistogram(e)) = &m.data else {
        panic!("{m:?}")
    };
    let positive = e.data_points[0].positive.as_ref().unwrap();
    let filled = positive.bucket_counts.iter().filter(|&&n| n > 0).count();
    assert_eq!(filled, recorded.len());
}
