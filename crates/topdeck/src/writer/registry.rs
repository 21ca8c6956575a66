// SPDX-License-Identifier: Apache-2.0
//! The writer: creates a registry file, registers metrics in it and hands
//! out handles that update it in place.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use topdeck_format::descriptor::{MetricKind, RawDescriptor, StrRef};
use topdeck_format::layout::{
    CLOCK_LEN, CLOCK_OFFSET, DESCRIPTOR_LEN, DESC_COUNT_OFFSET, HEADER_FIELDS_END, VERSION,
    VERSION_OFFSET, WORD,
};
use topdeck_format::names::{self, encode_labels, validate_labels, validate_metric_name};
use topdeck_format::{Capacity, Header};

use super::cell::ShardedBlock;
use super::cpu_wait::{CpuWait, WaitSource};
use super::mapping::Mapping;
use super::{shard, Buckets, Counter, Gauge, GaugeF64, Histogram, Timer};
use crate::dir::{self, VerifiedDir, WriterDir, FILE_SUFFIX, TEMP_PREFIX};
use crate::error::{Error, ErrorKind, Result};
use crate::process;
use crate::waits::{self, ThreadWaits};
use crate::SeriesKey;

/// Options for a new [`Registry`].
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder()
///     .dir(dir.path())
///     .name("http")
///     .metrics(100)
///     .build()
///     .unwrap();
/// assert!(registry.path().starts_with(dir.path()));
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RegistryBuilder {
    dir: Option<PathBuf>,
    name: String,
    capacity: Capacity,
    group: Option<u32>,
    thread_waits: WaitsPin,
}

/// Where a registry looks for the agent's thread-waits array.
#[derive(Debug, Clone)]
enum WaitsPin {
    /// `TOPDECK_THREAD_WAITS`, else the default pin.
    Env,
    Off,
    At(PathBuf),
}

impl RegistryBuilder {
    /// Maps the agent's thread-waits array pinned at `pin` (default:
    /// `TOPDECK_THREAD_WAITS`, else `/sys/fs/bpf/topdeck/thread_waits`),
    /// so timers record each request's CPU wait ([`Timer`]). Nothing
    /// pinned there: timers without it, silently; a pin that cannot be
    /// used: the same, the reason in [`Registry::thread_waits_problem`].
    pub fn thread_waits(mut self, pin: impl Into<PathBuf>) -> Self {
        self.thread_waits = WaitsPin::At(pin.into());
        self
    }

    /// Timers without CPU wait, whatever is pinned (as
    /// `TOPDECK_THREAD_WAITS=off`).
    pub fn no_thread_waits(mut self) -> Self {
        self.thread_waits = WaitsPin::Off;
        self
    }

    /// The namespace directory (default: `TOPDECK_DIR`, else `/dev/shm/topdeck-<uid>`).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Lets members of group `gid` read this registry (file 0640, directory
    /// 0750, both given to the group). Default: `TOPDECK_GROUP` if set,
    /// else only the owner and root can read it (0600, directory 0700).
    /// One group per directory: the last writer to ask sets it.
    pub fn group(mut self, gid: u32) -> Self {
        self.group = Some(gid);
        self
    }

    /// A name for this registry, shown by readers (default `main`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Most metrics the registry can hold (default 4096).
    pub fn metrics(mut self, n: u32) -> Self {
        self.capacity.metrics = n;
        self
    }

    /// Threads that get a shard of their own (default 16); more threads
    /// share one overflow shard with atomic adds.
    pub fn shards(mut self, n: u32) -> Self {
        self.capacity.shards = n;
        self
    }

    /// Bytes of each shard (default 1 MiB): 8 per counter, 8 × (4 +
    /// buckets) per histogram. Untouched pages use no memory.
    pub fn shard_bytes(mut self, n: u64) -> Self {
        self.capacity.shard_bytes = n;
        self
    }

    /// Bytes for names, labels, help and units (default 256 KiB).
    pub fn string_bytes(mut self, n: u64) -> Self {
        self.capacity.string_bytes = n;
        self
    }

    /// Bytes for gauges, 8 each (default 32 KiB).
    pub fn gauge_bytes(mut self, n: u64) -> Self {
        self.capacity.shared_bytes = n;
        self
    }

    /// Creates the file and publishes it.
    pub fn build(self) -> Result<Registry> {
        Registry::create(self)
    }
}

/// A set of metrics published in one memory-mapped file, normally one per
/// process. Registering takes a process-local lock; updating through the
/// returned handles takes none. Dropping the registry removes its file
/// (handles keep working on the unlinked mapping); after a crash the file
/// stays readable and is marked dead.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # std::env::set_var("TOPDECK_DIR", dir.path());
/// let registry = topdeck::Registry::new().unwrap();
/// let hits = registry.counter("cache_hits_total", &[], "Cache hits.", "").unwrap();
/// hits.inc();
/// ```
#[derive(Debug)]
pub struct Registry {
    /// Shared with the [`Family`](super::family::Family)s made from it, which register members
    /// after the borrow that made them has ended.
    pub(super) inner: Arc<Inner>,
}

/// What registering needs; outlives the [`Registry`] while a family holds it.
#[derive(Debug)]
pub(crate) struct Inner {
    map: Arc<Mapping>,
    state: Mutex<State>,
    path: PathBuf,
    /// The directory, held open so the file is unlinked from the directory
    /// it was made in, whatever happened to the path since.
    dir: VerifiedDir,
    /// Holds the exclusive `flock` that tells readers this writer is alive.
    _file: File,
    /// The agent's thread-waits array, shared by the timers.
    waits: Option<Arc<WaitSource>>,
    /// Why a pinned array could not be used.
    waits_problem: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    count: u32,
    strings_used: u64,
    shared_used: u64,
    shard_used: u64,
    seen: HashSet<SeriesKey<'static>>,
    clock_recorded: bool,
}

/// What a metric needs from the file.
struct Request<'a> {
    kind: MetricKind,
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
    help: &'a str,
    unit: &'a str,
    words: usize,
    buckets: Option<Buckets>,
}

impl<'a> Request<'a> {
    /// A one-word metric: a counter or a gauge.
    fn scalar(
        kind: MetricKind,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
        help: &'a str,
        unit: &'a str,
    ) -> Self {
        Self {
            kind,
            name,
            labels,
            help,
            unit,
            words: 1,
            buckets: None,
        }
    }
}

impl Registry {
    /// A registry with default options in the default directory.
    pub fn new() -> Result<Self> {
        Self::builder().build()
    }

    /// Options for a registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder {
            dir: None,
            name: "main".into(),
            capacity: Capacity::default(),
            group: None,
            thread_waits: WaitsPin::Env,
        }
    }

    /// The file this registry publishes.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Metrics registered so far (families count each member once it is
    /// made).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
    /// let _hits = registry.counter("hits_total", &[], "", "")?;
    /// assert_eq!(registry.registered(), 1);
    /// # Ok::<(), topdeck::Error>(())
    /// ```
    pub fn registered(&self) -> u32 {
        self.inner.lock().count
    }

    /// Registers a counter. Name and labels follow Prometheus rules; the
    /// same name and labels may be registered once.
    pub fn counter(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        unit: &str,
    ) -> Result<Counter> {
        self.inner.counter(&Spec::new(name, help, unit), labels)
    }

    /// Registers an integer gauge.
    pub fn gauge(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        unit: &str,
    ) -> Result<Gauge> {
        self.inner.gauge(&Spec::new(name, help, unit), labels)
    }

    /// Registers a floating-point gauge.
    pub fn gauge_f64(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        unit: &str,
    ) -> Result<GaugeF64> {
        self.inner.gauge_f64(&Spec::new(name, help, unit), labels)
    }

    /// Registers a histogram with [`Buckets::default_seconds`].
    pub fn histogram(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        unit: &str,
    ) -> Result<Histogram> {
        self.histogram_with(name, labels, help, unit, Buckets::default())
    }

    /// Registers a histogram with the given bucket range.
    pub fn histogram_with(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        unit: &str,
        buckets: Buckets,
    ) -> Result<Histogram> {
        let spec = Spec {
            buckets,
            ..Spec::new(name, help, unit)
        };
        self.inner.histogram(&spec, labels)
    }

    /// Registers a [`Timer`]: a histogram of elapsed seconds
    /// ([`Buckets::default_seconds`], unit `seconds`) timed with
    /// `topdeck-clock`. By Prometheus convention `name` ends in `_seconds`.
    ///
    /// With the agent's thread-waits array, also registers the CPU-wait
    /// companions `<base>_cpu_wait_seconds` and
    /// `<base>_cpu_wait_unknown_seconds` of the same labels (see
    /// [`Timer`]): their names must be free too.
    pub fn timer(&self, name: &str, labels: &[(&str, &str)], help: &str) -> Result<Timer> {
        self.record_clock_params();
        let Some(source) = &self.inner.waits else {
            return Ok(Timer::new(
                self.histogram(name, labels, help, "seconds")?,
                None,
            ));
        };
        let (wait_name, unknown_name) = topdeck_format::waits::companions(name);
        let wait = (
            wait_name,
            format!(
                "CPU wait per request timed by {name}: time the timing thread was runnable \
                 but waiting for a CPU, from the topdeck agent's scheduler probe."
            ),
        );
        let unknown = (
            unknown_name,
            format!(
                "Latency of requests timed by {name} whose CPU wait could not be known \
                 (the topdeck agent stopped during them)."
            ),
        );
        // Names checked before anything is registered, and the timer's own
        // first: a bad name or a duplicate timer registers nothing.
        for (n, h) in [&wait, &unknown] {
            self.inner.check(&Spec::new(n, h, "seconds"), labels)?;
        }
        let histogram = self.histogram(name, labels, help, "seconds")?;
        let cpu = CpuWait {
            source: source.clone(),
            wait: self.histogram(&wait.0, labels, &wait.1, "seconds")?,
            unknown: self.histogram(&unknown.0, labels, &unknown.1, "seconds")?,
        };
        Ok(Timer::new(histogram, Some(cpu)))
    }

    /// Why the thread-waits array pinned where this registry looked could
    /// not be used (its timers then record no CPU wait); `None` when it
    /// is mapped, or when nothing was pinned or it was turned off.
    pub fn thread_waits_problem(&self) -> Option<&str> {
        self.inner.waits_problem.as_deref()
    }

    /// The thread-waits array this registry's timers read, if any (after
    /// an agent restart, the new one).
    pub fn thread_waits(&self) -> Option<&ThreadWaits> {
        self.inner.waits.as_deref().map(WaitSource::current)
    }

    /// Stores this process's clock parameters in the file's clock area
    /// (format v1.1), so readers can convert tick counts the writer
    /// publishes (`topdeck_clock::ticks()`) into ns. [`Registry::timer`]
    /// calls it; call it yourself before publishing raw ticks in a gauge.
    /// Only the first call writes. A registry that never needs the clock
    /// never starts it: the clock's calibration and its one background
    /// thread stay out of processes that only count.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
    /// registry.record_clock_params();
    /// let started = registry.gauge("job_started_ticks", &[], "Raw clock ticks.", "")?;
    /// started.set(topdeck::clock::ticks() as i64);
    /// # Ok::<(), topdeck::Error>(())
    /// ```
    pub fn record_clock_params(&self) {
        let inner = &self.inner;
        let mut state = inner.lock();
        if state.clock_recorded {
            return;
        }
        state.clock_recorded = true;
        let bytes = topdeck_clock::params().to_bytes();
        // Everything but the version word first; the version, released last,
        // says the rest is there (a reader seeing 0 reads no parameters).
        inner
            .map
            .write((CLOCK_OFFSET + 4) as u64, &bytes[4..CLOCK_LEN]);
        let version = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        inner
            .map
            .word32(CLOCK_OFFSET)
            .store(version, Ordering::Release);
    }
}

/// What registers one member of a family.
pub(crate) type Make<M> = fn(&Inner, &Spec<'_>, &[(&str, &str)]) -> Result<M>;

/// A metric's name, help, unit and (for histograms) buckets: what every
/// member of a family shares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec<'a> {
    pub(crate) name: &'a str,
    pub(crate) help: &'a str,
    pub(crate) unit: &'a str,
    pub(crate) buckets: Buckets,
}

impl<'a> Spec<'a> {
    pub(crate) fn new(name: &'a str, help: &'a str, unit: &'a str) -> Self {
        Self {
            name,
            help,
            unit,
            buckets: Buckets::default(),
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn counter(&self, s: &Spec<'_>, labels: &[(&str, &str)]) -> Result<Counter> {
        let r = Request::scalar(MetricKind::Counter, s.name, labels, s.help, s.unit);
        let off = self.register(r)?;
        Ok(Counter::new(ShardedBlock::new(self.map.clone(), off, 1)))
    }

    pub(crate) fn gauge(&self, s: &Spec<'_>, labels: &[(&str, &str)]) -> Result<Gauge> {
        let r = Request::scalar(MetricKind::GaugeI64, s.name, labels, s.help, s.unit);
        let off = self.register(r)?;
        Ok(Gauge::new(self.map.clone(), off))
    }

    pub(crate) fn gauge_f64(&self, s: &Spec<'_>, labels: &[(&str, &str)]) -> Result<GaugeF64> {
        let r = Request::scalar(MetricKind::GaugeF64, s.name, labels, s.help, s.unit);
        let off = self.register(r)?;
        Ok(GaugeF64::new(self.map.clone(), off))
    }

    pub(crate) fn histogram(&self, s: &Spec<'_>, labels: &[(&str, &str)]) -> Result<Histogram> {
        let words = s.buckets.block_words();
        let off = self.register(Request {
            kind: MetricKind::Histogram,
            name: s.name,
            labels,
            help: s.help,
            unit: s.unit,
            words,
            buckets: Some(s.buckets),
        })?;
        Ok(Histogram::new(
            ShardedBlock::new(self.map.clone(), off, words),
            s.buckets,
        ))
    }

    /// Whether a metric of these name, labels, help and unit may exist.
    pub(crate) fn check(&self, s: &Spec<'_>, labels: &[(&str, &str)]) -> Result<()> {
        let invalid = |e: topdeck_format::FormatError| {
            Error::new(
                ErrorKind::InvalidName,
                format!("{}: cannot register {:?}: {e}", self.path.display(), s.name),
            )
            .with_path(&self.path)
            .with_source(e)
        };
        validate_metric_name(s.name).map_err(invalid)?;
        validate_labels(labels).map_err(invalid)?;
        for (what, text, max) in [
            ("help", s.help, names::MAX_HELP_LEN),
            ("unit", s.unit, names::MAX_UNIT_LEN),
        ] {
            if text.len() > max {
                return Err(invalid(topdeck_format::FormatError::TooLong {
                    what,
                    len: text.len(),
                    max,
                }));
            }
        }
        Ok(())
    }

    fn register(&self, r: Request<'_>) -> Result<u64> {
        self.check(&Spec::new(r.name, r.help, r.unit), r.labels)?;
        let key = SeriesKey::new(
            r.name.to_owned(),
            r.labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>(),
        );
        let h = &self.map.header;
        let mut st = self.lock();
        if st.seen.contains(&key) {
            return Err(Error::new(
                ErrorKind::Duplicate,
                format!(
                    "{}: metric {:?} with labels {:?} is already registered; keep the first handle and clone it",
                    self.path.display(),
                    r.name,
                    r.labels
                ),
            )
            .with_path(&self.path));
        }
        let full = |what: &str, used: u64, need: u64, cap: u64, option: &str| {
            Error::new(
                ErrorKind::RegistryFull,
                format!(
                    "{}: registry full: no room for {:?} in the {what} ({used} of {cap} used, {need} more needed); \
                     build the registry with a larger `{option}`",
                    self.path.display(),
                    r.name
                ),
            )
            .with_path(&self.path)
        };
        if st.count >= h.desc_capacity {
            let c = u64::from(h.desc_capacity);
            return Err(full("descriptor table", c, 1, c, "metrics"));
        }
        let labels = encode_labels(r.labels);
        let strings = [
            r.name.as_bytes(),
            &labels,
            r.help.as_bytes(),
            r.unit.as_bytes(),
        ];
        let string_need: u64 = strings.iter().map(|s| s.len() as u64).sum();
        if st.strings_used + string_need > h.strings_len {
            return Err(full(
                "string area",
                st.strings_used,
                string_need,
                h.strings_len,
                "string_bytes",
            ));
        }
        let value_need = (r.words * WORD) as u64;
        let (used, cap, what, option) = if r.kind.is_sharded() {
            (st.shard_used, h.shard_len, "shards", "shard_bytes")
        } else {
            (st.shared_used, h.shared_len, "gauge area", "gauge_bytes")
        };
        if used + value_need > cap {
            return Err(full(what, used, value_need, cap, option));
        }

        // Fill strings and descriptor with plain stores; nothing reads them
        // until the release store of the count below.
        let mut refs = [StrRef::default(); 4];
        for (slot, s) in refs.iter_mut().zip(strings) {
            *slot = StrRef {
                off: st.strings_used as u32,
                len: s.len() as u32,
            };
            self.map.write(h.strings_offset + st.strings_used, s);
            st.strings_used += s.len() as u64;
        }
        let range = r.buckets.map(|b| b.range);
        let desc = RawDescriptor {
            kind: r.kind,
            schema: range.map_or(0, |r| r.schema),
            value_len: value_need as u32,
            value_offset: used,
            name: refs[0],
            labels: refs[1],
            help: refs[2],
            unit: refs[3],
            min_index: range.map_or(0, |r| r.min_index),
            bucket_count: range.map_or(0, |r| r.bucket_count),
            zero_threshold: range.map_or(0.0, |r| r.zero_threshold()),
        };
        let mut bytes = [0u8; DESCRIPTOR_LEN];
        desc.encode(&mut bytes);
        self.map.write(
            h.desc_offset + u64::from(st.count) * u64::from(h.desc_len),
            &bytes,
        );
        if r.kind.is_sharded() {
            st.shard_used += value_need;
        } else {
            st.shared_used += value_need;
        }
        st.count += 1;
        self.map
            .word32(DESC_COUNT_OFFSET)
            .store(st.count, Ordering::Release);
        st.seen.insert(key);
        Ok(used)
    }
}

impl Registry {
    fn create(b: RegistryBuilder) -> Result<Self> {
        // Before touching the directory: readers refuse a file past the
        // format's limits, so it must never be created.
        b.capacity.validate().map_err(|e| {
            Error::new(
                ErrorKind::TooLarge,
                format!(
                    "cannot create a registry this large: {e}; lower the builder's `metrics`, \
                     `string_bytes`, `gauge_bytes`, `shard_bytes` or `shards`"
                ),
            )
            .with_source(e)
        })?;
        let group = match b.group {
            Some(g) => Some(g),
            None => dir::env_group()?,
        };
        let WriterDir { dir, fallback } = dir::prepare_writer_dir(b.dir.as_deref(), group)?;
        if let Some(why) = fallback {
            // Said once per process: the registry is published, but not where
            // the operator expects it.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("topdeck: {why}"));
        }
        let pid = std::process::id();
        let start = process::own_start_ticks();
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let header = Header::new(
            b.capacity,
            pid,
            start,
            created,
            &process::own_name(),
            &b.name,
        );

        // The name is unique per process start; a pid reused within one clock
        // tick (or in another pid namespace) moves on to the next sequence number.
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let mut attempts = 0;
        let (file, temp, stem) = loop {
            let stem = format!("{pid}-{start}-{}", SEQ.fetch_add(1, Ordering::Relaxed));
            let temp = format!("{TEMP_PREFIX}{stem}");
            let opened = if dir.exists(&format!("{stem}{FILE_SUFFIX}")) {
                Err(None)
            } else {
                dir.create_file(&temp, group).map_err(Some)
            };
            match opened {
                Ok(file) => break (file, temp, stem),
                Err(e) if attempts < 1000 && e.as_ref().is_none_or(|e| e.already_exists()) => {
                    attempts += 1
                }
                Err(e) => {
                    return Err(e.unwrap_or_else(|| {
                        Error::new(ErrorKind::Io, "no free registry file name after 1000 tries")
                    }))
                }
            }
        };
        let waits = open_waits(&b.thread_waits);
        let result = Self::publish(file, dir, &temp, &stem, header, waits);
        if let Err((dir, e)) = result {
            dir.unlink(&temp);
            return Err(e);
        }
        result.map_err(|(_, e)| e)
    }

    fn publish(
        file: File,
        dir: VerifiedDir,
        temp: &str,
        stem: &str,
        header: Header,
        (waits, waits_problem): (Option<ThreadWaits>, Option<String>),
    ) -> std::result::Result<Self, (VerifiedDir, Error)> {
        let temp_path = dir.path().join(temp);
        // SAFETY: flock on a descriptor we own; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err((
                dir,
                Error::io("cannot lock the registry file", &temp_path, e),
            ));
        }
        if let Err(e) = file.set_len(header.file_len) {
            let e = Error::io("cannot size the registry file", &temp_path, e)
                .with_hint("is the file system full?");
            return Err((dir, e));
        }
        let raw = match memmap2::MmapOptions::new()
            .len(header.file_len as usize)
            .map_raw(&file)
        {
            Ok(raw) => raw,
            Err(e) => {
                return Err((
                    dir,
                    Error::io("cannot map the registry file", &temp_path, e),
                ))
            }
        };
        let map = Arc::new(Mapping::new(raw, header));
        let mut page = vec![0u8; HEADER_FIELDS_END];
        map.header.encode(&mut page);
        map.write(0, &page);
        shard::register(&map);
        map.word32(VERSION_OFFSET).store(VERSION, Ordering::Release);

        let name = format!("{stem}{FILE_SUFFIX}");
        if let Err(e) = dir.rename_noreplace(temp, &name) {
            return Err((dir, e));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                map,
                state: Mutex::new(State::default()),
                path: dir.path().join(&name),
                dir,
                _file: file,
                waits: waits.map(|w| Arc::new(WaitSource::new(w))),
                waits_problem,
            }),
        })
    }
}

/// The array a new registry maps, or why not (nothing pinned and off are
/// no problem).
fn open_waits(pin: &WaitsPin) -> (Option<ThreadWaits>, Option<String>) {
    let path = match pin {
        WaitsPin::Off => return (None, None),
        WaitsPin::At(p) => Some(p.clone()),
        WaitsPin::Env => waits::pin_from_env(),
    };
    match path.map(|p| ThreadWaits::open_if_pinned(&p)) {
        None | Some(Ok(None)) => (None, None),
        Some(Ok(Some(w))) => (Some(w), None),
        Some(Err(e)) => (None, Some(e.to_string())),
    }
}

impl Drop for Registry {
    /// Removes the file even while families still hold the registry's
    /// state: like handles, they go on working on the unlinked mapping.
    fn drop(&mut self) {
        let inner = &self.inner;
        if let Some(name) = inner.path.file_name().and_then(|n| n.to_str()) {
            inner.dir.unlink(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(dir: &Path) -> Registry {
        Registry::builder()
            .dir(dir)
            .metrics(4)
            .string_bytes(4096)
            .build()
            .unwrap()
    }

    #[test]
    fn registering_twice_is_a_duplicate() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path());
        let _a = r.counter("a_total", &[("k", "v")], "", "").unwrap();
        let _b = r.counter("a_total", &[("k", "w")], "", "").unwrap();
        let err = r.gauge("a_total", &[("k", "v")], "", "").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Duplicate);
        assert!(err.to_string().contains(&r.path().display().to_string()));
    }

    #[test]
    fn invalid_names_are_refused_with_the_rule() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path());
        let err = r.counter("bad-name", &[], "", "").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidName);
        assert!(err.to_string().contains("bad-name"), "{err}");
        assert_eq!(
            r.counter("ok", &[("__x", "1")], "", "").unwrap_err().kind(),
            ErrorKind::InvalidName
        );
    }

    #[test]
    fn a_full_registry_says_which_option_to_raise() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path());
        for i in 0..4 {
            let _ = r.counter(&format!("c{i}"), &[], "", "").unwrap();
        }
        let err = r.counter("c4", &[], "", "").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::RegistryFull);
        assert!(err.to_string().contains("`metrics`"), "{err}");
        let r2 = Registry::builder()
            .dir(d.path())
            .metrics(16)
            .string_bytes(4096)
            .build()
            .unwrap();
        let help = "h".repeat(1000);
        let err = (0..16)
            .find_map(|i| r2.counter(&format!("long{i}"), &[], &help, "").err())
            .expect("4 KiB of strings cannot hold 16 KB of help");
        assert_eq!(err.kind(), ErrorKind::RegistryFull);
        assert!(err.to_string().contains("`string_bytes`"), "{err}");
    }

    #[test]
    fn a_capacity_past_the_formats_limits_is_refused_before_any_file_exists() {
        let d = tempfile::tempdir().unwrap();
        let builders = [
            Registry::builder().metrics(u32::MAX),
            Registry::builder().shards(100_000),
            Registry::builder().shard_bytes(1 << 30),
            Registry::builder().string_bytes(u64::MAX),
            Registry::builder().gauge_bytes(1 << 40),
            // Each within its own limit, too large together.
            Registry::builder().shards(1024).shard_bytes(64 << 20),
        ];
        for b in builders {
            let err = b.dir(d.path()).build().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::TooLarge, "{err}");
            assert!(err.to_string().contains("limit"), "{err}");
        }
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_file_is_removed_when_the_registry_is_dropped() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path());
        let c = r.counter("kept_total", &[], "", "").unwrap();
        let path = r.path().to_owned();
        assert!(path.exists());
        drop(r);
        assert!(!path.exists());
        c.inc();
        assert_eq!(c.get(), 1);
    }
}
