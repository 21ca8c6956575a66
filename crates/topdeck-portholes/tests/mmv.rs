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

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use topdeck_portholes::mmv::{self, Flags, Mmv, Semantics, Type, Value};

const MMVDUMP: &str = "/usr/lib/pcp/pmdas/mmv/mmvdump";
const PYTHON: &str = "/usr/bin/python3";

/// Whether the writers and mmvdump are here; a missing one fails under
/// CI and is reported otherwise.
fn tools_present(test: &str) -> bool {
    let python = Command::new(PYTHON)
        .args(["-c", "import pcp.mmv"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let why = if !python {
        Some("/usr/bin/python3 cannot import pcp.mmv (python3-pcp)")
    } else if !Path::new(MMVDUMP).exists() {
        Some("mmvdump is missing (pcp)")
    } else if !Path::new("/usr/include/pcp/mmv_stats.h").exists()
        || !Path::new("/usr/include/pcp/pmapi.h").exists()
    {
        Some("libpcp_mmv's headers are missing (libpcp-mmv1-dev, libpcp3-dev)")
    } else {
        None
    };
    let Some(why) = why else {
        return true;
    };
    let msg = format!("SKIPPED {test}: {why}; run scripts/reach/mmv.sh");
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("{msg}");
    false
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mmv")
        .join(name)
}

/// A writer that has published its file, kept alive until dropped
/// (closing its stdin ends it).
struct Writer(Child);

impl Writer {
    fn start(mut command: Command) -> Writer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "{command:?} did not publish its file");
        Writer(child)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// A value line of mmvdump: item, instance (internal id, name), value text.
type DumpedValue = (u32, Option<(i32, String)>, String);

/// What mmvdump printed: the header's fields, each metric's lines, each
/// value line (by item, then instance name), each label's JSON.
#[derive(Debug, Default)]
struct Dump {
    header: HashMap<String, String>,
    metrics: BTreeMap<u32, Vec<String>>,
    values: Vec<DumpedValue>,
    labels: Vec<String>,
}

fn mmvdump(path: &Path, file: &Mmv) -> Dump {
    let out = Command::new(MMVDUMP).arg(path).output().unwrap();
    assert!(out.status.success(), "mmvdump: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let names: HashMap<u32, &str> = file
        .metrics
        .iter()
        .map(|m| (m.item, m.name.as_str()))
        .collect();
    let mut dump = Dump::default();
    let mut section = "";
    let mut current = None;
    for line in text.lines() {
        if let Some((key, value)) = line.split_once(" = ").filter(|_| !line.starts_with(' ')) {
            dump.header.insert(key.trim().to_owned(), value.to_owned());
            continue;
        }
        if line.starts_with("TOC[") {
            section = [
                "indoms",
                "instances",
                "metrics",
                "values",
                "string",
                "labels",
            ]
            .into_iter()
            .find(|s| {
                line.contains(&format!(", {s} offset")) || line.contains(&format!(" {s} offset"))
            })
            .unwrap_or("");
            continue;
        }
        let Some(record) = line.strip_prefix("  [") else {
            if section == "metrics" && line.starts_with("       ") {
                if let Some(item) = current {
                    dump.metrics
                        .entry(item)
                        .or_default()
                        .push(line.trim().to_owned());
                }
            }
            continue;
        };
        let (id, rest) = record
            .split_once("] ")
            .unwrap_or((record.trim_end_matches(']'), ""));
        let item: u32 = id.split('/').next().unwrap().parse().unwrap();
        match section {
            "metrics" => {
                current = Some(item);
                dump.metrics.entry(item).or_default().push(rest.to_owned());
            }
            "values" => {
                let name = names.get(&item).copied().unwrap_or_default();
                let rest = rest.strip_prefix(name).unwrap_or_else(|| panic!("{line}"));
                let (instance, value) = match rest.strip_prefix('[') {
                    Some(inst) => {
                        let (internal, after) = inst.split_once(" or \"").unwrap();
                        let (iname, value) = after.split_once("\"] = ").unwrap();
                        (Some((internal.parse().unwrap(), iname.to_owned())), value)
                    }
                    None => (None, rest.strip_prefix(" = ").unwrap()),
                };
                dump.values.push((item, instance, value.to_owned()));
            }
            "labels" => dump.labels.push(rest.to_owned()),
            _ => {}
        }
    }
    dump
}

/// Asserts that everything mmvdump printed of `path` is what the parser
/// gives, and returns the parse.
fn compare_with_mmvdump(path: &Path) -> Mmv {
    let file = mmv::read(path).unwrap_or_else(|e| panic!("{e}"));
    let dump = mmvdump(path, &file);
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

/// The type and semantics codes of mmvdump's `type=… (0x3), sem=… (0x1), pad=0x0`.
fn type_and_sem(line: &str) -> (i32, u32) {
    let hex = |s: &str| {
        let start = s.find("(0x").unwrap() + 3;
        let end = start + s[start..].find(')').unwrap();
        u32::from_str_radix(&s[start..end], 16).unwrap()
    };
    let (ty, sem) = line.split_once(", sem=").unwrap();
    (hex(ty) as i32, hex(sem))
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
    let mut command = Command::new(PYTHON);
    command.arg(fixture("writer_v1.py")).arg(&path);
    let writer = Writer::start(command);
    let file = compare_with_mmvdump(&path);
    assert_eq!(file.header.version, 1);
    assert_eq!(file.header.process, writer.0.id() as i32);
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
    let binary = dir.path().join("writer_v3");
    let cc = Command::new("cc")
        .arg(fixture("writer_v3.c"))
        .arg("-o")
        .arg(&binary)
        .args(["-lpcp_mmv", "-lpcp"])
        .output()
        .expect("running cc");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let path = dir.path().join("capp");
    let mut command = Command::new(&binary);
    command.arg(&path);
    let writer = Writer::start(command);
    let file = compare_with_mmvdump(&path);
    let h = &file.header;
    assert_eq!((h.version, h.cluster), (3, 77));
    assert_eq!(h.flags, Flags(Flags::PROCESS | Flags::SENTINEL));
    assert_eq!(h.process, writer.0.id() as i32);

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
