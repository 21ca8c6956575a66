// SPDX-License-Identifier: Apache-2.0
//! Reads one registry file: descriptors once, values on every snapshot.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use topdeck_format::layout::*;
use topdeck_format::{FormatError, Header, MetricKind, MetricStrings, RawDescriptor};

use super::locks::LockTable;
use super::mapped::{Liveness, MappedFile, Probe};
use super::snapshot::{HistogramValue, MetricInfo, Snapshot, Value};
use crate::error::{Error, ErrorKind, Result};

/// Descriptors copied and validated at a time: a table is never copied
/// whole on the word of its header, only as far as it stays valid.
const DESC_CHUNK: usize = 256;

/// Gaps a reader copies over rather than copying piece by piece: below
/// this, one copy of a range is cheaper than many small ones.
const GAP: u64 = 64 << 10;

/// What one snapshot of one registry may cost, for a reader of files it
/// does not trust (an exporter reading every user's registries). The
/// format's own limits already bound every size a header claims, and a
/// reader copies only what valid descriptors cover; these bound what a
/// file with many valid descriptors costs. Exceeding either is an error
/// of kind [`ErrorKind::TooLarge`] for that file alone.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// for i in 0..3 {
///     registry.counter(&format!("c{i}_total"), &[], "", "").unwrap();
/// }
/// let limits = topdeck::Limits { max_metrics: 2, ..topdeck::Limits::default() };
/// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap().with_limits(limits);
/// assert_eq!(reader.snapshot().unwrap_err().kind(), topdeck::ErrorKind::TooLarge);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes one snapshot may read: descriptors and the strings they
    /// reference when first seen, then the value words of every shard
    /// summed. Default 256 MiB, fourteen times what the largest registry
    /// of the default capacity costs (1 MiB in each of 17 shards, plus its
    /// table and strings).
    pub max_bytes_per_snapshot: u64,
    /// Most metrics a registry may publish. Default: the format's limit,
    /// [`MAX_DESC_CAPACITY`].
    pub max_metrics: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes_per_snapshot: 256 << 20,
            max_metrics: MAX_DESC_CAPACITY,
        }
    }
}

/// What is left of one snapshot's [`Limits::max_bytes_per_snapshot`].
struct Budget {
    left: u64,
    max: u64,
}

impl Budget {
    fn new(max: u64) -> Self {
        Self { left: max, max }
    }

    /// Takes `bytes` for reading `what`, or says the snapshot may not.
    fn take(&mut self, bytes: u64, what: &str, path: &Path) -> Result<()> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "{}: reading {what} ({bytes} bytes) would take this snapshot past the \
                     reader's limit of {} bytes; if the file is trusted, raise \
                     `Limits::max_bytes_per_snapshot`",
                    path.display(),
                    self.max
                ),
            )
            .with_path(path)),
        }
    }
}

/// Whether blocks adding up to `used` bytes over `extent` bytes lie close
/// enough together to be copied in one range (a writer allocates from the
/// start, so its extent is what it used).
fn dense(extent: u64, used: u64) -> bool {
    extent <= used.saturating_mul(2).saturating_add(GAP)
}

/// A reader of one registry. It never writes to the file and takes no lock
/// the writer waits on; a snapshot is a few guarded copies of the words in
/// use, with no system call.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.counter("jobs_total", &[], "Jobs done.", "").unwrap().add(7);
///
/// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
/// let snap = reader.snapshot().unwrap();
/// assert_eq!(snap.get("jobs_total", &[]), Some(&topdeck::Value::Counter(7)));
/// ```
#[derive(Debug)]
pub struct RegistryReader {
    file: MappedFile,
    header: Header,
    raw: Vec<RawDescriptor>,
    metrics: Arc<Vec<MetricInfo>>,
    /// Bytes of each shard that hold known metrics.
    shard_extent: u64,
    /// Bytes of the shared area that hold known metrics.
    shared_extent: u64,
    /// Bytes of value blocks in each shard (the extent when they are packed).
    shard_used: u64,
    /// Bytes of value blocks in the shared area.
    shared_used: u64,
    limits: Limits,
    buf: Vec<u8>,
    /// Where a snapshot finds each value, worked out when descriptors are read.
    plan: Plan,
    /// The sharded counters' sums during a snapshot (kept to reuse its
    /// allocation).
    sums: Vec<u64>,
    /// Tells this reader's snapshots from others' (see `Snapshot::since`).
    id: u64,
    /// The writer's pid in this reader's pid namespace: the header's,
    /// unless the file was found in another mount namespace.
    writer_pid: u32,
}

/// The id of the next reader opened in this process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A reader id no other reader of this process has had (never 0): shared
/// with [`ForeignReader`](super::ForeignReader), so that `since` never
/// takes two readers' snapshots for one reader's.
pub(super) fn next_reader_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl RegistryReader {
    /// Opens and validates a registry file.
    pub fn open(path: &Path) -> Result<Self> {
        Self::from_mapped(MappedFile::open(path)?)
    }

    pub(crate) fn from_mapped(file: MappedFile) -> Result<Self> {
        let header = file.header()?;
        Ok(Self {
            file,
            writer_pid: header.pid,
            header,
            raw: Vec::new(),
            metrics: Arc::new(Vec::new()),
            shard_extent: 0,
            shared_extent: 0,
            shard_used: 0,
            shared_used: 0,
            limits: Limits::default(),
            buf: Vec::new(),
            plan: Plan::default(),
            sums: Vec::new(),
            id: next_reader_id(),
        })
    }

    /// Bounds what each later snapshot may cost (default
    /// [`Limits::default`]).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits each snapshot is held to.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The header as read at open time.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Whether the writer is still alive (one `flock` call; files others
    /// may open also need `/proc/locks` to say who holds the lock).
    pub fn liveness(&self) -> Liveness {
        self.liveness_in(&LockTable::new())
    }

    /// [`liveness`](Self::liveness), any question for `/proc/locks` answered
    /// from `locks`, shared with the other readers asked this round (a
    /// detached reader's liveness is such a question).
    pub fn liveness_in(&self, locks: &LockTable) -> Liveness {
        self.probe().answer(locks)
    }

    /// [`liveness`](Self::liveness), leaving any `/proc/locks` question for
    /// a caller who asks about many files at once.
    pub(crate) fn probe(&self) -> Probe {
        self.file
            .probe(Some((self.writer_pid, self.header.start_ticks)))
    }

    /// Says that the writer is `pid` in this reader's pid namespace (the
    /// header holds the pid it saw itself as, in its own), for the lock
    /// checks that ask `/proc/locks` who holds the lock.
    pub(crate) fn set_writer_pid(&mut self, pid: u32) {
        self.writer_pid = pid;
    }

    /// Closes the reader's file descriptor; the mapping, and snapshots,
    /// go on without it. An observer that keeps one reader per registry
    /// (an endpoint, a live view) then holds no descriptor per registry, so
    /// however many registries a user makes, it cannot run out of them.
    /// [`liveness`](Self::liveness) then asks `/proc/locks` who holds the
    /// writer's lock instead of probing it (a read of that file, not one
    /// `flock` call).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// registry.counter("jobs_total", &[], "", "").unwrap().add(2);
    /// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
    /// reader.detach();
    /// assert_eq!(reader.liveness(), topdeck::Liveness::Alive);
    /// assert_eq!(reader.snapshot().unwrap().get("jobs_total", &[]), Some(&topdeck::Value::Counter(2)));
    /// drop(registry);
    /// assert_eq!(reader.liveness(), topdeck::Liveness::Dead);
    /// ```
    pub fn detach(&mut self) {
        self.file.detach();
    }

    /// The file's owner: the writer's effective uid.
    pub fn owner(&self) -> u32 {
        self.file.owner()
    }

    /// The writer's clock parameters (header clock area, format v1.1):
    /// `Ok(None)` when the writer recorded none (a v1.0 writer, or one that
    /// registered no timer and never called
    /// [`Registry::record_clock_params`](crate::Registry::record_clock_params)).
    /// Converts ticks the writer stored with `topdeck_clock::ticks()`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// let reader = topdeck::RegistryReader::open(registry.path()).unwrap();
    /// assert!(reader.clock_params().unwrap().is_none(), "no timer yet");
    /// let _timer = registry.timer("job_seconds", &[], "Job time.").unwrap();
    /// let reader = topdeck::RegistryReader::open(registry.path()).unwrap();
    /// let params = reader.clock_params().unwrap().expect("this writer records them");
    /// let t = topdeck_clock::ticks();
    /// assert!(params.ticks_to_ns(t) > 0);
    /// ```
    pub fn clock_params(&self) -> Result<Option<topdeck_clock::Params>> {
        let mut buf = Vec::new();
        self.file.copy(CLOCK_OFFSET as u64, CLOCK_LEN, &mut buf)?;
        topdeck_clock::Params::from_bytes(&buf).map_err(|e| {
            let msg = format!(
                "{}: the header's clock area: {e}",
                self.file.path().display()
            );
            Error::new(crate::ErrorKind::Corrupt, msg)
                .with_path(self.file.path())
                .with_source(e)
        })
    }

    fn corrupt(&self, e: FormatError) -> Error {
        Error::format(self.file.path(), e)
    }

    /// Reads every published metric's current value. Costs what the
    /// descriptors first seen and their strings take, then the value words
    /// in use, within the reader's [`Limits`].
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let (count, in_use) = self.read_counts()?;
        if count > self.limits.max_metrics {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "{}: the registry publishes {count} metrics, more than the reader's limit \
                     of {}; if the file is trusted, raise `Limits::max_metrics`",
                    self.file.path().display(),
                    self.limits.max_metrics
                ),
            )
            .with_path(self.file.path()));
        }
        let mut budget = Budget::new(self.limits.max_bytes_per_snapshot);
        if count as usize > self.raw.len() {
            self.read_descriptors(count, &mut budget)?;
        }
        // Packed blocks are copied as one range per shard; blocks spread
        // out (never by this writer) one by one, so a reader copies what
        // the descriptors cover, not the span between them.
        let shard_dense = dense(self.shard_extent, self.shard_used);
        let shared_dense = dense(self.shared_extent, self.shared_used);
        let per_shard = if shard_dense {
            self.shard_extent.max(self.shard_used)
        } else {
            self.shard_used
        };
        let shared = if shared_dense {
            self.shared_extent.max(self.shared_used)
        } else {
            self.shared_used
        };
        // Charged before anything is allocated for the values.
        let shards = u64::from(in_use) + 1;
        budget.take(
            per_shard * shards + shared,
            "the value words",
            self.file.path(),
        )?;
        let plan = &self.plan;
        let mut hists: Vec<Value> = plan
            .histograms
            .iter()
            .map(|&i| plan.empty[i].clone())
            .collect();
        self.sums.clear();
        self.sums.resize(plan.counters, 0);
        let h = &self.header;
        if self.shard_used > 0 {
            for s in (0..in_use).chain([h.shard_count]) {
                let off = h.shard_offset(s);
                if shard_dense {
                    // One copy per shard; its counters summed run by run,
                    // one slice of words onto another.
                    self.file
                        .copy(off, self.shard_extent as usize, &mut self.buf)?;
                    for r in &plan.runs {
                        add_words(
                            &self.buf[r.at..][..r.len * WORD],
                            &mut self.sums[r.sum_at..][..r.len],
                        );
                    }
                    for (&i, v) in plan.histograms.iter().zip(&mut hists) {
                        add_histogram_shard(&self.buf, self.raw[i].value_offset as usize, v);
                    }
                } else {
                    // Blocks spread out: only what the descriptors cover.
                    for r in &plan.runs {
                        self.file
                            .copy(off + r.at as u64, r.len * WORD, &mut self.buf)?;
                        add_words(&self.buf, &mut self.sums[r.sum_at..][..r.len]);
                    }
                    for (&i, v) in plan.histograms.iter().zip(&mut hists) {
                        let d = &self.raw[i];
                        self.file.copy(
                            off + d.value_offset,
                            d.value_len as usize,
                            &mut self.buf,
                        )?;
                        add_histogram_shard(&self.buf, 0, v);
                    }
                }
            }
        }
        for v in &mut hists {
            if let Value::Histogram(h) = v {
                h.count = h
                    .buckets
                    .iter()
                    .fold(h.zero_count, |a, &b| a.wrapping_add(b));
            }
        }
        // The values in descriptor order: each run's sums, and between runs
        // the histograms as summed and the gauges (set below).
        let mut values = Vec::with_capacity(plan.empty.len());
        let mut hists = hists.into_iter();
        let mut next = 0;
        let ends = plan.runs.iter().map(|r| (r.first, r.len, r.sum_at));
        for (first, len, sum_at) in ends.chain([(plan.empty.len(), 0, 0)]) {
            for (i, empty) in plan.empty[next..first].iter().enumerate() {
                let summed = if self.raw[next + i].kind.is_sharded() {
                    hists.next()
                } else {
                    None
                };
                values.push(summed.unwrap_or_else(|| empty.clone()));
            }
            values.extend(
                self.sums[sum_at..][..len]
                    .iter()
                    .map(|&t| Value::Counter(t)),
            );
            next = first + len;
        }
        if self.shared_used > 0 {
            if shared_dense {
                self.file
                    .copy(h.shared_offset, self.shared_extent as usize, &mut self.buf)?;
            }
            for &i in &plan.gauges {
                let d = &self.raw[i];
                let at = if shared_dense {
                    d.value_offset as usize
                } else {
                    self.file
                        .copy(h.shared_offset + d.value_offset, WORD, &mut self.buf)?;
                    0
                };
                set_gauge(word(&self.buf, at), &mut values[i]);
            }
        }
        Ok(Snapshot {
            metrics: self.metrics.clone(),
            values,
            reader: self.id,
        })
    }

    /// The live `desc_count` and `shards_in_use`, checked against the header.
    fn read_counts(&mut self) -> Result<(u32, u32)> {
        self.file.copy(0, CLOCK_OFFSET, &mut self.buf)?;
        if self.buf[..8] != MAGIC
            || u32_le(&self.buf, VERSION_OFFSET) >> 16 != u32::from(VERSION_MAJOR)
        {
            return Err(self.corrupt(FormatError::Corrupt(
                "the header changed after the file was opened",
            )));
        }
        let count = u32_le(&self.buf, DESC_COUNT_OFFSET);
        let in_use = u32_le(&self.buf, SHARDS_IN_USE_OFFSET);
        // Pairs with the writer's release stores of both counts: descriptors,
        // strings and shard indices they cover are visible to the copies below.
        std::sync::atomic::fence(Ordering::Acquire);
        if count > self.header.desc_capacity || in_use > self.header.shard_count {
            return Err(self.corrupt(FormatError::Corrupt("a live count exceeds its capacity")));
        }
        if (count as usize) < self.raw.len() {
            return Err(self.corrupt(FormatError::Corrupt("the descriptor count went backwards")));
        }
        Ok((count, in_use))
    }

    /// Reads descriptors `self.raw.len()..count` a chunk at a time, each
    /// validated before the next is copied, with the strings each chunk
    /// references. Nothing is kept unless all of them are valid.
    fn read_descriptors(&mut self, count: u32, budget: &mut Budget) -> Result<()> {
        let h = &self.header;
        let path = self.file.path();
        let desc_len = h.desc_len as usize;
        let known = self.raw.len();
        let mut raw = Vec::new();
        let mut infos = Vec::new();
        let (mut shard_used, mut shared_used) = (self.shard_used, self.shared_used);
        let (mut shard_extent, mut shared_extent) = (self.shard_extent, self.shared_extent);
        let mut strings = Vec::new();
        while known + raw.len() < count as usize {
            let first = known + raw.len();
            let n = (count as usize - first).min(DESC_CHUNK);
            budget.take((n * desc_len) as u64, "descriptors", path)?;
            self.file.copy(
                h.desc_offset + (first * desc_len) as u64,
                n * desc_len,
                &mut self.buf,
            )?;
            let chunk_start = raw.len();
            for (i, b) in self.buf.chunks_exact(desc_len).enumerate() {
                let at = || format!("descriptor {} of {count}", first + i);
                let d = RawDescriptor::parse(b, h)
                    .map_err(|e| Error::format_at(path, Some(&at()), e))?;
                // Blocks are never shared, so together they fit their area;
                // this also bounds the words a snapshot sums per shard.
                let (used, extent, area) = if d.kind.is_sharded() {
                    (&mut shard_used, &mut shard_extent, h.shard_len)
                } else {
                    (&mut shared_used, &mut shared_extent, h.shared_len)
                };
                *used += u64::from(d.value_len);
                if *used > area {
                    return Err(Error::format_at(
                        path,
                        Some(&at()),
                        FormatError::Corrupt(
                            "value blocks overlap: together they exceed their area",
                        ),
                    ));
                }
                *extent = (*extent).max(d.value_end());
                raw.push(d);
            }
            let chunk = &raw[chunk_start..];
            read_strings(
                &self.file,
                h,
                chunk,
                first,
                count,
                budget,
                &mut strings,
                &mut infos,
            )?;
        }
        Arc::make_mut(&mut self.metrics).extend(infos);
        self.raw.extend(raw);
        self.plan = Plan::of(&self.raw);
        (self.shard_used, self.shared_used) = (shard_used, shared_used);
        (self.shard_extent, self.shared_extent) = (shard_extent, shared_extent);
        Ok(())
    }
}

/// Decodes the strings of `chunk` (descriptors `first..`) into `out`. When
/// they lie together, as a writer appends them, one range is copied; else
/// each reference alone, so a reader never copies the span between two
/// references, only what they reference.
#[allow(clippy::too_many_arguments)]
fn read_strings(
    file: &MappedFile,
    h: &Header,
    chunk: &[RawDescriptor],
    first: usize,
    count: u32,
    budget: &mut Budget,
    buf: &mut Vec<u8>,
    out: &mut Vec<MetricInfo>,
) -> Result<()> {
    let path = file.path();
    let refs = || {
        chunk
            .iter()
            .flat_map(RawDescriptor::strings)
            .filter(|r| r.len > 0)
    };
    let lo = refs().map(|r| u64::from(r.off)).min().unwrap_or(0);
    let hi = refs().map(|r| r.end()).max().unwrap_or(0);
    let total: u64 = chunk.iter().map(RawDescriptor::string_bytes).sum();
    let together = dense(hi - lo, total);
    if together {
        // Decoding reads every referenced byte, so charge overlaps twice.
        budget.take((hi - lo).max(total), "strings", path)?;
        file.copy(h.strings_offset + lo, (hi - lo) as usize, buf)?;
    }
    let mut piece = Vec::new();
    for (i, d) in chunk.iter().enumerate() {
        let decoded = if together {
            MetricStrings::decode_at(d, buf, lo)
        } else {
            budget.take(d.string_bytes(), "strings", path)?;
            // The four strings side by side, and a descriptor pointing at them.
            buf.clear();
            let mut local = *d;
            for r in [
                &mut local.name,
                &mut local.labels,
                &mut local.help,
                &mut local.unit,
            ] {
                file.copy(
                    h.strings_offset + u64::from(r.off),
                    r.len as usize,
                    &mut piece,
                )?;
                r.off = buf.len() as u32;
                buf.extend_from_slice(&piece);
            }
            MetricStrings::decode_at(&local, buf, 0)
        };
        let s = decoded.map_err(|e| {
            Error::format_at(
                path,
                Some(&format!("descriptor {} of {count}", first + i)),
                e,
            )
        })?;
        out.push(MetricInfo {
            kind: d.kind,
            name: s.name,
            labels: s.labels,
            help: s.help,
            unit: s.unit,
        });
    }
    Ok(())
}

fn u32_le(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn word(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + WORD].try_into().expect("8 bytes"))
}

/// Where a snapshot finds each metric's value, worked out once for a set
/// of descriptors: sharded counters as runs lying side by side (a writer
/// packs them so), summed a shard at a time, one slice of words onto
/// another; histograms and gauges by index.
#[derive(Debug, Default)]
struct Plan {
    runs: Vec<Run>,
    /// Counters in all runs: the length of the sums.
    counters: usize,
    /// Indices of sharded histograms.
    histograms: Vec<usize>,
    /// Indices of the metrics in the shared area (gauges).
    gauges: Vec<usize>,
    /// Every metric's empty value, which each snapshot starts from.
    empty: Vec<Value>,
}

/// `len` counters from index `first`, their words from byte `at` of each
/// shard, their sums from `sum_at`.
#[derive(Debug)]
struct Run {
    first: usize,
    at: usize,
    len: usize,
    sum_at: usize,
}

impl Plan {
    fn of(raw: &[RawDescriptor]) -> Self {
        let mut plan = Plan {
            empty: raw.iter().map(empty_value).collect(),
            ..Plan::default()
        };
        for (i, d) in raw.iter().enumerate() {
            match d.kind {
                MetricKind::Counter => {
                    let at = d.value_offset as usize;
                    match plan.runs.last_mut() {
                        Some(r) if r.first + r.len == i && r.at + r.len * WORD == at => r.len += 1,
                        _ => plan.runs.push(Run {
                            first: i,
                            at,
                            len: 1,
                            sum_at: plan.counters,
                        }),
                    }
                    plan.counters += 1;
                }
                k if k.is_sharded() => plan.histograms.push(i),
                _ => plan.gauges.push(i),
            }
        }
        plan
    }
}

/// Adds one shard's counter words to their running sums, saturating as
/// writers do. A loop the compiler vectorises.
#[inline(always)]
fn add_words(words: &[u8], sums: &mut [u64]) {
    for (s, w) in sums.iter_mut().zip(words.chunks_exact(WORD)) {
        *s = s.saturating_add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
}

fn empty_value(d: &RawDescriptor) -> Value {
    match d.kind {
        MetricKind::Counter => Value::Counter(0),
        MetricKind::GaugeI64 => Value::Gauge(0),
        MetricKind::GaugeF64 => Value::GaugeF64(0.0),
        MetricKind::Histogram => Value::Histogram(Box::new(HistogramValue::empty(
            d.schema,
            d.zero_threshold,
            d.min_index,
            d.bucket_count as usize,
        ))),
    }
}

/// Sets a gauge's value from its word.
fn set_gauge(w: u64, v: &mut Value) {
    match v {
        Value::Gauge(g) => *g = w as i64,
        Value::GaugeF64(g) => *g = f64::from_bits(w),
        _ => {}
    }
}

/// Adds one shard's words of a histogram, its block at `base` in `shard`
/// (validated to lie inside it), to `v`; counters are summed run by run
/// ([`add_words`]).
fn add_histogram_shard(shard: &[u8], base: usize, v: &mut Value) {
    let Value::Histogram(h) = v else { return };
    let at = |i: usize| word(shard, base + i * WORD);
    h.zero_count = h.zero_count.wrapping_add(at(H_ZERO));
    h.sum += f64::from_bits(at(H_SUM));
    let max = topdeck_format::exponential::from_ordered_bits(at(H_MAX));
    h.max = match (h.max, max) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    for (i, b) in h.buckets.iter_mut().enumerate() {
        *b = b.wrapping_add(at(HISTOGRAM_HEAD_WORDS + i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;

    #[test]
    fn a_snapshot_reads_every_kind_side_by_side() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(dir.path()).build().unwrap();
        let c = r.counter("a_total", &[], "", "").unwrap();
        let g = r.gauge("b", &[], "", "").unwrap();
        let h = r.histogram("c_seconds", &[], "", "seconds").unwrap();
        let c2 = r.counter("d_total", &[], "", "").unwrap();
        let f = r.gauge_f64("e", &[], "", "").unwrap();
        c.add(3);
        g.set(-4);
        h.record(0.5);
        h.record(2.0);
        c2.inc();
        f.set(1.5);
        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        assert_eq!(snap.get("a_total", &[]), Some(&Value::Counter(3)));
        assert_eq!(snap.get("b", &[]), Some(&Value::Gauge(-4)));
        assert_eq!(snap.get("d_total", &[]), Some(&Value::Counter(1)));
        assert_eq!(snap.get("e", &[]), Some(&Value::GaugeF64(1.5)));
        let Some(Value::Histogram(hv)) = snap.get("c_seconds", &[]) else {
            panic!("histogram missing")
        };
        assert_eq!((hv.count, hv.sum, hv.max), (2, 2.5, Some(2.0)));
    }

    fn small(dir: &Path) -> Registry {
        Registry::builder()
            .dir(dir)
            .metrics(600)
            .shards(2)
            .shard_bytes(1 << 20)
            .gauge_bytes(256 << 10)
            .build()
            .unwrap()
    }

    #[test]
    fn a_reader_is_held_to_its_limits() {
        let dir = tempfile::tempdir().unwrap();
        let r = small(dir.path());
        // More than two chunks of descriptors.
        for i in 0..600 {
            let _ = r.counter(&format!("c{i}_total"), &[], "Help.", "").unwrap();
        }
        let open = |limits| RegistryReader::open(r.path()).unwrap().with_limits(limits);
        assert_eq!(open(Limits::default()).snapshot().unwrap().len(), 600);
        let fewer = Limits {
            max_metrics: 599,
            ..Limits::default()
        };
        let err = open(fewer).snapshot().map(|s| s.len()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TooLarge, "{err}");
        assert!(err.to_string().contains("max_metrics"), "{err}");
        // 600 descriptors are 38,400 bytes: the budget runs out reading them.
        let bytes = Limits {
            max_bytes_per_snapshot: 30_000,
            ..Limits::default()
        };
        let err = open(bytes).snapshot().map(|s| s.len()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TooLarge, "{err}");
        assert!(err.to_string().contains("max_bytes_per_snapshot"), "{err}");
        // Descriptors are read once; later snapshots cost only the values.
        let mut reader = open(Limits {
            max_bytes_per_snapshot: 64 << 10,
            ..Limits::default()
        });
        reader.snapshot().unwrap();
        // A word per counter in each shard in use and the overflow shard.
        let shards = u64::from(reader.header().shards_in_use) + 1;
        reader.limits.max_bytes_per_snapshot = 600 * 8 * shards;
        reader.snapshot().unwrap();
        reader.limits.max_bytes_per_snapshot -= 1;
        let err = reader.snapshot().map(|s| s.len()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TooLarge, "{err}");
    }

    #[test]
    fn blocks_spread_out_are_read_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let r = small(dir.path());
        r.counter("a_total", &[], "", "").unwrap().add(5);
        r.gauge("b", &[], "", "").unwrap().set(-3);
        let h = r.histogram("c_seconds", &[], "", "seconds").unwrap();
        h.record(0.5);
        let mut bytes = std::fs::read(r.path()).unwrap();
        let header = Header::parse(&bytes, bytes.len() as u64).unwrap();
        // Moves each metric's block far from the others, as a writer may
        // (this one never does).
        let moves = [(0, 512 << 10), (1, 128 << 10), (2, 768 << 10)];
        for (i, to) in moves {
            let at = (header.desc_offset + i * u64::from(header.desc_len)) as usize;
            let mut d = RawDescriptor::parse(&bytes[at..at + DESCRIPTOR_LEN], &header).unwrap();
            let areas: Vec<u64> = if d.kind.is_sharded() {
                (0..=header.shard_count)
                    .map(|s| header.shard_offset(s))
                    .collect()
            } else {
                vec![header.shared_offset]
            };
            for area in areas {
                let (from, to) = ((area + d.value_offset) as usize, (area + to) as usize);
                let block = bytes[from..from + d.value_len as usize].to_vec();
                bytes[from..from + block.len()].fill(0);
                bytes[to..to + block.len()].copy_from_slice(&block);
            }
            d.value_offset = to;
            d.encode(&mut bytes[at..at + DESCRIPTOR_LEN]);
        }
        let moved = dir.path().join("moved");
        std::fs::write(&moved, &bytes).unwrap();
        let mut reader = RegistryReader::open(&moved).unwrap().with_limits(Limits {
            // Far less than copying each shard up to the furthest block.
            max_bytes_per_snapshot: 64 << 10,
            ..Limits::default()
        });
        let snap = reader.snapshot().unwrap();
        assert_eq!(snap.get("a_total", &[]), Some(&Value::Counter(5)));
        assert_eq!(snap.get("b", &[]), Some(&Value::Gauge(-3)));
        let Some(Value::Histogram(hv)) = snap.get("c_seconds", &[]) else {
            panic!("histogram missing")
        };
        assert_eq!((hv.count, hv.sum), (1, 0.5));
    }

    #[test]
    fn value_blocks_that_overlap_past_their_area_are_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::builder()
            .dir(dir.path())
            .metrics(8)
            .shard_bytes(4096)
            .build()
            .unwrap();
        let b = crate::Buckets::exponential(0, 1.0, 1e3).unwrap();
        for i in 0..3 {
            let _ = r.histogram_with(&format!("h{i}"), &[], "", "", b).unwrap();
        }
        let mut bytes = std::fs::read(r.path()).unwrap();
        let header = Header::parse(&bytes, bytes.len() as u64).unwrap();
        // Every histogram at offset 0: each fits, together they do not.
        let big = crate::Buckets::exponential(1, 1.0, 1e37).unwrap();
        for i in 0..3 {
            let at = (header.desc_offset + i * u64::from(header.desc_len)) as usize;
            let mut d = RawDescriptor::parse(&bytes[at..at + DESCRIPTOR_LEN], &header).unwrap();
            d.value_offset = 0;
            (d.schema, d.min_index) = (big.range.schema, big.range.min_index);
            d.bucket_count = big.range.bucket_count;
            d.value_len = (big.block_words() * WORD) as u32;
            d.encode(&mut bytes[at..at + DESCRIPTOR_LEN]);
        }
        let path = dir.path().join("overlap");
        std::fs::write(&path, &bytes).unwrap();
        let mut reader = RegistryReader::open(&path).unwrap();
        let err = reader.snapshot().map(|s| s.len()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains("overlap"), "{err}");
    }
}
