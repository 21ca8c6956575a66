// SPDX-License-Identifier: Apache-2.0
//! A hostile local user against root's readers, with real users made by the
//! tests (`useradd`, removed afterwards) and real processes running as them
//! (`setpriv`). Each attack of docs/SECURITY.md is tried as a user would:
//! the attacker swaps its own directory for symlinks to other users' in a
//! loop while root lists, reads and collects; locks other users' dead
//! files; squats their directories; fills its own. Each must fail, and the
//! victim's data, liveness and visibility stay intact. Needs root (CI runs
//! as root); without it each test says so and skips.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use topdeck::dir::{user_dir, ENV_DIR, ENV_GROUP, SHM_ROOT};
use topdeck::{ErrorKind, Liveness, Namespace, Registry, RegistryReader, Value};
use topdeck_tests::{is_root, skip, template, Proc, Writer};

use super::writer_bin;

/// How long an attacker swaps its directory while root works.
const SWAP_FOR: Duration = Duration::from_secs(3);

/// Held for the whole of each test: they list and collect the whole host,
/// so one test's dead files would be another's to collect (the container
/// tests take it too: their planted links are errors in a host listing).
pub(super) static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A local user made for one test, with its own group; removed with its
/// processes' leftovers in `/dev/shm` when dropped.
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

impl User {
    /// A new system user (and group) named after the test and `tag`;
    /// `groups` are supplementary groups to join.
    fn create(tag: &str, groups: &[&str]) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("tdh{}-{n}{tag}", std::process::id() % 100_000);
        let mut cmd = Command::new("useradd");
        cmd.args(["--system", "--no-create-home", "--user-group"])
            .args(["--shell", "/usr/sbin/nologin"]);
        if !groups.is_empty() {
            cmd.args(["--groups", &groups.join(",")]);
        }
        let out = cmd.arg(&name).output().expect("run useradd");
        assert!(
            out.status.success(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = |flag: &str| -> u32 {
            let out = Command::new("id")
                .args([flag, &name])
                .output()
                .expect("run id");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("a numeric id")
        };
        Self {
            uid: id("-u"),
            gid: id("-g"),
            name,
        }
    }

    /// `program args...` as this user, with its groups, outside `TOPDECK_DIR`.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            &format!("--reuid={}", self.uid),
            &format!("--regid={}", self.gid),
            "--init-groups",
            "--",
        ])
        .arg(program)
        .args(args)
        .env_remove(ENV_DIR)
        .env_remove(ENV_GROUP);
        cmd
    }

    /// A `td-writer idle` (good_total 42) running as this user in its
    /// default directory.
    fn writer(&self, env: &[(&str, &str)]) -> Writer {
        let mut cmd = self.command(writer_bin(), &["idle"]);
        cmd.envs(env.iter().copied());
        Writer::from_proc(Proc::start("victim writer", cmd))
    }

    /// This user's default directory, made by root as the user would have.
    fn own_dir(&self) -> PathBuf {
        let d = user_dir(self.uid);
        std::fs::create_dir(&d).expect("create the user's directory");
        std::os::unix::fs::chown(&d, Some(self.uid), Some(self.gid)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    /// Writes `bytes` as `name` in `dir`, owned by this user.
    fn plant(&self, dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::os::unix::fs::chown(&path, Some(self.uid), Some(self.gid)).unwrap();
        path
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let prefixes = [
            format!("topdeck-{}", self.uid),
            format!("td-swap-{}-", self.uid),
        ];
        if let Ok(entries) = std::fs::read_dir(SHM_ROOT) {
            for e in entries.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                let ours = n == prefixes[0]
                    || n.starts_with(&format!("{}.", prefixes[0]))
                    || n.starts_with(&prefixes[1]);
                if ours {
                    let p = e.path();
                    if p.is_symlink() || !p.is_dir() {
                        let _ = std::fs::remove_file(&p);
                    } else {
                        let _ = std::fs::remove_dir_all(&p);
                    }
                }
            }
        }
        // Its `hsperfdata_*` directories in /tmp, named after it.
        if let Ok(entries) = std::fs::read_dir("/tmp") {
            for e in entries.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                let theirs = e.metadata().is_ok_and(|m| m.uid() == self.uid);
                if theirs && n.starts_with(&format!("hsperfdata_{}", self.name)) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        // Whatever the user still runs (a lock holder's child, say) would
        // keep userdel from removing it.
        let _ = Command::new("pkill")
            .args(["-KILL", "-U", &self.uid.to_string()])
            .output();
        std::thread::sleep(Duration::from_millis(100));
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

/// The test's turn, an attacker and a victim (who joins the attacker's
/// group if `share`), or `None` (said) without root.
fn users(test: &str, share: bool) -> Option<(MutexGuard<'static, ()>, User, User)> {
    if !is_root() {
        skip(
            test,
            "making users and running processes as them needs root",
        );
        return None;
    }
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let attacker = User::create("a", &[]);
    let groups = if share {
        vec![attacker.name.as_str()]
    } else {
        vec![]
    };
    let victim = User::create("v", &groups);
    Some((turn, attacker, victim))
}

/// The attacker's loop, run as the attacker by [`SwapLoop::start`]: it
/// makes a symlink to each target beside its own directory and exchanges
/// the two names (`renameat2(RENAME_EXCHANGE)`), back and forth, for
/// `TD_SWAP_SECS`, then prints how many swaps it made.
#[test]
#[ignore = "run as another user by `SwapLoop::start`"]
fn swap_loop_helper() {
    let own = PathBuf::from(std::env::var("TD_SWAP_DIR").unwrap());
    let targets: Vec<PathBuf> = std::env::var("TD_SWAP_TARGETS")
        .unwrap()
        .split(',')
        .map(PathBuf::from)
        .collect();
    let secs: f64 = std::env::var("TD_SWAP_SECS").unwrap().parse().unwrap();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let links: Vec<PathBuf> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let l = Path::new(SHM_ROOT).join(format!("td-swap-{uid}-{i}"));
            std::os::unix::fs::symlink(t, &l).unwrap();
            l
        })
        .collect();
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let own_c = c(&own);
    let exchange = |l: &std::ffi::CStr| {
        // SAFETY: both paths are NUL-terminated and outlive the call.
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                own_c.as_ptr(),
                libc::AT_FDCWD,
                l.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    };
    let links_c: Vec<_> = links.iter().map(|l| c(l)).collect();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut swaps = 0u64;
    while Instant::now() < deadline {
        for l in &links_c {
            exchange(l);
            std::thread::yield_now();
            exchange(l);
            swaps += 2;
        }
    }
    println!("swaps {swaps}");
}

/// The attacker's loop running as `user`.
struct SwapLoop(Proc);

impl SwapLoop {
    fn start(user: &User, own: &Path, targets: &[&Path]) -> Self {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = user.command(
            &exe,
            &[
                "--exact",
                "hostile::swap_loop_helper",
                "--ignored",
                "--nocapture",
            ],
        );
        let targets: Vec<String> = targets.iter().map(|t| t.display().to_string()).collect();
        cmd.env("TD_SWAP_DIR", own)
            .env("TD_SWAP_TARGETS", targets.join(","))
            .env("TD_SWAP_SECS", SWAP_FOR.as_secs_f64().to_string());
        Self(Proc::start("swap loop", cmd))
    }

    /// Waits for the loop to end; the number of swaps it made.
    fn finish(mut self) -> u64 {
        let line = self.0.expect("swaps ");
        let status = self.0.wait();
        assert!(
            status.success(),
            "the swap loop failed: {}",
            self.0.stderr()
        );
        line.trim().parse().unwrap()
    }
}

/// A root registry in root's own directory, standing for the root agent's.
fn root_registry(name: &str) -> Registry {
    let r = Registry::builder()
        .dir(user_dir(0))
        .name(name)
        .build()
        .expect("a registry in /dev/shm/topdeck-0");
    r.counter("secret_total", &[], "Root's own.", "")
        .unwrap()
        .add(7);
    r
}

/// The victim's registry is intact: present, alive, with its value.
fn assert_intact(path: &Path, counter: &str, labels: &[(&str, &str)], value: u64) {
    let mut reader = RegistryReader::open(path)
        .unwrap_or_else(|e| panic!("{} is gone or unreadable: {e}", path.display()));
    assert_eq!(reader.liveness(), Liveness::Alive, "{}", path.display());
    let snap = reader.snapshot().unwrap();
    assert_eq!(snap.get(counter, labels), Some(&Value::Counter(value)));
}

/// The victim writer's counter.
const GOOD: (&str, &[(&str, &str)], u64) = ("good_total", &[("kind", "good")], 42);

#[test]
fn gc_through_a_swapped_directory_removes_nobody_elses_file() {
    let Some((_turn, attacker, victim)) = users("gc_through_a_swapped_directory", false) else {
        return;
    };
    let victim_writer = victim.writer(&[]);
    let root = root_registry("hostile-gc-root");
    // Decoys: dead registries in the attacker's own directory named like
    // the victims' files, so a collector that checks one file and unlinks
    // a path the attacker has redirected would remove a victim's.
    let own = attacker.own_dir();
    // Planted through a descriptor of the real directory, which the swaps
    // cannot redirect, so root never writes into a victim's directory.
    let own_fd = std::fs::File::open(&own).unwrap();
    let via_fd = PathBuf::from(format!("/proc/self/fd/{}", own_fd.as_raw_fd()));
    let decoys: Vec<String> = [&victim_writer.path, &root.path().to_owned()]
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    let plant_decoys = || {
        for name in &decoys {
            if !via_fd.join(name).exists() {
                attacker.plant(&via_fd, name, &template().bytes);
            }
        }
    };
    let targets = [
        victim_writer.path.parent().unwrap(),
        root.path().parent().unwrap(),
    ];
    let swapper = SwapLoop::start(&attacker, &own, &targets);
    let (mut runs, mut removed) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < SWAP_FOR {
        plant_decoys();
        let report = Namespace::host().gc();
        removed += report.removed.len();
        for p in &report.removed {
            assert!(
                p.starts_with(&own) && p.parent() == Some(own.as_path()),
                "gc removed {}, outside the attacker's directory",
                p.display()
            );
        }
        runs += 1;
        assert!(
            victim_writer.path.exists(),
            "the victim's file went after {runs} gc runs"
        );
        assert!(
            root.path().exists(),
            "root's file went after {runs} gc runs"
        );
    }
    let swaps = swapper.finish();
    assert!(
        swaps > 100 && runs > 10,
        "{swaps} swaps, {runs} gc runs: the race was not run"
    );
    assert_intact(&victim_writer.path, GOOD.0, GOOD.1, GOOD.2);
    assert_intact(root.path(), "secret_total", &[], 7);
    eprintln!("{runs} gc runs against {swaps} swaps; {removed} decoys removed, no victim's file");
}

#[test]
fn a_swapped_directory_never_lends_its_name_to_another_users_registry() {
    let Some((_turn, attacker, victim)) = users("a_swapped_directory_never_lends", false) else {
        return;
    };
    let victim_writer = victim.writer(&[]);
    let root = root_registry("hostile-read-root");
    let own = attacker.own_dir();
    let swapper = SwapLoop::start(
        &attacker,
        &own,
        &[
            victim_writer.path.parent().unwrap(),
            root.path().parent().unwrap(),
        ],
    );
    let (mut listings, mut seen) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < SWAP_FOR {
        let listing = Namespace::host().list();
        for e in &listing.entries {
            let dir_uid: Option<u32> = e
                .path
                .parent()
                .and_then(|d| d.file_name())
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("topdeck-"))
                .and_then(|u| u.split('.').next())
                .and_then(|u| u.parse().ok());
            assert_eq!(
                Some(e.uid),
                dir_uid,
                "{} (owned by uid {}) listed under another user's directory",
                e.path.display(),
                e.uid
            );
            if e.registry_name == "hostile-read-root" {
                assert_eq!(e.uid, 0);
                // What a reader then reads is the file that was listed.
                let snap = e.open().and_then(|mut r| r.snapshot());
                if let Ok(snap) = snap {
                    assert_eq!(snap.get("secret_total", &[]), Some(&Value::Counter(7)));
                }
            }
            seen += 1;
        }
        listings += 1;
    }
    let swaps = swapper.finish();
    assert!(
        swaps > 100 && listings > 10,
        "{swaps} swaps, {listings} listings"
    );
    assert!(seen > 0);
    assert_intact(&victim_writer.path, GOOD.0, GOOD.1, GOOD.2);
    eprintln!("{listings} listings against {swaps} swaps, each entry under its owner's directory");
}

#[test]
fn registries_are_private_to_their_owner_by_default() {
    let Some((_turn, attacker, victim)) = users("registries_are_private", false) else {
        return;
    };
    let victim_writer = victim.writer(&[]);
    let dir = victim_writer.path.parent().unwrap();
    assert_eq!(std::fs::metadata(dir).unwrap().mode() & 0o777, 0o700);
    assert_eq!(
        std::fs::metadata(&victim_writer.path).unwrap().mode() & 0o777,
        0o600
    );
    // The attacker can neither read the file nor list the directory.
    for (program, target) in [("/bin/cat", victim_writer.path.as_path()), ("/bin/ls", dir)] {
        let mut p = Proc::start(
            "attacker's look",
            attacker.command(Path::new(program), &[target.to_str().unwrap()]),
        );
        p.close_stdin();
        let out = p.finish();
        assert!(
            !out.status.success(),
            "{program} {}: {}",
            target.display(),
            out.stdout
        );
        assert!(out.stderr.contains("Permission denied"), "{}", out.stderr);
    }
    // Root sees the victim's registry, with the victim's uid.
    let listing = Namespace::host().list();
    let e = listing
        .entries
        .iter()
        .find(|e| e.path == victim_writer.path)
        .expect("root lists the victim's registry");
    assert_eq!(e.uid, victim.uid);
}

#[test]
fn another_users_lock_does_not_keep_a_dead_file_alive() {
    // The victim shares its registries with the attacker's group, so the
    // attacker can open (and lock) them.
    let Some((_turn, attacker_only, victim)) = users("another_users_lock", true) else {
        return;
    };
    let mut victim_writer = victim.writer(&[(ENV_GROUP, &attacker_only.name)]);
    let path = victim_writer.path.clone();
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o640);
    assert_eq!(std::fs::metadata(&path).unwrap().gid(), attacker_only.gid);
    victim_writer.proc.kill();
    // The attacker holds an exclusive and then a shared lock on the dead
    // file, as long as it likes: one process holding it until killed (a
    // `flock -c` child would keep the first lock past the kill, and the
    // second would wait for it).
    const HOLD: &str = "import fcntl, sys\n\
        f = open(sys.argv[2])\n\
        fcntl.flock(f, getattr(fcntl, sys.argv[1]))\n\
        print('locked', flush=True)\n\
        sys.stdin.read()\n";
    for lock in ["LOCK_EX", "LOCK_SH"] {
        let mut holder = Proc::start(
            "attacker's lock",
            attacker_only.command(
                Path::new("/usr/bin/python3"),
                &["-c", HOLD, lock, path.to_str().unwrap()],
            ),
        );
        holder.expect("locked");
        let listing = Namespace::host().list();
        let e = listing
            .entries
            .iter()
            .find(|e| e.path == path)
            .expect("listed");
        assert_eq!(
            e.liveness,
            Liveness::Dead,
            "the attacker's {lock} lock faked a live writer"
        );
        if lock == "LOCK_SH" {
            let report = Namespace::host().gc();
            assert!(report.removed.contains(&path), "{:?}", report);
        }
        holder.kill();
    }
    assert!(!path.exists());
}

#[test]
fn a_squatted_directory_sends_its_owner_to_a_private_fallback_that_root_still_reads() {
    let Some((_turn, attacker, victim)) = users("a_squatted_directory", false) else {
        return;
    };
    // The attacker makes the victim's directory before the victim's first writer.
    let squatted = user_dir(victim.uid);
    let mut mk = Proc::start(
        "squatter",
        attacker.command(
            Path::new("/bin/mkdir"),
            &["-m", "0755", squatted.to_str().unwrap()],
        ),
    );
    mk.close_stdin();
    assert!(mk.wait().success());
    let mut victim_writer = victim.writer(&[]);
    let fallback = victim_writer.path.parent().unwrap().to_owned();
    assert_ne!(fallback, squatted);
    assert!(
        fallback
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&format!("topdeck-{}.", victim.uid)),
        "{}",
        fallback.display()
    );
    let fallback_text = fallback.display().to_string();
    let mut said = String::new();
    for _ in 0..100 {
        said = victim_writer.proc.stderr();
        if said.contains("ls -ld") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        said.contains(&fallback_text) && said.contains("ls -ld"),
        "the writer must say where it went and what root can check: {said}"
    );
    let listing = Namespace::host().list();
    let e = listing
        .entries
        .iter()
        .find(|e| e.path == victim_writer.path)
        .expect("root reads the fallback directory");
    assert_eq!((e.uid, e.liveness), (victim.uid, Liveness::Alive));
    let unsafe_dir = listing
        .errors
        .iter()
        .find(|e| e.kind() == ErrorKind::UnsafeDirectory)
        .expect("the squatted directory is reported");
    assert!(unsafe_dir.to_string().contains(squatted.to_str().unwrap()));
    assert!(
        !unsafe_dir.to_string().contains("remove it"),
        "{unsafe_dir}"
    );
}

#[test]
fn a_directory_full_of_files_costs_its_owner_only() {
    let Some((_turn, attacker, victim)) = users("a_directory_full_of_files", false) else {
        return;
    };
    let victim_writer = victim.writer(&[]);
    let own = attacker.own_dir();
    // Dead registries, as many names as one listing will read and more:
    // hard links to one file, as the attacker could make them.
    let first = attacker.plant(&own, "1-1-0.topdeck", &template().bytes);
    let n = topdeck::MAX_FILES_PER_DIR + 500;
    for i in 1..n {
        std::fs::hard_link(&first, own.join(format!("1-1-{i}.topdeck"))).unwrap();
    }
    // Every listing (a reader keeps its namespace, as `serve` and `top`
    // do, so dead files are opened once) lists the victim, opens at most a
    // budget's worth of the attacker's files and lists at most a budget's
    // worth of its dead ones, and says so, naming the directory.
    let ns = Namespace::host();
    for round in 0..5 {
        let l = ns.list();
        let theirs = l.entries.iter().filter(|e| e.uid == attacker.uid).count();
        assert!(
            theirs > 0 && theirs <= 2 * topdeck::MAX_FILES_PER_DIR,
            "round {round}: {theirs}"
        );
        assert!(
            l.entries.iter().any(|e| e.path == victim_writer.path),
            "round {round}: the victim's registry must still be listed"
        );
        let over = l.errors.iter().find(|e| e.kind() == ErrorKind::TooLarge);
        if round == 0 {
            let over = over.expect("the over-full directory is reported");
            assert!(over.to_string().contains(&format!("holds {n} ")), "{over}");
            assert!(over.to_string().contains(own.to_str().unwrap()), "{over}");
        }
    }
}

/// Fallback directories, which any user may make under their own uid,
/// do not multiply the budget: of 20, each of 600 hard links to one empty
/// file, a listing reads the first few, says once how many there are,
/// shows a few errors per directory and counts the rest (every file was
/// an error of its own, every directory read), and the victim is listed.
#[test]
fn many_fallback_directories_share_one_budget_and_a_few_errors_each() {
    let Some((_turn, attacker, victim)) = users("many_fallback_directories", false) else {
        return;
    };
    let victim_writer = victim.writer(&[]);
    let (dirs, per_dir) = (20, 600);
    let mut first = None;
    let made: Vec<PathBuf> = (0..dirs)
        .map(|i| {
            let d = PathBuf::from(format!("{SHM_ROOT}/topdeck-{}.f{i:02}", attacker.uid));
            std::fs::create_dir(&d).unwrap();
            std::os::unix::fs::chown(&d, Some(attacker.uid), Some(attacker.gid)).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
            for j in 0..per_dir {
                let name = format!("1-1-{j}.topdeck");
                match &first {
                    None => first = Some(attacker.plant(&d, &name, b"")),
                    Some(f) => std::fs::hard_link(f, d.join(name)).unwrap(),
                }
            }
            d
        })
        .collect();
    let ns = Namespace::host();
    for round in 0..3 {
        let l = ns.list();
        assert!(
            l.entries.iter().any(|e| e.path == victim_writer.path),
            "round {round}: the victim's registry must still be listed"
        );
        let about = |d: &PathBuf| {
            l.errors
                .iter()
                .filter(|e| e.path().is_some_and(|p| p.parent() == Some(d.as_path())))
                .count()
        };
        let per: Vec<usize> = made.iter().map(about).collect();
        assert!(
            per.iter().all(|&n| n <= topdeck::MAX_ERRORS_PER_DIR),
            "round {round}: errors about single files per directory: {per:?}"
        );
        let read = per.iter().filter(|&&n| n > 0).count();
        assert!(
            read <= topdeck::MAX_FALLBACKS_PER_USER,
            "round {round}: {read} fallback directories read"
        );
        let cap = format!("uid {} has {dirs} fallback directories", attacker.uid);
        assert_eq!(
            l.errors
                .iter()
                .filter(|e| e.to_string().contains(&cap))
                .count(),
            1,
            "round {round}: said once: {:?}",
            l.errors
                .iter()
                .map(ToString::to_string)
                .take(40)
                .collect::<Vec<_>>()
        );
        let counted = l
            .errors
            .iter()
            .filter(|e| e.to_string().contains("more files could not be read"))
            .count();
        assert!(
            counted >= 1,
            "round {round}: the errors not shown are counted"
        );
    }
}

/// `hsperfdata_<anything>` directories, which any user may make in
/// `/tmp`, do not multiply the budget, and bad files in them are not
/// opened at every look: of 100, each of 42 empty files named as pids (a
/// truncated buffer each; the first also holds root's file and a FIFO,
/// refused when opened), a reader kept between looks, as `serve` keeps
/// it, opens files in the first few, says once how many there are and a
/// few errors per directory; the next looks open none of them, until one
/// changes. Before, every look opened and read all 4,200 files.
#[test]
fn many_hsperfdata_directories_share_one_budget_and_bad_files_are_not_reopened() {
    use topdeck::MAX_ERRORS_PER_DIR;
    // The one cap on a user's directories, fallbacks and hsperfdata alike.
    use topdeck::MAX_FALLBACKS_PER_USER as MAX_DIRS_PER_USER;
    let Some((_turn, attacker, _victim)) = users("many_hsperfdata_directories", false) else {
        return;
    };
    let (dirs, per_dir) = (100, 42);
    let made: Vec<PathBuf> = (0..dirs)
        .map(|i| {
            let d = PathBuf::from(format!("/tmp/hsperfdata_{}.{i:03}", attacker.name));
            std::fs::create_dir(&d).unwrap();
            std::os::unix::fs::chown(&d, Some(attacker.uid), Some(attacker.gid)).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
            for pid in 1..=per_dir {
                attacker.plant(&d, &pid.to_string(), b"");
            }
            d
        })
        .collect();
    // And in the first, a file of another owner's (root's) and a FIFO,
    // refused when opened.
    std::fs::write(made[0].join("43"), b"").unwrap();
    let fifo = std::ffi::CString::new(format!("{}/44", made[0].display())).unwrap();
    // SAFETY: `fifo` is a C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::lchown(made[0].join("44"), Some(attacker.uid), Some(attacker.gid)).unwrap();
    // Left alone a moment, as a file no JVM is still filling.
    std::thread::sleep(Duration::from_millis(1100));
    let opens = Opens::watch(&made);
    let registries = tempfile::tempdir().unwrap();
    let portholes = topdeck_sources::Portholes::new(topdeck_sources::Config {
        prommp_from_environ: false,
        aeron: false,
        mmv: false,
        ..Default::default()
    });
    let mut tracker =
        topdeck_sources::Tracker::<()>::new(Namespace::at(registries.path()), Some(portholes));
    let mut look = |round: &str| {
        let look = tracker.look();
        let opened = opens.opened();
        let said: Vec<usize> = made
            .iter()
            .map(|d| {
                let about =
                    |e: &&topdeck_sources::Error| e.path().and_then(Path::parent) == Some(d);
                look.errors.iter().filter(about).count()
            })
            .collect();
        // Errors about single files: a few from finding the files and a
        // few from reading them, per directory.
        assert!(
            said.iter().all(|&n| n <= 2 * MAX_ERRORS_PER_DIR),
            "{round}: errors about single files per directory: {said:?}"
        );
        let cap = format!("owns {dirs} hsperfdata_<user> directories");
        assert_eq!(
            look.errors
                .iter()
                .filter(|e| e.to_string().contains(&cap))
                .count(),
            1,
            "{round}: said once: {:?}",
            look.errors
                .iter()
                .map(ToString::to_string)
                .take(40)
                .collect::<Vec<_>>()
        );
        (opened, said)
    };
    let (opened, said) = look("first look");
    let read = opened.iter().filter(|&&n| n > 0).count();
    assert!(
        (1..=MAX_DIRS_PER_USER).contains(&read),
        "first look: {read} directories' files opened: {opened:?}"
    );
    assert!(
        said.iter().filter(|&&n| n > 0).count() <= MAX_DIRS_PER_USER,
        "first look: errors said about {said:?}"
    );
    for round in ["second look", "third look"] {
        let (opened, _) = look(round);
        assert_eq!(
            opened.iter().sum::<usize>(),
            0,
            "{round}: files known to be bad opened again: {opened:?}"
        );
    }
    // A file that changes is opened again, once.
    std::fs::write(made[0].join("7"), b"x").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    opens.opened(); // the write's own open
    let (opened, _) = look("after a change");
    assert_eq!(
        opened.iter().sum::<usize>(),
        1,
        "after a change: {opened:?}"
    );
    let (opened, _) = look("after it");
    assert_eq!(opened.iter().sum::<usize>(), 0, "after it: {opened:?}");
}

/// Opens of files in some directories, as inotify tells them (`IN_OPEN`):
/// what a reader opened, not what it says it did.
struct Opens {
    fd: std::os::fd::OwnedFd,
    /// Each watch's directory, by index into the directories watched.
    watches: std::collections::HashMap<i32, usize>,
    dirs: usize,
}

impl Opens {
    fn watch(dirs: &[PathBuf]) -> Self {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: inotify_init1 has no preconditions.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(
            raw >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `raw` is a descriptor just opened and owned by no one else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let watches = dirs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let path = std::ffi::CString::new(d.as_os_str().as_bytes()).unwrap();
                // SAFETY: `fd` is an inotify descriptor, `path` a C string.
                let wd = unsafe {
                    libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_OPEN)
                };
                assert!(
                    wd >= 0,
                    "watching {}: {}",
                    d.display(),
                    std::io::Error::last_os_error()
                );
                (wd, i)
            })
            .collect();
        Self {
            fd,
            watches,
            dirs: dirs.len(),
        }
    }

    /// Files opened in each directory since the last call (opens of the
    /// directory itself are not counted).
    fn opened(&self) -> Vec<usize> {
        let mut counts = vec![0; self.dirs];
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let mut at = 0;
            while at < n as usize {
                // SAFETY: the kernel wrote whole events; each begins with
                // an `inotify_event`, possibly unaligned in `buf`.
                let event: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast()) };
                assert_eq!(
                    event.mask & libc::IN_Q_OVERFLOW,
                    0,
                    "inotify's queue overflowed"
                );
                if event.len > 0 && event.mask & libc::IN_ISDIR == 0 {
                    if let Some(&i) = self.watches.get(&event.wd) {
                        counts[i] += 1;
                    }
                }
                at += std::mem::size_of::<libc::inotify_event>() + event.len as usize;
            }
        }
        counts
    }
}

/// A user who toggles many file names between two spellings between
/// root's scrapes cannot grow root's log: every bad file under a new
/// name was a new problem, said again at every scrape (197 MB of
/// `serve`'s stderr in 30 s). Its directories (its own and every
/// fallback root reads) each hold 64 bad files; after a look of them,
/// `toggles` renames of all, each followed by a scrape, add at most as
/// many lines again as that first look said (a new window's allowance),
/// however many toggles there are.
#[test]
fn toggling_file_names_between_scrapes_does_not_grow_roots_log() {
    let Some((_turn, attacker, _victim)) = users("toggling_file_names", false) else {
        return;
    };
    let mut dirs = vec![attacker.own_dir()];
    dirs.extend((0..topdeck::MAX_FALLBACKS_PER_USER).map(|i| {
        let d = PathBuf::from(format!("{SHM_ROOT}/topdeck-{}.t{i}", attacker.uid));
        std::fs::create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(attacker.uid), Some(attacker.gid)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }));
    let mut first = None;
    for d in &dirs {
        for j in 0..64 {
            let name = format!("1-1-{j}-a.topdeck");
            match &first {
                None => first = Some(attacker.plant(d, &name, b"")),
                Some(f) => std::fs::hard_link(f, d.join(name)).unwrap(),
            }
        }
    }
    let mut root = Command::new(topdeck_tests::topdeck_bin());
    root.env_remove(ENV_DIR);
    let (mut serve, addr) = serve(root, &["--all-users", "--no-portholes"]);
    let said = |serve: &mut Proc| {
        std::thread::sleep(Duration::from_millis(300));
        let err = serve.stderr();
        err.lines()
            .filter(|l| l.contains(&format!("topdeck-{}", attacker.uid)))
            .count()
    };
    scrape(&addr);
    let first_look = said(&mut serve);
    assert!(first_look > 0, "the attacker's bad files are said");
    // The attacker renames every file, as itself, between scrapes.
    let dir_args: Vec<&str> = dirs.iter().map(|d| d.to_str().unwrap()).collect();
    let toggles = 24;
    for t in 0..toggles {
        let (from, to) = if t % 2 == 0 { ("a", "b") } else { ("b", "a") };
        let script = format!(
            "for my $d (@ARGV) {{ for (glob \"$d/*-{from}.topdeck\") {{ (my $n = $_) =~ \
             s/-{from}\\.topdeck$/-{to}.topdeck/; rename $_, $n or die \"$_: $!\" }} }}"
        );
        let mut args = vec!["-e", script.as_str()];
        args.extend(&dir_args);
        let out = attacker
            .command(Path::new("/usr/bin/perl"), &args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        scrape(&addr);
    }
    let all = said(&mut serve);
    assert!(
        all <= 2 * first_look,
        "{toggles} toggles grew the log about the attacker's files from {first_look} lines to \
         {all}:\n{}",
        serve
            .stderr()
            .lines()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn a_process_name_is_a_claim_and_the_uid_says_who_wrote_it() {
    let Some((_turn, attacker, _victim)) = users("a_process_name_is_a_claim", false) else {
        return;
    };
    let mut cmd = attacker.command(Path::new("/bin/bash"), &[]);
    // `exec -a` gives the writer any argv[0] it likes.
    cmd.args([
        "-c",
        &format!("exec -a postgres {} idle", writer_bin().display()),
    ]);
    let w = Writer::from_proc(Proc::start("impostor", cmd));
    let listing = Namespace::host().list();
    let e = listing
        .entries
        .iter()
        .find(|e| e.path == w.path)
        .expect("listed");
    assert_eq!(e.process_name, "postgres");
    assert_eq!(
        e.uid, attacker.uid,
        "the owner is the system's word, not the writer's"
    );
}

/// `topdeck serve extra...` on a free loopback port, run by `cmd`; its address.
pub(super) fn serve(mut cmd: Command, extra: &[&str]) -> (Proc, String) {
    cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(extra);
    let mut p = Proc::start("topdeck serve", cmd);
    let line = p.expect("listening on http://");
    let addr = line.trim_end_matches("/metrics").to_owned();
    (p, addr)
}

/// One scrape of `addr`, as text.
pub(super) fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

#[test]
fn serve_exports_its_own_users_registries_unless_root_asks_for_all() {
    let Some((_turn, attacker, victim)) = users("serve_exports_its_own", false) else {
        return;
    };
    let _victim_writer = victim.writer(&[]);
    let _attacker_writer = attacker.writer(&[]);
    let _root = root_registry("hostile-serve-root");
    let bin = topdeck_tests::topdeck_bin();
    let root_cmd = || {
        let mut c = Command::new(&bin);
        c.env_remove(ENV_DIR);
        c
    };
    let uid = |u: u32| format!("uid=\"{u}\"");

    // Serving every user's series to anyone who can connect is said at
    // start; serving one's own is not.
    let warned = |p: &mut Proc| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let err = p.stderr();
            if err.contains("reading registries in") || std::time::Instant::now() > deadline {
                return err.contains("to anyone who can connect")
                    && err.contains("--bearer-token-file");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    let (mut p, addr) = serve(root_cmd(), &[]);
    assert!(!warned(&mut p), "{}", p.stderr());
    let own = scrape(&addr);
    assert!(
        own.contains("secret_total{") && own.contains(&uid(0)),
        "{own}"
    );
    assert!(
        !own.contains(&uid(victim.uid)) && !own.contains(&uid(attacker.uid)),
        "{own}"
    );

    let (mut p, addr) = serve(root_cmd(), &["--all-users"]);
    assert!(warned(&mut p), "{}", p.stderr());
    let every = scrape(&addr);
    for u in [0, victim.uid, attacker.uid] {
        assert!(every.contains(&uid(u)), "uid {u} missing:\n{every}");
    }

    // Root without the capability to read others' private directories (a
    // unit that forgot CAP_DAC_READ_SEARCH): their registries are missing,
    // and the endpoint says so instead of exporting less in silence.
    let mut blind = Command::new("setpriv");
    blind
        .args([
            "--bounding-set=-dac_read_search,-dac_override",
            "--inh-caps=-dac_read_search,-dac_override",
            "--",
        ])
        .arg(&bin)
        .env_remove(ENV_DIR);
    let (_p, addr) = serve(blind, &["--all-users"]);
    let partial = scrape(&addr);
    assert!(!partial.contains(&uid(victim.uid)), "{partial}");
    let private = partial
        .lines()
        .find_map(|l| l.strip_prefix("topdeck_scrape_errors_total{reason=\"private\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(private.is_some_and(|n| n >= 2), "{partial}");

    // A user's serve exports that user's registries and no one else's, and
    // may not ask for everyone's.
    let (_p, addr) = serve(attacker.command(&bin, &[]), &[]);
    let theirs = scrape(&addr);
    assert!(
        theirs.contains("good_total{") && theirs.contains(&uid(attacker.uid)),
        "{theirs}"
    );
    assert!(
        !theirs.contains("secret_total") && !theirs.contains(&uid(victim.uid)),
        "{theirs}"
    );
    let mut refused = Proc::start(
        "a user's serve --all-users",
        attacker.command(&bin, &["serve", "--all-users", "--listen", "127.0.0.1:0"]),
    );
    refused.close_stdin();
    let out = refused.finish();
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("--all-users needs root"),
        "{}",
        out.stderr
    );
}

/// `VmHWM` (peak resident memory) of `pid`, in KiB.
fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// The first value of the line of `text` that starts with `series`.
fn value_of(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
}

/// The wide-label finding's writer, run as `user`: 100 histograms, 32
/// labels (31 of 1 KiB), every bucket from 1 µs to 100 s filled (a classic
/// exposition of ~0.7 GB).
fn wide_label_flood(user: &User) -> Writer {
    let flood = user.command(
        writer_bin(),
        &[
            "flood",
            "--series",
            "100",
            "--labels",
            "31",
            "--label-bytes",
            "1024",
        ],
    );
    Writer::from_proc(Proc::start("flooding writer", flood))
}

#[test]
fn one_users_wide_labels_neither_flood_nor_starve_roots_all_users_scrape() {
    let Some((_turn, attacker, _victim)) = users("one_users_wide_labels", false) else {
        return;
    };
    let _flood = wide_label_flood(&attacker);
    let _root = root_registry("hostile-fleet-root");
    let mut root = Command::new(topdeck_tests::topdeck_bin());
    root.env_remove(ENV_DIR);
    let (serve, addr) = serve(root, &["--all-users", "--no-portholes"]);

    // The attacker's requests, sent and never read, every one of them
    // holding its body until its connection is dropped.
    let unread: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            use std::io::Write;
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            s
        })
        .collect();
    let mut largest = 0;
    for _ in 0..18 {
        // `scrape` asserts a 200: no 503 while the attacker's bodies wait.
        let body = scrape(&addr);
        largest = largest.max(body.len());
        assert!(
            body.contains("secret_total{"),
            "root's own series are there"
        );
    }
    let body = scrape(&addr);
    let dropped = format!(
        "topdeck_export_dropped_series_total{{reason=\"registry_bytes_cap\",owner_uid=\"{}\"}} ",
        attacker.uid
    );
    assert!(
        value_of(&body, &dropped).is_some_and(|n| n >= 100.0),
        "the flood is counted as left out, by reason and owner:\n{}",
        body.lines()
            .filter(|l| l.starts_with("topdeck_export"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        largest < 8 << 20,
        "a root scrape was {largest} bytes: one user's share is bounded"
    );
    let peak = peak_kib(serve.pid());
    assert!(peak < 256 << 10, "serve's peak RSS was {peak} KiB");
    drop(unread);
}

/// A streamed body: requests that are never read hold a run of their
/// body each (and their snapshots), not the body. Root publishes 40,000
/// series of its own (never capped: a body of about 11 MB) while another
/// user floods with wide labels and holds 32 requests unread on loopback:
/// every root scrape is a 200 with root's series, and `serve`'s peak
/// memory stays under a bound that 32 whole bodies pass (with the body
/// built whole, they filled the 256 MiB budget of unsent bodies and root's
/// first scrape got 503; streamed, 148 MiB of VmHWM in a debug build, 95
/// of them before the unread requests).
#[test]
fn many_unread_requests_hold_a_run_each_not_a_body() {
    const UNREAD: usize = 32;
    const OWN: u32 = 40_000;
    let Some((_turn, attacker, _victim)) = users("many_unread_requests", false) else {
        return;
    };
    let _flood = wide_label_flood(&attacker);
    let _root = root_registry("hostile-unread-root");
    let own = Registry::builder()
        .dir(user_dir(0))
        .name("hostile-unread-wide")
        .metrics(OWN + 16)
        .string_bytes(16 << 20)
        .build()
        .expect("a registry in /dev/shm/topdeck-0");
    let pad = "p".repeat(150);
    let _counters: Vec<_> = (0..OWN)
        .map(|i| {
            let c = own
                .counter(
                    "root_wide_total",
                    &[("i", &i.to_string()), ("pad", &pad)],
                    "Root's own.",
                    "",
                )
                .unwrap();
            c.inc();
            c
        })
        .collect();
    let mut root = Command::new(topdeck_tests::topdeck_bin());
    root.env_remove(ENV_DIR);
    let (serve, addr) = serve(root, &["--all-users", "--no-portholes"]);
    let whole = scrape(&addr).len();
    let before = peak_kib(serve.pid());
    let unread: Vec<std::net::TcpStream> = (0..UNREAD)
        .map(|_| {
            use std::io::Write;
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            // A small receive buffer, as a client that stopped reading
            // long ago has filled: the body stays on serve's side.
            set_receive_buffer(&s, 4096);
            write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..8 {
        // `scrape` asserts a 200: no 503 while the attacker's requests wait.
        let body = scrape(&addr);
        assert!(
            body.contains("secret_total{"),
            "root's own series are there"
        );
    }
    let peak = peak_kib(serve.pid());
    eprintln!(
        "a body of {whole} bytes; serve's VmHWM {before} KiB before the unread requests, \
         {peak} KiB with {UNREAD} of them"
    );
    assert!(
        peak < 224 << 10,
        "serve's peak RSS was {peak} KiB with {UNREAD} unread requests of {whole} bytes"
    );
    drop(unread);
}

/// Sets `SO_RCVBUF` of `s`.
fn set_receive_buffer(s: &std::net::TcpStream, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is `s`'s, open while it lives, and the option
    // is an int read from a live local for its size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            std::ptr::from_ref(&bytes).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt SO_RCVBUF");
}

/// The "must show": a real Prometheus scraping root's `serve
/// --all-users` (with a bearer token, as a fleet should) while another
/// user publishes 10,000 series gets at most the per-registry cap of them,
/// sees the rest counted as dropped by reason and owner, and every one of
/// root's own 3,000 series (over the cap, never capped). The scrape
/// durations Prometheus measured are printed (a report, not a claim).
#[test]
fn a_real_prometheus_gets_at_most_the_cap_of_another_users_10000_series() {
    use super::prometheus::{Job, Prometheus};
    use std::os::unix::fs::PermissionsExt;
    const FLOOD: u32 = 10_000;
    const CAP: f64 = 2_000.0; // Caps::FLEET's series per registry
    const OWN: u32 = 3_000;
    let Some((_turn, attacker, _victim)) = users("prometheus_fleet_cap", false) else {
        return;
    };
    let flood = attacker.command(
        writer_bin(),
        &["flood", "--series", &FLOOD.to_string(), "--counters"],
    );
    let mut flood = Proc::start("flooding writer", flood);
    flood.expect("ready ");
    let own = Registry::builder()
        .dir(user_dir(0))
        .name("hostile-prometheus-root")
        .metrics(OWN + 16)
        .string_bytes(1 << 20)
        .build()
        .expect("a registry in /dev/shm/topdeck-0");
    let counters: Vec<_> = (0..OWN)
        .map(|i| {
            let c = own
                .counter(
                    "root_jobs_total",
                    &[("i", &i.to_string())],
                    "Root's own.",
                    "",
                )
                .unwrap();
            c.inc();
            c
        })
        .collect();

    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, format!("fleet-{}\n", std::process::id())).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut root = Command::new(topdeck_tests::topdeck_bin());
    root.env_remove(ENV_DIR);
    let (_serve, addr) = serve(
        root,
        &[
            "--all-users",
            "--no-portholes",
            "--bearer-token-file",
            token.to_str().unwrap(),
        ],
    );
    let target = addr.trim_start_matches("http://");
    let mut prometheus = Prometheus::scraping(Job {
        credentials_file: Some(&token),
        interval: Duration::from_secs(2),
        ..Job::of(target)
    });

    let theirs = format!("count(flood_total{{uid=\"{}\"}})", attacker.uid);
    let kept = prometheus.value(&theirs);
    assert!(
        kept > 0.0 && kept <= CAP,
        "{kept} of the user's series kept"
    );
    prometheus.at_least("count(root_jobs_total{uid=\"0\"})", f64::from(OWN));
    assert_eq!(
        prometheus.value("count(root_jobs_total{uid=\"0\"})"),
        f64::from(OWN)
    );
    // The drop, as Prometheus scraped it (counted by the scrape after).
    let dropped = format!(
        "topdeck_export_dropped_series_total{{owner_uid=\"{}\"}}",
        attacker.uid
    );
    prometheus.at_least(&format!("sum({dropped})"), f64::from(FLOOD) - kept);
    let reasons = prometheus.values_by(&dropped, "reason");
    assert!(
        reasons
            .iter()
            .any(|(r, n)| r == "registry_series_cap" && *n > 0.0),
        "{reasons:?}"
    );
    assert!(
        prometheus
            .query("topdeck_export_dropped_series_total{owner_uid=\"0\"}")
            .is_empty(),
        "root's own series are never dropped"
    );
    // A few scrapes more, for their durations.
    prometheus.at_least("count_over_time(up[5m])", 10.0);
    for q in [
        "min_over_time(scrape_duration_seconds[5m])",
        "avg_over_time(scrape_duration_seconds[5m])",
        "max_over_time(scrape_duration_seconds[5m])",
        "max_over_time(scrape_samples_scraped[5m])",
    ] {
        eprintln!("{q} = {}", prometheus.value(q));
    }
    assert_eq!(prometheus.value("min_over_time(up[5m])"), 1.0);
    flood.send("exit");
    drop(counters);
}
