// SPDX-License-Identifier: Apache-2.0
//! Helpers shared by the integration tests: child processes that are always
//! reaped (a guard kills them on drop), line protocols read with deadlines so
//! that a bug fails a test instead of hanging it, the `topdeck` binary,
//! private namespace directories, and a small valid registry file to damage.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use topdeck::dir::ENV_DIR;
use topdeck::{Buckets, ErrorKind, Registry};
use topdeck_format::layout::{DESCRIPTOR_LEN, MAGIC, PID_OFFSET};
use topdeck_format::Header;

mod packed;
pub use packed::{packed, PACKED_PID};

/// Longest any one wait may take. Far above a normal run: it is there only
/// so that a bug fails the test instead of hanging the suite.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Spawns take it shared; a test that steers pid allocation takes it
/// exclusively so this process's other tests cannot take the pid it wants.
static SPAWN_LOCK: RwLock<()> = RwLock::new(());

/// Proof that no other test of this process is spawning a process.
pub struct ExclusiveSpawns(#[allow(dead_code)] RwLockWriteGuard<'static, ()>);

/// Blocks every spawn made through [`Proc`] by other threads while held.
pub fn exclusive_spawns() -> ExclusiveSpawns {
    ExclusiveSpawns(SPAWN_LOCK.write().unwrap_or_else(|p| p.into_inner()))
}

fn shared_spawns() -> RwLockReadGuard<'static, ()> {
    SPAWN_LOCK.read().unwrap_or_else(|p| p.into_inner())
}

/// Whether this test runs as root (chown and `ns_last_pid` need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Says, past the test harness's output capture, that a test skipped a check.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {test}: {why}");
}

/// A child process talking line by line on stdin/stdout. Dropping it kills
/// and reaps the child, so a failing test leaves nothing behind.
pub struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    transcript: Vec<String>,
    stderr: Arc<Mutex<String>>,
    threads: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `cmd` with piped stdin, stdout and stderr.
    pub fn start(name: &str, cmd: Command) -> Self {
        let _g = shared_spawns();
        Self::spawn(name, cmd)
    }

    /// Starts `cmd` while the caller holds every spawn of this process off.
    pub fn start_exclusive(name: &str, cmd: Command, _held: &ExclusiveSpawns) -> Self {
        Self::spawn(name, cmd)
    }

    fn spawn(name: &str, mut cmd: Command) -> Self {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        let out = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr_pipe.read(&mut buf) {
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
            transcript: Vec::new(),
            stderr,
            threads: vec![out, err],
            status: None,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one line to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let sent = match &mut self.stdin {
            Some(s) => writeln!(s, "{line}").and_then(|()| s.flush()),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        if let Err(e) = sent {
            let status = self.reap_within(Duration::from_secs(5));
            self.fail(&format!(
                "cannot send {line:?} ({e}); it {}",
                describe(status)
            ));
        }
    }

    /// Closes the child's stdin (its end-of-input).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for a stdout line starting with `prefix` and returns the rest
    /// of it, trimmed. Lines before it are kept in the transcript.
    pub fn expect(&mut self, prefix: &str) -> String {
        match self.next_line_with(prefix) {
            Ok(rest) => rest,
            Err(()) => {
                let status = self.reap_within(Duration::from_secs(5));
                self.fail(&format!(
                    "{} before printing a line starting with {prefix:?}",
                    describe(status)
                ))
            }
        }
    }

    /// The rest of the first stdout line starting with `prefix`, read
    /// already (skipped by an earlier [`Proc::expect`]: children writing to
    /// one pipe say things in any order) or waited for as `expect` does.
    pub fn said(&mut self, prefix: &str) -> String {
        let early = self
            .transcript
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|rest| rest.trim().to_owned());
        early.unwrap_or_else(|| self.expect(prefix))
    }

    /// Waits for a stdout line starting with `prefix` like [`Proc::expect`],
    /// but returns `None` if the child exits first (it is reaped then).
    pub fn try_expect(&mut self, prefix: &str) -> Option<String> {
        match self.next_line_with(prefix) {
            Ok(rest) => Some(rest),
            Err(()) => {
                self.wait();
                None
            }
        }
    }

    /// The rest of the next stdout line starting with `prefix`, or `Err` if
    /// stdout closed first; fails the test on timeout.
    fn next_line_with(&mut self, prefix: &str) -> Result<String, ()> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    self.transcript.push(line.clone());
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.trim().to_owned());
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.fail(&format!(
                    "printed no line starting with {prefix:?} within {TIMEOUT:?}"
                )),
                Err(RecvTimeoutError::Disconnected) => return Err(()),
            }
        }
    }

    /// Every stdout line read so far.
    pub fn transcript(&self) -> &[String] {
        &self.transcript
    }

    /// What the child wrote to stderr; all of it once the child has exited.
    pub fn stderr(&mut self) -> String {
        if self.status.is_some() {
            // The child is gone, so its pipes are at end of file.
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        }
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits for the child to exit.
    pub fn wait(&mut self) -> ExitStatus {
        match self.reap_within(TIMEOUT) {
            Some(s) => s,
            None => self.fail(&format!("did not exit within {TIMEOUT:?}")),
        }
    }

    /// Kills the child with SIGKILL and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let _ = self.child.kill();
        let s = self.child.wait().expect("wait for a killed child");
        self.status = Some(s);
        s
    }

    /// Waits for the child to exit and returns its whole output.
    pub fn finish(mut self) -> Finished {
        let status = self.wait();
        self.close_stdin();
        let stderr = self.stderr();
        let mut stdout: Vec<String> = std::mem::take(&mut self.transcript);
        stdout.extend(self.lines.try_iter());
        Finished {
            status,
            stdout: stdout.join("\n"),
            stderr,
        }
    }

    fn reap_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(s)) => self.status = Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                _ => break,
            }
        }
        self.status
    }

    /// Kills the child and fails the test with everything it said.
    pub fn fail(&mut self, what: &str) -> ! {
        self.kill();
        let stderr = self.stderr();
        panic!(
            "{} (pid {}) {what}\n--- its stdout ---\n{}\n--- its stderr ---\n{stderr}",
            self.name,
            self.child.id(),
            self.transcript.join("\n"),
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How a child ended.
pub fn describe(status: Option<ExitStatus>) -> String {
    match status {
        None => "is still running".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with code {c}"),
            (_, Some(libc::SIGBUS)) => "was killed by SIGBUS".into(),
            (_, Some(libc::SIGSEGV)) => "was killed by SIGSEGV".into(),
            (_, Some(libc::SIGABRT)) => {
                "was killed by SIGABRT (a panic while panicking, or abort)".into()
            }
            (_, Some(sig)) => format!("was killed by signal {sig}"),
            _ => format!("ended with {s:?}"),
        },
    }
}

/// What a finished child printed.
#[derive(Debug)]
pub struct Finished {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// A writer process that printed `ready <path>` and waits for instructions.
pub struct Writer {
    /// The process.
    pub proc: Proc,
    /// Its registry file.
    pub path: PathBuf,
}

impl Writer {
    /// Starts the `td-writer` binary at `bin` with `args`, writing in `dir`.
    pub fn start(bin: &Path, dir: &Path, args: &[&str]) -> Self {
        Self::from_proc(Proc::start("td-writer", writer_cmd(bin, dir, args)))
    }

    /// Wraps a started writer, waiting for its `ready` line.
    pub fn from_proc(mut proc: Proc) -> Self {
        let path = PathBuf::from(proc.expect("ready "));
        Self { proc, path }
    }

    /// The writer's pid.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// A command running the writer at `bin` in namespace `dir`.
pub fn writer_cmd(bin: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args).env(ENV_DIR, dir);
    cmd
}

/// The `topdeck` command built by `cargo build --workspace --bins`, next to
/// this test binary's target directory.
pub fn topdeck_bin() -> PathBuf {
    workspace_bin("topdeck")
}

/// The binary `name` of another package of the workspace, built by `cargo
/// build --workspace --bins` next to this test binary's target directory
/// (cargo names only this package's binaries to its tests).
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|debug| debug.join(name));
    match bin {
        Some(b) if b.is_file() => b,
        _ => panic!(
            "the `{name}` binary is not built next to {}: run `cargo build --workspace --bins` \
             (with the same CARGO_TARGET_DIR) before `cargo test`",
            exe.display()
        ),
    }
}

/// Runs `topdeck args...` on namespace `dir`.
pub fn topdeck(dir: &Path, args: &[&str]) -> Finished {
    let mut cmd = Command::new(topdeck_bin());
    cmd.args(args).env(ENV_DIR, dir);
    let mut p = Proc::start("topdeck", cmd);
    p.close_stdin();
    p.finish()
}

/// Runs `topdeck args...` on `dir`, which must succeed and print JSON.
pub fn topdeck_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = topdeck(dir, args);
    assert!(
        out.status.success(),
        "`topdeck {}` {}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        describe(Some(out.status)),
        out.stdout,
        out.stderr
    );
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "`topdeck {}` printed no valid JSON ({e}):\n{}\nstderr:\n{}",
            args.join(" "),
            out.stdout,
            out.stderr
        )
    })
}

/// A private namespace directory, removed at the end of the test.
pub fn namespace_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("topdeck-it-")
        .tempdir()
        .expect("create a temporary namespace directory")
}

/// Asserts that `err` is of `kind`, concerns `path` and that its message names it.
pub fn assert_error(err: &topdeck::Error, kind: ErrorKind, path: &Path) {
    assert_eq!(err.kind(), kind, "wrong kind for: {err}");
    assert_eq!(err.path(), Some(path), "wrong path for: {err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "the message does not name {}: {err}",
        path.display()
    );
}

/// A small valid registry file, as bytes, with one metric of each kind.
pub struct Template {
    /// The whole file.
    pub bytes: Vec<u8>,
    /// Its header.
    pub header: Header,
}

/// Descriptor index of `requests_total{route="/"}` (counter, 5) in the template.
pub const T_COUNTER: usize = 0;
/// Descriptor index of `queue_depth` (gauge, -3).
pub const T_GAUGE: usize = 1;
/// Descriptor index of `load_ratio` (f64 gauge, 0.25).
pub const T_GAUGE_F64: usize = 2;
/// Descriptor index of `latency_seconds` (histogram: 0.75, 3, 100).
pub const T_HISTOGRAM: usize = 3;
/// Descriptor index of `errors_total` (counter, 2).
pub const T_COUNTER2: usize = 4;

/// Registers the template's first four metrics in `r` with their values
/// (requests_total 5, queue_depth -3, load_ratio 0.25, latency_seconds
/// 0.75, 3 and 100) and returns the counter and the histogram.
pub fn template_metrics(r: &Registry) -> (topdeck::Counter, topdeck::Histogram) {
    let requests = r
        .counter("requests_total", &[("route", "/")], "Requests.", "")
        .unwrap();
    requests.add(5);
    r.gauge("queue_depth", &[], "Queued jobs.", "")
        .unwrap()
        .set(-3);
    r.gauge_f64("load_ratio", &[], "Load.", "")
        .unwrap()
        .set(0.25);
    let b = Buckets::exponential(0, 1.0, 1e3).unwrap();
    let h = r
        .histogram_with("latency_seconds", &[], "Latency.", "seconds", b)
        .unwrap();
    for v in [0.75, 3.0, 100.0] {
        h.record(v);
    }
    (requests, h)
}

/// The template, built once per test process by a real [`Registry`].
pub fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let dir = namespace_dir();
        let r = Registry::builder()
            .dir(dir.path())
            .name("template")
            .metrics(8)
            .string_bytes(4096)
            .gauge_bytes(4096)
            .shard_bytes(4096)
            .shards(2)
            .build()
            .expect("build the template registry");
        let _ = template_metrics(&r);
        r.counter("errors_total", &[], "Errors.", "")
            .unwrap()
            .add(2);
        let bytes = std::fs::read(r.path()).expect("read the template file");
        let header = Header::parse(&bytes, bytes.len() as u64).expect("the template parses");
        Template { bytes, header }
    })
}

/// Offset in the file of descriptor `i`.
pub fn desc_at(h: &Header, i: usize) -> usize {
    h.desc_offset as usize + i * h.desc_len as usize
}

const _: () = assert!(DESCRIPTOR_LEN == 64);

/// Little-endian `u32` at `off`.
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// Little-endian `u64` at `off`.
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Writes a little-endian `u32` at `off`.
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a little-endian `u64` at `off`.
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// A pid beyond any real one, and the name of a file of that writer in `dir`.
fn planted_name(dir: &Path) -> (u32, PathBuf) {
    static NEXT: AtomicU32 = AtomicU32::new(3_000_000);
    let pid = NEXT.fetch_add(1, Ordering::Relaxed);
    (
        pid,
        dir.join(format!("{pid}-1-0{}", topdeck::dir::FILE_SUFFIX)),
    )
}

/// Writes `bytes` as a registry file of a made-up dead writer in `dir`:
/// its own pid (beyond any real one) in the name and, when the header has
/// room for it, in the header.
pub fn plant(dir: &Path, mut bytes: Vec<u8>) -> PathBuf {
    let (pid, path) = planted_name(dir);
    if bytes.len() >= PID_OFFSET + 4 && bytes.starts_with(&MAGIC) {
        put_u32(&mut bytes, PID_OFFSET, pid);
    }
    write_file(&path, &bytes);
    path
}

/// A registry file as a hostile local user writes one for a root observer:
/// a real-looking header on a sparse file, whose claims cost its author
/// nothing but cost a reader that believes them.
#[derive(Debug, Clone)]
pub struct Sparse {
    /// Descriptor slots claimed; every one is published (`desc_count`).
    pub capacity: u32,
    /// Bytes per descriptor.
    pub desc_len: u32,
    /// Descriptors written; the rest of the table is a hole (zeros: an
    /// unknown kind). Descriptor 0 is the counter `x`; the others look
    /// like it but name a string past the string area.
    pub written: usize,
    /// Per-thread shards, all in use.
    pub shards: u32,
    /// Bytes per shard.
    pub shard_len: u64,
    /// Where counter `x` lives in each shard; it holds 7 in the overflow shard.
    pub counter_at: u64,
}

impl Default for Sparse {
    /// One valid counter, the rest of a 2^24-slot (1 GiB) table holes.
    fn default() -> Self {
        Self {
            capacity: 1 << 24,
            desc_len: DESCRIPTOR_LEN as u32,
            written: 1,
            shards: 2,
            shard_len: 4096,
            counter_at: 0,
        }
    }
}

impl Sparse {
    /// The largest table the format's limits allow (256 MiB), all of it
    /// published: descriptor 0 valid, the next 299 valid-looking, the rest
    /// holes.
    pub fn holes() -> Self {
        Self {
            capacity: topdeck_format::layout::MAX_DESC_CAPACITY,
            desc_len: topdeck_format::layout::MAX_DESC_LEN,
            written: 300,
            ..Self::default()
        }
    }

    /// Fifteen shards of the largest size the limits allow, all in use,
    /// with one counter in their last word.
    pub fn far_counter() -> Self {
        use topdeck_format::layout::{MAX_SHARD_LEN, WORD};
        Self {
            capacity: 1,
            shards: 14,
            shard_len: MAX_SHARD_LEN,
            counter_at: MAX_SHARD_LEN - WORD as u64,
            ..Self::default()
        }
    }

    /// Writes the file in `dir` and returns its path.
    pub fn plant(&self, dir: &Path) -> PathBuf {
        use std::os::unix::fs::FileExt;
        use topdeck_format::layout::*;
        let page = SECTION_ALIGN as u64;
        let table = u64::from(self.capacity) * u64::from(self.desc_len);
        let desc_offset = HEADER_LEN as u64;
        let strings_offset = desc_offset + table.div_ceil(page) * page;
        let shared_offset = strings_offset + page;
        let shards_offset = shared_offset + page;
        let file_len = shards_offset + (u64::from(self.shards) + 1) * self.shard_len;
        let (pid, path) = planted_name(dir);

        let mut h = vec![0u8; HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        put_u32(&mut h, VERSION_OFFSET, VERSION);
        put_u32(&mut h, HEADER_LEN_OFFSET, HEADER_LEN as u32);
        put_u64(&mut h, FILE_LEN_OFFSET, file_len);
        put_u32(&mut h, PID_OFFSET, pid);
        put_u64(&mut h, START_TICKS_OFFSET, 1);
        put_u64(&mut h, DESC_OFFSET_OFFSET, desc_offset);
        put_u32(&mut h, DESC_CAPACITY_OFFSET, self.capacity);
        put_u32(&mut h, DESC_LEN_OFFSET, self.desc_len);
        put_u32(&mut h, DESC_COUNT_OFFSET, self.capacity);
        put_u32(&mut h, SHARD_COUNT_OFFSET, self.shards);
        put_u64(&mut h, STRINGS_OFFSET_OFFSET, strings_offset);
        put_u64(&mut h, STRINGS_LEN_OFFSET, page);
        put_u64(&mut h, SHARED_OFFSET_OFFSET, shared_offset);
        put_u64(&mut h, SHARED_LEN_OFFSET, page);
        put_u64(&mut h, SHARDS_OFFSET_OFFSET, shards_offset);
        put_u64(&mut h, SHARD_LEN_OFFSET, self.shard_len);
        put_u32(&mut h, SHARDS_IN_USE_OFFSET, self.shards);
        h[PROCESS_NAME_OFFSET..][..3].copy_from_slice(b"svc");
        h[REGISTRY_NAME_OFFSET..][..4].copy_from_slice(b"main");

        let mut table = vec![0u8; self.written * self.desc_len as usize];
        for (i, d) in table.chunks_exact_mut(self.desc_len as usize).enumerate() {
            d[D_KIND] = 1;
            put_u32(d, D_VALUE_LEN, WORD as u32);
            put_u64(d, D_VALUE_OFFSET, self.counter_at);
            let name_off = if i == 0 { 0 } else { page as u32 };
            put_u32(d, D_NAME, name_off);
            put_u32(d, D_NAME + 4, 1);
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        let overflow = shards_offset + u64::from(self.shards) * self.shard_len;
        let written = f
            .set_len(file_len)
            .and_then(|()| f.write_all_at(&h, 0))
            .and_then(|()| f.write_all_at(&table, desc_offset))
            .and_then(|()| f.write_all_at(b"x", strings_offset))
            .and_then(|()| f.write_all_at(&7u64.to_le_bytes(), overflow + self.counter_at));
        written.unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}

/// How a child run by [`run_measured`] ended, and its peak memory.
#[derive(Debug)]
pub struct Measured {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
    /// Its peak resident set (`ru_maxrss`), in KiB.
    pub peak_rss_kib: u64,
}

/// Runs `cmd` to the end with `input` on stdin, reaping it with `wait4` to
/// learn its peak resident set. Killed after [`TIMEOUT`].
pub fn run_measured(mut cmd: Command, input: &str) -> Measured {
    let _g = shared_spawns();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Reaped by `wait4` below, which `Child::wait` cannot stand in for:
    // only `wait4` returns the child's resource usage.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id() as libc::pid_t;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(TIMEOUT) == Err(RecvTimeoutError::Timeout) {
            // SAFETY: the child is not reaped before `done_tx` is dropped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    let _ = child
        .stdout
        .take()
        .expect("stdout is piped")
        .read_to_string(&mut stdout);
    let mut status = 0;
    // SAFETY: all-zero is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: reaps our own child; `status` and `usage` outlive the call.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4: {}", std::io::Error::last_os_error());
    drop(done_tx);
    let _ = watchdog.join();
    Measured {
        status: ExitStatus::from_raw(status),
        stdout,
        stderr: err.join().unwrap_or_default(),
        peak_rss_kib: usage.ru_maxrss as u64,
    }
}

/// Creates `path` with `bytes`, mode 0644.
pub fn write_file(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(bytes)
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// splitmix64: a tiny seeded generator, so random-input tests replay exactly.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// The `done` line of a `td-writer run`: exact counts of what it did.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    /// Iterations over all workers (each incremented `ops_total` once).
    pub ops: u64,
    /// Histogram records.
    pub records: u64,
    /// Sum of the recorded values (integers, so exact).
    pub sum: u64,
    /// Largest recorded value.
    pub max: u64,
    /// Short-lived threads started (with `--churn`).
    pub threads: u64,
    /// Iterations of each worker (each incremented its `worker_ops_total`).
    pub per_worker: Vec<u64>,
}

/// Value of `key=` in a line of `key=value` words.
pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|w| w.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// [`field`] as a number.
pub fn num(line: &str, key: &str) -> u64 {
    let v = field(line, key);
    v.parse()
        .unwrap_or_else(|e| panic!("{key}={v} in {line:?} is not a number: {e}"))
}

impl Done {
    /// Parses what follows `done ` on the writer's line.
    pub fn parse(line: &str) -> Self {
        Self {
            ops: num(line, "ops"),
            records: num(line, "records"),
            sum: num(line, "sum"),
            max: num(line, "max"),
            threads: num(line, "threads"),
            per_worker: field(line, "per_worker")
                .split(',')
                .map(|n| n.parse().expect("a per-worker count"))
                .collect(),
        }
    }
}
