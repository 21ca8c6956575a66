// SPDX-License-Identifier: Apache-2.0
//! A prometheus_client multiprocess directory's merge as series, under
//! the names its exposition gives them: counters as float counters
//! (`_total` included),
//! gauges as float gauges (a `pid` label where the gauge's mode adds one),
//! histograms with their fixed buckets, summaries as count and sum; the
//! unit is what the name ends in (`_seconds`, `_bytes`).

use std::collections::HashMap;

use topdeck::{BucketsValue, MetricInfo, MetricKind, Value};
use topdeck_portholes::prommp::{Family, Merged};

/// The series of one merge, families in prometheus_client's order.
pub(crate) fn series(merged: &Merged) -> Vec<(MetricInfo, Value)> {
    let mut out = Vec::new();
    for family in &merged.families {
        match family.kind {
            "counter" => plain(
                family,
                "_total",
                MetricKind::Counter,
                Value::CounterF64,
                &mut out,
            ),
            "gauge" => plain(family, "", MetricKind::GaugeF64, Value::GaugeF64, &mut out),
            "histogram" => histograms(family, &mut out),
            "summary" => summaries(family, &mut out),
            _ => {}
        }
    }
    out
}

fn info(family: &Family, kind: MetricKind, labels: Vec<(String, String)>) -> MetricInfo {
    MetricInfo {
        kind,
        name: family.name.clone(),
        labels,
        help: family.help.clone(),
        // prometheus_client keeps a unit only in the name.
        unit: crate::names::unit_of_name(&family.name).to_string(),
    }
}

/// Labels as the exposition shows them: a later duplicate wins (upstream
/// writes them through a `dict`), in first-seen order; `le` left out.
fn labels(pairs: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        if k == "le" {
            continue;
        }
        match out.iter_mut().find(|(have, _)| have == k) {
            Some(kept) => kept.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
}

fn plain(
    family: &Family,
    suffix: &str,
    kind: MetricKind,
    value: fn(f64) -> Value,
    out: &mut Vec<(MetricInfo, Value)>,
) {
    // Named by their sample, as the exposition names them: a counter
    // `jobs` is `jobs_total` in every view, as topdeck's own are.
    let sample = format!("{}{suffix}", family.name);
    for s in family.samples.iter().filter(|s| s.name == sample) {
        let mut info = info(family, kind, labels(&s.labels));
        info.name.clone_from(&sample);
        out.push((info, value(s.value)));
    }
}

/// One series per label set, in the order the label sets first appear.
fn grouped<T: Default>(
    family: &Family,
    mut add: impl FnMut(&mut T, &str, Option<f64>, f64),
) -> Vec<(Vec<(String, String)>, T)> {
    let mut order: Vec<(Vec<(String, String)>, T)> = Vec::new();
    let mut at: HashMap<Vec<(String, String)>, usize> = HashMap::new();
    for s in &family.samples {
        let Some(suffix) = s.name.strip_prefix(family.name.as_str()) else {
            continue;
        };
        let key = labels(&s.labels);
        let le = s
            .labels
            .iter()
            .rev()
            .find(|(k, _)| k == "le")
            .and_then(|(_, v)| v.parse::<f64>().ok());
        let i = *at.entry(key.clone()).or_insert_with(|| {
            order.push((key, T::default()));
            order.len() - 1
        });
        add(&mut order[i].1, suffix, le, s.value);
    }
    order
}

/// `(buckets, count, sum)` of one histogram series.
type Parts = (Vec<(f64, f64)>, f64, f64);

fn histograms(family: &Family, out: &mut Vec<(MetricInfo, Value)>) {
    let series = grouped::<Parts>(family, |h, suffix, le, v| match (suffix, le) {
        ("_bucket", Some(le)) => h.0.push((le, v)),
        ("_count", _) => h.1 = v,
        ("_sum", _) => h.2 = v,
        _ => {}
    });
    for (labels, (mut buckets, count, sum)) in series {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let value = Value::Buckets(Box::new(BucketsValue {
            buckets,
            count,
            sum,
        }));
        out.push((info(family, MetricKind::Histogram, labels), value));
    }
}

fn summaries(family: &Family, out: &mut Vec<(MetricInfo, Value)>) {
    let series = grouped::<(f64, f64)>(family, |(count, sum), suffix, _, v| match suffix {
        "_count" => *count = v,
        "_sum" => *sum = v,
        _ => {}
    });
    for (labels, (count, sum)) in series {
        out.push((
            info(family, MetricKind::Histogram, labels),
            Value::Summary { count, sum },
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck_portholes::prommp::Sample;

    fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            value,
        }
    }

    fn family(name: &str, kind: &'static str, samples: Vec<Sample>) -> Family {
        Family {
            name: name.into(),
            help: "h".into(),
            kind,
            samples,
        }
    }

    #[test]
    fn each_family_kind_becomes_its_value() {
        let merged = Merged {
            families: vec![
                family(
                    "jobs",
                    "counter",
                    vec![sample("jobs_total", &[("q", "a")], 3.0)],
                ),
                family("temp", "gauge", vec![sample("temp", &[("pid", "7")], 1.5)]),
                family(
                    "lat",
                    "histogram",
                    vec![
                        sample("lat_bucket", &[("r", "/"), ("le", "+Inf")], 4.0),
                        sample("lat_bucket", &[("r", "/"), ("le", "0.5")], 3.0),
                        sample("lat_count", &[("r", "/")], 4.0),
                        sample("lat_sum", &[("r", "/")], 1.25),
                    ],
                ),
                family(
                    "size",
                    "summary",
                    vec![sample("size_count", &[], 2.0), sample("size_sum", &[], 9.0)],
                ),
            ],
            files: Vec::new(),
            errors: Vec::new(),
        };
        let got = crate::testing::flat(series(&merged));
        let l = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert_eq!(
            got,
            [
                ("jobs_total".into(), l("q", "a"), Value::CounterF64(3.0)),
                ("temp".into(), l("pid", "7"), Value::GaugeF64(1.5)),
                (
                    "lat".into(),
                    l("r", "/"),
                    Value::Buckets(Box::new(BucketsValue {
                        buckets: vec![(0.5, 3.0), (f64::INFINITY, 4.0)],
                        count: 4.0,
                        sum: 1.25
                    }))
                ),
                (
                    "size".into(),
                    vec![],
                    Value::Summary {
                        count: 2.0,
                        sum: 9.0
                    }
                ),
            ]
        );
    }

    #[test]
    fn the_unit_is_what_the_name_ends_in() {
        let merged = Merged {
            families: vec![
                family(
                    "wait_seconds",
                    "histogram",
                    vec![sample("wait_seconds_count", &[], 1.0)],
                ),
                family(
                    "cpu_seconds",
                    "counter",
                    vec![sample("cpu_seconds_total", &[], 2.0)],
                ),
                family("depth", "gauge", vec![sample("depth", &[], 3.0)]),
            ],
            files: Vec::new(),
            errors: Vec::new(),
        };
        let units: Vec<(String, String)> = series(&merged)
            .into_iter()
            .map(|(m, _)| (m.name, m.unit))
            .collect();
        let want = [
            ("wait_seconds", "seconds"),
            ("cpu_seconds_total", "seconds"),
            ("depth", ""),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, u)| (n.to_string(), u.to_string()))
            .collect();
        assert_eq!(units, want);
    }
}
