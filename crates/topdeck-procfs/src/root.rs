// SPDX-License-Identifier: Apache-2.0
//! Opening a directory as another view of the file system sees it. A
//! container's files are reached through `/proc/<pid>/root` of one of its
//! processes, but a path walked from there is only half the container's:
//! the kernel follows the magic link into the container's root, then
//! resolves an absolute symlink the container planted (`/tmp ->
//! /var/lib/host-stuff`) against the *reader's* root, and `..` past the
//! container's root too. A root reader would then list host files and
//! show them as the container's. Here the path is resolved inside the
//! root instead (`openat2` with `RESOLVE_IN_ROOT`, magic links refused),
//! so what a container holds can steer the reader only within the
//! container: the answer is what the container itself would see.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::view::{self, View};

/// Flags of every directory opened here: readable, so it can be listed
/// and files opened relative to it.
const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// Opens the directory `path` as seen from `root` (a `/proc/<pid>/root`,
/// or any directory): `path` (absolute or not) is resolved inside `root`,
/// its symlinks and `..` included, and magic links (a `/proc/<pid>/root`
/// of the container's own `/proc`) are refused. Before Linux 5.6 (or
/// where a filter refuses `openat2`), each component is opened without
/// following any symlink instead, which refuses (`ENOTDIR`) links the
/// first way follows inside the root.
///
/// ```
/// use std::os::unix::fs::symlink;
///
/// let root = tempfile::tempdir()?;
/// std::fs::create_dir_all(root.path().join("var/data"))?;
/// std::fs::write(root.path().join("var/data/inside"), b"")?;
/// // An absolute link planted inside: resolved against `root`, not `/`.
/// symlink("/var/data", root.path().join("tmp"))?;
/// let dir = topdeck_procfs::root::open_dir_in(root.path(), "/tmp".as_ref());
/// match dir {
///     Ok(dir) => assert_eq!(topdeck_procfs::root::names(&dir)?, ["inside"]),
///     // The fallback follows no link at all.
///     Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR)),
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn open_dir_in(root: &Path, path: &Path) -> io::Result<OwnedFd> {
    // Following the magic link is the point here: it is the view's root.
    let root = rfs::open(root, ROOT, Mode::empty())?;
    open_inside(root, path)
}

/// Flags of a root opened to resolve paths from: nothing read through it.
const ROOT: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// Opens the directory `path` inside the root of `view`, reached through
/// process `pid`, one of the view's processes when it was taken, as
/// [`open_dir_in`] resolves it. `/proc/<pid>` is opened once, and the
/// mount namespace and root directory reached through it are checked to
/// be `view`'s: a process that left the view meanwhile, or whose pid went
/// to a process of another container, is refused (`ESRCH`, as for a
/// process gone) rather than read as the view's.
///
/// ```
/// use std::path::Path;
/// let me = std::process::id();
/// let mine = topdeck_procfs::view::of(None)?;
/// assert!(topdeck_procfs::root::open_dir_in_view(me, &mine, Path::new("/tmp")).is_ok());
/// let other = topdeck_procfs::view::View { namespace: mine.namespace + 1, ..mine };
/// let refused = topdeck_procfs::root::open_dir_in_view(me, &other, Path::new("/tmp"));
/// assert_eq!(refused.unwrap_err().raw_os_error(), Some(libc::ESRCH));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn open_dir_in_view(pid: u32, view: &View, path: &Path) -> io::Result<OwnedFd> {
    let process = rfs::open(format!("/proc/{pid}"), ROOT, Mode::empty())?;
    // Both through the one `/proc/<pid>`: a pid reused since names
    // another process, which this descriptor never reaches.
    let root = rfs::openat(&process, "root", ROOT, Mode::empty())?;
    let st = rfs::statx(&root, "", rfs::AtFlags::EMPTY_PATH, view::WANTED)?;
    let seen = view::of_root(&st, || {
        Ok(rfs::statat(&process, "ns/mnt", rfs::AtFlags::empty())?.st_ino)
    })?;
    if seen != *view {
        return Err(Errno::SRCH.into());
    }
    open_inside(root, path)
}

/// `path` opened inside the open `root`, as [`open_dir_in`] says.
fn open_inside(root: OwnedFd, path: &Path) -> io::Result<OwnedFd> {
    let rel = relative(path);
    match rfs::openat2(
        &root,
        &rel,
        DIR,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(Errno::NOSYS | Errno::PERM) => walk(root, path),
        other => Ok(other?),
    }
}

/// `path` relative to a root: its leading `/` dropped, `.` for the root
/// itself.
fn relative(path: &Path) -> PathBuf {
    let rel = path.strip_prefix("/").unwrap_or(path);
    if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel.to_path_buf()
    }
}

/// Each component of `path` opened from `root` with `O_NOFOLLOW`, `..`
/// stopping at `root` as `RESOLVE_IN_ROOT` has it.
fn walk(root: OwnedFd, path: &Path) -> io::Result<OwnedFd> {
    let mut open = vec![rfs::openat(&root, ".", DIR, Mode::empty())?];
    for part in path.components() {
        match part {
            Component::Normal(name) => {
                let at = open.last().unwrap_or(&root);
                let next = rfs::openat(at, name, DIR | OFlags::NOFOLLOW, Mode::empty())?;
                open.push(next);
            }
            Component::ParentDir if open.len() > 1 => {
                open.pop();
            }
            Component::RootDir => open.truncate(1),
            Component::ParentDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(open.pop().unwrap_or(root))
}

/// Where `path` lies when it is reached through another view's root:
/// `/proc/<pid>/root` (also `self`, `thread-self`) and the rest of the
/// path inside that root; `None` for any other path.
///
/// ```
/// use std::path::Path;
/// use topdeck_procfs::root::split;
///
/// let (root, inside) = split(Path::new("/proc/42/root/tmp/hsperfdata_app")).unwrap();
/// assert_eq!((root.as_path(), inside.as_path()), (Path::new("/proc/42/root"), Path::new("tmp/hsperfdata_app")));
/// assert!(split(Path::new("/tmp/hsperfdata_app")).is_none());
/// ```
pub fn split(path: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut parts = path.components();
    if parts.next() != Some(Component::RootDir) || parts.next()?.as_os_str() != "proc" {
        return None;
    }
    let pid = parts.next()?.as_os_str();
    let is_pid = !pid.is_empty() && pid.as_bytes().iter().all(u8::is_ascii_digit);
    if !(is_pid || pid == "self" || pid == "thread-self") || parts.next()?.as_os_str() != "root" {
        return None;
    }
    let root = Path::new("/proc").join(pid).join("root");
    Some((root, parts.as_path().to_path_buf()))
}

/// Opens the directory `path`: through [`open_dir_in`] when `path` is
/// reached through another view's root (see [`split`]), so that view's
/// links lead only within it; any other path as the kernel resolves it
/// for this reader, links followed.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("a"), b"")?;
/// let fd = topdeck_procfs::root::open_dir(dir.path())?;
/// assert_eq!(topdeck_procfs::root::names(&fd)?, ["a"]);
/// // The same directory through this process's own root, resolved in it.
/// let through = std::path::Path::new("/proc/self/root").join(dir.path().strip_prefix("/").unwrap());
/// assert_eq!(topdeck_procfs::root::names(&topdeck_procfs::root::open_dir(&through)?)?, ["a"]);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    match split(path) {
        Some((root, inside)) => open_dir_in(&root, &inside),
        None => Ok(rfs::open(path, DIR, Mode::empty())?),
    }
}

/// The names in the open directory `dir` (not `.` and `..`), in directory
/// order (as `readdir` gives them); the directory is listed through its
/// descriptor, never its path again.
pub fn names(dir: impl AsFd) -> io::Result<Vec<OsString>> {
    Ok(crate::budget::names_up_to(dir, usize::MAX)?.0)
}

/// Opens the directory `name` of the open directory `dir` without
/// following a symbolic link: a link is refused with `ELOOP` (the kernel
/// says `ENOTDIR` for a link opened as a directory; this tells them
/// apart), anything else not a directory with `ENOTDIR`. `name` must be
/// one component: no `/`, not `.` or `..` (`EINVAL`).
///
/// ```
/// use topdeck_procfs::root::{open_dir_at, open_file_at};
///
/// let top = tempfile::tempdir()?;
/// std::fs::create_dir(top.path().join("real"))?;
/// std::fs::write(top.path().join("real/file"), b"data")?;
/// std::os::unix::fs::symlink(top.path().join("real"), top.path().join("link"))?;
/// let top_fd = std::fs::File::open(top.path())?;
/// let real = open_dir_at(&top_fd, "real".as_ref())?;
/// assert!(open_file_at(&real, "file".as_ref())?.metadata()?.is_file());
/// let link = open_dir_at(&top_fd, "link".as_ref()).unwrap_err();
/// assert_eq!(link.raw_os_error(), Some(libc::ELOOP));
/// let file = open_dir_at(&real, "file".as_ref()).unwrap_err();
/// assert_eq!(file.raw_os_error(), Some(libc::ENOTDIR));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn open_dir_at(dir: impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    one_component(name)?;
    match rfs::openat(&dir, name, DIR | OFlags::NOFOLLOW, Mode::empty()) {
        Err(Errno::NOTDIR) if is_link_at(&dir, name) => Err(Errno::LOOP.into()),
        other => Ok(other?),
    }
}

/// Opens the file `name` of the open directory `dir` read-only as a
/// foreign file is opened: a symbolic link refused (`ELOOP`), a FIFO
/// opened without blocking, no terminal taken; what it is (a regular
/// file?) is for the caller's `fstat` to tell. `name` as for
/// [`open_dir_at`].
pub fn open_file_at(dir: impl AsFd, name: &OsStr) -> io::Result<File> {
    one_component(name)?;
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    Ok(File::from(rfs::openat(&dir, name, flags, Mode::empty())?))
}

/// `EINVAL` unless `name` is one plain component.
fn one_component(name: &OsStr) -> io::Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(Errno::INVAL.into());
    }
    Ok(())
}

/// Whether `name` of `dir` is a symbolic link, not followed.
fn is_link_at(dir: impl AsFd, name: &OsStr) -> bool {
    rfs::statat(&dir, name, rfs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Symlink)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A root holding `inside/file`, and a directory outside it holding
    /// `outside/file`, as a host and a container's root are.
    fn scene() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("root");
        let outside = top.path().join("outside");
        std::fs::create_dir_all(root.join("inside")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("inside/file"), b"").unwrap();
        std::fs::write(outside.join("host-file"), b"").unwrap();
        (top, root, outside)
    }

    #[test]
    fn an_absolute_link_or_dotdot_in_the_root_does_not_lead_out_of_it() {
        let (_top, root, outside) = scene();
        // Through the host's root, this link leads outside; `..` too.
        symlink(&outside, root.join("abs")).unwrap();
        symlink("../outside", root.join("up")).unwrap();
        for link in ["abs", "up", "../outside", "inside/../../outside"] {
            match open_dir_in(&root, Path::new(link)) {
                Ok(fd) => {
                    let names = names(&fd).unwrap();
                    assert!(!names.contains(&"host-file".into()), "{link}: {names:?}");
                }
                Err(e) => assert!(
                    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)),
                    "{link}: {e}"
                ),
            }
        }
        // What lies inside is reached, from `/` or not.
        for path in ["/inside", "inside", "/inside/../inside"] {
            let fd = open_dir_in(&root, Path::new(path)).unwrap();
            assert_eq!(names(&fd).unwrap(), ["file"], "{path}");
        }
    }

    #[test]
    fn the_fallback_walk_follows_no_link_and_stops_dotdot_at_the_root() {
        let (_top, root, outside) = scene();
        symlink(&outside, root.join("abs")).unwrap();
        let open = || rfs::open(&root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        // A link opened as a directory without following it: ENOTDIR.
        let e = walk(open(), Path::new("/abs")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
        let fd = walk(open(), Path::new("../../inside")).unwrap();
        assert_eq!(names(&fd).unwrap(), ["file"]);
        let fd = walk(open(), Path::new("inside/..")).unwrap();
        let mut all = names(&fd).unwrap();
        all.sort();
        assert_eq!(all, ["abs", "inside"]);
    }

    #[test]
    fn only_one_plain_component_is_opened_at_a_directory() {
        let (_top, root, _outside) = scene();
        let fd = open_dir_in(&root, Path::new("/")).unwrap();
        for name in ["", ".", "..", "inside/file", "/inside"] {
            let e = open_file_at(&fd, name.as_ref()).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{name:?}");
            let e = open_dir_at(&fd, name.as_ref()).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{name:?}");
        }
        let inside = open_dir_at(&fd, "inside".as_ref()).unwrap();
        assert!(open_file_at(&inside, "file".as_ref()).is_ok());
    }

    #[test]
    fn only_proc_pid_root_paths_split() {
        assert!(split(Path::new("/proc/12/roots/tmp")).is_none());
        assert!(split(Path::new("/proc/x1/root/tmp")).is_none());
        assert!(split(Path::new("proc/12/root/tmp")).is_none());
        let (root, inside) = split(Path::new("/proc/self/root")).unwrap();
        assert_eq!((root, inside), ("/proc/self/root".into(), "".into()));
    }
}
