// SPDX-License-Identifier: Apache-2.0
//! The hsperfdata reader against hostile buffers and files, and against a
//! real JVM: its values must match `jcmd PerfCounter.print`, and reading it
//! a thousand times must leave `jstat` working and no lock of ours behind.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use topdeck_portholes::hsperf::{
    self, ByteOrder, ErrorKind, HsperfDir, Liveness, SyntheticBuffer, Units, Value, Variability,
};

fn sample() -> SyntheticBuffer {
    sample_in(ByteOrder::Little)
}

fn sample_in(order: ByteOrder) -> SyntheticBuffer {
    SyntheticBuffer::with_byte_order(order)
        .long(
            "sun.os.hrt.frequency",
            Units::Hertz,
            Variability::Constant,
            1_000_000_000,
        )
        .long(
            "sun.gc.collector.0.invocations",
            Units::Events,
            Variability::Monotonic,
            42,
        )
        .long(
            "sun.gc.collector.0.time",
            Units::Ticks,
            Variability::Monotonic,
            1_500_000_000,
        )
        .long(
            "sun.gc.generation.0.space.0.used",
            Units::Bytes,
            Variability::Variable,
            1 << 20,
        )
        .long("java.threads.live", Units::None, Variability::Variable, 11)
        .string(
            "java.property.java.vm.name",
            Variability::Constant,
            "OpenJDK 64-Bit Server VM",
        )
        .bytes(
            "sun.hidden.array",
            Units::None,
            Variability::Constant,
            &[1, 2, 0, 3],
        )
}

fn kind(bytes: &[u8]) -> ErrorKind {
    match hsperf::parse(bytes) {
        Ok(p) => panic!("parsed a hostile buffer: {p:?}"),
        Err(e) => e.kind().clone(),
    }
}

/// Offset of the entry called `name` in a buffer built by [`SyntheticBuffer`].
fn entry_start(bytes: &[u8], name: &str) -> usize {
    let at = bytes
        .windows(name.len() + 1)
        .position(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0)
        .expect("name in buffer");
    at - 20
}

fn put_i32(bytes: &mut [u8], at: usize, value: i32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

#[test]
fn a_buffer_as_the_jvm_lays_it_out_parses_to_every_field() {
    let perf = hsperf::parse(&sample().build()).unwrap();
    assert_eq!(perf.prologue.major, 2);
    assert_eq!(perf.prologue.num_entries, 7);
    assert_eq!(perf.entries.len(), 7);
    assert_eq!(perf.long("sun.gc.collector.0.invocations"), Some(42));
    assert_eq!(perf.seconds("sun.gc.collector.0.time"), Some(1.5));
    assert_eq!(
        perf.seconds("sun.gc.collector.0.invocations"),
        None,
        "events are not ticks"
    );
    let vm = perf.get("java.property.java.vm.name").unwrap();
    assert_eq!(vm.value, Value::String("OpenJDK 64-Bit Server VM".into()));
    assert!(vm.supported);
    assert_eq!(vm.units, Units::String);
    let hidden = perf.get("sun.hidden.array").unwrap();
    assert_eq!(hidden.value, Value::Bytes(vec![1, 2, 0, 3]));
    assert!(!hidden.supported);
    assert_eq!(
        perf.get("java.threads.live").unwrap().variability,
        Variability::Variable
    );
}

#[test]
fn a_big_endian_buffer_reads_the_same_values() {
    let little = hsperf::parse(&sample().build()).unwrap();
    let big = hsperf::parse(&sample_in(ByteOrder::Big).build()).unwrap();
    assert_eq!(big.prologue.byte_order, ByteOrder::Big);
    assert_eq!(big.entries, little.entries);
}

#[test]
fn every_truncation_of_a_valid_buffer_is_an_error() {
    let bytes = sample().build();
    for len in 0..bytes.len() {
        let kind = kind(&bytes[..len]);
        assert!(
            matches!(kind, ErrorKind::Truncated { .. }),
            "at {len}: {kind:?}"
        );
    }
}

#[test]
fn a_flipped_byte_order_byte_is_an_error() {
    let mut bytes = sample().build();
    bytes[4] = 0;
    // Read big-endian, `used` becomes far larger than the buffer, or negative.
    let flipped = kind(&bytes);
    assert!(
        matches!(
            flipped,
            ErrorKind::Truncated { .. } | ErrorKind::Corrupt { offset: 8, .. }
        ),
        "{flipped:?}"
    );
    bytes[4] = 7;
    assert_eq!(kind(&bytes), ErrorKind::BadByteOrder { found: 7 });
}

#[test]
fn a_wrong_magic_or_version_is_an_error() {
    let mut bytes = sample().build();
    bytes[5] = 1;
    assert_eq!(
        kind(&bytes),
        ErrorKind::UnsupportedVersion { major: 1, minor: 0 }
    );
    bytes[0] = 0xc0;
    assert!(matches!(kind(&bytes), ErrorKind::BadMagic { .. }));
}

#[test]
fn a_starting_jvm_is_not_accessible() {
    let bytes = sample().accessible(false).build();
    assert_eq!(kind(&bytes), ErrorKind::NotAccessible);
}

#[test]
fn a_huge_num_entries_stops_at_the_end_of_the_used_area() {
    let mut bytes = sample().build();
    put_i32(&mut bytes, 28, i32::MAX);
    let perf = hsperf::parse(&bytes).unwrap();
    assert_eq!(perf.entries.len(), 7);
    put_i32(&mut bytes, 28, -1);
    assert!(matches!(kind(&bytes), ErrorKind::Corrupt { .. }));
}

#[test]
fn a_zero_entry_length_ends_the_entries_as_memory_not_yet_filled_does() {
    let mut bytes = sample().build();
    let start = entry_start(&bytes, "java.threads.live");
    put_i32(&mut bytes, start, 0);
    let perf = hsperf::parse(&bytes).unwrap();
    assert_eq!(perf.entries.len(), 4);
}

#[test]
fn an_announced_last_entry_still_being_filled_is_not_read() {
    let mut bytes = sample().build();
    let start = entry_start(&bytes, "sun.hidden.array");
    bytes[start + 4..].fill(0);
    assert_eq!(hsperf::parse(&bytes).unwrap().entries.len(), 6);
    // The same zeros in an entry that is not the last are corruption.
    let mut bytes = sample().build();
    let start = entry_start(&bytes, "java.threads.live");
    bytes[start + 4..start + 20].fill(0);
    assert!(matches!(
        kind(&bytes),
        ErrorKind::Corrupt { entry: Some(4), .. }
    ));
}

#[test]
fn an_entry_length_past_the_end_is_an_error() {
    let mut bytes = sample().build();
    let start = entry_start(&bytes, "java.threads.live");
    put_i32(&mut bytes, start, 1 << 20);
    assert!(matches!(
        kind(&bytes),
        ErrorKind::Corrupt { entry: Some(4), .. }
    ));
    put_i32(&mut bytes, start, 13);
    assert!(
        matches!(kind(&bytes), ErrorKind::Corrupt { .. }),
        "unaligned"
    );
}

#[test]
fn a_name_without_nul_is_an_error() {
    // 20 + 3 + 1 = 24: the data follows the NUL with no padding.
    let bytes = SyntheticBuffer::new()
        .long("abc", Units::None, Variability::Constant, -1)
        .build();
    let mut bytes = bytes;
    bytes[32 + 23] = b'x';
    assert!(matches!(kind(&bytes), ErrorKind::Corrupt { .. }));
}

/// Asserts that `bytes`, after `change`, are reported as corrupt.
fn assert_corrupt(bytes: &[u8], what: &str, change: impl FnOnce(&mut [u8])) {
    let mut hostile = bytes.to_vec();
    change(&mut hostile);
    let kind = kind(&hostile);
    assert!(
        matches!(kind, ErrorKind::Corrupt { .. }),
        "{what}: {kind:?}"
    );
}

#[test]
fn negative_lengths_offsets_and_counts_are_errors() {
    let bytes = sample().build();
    let start = entry_start(&bytes, "java.threads.live");
    for field in [0, 4, 8, 16] {
        assert_corrupt(&bytes, &format!("entry field {field}"), |b| {
            put_i32(b, start + field, -4)
        });
    }
    for field in [8, 12, 24, 28] {
        assert_corrupt(&bytes, &format!("prologue field {field}"), |b| {
            put_i32(b, field, i32::MIN)
        });
    }
}

#[test]
fn offsets_out_of_order_unknown_units_and_types_are_errors() {
    let bytes = sample().build();
    let start = entry_start(&bytes, "java.threads.live");
    let cases: [(&str, usize, &[u8]); 6] = [
        ("name inside the header", 4, &8i32.to_le_bytes()),
        ("data before the name ends", 16, &20i32.to_le_bytes()),
        ("data past the entry", 16, &4096i32.to_le_bytes()),
        ("an int type no JVM writes", 12, b"I"),
        ("unknown units", 14, &[9]),
        ("unknown variability", 15, &[0]),
    ];
    for (what, field, value) in cases {
        assert_corrupt(&bytes, what, |b| {
            b[start + field..start + field + value.len()].copy_from_slice(value)
        });
    }
    let array = entry_start(&bytes, "sun.hidden.array");
    assert_corrupt(&bytes, "vector_length past the entry", |b| {
        put_i32(b, array + 8, 1000)
    });
}

#[test]
fn any_single_byte_change_parses_or_errs_without_panicking() {
    let bytes = sample().build();
    let mut parsed = 0;
    for at in 0..bytes.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut hostile = bytes.clone();
            hostile[at] ^= flip;
            parsed += usize::from(hostile.len() == bytes.len() && hsperf::parse(&hostile).is_ok());
        }
    }
    // Value bytes may change freely; header bytes mostly may not.
    assert!(parsed > 0 && parsed < bytes.len() * 3, "{parsed}");
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_file_is_read_after_the_directory_and_file_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write_file(tmp.path(), "4242", &sample().build());
    let perf = hsperf::read(&path).unwrap();
    assert_eq!(perf.long("java.threads.live"), Some(11));
    assert_eq!(
        HsperfDir::open(tmp.path()).unwrap().pids().unwrap(),
        vec![4242]
    );
}

#[test]
fn links_fifos_and_oversized_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let real = write_file(tmp.path(), "real", &sample().build());
    symlink(&real, tmp.path().join("1")).unwrap();
    let err = hsperf::read(&tmp.path().join("1")).unwrap_err();
    assert_eq!(*err.kind(), ErrorKind::NotRegularFile, "{err}");
    std::fs::hard_link(&real, tmp.path().join("2")).unwrap();
    let err = hsperf::read(&tmp.path().join("2")).unwrap_err();
    assert_eq!(*err.kind(), ErrorKind::HardLinked { links: 2 }, "{err}");
    let fifo = tmp.path().join("3");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let err = hsperf::read(&fifo).unwrap_err();
    assert_eq!(*err.kind(), ErrorKind::NotRegularFile, "{err}");
    let big = std::fs::File::create(tmp.path().join("4")).unwrap();
    big.set_len(hsperf::MAX_FILE_SIZE + 1).unwrap();
    let err = hsperf::read(&tmp.path().join("4")).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TooLarge { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("PerfDataMemorySize") && message.contains("/4"),
        "{message}"
    );
}

#[test]
fn a_symlinked_or_world_writable_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("hsperfdata_x");
    std::fs::create_dir(&dir).unwrap();
    write_file(&dir, "1", &sample().build());
    symlink(&dir, tmp.path().join("hsperfdata_y")).unwrap();
    let err = hsperf::read(&tmp.path().join("hsperfdata_y/1")).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::InsecureDirectory { .. }),
        "{err}"
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = hsperf::read(&dir.join("1")).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::InsecureDirectory { .. }),
        "{err}"
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(hsperf::read(&dir.join("1")).is_ok());
}

// ---- A real JVM -------------------------------------------------------

/// The tools the JVM tests need, or why they are missing.
fn jdk() -> Result<(), String> {
    for tool in ["javac", "java", "jcmd", "jstat"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(format!("{tool} is not installed"));
        }
    }
    Ok(())
}

/// Whether to go on; a missing JDK fails under CI and is reported otherwise.
fn jdk_or_skip(test: &str) -> bool {
    match jdk() {
        Ok(()) => true,
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("{test}: {why}; run scripts/reach/hsperf.sh")
        }
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}; run scripts/reach/hsperf.sh");
            false
        }
    }
}

/// The JVM under test: allocates, prints "quiet", then sleeps.
const PROGRAM: &str = include_str!("../../../examples/jvm/Alloc.java");

/// A JVM that allocated, then sleeps; killed on drop.
struct Jvm {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Jvm {
    /// SIGTERM first: a JVM removes its file on SIGTERM, and would leave
    /// it in /tmp on SIGKILL.
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill takes no pointers; `pid` is our unreaped child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        for _ in 0..250 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_quiet_jvm() -> Jvm {
    start_quiet_jvm_with(&[], "")
}

/// Compiles and starts the program through `prefix` (a command that runs
/// its last argument with sh), with `setup` run first.
fn start_quiet_jvm_with(prefix: &[&str], setup: &str) -> Jvm {
    // Outside /tmp, which the namespaced JVM mounts over (the target
    // directory may be under /tmp too: a checkout in /tmp).
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(dir.path().join("Alloc.java"), PROGRAM).unwrap();
    run_ok(
        Command::new("javac")
            .arg("Alloc.java")
            .current_dir(dir.path()),
    );
    let java = format!("{setup} exec java -Xmx64m -XX:+UseSerialGC -cp . Alloc 20000");
    let mut command = match prefix.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).args(["sh", "-c", &java]);
            c
        }
        None => {
            let mut c = Command::new("sh");
            c.args(["-c", &java]);
            c
        }
    };
    let mut child = command
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let jvm = Jvm { child, _dir: dir };
    assert!(
        line.starts_with("quiet"),
        "the JVM did not finish its loop: {line:?}"
    );
    jvm
}

/// Runs `command`, which must succeed.
fn run_ok(command: &mut Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn jcmd_counters(pid: u32) -> HashMap<String, String> {
    let out = run_ok(Command::new("jcmd").args([&pid.to_string(), "PerfCounter.print"]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The file discover() finds for the JVM whose pid here is `pid`, which
/// must hold its lock.
fn discovered(pid: u32) -> hsperf::Jvm {
    let found = hsperf::discover();
    let jvm = found
        .jvms
        .iter()
        .find(|j| j.host_pid == Some(pid))
        .unwrap_or_else(|| panic!("discover() did not find pid {pid}: {found:?}"));
    assert_eq!(
        jvm.liveness,
        Liveness::Locked { holder: Some(pid) },
        "{jvm:?}"
    );
    jvm.clone()
}

/// A quiet JVM found by discover() with its file accessible, or `None`
/// (reported) when the JDK is missing.
fn quiet_jvm_or_skip(test: &str) -> Option<(Jvm, u32, std::path::PathBuf)> {
    if !jdk_or_skip(test) {
        return None;
    }
    let jvm = start_quiet_jvm();
    let pid = jvm.child.id();
    let path = discovered(pid).path;
    hsperf::read_when_accessible(&path, Duration::from_secs(5)).unwrap();
    Some((jvm, pid, path))
}

#[test]
fn a_quiet_jvm_reads_as_jcmd_prints_it() {
    let Some((_jvm, pid, path)) = quiet_jvm_or_skip("a_quiet_jvm_reads_as_jcmd_prints_it") else {
        return;
    };
    // The first attach starts the JVM's attach listener thread; start it
    // before comparing so that java.threads.live is settled.
    jcmd_counters(pid);
    let before = hsperf::read(&path).unwrap();
    let jcmd = jcmd_counters(pid);
    let after = hsperf::read(&path).unwrap();
    for name in [
        "sun.gc.collector.0.invocations",
        "sun.gc.generation.0.space.0.used",
        "java.threads.live",
    ] {
        let theirs: i64 = jcmd[name].parse().unwrap();
        let (a, b) = (before.long(name).unwrap(), after.long(name).unwrap());
        eprintln!("{name}: topdeck {a} then {b}, jcmd {theirs}");
        if name == "sun.gc.collector.0.invocations" {
            assert!(a > 0, "the loop made no collection");
            assert_eq!((a, b), (theirs, theirs), "{name}");
        } else {
            assert!(
                a.min(b) <= theirs && theirs <= a.max(b),
                "{name}: jcmd {theirs} not within [{a}, {b}]"
            );
        }
    }
    let frequency = after.hrt_frequency().unwrap();
    assert_eq!(
        jcmd["sun.os.hrt.frequency"].parse::<u64>().unwrap(),
        frequency
    );
    let gc_seconds = after.seconds("sun.gc.collector.0.time").unwrap();
    let jcmd_ticks: f64 = jcmd["sun.gc.collector.0.time"].parse().unwrap();
    assert_eq!(gc_seconds, jcmd_ticks / frequency as f64);
    assert_eq!(after.prologue.overflow, 0);
    assert_eq!(after.entries.len(), after.prologue.num_entries as usize);
    // A JDK 17 file uses every unit and every variability.
    let units: std::collections::HashSet<_> = after
        .entries
        .iter()
        .map(|e| format!("{:?}", e.units))
        .collect();
    let variabilities: std::collections::HashSet<_> = after
        .entries
        .iter()
        .map(|e| format!("{:?}", e.variability))
        .collect();
    assert_eq!(
        (units.len(), variabilities.len()),
        (6, 3),
        "{units:?} {variabilities:?}"
    );
    assert!(
        after.entries.iter().any(|e| e.supported) && after.entries.iter().any(|e| !e.supported)
    );
    // jcmd also prints the prologue's fields as sun.perfdata.* counters.
    let prologue = [
        ("sun.perfdata.majorVersion", i64::from(after.prologue.major)),
        ("sun.perfdata.minorVersion", i64::from(after.prologue.minor)),
        ("sun.perfdata.used", i64::from(after.prologue.used)),
        ("sun.perfdata.overflow", i64::from(after.prologue.overflow)),
        (
            "sun.perfdata.size",
            std::fs::metadata(&path).unwrap().len() as i64,
        ),
    ];
    for (name, ours) in prologue {
        assert_eq!(jcmd[name].parse::<i64>().unwrap(), ours, "{name}");
    }
    let entries = jcmd
        .keys()
        .filter(|k| !k.starts_with("sun.perfdata."))
        .count();
    assert_eq!(
        after.entries.len(),
        entries,
        "jcmd prints every counter once"
    );
    assert!(after.entries.iter().all(|e| jcmd.contains_key(&e.name)));
}

#[test]
fn a_thousand_reads_leave_jstat_working_and_no_lock_of_ours() {
    let Some((_jvm, pid, path)) =
        quiet_jvm_or_skip("a_thousand_reads_leave_jstat_working_and_no_lock_of_ours")
    else {
        return;
    };
    for _ in 0..1000 {
        hsperf::read(&path).unwrap();
    }
    let inode = std::fs::metadata(&path).unwrap().ino();
    let locks = std::fs::read_to_string("/proc/locks").unwrap();
    let on_file: Vec<&str> = locks
        .lines()
        .filter(|l| l.contains(&format!(":{inode} ")))
        .collect();
    let ours = std::process::id().to_string();
    assert!(
        on_file
            .iter()
            .all(|l| l.split_whitespace().nth(4) != Some(ours.as_str())),
        "{on_file:?}"
    );
    assert!(
        on_file
            .iter()
            .any(|l| l.split_whitespace().nth(4) == Some(pid.to_string().as_str())),
        "the JVM's own lock is gone: {on_file:?}"
    );
    let jstat = run_ok(Command::new("jstat").args(["-gcutil", &pid.to_string()]));
    let text = String::from_utf8_lossy(&jstat.stdout);
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let [header, row] = lines.as_slice() else {
        panic!("jstat printed {text}");
    };
    let ygc = header
        .iter()
        .position(|&c| c == "YGC")
        .expect("a YGC column");
    let ours = hsperf::read(&path)
        .unwrap()
        .long("sun.gc.collector.0.invocations");
    assert_eq!(row[ygc].parse().ok(), ours, "jstat: {text}");
}

#[test]
fn a_jvm_in_its_own_pid_and_mount_namespace_is_found_with_its_host_pid() {
    let test = "a_jvm_in_its_own_pid_and_mount_namespace_is_found_with_its_host_pid";
    if !jdk_or_skip(test) {
        return;
    }
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED {test}: making pid and mount namespaces needs root");
        return;
    }
    // A container's view: pid 1 in a pid namespace, its own /tmp.
    let jvm = start_quiet_jvm_with(
        &["unshare", "--pid", "--fork", "--mount", "--kill-child"],
        "mount -t tmpfs -o mode=1777 topdeck-hsperf-test /tmp &&",
    );
    let unshare = jvm.child.id();
    let children =
        std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
    let java: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    let seen = discovered(java);
    assert_eq!(seen.pid, 1, "{seen:?}");
    assert!(seen.path.starts_with("/proc"), "{seen:?}");
    let perf = seen.read().unwrap();
    assert!(perf.long("sun.gc.collector.0.invocations").unwrap() > 0);
    assert!(!Path::new(&format!("/tmp/hsperfdata_root/{java}")).exists());
}

#[test]
fn an_unlocked_file_is_running_while_its_pid_lives_and_stale_without_it() {
    // A directory of a made-up user in the real /tmp, where discover()
    // looks; removed on drop.
    let dir = tempfile::Builder::new()
        .prefix("hsperfdata_topdeck-test-")
        .tempdir_in("/tmp")
        .unwrap();
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let live = sleeper.id();
    // pid_max is at most 2^22: no process has this pid.
    let gone = 4_194_305_u32;
    for pid in [live, gone] {
        write_file(dir.path(), &pid.to_string(), &sample().build());
    }
    // A directory that fails the checks is reported, and the others read.
    let insecure = tempfile::Builder::new()
        .prefix("hsperfdata_topdeck-test-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(insecure.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let found = hsperf::discover();
    assert!(
        found
            .errors
            .iter()
            .any(|e| e.path() == Some(insecure.path())
                && matches!(e.kind(), ErrorKind::InsecureDirectory { .. })),
        "{found:?}"
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let ours: Vec<_> = found
        .jvms
        .iter()
        .filter(|j| j.path.starts_with(dir.path()))
        .collect();
    assert_eq!(ours.len(), 2, "{found:?}");
    let user = dir
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .strip_prefix("hsperfdata_")
        .unwrap();
    assert!(ours.iter().all(|j| j.user == user));
    let by_pid = |pid| ours.iter().find(|j| j.pid == pid).unwrap();
    assert_eq!(by_pid(live).host_pid, Some(live));
    assert_eq!(by_pid(live).liveness, Liveness::Running);
    assert_eq!(by_pid(gone).host_pid, None);
    assert_eq!(by_pid(gone).liveness, Liveness::Stale);
    assert_eq!(
        by_pid(live).read().unwrap().long("java.threads.live"),
        Some(11)
    );
}
