// SPDX-License-Identifier: Apache-2.0
//! Reads one registry file: descriptors once, values on every snapshot.

use std::path::Path;
use std::sync::Arc;

use topdeck_format::layout::*;
use topdeck_format::{FormatError, Header, MetricKind, MetricStrings, RawDescriptor};

use super::mapped::{Liveness, MappedFile};
use super::snapshot::{HistogramValue, MetricInfo, Snapshot, Value};
use crate::error::{Error, Result};

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
    buf: Vec<u8>,
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
            header,
            raw: Vec::new(),
            metrics: Arc::new(Vec::new()),
            shard_extent: 0,
            shared_extent: 0,
            buf: Vec::new(),
        })
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
        self.file
            .liveness(Some((self.header.pid, self.header.start_ticks)))
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
            Error::new(crate::ErrorKind::Corrupt, msg).with_source(e)
        })
    }

    fn corrupt(&self, e: FormatError) -> Error {
        Error::format(self.file.path(), e)
    }

    /// Reads every published metric's current value.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let (count, in_use) = self.read_counts()?;
        if count as usize > self.raw.len() {
            self.read_descriptors(count)?;
        }
        let mut values: Vec<Value> = self.raw.iter().map(empty_value).collect();
        let h = &self.header;
        let shards: Vec<u64> = (0..in_use)
            .chain([h.shard_count])
            .map(|s| h.shard_offset(s))
            .collect();
        if self.shard_extent > 0 {
            for off in shards {
                self.file
                    .copy(off, self.shard_extent as usize, &mut self.buf)?;
                for (d, v) in self.raw.iter().zip(&mut values) {
                    if d.kind.is_sharded() {
                        add_shard(d, &self.buf, v);
                    }
                }
            }
        }
        if self.shared_extent > 0 {
            self.file
                .copy(h.shared_offset, self.shared_extent as usize, &mut self.buf)?;
            for (d, v) in self.raw.iter().zip(&mut values) {
                let w = || word(&self.buf, d.value_offset as usize);
                match d.kind {
                    MetricKind::GaugeI64 => *v = Value::Gauge(w() as i64),
                    MetricKind::GaugeF64 => *v = Value::GaugeF64(f64::from_bits(w())),
                    _ => {}
                }
            }
        }
        for v in &mut values {
            if let Value::Histogram(h) = v {
                h.count = h
                    .buckets
                    .iter()
                    .fold(h.zero_count, |a, &b| a.wrapping_add(b));
            }
        }
        Ok(Snapshot {
            metrics: self.metrics.clone(),
            values,
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
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        if count > self.header.desc_capacity || in_use > self.header.shard_count {
            return Err(self.corrupt(FormatError::Corrupt("a live count exceeds its capacity")));
        }
        if (count as usize) < self.raw.len() {
            return Err(self.corrupt(FormatError::Corrupt("the descriptor count went backwards")));
        }
        Ok((count, in_use))
    }

    fn read_descriptors(&mut self, count: u32) -> Result<()> {
        let h = &self.header;
        let first = self.raw.len() as u64;
        let len = u64::from(h.desc_len);
        self.file.copy(
            h.desc_offset + first * len,
            ((u64::from(count) - first) * len) as usize,
            &mut self.buf,
        )?;
        let new: Vec<RawDescriptor> = self
            .buf
            .chunks_exact(len as usize)
            .map(|b| RawDescriptor::parse(b, h))
            .collect::<Result<_, _>>()
            .map_err(|e| self.corrupt(e))?;
        let strings_end = new
            .iter()
            .map(RawDescriptor::strings_end)
            .max()
            .unwrap_or(0);
        self.file
            .copy(h.strings_offset, strings_end as usize, &mut self.buf)?;
        let metrics = Arc::make_mut(&mut self.metrics);
        for d in &new {
            let s = MetricStrings::decode(d, &self.buf)
                .map_err(|e| Error::format(self.file.path(), e))?;
            metrics.push(MetricInfo {
                kind: d.kind,
                name: s.name,
                labels: s.labels,
                help: s.help,
                unit: s.unit,
            });
            let end = d.value_offset + u64::from(d.value_len);
            if d.kind.is_sharded() {
                self.shard_extent = self.shard_extent.max(end);
            } else {
                self.shared_extent = self.shared_extent.max(end);
            }
        }
        self.raw.extend(new);
        Ok(())
    }
}

fn u32_le(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn word(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + WORD].try_into().expect("8 bytes"))
}

fn empty_value(d: &RawDescriptor) -> Value {
    match d.kind {
        MetricKind::Counter => Value::Counter(0),
        MetricKind::GaugeI64 => Value::Gauge(0),
        MetricKind::GaugeF64 => Value::GaugeF64(0.0),
        MetricKind::Histogram => Value::Histogram(HistogramValue {
            schema: d.schema,
            zero_threshold: d.zero_threshold,
            zero_count: 0,
            min_index: d.min_index,
            buckets: vec![0; d.bucket_count as usize],
            count: 0,
            sum: 0.0,
            max: None,
        }),
    }
}

/// Adds one shard's words for `d` (validated to lie inside `shard`) to `v`.
fn add_shard(d: &RawDescriptor, shard: &[u8], v: &mut Value) {
    let base = d.value_offset as usize;
    match v {
        Value::Counter(total) => *total = total.wrapping_add(word(shard, base)),
        Value::Histogram(h) => {
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
        _ => {}
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
}
