// SPDX-License-Identifier: Apache-2.0
//! The Aeron porthole against a real media driver (aeron-all, installed by
//! scripts/reach/aeron.sh), compared with Aeron's own AeronStat, and
//! against hostile synthetic files.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use topdeck_portholes::aeron::{self, Cnc, CncBuilder, Error, FormatError, Header};

// ---- synthetic files ------------------------------------------------------

const RECORD: usize = 512;
const SLOT: usize = 128;

fn sample() -> Vec<u8> {
    CncBuilder::new()
        .capacity(6)
        .counter(0, "Bytes sent", 1 << 40)
        .counter(0, "Bytes received", -3)
        .counter(
            11,
            "rcv-pos: 5 1001 stream=10 aeron:udp?endpoint=localhost:20121",
            77,
        )
        .heartbeat_ms(1_700_000_000_000)
        .pid(4242)
        .build()
}

fn header(bytes: &[u8]) -> Header {
    Header::parse(bytes, bytes.len() as u64).unwrap()
}

fn put_i32(bytes: &mut [u8], at: u64, v: i32) {
    bytes[at as usize..at as usize + 4].copy_from_slice(&v.to_le_bytes());
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn format_error(r: Result<Cnc, Error>) -> FormatError {
    match r {
        Err(Error::Format { source, .. }) => source,
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn a_synthetic_file_reads_the_same_from_bytes_and_from_disk() {
    let bytes = sample();
    let cnc = Cnc::parse(&bytes).unwrap();
    assert_eq!(cnc.header.semver(), (0, 2, 0));
    assert_eq!(cnc.header.pid, 4242);
    assert_eq!(cnc.header.client_liveness_timeout_ns, 10_000_000_000);
    assert_eq!(cnc.heartbeat_ms, 1_700_000_000_000);
    let got: Vec<_> = cnc
        .counters
        .iter()
        .map(|c| (c.id, c.type_id, c.label.as_str(), c.value))
        .collect();
    assert_eq!(
        got,
        [
            (0, 0, "Bytes sent", 1 << 40),
            (1, 0, "Bytes received", -3),
            (
                2,
                11,
                "rcv-pos: 5 1001 stream=10 aeron:udp?endpoint=localhost:20121",
                77
            )
        ]
    );
    assert_eq!(cnc.counters[2].registration_id, 102);
    assert_eq!(cnc.counters[2].key[..8], 2i64.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "cnc.dat", &bytes);
    assert_eq!(aeron::read(&path).unwrap(), cnc);
    // An aeron.dir is taken as its cnc.dat.
    assert_eq!(aeron::read(dir.path()).unwrap(), cnc);
}

#[test]
fn reclaimed_records_are_skipped_and_the_first_unused_record_ends_the_list() {
    let mut bytes = CncBuilder::new()
        .capacity(8)
        .counter(0, "a", 1)
        .counter(0, "b", 2)
        .counter(0, "c", 3)
        .counter(0, "d", 4)
        .build();
    let meta = header(&bytes).counters_metadata_offset();
    put_i32(&mut bytes, meta + RECORD as u64, -1); // b reclaimed
    put_i32(&mut bytes, meta + 2 * RECORD as u64, 0); // c unused: d is past the end
    let labels: Vec<_> = Cnc::parse(&bytes)
        .unwrap()
        .counters
        .into_iter()
        .map(|c| c.label)
        .collect();
    assert_eq!(labels, ["a"]);
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "cnc.dat", &bytes);
    assert_eq!(aeron::read(&path).unwrap().counters.len(), 1);
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error_not_a_panic() {
    let bytes = sample();
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "cnc.dat", &bytes);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for len in (0..bytes.len()).rev() {
        assert!(Cnc::parse(&bytes[..len]).is_err(), "{len} bytes parsed");
        file.set_len(len as u64).unwrap();
        let err = format_error(aeron::read(&path));
        assert!(
            matches!(
                err,
                FormatError::Truncated { .. } | FormatError::RegionsPastEnd { .. }
            ),
            "{len} bytes: {err}"
        );
    }
}

#[test]
fn another_major_version_is_refused_and_a_file_still_being_created_says_so() {
    let mut bytes = sample();
    put_i32(&mut bytes, 0, 0x01_00_00);
    let err = Cnc::parse(&bytes).unwrap_err();
    assert_eq!(
        err,
        FormatError::UnsupportedVersion {
            version: 0x01_00_00
        }
    );
    assert!(
        err.to_string()
            .contains("CnC version 1.0.0 is not supported"),
        "{err}"
    );
    put_i32(&mut bytes, 0, 0x00_03_07);
    assert_eq!(Cnc::parse(&bytes).unwrap().header.semver(), (0, 3, 7));
    put_i32(&mut bytes, 0, 0);
    assert_eq!(Cnc::parse(&bytes).unwrap_err(), FormatError::NotReady);
}

#[test]
fn region_lengths_past_the_end_negative_or_too_large_are_refused() {
    let bytes = sample();
    // Header fields 4..24 are the five region lengths.
    for field in 0..5u64 {
        let mut b = bytes.clone();
        put_i32(&mut b, 4 + 4 * field, i32::MAX);
        assert!(
            matches!(Cnc::parse(&b), Err(FormatError::RegionsPastEnd { .. })),
            "field {field}"
        );
        put_i32(&mut b, 4 + 4 * field, -1);
        assert!(
            matches!(
                Cnc::parse(&b),
                Err(FormatError::NegativeLength { len: -1, .. })
            ),
            "field {field}"
        );
    }
    let mut b = bytes.clone();
    put_i32(&mut b, 4, 767);
    assert!(matches!(
        Cnc::parse(&b),
        Err(FormatError::RingTooShort { len: 767 })
    ));

    // A sparse file large enough for its claims costs its author nothing:
    // the reader's cap must refuse it before copying.
    let mut b = bytes.clone();
    put_i32(&mut b, 12, 1 << 30);
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "cnc.dat", &b);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let err = format_error(aeron::read(&path));
    assert_eq!(
        err,
        FormatError::RegionTooLarge {
            what: "counters metadata",
            len: 1 << 30
        }
    );
}

#[test]
fn a_label_length_past_its_record_is_refused_with_the_counter_id() {
    for bad in [381, -1, i32::MAX] {
        let mut bytes = sample();
        let meta = header(&bytes).counters_metadata_offset();
        put_i32(&mut bytes, meta + RECORD as u64 + 128, bad);
        assert_eq!(
            Cnc::parse(&bytes).unwrap_err(),
            FormatError::LabelPastRecord { id: 1, len: bad }
        );
    }
    let mut bytes = sample();
    let meta = header(&bytes).counters_metadata_offset();
    put_i32(&mut bytes, meta + 128, 380);
    assert_eq!(Cnc::parse(&bytes).unwrap().counters[0].label.len(), 380);
}

#[test]
fn huge_counts_are_bounded_by_the_smaller_counters_region() {
    // Every record allocated, none unused: the walk ends with the regions.
    let mut builder = CncBuilder::new().capacity(64);
    for i in 0..64 {
        builder = builder.counter(i, "x", i64::from(i));
    }
    let mut bytes = builder.build();
    assert_eq!(Cnc::parse(&bytes).unwrap().counters.len(), 64);
    // Values with room for 10 ids: metadata's 64 records do not count.
    put_i32(&mut bytes, 16, (10 * SLOT) as i32);
    let h = header(&bytes);
    let fitted = &bytes[..(h.error_log_offset() + h.error_log_len) as usize];
    assert_eq!(Cnc::parse(fitted).unwrap().counters.len(), 10);
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "cnc.dat", fitted);
    assert_eq!(aeron::read(&path).unwrap().counters.len(), 10);
}

#[test]
fn links_and_non_files_are_refused_without_being_followed_or_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let real = write_file(dir.path(), "real.dat", &sample());
    let link = dir.path().join("cnc.dat");
    symlink(&real, &link).unwrap();
    assert!(matches!(aeron::read(&link), Err(Error::Io { .. })));
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(matches!(aeron::read(&fifo), Err(Error::NotRegular { .. })));
    let err = aeron::read(dir.path().join("missing"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing") && err.contains("check that"),
        "{err}"
    );
}

#[test]
fn an_aeron_dir_that_is_a_link_is_not_followed_when_read_again() {
    // As `show` and `watch` read one driver again by its path: a link in
    // place of the directory discovery found may lead to another user's.
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("aeron-real");
    std::fs::create_dir(&real).unwrap();
    write_file(&real, "cnc.dat", &sample());
    let link = dir.path().join("aeron-link");
    symlink(&real, &link).unwrap();
    assert!(aeron::read(&real).is_ok());
    assert!(aeron::read(real.join("cnc.dat")).is_ok());
    match aeron::read(&link) {
        Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::ELOOP)),
        other => panic!("a linked aeron dir was read: {other:?}"),
    }
}

#[test]
fn liveness_follows_the_heartbeat_against_the_client_timeout() {
    let cnc = Cnc::parse(&sample()).unwrap();
    let hb = cnc.heartbeat_ms;
    assert!(cnc.liveness(hb + 9_999).alive);
    assert!(cnc.liveness(hb - 5).alive);
    let dead = cnc.liveness(hb + 10_001);
    assert!(!dead.alive);
    assert_eq!((dead.heartbeat_age_ms, dead.timeout_ms), (10_001, 10_000));
    let never = Cnc::parse(&CncBuilder::new().build()).unwrap();
    assert!(!never.liveness(5).alive);
}

// ---- a real media driver --------------------------------------------------

/// The jar scripts/reach/aeron.sh installs, and java; `None` after saying
/// why (a failure under CI).
fn producer() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_default();
    let jar = std::env::var_os("TOPDECK_AERON_JAR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("topdeck/aeron/aeron-all-1.51.0.jar"));
    let java = Command::new("java")
        .arg("-version")
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let why = if !java {
        "java is not on PATH"
    } else if !jar.is_file() {
        "the aeron-all jar is not installed"
    } else {
        return Some(jar);
    };
    let msg = format!(
        "SKIPPED: {why} ({}); run scripts/reach/aeron.sh",
        jar.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("{msg}");
    None
}

/// The flags the driver needs on Java 17 (Agrona reaches into these
/// packages), and a sleeping idle strategy so the test's driver does not
/// take a core from the other tests.
fn java(jar: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new("java");
    cmd.args(["--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED"])
        .args(["--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED"])
        .arg(format!("-Daeron.dir={}", dir.display()))
        .arg("-cp")
        .arg(jar);
    cmd
}

struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn aeron_stat(jar: &Path, dir: &Path) -> (String, BTreeMap<i32, (i64, String)>) {
    let out = java(jar, dir)
        .args(["io.aeron.samples.AeronStat", "watch=false"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "AeronStat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let title = lines.next().unwrap_or_default().to_owned();
    // "   26:                  5,331,992 - Conductor max cycle time ..."
    let counters = lines
        .filter_map(|l| {
            let (id, rest) = l.split_once(':')?;
            let (value, label) = rest.split_once(" - ")?;
            Some((
                id.trim().parse().ok()?,
                (
                    value.trim().replace(',', "").parse().ok()?,
                    label.to_owned(),
                ),
            ))
        })
        .collect();
    (title, counters)
}

#[test]
fn a_real_media_driver_reads_as_aeronstat_reads_it_then_shows_dead_after_it_exits() {
    let Some(jar) = producer() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("aeron");
    let child = java(&jar, &dir)
        .args([
            "-Daeron.threading.mode=SHARED",
            "-Daeron.shared.idle.strategy=sleep-ms",
        ])
        // A short client timeout, so that the exited driver is dead soon.
        .arg("-Daeron.client.liveness.timeout=2000000000")
        .arg("io.aeron.driver.MediaDriver")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut driver = Driver(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        match aeron::read(&dir) {
            Ok(cnc) if cnc.heartbeat_ms > 0 && !cnc.counters.is_empty() => break cnc,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "no readable cnc.dat after 60 s: {other:?}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    let (title, stat) = aeron_stat(&jar, &dir);
    let second = aeron::read(&dir).unwrap();

    assert_eq!(first.header.pid, i64::from(driver.0.id()));
    assert_eq!(first.header.client_liveness_timeout_ns, 2_000_000_000);
    let (ma, mi, pa) = first.header.semver();
    assert!(
        title.contains(&format!("(CnC v{ma}.{mi}.{pa}), pid {}", first.header.pid)),
        "{title}"
    );
    assert!(
        second.liveness(aeron::now_ms()).alive,
        "{:?}",
        second.liveness(aeron::now_ms())
    );

    let ours: BTreeMap<i32, (i64, String)> = second
        .counters
        .iter()
        .map(|c| (c.id, (c.value, c.label.clone())))
        .collect();
    let ids = |m: &BTreeMap<i32, (i64, String)>| {
        m.iter()
            .map(|(id, (_, l))| (*id, l.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&ours), ids(&stat), "ids and labels");
    assert!(ours.len() >= 40, "{} counters", ours.len());
    // Counters that did not move between our two readings, AeronStat's
    // taken in between, must agree to the unit.
    let mut equal = 0;
    for c in &first.counters {
        let after = &ours[&c.id];
        if after.0 == c.value {
            assert_eq!(stat[&c.id].0, c.value, "counter {} {:?}", c.id, c.label);
            equal += 1;
        }
    }
    assert!(equal >= 30, "only {equal} counters held still");
    for c in second
        .counters
        .iter()
        .filter(|c| [0, 15, 34, 35, 43].contains(&c.id))
    {
        eprintln!(
            "{:>3} type {:>2} {:>12} (AeronStat {:>12}) {}",
            c.id, c.type_id, c.value, stat[&c.id].0, c.label
        );
    }
    // AeronStat does not print type ids; the driver's own counters are all
    // of Aeron's system-counter type, 0.
    assert!(
        second.counters.iter().all(|c| c.type_id == 0),
        "{:?}",
        second.counters
    );
    let by_label = |l: &str| {
        second
            .counters
            .iter()
            .find(|c| c.label.starts_with(l))
            .map(|c| c.value)
    };
    assert_eq!(
        by_label("Control protocol version"),
        stat.values()
            .find(|v| v.1 == "Control protocol version")
            .map(|v| v.0)
    );

    // SIGTERM: the driver shuts down and leaves its file behind.
    // SAFETY: kill takes no pointers; the pid is our child's, not yet reaped.
    let sent = unsafe { libc::kill(driver.0.id() as i32, libc::SIGTERM) };
    assert_eq!(sent, 0);
    let status = driver.0.wait().unwrap();
    eprintln!("driver exited: {status}");
    assert!(
        dir.join("cnc.dat").is_file(),
        "the driver removed its cnc.dat"
    );
    let stale = aeron::read(&dir).unwrap();
    assert_eq!(stale.counters.len(), second.counters.len());
    let last = stale.heartbeat_ms;
    let timeout = stale.liveness(aeron::now_ms()).timeout_ms;
    std::thread::sleep(Duration::from_millis(timeout as u64 + 300));
    let stale = aeron::read(&dir).unwrap();
    assert_eq!(stale.heartbeat_ms, last, "a heartbeat after exit");
    let liveness = stale.liveness(aeron::now_ms());
    assert!(!liveness.alive, "{liveness:?}");
}

#[test]
fn a_driver_in_another_mount_namespace_is_discovered_through_its_proc_root() {
    let Some(jar) = producer() else { return };
    // A private /dev/shm in a mount namespace of its own, as a container
    // has; unshare execs the shell, which execs java: one pid throughout.
    let name = format!("aeron-topdeck-test-{}", std::process::id());
    let script = format!(
        "mount -t tmpfs -o size=128m tmpfs /dev/shm && exec java \
         --add-opens java.base/jdk.internal.misc=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
         -Daeron.dir=/dev/shm/{name} -Daeron.threading.mode=SHARED -Daeron.shared.idle.strategy=sleep-ms \
         -cp '{}' io.aeron.driver.MediaDriver",
        jar.display()
    );
    let probe = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        // Not the producer missing but a privilege (CAP_SYS_ADMIN): said, not failed.
        eprintln!(
            "SKIPPED: unshare -m is not permitted here, so no second mount namespace can be made"
        );
        return;
    }
    let child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let _driver = Driver(child);
    assert!(
        !Path::new("/dev/shm").join(&name).exists(),
        "the namespace leaked"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let source = loop {
        let found = aeron::discover()
            .into_iter()
            .find(|s| s.path.to_string_lossy().contains(&name));
        if let Some(s) = found.filter(|s| aeron::read(&s.path).is_ok_and(|c| c.heartbeat_ms > 0)) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no driver found in the other namespace after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(source.via_pid, Some(pid));
    assert_eq!(
        source.path,
        PathBuf::from(format!("/proc/{pid}/root/dev/shm/{name}/cnc.dat"))
    );
    let cnc = aeron::read(&source.path).unwrap();
    assert_eq!(cnc.header.pid, i64::from(pid));
    // Its header's pid is its own in its pid namespace, the host's here:
    // the driver runs as the file's owner and started before its header
    // says, so it is named as its writer.
    let table = topdeck_procfs::table::Table::scan();
    assert_eq!(source.writer(&table, &cnc.header).unwrap(), Some(pid));
    assert!(cnc.liveness(aeron::now_ms()).alive);
    assert!(cnc.counters.len() >= 40);
}
