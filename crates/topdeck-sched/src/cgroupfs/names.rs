// SPDX-License-Identifier: Apache-2.0
//! Cgroup ids to paths: [`CgroupNames`], fed by a watcher thread per
//! hierarchy ([`watch`]) and by bounded walks.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::hierarchy::{untag, Hierarchy, UNIFIED_TAG};

mod watch;

/// Most directories one walk of the hierarchy visits: a host with more
/// cgroups than this gets the rest named by the watcher, or not at all,
/// instead of a walk whose cost grows without bound.
pub const MAX_WALK: usize = 65_536;
/// Most directories the watcher watches (one inotify watch each).
pub const MAX_WATCHES: usize = 65_536;

/// Cgroup ids to paths, learnt as early as possible and kept until the
/// agent forgets them.
///
/// Why not just walk when an id shows up: the probe's maps are read once
/// per interval, and a cgroup that lived less than that is gone by the time
/// its id is first seen; no walk can name it then. So a watcher thread
/// (inotify on every directory of the hierarchy: `mkdir` on cgroupfs goes
/// through the VFS, which reports it) stats each new cgroup directory the
/// moment it is made and records its inode, which is the id BPF sees.
/// Removed cgroups keep their names here for [`CgroupNames::expire`]'s
/// window, so a map read up to that long after the removal still finds
/// them. When the watcher cannot run (no inotify, out of watches, its
/// queue overflowed), an unknown id triggers one bounded walk
/// ([`MAX_WALK`] directories) at most once per
/// [`CgroupNames::refresh_allowed`]; the walk adds to the cache, it never
/// clears it. There is never a periodic full walk.
///
/// On a hybrid host the unified hierarchy gets the same: its own watcher,
/// and its own bounded walk for a tagged id ([`UNIFIED_TAG`]) that is
/// unknown; its ids are kept tagged, so the two never collide.
#[derive(Debug)]
pub struct CgroupNames {
    hierarchy: Hierarchy,
    paths: HashMap<u64, String>,
    /// The cpu hierarchy, then the unified one on a hybrid host.
    trees: Vec<Tree>,
}

/// One hierarchy the names come from.
#[derive(Debug)]
struct Tree {
    mount: PathBuf,
    /// What its ids carry: 0, or [`UNIFIED_TAG`].
    tag: u64,
    may_rescan: bool,
    watcher: Option<watch::Watcher>,
}

impl Tree {
    fn new(mount: &Path, tag: u64) -> Self {
        Self {
            mount: mount.to_path_buf(),
            tag,
            may_rescan: true,
            watcher: None,
        }
    }
}

impl CgroupNames {
    /// An empty cache over `hierarchy`, without a watcher.
    pub fn new(hierarchy: Hierarchy) -> Self {
        let mut trees = vec![Tree::new(&hierarchy.mount, 0)];
        if let (true, Some(u)) = (hierarchy.cpu_v1, &hierarchy.unified) {
            trees.push(Tree::new(u, UNIFIED_TAG));
        }
        Self {
            hierarchy,
            paths: HashMap::new(),
            trees,
        }
    }

    /// A cache over `hierarchy` with the watchers running, walked once.
    /// Without inotify the cache still works, by walks: the error says why.
    pub fn watching(hierarchy: Hierarchy) -> (Self, Option<String>) {
        let mut names = Self::new(hierarchy);
        let mut why = Vec::new();
        for t in &mut names.trees {
            match watch::Watcher::start(&t.mount) {
                Ok(w) => t.watcher = Some(w),
                Err(e) => why.push(e),
            }
        }
        names.rescan();
        (names, (!why.is_empty()).then(|| why.join("; ")))
    }

    /// Allows one more walk of each hierarchy (the agent calls this once
    /// per tick).
    pub fn refresh_allowed(&mut self) {
        for t in &mut self.trees {
            t.may_rescan = true;
        }
    }

    /// The path (`/`, `/a/b`) of cgroup `id`, if it exists or was seen by
    /// the watcher or a walk and not forgotten since. A tagged id is looked
    /// up in the unified hierarchy, and its path is shown as is.
    pub fn path(&mut self, id: u64) -> Option<&str> {
        if !self.paths.contains_key(&id) {
            self.take_from_watchers();
        }
        if !self.paths.contains_key(&id) {
            let tag = id & UNIFIED_TAG;
            if let Some(t) = self.trees.iter_mut().find(|t| t.tag == tag) {
                if t.may_rescan {
                    t.may_rescan = false;
                    let found = walk(&t.mount, MAX_WALK);
                    self.paths
                        .extend(found.into_iter().map(|(ino, p)| (ino | tag, p)));
                }
            }
        }
        self.paths.get(&id).map(String::as_str)
    }

    /// Whether cgroup `id` still exists at `path`: one stat, no walk.
    pub fn exists_at(&self, id: u64, path: &str) -> bool {
        self.hierarchy
            .dir_of(id, path)
            .and_then(|d| fs::metadata(d).ok())
            .is_some_and(|m| m.ino() == untag(id))
    }

    /// Forgets `id` (the agent retired it).
    pub fn forget(&mut self, id: u64) {
        self.paths.remove(&id);
    }

    /// Forgets the cgroups removed more than `age` ago, as the watchers saw
    /// them go; the agent keeps the names of those it still tracks.
    pub fn expire(&mut self, age: Duration) {
        self.take_from_watchers();
        for t in &self.trees {
            if let Some(w) = &t.watcher {
                for ino in w.removed_before(age) {
                    self.paths.remove(&(ino | t.tag));
                }
            }
        }
    }

    /// Gives back the room of many forgotten names.
    pub(crate) fn give_back(&mut self) {
        crate::memory::give_back(&mut self.paths);
    }

    /// Cgroups known, live or recently removed.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether no cgroup is known.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    fn take_from_watchers(&mut self) {
        for t in &mut self.trees {
            if let Some(w) = &t.watcher {
                let (born, overflowed) = w.take();
                self.paths
                    .extend(born.into_iter().map(|(ino, p)| (ino | t.tag, p)));
                if overflowed {
                    // Events were lost: the next miss walks.
                    t.may_rescan = true;
                }
            }
        }
    }

    /// Walks each hierarchy (at most [`MAX_WALK`] directories each) and
    /// adds every cgroup found; names already known stay.
    pub fn rescan(&mut self) {
        for t in &self.trees {
            for (ino, path) in walk(&t.mount, MAX_WALK) {
                self.paths.insert(ino | t.tag, path);
            }
        }
    }
}

/// The cgroups under `mount`, breadth first, at most `max`: (inode, path).
fn walk(mount: &Path, max: usize) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([(mount.to_path_buf(), String::from("/"))]);
    while let Some((dir, path)) = queue.pop_front() {
        if out.len() >= max {
            break;
        }
        let Ok(meta) = fs::metadata(&dir) else {
            continue;
        };
        out.push((meta.ino(), path.clone()));
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let name = e.file_name().to_string_lossy().into_owned();
                queue.push_back((e.path(), child_path(&path, &name)));
            }
        }
    }
    out
}

fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_ids_are_named_and_checked_in_the_unified_hierarchy() {
        let tmp = tempfile::tempdir().unwrap();
        let (cpu, unified) = (tmp.path().join("cpu"), tmp.path().join("unified"));
        let svc = unified.join("system.slice/nginx.service");
        fs::create_dir_all(cpu.join("docker")).unwrap();
        fs::create_dir_all(&svc).unwrap();
        let ino = fs::metadata(&svc).unwrap().ino();
        let cpu_only = Hierarchy {
            mount: cpu.clone(),
            cpu_v1: true,
            unified: None,
        };
        let h = Hierarchy {
            unified: Some(unified),
            ..cpu_only.clone()
        };

        let mut names = CgroupNames::new(h);
        assert_eq!(
            names.path(ino | UNIFIED_TAG),
            Some("/system.slice/nginx.service")
        );
        // Untagged, the same number is a cpu hierarchy id: not this one.
        names.refresh_allowed();
        assert_eq!(names.path(ino), None);
        let docker = fs::metadata(cpu.join("docker")).unwrap().ino();
        assert_eq!(names.path(docker), Some("/docker"));
        assert_eq!(names.path(docker | UNIFIED_TAG), None);
        assert!(names.exists_at(ino | UNIFIED_TAG, "/system.slice/nginx.service"));
        assert!(!names.exists_at(ino, "/system.slice/nginx.service"));
        fs::remove_dir(&svc).unwrap();
        assert!(!names.exists_at(ino | UNIFIED_TAG, "/system.slice/nginx.service"));
        // Still named after removal, until forgotten: a late map read finds it.
        assert_eq!(
            names.path(ino | UNIFIED_TAG),
            Some("/system.slice/nginx.service")
        );

        // Without a unified mount a tagged id names nothing.
        let mut v1 = CgroupNames::new(cpu_only);
        assert_eq!(v1.path(ino | UNIFIED_TAG), None);
        assert!(!v1.exists_at(ino | UNIFIED_TAG, "/system.slice/nginx.service"));
    }

    #[test]
    fn this_hosts_cpu_hierarchy_resolves_its_root() {
        let h = Hierarchy::detect().expect("cgroupfs is mounted here");
        let root = h.root_id().unwrap();
        let mut names = CgroupNames::new(h);
        assert_eq!(names.path(root), Some("/"));
    }
}
