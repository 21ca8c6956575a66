// SPDX-License-Identifier: Apache-2.0
//! Views of the file system: the mount namespace and root directory a
//! process sees files through. A container's `/dev/shm` or `/tmp` is
//! reached through `/proc/<pid>/root` of any process that shares its view,
//! so a reader looks through each view once, not once per process.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// How a process sees the file system: the inode of its mount namespace,
/// and the device and inode of its root directory (a chroot in the same
/// namespace sees another `/tmp`; another namespace may mount its own
/// `/tmp` over the same root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct View {
    /// Inode of `/proc/<pid>/ns/mnt`.
    pub mnt_ns: u64,
    /// Device of its root directory.
    pub root_dev: u64,
    /// Inode of its root directory.
    pub root_ino: u64,
}

/// The view of `pid` (this process for `None`): two `stat` calls. Fails
/// with `PermissionDenied` for a process the reader may not inspect
/// (another user's, for a reader not root) and `NotFound` for one gone.
///
/// ```
/// let mine = topdeck_procfs::view::of(None).unwrap();
/// assert_eq!(topdeck_procfs::view::of(Some(std::process::id())).unwrap(), mine);
/// ```
pub fn of(pid: Option<u32>) -> io::Result<View> {
    let dir = match pid {
        Some(p) => PathBuf::from(format!("/proc/{p}")),
        None => PathBuf::from("/proc/self"),
    };
    let mnt = std::fs::metadata(dir.join("ns/mnt"))?;
    let root = std::fs::metadata(dir.join("root"))?;
    Ok(View {
        mnt_ns: mnt.ino(),
        root_dev: root.dev(),
        root_ino: root.ino(),
    })
}

/// Every process in `/proc`, grouped by view.
#[derive(Debug, Default)]
pub struct Views {
    /// The pids sharing each view, ascending.
    pub members: BTreeMap<View, Vec<u32>>,
    /// How many processes the reader may not inspect (their view is
    /// unknown, so they are in no group).
    pub denied: usize,
}

/// Groups every process by its view: two `stat` calls per process and no
/// reads. Processes that exit meanwhile are left out.
///
/// ```
/// let views = topdeck_procfs::view::all();
/// let mine = topdeck_procfs::view::of(None).unwrap();
/// assert!(views.members[&mine].contains(&std::process::id()));
/// ```
pub fn all() -> Views {
    let mut out = Views::default();
    let Ok(listing) = std::fs::read_dir("/proc") else {
        return out;
    };
    let mut pids: Vec<u32> = listing
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    for pid in pids {
        match of(Some(pid)) {
            Ok(v) => out.members.entry(v).or_default().push(pid),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => out.denied += 1,
            Err(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_process_has_no_view() {
        assert_eq!(
            of(Some(u32::MAX)).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn a_child_shares_this_process_view() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let v = of(Some(child.id()));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(v.unwrap(), of(None).unwrap());
    }
}
