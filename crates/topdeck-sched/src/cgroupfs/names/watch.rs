// SPDX-License-Identifier: Apache-2.0
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
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
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
