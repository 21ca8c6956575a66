// SPDX-License-Identifier: Apache-2.0
//! Why the agent cannot publish in its namespace directory, said so that
//! root can act on it.
//!
//! The library refuses a directory that another user owns, that others can
//! write in, or that is a symlink: whoever controls it could read, replace
//! or redirect the agent's files. For `/dev/shm/topdeck-0`, any user can
//! create it before root's first writer does (`/dev/shm` is world-writable).
//! The agent must then stop and name the directory and its owner, not fall
//! back as though eBPF were missing; and since topdeck did not make such a
//! directory, the advice is to look at it and who made it before removing
//! anything.
//!
//! [`diagnose`] is the pure decision (what lstat said in, problem out);
//! [`registry_error`] reads the facts and turns a registry failure into an
//! [`ErrorKind::Namespace`] error when the directory is at fault.

use std::ffi::CStr;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind};
use crate::trust::{Kind, Node};

/// What is wrong with a namespace directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirProblem {
    /// It is a symlink, owned by `uid`.
    Symlink {
        /// Owner of the link.
        uid: u32,
    },
    /// Something other than a directory, owned by `uid`, is in its place.
    NotADirectory {
        /// Owner of what is there.
        uid: u32,
    },
    /// It belongs to `uid`, not to the agent's user.
    Owner {
        /// Its owner.
        uid: u32,
    },
    /// Group or others may write in it.
    Writable {
        /// Its permission bits.
        mode: u32,
    },
    /// It does not exist and could not be made: `why`.
    Uncreatable {
        /// What the library said.
        why: String,
    },
    /// It cannot be looked at by the agent's user (a directory above it
    /// is closed to them): `why`.
    Unreachable {
        /// The error of lstat.
        why: String,
    },
}

/// The problem with the directory, from its lstat (`Err(NotFound)` when
/// it does not exist) and the uid the agent runs as; `None` when the
/// directory itself is fine and the failure lies elsewhere.
/// `library` is the registry error's message, kept for a missing directory.
pub fn diagnose(node: &io::Result<Node>, agent_uid: u32, library: &str) -> Option<DirProblem> {
    let n = match node {
        Ok(n) => *n,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Some(DirProblem::Uncreatable {
                why: library.to_owned(),
            })
        }
        Err(e) => return Some(DirProblem::Unreachable { why: e.to_string() }),
    };
    match n.kind {
        Kind::Symlink => Some(DirProblem::Symlink { uid: n.uid }),
        Kind::File | Kind::Other => Some(DirProblem::NotADirectory { uid: n.uid }),
        Kind::Dir if n.uid != agent_uid => Some(DirProblem::Owner { uid: n.uid }),
        Kind::Dir if n.mode & 0o022 != 0 => Some(DirProblem::Writable { mode: n.mode }),
        Kind::Dir => None,
    }
}

/// `uid 65534 (nobody)`, or `uid 65534` when the user database has no name.
pub fn who(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain old data; getpwuid_r fills it.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and buf's length is passed.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points at a NUL-terminated string in buf.
    let name = unsafe { CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// What root reads: the directory, what is wrong, and what to look at.
/// Never says to remove it: topdeck did not make a directory in this
/// state, and only whoever finds out who did can decide.
pub fn advice(dir: &Path, problem: &DirProblem, agent_uid: u32) -> String {
    let d = dir.display();
    let me = who(agent_uid);
    let elsewhere = format!(
        "Or run the agent with TOPDECK_DIR set to a directory {me} owns, mode 0700 \
         (its readers then need the same TOPDECK_DIR)"
    );
    match problem {
        DirProblem::Owner { uid } => format!(
            "the agent's namespace directory {d} is owned by {}, not by {me} who runs the agent, \
             so the agent will not publish there (its owner could replace or read the agent's \
             files). topdeck makes this directory itself, owned by the agent's user; this one \
             was made by someone else, or is left over from an earlier setup.\n\
             Check who made it and what is in it first: ls -la -- {d}\n\
             {elsewhere}",
            who(*uid)
        ),
        DirProblem::Writable { mode } => format!(
            "the agent's namespace directory {d} has mode {mode:o}, so other users can write \
             in it and could plant or replace the agent's files; the agent will not publish \
             there.\n\
             Check what is in it and who put it there: ls -la -- {d}\n\
             Then let only its owner write in it and start the agent again: chmod go-w -- {d}\n\
             {elsewhere}"
        ),
        DirProblem::Symlink { uid } => format!(
            "the agent's namespace directory {d} is a symlink made by {}; the agent does not \
             publish through a link, whose maker chooses where the agent's files go.\n\
             Check where it points and who made it: ls -l -- {d}\n\
             {elsewhere}",
            who(*uid)
        ),
        DirProblem::NotADirectory { uid } => format!(
            "where the agent's namespace directory {d} belongs there is something else, owned \
             by {}; the agent will not publish there.\n\
             Check what it is and who made it: ls -l -- {d}\n\
             {elsewhere}",
            who(*uid)
        ),
        DirProblem::Unreachable { why } => format!(
            "the agent's namespace directory {d} cannot be reached by {me} ({why}).\n\
             Check who may enter the directories above it: namei -l -- {d}\n\
             {elsewhere}"
        ),
        DirProblem::Uncreatable { why } => format!(
            "the agent's namespace directory {d} does not exist and cannot be made ({why}).\n\
             Make it as {me}, mode 0700: mkdir -m 0700 -- {d}\n\
             {elsewhere}"
        ),
    }
}

/// The namespace directory a registry would be created in: `dir` if
/// given, else what the library uses (`TOPDECK_DIR`, else the user's own).
pub fn namespace_dir(dir: Option<&Path>) -> PathBuf {
    dir.map_or_else(topdeck::dir::writer_dir, Path::to_path_buf)
}

/// The error for a failure to create the agent's registry in `dir`
/// (`what` says what was being done): [`ErrorKind::Namespace`] with
/// [`advice`] when the directory is at fault, else [`ErrorKind::Registry`].
pub fn registry_error(dir: Option<&Path>, what: &str, e: topdeck::Error) -> Error {
    let suspect = matches!(
        e.kind(),
        topdeck::ErrorKind::UnsafeDirectory | topdeck::ErrorKind::Io
    );
    if suspect {
        let dir = namespace_dir(dir);
        let me = crate::trust::reader_uid();
        if let Some(p) = diagnose(&Node::lstat(&dir), me, e.message()) {
            // The library's own advice ("remove it") is left out on
            // purpose: it is right for a directory topdeck made, and this
            // one it did not.
            return Error::new(
                ErrorKind::Namespace,
                format!("{what}: {}", advice(&dir, &p, me)),
            );
        }
    }
    Error::with_source(ErrorKind::Registry, what, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(uid: u32, mode: u32) -> io::Result<Node> {
        Ok(Node {
            kind: Kind::Dir,
            uid,
            mode,
        })
    }

    #[test]
    fn the_decision_table() {
        let cases: [(io::Result<Node>, Option<DirProblem>); 8] = [
            (dir(0, 0o755), None),
            (dir(1001, 0o755), Some(DirProblem::Owner { uid: 1001 })),
            (dir(0, 0o777), Some(DirProblem::Writable { mode: 0o777 })),
            (dir(0, 0o1775), Some(DirProblem::Writable { mode: 0o1775 })),
            (
                Ok(Node {
                    kind: Kind::Symlink,
                    uid: 1001,
                    mode: 0o777,
                }),
                Some(DirProblem::Symlink { uid: 1001 }),
            ),
            (
                Ok(Node {
                    kind: Kind::File,
                    uid: 1001,
                    mode: 0o644,
                }),
                Some(DirProblem::NotADirectory { uid: 1001 }),
            ),
            (
                Err(io::ErrorKind::NotFound.into()),
                Some(DirProblem::Uncreatable {
                    why: "no parent".into(),
                }),
            ),
            (
                Err(io::ErrorKind::PermissionDenied.into()),
                Some(DirProblem::Unreachable {
                    why: "permission denied".into(),
                }),
            ),
        ];
        for (node, want) in cases {
            assert_eq!(diagnose(&node, 0, "no parent"), want, "{node:?}");
        }
    }

    #[test]
    fn advice_names_the_directory_and_owner_and_never_says_to_remove_it() {
        let a = advice(
            Path::new("/dev/shm/topdeck-0"),
            &DirProblem::Owner { uid: 65534 },
            0,
        );
        assert!(
            a.contains("/dev/shm/topdeck-0 is owned by uid 65534"),
            "{a}"
        );
        assert!(a.contains("not by uid 0 (root)"), "{a}");
        assert!(a.contains("ls -la -- /dev/shm/topdeck-0"), "{a}");
        assert!(!a.contains("rm ") && !a.contains("remove"), "{a}");
        assert!(!a.contains("eBPF"), "{a}");
        for p in [
            DirProblem::Writable { mode: 0o777 },
            DirProblem::Symlink { uid: 1 },
            DirProblem::NotADirectory { uid: 1 },
            DirProblem::Uncreatable { why: "x".into() },
            DirProblem::Unreachable { why: "x".into() },
        ] {
            let a = advice(Path::new("/d"), &p, 0);
            assert!(!a.contains("rm ") && !a.contains("remove"), "{a}");
        }
    }

    #[test]
    fn a_directory_owned_by_someone_else_is_a_namespace_error() {
        if crate::trust::reader_uid() != 0 {
            eprintln!("skipped: needs root to give a directory to another uid");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("squatted");
        std::fs::create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
        let e = topdeck::Registry::builder()
            .dir(&d)
            .name(crate::REGISTRY_NAME)
            .build()
            .unwrap_err();
        let e = registry_error(Some(&d), "creating the topdeck-agent registry", e);
        assert_eq!(e.kind(), ErrorKind::Namespace);
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    }

    #[test]
    fn other_registry_failures_stay_registry_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(tmp.path())
            .build()
            .unwrap();
        let _a = r.counter("a_total", &[], "A.", "").unwrap();
        let dup = r.counter("a_total", &[], "A.", "").unwrap_err();
        let e = registry_error(Some(tmp.path()), "registering", dup);
        assert_eq!(e.kind(), ErrorKind::Registry);
    }
}
