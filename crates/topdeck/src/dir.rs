// SPDX-License-Identifier: Apache-2.0
//! The namespace directory: where registry files live, and the checks that
//! keep a hostile user from planting, redirecting or swapping them (the
//! lessons of hsperfdata in /tmp and of check-then-use races).
//!
//! By default each user has `/dev/shm/topdeck-<uid>`; `TOPDECK_DIR`
//! overrides it for writers and readers alike. A directory is opened once,
//! without following links, and checked through that descriptor
//! (`VerifiedDir`); every later operation (list, open, create, rename,
//! unlink) is relative to the descriptor, so renaming or swapping the path
//! afterwards cannot redirect it. Directories are private (0700) and files
//! private (0600) unless the writer opts into a group (`TOPDECK_GROUP`),
//! then 0750 and 0640. docs/SECURITY.md has the threat model.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Result};

/// Environment variable naming the namespace directory.
pub const ENV_DIR: &str = "TOPDECK_DIR";
/// Environment variable naming a group (name or gid) that may read this
/// writer's registries; unset means only the owner (and root) can.
pub const ENV_GROUP: &str = "TOPDECK_GROUP";
/// Suffix of published registry files; anything else in the directory is ignored.
pub const FILE_SUFFIX: &str = ".topdeck";
/// Prefix of files being created; never read, removed by `gc` once stale.
pub const TEMP_PREFIX: &str = ".creating-";
/// Where per-user directories are made.
pub const SHM_ROOT: &str = "/dev/shm";
const USER_DIR_PREFIX: &str = "topdeck-";
/// Separates a user's fallback directories (`topdeck-<uid>.<tag>`), made
/// when someone else squats `topdeck-<uid>`, from the uid.
const FALLBACK_SEP: char = '.';

/// Mode of a file only its owner (and root) can read.
pub(crate) const PRIVATE_FILE: u32 = 0o600;
/// Mode of a file its group can read too.
pub(crate) const GROUP_FILE: u32 = 0o640;
const PRIVATE_DIR: u32 = 0o700;
const GROUP_DIR: u32 = 0o750;

pub(crate) fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The default directory of `uid`: `/dev/shm/topdeck-<uid>`.
pub fn user_dir(uid: u32) -> PathBuf {
    Path::new(SHM_ROOT).join(format!("{USER_DIR_PREFIX}{uid}"))
}

/// The directory this process writes its registries to, before any
/// fallback (see [`crate::Registry::path`] for where it really went).
pub fn writer_dir() -> PathBuf {
    explicit_dir().unwrap_or_else(|| user_dir(euid()))
}

pub(crate) fn explicit_dir() -> Option<PathBuf> {
    std::env::var_os(ENV_DIR)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// Which directories a reader lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every user's directory under `/dev/shm` (those this reader may open).
    AllUsers,
    /// Only the directories of this uid.
    User(u32),
}

/// The directories a reader lists: `TOPDECK_DIR` alone if set, else the
/// `/dev/shm` directories in `scope`: `topdeck-<uid>` and the fallbacks
/// `topdeck-<uid>.<tag>`, each expected to be owned by its `<uid>`.
pub fn reader_dirs(scope: Scope) -> Vec<PathBuf> {
    match explicit_dir() {
        Some(d) => vec![d],
        None => shm_dirs(scope),
    }
}

fn shm_dirs(scope: Scope) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(SHM_ROOT) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let uid = e.file_name().to_str().and_then(named_uid);
            uid.is_some() && (scope == Scope::AllUsers || uid == scope_uid(scope))
        })
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

fn scope_uid(scope: Scope) -> Option<u32> {
    match scope {
        Scope::AllUsers => None,
        Scope::User(u) => Some(u),
    }
}

/// The uid a `/dev/shm` entry's name claims: `topdeck-<uid>` or `topdeck-<uid>.<tag>`.
pub(crate) fn named_uid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(USER_DIR_PREFIX)?;
    let uid = rest.split_once(FALLBACK_SEP).map_or(rest, |(u, tag)| {
        if tag.is_empty() || !tag.bytes().all(|b| b.is_ascii_alphanumeric()) {
            ""
        } else {
            u
        }
    });
    if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    uid.parse().ok()
}

/// The owner a directory must have: the uid its name carries, for
/// `/dev/shm/topdeck-<uid>[.<tag>]`; anyone for other paths.
fn expected_owner(dir: &Path) -> Option<u32> {
    if dir.parent() != Some(Path::new(SHM_ROOT)) {
        return None;
    }
    dir.file_name().and_then(|n| n.to_str()).and_then(named_uid)
}

fn io_err(what: &str, path: &Path, e: Errno) -> Error {
    Error::io(what, path, e.into())
}

fn cstr(name: &str) -> CString {
    CString::new(name).expect("entry names have no NUL")
}

/// A namespace directory opened without following links and checked
/// through its descriptor: a real directory, owned by the expected user,
/// writable by nobody else. Every operation on its entries goes through the
/// descriptor.
#[derive(Debug)]
pub(crate) struct VerifiedDir {
    fd: OwnedFd,
    path: PathBuf,
    /// The only uid whose files in it are read.
    owner: u32,
}

impl VerifiedDir {
    /// Opens and checks `path`; `owner` overrides the owner its name implies.
    pub(crate) fn open(path: &Path, owner: Option<u32>) -> Result<Self> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rfs::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
                let why = if link {
                    "it is a symlink"
                } else {
                    "it is not a directory"
                };
                return Err(unsafe_dir(path, why));
            }
            Err(Errno::ACCESS) => {
                return Err(Error::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "{}: private to its owner; run as root (or as that user) to read it",
                        path.display()
                    ),
                )
                .with_path(path))
            }
            Err(Errno::NOENT) => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("{}: no such directory", path.display()),
                )
                .with_path(path))
            }
            Err(e) => return Err(io_err("cannot open the namespace directory", path, e)),
        };
        Self::verify(fd, path, owner.or_else(|| expected_owner(path)))
    }

    /// Opens and checks the directory `name` in the directory `parent`
    /// (which the caller opened safely), without following a link there:
    /// a directory of another mount namespace, reached through a
    /// descriptor of its `/dev/shm` and shown as `path`. It must belong to
    /// `owner`.
    pub(crate) fn open_at(parent: &OwnedFd, name: &str, path: &Path, owner: u32) -> Result<Self> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rfs::openat(parent, cstr(name).as_c_str(), flags, Mode::empty()) {
            Ok(fd) => Self::verify(fd, path, Some(owner)),
            Err(Errno::LOOP | Errno::NOTDIR) => Err(unsafe_dir(
                path,
                "it is a symlink or not a directory (in its own mount namespace)",
            )),
            Err(Errno::NOENT) => Err(Error::new(
                ErrorKind::NotFound,
                format!("{}: no such directory", path.display()),
            )
            .with_path(path)),
            Err(e) => Err(io_err("cannot open the namespace directory", path, e)),
        }
    }

    /// Checks through `fd` that the directory belongs to `expected` (if
    /// given) and that nobody else may write in it.
    fn verify(fd: OwnedFd, path: &Path, expected: Option<u32>) -> Result<Self> {
        let st = rfs::fstat(&fd).map_err(|e| io_err("cannot inspect", path, e))?;
        if let Some(expected) = expected {
            if st.st_uid != expected {
                return Err(unsafe_dir(
                    path,
                    &format!("owned by uid {}, expected uid {expected}", st.st_uid),
                ));
            }
        }
        if st.st_mode & 0o022 != 0 {
            return Err(unsafe_dir(
                path,
                &format!("mode {:o} lets others write in it", st.st_mode & 0o7777),
            ));
        }
        Ok(Self {
            fd,
            path: path.to_owned(),
            owner: st.st_uid,
        })
    }

    /// Device and inode of the directory itself: the same directory may be
    /// reached through several mount namespaces.
    pub(crate) fn id(&self) -> Option<(u64, u64)> {
        rfs::fstat(&self.fd).ok().map(|st| (st.st_dev, st.st_ino))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The uid whose files in it are read, as `fstat` showed it.
    pub(crate) fn owner(&self) -> u32 {
        self.owner
    }

    /// Whether it is a fallback, `topdeck-<uid>.<tag>`, not a user's
    /// default directory.
    pub(crate) fn is_fallback(&self) -> bool {
        let name = self.path.file_name().and_then(|n| n.to_str());
        name.is_some_and(|n| n.contains(FALLBACK_SEP) && named_uid(n).is_some())
    }

    /// `stat` of entry `name`, without following a link: what a file
    /// remembered from an earlier listing is checked against, without an
    /// open.
    pub(crate) fn stat_at(&self, name: &str) -> Option<Stat> {
        rfs::statat(&self.fd, cstr(name).as_c_str(), AtFlags::SYMLINK_NOFOLLOW).ok()
    }

    /// Names passing `keep`, sorted, with their inode numbers; reading
    /// stops after `limit` such names, and the flag says whether it got
    /// them all.
    pub(crate) fn names(
        &self,
        keep: impl Fn(&str) -> bool,
        limit: usize,
    ) -> Result<(Vec<(String, u64)>, bool)> {
        let dir = rfs::Dir::read_from(&self.fd)
            .map_err(|e| io_err("cannot list the namespace directory", &self.path, e))?;
        let mut out = Vec::new();
        for entry in dir {
            let entry =
                entry.map_err(|e| io_err("cannot list the namespace directory", &self.path, e))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if !keep(name) {
                continue;
            }
            if out.len() == limit {
                out.sort_unstable();
                return Ok((out, false));
            }
            out.push((name.to_owned(), entry.ino()));
        }
        out.sort_unstable();
        Ok((out, true))
    }

    /// Opens entry `name` read-only, without following links, and checks
    /// through the new descriptor that it is a regular file owned by the
    /// directory's owner; anything else was planted by someone else.
    pub(crate) fn open_file(&self, name: &str) -> Result<(File, Stat)> {
        let path = self.path.join(name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rfs::openat(&self.fd, cstr(name).as_c_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => {
                return Err(planted(&path, "a symlink where a metrics file belongs"))
            }
            Err(Errno::NOENT) => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("{}: gone (its writer removed it)", path.display()),
                )
                .with_path(&path))
            }
            Err(e) => return Err(io_err("cannot open", &path, e)),
        };
        let st = rfs::fstat(&fd).map_err(|e| io_err("cannot stat", &path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(planted(&path, "not a regular file"));
        }
        if st.st_uid != self.owner {
            return Err(planted(
                &path,
                &format!("owned by uid {}, not by the directory's owner", st.st_uid),
            ));
        }
        Ok((File::from(fd), st))
    }

    /// Unlinks `name` if it is still the file `st` describes; `Ok(false)`
    /// if the name now holds another file (left alone).
    pub(crate) fn remove_if_same(&self, name: &str, st: &Stat) -> Result<bool> {
        let path = self.path.join(name);
        let c = cstr(name);
        let now = match rfs::statat(&self.fd, c.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(now) => now,
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(io_err("cannot inspect", &path, e)),
        };
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
            return Ok(false);
        }
        match rfs::unlinkat(&self.fd, c.as_c_str(), AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(io_err("cannot remove", &path, e)),
        }
    }

    /// Unlinks `name` (the writer's own file, on drop).
    pub(crate) fn unlink(&self, name: &str) {
        let _ = rfs::unlinkat(&self.fd, cstr(name).as_c_str(), AtFlags::empty());
    }

    /// Creates `name` exclusively, read-write, with `mode` (and `group`).
    pub(crate) fn create_file(&self, name: &str, group: Option<u32>) -> Result<File> {
        let path = self.path.join(name);
        let flags =
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::openat(
            &self.fd,
            cstr(name).as_c_str(),
            flags,
            Mode::from_raw_mode(PRIVATE_FILE),
        )
        .map_err(|e| io_err("cannot create the registry file", &path, e))?;
        if let Some(gid) = group {
            rfs::fchown(&fd, None, Some(rustix::fs::Gid::from_raw(gid)))
                .and_then(|()| rfs::fchmod(&fd, Mode::from_raw_mode(GROUP_FILE)))
                .map_err(|e| {
                    io_err(
                        &format!("cannot share the registry file with group {gid}"),
                        &path,
                        e,
                    )
                })?;
        }
        Ok(File::from(fd))
    }

    /// Whether `name` exists.
    pub(crate) fn exists(&self, name: &str) -> bool {
        rfs::statat(&self.fd, cstr(name).as_c_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// Renames `from` to `to` in this directory, never replacing `to`.
    pub(crate) fn rename_noreplace(&self, from: &str, to: &str) -> Result<()> {
        rfs::renameat_with(
            &self.fd,
            cstr(from).as_c_str(),
            &self.fd,
            cstr(to).as_c_str(),
            rfs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| io_err("cannot publish the registry file", &self.path.join(to), e))
    }

    /// Makes the directory private, or readable by `group`; only ever
    /// tightens what others may do.
    fn set_sharing(&self, group: Option<u32>) -> Result<()> {
        let st = rfs::fstat(&self.fd).map_err(|e| io_err("cannot inspect", &self.path, e))?;
        let want = match group {
            Some(gid) if st.st_gid != gid => {
                rfs::fchown(&self.fd, None, Some(rustix::fs::Gid::from_raw(gid))).map_err(|e| {
                    io_err(
                        &format!("cannot give group {gid} the directory"),
                        &self.path,
                        e,
                    )
                })?;
                GROUP_DIR
            }
            Some(_) => GROUP_DIR,
            None => PRIVATE_DIR,
        };
        if st.st_mode & 0o777 != want {
            rfs::fchmod(&self.fd, Mode::from_raw_mode(want))
                .map_err(|e| io_err("cannot set the directory's mode", &self.path, e))?;
        }
        Ok(())
    }
}

fn unsafe_dir(dir: &Path, why: &str) -> Error {
    Error::new(
        ErrorKind::UnsafeDirectory,
        format!(
            "{}: unsafe namespace directory: {why}. topdeck uses only directories that are not \
             symlinks, belong to their user and are writable by nobody else, and touched nothing \
             in it: find out who made it (`ls -ld {}`) before changing it, or point {ENV_DIR} at \
             a directory of your own",
            dir.display(),
            dir.display()
        ),
    )
    .with_path(dir)
}

fn planted(path: &Path, why: &str) -> Error {
    Error::new(
        ErrorKind::Planted,
        format!(
            "{}: {why}; topdeck did not make it: find out who did, and who can write to the directory",
            path.display()
        ),
    )
    .with_path(path)
}

/// Where a writer publishes, and what it had to do to get there.
#[derive(Debug)]
pub(crate) struct WriterDir {
    pub(crate) dir: VerifiedDir,
    /// Set when the default directory was unusable and a private fallback was used.
    pub(crate) fallback: Option<String>,
}

/// Opens (creating if needed) the writer's directory. An explicit directory
/// (the builder's, or `TOPDECK_DIR`) must be safe or the writer refuses;
/// the default `/dev/shm/topdeck-<uid>`, if someone else squats it, is
/// replaced by a private `/dev/shm/topdeck-<uid>.<tag>` that readers also
/// look at, and the reason is returned to be said.
pub(crate) fn prepare_writer_dir(explicit: Option<&Path>, group: Option<u32>) -> Result<WriterDir> {
    let uid = euid();
    let explicit = explicit.map(Path::to_owned).or_else(explicit_dir);
    if let Some(dir) = explicit {
        let owner = if expected_owner(&dir).is_some() {
            None
        } else {
            Some(uid)
        };
        let d = create_and_open(&dir, owner)?;
        d.set_sharing(group)?;
        return Ok(WriterDir {
            dir: d,
            fallback: None,
        });
    }
    let default = user_dir(uid);
    match create_and_open(&default, Some(uid)) {
        Ok(d) => {
            d.set_sharing(group)?;
            Ok(WriterDir {
                dir: d,
                fallback: None,
            })
        }
        Err(e) if e.kind() == ErrorKind::UnsafeDirectory => {
            let d = fallback_dir(uid)?;
            d.set_sharing(group)?;
            let why = format!(
                "{e}; publishing in {} instead, where topdeck's readers look too",
                d.path.display(),
            );
            Ok(WriterDir {
                dir: d,
                fallback: Some(why),
            })
        }
        Err(e) => Err(e),
    }
}

fn create_and_open(dir: &Path, owner: Option<u32>) -> Result<VerifiedDir> {
    match rfs::mkdir(dir, Mode::from_raw_mode(PRIVATE_DIR)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => {
            return Err(
                io_err("cannot create the namespace directory", dir, e).with_hint(&format!(
                    "create it, or point {ENV_DIR} at a directory you own"
                )),
            )
        }
    }
    VerifiedDir::open(dir, owner)
}

/// The first safe `/dev/shm/topdeck-<uid>.<tag>` this user owns, else a new
/// one with a random tag (created atomically by `mkdir`, so nobody can squat
/// a name they cannot guess in advance).
fn fallback_dir(uid: u32) -> Result<VerifiedDir> {
    for d in shm_dirs(Scope::User(uid)) {
        if d.extension().is_some() {
            if let Ok(v) = VerifiedDir::open(&d, Some(uid)) {
                return Ok(v);
            }
        }
    }
    let mut last = None;
    for _ in 0..16 {
        let tag = random_tag();
        let d = Path::new(SHM_ROOT).join(format!("{USER_DIR_PREFIX}{uid}{FALLBACK_SEP}{tag}"));
        match rfs::mkdir(&d, Mode::from_raw_mode(PRIVATE_DIR)) {
            Ok(()) => return VerifiedDir::open(&d, Some(uid)),
            Err(e) => last = Some(io_err("cannot create a fallback directory", &d, e)),
        }
    }
    Err(last.expect("at least one attempt"))
}

fn random_tag() -> String {
    let mut b = [0u8; 6];
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        b.copy_from_slice(&(t ^ u64::from(std::process::id())).to_le_bytes()[..6]);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The group named by `TOPDECK_GROUP` (a name or a gid), if set.
pub(crate) fn env_group() -> Result<Option<u32>> {
    match std::env::var_os(ENV_GROUP).filter(|g| !g.is_empty()) {
        None => Ok(None),
        Some(g) => group_id(&g).map(Some),
    }
}

/// Resolves a group name or number to a gid.
pub(crate) fn group_id(group: &OsStr) -> Result<u32> {
    gid_of(group).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidName,
            format!(
                "{ENV_GROUP}={}: no such group; give a group name from /etc/group or a gid",
                group.to_string_lossy()
            ),
        )
    })
}

/// The gid of a group named by number or by name (from the group
/// database), or `None` if there is no such group name.
///
/// ```
/// assert_eq!(topdeck::dir::gid_of("0".as_ref()), Some(0));
/// assert_eq!(topdeck::dir::gid_of("no such group here".as_ref()), None);
/// ```
pub fn gid_of(group: &OsStr) -> Option<u32> {
    if let Some(n) = group.to_str().and_then(|s| s.parse::<u32>().ok()) {
        return Some(n);
    }
    let name = CString::new(group.as_bytes()).ok()?;
    let mut grp: libc::group = unsafe_zeroed_group();
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: `name` is NUL-terminated,
    // `grp` and `result` are writable, `buf` is writable for its length.
    let rc = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    Some(grp.gr_gid)
}

fn unsafe_zeroed_group() -> libc::group {
    // SAFETY: `libc::group` is a plain C struct of pointers and integers,
    // for which all-zero bytes are a valid (empty) value.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn a_fresh_directory_is_created_private() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("ns");
        prepare_writer_dir(Some(&d), None).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        prepare_writer_dir(Some(&d), None).unwrap();
    }

    #[test]
    fn an_existing_open_directory_is_made_private() {
        let tmp = tempfile::tempdir().unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
        prepare_writer_dir(Some(tmp.path()), None).unwrap();
        assert_eq!(fs::metadata(tmp.path()).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_group_opens_the_directory_to_that_group_only() {
        let tmp = tempfile::tempdir().unwrap();
        let gid = fs::metadata(tmp.path()).unwrap().gid();
        prepare_writer_dir(Some(tmp.path()), Some(gid)).unwrap();
        assert_eq!(fs::metadata(tmp.path()).unwrap().mode() & 0o777, 0o750);
    }

    #[test]
    fn a_world_writable_directory_is_refused_without_advice_to_remove_it() {
        let tmp = tempfile::tempdir().unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = VerifiedDir::open(tmp.path(), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeDirectory);
        assert!(err.to_string().contains("777"), "{err}");
        assert!(!err.to_string().contains("remove it"), "{err}");
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = prepare_writer_dir(Some(&link), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeDirectory);
        assert!(err.to_string().contains("symlink"), "{err}");
    }

    #[test]
    fn a_directory_owned_by_someone_else_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let err = VerifiedDir::open(tmp.path(), Some(euid() + 1)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeDirectory);
    }

    #[test]
    fn planted_symlinks_are_named_as_such() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("1-1-0.topdeck")).unwrap();
        let d = VerifiedDir::open(tmp.path(), None).unwrap();
        let err = d.open_file("1-1-0.topdeck").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Planted);
        assert!(err.to_string().contains("symlink"));
    }

    #[test]
    fn removal_leaves_a_replaced_file_alone() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("a"), b"x").unwrap();
        let d = VerifiedDir::open(tmp.path(), None).unwrap();
        let (_f, st) = d.open_file("a").unwrap();
        fs::remove_file(tmp.path().join("a")).unwrap();
        fs::write(tmp.path().join("b"), b"y").unwrap();
        fs::rename(tmp.path().join("b"), tmp.path().join("a")).unwrap();
        assert!(!d.remove_if_same("a", &st).unwrap());
        assert!(tmp.path().join("a").exists());
    }

    #[test]
    fn user_directory_names_carry_their_uid() {
        assert_eq!(named_uid("topdeck-1000"), Some(1000));
        assert_eq!(named_uid("topdeck-1000.a1b2c3"), Some(1000));
        assert_eq!(named_uid("topdeck-1000."), None);
        assert_eq!(named_uid("topdeck-1000.x/y"), None);
        assert_eq!(named_uid("topdeck-+1"), None);
        assert_eq!(named_uid("topdeck-"), None);
        assert_eq!(named_uid("other-1000"), None);
    }

    #[test]
    fn groups_resolve_by_number_and_name() {
        assert_eq!(group_id(OsStr::new("4242")).unwrap(), 4242);
        assert_eq!(group_id(OsStr::new("root")).unwrap(), 0);
        let err = group_id(OsStr::new("no-such-group-topdeck")).unwrap_err();
        assert!(err.to_string().contains("no such group"), "{err}");
    }
}
