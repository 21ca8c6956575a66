// SPDX-License-Identifier: Apache-2.0
//! The cgroup hierarchy the host's cpu controller lives in, cgroup ids to
//! paths, and the throttling counters of `cpu.stat`.
//!
//! Source of truth: Documentation/admin-guide/cgroup-v1/cgroups.rst and
//! cgroup-v2.rst. A cgroup's id, as BPF sees it (`kn->id`), is the inode
//! number of its directory in cgroupfs, so ids are resolved by walking the
//! hierarchy and matching `st_ino`.
//!
//! # Which hierarchy names a task on a hybrid host
//!
//! A hybrid host mounts the cpu controller as a v1 hierarchy and cgroup v2
//! (no controllers) at [`Hierarchy::unified`]. A task is keyed by
//! ([`attribute`] states the rule over `/proc/<pid>/cgroup`):
//!
//! 1. its v1 cpu cgroup when that is not the v1 root: that is what the
//!    scheduler groups it by, and where its quota and throttling live;
//! 2. else its v2 cgroup when that is not the v2 root: the cpu hierarchy
//!    does not tell it apart (a systemd service without CPU accounting, a
//!    task a runtime placed only in v2), but v2 does;
//! 3. else it is in both roots: `/`, which counts as system.
//!
//! Inode numbers are per hierarchy, so a v2 id could equal a v1 id: the
//! probe sets [`UNIFIED_TAG`] (bit 63) in ids of case 2, and
//! [`CgroupNames`] resolves those under the unified mount. A v2 cgroup is
//! shown by its path alone, like a v1 one: systemd and the container
//! runtimes' systemd drivers use the same paths in both hierarchies, so
//! the path means the same unit either way, and their series merge when
//! both hierarchies name one unit. A v2-keyed cgroup has no v1 cpu group
//! of its own, so no quota: its throttling (read from the cpu hierarchy at
//! that path) is normally absent.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

pub use topdeck_procfs::cgroup::{attribute, Attribution};

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

mod watch {
    //! The inotify thread behind [`super::CgroupNames`].

    use std::collections::{HashMap, VecDeque};
    use std::ffi::CString;
    use std::fs;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    use super::{child_path, walk, MAX_WALK, MAX_WATCHES};

    /// Most removals remembered for expiry: beyond it the oldest are
    /// expired at once, which costs only names of long-gone cgroups.
    const MAX_REMOVED: usize = 1 << 20;

    #[derive(Default)]
    struct Shared {
        born: Vec<(u64, String)>,
        removed: VecDeque<(Instant, u64)>,
        overflowed: bool,
    }

    pub(super) struct Watcher {
        shared: Arc<Mutex<Shared>>,
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    }

    impl std::fmt::Debug for Watcher {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Watcher").finish_non_exhaustive()
        }
    }

    struct State {
        fd: OwnedFd,
        mount: PathBuf,
        /// Watch descriptor to the cgroup path it watches.
        wds: HashMap<i32, String>,
        /// Path to inode of the cgroups watched, to name removals.
        inos: HashMap<String, u64>,
        shared: Arc<Mutex<Shared>>,
    }

    impl State {
        fn add(&mut self, path: &str) -> Option<u64> {
            let dir = self.mount.join(path.trim_start_matches('/'));
            let ino = fs::metadata(&dir).ok()?.ino();
            self.inos.insert(path.to_string(), ino);
            if self.wds.len() < MAX_WATCHES {
                let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
                // SAFETY: a valid inotify descriptor and a NUL-terminated path.
                let wd = unsafe {
                    libc::inotify_add_watch(
                        self.fd.as_raw_fd(),
                        c.as_ptr(),
                        libc::IN_CREATE | libc::IN_DELETE | libc::IN_ONLYDIR,
                    )
                };
                if wd >= 0 {
                    self.wds.insert(wd, path.to_string());
                } else {
                    self.shared
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .overflowed = true;
                }
            } else {
                // Out of watches: below here, names come from walks.
                self.shared
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .overflowed = true;
            }
            Some(ino)
        }

        /// Reads and handles whatever events are queued.
        fn drain(&mut self) {
            let mut buf = [0u8; 64 * 1024];
            loop {
                // SAFETY: reading into a buffer we own, of its length.
                let n =
                    unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    return;
                }
                let mut off = 0usize;
                let head = std::mem::size_of::<libc::inotify_event>();
                while off + head <= n as usize {
                    // SAFETY: the kernel wrote a whole event here; read
                    // unaligned because the buffer is bytes.
                    let ev: libc::inotify_event =
                        unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
                    let name_bytes = &buf[off + head..off + head + ev.len as usize];
                    let end = name_bytes
                        .iter()
                        .position(|&b| b == 0)
                        .unwrap_or(name_bytes.len());
                    let name = String::from_utf8_lossy(&name_bytes[..end]).into_owned();
                    off += head + ev.len as usize;
                    self.event(ev.wd, ev.mask, &name);
                }
            }
        }

        fn event(&mut self, wd: i32, mask: u32, name: &str) {
            if mask & libc::IN_Q_OVERFLOW != 0 {
                self.shared
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .overflowed = true;
                return;
            }
            if mask & libc::IN_IGNORED != 0 {
                self.wds.remove(&wd);
                return;
            }
            if mask & libc::IN_ISDIR == 0 {
                return;
            }
            let Some(parent) = self.wds.get(&wd).cloned() else {
                return;
            };
            let path = child_path(&parent, name);
            if mask & libc::IN_CREATE != 0 {
                // At once: the cgroup may be gone within milliseconds.
                if let Some(ino) = self.add(&path) {
                    let mut born = vec![(ino, path.clone())];
                    // What was made under it before the watch was in place.
                    let dir = self.mount.join(path.trim_start_matches('/'));
                    for (i, p) in walk(&dir, MAX_WALK).into_iter().skip(1) {
                        let p = format!("{path}{p}");
                        self.add(&p);
                        born.push((i, p));
                    }
                    self.shared
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .born
                        .extend(born);
                }
            } else if mask & libc::IN_DELETE != 0 {
                if let Some(ino) = self.inos.remove(&path) {
                    let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                    if s.removed.len() >= MAX_REMOVED {
                        s.removed.pop_front();
                    }
                    s.removed.push_back((Instant::now(), ino));
                }
            }
        }
    }

    impl Watcher {
        /// Watches the hierarchy mounted at `mount`; ids are its inodes,
        /// untagged.
        pub(super) fn start(mount: &Path) -> Result<Self, String> {
            // SAFETY: no pointers; the result is checked.
            let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
            if fd < 0 {
                return Err(format!(
                    "inotify_init1: {}",
                    std::io::Error::last_os_error()
                ));
            }
            // SAFETY: a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let shared = Arc::new(Mutex::new(Shared::default()));
            let mut state = State {
                fd,
                mount: mount.to_path_buf(),
                wds: HashMap::new(),
                inos: HashMap::new(),
                shared: shared.clone(),
            };
            // Watch first, then walk: a cgroup made in between is seen by
            // both, never by neither.
            for (_, path) in walk(mount, MAX_WALK) {
                state.add(&path);
            }
            if state.wds.is_empty() {
                return Err(format!(
                    "inotify_add_watch {}: {}",
                    mount.display(),
                    std::io::Error::last_os_error()
                ));
            }
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let thread = std::thread::Builder::new()
                .name("cgroup-names".into())
                .spawn(move || {
                    while !s.load(Ordering::Relaxed) {
                        let mut pfd = libc::pollfd {
                            fd: state.fd.as_raw_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        };
                        // SAFETY: one pollfd of ours; the timeout bounds how
                        // long a stop request waits.
                        let n = unsafe { libc::poll(&mut pfd, 1, 200) };
                        if n > 0 {
                            state.drain();
                        }
                    }
                })
                .map_err(|e| format!("spawning the cgroup watcher: {e}"))?;
            Ok(Self {
                shared,
                stop,
                thread: Some(thread),
            })
        }

        /// Cgroups made since the last call, and whether events were lost.
        pub(super) fn take(&self) -> (Vec<(u64, String)>, bool) {
            let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let overflowed = std::mem::take(&mut s.overflowed);
            (std::mem::take(&mut s.born), overflowed)
        }

        /// Ids removed more than `age` ago, taken off the list.
        pub(super) fn removed_before(&self, age: Duration) -> Vec<u64> {
            let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let mut out = Vec::new();
            while s.removed.front().is_some_and(|(t, _)| t.elapsed() >= age) {
                if let Some((_, id)) = s.removed.pop_front() {
                    out.push(id);
                }
            }
            out
        }
    }

    impl Drop for Watcher {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
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
