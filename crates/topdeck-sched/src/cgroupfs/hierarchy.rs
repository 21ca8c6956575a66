// SPDX-License-Identifier: Apache-2.0
//! Where the cpu controller is mounted (`/proc/self/mountinfo`), v1 or v2,
//! with the unified mount of a hybrid host, and the tag that tells a v2 id
//! from a v1 one there (see [`super`], "Which hierarchy names a task on a
//! hybrid host").

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

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
    /// With `cpu_v1`, the cgroup2 mount of a hybrid host (e.g.
    /// `/sys/fs/cgroup/unified`), where ids tagged [`UNIFIED_TAG`] are
    /// named; `None` on v2 hosts and v1-only hosts.
    pub unified: Option<PathBuf>,
}

/// Set by the probe in the id of a task keyed by its v2 cgroup on a hybrid
/// host (see the module documentation): kernfs ids are `ino | gen << 32`
/// and gen grows only when the 31-bit inode allocator wraps, so bit 63 is
/// never set in a real id. Mirrors `TD_CGROUP_UNIFIED_TAG` in
/// `core_fixes.bpf.h`.
pub const UNIFIED_TAG: u64 = 1 << 63;

/// Whether `id` is a tagged v2 (unified hierarchy) id.
pub fn is_unified(id: u64) -> bool {
    id & UNIFIED_TAG != 0
}

/// The inode number behind `id`, tag removed.
pub fn untag(id: u64) -> u64 {
    id & !UNIFIED_TAG
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

    /// The id (inode number) of the cpu hierarchy's root cgroup.
    pub fn root_id(&self) -> Result<u64> {
        fs::metadata(&self.mount).map(|m| m.ino()).map_err(|e| {
            Error::with_source(
                ErrorKind::Cgroup,
                format!("stat {}", self.mount.display()),
                e,
            )
        })
    }

    /// Absolute directory of cgroup `path` (as in `/a/b`) in the cpu
    /// hierarchy.
    pub fn dir(&self, path: &str) -> PathBuf {
        self.mount.join(path.trim_start_matches('/'))
    }

    /// The directory of cgroup `path` as the probe labels it: in the cpu
    /// hierarchy, else (a task keyed by its v2 cgroup on a hybrid host) in
    /// the unified one; `None` when neither has it (gone).
    pub fn find(&self, path: &str) -> Option<PathBuf> {
        let rel = path.trim_start_matches('/');
        std::iter::once(&self.mount)
            .chain(self.unified.as_ref())
            .map(|m| m.join(rel))
            .find(|d| d.is_dir())
    }

    /// Absolute directory of cgroup `path` in the hierarchy that cgroup
    /// `id` comes from: the unified one for a tagged id. `None` for a
    /// tagged id on a host without a unified mount.
    pub fn dir_of(&self, id: u64, path: &str) -> Option<PathBuf> {
        let mount = match is_unified(id) {
            true => self.unified.as_deref()?,
            false => &self.mount,
        };
        Some(mount.join(path.trim_start_matches('/')))
    }
}

/// The cpu hierarchy from mountinfo text (see proc(5)): fields, ` - `,
/// fstype, source, super options. The first cgroup2 mount is the unified
/// hierarchy, wherever it comes in the text.
pub fn parse_mountinfo(text: &str) -> Option<Hierarchy> {
    let mut v1 = None;
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
            "cgroup" if v1.is_none() && opts.is_some_and(|o| o.split(',').any(|o| o == "cpu")) => {
                v1 = Some(mount)
            }
            "cgroup2" if v2.is_none() => v2 = Some(mount),
            _ => {}
        }
    }
    match (v1, v2) {
        (Some(mount), unified) => Some(Hierarchy {
            mount,
            cpu_v1: true,
            unified,
        }),
        (None, Some(mount)) => Some(Hierarchy {
            mount,
            cpu_v1: false,
            unified: None,
        }),
        (None, None) => None,
    }
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
                cpu_v1: true,
                unified: Some("/sys/fs/cgroup/unified".into()),
            })
        );
        // The unified mount is found after the cpu one too, and a v1-only
        // host has none.
        let late = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let h = parse_mountinfo(late).unwrap();
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(h.unified, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let v1 = parse_mountinfo("32 31 0:29 / /c rw - cgroup cgroup rw,cpu\n").unwrap();
        assert_eq!((v1.cpu_v1, v1.unified), (true, None));
    }

    #[test]
    fn v2_hosts_use_the_unified_mount_and_cpuset_is_not_cpu() {
        let v2 = "30 24 0:25 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n\
                  29 24 0:27 / /x rw shared:15 - cgroup cgroup rw,cpuset\n";
        assert_eq!(
            parse_mountinfo(v2),
            Some(Hierarchy {
                mount: "/sys/fs/cgroup".into(),
                cpu_v1: false,
                unified: None,
            })
        );
        assert_eq!(parse_mountinfo("garbage\n1 2 3\n"), None);
    }

    #[test]
    fn unified_ids_are_tagged_in_bit_63_and_untagged_back() {
        let ino = 0x0000_0001_0000_2a2a_u64; // gen 1, ino 0x2a2a
        let tagged = ino | UNIFIED_TAG;
        assert!(is_unified(tagged) && !is_unified(ino));
        assert_eq!(untag(tagged), ino);
        assert_eq!(untag(ino), ino);
        assert_ne!(
            tagged, ino,
            "a v2 id never equals the v1 id of the same inode"
        );
        // The system culprit (0) and a root id are never tagged.
        assert!(!is_unified(0) && !is_unified(1));
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/a\04"), r"/a\04");
    }
}
