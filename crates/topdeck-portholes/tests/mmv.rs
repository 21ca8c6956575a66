// SPDX-License-Identifier: Apache-2.0
//! The MMV reader against real writers: Debian's python3-pcp (`pcp.mmv`,
//! format version 1) and a C program on libpcp_mmv's registry API
//! (versions 2 and 3: long names, labels, every type, the SENTINEL and
//! PROCESS flags), both in `tests/mmv/`. Each writes into a temporary
//! directory (libpcp_mmv takes a name starting with `/` as a path); the
//! file is parsed by `mmv::read` and dumped by PCP's own `mmvdump`, and
//! every header field, metric and value `mmvdump` prints must be what the
//! parser gives. Installed by `scripts/reach/mmv.sh`; a missing piece
//! fails the test under CI and prints "SKIPPED: …" otherwise.

use std::path::Path;
use std::process::Command;

use topdeck_portholes::mmv::{self, Flags, Mmv, Semantics, Type, Value};

#[path = "mmv/support.rs"]
mod support;
use support::{compile_c_writer, mmvdump, python_writer, tools_present, type_and_sem, Writer};

/// Asserts that everything mmvdump printed of `path` is what the parser
/// gives, and returns the parse.
fn compare_with_mmvdump(path: &Path) -> Mmv {
    let file = mmv::read(path).unwrap_or_else(|e| panic!("{e}"));
    let dump = mmvdump(path);
    let h = &file.header;
    assert_eq!(dump.header["Version"], h.version.to_string());
    assert_eq!(dump.header["Generated"], h.generation.to_string());
    assert_eq!(dump.header["Process"], h.process.to_string());
    assert_eq!(dump.header["Cluster"], h.cluster.to_string());
    assert!(
        dump.header["Flags"].starts_with(&format!("{:#x} ", h.flags.0)),
        "{:?}",
        dump.header
    );
    assert_eq!(dump.header["TOC count"], h.tocs.to_string());

    // Metadata: every metric mmvdump lists, with its name, type, semantics,
    // indom and help.
    assert_eq!(dump.metrics.len(), file.metrics.len() + file.skipped.len());
    for m in &file.metrics {
        let lines = &dump.metrics[&m.item];
        assert_eq!(lines[0], m.name);
        let (code, sem) = type_and_sem(&lines[1]);
        assert_eq!(code, m.kind.code(), "{}", m.name);
        if m.kind != Type::Elapsed {
            assert_eq!(Semantics::from_code(sem), Some(m.semantics), "{}", m.name);
        }
        let indom = m
            .indom
            .map_or("(no indom)".to_owned(), |s| format!("indom={s}"));
        assert!(lines.contains(&indom), "{}: {lines:?}", m.name);
        let short = field(lines, "shorttext=", "(no shorttext)");
        assert_eq!(short, m.short_help, "{}", m.name);
        let long = field(lines, "helptext=", "(no helptext)");
        assert_eq!(long, m.long_help, "{}", m.name);
    }

    // Values: every line mmvdump prints, against the parser's value of that
    // metric and instance.
    let samples: usize = file.metrics.iter().map(|m| m.values.len()).sum();
    assert_eq!(dump.values.len(), samples, "{:?}", dump.values);
    let now = mmv::now_us();
    for (item, instance, text) in &dump.values {
        let m = file.metrics.iter().find(|m| m.item == *item).unwrap();
        let sample = m
            .values
            .iter()
            .find(|s| s.instance.as_ref().map(|i| (i.internal, i.name.clone())) == *instance)
            .unwrap_or_else(|| panic!("{} {instance:?} not parsed", m.name));
        let context = format!(
            "{} {instance:?}: mmvdump {text:?}, parsed {:?}",
            m.name, sample.value
        );
        match &sample.value {
            None => {
                assert!(h.flags.sentinel(), "{context}");
                let sentinel = match m.kind {
                    Type::I32 | Type::I64 => text == "-1",
                    Type::U32 => text == "4294967295",
                    Type::U64 => text == "18446744073709551615",
                    Type::Float | Type::Double => text.ends_with("nan"),
                    Type::String => text == "\"\"",
                    Type::Elapsed => text.starts_with("-1 ") || text.contains("value=-1/"),
                };
                assert!(sentinel, "{context}");
            }
            Some(Value::I32(v)) => assert_eq!(text, &v.to_string(), "{context}"),
            Some(Value::U32(v)) => assert_eq!(text, &v.to_string(), "{context}"),
            Some(Value::I64(v)) => assert_eq!(text, &v.to_string(), "{context}"),
            Some(Value::U64(v)) => assert_eq!(text, &v.to_string(), "{context}"),
            Some(Value::Float(_) | Value::Double(_)) => {
                let printed: f64 = text.parse().unwrap();
                let parsed = sample.value.as_ref().unwrap().as_f64(now).unwrap();
                // %f: six decimals.
                assert!(
                    (printed - parsed).abs() <= 5e-7 + parsed.abs() * 1e-15,
                    "{context}"
                );
                assert_eq!(text, &format!("{parsed:.6}"), "{context}");
            }
            Some(Value::String(s)) => assert_eq!(text, &format!("\"{s}\""), "{context}"),
            Some(v @ Value::Elapsed { value, extra }) => {
                let (total, raw) = text.split_once(' ').unwrap();
                assert_eq!(raw, format!("(value={value}/extra={extra})"), "{context}");
                let total: i128 = total.parse().unwrap();
                // mmvdump read its clock a moment after this reader did.
                let ours = v.elapsed_us(now).unwrap();
                assert!((total - ours).abs() < 10_000_000, "{context}: {ours}");
            }
        }
    }

    // Labels: the JSON mmvdump prints, as the parser's names and values.
    let mut printed: Vec<(String, serde_json::Value)> = dump
        .labels
        .iter()
        .flat_map(|json| {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)
                .unwrap_or_else(|e| panic!("label {json:?}: {e}"))
        })
        .collect();
    let mut parsed: Vec<(String, serde_json::Value)> = file
        .labels
        .iter()
        .map(|l| (l.name.clone(), l.value.clone()))
        .collect();
    printed.sort_by(|a, b| a.0.cmp(&b.0));
    parsed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(parsed, printed);
    assert_eq!(file.labels_skipped, 0);
    file
}

fn field(lines: &[String], prefix: &str, none: &str) -> String {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
        .or_else(|| lines.iter().any(|l| l == none).then(String::new))
        .unwrap_or_else(|| panic!("no {prefix} in {lines:?}"))
}

#[test]
fn a_python_pcp_mmv_writers_file_reads_as_mmvdump_prints_it() {
    if !tools_present("a_python_pcp_mmv_writers_file_reads_as_mmvdump_prints_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pyapp");
    let writer = Writer::start(python_writer(&path));
    let file = compare_with_mmvdump(&path);
    assert_eq!(file.header.version, 1);
    assert_eq!(file.header.process, writer.pid() as i32);
    let requests = file.get("requests.total").unwrap();
    assert_eq!(requests.pcp_name, "mmv.pyapp.requests.total");
    let values: Vec<_> = requests
        .values
        .iter()
        .map(|s| (s.instance.as_ref().unwrap().name.as_str(), s.value.clone()))
        .collect();
    assert_eq!(
        values,
        [
            ("high", Some(Value::U64(42))),
            ("low", Some(Value::U64(7))),
            ("bulk work", Some(Value::U64(123_456_789_012))),
        ]
    );
    assert_eq!(
        file.get("latency.mean").unwrap().values[0].value,
        Some(Value::Double(12.375))
    );
    assert_eq!(
        file.get("build.version").unwrap().values[0].value,
        Some(Value::String("1.2.3 (py)".into()))
    );
    assert_eq!(
        file.get("workers").unwrap().values[0].value,
        Some(Value::I32(-3))
    );
    // python3-pcp stores no semantics (0), whatever it is given.
    assert_eq!(requests.semantics, Semantics::Unspecified);
    drop(writer);
}

#[test]
fn a_c_registry_writers_version_3_file_reads_as_mmvdump_prints_it() {
    if !tools_present("a_c_registry_writers_version_3_file_reads_as_mmvdump_prints_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = compile_c_writer(dir.path());
    let path = dir.path().join("capp");
    let mut command = Command::new(&binary);
    command.arg(&path);
    let writer = Writer::start(command);
    let file = compare_with_mmvdump(&path);
    let h = &file.header;
    assert_eq!((h.version, h.cluster), (3, 77));
    assert_eq!(h.flags, Flags(Flags::PROCESS | Flags::SENTINEL));
    assert_eq!(h.process, writer.pid() as i32);

    let long = file
        .metrics
        .iter()
        .find(|m| m.name.len() >= 64)
        .expect("a long name");
    assert_eq!(long.pcp_name, format!("mmv.capp.{}", long.name));
    assert!(long
        .values
        .iter()
        .any(|s| s.instance.as_ref().unwrap().name.len() >= 64));
    let rss = file.get("memory.rss").unwrap();
    assert_eq!(
        (rss.units.base_unit(), rss.units.to_base(1.0)),
        ("bytes", Some(1024.0))
    );
    assert_eq!(rss.semantics, Semantics::Instant);
    let pause = file.get("gc.pause").unwrap();
    assert_eq!(pause.units.base_unit(), "seconds");
    assert_eq!(pause.units.to_base(1234.5), Some(1.2345));
    let kilo = file.get("events.kilo").unwrap();
    assert_eq!(kilo.units.to_base(12.0), Some(12_000.0));
    assert_eq!(
        file.get("generation").unwrap().semantics,
        Semantics::Discrete
    );
    let batch = file.get("batch.time").unwrap().values[0]
        .value
        .clone()
        .unwrap();
    assert!(
        matches!(batch, Value::Elapsed { value: 0, extra } if extra < 0),
        "{batch:?}"
    );
    for name in ["unknown.count", "unknown.ratio", "unknown.name"] {
        assert_eq!(file.get(name).unwrap().values[0].value, None, "{name}");
    }
    assert!(!file.labels.is_empty());
    drop(writer);
}
