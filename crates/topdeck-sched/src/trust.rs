// SPDX-License-Identifier: Apache-2.0
//! Whether a registry named `topdeck-agent` is the real agent's.
//!
//! A registry's name is whatever its writer chose, and every user can
//! publish in their own `/dev/shm/topdeck-<uid>`: the name alone proves
//! nothing. Readers that show the agent's figures and verdicts
//! (`topdeck sched`, `topdeck top`) first ask [`verify_agent`], which
//! trusts a registry only when all of these hold:
//!
//! 1. the file is a regular file (not a symlink) owned by a trusted uid;
//! 2. its directory is a real directory (lstat, not a symlink) owned by that
//!    same uid and not writable by group or others, so nobody else could
//!    have put the file there or swapped it since;
//! 3. every directory above it (after resolving symlinks) is owned by a
//!    trusted uid and either not writable by others or sticky (`/dev/shm`,
//!    `/tmp`), so nobody else can rename the directory away and put their
//!    own in its place;
//! 4. while the registry is alive, its writer (`pid` in the header) is a
//!    running process whose effective uid is that same uid and whose start
//!    time (field 22 of `/proc/<pid>/stat`) is the one in the header, so the
//!    pid was not reused by another process.
//!
//! The trusted uids are root and the uid of the reader itself. Root is who
//! runs the agent. The reader's own uid is trusted because a registry that
//! only that user (or root) could have written cannot deceive that user:
//! whoever made it could already act as them. This also lets a non-root
//! user, and the test suites, run `topdeck sched` and `topdeck top` against
//! registries they publish themselves. Root's reader trusts root alone, so
//! a spoof by any other user never reaches root's screen. When both a
//! root-owned and a self-owned agent run, readers prefer root's.
//!
//! A dead registry (no writer holds its lock) is judged on its file and
//! directories alone: its writer is gone and cannot be asked, and rules
//! 1-3 already say that only a trusted uid wrote it.
//!
//! Limits: the writer's pid is read in the reader's pid namespace, so a
//! reader in another pid namespace than the agent (a container) cannot
//! verify it and treats it as untrusted; the same goes for a procfs mounted
//! with `hidepid` that hides root's processes from an unprivileged reader.
//!
//! A registry as a recording kept it (`topdeck record`, read back by
//! `top --at` and `sched --at`) cannot be inspected any more: its file
//! may be gone and its writer ended. [`judge_recorded`] applies what the
//! recording still shows: rule 1 on the owner the kernel reported when it
//! was recorded (the listing that found it had already checked rule 2:
//! a file in a `topdeck-<uid>` directory must belong to that directory's
//! owner), and, for a live writer, that it was named. Rules 3 and 4 were
//! not recorded; a store is written only by the recorder, into a
//! directory of its own.
//!
//! The decision, [`judge`], is a pure function of [`Facts`]; [`Facts::of`]
//! gathers them from lstat and procfs. Rule 4 is [`topdeck_procfs::writer::judge`],
//! the check every reader applies to a file's writer.

use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use topdeck::{Liveness, RegistryEntry};
use topdeck_procfs::table::Table;
use topdeck_procfs::writer::{self, Start, Verdict};

/// What a path is, as lstat sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// Anything else: a socket, a fifo, a device.
    Other,
}

/// Owner, mode and kind of one path, not following a final symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// Owner uid.
    pub uid: u32,
    /// Permission bits, with setuid, setgid and sticky (`st_mode & 0o7777`).
    pub mode: u32,
}

impl Node {
    /// lstat of `path`.
    pub fn lstat(path: &Path) -> std::io::Result<Self> {
        let m = fs::symlink_metadata(path)?;
        let t = m.file_type();
        let kind = if t.is_symlink() {
            Kind::Symlink
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        Ok(Self {
            kind,
            uid: m.uid(),
            mode: m.mode() & 0o7777,
        })
    }

    fn writable_by_others(&self) -> bool {
        self.mode & 0o022 != 0
    }

    fn sticky(&self) -> bool {
        self.mode & 0o1000 != 0
    }
}

/// The registry's writer as procfs describes it now: its effective uid
/// and start ticks.
pub use topdeck_procfs::writer::Process;

/// Everything [`judge`] decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The registry file.
    pub path: PathBuf,
    /// The file; `None` when it could not be inspected (it went away).
    pub file: Option<Node>,
    /// Its directory.
    pub dir: PathBuf,
    /// The directory; `None` when it could not be inspected.
    pub dir_node: Option<Node>,
    /// The directories above it, symlinks resolved; `None` when they could
    /// not be resolved.
    pub ancestors: Option<Vec<(PathBuf, Node)>>,
    /// Whether a writer holds the registry's lock.
    pub alive: bool,
    /// Writer's pid, from the header.
    pub pid: u32,
    /// Writer's start time, from the header.
    pub start_ticks: u64,
    /// What procfs says about `pid` now; `None` when there is no such process
    /// (or it is hidden from this reader).
    pub process: Option<Process>,
}

/// Why a registry named `topdeck-agent` is not trusted as the agent's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The file or its directory could not be inspected.
    Vanished(PathBuf),
    /// The file is a symlink or not a regular file.
    NotAFile,
    /// The file belongs to an untrusted uid.
    FileOwner(u32),
    /// The directory is a symlink.
    DirSymlink(PathBuf),
    /// The directory is not a directory.
    DirNotADir(PathBuf),
    /// The directory's owner is not the file's.
    DirOwner(PathBuf, u32),
    /// Group or others may write in the directory.
    DirWritable(PathBuf, u32),
    /// A directory above could be changed by an untrusted uid.
    Ancestor(PathBuf, Node),
    /// The directories above could not be resolved.
    AncestorsUnknown(PathBuf),
    /// No process `pid` is visible.
    WriterGone(u32),
    /// The writer runs as another uid than the file's owner.
    WriterUid(u32, u32),
    /// Process `pid` is not the one that wrote the file (its start time differs).
    WriterReplaced(u32),
    /// A recording did not keep what the decision needs (its owner, its
    /// writer).
    Unrecorded(&'static str),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Vanished(p) => write!(f, "{} cannot be inspected", p.display()),
            Reason::NotAFile => f.write_str("is not a regular file"),
            Reason::FileOwner(uid) => write!(f, "owned by uid {uid}"),
            Reason::DirSymlink(d) => write!(f, "its directory {} is a symlink", d.display()),
            Reason::DirNotADir(d) => write!(f, "{} is not a directory", d.display()),
            Reason::DirOwner(d, uid) => write!(
                f,
                "its directory {} is owned by uid {uid}, not by the file's owner",
                d.display()
            ),
            Reason::DirWritable(d, mode) => write!(
                f,
                "its directory {} has mode {mode:o}, so others could have put it there",
                d.display()
            ),
            Reason::Ancestor(d, n) => write!(
                f,
                "{} above its directory is owned by uid {} with mode {:o}, so others could swap the directory",
                d.display(),
                n.uid,
                n.mode
            ),
            Reason::AncestorsUnknown(d) => {
                write!(f, "the directories above {} cannot be resolved", d.display())
            }
            Reason::WriterGone(pid) => write!(f, "its writer, pid {pid}, is not running here"),
            Reason::WriterUid(pid, uid) => {
                write!(f, "its writer, pid {pid}, runs as uid {uid}")
            }
            Reason::WriterReplaced(pid) => write!(
                f,
                "pid {pid} is not the process that wrote it (its start time differs)"
            ),
            Reason::Unrecorded(what) => write!(f, "its {what} was not recorded"),
        }
    }
}

/// A registry named `topdeck-agent` that is not the agent's, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Untrusted {
    /// The registry file.
    pub path: PathBuf,
    /// Why it is not trusted.
    pub reason: Reason,
    /// The uid of the reader that judged it (its own registries are trusted).
    pub reader_uid: u32,
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "registry {}: named {} but {}; only root's agent{} is trusted",
            self.path.display(),
            crate::REGISTRY_NAME,
            self.reason,
            if self.reader_uid == 0 {
                ""
            } else {
                ", or one you run yourself,"
            }
        )
    }
}

impl Serialize for Untrusted {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A registry that passed: who owns it (root, or the reader itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trusted {
    /// Owner of the file, its directory and its writer.
    pub owner: u32,
}

/// The uid readers run as.
pub fn reader_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Decides whether the registry described by `facts` is trusted by a reader
/// running as `reader_uid`. Checks run from the file outwards, so the
/// reason given is the first thing wrong as one looks at the file.
pub fn judge(facts: &Facts, reader_uid: u32) -> Result<Trusted, Untrusted> {
    let no = |reason| {
        Err(Untrusted {
            path: facts.path.clone(),
            reason,
            reader_uid,
        })
    };
    let trusted = |uid: u32| uid == 0 || uid == reader_uid;
    let Some(file) = facts.file else {
        return no(Reason::Vanished(facts.path.clone()));
    };
    if file.kind != Kind::File {
        return no(Reason::NotAFile);
    }
    if !trusted(file.uid) {
        return no(Reason::FileOwner(file.uid));
    }
    let owner = file.uid;
    let Some(dir) = facts.dir_node else {
        return no(Reason::Vanished(facts.dir.clone()));
    };
    match dir.kind {
        Kind::Dir => {}
        Kind::Symlink => return no(Reason::DirSymlink(facts.dir.clone())),
        _ => return no(Reason::DirNotADir(facts.dir.clone())),
    }
    if dir.uid != owner {
        return no(Reason::DirOwner(facts.dir.clone(), dir.uid));
    }
    if dir.writable_by_others() {
        return no(Reason::DirWritable(facts.dir.clone(), dir.mode));
    }
    let Some(ancestors) = &facts.ancestors else {
        return no(Reason::AncestorsUnknown(facts.dir.clone()));
    };
    for (path, node) in ancestors {
        if !trusted(node.uid) || (node.writable_by_others() && !node.sticky()) {
            return no(Reason::Ancestor(path.clone(), *node));
        }
    }
    if facts.alive {
        // Rule 4, as every reader judges a file's writer.
        let start = Start::Ticks(facts.start_ticks);
        match writer::judge(facts.process, Some(owner), start, None) {
            Verdict::Could => {}
            Verdict::OtherUser { euid } => return no(Reason::WriterUid(facts.pid, euid)),
            Verdict::Reused { .. } => return no(Reason::WriterReplaced(facts.pid)),
            Verdict::Gone | Verdict::Unknown(_) => return no(Reason::WriterGone(facts.pid)),
        }
    }
    Ok(Trusted { owner })
}

/// What a recording kept of a registry named `topdeck-agent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The registry file, as recorded.
    pub path: PathBuf,
    /// Its owner, as the kernel reported it then.
    pub uid: Option<u32>,
    /// Its writer's pid then.
    pub pid: Option<u32>,
    /// Whether a writer held it then.
    pub alive: bool,
}

/// Decides whether the recorded registry `r` was the agent's, for a
/// reader running as `reader_uid`: its owner trusted (root, or the
/// reader), and a live one's writer named (see the module documentation
/// for what a recording cannot show).
pub fn judge_recorded(r: &Recorded, reader_uid: u32) -> Result<Trusted, Untrusted> {
    let no = |reason| {
        Err(Untrusted {
            path: r.path.clone(),
            reason,
            reader_uid,
        })
    };
    let Some(owner) = r.uid else {
        return no(Reason::Unrecorded("owner"));
    };
    if owner != 0 && owner != reader_uid {
        return no(Reason::FileOwner(owner));
    }
    if r.alive && r.pid.is_none_or(|p| p == 0) {
        return no(Reason::Unrecorded("writer"));
    }
    Ok(Trusted { owner })
}

/// Every directory above `dir`, symlinks resolved, nearest first.
fn ancestors(dir: &Path) -> Option<Vec<(PathBuf, Node)>> {
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty())?;
    let real = fs::canonicalize(parent).ok()?;
    real.ancestors()
        .map(|a| Node::lstat(a).ok().map(|n| (a.to_path_buf(), n)))
        .collect()
}

impl Facts {
    /// Gathers the facts about `entry` from lstat and procfs.
    pub fn of(entry: &RegistryEntry) -> Self {
        let dir = entry
            .path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let alive = entry.liveness == Liveness::Alive;
        Self {
            file: Node::lstat(&entry.path).ok(),
            dir_node: Node::lstat(&dir).ok(),
            ancestors: ancestors(&dir),
            alive,
            pid: entry.pid,
            start_ticks: entry.start_ticks,
            process: if alive {
                Process::read(&Table::default(), entry.pid)
            } else {
                None
            },
            path: entry.path.clone(),
            dir,
        }
    }
}

/// Whether `entry`, a registry named `topdeck-agent`, is the real agent's
/// (see the module documentation for the rule).
pub fn verify_agent(entry: &RegistryEntry) -> Result<Trusted, Untrusted> {
    judge(&Facts::of(entry), reader_uid())
}

/// The live `topdeck-agent` registries among `entries`, split into the one
/// to read (root's before the reader's own, newest first) and those not
/// trusted. Registries of other names are left out.
pub fn pick_agent(entries: &[RegistryEntry]) -> (Option<&RegistryEntry>, Vec<Untrusted>) {
    let mut trusted = Vec::new();
    let mut untrusted = Vec::new();
    for e in entries
        .iter()
        .filter(|e| e.registry_name == crate::REGISTRY_NAME && e.liveness == Liveness::Alive)
    {
        match verify_agent(e) {
            Ok(t) => trusted.push((t.owner != 0, std::cmp::Reverse(e.created_unix_ns), e)),
            Err(u) => untrusted.push(u),
        }
    }
    trusted.sort_by_key(|(not_root, newest, _)| (*not_root, *newest));
    (trusted.first().map(|(_, _, e)| *e), untrusted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: u32 = 0;
    const BOB: u32 = 1001;
    const ALICE: u32 = 1002;

    fn node(kind: Kind, uid: u32, mode: u32) -> Node {
        Node { kind, uid, mode }
    }

    /// The real agent: root's file in root's 0700 directory under /dev/shm,
    /// written by a live root process with the header's start time.
    fn agent() -> Facts {
        Facts {
            path: "/dev/shm/topdeck-0/7-1-1.topdeck".into(),
            file: Some(node(Kind::File, ROOT, 0o644)),
            dir: "/dev/shm/topdeck-0".into(),
            dir_node: Some(node(Kind::Dir, ROOT, 0o755)),
            ancestors: Some(vec![
                ("/dev/shm".into(), node(Kind::Dir, ROOT, 0o1777)),
                ("/dev".into(), node(Kind::Dir, ROOT, 0o755)),
                ("/".into(), node(Kind::Dir, ROOT, 0o755)),
            ]),
            alive: true,
            pid: 7,
            start_ticks: 1234,
            process: Some(Process {
                euid: ROOT,
                start_ticks: 1234,
            }),
        }
    }

    /// Bob's registry named topdeck-agent in his own directory.
    fn bobs() -> Facts {
        let mut f = agent();
        f.path = "/dev/shm/topdeck-1001/9-1-1.topdeck".into();
        f.dir = "/dev/shm/topdeck-1001".into();
        f.file = Some(node(Kind::File, BOB, 0o644));
        f.dir_node = Some(node(Kind::Dir, BOB, 0o755));
        f.process = Some(Process {
            euid: BOB,
            start_ticks: 1234,
        });
        f
    }

    #[test]
    fn the_decision_table() {
        type Case = (&'static str, fn(&mut Facts), u32, Option<Reason>);
        let cases: Vec<Case> = vec![
            ("the real agent, read by root", |_| {}, ROOT, None),
            ("the real agent, read by a user", |_| {}, ALICE, None),
            (
                "a dead agent's file is judged on files alone",
                |f| {
                    f.alive = false;
                    f.process = None;
                },
                ROOT,
                None,
            ),
            (
                "a vanished file",
                |f| f.file = None,
                ROOT,
                Some(Reason::Vanished("/dev/shm/topdeck-0/7-1-1.topdeck".into())),
            ),
            (
                "a symlink where the file is",
                |f| f.file = Some(node(Kind::Symlink, ROOT, 0o777)),
                ROOT,
                Some(Reason::NotAFile),
            ),
            (
                "a fifo",
                |f| f.file = Some(node(Kind::Other, ROOT, 0o644)),
                ROOT,
                Some(Reason::NotAFile),
            ),
            (
                "a file of bob's",
                |f| f.file = Some(node(Kind::File, BOB, 0o644)),
                ROOT,
                Some(Reason::FileOwner(BOB)),
            ),
            (
                "root's file in bob's directory",
                |f| f.dir_node = Some(node(Kind::Dir, BOB, 0o755)),
                ROOT,
                Some(Reason::DirOwner("/dev/shm/topdeck-0".into(), BOB)),
            ),
            (
                "a group-writable directory",
                |f| f.dir_node = Some(node(Kind::Dir, ROOT, 0o775)),
                ROOT,
                Some(Reason::DirWritable("/dev/shm/topdeck-0".into(), 0o775)),
            ),
            (
                "a world-writable sticky directory",
                |f| f.dir_node = Some(node(Kind::Dir, ROOT, 0o1777)),
                ROOT,
                Some(Reason::DirWritable("/dev/shm/topdeck-0".into(), 0o1777)),
            ),
            (
                "a symlinked directory",
                |f| f.dir_node = Some(node(Kind::Symlink, ROOT, 0o777)),
                ROOT,
                Some(Reason::DirSymlink("/dev/shm/topdeck-0".into())),
            ),
            (
                "a file where the directory is",
                |f| f.dir_node = Some(node(Kind::File, ROOT, 0o755)),
                ROOT,
                Some(Reason::DirNotADir("/dev/shm/topdeck-0".into())),
            ),
            (
                "a vanished directory",
                |f| f.dir_node = None,
                ROOT,
                Some(Reason::Vanished("/dev/shm/topdeck-0".into())),
            ),
            (
                "an ancestor of bob's",
                |f| {
                    f.ancestors = Some(vec![
                        ("/home/bob".into(), node(Kind::Dir, BOB, 0o755)),
                        ("/".into(), node(Kind::Dir, ROOT, 0o755)),
                    ])
                },
                ROOT,
                Some(Reason::Ancestor(
                    "/home/bob".into(),
                    node(Kind::Dir, BOB, 0o755),
                )),
            ),
            (
                "a world-writable ancestor without the sticky bit",
                |f| f.ancestors = Some(vec![("/srv/drop".into(), node(Kind::Dir, ROOT, 0o777))]),
                ROOT,
                Some(Reason::Ancestor(
                    "/srv/drop".into(),
                    node(Kind::Dir, ROOT, 0o777),
                )),
            ),
            (
                "unresolvable ancestors",
                |f| f.ancestors = None,
                ROOT,
                Some(Reason::AncestorsUnknown("/dev/shm/topdeck-0".into())),
            ),
            (
                "a live registry whose writer is gone",
                |f| f.process = None,
                ROOT,
                Some(Reason::WriterGone(7)),
            ),
            (
                "a writer that runs as bob",
                |f| {
                    f.process = Some(Process {
                        euid: BOB,
                        start_ticks: 1234,
                    })
                },
                ROOT,
                Some(Reason::WriterUid(7, BOB)),
            ),
            (
                "a reused pid",
                |f| {
                    f.process = Some(Process {
                        euid: ROOT,
                        start_ticks: 99,
                    })
                },
                ROOT,
                Some(Reason::WriterReplaced(7)),
            ),
            (
                "bob's spoof, read by root",
                |f| *f = bobs(),
                ROOT,
                Some(Reason::FileOwner(BOB)),
            ),
            (
                "bob's spoof, read by alice",
                |f| *f = bobs(),
                ALICE,
                Some(Reason::FileOwner(BOB)),
            ),
            (
                "bob's own registry, read by bob",
                |f| *f = bobs(),
                BOB,
                None,
            ),
            (
                "bob's file, written by a root process, read by bob",
                |f| {
                    *f = bobs();
                    f.process = Some(Process {
                        euid: ROOT,
                        start_ticks: 1234,
                    });
                },
                BOB,
                Some(Reason::WriterUid(7, ROOT)),
            ),
        ];
        for (what, change, reader, want) in cases {
            let mut f = agent();
            change(&mut f);
            let got = judge(&f, reader);
            match want {
                None => assert!(got.is_ok(), "{what}: {got:?}"),
                Some(reason) => assert_eq!(got.unwrap_err().reason, reason, "{what}"),
            }
        }
    }

    #[test]
    fn a_recorded_registry_is_judged_on_its_recorded_owner_and_writer() {
        let r = |uid, pid, alive| Recorded {
            path: "/dev/shm/topdeck-1001/9-1-1.topdeck".into(),
            uid,
            pid,
            alive,
        };
        let reason = |r: &Recorded, reader| judge_recorded(r, reader).map_err(|u| u.reason);
        assert_eq!(
            reason(&r(Some(ROOT), Some(7), true), BOB),
            Ok(Trusted { owner: ROOT })
        );
        assert_eq!(
            reason(&r(Some(BOB), Some(9), true), BOB),
            Ok(Trusted { owner: BOB }),
            "the reader's own"
        );
        assert_eq!(
            reason(&r(Some(BOB), Some(9), true), ROOT),
            Err(Reason::FileOwner(BOB)),
            "Bob's poses as the agent to root"
        );
        assert_eq!(
            reason(&r(Some(BOB), Some(9), true), ALICE),
            Err(Reason::FileOwner(BOB))
        );
        assert_eq!(
            reason(&r(None, Some(7), true), ROOT),
            Err(Reason::Unrecorded("owner"))
        );
        assert_eq!(
            reason(&r(Some(ROOT), None, true), ROOT),
            Err(Reason::Unrecorded("writer"))
        );
        assert_eq!(
            reason(&r(Some(ROOT), None, false), ROOT),
            Ok(Trusted { owner: ROOT }),
            "a dead one's writer is gone anyway"
        );
        let u = judge_recorded(&r(Some(BOB), Some(9), true), ROOT).unwrap_err();
        assert!(u.to_string().contains("owned by uid 1001"), "{u}");
    }

    #[test]
    fn the_owner_that_passed_is_reported() {
        assert_eq!(judge(&agent(), ALICE), Ok(Trusted { owner: ROOT }));
        assert_eq!(judge(&bobs(), BOB), Ok(Trusted { owner: BOB }));
    }

    #[test]
    fn an_untrusted_registry_is_one_sentence_naming_file_and_owner() {
        let u = judge(&bobs(), ROOT).unwrap_err();
        assert_eq!(
            u.to_string(),
            "registry /dev/shm/topdeck-1001/9-1-1.topdeck: named topdeck-agent but owned by \
             uid 1001; only root's agent is trusted"
        );
        let u = judge(&bobs(), ALICE).unwrap_err();
        assert!(
            u.to_string()
                .ends_with("only root's agent, or one you run yourself, is trusted"),
            "{u}"
        );
    }

    #[test]
    fn this_process_is_its_own_writer() {
        let process = |pid| Process::read(&Table::default(), pid);
        let me = process(std::process::id()).unwrap();
        assert_eq!(me.euid, reader_uid());
        assert!(me.start_ticks > 0);
        assert_eq!(process(0), None);
        assert_eq!(process(u32::MAX), None);
    }

    #[test]
    fn a_registry_of_this_process_in_a_private_directory_is_trusted_and_preferred() {
        let dir = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(dir.path())
            .name(crate::REGISTRY_NAME)
            .build()
            .unwrap();
        let other = topdeck::Registry::builder()
            .dir(dir.path())
            .name("not-the-agent")
            .build()
            .unwrap();
        let listing = topdeck::Namespace::at(dir.path()).list();
        let e = listing
            .entries
            .iter()
            .find(|e| e.registry_name == crate::REGISTRY_NAME)
            .unwrap();
        assert_eq!(
            verify_agent(e),
            Ok(Trusted {
                owner: reader_uid()
            })
        );
        let (picked, untrusted) = pick_agent(&listing.entries);
        assert_eq!(picked.map(|e| &e.path), Some(&r.path().to_path_buf()));
        assert!(untrusted.is_empty());
        drop((r, other));
    }

    #[test]
    fn a_group_writable_directory_makes_the_registry_untrusted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let r = topdeck::Registry::builder()
            .dir(dir.path())
            .name(crate::REGISTRY_NAME)
            .build()
            .unwrap();
        let e = topdeck::Namespace::at(dir.path()).list().entries.remove(0);
        // Made writable after the listing: a reader must look again, not
        // rely on what the listing checked.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o775)).unwrap();
        let u = verify_agent(&e).unwrap_err();
        assert!(matches!(u.reason, Reason::DirWritable(_, 0o775)), "{u}");
        drop(r);
    }
}
