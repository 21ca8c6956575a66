// SPDX-License-Identifier: Apache-2.0
use prost::Message;

use super::proto::collector::ExportMetricsServiceRequest;
use super::proto::metrics::{metric::Data, number_data_point, Metric, ResourceMetrics};
use super::*;
use crate::Scraper;
use topdeck::Snapshot;

const NOW: u64 = 1_800_000_000_000_000_000;

fn attr<'a>(r: &'a ResourceMetrics, key: &str) -> Option<&'a any_value::Value> {
    r.resource
        .as_ref()?
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()
}

fn metric<'a>(r: &'a ResourceMetrics, name: &str) -> &'a Metric {
    r.scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// The OTLP index of the bucket holding `v` at `scale`, by the OTLP
/// definition alone: bucket k is (base^k, base^(k+1)], base = 2^(2^-scale).
fn otlp_index(v: f64, scale: i32) -> i32 {
    // base^k as 2^(k / 2^scale): exact at powers of two, which are bounds.
    let bound = |k: i32| 2f64.powf(f64::from(k) / 2f64.powi(scale));
    let mut k = (v.log2() * 2f64.powi(scale)).floor() as i32;
    // Correct the float estimate at exact bounds and rounding edges.
    while bound(k + 1) < v {
        k += 1;
    }
    while bound(k) >= v {
        k -= 1;
    }
    k
}

#[test]
fn every_recorded_value_lands_in_the_otlp_bucket_that_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let registry = topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .unwrap();
    let h = registry
        .histogram("wait_seconds", &[], "Wait.", "seconds")
        .unwrap();
    // Values inside buckets and exactly on bounds (powers of two are
    // bounds at every scale), below the zero threshold, and repeated.
    let values = [
        0.0, 1e-12, 0.000_3, 0.001, 0.0015, 0.002, 0.004, 0.004, 0.1, 0.25, 0.5, 0.75, 1.0,
        1.000_001, 2.0, 3.3, 64.0, 100.0,
    ];
    for v in values {
        h.record(v);
    }
    let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
    let gathered = scraper.gather();
    let Value::Histogram(recorded) = gathered.sources[0]
        .1
        .get("wait_seconds", &[])
        .unwrap()
        .clone()
    else {
        panic!("not a histogram")
    };
    let batch = Encoder::new("h").request(&gathered, &[], NOW);
    let m = metric(&batch.request.resource_metrics[0], "wait_seconds");
    assert_eq!(m.unit, "s");
    let Some(Data::ExponentialHistogram(e)) = &m.data else {
        panic!("{m:?}")
    };
    assert_eq!(
        e.aggregation_temporality,
        AggregationTemporality::Cumulative as i32
    );
    let p = &e.data_points[0];
    assert_eq!(p.scale, i32::from(recorded.schema));
    assert_eq!(p.zero_threshold, recorded.zero_threshold);
    assert_eq!(p.count, values.len() as u64);
    assert_eq!(p.sum, Some(values.iter().sum::<f64>()));
    assert_eq!(p.max, Some(100.0));
    // The writer's zero bucket: at or below its threshold.
    let zeros = values
        .iter()
        .filter(|&&v| v <= recorded.zero_threshold)
        .count();
    assert_eq!(p.zero_count, zeros as u64);
    assert!(zeros >= 2, "the test records below the threshold");
    // Every other value, counted where the OTLP definition puts it.
    let positive = p.positive.as_ref().unwrap();
    let mut want: Vec<u64> = vec![0; positive.bucket_counts.len()];
    for v in values.iter().filter(|&&v| v > recorded.zero_threshold) {
        let k = otlp_index(*v, p.scale) - positive.offset;
        assert!(
            (0..want.len() as i32).contains(&k),
            "{v} outside the sent range"
        );
        want[k as usize] += 1;
    }
    assert_eq!(positive.bucket_counts, want);
    // The sent range is the used one: first and last counts are non-zero.
    assert_ne!(positive.bucket_counts[0], 0);
    assert_ne!(*positive.bucket_counts.last().unwrap(), 0);
}

#[test]
fn counters_start_when_their_registry_was_created_and_a_new_writer_starts_anew() {
    let dir = tempfile::tempdir().unwrap();
    let build = || {
        topdeck::Registry::builder()
            .dir(dir.path())
            .name("api")
            .build()
            .unwrap()
    };
    let first = build();
    first
        .counter("jobs_total", &[("queue", "a")], "Jobs.", "")
        .unwrap()
        .add(7);
    first.gauge("depth", &[], "Depth.", "").unwrap().set(-3);
    first.gauge_f64("load", &[], "Load.", "").unwrap().set(0.5);
    let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
    let mut encoder = Encoder::new("host-a");
    let gathered = scraper.gather();
    let created = gathered.sources[0].0.created_unix_ns.unwrap();
    let batch = encoder.request(&gathered, &[], NOW);
    assert_eq!(batch.points, 3);
    let r = &batch.request.resource_metrics[0];
    let Some(Data::Sum(sum)) = &metric(r, "jobs").data else {
        panic!()
    };
    assert!(sum.is_monotonic);
    let p = &sum.data_points[0];
    assert_eq!(p.value, Some(number_data_point::Value::AsInt(7)));
    assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (created, NOW));
    assert_eq!(p.attributes, [string("queue", "a")]);
    let Some(Data::Gauge(g)) = &metric(r, "depth").data else {
        panic!()
    };
    assert_eq!(
        g.data_points[0].value,
        Some(number_data_point::Value::AsInt(-3))
    );
    let Some(Data::Gauge(g)) = &metric(r, "load").data else {
        panic!()
    };
    assert_eq!(
        g.data_points[0].value,
        Some(number_data_point::Value::AsDouble(0.5))
    );
    // Resource attributes after the semantic conventions.
    let s = |v: &str| Some(any_value::Value::StringValue(v.into()));
    assert_eq!(attr(r, "service.name"), s("api").as_ref());
    assert_eq!(attr(r, "host.name"), s("host-a").as_ref());
    assert_eq!(attr(r, REGISTRY_ATTRIBUTE), s("api").as_ref());
    assert_eq!(
        attr(r, "process.pid"),
        Some(&any_value::Value::IntValue(i64::from(std::process::id())))
    );
    let entry = &gathered.sources[0].0;
    assert_eq!(
        attr(r, "process.executable.name"),
        s(&entry.process).as_ref()
    );
    let Some(any_value::Value::StringValue(instance)) = attr(r, "service.instance.id") else {
        panic!()
    };
    assert!(instance.starts_with("host-a/"), "{instance}");

    // The writer restarts: a new registry, a lower count, a later start.
    drop(first);
    std::thread::sleep(std::time::Duration::from_millis(2));
    let second = build();
    second
        .counter("jobs_total", &[("queue", "a")], "Jobs.", "")
        .unwrap()
        .add(1);
    let batch = encoder.request(&scraper.gather(), &[], NOW + 1);
    let r = &batch.request.resource_metrics[0];
    let Some(Data::Sum(sum)) = &metric(r, "jobs").data else {
        panic!()
    };
    let p = &sum.data_points[0];
    assert_eq!(p.value, Some(number_data_point::Value::AsInt(1)));
    assert!(
        p.start_time_unix_nano > created,
        "a new start, not a decrease"
    );
}

#[test]
fn a_counter_of_nanoseconds_is_sent_in_seconds_built_and_updated() {
    let dir = tempfile::tempdir().unwrap();
    let r = topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .unwrap();
    let busy = r
        .counter("busy_seconds_total", &[], "Busy.", "nanoseconds")
        .unwrap();
    busy.add(1_500_000_000);
    let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
    let mut encoder = Encoder::new("h");
    for (round, want) in [1.5, 1.75].into_iter().enumerate() {
        let batch = encoder.request(&scraper.gather(), &[], NOW + round as u64);
        let m = metric(&batch.request.resource_metrics[0], "busy_seconds");
        assert_eq!(m.unit, "s");
        let Some(Data::Sum(sum)) = &m.data else {
            panic!("{m:?}")
        };
        assert_eq!(
            sum.data_points[0].value,
            Some(number_data_point::Value::AsDouble(want)),
            "round {round}"
        );
        // The second round updates the kept request in place.
        encoder.recycle(batch);
        busy.add(250_000_000);
    }
}

#[test]
fn the_default_registry_is_named_after_its_process() {
    let dir = tempfile::tempdir().unwrap();
    let r = topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .unwrap();
    r.counter("x_total", &[], "", "").unwrap().inc();
    let gathered = Scraper::new(topdeck::Namespace::at(dir.path())).gather();
    let batch = Encoder::new("h").request(&gathered, &[], NOW);
    let r = &batch.request.resource_metrics[0];
    let process = &gathered.sources[0].0.process;
    assert_eq!(
        attr(r, "service.name"),
        Some(&any_value::Value::StringValue(process.clone()))
    );
    assert_eq!(
        attr(r, REGISTRY_ATTRIBUTE),
        Some(&any_value::Value::StringValue("main".into()))
    );
}

#[test]
fn a_timers_cpu_wait_is_pushed_under_the_shared_names_too() {
    let dir = tempfile::tempdir().unwrap();
    let r = topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .unwrap();
    r.histogram("req_seconds", &[], "", "seconds")
        .unwrap()
        .record(0.5);
    r.histogram("req_cpu_wait_seconds", &[], "", "seconds")
        .unwrap()
        .record(0.125);
    let gathered = Scraper::new(topdeck::Namespace::at(dir.path())).gather();
    let mut encoder = Encoder::new("h");
    for round in 0..2 {
        let batch = encoder.request(&gathered, &[], NOW + round);
        let metrics = &batch.request.resource_metrics[0].scope_metrics[0].metrics;
        // OTLP names a counter without `_total`.
        let name = crate::cpu_wait::CPU_WAIT.trim_end_matches("_total");
        let wait = metrics.iter().find(|m| m.name == name).unwrap_or_else(|| {
            let names: Vec<&String> = metrics.iter().map(|m| &m.name).collect();
            panic!("no {name} in {names:?}")
        });
        let Some(Data::Sum(sum)) = &wait.data else {
            panic!("{wait:?} is not a sum")
        };
        assert_eq!(
            sum.data_points[0].value,
            Some(number_data_point::Value::AsDouble(0.125)),
            "round {round}"
        );
        encoder.recycle(batch);
    }
}

fn porthole(snapshot: Snapshot, path: &str) -> (topdeck_sources::Source, Snapshot) {
    let mut f = topdeck_sources::Source::new(topdeck_sources::Kind::Python, path, "gunicorn");
    (f.uid, f.container) = (Some(1000), Some("web".into()));
    (f, snapshot)
}

#[test]
fn other_runtimes_values_map_to_histograms_summaries_and_float_sums_from_first_sight() {
    let (infos, values): (Vec<MetricInfo>, Vec<Value>) =
        crate::testing::foreign().into_iter().unzip();
    let snapshot = topdeck::ForeignReader::new().snapshot(std::sync::Arc::new(infos), values);
    let mut encoder = Encoder::new("h");
    let gathered = Gathered {
        sources: vec![porthole(snapshot, "/tmp/prom")],
        ..Gathered::default()
    };
    let batch = encoder.request(&gathered, &[], NOW);
    assert_eq!(batch.points, 4);
    let r = &batch.request.resource_metrics[0];
    assert_eq!(
        attr(r, SOURCE_ATTRIBUTE),
        Some(&any_value::Value::StringValue("python".into()))
    );
    assert_eq!(
        attr(r, "container.name"),
        Some(&any_value::Value::StringValue("web".into()))
    );
    assert_eq!(attr(r, "process.pid"), None, "no pid known");
    assert_eq!(
        attr(r, "process.user.id"),
        Some(&any_value::Value::IntValue(1000)),
        "the directory's owner"
    );
    let mut starts = Vec::new();
    let Some(Data::Sum(s)) = &metric(r, "py_requests").data else {
        panic!()
    };
    assert!(s.is_monotonic);
    let p = &s.data_points[0];
    assert_eq!(p.value, Some(number_data_point::Value::AsDouble(12.5)));
    // The own `le` label is an attribute like any other.
    assert_eq!(p.attributes, [string("method", "GET")]);
    starts.push(p.start_time_unix_nano);
    let Some(Data::Histogram(h)) = &metric(r, "py_latency_seconds").data else {
        panic!()
    };
    let p = &h.data_points[0];
    // Cumulative 1, 3, 3, 4 at 0.005, 0.1, 1, +Inf: per bucket 1, 2, 0, 1.
    assert_eq!(p.explicit_bounds, [0.005, 0.1, 1.0]);
    assert_eq!(p.bucket_counts, [1, 2, 0, 1]);
    assert_eq!((p.count, p.sum), (4, Some(1.25)));
    assert_eq!(p.attributes, [string("le", "own")]);
    starts.push(p.start_time_unix_nano);
    let Some(Data::Histogram(h)) = &metric(r, "py_size_bytes").data else {
        panic!()
    };
    // Fractional counts are rounded: OTLP's are integers.
    assert_eq!(
        (
            h.data_points[0].bucket_counts.as_slice(),
            h.data_points[0].count
        ),
        (&[1, 2][..], 3)
    );
    assert_eq!(metric(r, "py_size_bytes").unit, "By");
    let Some(Data::Summary(s)) = &metric(r, "py_wait_seconds").data else {
        panic!()
    };
    let p = &s.data_points[0];
    assert_eq!((p.count, p.sum), (3, 0.75));
    starts.push(p.start_time_unix_nano);
    assert_eq!(starts.len(), 3);
    assert!(starts.iter().all(|&s| s == NOW), "first sight is the start");
    // Seen again through the same reader: the same start.
    let summary_start = |batch: &Batch| {
        let m = metric(&batch.request.resource_metrics[0], "py_wait_seconds");
        let Some(Data::Summary(s)) = &m.data else {
            panic!("{m:?}")
        };
        s.data_points[0].start_time_unix_nano
    };
    let again = encoder.request(&gathered, &[], NOW + 10);
    assert_eq!(summary_start(&again), NOW);
    // Gone for one request, then back: a new start.
    encoder.request(&Gathered::default(), &[], NOW + 20);
    let back = encoder.request(&gathered, &[], NOW + 30);
    assert_eq!(summary_start(&back), NOW + 30);
}

#[test]
fn fixed_buckets_read_torn_count_nothing_below_zero() {
    let b = BucketsValue {
        buckets: vec![(1.0, 5.0), (2.0, 4.0), (f64::INFINITY, 6.0)],
        count: 6.0,
        sum: 3.0,
    };
    let p = explicit(&b, Vec::new(), 0, 1);
    assert_eq!(p.explicit_bounds, [1.0, 2.0]);
    assert_eq!(p.bucket_counts, [5, 0, 1]);
}

#[test]
fn a_name_taken_by_another_type_in_one_resource_is_left_out_and_counted() {
    let info = |name: &str| MetricInfo {
        kind: topdeck::MetricKind::Counter,
        name: name.into(),
        labels: Vec::new(),
        help: String::new(),
        unit: String::new(),
    };
    let own = [
        (info("x_total"), Value::Counter(1)),
        (info("x"), Value::Gauge(2)),
        (info("y"), Value::Gauge(3)),
    ];
    let batch = Encoder::new("h").request(
        &Gathered::default(),
        &[Own {
            service: "topdeck",
            start_unix_ns: 5,
            metrics: &own,
        }],
        NOW,
    );
    assert_eq!((batch.points, batch.conflicts), (2, 1));
    let r = &batch.request.resource_metrics[0];
    assert_eq!(
        attr(r, "service.name"),
        Some(&any_value::Value::StringValue("topdeck".into()))
    );
    let names: Vec<&str> = r.scope_metrics[0]
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, ["x", "y"]);
}

#[test]
fn requests_decode_as_opentelemetry_proto_messages() {
    let dir = tempfile::tempdir().unwrap();
    let r = topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .unwrap();
    r.counter("a_total", &[], "", "").unwrap().add(2);
    r.histogram("b_seconds", &[], "", "seconds")
        .unwrap()
        .record(0.3);
    let gathered = Scraper::new(topdeck::Namespace::at(dir.path())).gather();
    let batch = Encoder::new("h").request(&gathered, &[], NOW);
    let bytes = batch.request.encode_to_vec();
    let back = ExportMetricsServiceRequest::decode(&bytes[..]).unwrap();
    assert_eq!(back, batch.request);
}

#[test]
fn a_recycled_request_updated_in_place_equals_one_built_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let r = topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .unwrap();
    let jobs = r.counter("jobs_total", &[("q", "a")], "", "").unwrap();
    let depth = r.gauge("depth", &[], "", "").unwrap();
    let wait = r.histogram("wait_seconds", &[], "", "seconds").unwrap();
    let (infos, values): (Vec<MetricInfo>, Vec<Value>) =
        crate::testing::foreign().into_iter().unzip();
    let infos = std::sync::Arc::new(infos);
    let foreign = topdeck::ForeignReader::new();
    let mut scraper = Scraper::new(topdeck::Namespace::at(dir.path()));
    let mut kept = Encoder::new("h");
    for round in 0..4u64 {
        jobs.add(round + 1);
        depth.set(10 - round as i64);
        wait.record(0.001 * (round + 1) as f64);
        // The porthole's values move too, through the same reader.
        let mut v = values.clone();
        v[0] = Value::CounterF64(12.5 + round as f64);
        v[3] = Value::Summary {
            count: 3.0 + round as f64,
            sum: 0.75,
        };
        let foreign_now = porthole(foreign.snapshot(infos.clone(), v), "/p");
        if round == 2 {
            // A new metric: the registry's resource is built afresh.
            r.gauge("late", &[], "", "").unwrap().set(1);
        }
        let mut gathered = scraper.gather();
        gathered.sources.push(foreign_now);
        let now = NOW + round;
        let batch = kept.request(&gathered, &[], now);
        // A fresh encoder has no porthole history: give it the same start.
        let mut fresh = Encoder::new("h");
        fresh.first_seen = kept.first_seen.clone();
        let want = fresh.request(&gathered, &[], now);
        assert_eq!(batch.request, want.request, "round {round}");
        assert_eq!(
            (batch.points, batch.conflicts),
            (want.points, want.conflicts)
        );
        kept.recycle(batch);
        assert_eq!(kept.kept.len(), 2, "both resources kept for the next round");
    }
}

#[test]
fn parts_hold_whole_resources_in_order_under_the_cap_and_decode_as_requests() {
    let dir = tempfile::tempdir().unwrap();
    let registries: Vec<_> = (0..5)
        .map(|n| {
            let r = topdeck::Registry::builder()
                .dir(dir.path())
                .name(format!("r{n}"))
                .build()
                .unwrap();
            for i in 0..=n {
                r.counter(&format!("c{i}_total"), &[], "", "")
                    .unwrap()
                    .add(i as u64);
            }
            r
        })
        .collect();
    let gathered = Scraper::new(topdeck::Namespace::at(dir.path())).gather();
    let mut encoder = Encoder::new("h");
    let whole = encoder.request(&gathered, &[], NOW);
    let all = whole.request.encode_to_vec();
    let sizes: Vec<usize> = whole
        .request
        .resource_metrics
        .iter()
        .map(|r| {
            ExportMetricsServiceRequest {
                resource_metrics: vec![r.clone()],
            }
            .encoded_len()
        })
        .collect();
    let cap = sizes[0] + sizes[1];
    encoder.recycle(whole.clone());
    for max in [usize::MAX, cap, 1] {
        let batch = encoder.request(&gathered, &[], NOW);
        let mut parts = Vec::new();
        encoder.encode_parts(batch, max, |body, points| parts.push((body, points)));
        let mut resources = Vec::new();
        let mut points = 0;
        for (body, n) in &parts {
            let r = ExportMetricsServiceRequest::decode(&body[..]).unwrap();
            assert!(
                body.len() <= max || r.resource_metrics.len() == 1,
                "over the cap with more than one resource"
            );
            assert_eq!(*n, r.resource_metrics.iter().map(points_in).sum::<usize>());
            points += n;
            resources.extend(r.resource_metrics);
        }
        assert_eq!(resources, whole.request.resource_metrics, "cap {max}");
        assert_eq!(points, whole.points);
        match max {
            usize::MAX => assert_eq!(parts.len(), 1),
            1 => assert_eq!(parts.len(), registries.len()),
            _ => assert!(parts.len() > 1 && parts.len() < registries.len()),
        }
        if max == usize::MAX {
            assert_eq!(parts[0].0, all, "one part is the request's own encoding");
        }
    }
}

#[test]
fn one_process_is_one_resource_and_its_other_sources_start_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let r = topdeck::Registry::builder()
        .dir(dir.path())
        .name("billing")
        .build()
        .unwrap();
    r.counter("orders_total", &[], "", "").unwrap().add(3);
    let mut gathered = Scraper::new(topdeck::Namespace::at(dir.path())).gather();
    let registry = gathered.sources[0].0.clone();
    let (infos, values): (Vec<MetricInfo>, Vec<Value>) =
        crate::testing::foreign().into_iter().unzip();
    let foreign = topdeck::ForeignReader::new();
    let snapshot = foreign.snapshot(std::sync::Arc::new(infos), values);
    // The same process's hsperfdata, reached through another view's root.
    let mut jvm = topdeck_sources::Source::new(
        topdeck_sources::Kind::Jvm,
        "/proc/1/root/tmp/hsperfdata_app/7",
        "Billing",
    );
    (jvm.pid, jvm.start_ticks) = (registry.pid, registry.start_ticks);
    // A file no process is proven to have written, in a container.
    let (mut orphan, orphan_snapshot) = porthole(snapshot.clone(), "/proc/99/root/tmp/prom");
    orphan.container = Some("web".into());
    gathered.sources.push((jvm, snapshot.clone()));
    gathered
        .sources
        .push((orphan.clone(), orphan_snapshot.clone()));
    let mut encoder = Encoder::new("h");
    let batch = encoder.request(&gathered, &[], NOW);
    let resources = &batch.request.resource_metrics;
    assert_eq!(resources.len(), 2, "the JVM joins its registry's resource");
    let s = |v: &str| Some(any_value::Value::StringValue(v.into()));
    assert_eq!(attr(&resources[0], "service.name"), s("billing").as_ref());
    let names: Vec<&str> = resources[0].scope_metrics[0]
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert!(names.contains(&"orders") && names.len() > 1, "{names:?}");
    // The JVM's series start with its process, before the registry existed.
    let Some(Data::Sum(sum)) = &metric(&resources[0], "orders").data else {
        panic!()
    };
    let registry_start = sum.data_points[0].start_time_unix_nano;
    assert_eq!(Some(registry_start), registry.created_unix_ns);
    let starts: Vec<u64> = resources[0].scope_metrics[0]
        .metrics
        .iter()
        .filter(|m| m.name != "orders")
        .filter_map(|m| match &m.data {
            Some(Data::Sum(s)) => Some(s.data_points[0].start_time_unix_nano),
            _ => None,
        })
        .collect();
    assert!(!starts.is_empty());
    assert!(
        starts.iter().all(|&t| t > 0 && t <= registry_start),
        "{starts:?}"
    );
    // The orphan: its place in its container, not the pid it was reached through.
    assert_eq!(
        attr(&resources[1], "service.instance.id"),
        s("h:web:/tmp/prom").as_ref()
    );
    // Its start holds while its series are re-read from scratch (another lineage).
    let first = first_sum_start(&resources[1]);
    let again = topdeck::ForeignReader::new().snapshot(
        std::sync::Arc::new(snapshot.iter().map(|(m, _)| m.clone()).collect()),
        snapshot.iter().map(|(_, v)| v.clone()).collect(),
    );
    let later = Gathered {
        sources: vec![(orphan, again)],
        ..Gathered::default()
    };
    let batch = encoder.request(&later, &[], NOW + 1_000);
    assert_eq!(first_sum_start(&batch.request.resource_metrics[0]), first);
}

fn first_sum_start(r: &ResourceMetrics) -> u64 {
    r.scope_metrics[0]
        .metrics
        .iter()
        .find_map(|m| match &m.data {
            Some(Data::Sum(s)) => Some(s.data_points[0].start_time_unix_nano),
            _ => None,
        })
        .unwrap()
}
