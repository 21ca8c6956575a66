// SPDX-License-Identifier: Apache-2.0
//! The flight recorder's store survives what ends a recorder: SIGKILL at
//! random moments while it writes, and a full disk.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use topdeck::{Registry, Value};
use topdeck_history::History;
use topdeck_tests::{is_root, namespace_dir, skip, topdeck_bin};

/// A registry whose counter a thread keeps incrementing, in `ns`.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start(ns: &Path) -> Self {
        let registry = Registry::builder().dir(ns).name("busy").build().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let jobs = registry.counter("jobs_total", &[], "Jobs.", "").unwrap();
            let took = registry
                .histogram("job_seconds", &[], "Took.", "seconds")
                .unwrap();
            let mut n = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                jobs.add(n % 7 + 1);
                took.record((n % 1000) as f64 * 1e-5);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn recorder(ns: &Path, store: &Path, log: &Path) -> Child {
    Command::new(topdeck_bin())
        .args(["record", "--interval", "20ms", "--dir"])
        .arg(store)
        .env(topdeck::dir::ENV_DIR, ns)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start topdeck record")
}

/// Every frame of the store: all read back, none damaged, and the busy
/// counter never going backwards from one frame to the next.
fn read_back(store: &Path) -> (u64, u64) {
    let history = History::open(store).unwrap();
    let summary = history.summary(true).unwrap();
    assert!(summary.damage.is_empty(), "{:?}", summary.damage);
    let mut frames = 0;
    let mut last = 0;
    for m in history.replay(0, u64::MAX, &|s| s.registry.as_deref() == Some("busy")) {
        let m = m.unwrap();
        assert!(m.damage.is_none(), "{:?}", m.damage);
        frames += 1;
        if let Some((_, snap)) = m.sources.first() {
            let Some(Value::Counter(n)) = snap.get("jobs_total", &[]) else {
                panic!("no jobs_total in a frame");
            };
            assert!(*n >= last, "the counter went back from {last} to {n}");
            last = *n;
        }
    }
    assert_eq!(frames, summary.frames);
    (frames, last)
}

#[test]
fn a_recorder_killed_at_random_moments_leaves_a_store_that_reads_back() {
    let ns = namespace_dir();
    let store = tempfile::tempdir().unwrap();
    let log = store.path().join("recorder.log");
    let _busy = Busy::start(ns.path());
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut frames = 0;
    for kill in 0..50 {
        let mut child = recorder(ns.path(), &store.path().join("h"), &log);
        // 20 to 400 ms: before the first frame, mid-stretch, past a key frame.
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(20 + (seed >> 33) % 380));
        child.kill().unwrap();
        child.wait().unwrap();
        if !store.path().join("h").exists() {
            continue;
        }
        let Ok(history) = History::open(&store.path().join("h")) else {
            continue;
        };
        drop(history);
        let (now, _) = read_back(&store.path().join("h"));
        assert!(
            now >= frames,
            "kill {kill}: {frames} frames before, {now} after"
        );
        frames = now;
    }
    assert!(frames > 100, "only {frames} frames recorded over 50 runs");
}

/// A small tmpfs at `dir`, unmounted when dropped.
struct Tmpfs<'a>(&'a Path);

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_full_disk_corrupts_nothing_is_said_and_recording_resumes() {
    if !is_root() {
        skip(
            "a_full_disk_corrupts_nothing_is_said_and_recording_resumes",
            "mounting a small tmpfs needs root",
        );
        return;
    }
    let ns = namespace_dir();
    let work = tempfile::tempdir().unwrap();
    let mnt = work.path().join("disk");
    std::fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(ok.success(), "mount a tmpfs");
    let _mounted = Tmpfs(&mnt);
    let store = mnt.join("h");
    let log = work.path().join("recorder.log");
    let _busy = Busy::start(ns.path());
    let mut child = recorder(ns.path(), &store, &log);
    let frames = || {
        History::open(&store)
            .and_then(|h| h.summary(false))
            .map_or(0, |s| s.frames)
    };
    wait_for("the first frames", || frames() >= 5);
    // Fill the disk.
    let filler = mnt.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
    }
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the recorder to say the disk is full", || {
        said().contains("disk is full")
    });
    let stalled = frames();
    std::thread::sleep(Duration::from_millis(300));
    let (before, _) = read_back(&store);
    assert!(
        before <= stalled + 1,
        "frames went on while the disk was full"
    );
    // Space returns: recording resumes.
    std::fs::remove_file(&filler).unwrap();
    wait_for("the recorder to say it records again", || {
        said().contains("recording again")
    });
    wait_for("new frames", || frames() >= before + 5);
    child.kill().unwrap();
    child.wait().unwrap();
    let (after, _) = read_back(&store);
    assert!(after >= before + 5);
    assert_eq!(
        said().matches("not recording").count(),
        1,
        "said once per episode:\n{}",
        said()
    );
}
