// SPDX-License-Identifier: Apache-2.0
//! The namespace directory: where registry files live, and the checks that
//! keep a hostile user from planting or redirecting them (the lesson of
//! hsperfdata in /tmp).
//!
//! By default each user has `/dev/shm/topdeck-<uid>`; `TOPDECK_DIR`
//! overrides it for writers and readers alike.

use std::fs;
use std::io::ErrorKind as IoKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// Environment variable naming the namespace directory.
pub const ENV_DIR: &str = "TOPDECK_DIR";
/// Suffix of published registry files; anything else in the directory is ignored.
pub const FILE_SUFFIX: &str = ".topdeck";
/// Prefix of files being created; never read, removed by `gc` once stale.
pub const TEMP_PREFIX: &str = ".creating-";
/// Where per-user directories are made.
pub const SHM_ROOT: &str = "/dev/shm";
const USER_DIR_PREFIX: &str = "topdeck-";

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The directory this process writes its registries to.
pub fn writer_dir() -> PathBuf {
    match std::env::var_os(ENV_DIR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(SHM_ROOT).join(format!("{USER_DIR_PREFIX}{}", euid())),
    }
}

/// The directories a reader lists: `TOPDECK_DIR` alone if set, else every
/// user's directory under `/dev/shm`.
pub fn reader_dirs() -> Vec<PathBuf> {
    if let Some(d) = std::env::var_os(ENV_DIR).filter(|d| !d.is_empty()) {
        return vec![PathBuf::from(d)];
    }
    let Ok(entries) = fs::read_dir(SHM_ROOT) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(USER_DIR_PREFIX))
                .is_some_and(|uid| uid.parse::<u32>().is_ok())
        })
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

/// Creates the writer's directory if needed and checks it is safe to write in.
pub(crate) fn prepare_writer_dir(dir: &Path) -> Result<()> {
    match fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == IoKind::AlreadyExists => {}
        Err(e) => {
            return Err(
                Error::io("cannot create the namespace directory", dir, e).with_hint(&format!(
                    "create it, or point {ENV_DIR} at a directory you own"
                )),
            )
        }
    }
    check_dir(dir, Some(euid())).map(drop)
}

/// Checks a namespace directory: a real directory (not a symlink), owned by
/// `owner` (or by the uid its name carries, for `/dev/shm/topdeck-<uid>`),
/// and not writable by group or others. Returns the owner.
pub(crate) fn check_dir(dir: &Path, owner: Option<u32>) -> Result<u32> {
    let meta = fs::symlink_metadata(dir)
        .map_err(|e| Error::io("cannot inspect the namespace directory", dir, e))?;
    let unsafe_dir = |why: String| {
        Err(Error::new(
            ErrorKind::UnsafeDirectory,
            format!(
                "{}: unsafe namespace directory: {why}; remove it (or fix its owner and mode \
                 to 0755) and let topdeck recreate it",
                dir.display()
            ),
        ))
    };
    if meta.file_type().is_symlink() {
        return unsafe_dir("it is a symlink".into());
    }
    if !meta.is_dir() {
        return unsafe_dir("it is not a directory".into());
    }
    let named_owner = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(USER_DIR_PREFIX))
        .and_then(|uid| uid.parse::<u32>().ok())
        .filter(|_| dir.parent() == Some(Path::new(SHM_ROOT)));
    if let Some(expected) = owner.or(named_owner) {
        if meta.uid() != expected {
            return unsafe_dir(format!(
                "owned by uid {}, expected uid {expected}",
                meta.uid()
            ));
        }
    }
    if meta.mode() & 0o022 != 0 {
        return unsafe_dir(format!(
            "mode {:o} lets others write in it",
            meta.mode() & 0o7777
        ));
    }
    Ok(meta.uid())
}

/// Checks that a directory entry is a regular file owned by the directory's
/// owner; anything else was planted by someone else.
pub(crate) fn check_entry(path: &Path, dir_owner: u32) -> Result<fs::Metadata> {
    let meta = fs::symlink_metadata(path).map_err(|e| Error::io("cannot inspect", path, e))?;
    let planted = |why: &str| {
        Err(Error::new(
            ErrorKind::Planted,
            format!(
                "{}: {why}; it was not made by topdeck: remove it and check who can write to the directory",
                path.display()
            ),
        ))
    };
    if meta.file_type().is_symlink() {
        return planted("a symlink where a metrics file belongs");
    }
    if !meta.is_file() {
        return planted("not a regular file");
    }
    if meta.uid() != dir_owner {
        return planted(&format!(
            "owned by uid {}, not by the directory's owner",
            meta.uid()
        ));
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_fresh_directory_is_created_private_to_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("ns");
        prepare_writer_dir(&d).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o755);
        prepare_writer_dir(&d).unwrap();
    }

    #[test]
    fn a_world_writable_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_dir(tmp.path(), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeDirectory);
        assert!(err.to_string().contains("777"), "{err}");
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(
            prepare_writer_dir(&link).unwrap_err().kind(),
            ErrorKind::UnsafeDirectory
        );
    }

    #[test]
    fn a_directory_owned_by_someone_else_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let err = check_dir(tmp.path(), Some(euid() + 1)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeDirectory);
    }

    #[test]
    fn planted_symlinks_are_named_as_such() {
        let tmp = tempfile::tempdir().unwrap();
        let link = tmp.path().join("1-1-0.topdeck");
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        let err = check_entry(&link, euid()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Planted);
        assert!(err.to_string().contains("symlink"));
    }
}
