// SPDX-License-Identifier: Apache-2.0
//! What every test driving the real MMV writers of this directory needs,
//! included by path (`#[path]`) into each suite that does: the parser's
//! (`topdeck-portholes`), the end-to-end views' (`topdeck-tests`) and the
//! exporters' (`topdeck-cli`). Whether the writers and `mmvdump` are
//! installed (scripts/reach/mmv.sh), the discovery directory, starting a
//! writer and keeping it until dropped, and `mmvdump`'s output parsed.
//! Only std and `topdeck_portholes`, so that any test crate can include
//! it; each includer uses a part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// PCP's own dump of an MMV file: the reference the readers are held to.
pub const MMVDUMP: &str = "/usr/lib/pcp/pmdas/mmv/mmvdump";
/// The python3 python3-pcp installs into.
pub const PYTHON: &str = "/usr/bin/python3";
/// python3-pcp's writer: format version 1, no flags.
pub const WRITER_V1: &str = include_str!("writer_v1.py");
/// libpcp_mmv's registry API: versions 2 and 3, PROCESS and SENTINEL.
pub const WRITER_V3: &str = include_str!("writer_v3.c");
/// Longest a writer may take to publish its file: a guard against a
/// hang, not a timing claim.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether the writers and mmvdump are here; a missing one fails under
/// CI and is reported otherwise.
pub fn tools_present(test: &str) -> bool {
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

/// The discovery directory, `$PCP_TMP_DIR/mmv` as `/etc/pcp.conf` sets
/// it, made if missing.
pub fn mmv_dir() -> PathBuf {
    let conf = std::fs::read_to_string("/etc/pcp.conf").unwrap_or_default();
    let dir = topdeck_portholes::mmv::pcp_tmp_dir(&conf).join("mmv");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// The python3-pcp writer, to publish its file at `path`.
pub fn python_writer(path: &Path) -> Command {
    let mut command = Command::new(PYTHON);
    command.arg("-c").arg(WRITER_V1).arg(path);
    command
}

/// Compiles the libpcp_mmv writer into `dir` (which must outlive its
/// runs) and returns the binary, `dir/writer_v3`.
pub fn compile_c_writer(dir: &Path) -> PathBuf {
    let source = dir.join("writer_v3.c");
    std::fs::write(&source, WRITER_V3).unwrap();
    let binary = dir.join("writer_v3");
    let cc = Command::new("cc")
        .arg(&source)
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
    binary
}

/// A writer that has published its file, kept alive until dropped
/// (closing its stdin ends it); with [`Writer::removing`], its file is
/// removed then too, pass or fail.
pub struct Writer {
    child: Child,
    file: Option<PathBuf>,
}

impl Writer {
    /// Starts `command` and waits for its `ready`.
    pub fn start(mut command: Command) -> Writer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut writer = Writer { child, file: None };
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(line) if line.trim() == "ready" => writer,
            other => {
                writer.kill();
                panic!("{command:?} did not publish its file: {other:?}");
            }
        }
    }

    /// This writer, whose file `path` is removed when it is dropped.
    pub fn removing(mut self, path: &Path) -> Writer {
        self.file = Some(path.to_owned());
        self
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL and reaps it: its file stays.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        if let Some(file) = &self.file {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// A value line of mmvdump: item, instance (internal id, name), value text.
pub type DumpedValue = (u32, Option<(i32, String)>, String);

/// What mmvdump printed: the header's fields, each metric's lines (its
/// name first), each value line, each label's JSON.
#[derive(Debug, Default)]
pub struct Dump {
    pub header: HashMap<String, String>,
    pub metrics: BTreeMap<u32, Vec<String>>,
    pub values: Vec<DumpedValue>,
    pub labels: Vec<String>,
}

impl Dump {
    /// The name of metric `item`.
    pub fn name(&self, item: u32) -> &str {
        &self.metrics[&item][0]
    }

    /// The rest of metric `item`'s line starting with `prefix`.
    pub fn metric_field(&self, item: u32, prefix: &str) -> Option<&str> {
        self.metrics[&item]
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
    }

    /// Whether the header's flags include `flag` (`process`, `sentinel`).
    pub fn has_flag(&self, flag: &str) -> bool {
        let flags = &self.header["Flags"];
        let named = flags
            .split_once('(')
            .map_or("", |(_, names)| names.trim_end_matches(')'));
        named.split(", ").any(|f| f == flag)
    }
}

/// Runs mmvdump on `path` and parses what it prints.
pub fn mmvdump(path: &Path) -> Dump {
    let out = Command::new(MMVDUMP).arg(path).output().unwrap();
    assert!(out.status.success(), "mmvdump: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
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
                // mmvdump lists the metrics before their values.
                let name = dump.metrics.get(&item).map_or("", |lines| &lines[0]);
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

/// The type and semantics codes of mmvdump's `type=… (0x3), sem=… (0x1), pad=0x0`.
pub fn type_and_sem(line: &str) -> (i32, u32) {
    let hex = |s: &str| {
        let start = s.find("(0x").unwrap() + 3;
        let end = start + s[start..].find(')').unwrap();
        u32::from_str_radix(&s[start..end], 16).unwrap()
    };
    let (ty, sem) = line.split_once(", sem=").unwrap();
    (hex(ty) as i32, hex(sem))
}
