// SPDX-License-Identifier: Apache-2.0
//! The cgroup hierarchy the host's cpu controller lives in, cgroup ids to
//! paths, and the throttling counters of `cpu.stat`.
//!
//! Source of truth: Documentation/admin-guide/cgroup-v1/cgroups.rst and
//! cgroup-v2.rst. A cgroup's id, as BPF sees it (`kn->id`), is the inode
//! number of its directory in cgroupfs, so ids are resolved by walking the
//! hierarchy and matching `st_ino`.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// Where the cpu controller is, and which flavour of cgroup it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Mount point of the hierarchy (e.g. `/sys/fs/cgroup/cpu,cpuacct` for
    /// v1, `/sys/fs/cgroup` or `/sys/fs/cgroup/unified` for v2).
    pub mount: PathBuf,
    /// True when the cpu controller is a v1 hierarchy (hybrid or legacy
    /// hosts); the probe then reads the v1 cpu cgroup of each task.
    pub cpu_v1: bool,
}

impl Hierarchy {
    /// Finds the cpu controller's hierarchy in `/proc/self/mountinfo`: the
    /// v1 mount with the `cpu` option if there is one, else the v2 mount.
    pub fn detect() -> Result<Self> {
        let path = "/proc/self/mountinfo";
        let text = fs::read_to_string(path)
            .map_err(|e| Error::with_source(ErrorKind::Cgroup, format!("reading {path}"), e))?;
        parse_mountinfo(&text).ok_or_else(|| {
            Error::new(
                ErrorKind::Cgroup,
                format!("{path} lists neither a cgroup v1 mount with the cpu controller nor a cgroup2 mount; mount cgroupfs"),
            )
        })
    }

    /// The id (inode number) of the hierarchy's root cgroup.
    pub fn root_id(&self) -> Result<u64> {
        fs::metadata(&self.mount).map(|m| m.ino()).map_err(|e| {
            Error::with_source(
                ErrorKind::Cgroup,
                format!("stat {}", self.mount.display()),
                e,
            )
        })
    }

    /// Absolute directory of cgroup `path` (as in `/a/b`).
    pub fn dir(&self, path: &str) -> PathBuf {
        self.mount.join(path.trim_start_matches('/'))
    }
}

/// The cpu hierarchy from mountinfo text (see proc(5)): fields, ` - `,
/// fstype, source, super options.
pub fn parse_mountinfo(text: &str) -> Option<Hierarchy> {
    let mut v2 = None;
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount = left.split(' ').nth(4);
        let mut right = right.split(' ');
        let (fstype, _source, opts) = (right.next(), right.next(), right.next());
        let (Some(mount), Some(fstype)) = (mount, fstype) else {
            continue;
        };
        let mount = PathBuf::from(unescape(mount));
        match fstype {
            "cgroup" if opts.is_some_and(|o| o.split(',').any(|o| o == "cpu")) => {
                return Some(Hierarchy {
                    mount,
                    cpu_v1: true,
                })
            }
            "cgroup2" if v2.is_none() => {
                v2 = Some(Hierarchy {
                    mount,
                    cpu_v1: false,
                })
            }
            _ => {}
        }
    }
    v2
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Cgroup ids to paths, cached; a miss rescans the hierarchy, at most once
/// per [`CgroupNames::refresh_allowed`] call, so a burst of short-lived
/// cgroups costs one walk.
#[derive(Debug)]
pub struct CgroupNames {
    hierarchy: Hierarchy,
    paths: HashMap<u64, String>,
    may_rescan: bool,
}

impl CgroupNames {
    /// An empty cache over `hierarchy`.
    pub fn new(hierarchy: Hierarchy) -> Self {
        Self {
            hierarchy,
            paths: HashMap::new(),
            may_rescan: true,
        }
    }

    /// Allows one more rescan (the agent calls this once per tick).
    pub fn refresh_allowed(&mut self) {
        self.may_rescan = true;
    }

    /// The path (`/`, `/a/b`) of cgroup `id`, if it exists (or existed at
    /// the last scan).
    pub fn path(&mut self, id: u64) -> Option<&str> {
        if !self.paths.contains_key(&id) && self.may_rescan {
            self.may_rescan = false;
            self.rescan();
        }
        self.paths.get(&id).map(String::as_str)
    }

    /// Whether cgroup `id` existed at the last scan.
    pub fn exists(&self, id: u64) -> bool {
        self.paths.contains_key(&id)
    }

    /// Forgets every path and walks the hierarchy again.
    pub fn rescan(&mut self) {
        self.paths.clear();
        let mut stack = vec![(self.hierarchy.mount.clone(), String::from("/"))];
        while let Some((dir, path)) = stack.pop() {
            let Ok(meta) = fs::metadata(&dir) else {
                continue;
            };
            self.paths.insert(meta.ino(), path.clone());
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let child = if path == "/" {
                        format!("/{name}")
                    } else {
                        format!("{path}/{name}")
                    };
                    stack.push((e.path(), child));
                }
            }
        }
    }
}

/// A cgroup's CPU throttling counters, from `cpu.stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Throttling {
    /// Periods in which the cgroup ran out of quota.
    pub nr_throttled: u64,
    /// Time its tasks were held back, ns.
    pub throttled_ns: u64,
}

/// The throttling counters in `<dir>/cpu.stat`: v1 `throttled_time` (ns)
/// or v2 `throttled_usec`. `None` when the file is missing (the cgroup is
/// gone) or has no throttling lines (no cpu controller there).
pub fn throttling(dir: &Path) -> Option<Throttling> {
    parse_cpu_stat(&fs::read_to_string(dir.join("cpu.stat")).ok()?)
}

/// Parses cpu.stat text.
pub fn parse_cpu_stat(text: &str) -> Option<Throttling> {
    let mut t = Throttling::default();
    let mut seen = false;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match k {
            "nr_throttled" => (t.nr_throttled, seen) = (v, true),
            "throttled_time" => t.throttled_ns = v,
            "throttled_usec" => t.throttled_ns = v.saturating_mul(1000),
            _ => {}
        }
    }
    seen.then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
24 31 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
25 24 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
28 24 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
29 24 0:27 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpuset
";

    #[test]
    fn hybrid_hosts_use_the_v1_cpu_controller() {
        assert_eq!(
            parse_mountinfo(HYBRID),
            Some(Hierarchy {
                mount: "/sys/fs/cgroup/cpu,cpuacct".into(),
                cpu_v1: true
            })
        );
    }

    #[test]
    fn v2_hosts_use_the_unified_mount_and_cpuset_is_not_cpu() {
        let v2 = "30 24 0:25 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n\
                  29 24 0:27 / /x rw shared:15 - cgroup cgroup rw,cpuset\n";
        assert_eq!(
            parse_mountinfo(v2),
            Some(Hierarchy {
                mount: "/sys/fs/cgroup".into(),
                cpu_v1: false
            })
        );
        assert_eq!(parse_mountinfo("garbage\n1 2 3\n"), None);
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/a\04"), r"/a\04");
    }

    #[test]
    fn cpu_stat_in_both_versions() {
        let v1 = "nr_periods 10\nnr_throttled 4\nthrottled_time 123456\nnr_bursts 0\n";
        assert_eq!(
            parse_cpu_stat(v1),
            Some(Throttling {
                nr_throttled: 4,
                throttled_ns: 123_456
            })
        );
        let v2 = "usage_usec 5\nnr_periods 3\nnr_throttled 2\nthrottled_usec 7\n";
        assert_eq!(
            parse_cpu_stat(v2),
            Some(Throttling {
                nr_throttled: 2,
                throttled_ns: 7_000
            })
        );
        assert_eq!(parse_cpu_stat("usage_usec 5\n"), None);
    }

    #[test]
    fn this_hosts_cpu_hierarchy_resolves_its_root() {
        let h = Hierarchy::detect().expect("cgroupfs is mounted here");
        let root = h.root_id().unwrap();
        let mut names = CgroupNames::new(h);
        assert_eq!(names.path(root), Some("/"));
    }
}
