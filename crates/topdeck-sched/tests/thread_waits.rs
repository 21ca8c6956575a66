// SPDX-License-Identifier: Apache-2.0
//! Kernel tests of the thread-waits array (root only; docs/FORMAT.md
//! "Thread waits"): slots grow where threads wait and split by whom they
//! waited behind; any user maps the pin read-only and nobody writes it;
//! the header reads gone however the probe goes; pins are replaced or
//! refused as the contract says. Raw `bpf(2)`, `mmap(2)` and `mprotect(2)`
//! calls through libc, because what the kernel allows is the point.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use topdeck_format::waits;
use topdeck_procfs::testing::root_or_skip;
use topdeck_sched::testing::{spawn_in, CgroupGuard, Worker};
use topdeck_sched::{ErrorKind, Flavour, Hierarchy, LoadOptions, Probe};

/// The tests share CPU 0 and load probes; one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const WHY: &str = "it loads BPF programs, pins in bpffs and creates cgroups";
const CHILD_PIN: &str = "TOPDECK_TEST_CHILD_PIN";
const CHILD_RAW_TP: &str = "TOPDECK_TEST_CHILD_RAW_TP";

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A unique pin path in its own directory under bpffs; the pin (and any
/// temporary one) and the directory are removed on drop.
struct PinGuard {
    dir: PathBuf,
    path: PathBuf,
}

impl PinGuard {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = PathBuf::from(format!(
            "/sys/fs/bpf/topdeck-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let path = dir.join("thread_waits");
        Self { dir, path }
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

fn load(pin: &Path) -> topdeck_sched::Result<Probe> {
    load_as(pin, None)
}

fn load_as(pin: &Path, flavour: Option<Flavour>) -> topdeck_sched::Result<Probe> {
    let h = Hierarchy::detect().unwrap();
    Probe::load_opts(
        &h,
        &LoadOptions {
            flavour,
            thread_waits: Some(pin.to_path_buf()),
            ..LoadOptions::default()
        },
    )
}

/// A single-threaded spinner (its pid is its only tid) on CPU 0 in `cg`.
fn spinner(cg: &CgroupGuard) -> Worker {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "while :; do :; done"]);
    Worker(spawn_in(cmd, &[cg.dir.join("cgroup.procs")]).expect("spawning a spinner"))
}

/// The victim's waits over a second spent behind `hog` on CPU 0.
fn waits_behind(same_cgroup: bool, flavour: Option<Flavour>) -> Option<waits::Waits> {
    if !root_or_skip(WHY) {
        return None;
    }
    let _serial = serial();
    let pin = PinGuard::new();
    let probe = load_as(&pin.path, flavour).unwrap();
    let h = Hierarchy::detect().unwrap();
    let victim_cg = CgroupGuard::new(&h, "victim");
    let hog_cg = CgroupGuard::new(&h, "hog");
    let victim = spinner(&victim_cg);
    let _hog = spinner(if same_cgroup { &victim_cg } else { &hog_cg });
    let tid = victim.0.id();
    let before = probe.thread_wait_of(tid).expect("the victim has a slot");
    std::thread::sleep(Duration::from_secs(1));
    let after = probe.thread_wait_of(tid).expect("the victim has a slot");
    Some(after.since(&before))
}

/// The parts add up to the total, but for the one wait a read may catch
/// between the probe's two adds (slots are read while they change).
fn assert_parts_add_up(w: &waits::Waits) {
    let parts = w.own + w.other + w.system;
    assert!(
        w.total.abs_diff(parts) <= 20_000_000,
        "the parts add up: {w:?}"
    );
}

#[test]
fn a_thread_behind_another_cgroups_hog_waits_mostly_in_other() {
    let Some(w) = waits_behind(false, None) else {
        return;
    };
    // Two spinners share CPU 0: the victim waits about half the second.
    assert!(w.total >= 200_000_000, "too little wait: {w:?}");
    assert_parts_add_up(&w);
    assert!(w.other * 10 >= w.total * 8, "mostly behind the hog: {w:?}");
}

#[test]
fn a_thread_behind_its_own_cgroups_hog_waits_mostly_in_own() {
    let Some(w) = waits_behind(true, None) else {
        return;
    };
    assert!(w.total >= 200_000_000, "too little wait: {w:?}");
    assert_parts_add_up(&w);
    assert!(
        w.own * 10 >= w.total * 8,
        "mostly behind its own cgroup: {w:?}"
    );
}

#[test]
fn raw_tp_keeps_thread_waits_too() {
    let Some(w) = waits_behind(false, Some(Flavour::RawTp)) else {
        return;
    };
    assert!(w.total >= 200_000_000, "too little wait: {w:?}");
    assert_parts_add_up(&w);
    assert!(w.other * 10 >= w.total * 8, "mostly behind the hog: {w:?}");
}

/// `/proc/<tid>/schedstat`'s run-queue wait, ns.
fn run_delay(tid: u32) -> u64 {
    let text = fs::read_to_string(format!("/proc/{tid}/schedstat")).unwrap();
    topdeck_sched::fallback::parse_schedstat(&text).unwrap().0
}

/// Pins process `pid` to `cpu`.
fn pin_to(pid: u32, cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid as i32, std::mem::size_of_val(&set), &set);
    }
}

/// A thread moved between run queues while it waits: the kernel adds the
/// wait so far to run_delay and restarts last_queued on the new queue, so
/// a probe reading last_queued alone would count only the last stretch.
/// The victim, queued behind a hog on CPU 0, is moved to CPU 1 and back
/// every 7 ms; its waits in the array must match the kernel's run_delay.
#[test]
fn a_wait_moved_to_another_cpu_counts_whole() {
    if !root_or_skip(WHY) {
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let _serial = serial();
    let pin = PinGuard::new();
    let probe = load(&pin.path).unwrap();
    let h = Hierarchy::detect().unwrap();
    let victim_cg = CgroupGuard::new(&h, "victim");
    let hog_cg = CgroupGuard::new(&h, "hog");
    let victim = spinner(&victim_cg);
    let _hog = spinner(&hog_cg);
    let tid = victim.0.id();
    std::thread::sleep(Duration::from_millis(100));
    let (before, delay_before) = (probe.thread_wait_of(tid).unwrap(), run_delay(tid));
    let end = Instant::now() + Duration::from_secs(1);
    let mut cpu = 0;
    while Instant::now() < end {
        cpu = 1 - cpu;
        pin_to(tid, cpu);
        std::thread::sleep(Duration::from_millis(7));
    }
    pin_to(tid, 0);
    // Off the CPU it ends on, so that its last wait is closed in both.
    std::thread::sleep(Duration::from_millis(50));
    let (after, delay_after) = (probe.thread_wait_of(tid).unwrap(), run_delay(tid));
    let ours = after.since(&before).total;
    let kernel = delay_after - delay_before;
    eprintln!("probe {ours} ns, kernel run_delay {kernel} ns");
    assert!(
        kernel >= 100_000_000,
        "too little wait to compare: {kernel} ns"
    );
    // One wait in progress at either read may fall on one side only.
    assert!(
        ours.abs_diff(kernel) <= kernel / 10 + 30_000_000,
        "the probe counted {ours} ns where the kernel counted {kernel} ns"
    );
}

/// `bpf_attr` for BPF_OBJ_GET.
#[repr(C)]
#[derive(Default)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    path_fd: i32,
    _pad: [u32; 27],
}

/// `bpf_attr` for BPF_MAP_UPDATE_ELEM.
#[repr(C)]
#[derive(Default)]
struct UpdateAttr {
    map_fd: u32,
    _pad0: u32,
    key: u64,
    value: u64,
    flags: u64,
    _pad: [u32; 24],
}

const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_OBJ_GET: libc::c_long = 7;

/// `bpf(BPF_OBJ_GET)` with flags 0: the fd, or -errno.
fn raw_obj_get(path: &std::ffi::CStr) -> i32 {
    let attr = ObjGetAttr {
        pathname: path.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: a bpf_attr of the right layout, its size passed along.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            &attr as *const ObjGetAttr,
            std::mem::size_of::<ObjGetAttr>(),
        )
    };
    if r < 0 {
        -errno()
    } else {
        r as i32
    }
}

/// `bpf(BPF_MAP_UPDATE_ELEM)` of entry `key` with zeros: 0 or -errno.
fn raw_update(fd: i32, key: u32) -> i32 {
    let value = [0u8; waits::ENTRY_BYTES];
    let attr = UpdateAttr {
        map_fd: fd as u32,
        key: &key as *const u32 as u64,
        value: value.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: a bpf_attr of the right layout pointing at live buffers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_ELEM,
            &attr as *const UpdateAttr,
            std::mem::size_of::<UpdateAttr>(),
        )
    };
    if r < 0 {
        -errno()
    } else {
        0
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Bytes of a mapping of the whole array.
fn map_len(entries: u32) -> usize {
    let page = 4096;
    (entries as usize * waits::ENTRY_BYTES).div_ceil(page) * page
}

/// A read-only shared mapping of the array behind `fd`, unmapped on drop.
struct Mapping {
    at: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(fd: i32, len: usize) -> Self {
        // SAFETY: a fresh read-only mapping; the kernel checks fd and len.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(
            at,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        Self { at: at.cast(), len }
    }

    fn u64_at(&self, off: usize) -> u64 {
        assert!(off + 8 <= self.len);
        // SAFETY: inside the mapping, 8-aligned (entries are 32 bytes);
        // volatile because the kernel changes it under us.
        unsafe { std::ptr::read_volatile(self.at.add(off).cast::<u64>()) }
    }

    fn u32_at(&self, off: usize) -> u32 {
        assert!(off + 4 <= self.len);
        // SAFETY: as u64_at.
        unsafe { std::ptr::read_volatile(self.at.add(off).cast::<u32>()) }
    }

    fn state(&self) -> u64 {
        self.u64_at(waits::header::STATE)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made.
        unsafe { libc::munmap(self.at.cast(), self.len) };
    }
}

/// What the unprivileged child found, as its exit status: 0 when all is
/// as the contract says, else the step that was not.
fn unprivileged_child(path: &std::ffi::CStr, len: usize) -> i32 {
    // SAFETY: only system calls between fork and _exit (no allocation,
    // no locks), on buffers and mappings this function owns.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(65534) != 0
            || libc::setuid(65534) != 0
        {
            return 10;
        }
        let fd = raw_obj_get(path);
        if fd < 0 {
            return 11;
        }
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if at == libc::MAP_FAILED {
            return 12;
        }
        let magic = std::ptr::read_volatile(at.cast::<u32>());
        let state =
            std::ptr::read_volatile(at.cast::<u8>().add(waits::header::STATE).cast::<u64>());
        if magic != waits::MAGIC || state != waits::LIVE {
            return 13;
        }
        let own = waits::slot_offset(libc::getpid() as u32);
        if own + waits::ENTRY_BYTES > len {
            return 14;
        }
        let _ = std::ptr::read_volatile(at.cast::<u8>().add(own).cast::<u64>());
        let w = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if w != libc::MAP_FAILED {
            return 15;
        }
        if libc::mprotect(at, len, libc::PROT_READ | libc::PROT_WRITE) == 0 {
            return 16;
        }
        if raw_update(fd, 0) == 0 || raw_update(fd, 3) == 0 {
            return 17;
        }
        if libc::unlink(path.as_ptr()) == 0 {
            return 18;
        }
        0
    }
}

#[test]
fn anyone_maps_the_pin_read_only_and_nobody_writes_it() {
    if !root_or_skip(WHY) {
        return;
    }
    let _serial = serial();
    let pin = PinGuard::new();
    let probe = load(&pin.path).unwrap();
    let entries = probe.thread_waits().unwrap().entries();
    let len = map_len(entries);
    let meta = fs::metadata(&pin.path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.mode() & 0o777, 0o666, "the pin is open to everyone");
    assert_eq!(fs::metadata(&pin.dir).unwrap().mode() & 0o777, 0o755);

    let c = std::ffi::CString::new(pin.path.as_os_str().as_encoded_bytes()).unwrap();
    // Root cannot write it either: it is frozen.
    let fd = raw_obj_get(&c);
    assert!(fd >= 0, "root's BPF_OBJ_GET: {}", -fd);
    assert_eq!(raw_update(fd, 0), -libc::EPERM, "root's update is refused");
    assert_eq!(raw_update(fd, 5), -libc::EPERM, "root's update is refused");
    let m = Mapping::new(fd, len);
    assert_eq!(m.u32_at(waits::header::MAGIC), waits::MAGIC);
    assert_eq!(m.u32_at(waits::header::VERSION), waits::VERSION);
    assert_eq!(m.state(), waits::LIVE);
    assert_eq!(m.u32_at(waits::header::ENTRIES), entries);
    assert_eq!(m.u32_at(waits::header::AGENT_PID), std::process::id());
    assert!(m.u64_at(waits::header::STARTED_NS) > 0);
    // SAFETY: closing the descriptor this test opened.
    unsafe { libc::close(fd) };

    // SAFETY: the child makes only system calls before _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = unprivileged_child(&c, len);
        // SAFETY: leaving the forked child without running anything else.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child status {status}");
    let step = libc::WEXITSTATUS(status);
    let what = match step {
        0 => "",
        10 => "could not drop privileges",
        11 => "BPF_OBJ_GET was refused",
        12 => "the read-only shared mapping was refused",
        13 => "the header did not read live",
        14 => "its own slot lies past the mapping",
        15 => "a writable mapping was allowed",
        16 => "mprotect to PROT_WRITE was allowed",
        17 => "a map update was allowed",
        18 => "unlinking the pin was allowed",
        _ => "unknown",
    };
    assert_eq!(step, 0, "as nobody: {what}");
    assert!(pin.path.exists(), "the pin is still there");
    drop(probe);
}

#[test]
fn a_dropped_probe_reads_gone_and_its_pin_goes() {
    if !root_or_skip(WHY) {
        return;
    }
    let _serial = serial();
    let pin = PinGuard::new();
    let probe = load(&pin.path).unwrap();
    let len = map_len(probe.thread_waits().unwrap().entries());
    let c = std::ffi::CString::new(pin.path.as_os_str().as_encoded_bytes()).unwrap();
    let fd = raw_obj_get(&c);
    assert!(fd >= 0);
    let m = Mapping::new(fd, len);
    assert_eq!(m.state(), waits::LIVE);
    drop(probe);
    assert_eq!(m.state(), waits::GONE, "the array reads gone");
    assert!(!pin.path.exists(), "the pin is removed");
    // SAFETY: closing the descriptor this test opened.
    unsafe { libc::close(fd) };
}

#[test]
fn a_second_probe_refuses_while_the_first_is_live() {
    if !root_or_skip(WHY) {
        return;
    }
    let _serial = serial();
    let pin = PinGuard::new();
    let first = load(&pin.path).unwrap();
    let e = load(&pin.path).expect_err("a second probe at the same pin");
    assert_eq!(e.kind(), ErrorKind::ThreadWaits);
    let msg = e.to_string();
    assert!(
        msg.contains("another agent") && msg.contains(&std::process::id().to_string()),
        "{msg}"
    );
    assert!(msg.contains(&pin.path.display().to_string()), "{msg}");
    drop(first);
}

#[test]
fn a_pin_directory_others_may_write_is_refused() {
    if !root_or_skip(WHY) {
        return;
    }
    let _serial = serial();
    let pin = PinGuard::new();
    // Loading once mounts bpffs if need be.
    drop(load(&PinGuard::new().path).unwrap());
    fs::create_dir(&pin.dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&pin.dir, fs::Permissions::from_mode(0o777)).unwrap();
    let e = load(&pin.path).expect_err("a world-writable pin directory");
    assert_eq!(e.kind(), ErrorKind::ThreadWaits);
    assert!(e.to_string().contains("refusing"), "{e}");
    assert!(!pin.path.exists());
}

/// Not a test: an agent stand-in run by
/// `a_killed_agent_reads_gone_and_its_pin_is_replaced` in a child
/// (`--ignored --exact child_agent`): it pins at `TOPDECK_TEST_CHILD_PIN`
/// and waits to be killed.
#[test]
#[ignore = "agent body, run in a child process"]
fn child_agent() {
    let Some(pin) = std::env::var_os(CHILD_PIN) else {
        return;
    };
    let flavour = std::env::var_os(CHILD_RAW_TP).map(|_| Flavour::RawTp);
    let _probe = load_as(Path::new(&pin), flavour).unwrap();
    println!("pinned");
    std::thread::sleep(Duration::from_secs(60));
}

/// Kills its child on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_killed_agent_reads_gone_and_its_pin_is_replaced() {
    killed_agent(false);
}

#[test]
fn a_killed_raw_tp_agent_reads_gone_too() {
    killed_agent(true);
}

/// An agent stand-in (tp_btf, or raw_tp) SIGKILLed: its array reads gone
/// through a mapping taken before, and the next probe replaces its pin.
fn killed_agent(raw_tp: bool) {
    if !root_or_skip(WHY) {
        return;
    }
    let _serial = serial();
    let pin = PinGuard::new();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--ignored", "--exact", "child_agent", "--nocapture"])
        .env(CHILD_PIN, &pin.path)
        .stdout(Stdio::null());
    if raw_tp {
        cmd.env(CHILD_RAW_TP, "1");
    }
    let mut agent = Child(cmd.spawn().unwrap());
    let c = std::ffi::CString::new(pin.path.as_os_str().as_encoded_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (fd, m) = loop {
        assert!(Instant::now() < deadline, "the child never pinned");
        let fd = raw_obj_get(&c);
        if fd >= 0 {
            let head = Mapping::new(fd, 4096);
            let entries = head.u32_at(waits::header::ENTRIES);
            let ours = head.u32_at(waits::header::AGENT_PID) == agent.0.id();
            if ours && head.state() == waits::LIVE && entries > 0 {
                break (fd, Mapping::new(fd, map_len(entries)));
            }
            // SAFETY: closing the descriptor this loop opened.
            unsafe { libc::close(fd) };
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Live while it runs: a second probe is refused.
    assert_eq!(load(&pin.path).unwrap_err().kind(), ErrorKind::ThreadWaits);
    agent.0.kill().unwrap();
    agent.0.wait().unwrap();
    assert_eq!(
        m.state(),
        waits::GONE,
        "a SIGKILLed agent's array reads gone"
    );
    assert!(pin.path.exists(), "a killed agent leaves its pin");
    // Its gone pin is replaced by the next probe.
    let next = load(&pin.path).expect("a gone pin is replaced");
    let fd2 = raw_obj_get(&c);
    assert!(fd2 >= 0);
    let m2 = Mapping::new(fd2, map_len(next.thread_waits().unwrap().entries()));
    assert_eq!(m2.state(), waits::LIVE);
    assert_eq!(m2.u32_at(waits::header::AGENT_PID), std::process::id());
    assert_eq!(m.state(), waits::GONE, "the old array stays gone");
    drop(next);
    // SAFETY: closing the descriptors this test opened.
    unsafe {
        libc::close(fd);
        libc::close(fd2);
    }
}

#[test]
fn without_a_pin_the_array_is_the_header_alone() {
    if !root_or_skip(WHY) {
        return;
    }
    let _serial = serial();
    let h = Hierarchy::detect().unwrap();
    let probe = Probe::load(&h).unwrap();
    assert!(probe.thread_waits().is_none());
    assert!(probe.thread_wait_of(1).is_none(), "no slots");
}
