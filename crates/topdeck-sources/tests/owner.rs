// SPDX-License-Identifier: Apache-2.0
//! A look that keeps only its own user's portholes (what `serve` without
//! `--all-users` exports) never reads another user's files: a process of
//! uid 1000 names a prometheus_client directory whose `*.db` file is a
//! FIFO, a canary any open of it for its contents reports as an error.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use topdeck::Namespace;
use topdeck_sources::{Config, Look, Portholes, Tracker};

/// The user the other process runs as.
const OTHER: u32 = 1000;

/// A `sleep` run as `uid` with `PROMETHEUS_MULTIPROC_DIR` set to `dir`.
fn sleeper(uid: u32, dir: &Path) -> Child {
    let mut cmd = if uid == 0 {
        Command::new("sleep")
    } else {
        let mut c = Command::new("setpriv");
        let id = uid.to_string();
        c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "sleep"]);
        c
    };
    cmd.arg("60")
        .env("PROMETHEUS_MULTIPROC_DIR", dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep")
}

fn chown(path: &Path, uid: u32) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: chown reads the NUL-terminated path we own.
    let done = unsafe { libc::chown(c.as_ptr(), uid, uid) };
    assert_eq!(done, 0, "chown {}", path.display());
}

/// A valid file of one counter `name`, as prometheus_client lays it out.
fn counter(name: &str) -> Vec<u8> {
    let key = format!(r#"["{name}", "{name}_total", {{}}, "Canary"]"#);
    topdeck_portholes::prommp::file_of(&[(key.as_bytes(), 1.0, 0.0)])
}

fn mentions(look: &Look, dir: &Path) -> bool {
    look.errors
        .iter()
        .any(|e| e.to_string().contains(&dir.display().to_string()))
        || look.sources.iter().any(|s| s.path == dir)
}

/// Looks until `done` holds (the processes have exec'd and their
/// environment is readable), for at most 10 s.
fn look_until(tracker: &mut Tracker, done: impl Fn(&Look) -> bool) -> Look {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let look = tracker.look();
        if done(&look) || Instant::now() > deadline {
            return look;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_look_of_its_own_users_portholes_never_opens_another_users_files() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: needs root, to run a process as uid {OTHER} and chown its directory");
        return;
    }
    let top = tempfile::Builder::new()
        .prefix("topdeck-owner-")
        .tempdir()
        .unwrap();
    let mine = top.path().join("mine");
    let theirs = top.path().join("theirs");
    std::fs::create_dir(&mine).unwrap();
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(mine.join("counter_1.db"), counter("own_canary")).unwrap();
    // Their file: a FIFO, which the reader refuses as "not a regular
    // file" if it ever opens it to read it; and a real one beside it.
    let fifo = CString::new(theirs.join("counter_1.db").as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    std::fs::write(theirs.join("counter_2.db"), counter("their_canary")).unwrap();
    for path in [
        &theirs,
        &theirs.join("counter_1.db"),
        &theirs.join("counter_2.db"),
    ] {
        chown(path, OTHER);
    }

    let mut children = [sleeper(0, &mine), sleeper(OTHER, &theirs)];
    let only_python = |owner| Config {
        prommp_dirs: Vec::new(),
        prommp_from_environ: true,
        jvm: false,
        aeron: false,
        mmv: false,
        owner,
    };

    // Every user's: their directory is read, and the canary reports it,
    // which is what the look below must never show.
    // No registries: an empty directory for the namespace.
    let none = top.path().join("registries");
    std::fs::create_dir(&none).unwrap();
    let tracker = |owner| {
        Tracker::new(
            Namespace::at(&none),
            Some(Portholes::new(only_python(owner))),
        )
    };
    let mut all = tracker(None);
    let every = look_until(&mut all, |l| mentions(l, &theirs) && mentions(l, &mine));
    // Root's own only.
    let mut own = tracker(Some(0));
    let looks: Vec<Look> = (0..3)
        .map(|_| look_until(&mut own, |l| mentions(l, &mine)))
        .collect();

    for child in &mut children {
        // Killed by its pid, which this test started.
        child.kill().unwrap();
        child.wait().unwrap();
    }
    drop(top);

    let canary = theirs.join("counter_1.db").display().to_string();
    assert!(
        every
            .errors
            .iter()
            .map(ToString::to_string)
            .any(|e| e.contains(&canary) && e.contains("not a regular file")),
        "the canary must be seen when every user's directories are read: {:?}",
        every.errors
    );
    for look in &looks {
        assert!(
            look.sources.iter().any(|s| s.path == mine),
            "its own directory is read: {:?} {:?}",
            look.sources,
            look.errors
        );
        assert!(
            !mentions(look, &theirs),
            "another user's directory was read: {:?}",
            look.errors
        );
    }
}

/// Another user who names a private directory in their environment does
/// not become its process: B's older `sleep` naming A's `0700` directory
/// lost to A's own process, and once A's stops, nothing lists the
/// directory as B's (it was exported as `process="sleep",pid=<B>` and
/// kept alive by B alone).
#[test]
fn a_prometheus_client_directory_is_named_only_by_a_process_of_its_owner() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: needs root, to run processes as two other users");
        return;
    }
    const OWNER: u32 = OTHER;
    const NAMER: u32 = OTHER + 1;
    let top = tempfile::Builder::new()
        .prefix("topdeck-namer-")
        .tempdir()
        .unwrap();
    let private = top.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::write(private.join("counter_1.db"), counter("private_canary")).unwrap();
    for path in [&private, &private.join("counter_1.db")] {
        chown(path, OWNER);
    }
    std::fs::set_permissions(
        &private,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    // The namer's process starts first: the oldest naming the directory.
    let mut namer = sleeper(NAMER, &private);
    std::thread::sleep(Duration::from_millis(50));
    let mut owner = sleeper(OWNER, &private);
    let none = top.path().join("registries");
    std::fs::create_dir(&none).unwrap();
    let mut tracker = Tracker::new(
        Namespace::at(&none),
        Some(Portholes::new(Config {
            prommp_dirs: Vec::new(),
            prommp_from_environ: true,
            jvm: false,
            aeron: false,
            mmv: false,
            owner: None,
        })),
    );
    let named = |look: &Look| {
        look.sources
            .iter()
            .filter(|s| s.path == private)
            .map(|s| s.pid)
            .collect::<Vec<_>>()
    };
    let both = look_until(&mut tracker, |l| !named(l).is_empty());
    owner.kill().unwrap();
    owner.wait().unwrap();
    let namer_only: Vec<Look> = (0..3).map(|_| tracker.look()).collect();
    namer.kill().unwrap();
    namer.wait().unwrap();
    drop(top);

    assert_eq!(named(&both), vec![Some(owner.id())], "{:?}", both.errors);
    for look in &namer_only {
        assert_eq!(
            named(look),
            Vec::<Option<u32>>::new(),
            "named by another user's process"
        );
    }
}

/// The owner shown for a directory is the owner of the directory read:
/// a `--prommp` path swapped in a loop between a directory of uid 1000
/// (one metric) and one of root's (two) never shows one's owner beside
/// the other's contents (the owner was looked up by path again, apart
/// from the reading).
#[test]
fn a_given_directory_swapped_in_a_loop_shows_the_owner_of_what_was_read() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: needs root, to chown a directory to uid {OTHER}");
        return;
    }
    let top = tempfile::Builder::new()
        .prefix("topdeck-swapped-")
        .tempdir()
        .unwrap();
    let (given, other) = (top.path().join("given"), top.path().join("other"));
    std::fs::create_dir(&given).unwrap();
    std::fs::create_dir(&other).unwrap();
    std::fs::write(given.join("counter_1.db"), counter("theirs")).unwrap();
    chown(&given, OTHER);
    chown(&given.join("counter_1.db"), OTHER);
    let two = [("mine_a", 1.0), ("mine_b", 2.0)]
        .map(|(name, v)| (format!(r#"["{name}", "{name}_total", {{}}, "Mine"]"#), v));
    let entries: Vec<(&[u8], f64, f64)> =
        two.iter().map(|(k, v)| (k.as_bytes(), *v, 0.0)).collect();
    std::fs::write(
        other.join("counter_1.db"),
        topdeck_portholes::prommp::file_of(&entries),
    )
    .unwrap();
    let none = top.path().join("registries");
    std::fs::create_dir(&none).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
        let (a, b) = (c(&given), c(&other));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: both paths are NUL-terminated and outlive the call.
                let rc = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
            }
        })
    };
    let mut tracker = Tracker::<()>::new(
        Namespace::at(&none),
        Some(Portholes::new(Config {
            prommp_dirs: vec![given.clone()],
            prommp_from_environ: false,
            jvm: false,
            aeron: false,
            mmv: false,
            owner: None,
        })),
    );
    let mut seen = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let look = tracker.look();
        seen.extend(
            look.sources
                .iter()
                .filter(|s| s.path == given)
                .map(|s| (s.uid, s.metrics)),
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    drop(top);
    let wrong: Vec<_> = seen
        .iter()
        .filter(|&&read| read != (Some(OTHER), 1) && read != (Some(0), 2))
        .collect();
    assert!(!seen.is_empty());
    assert!(
        wrong.is_empty(),
        "{} of {} looks showed one directory's owner beside the other's metrics: {:?}",
        wrong.len(),
        seen.len(),
        &wrong[..wrong.len().min(5)]
    );
}
