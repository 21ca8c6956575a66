// SPDX-License-Identifier: Apache-2.0
//! Views of the file system: the mount namespace and root directory a
//! process sees files through. A container's `/dev/shm` or `/tmp` is
//! reached through `/proc/<pid>/root` of any process that shares its view,
//! so a reader looks through each view once, not once per process.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::MetadataExt;

use rustix::fs as rfs;
use std::path::PathBuf;

/// How a process sees the file system: the mount its root directory is
/// on, which tells mount namespaces apart (a namespace's mounts are its
/// own: another namespace's root is another mount, even of the same file
/// system), and the device and inode of that root (a chroot in the same
/// namespace sees another `/tmp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct View {
    /// The mount id of its root directory's mount (`statx`'s
    /// `stx_mnt_id`, Linux 5.8 and later); on an older kernel, the inode
    /// of its `ns/mnt`, which tells the same namespaces apart.
    pub namespace: u64,
    /// Device of its root directory.
    pub root_dev: u64,
    /// Inode of its root directory.
    pub root_ino: u64,
}

/// The view of `pid` (this process for `None`): one `statx` of its root
/// (two on a kernel older than 5.8). Fails with `PermissionDenied` for a
/// process the reader may not inspect (another user's, for a reader not
/// root) and `NotFound` for one gone.
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
    // Following the magic link: the root as the process sees it.
    let root = rfs::statx(rfs::CWD, dir.join("root"), rfs::AtFlags::empty(), WANTED)?;
    of_root(&root, || Ok(std::fs::metadata(dir.join("ns/mnt"))?.ino()))
}

/// What [`of`] asks `statx` for.
pub(crate) const WANTED: rfs::StatxFlags = rfs::StatxFlags::INO.union(rfs::StatxFlags::MNT_ID);

/// The view whose root `statx` answered `root`; `ns` reads the mount
/// namespace's inode where the kernel gave no mount id.
pub(crate) fn of_root(root: &rfs::Statx, ns: impl FnOnce() -> io::Result<u64>) -> io::Result<View> {
    let namespace = if root.stx_mask & rfs::StatxFlags::MNT_ID.bits() != 0 {
        root.stx_mnt_id
    } else {
        ns()?
    };
    Ok(View {
        namespace,
        root_dev: rustix::fs::makedev(root.stx_dev_major, root.stx_dev_minor),
        root_ino: root.stx_ino,
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

/// Groups every process by its view: one `statx` per process and no
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
    fn another_mount_namespace_is_another_view_and_a_child_is_not() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: a new mount namespace needs root");
            return;
        }
        let mut child = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "10"])
            .spawn()
            .unwrap();
        // unshare execs sleep once the namespace is made.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let own_ns = std::fs::metadata("/proc/self/ns/mnt").unwrap().ino();
        while std::fs::metadata(format!("/proc/{}/ns/mnt", child.id()))
            .is_ok_and(|m| m.ino() == own_ns)
        {
            assert!(std::time::Instant::now() < deadline, "no new namespace");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let theirs = of(Some(child.id()));
        let _ = child.kill();
        let _ = child.wait();
        let (theirs, mine) = (theirs.unwrap(), of(None).unwrap());
        assert_ne!(theirs.namespace, mine.namespace);
        // The same root directory, seen through another namespace's mount.
        assert_eq!(
            (theirs.root_dev, theirs.root_ino),
            (mine.root_dev, mine.root_ino)
        );
    }

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
