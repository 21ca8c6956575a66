// SPDX-License-Identifier: Apache-2.0
//! The writing side: one frame per call, appended to the open segment
//! with one `write`; a new segment every hour (or every
//! [`Options::segment_bytes`]), oldest segments removed by age and size.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use topdeck::Snapshot;
use topdeck_sources::Source;

use crate::codec::{delta, Chunk, Def, Delta, Entry, Meta, Payload, Whole};
use crate::error::Error;
use crate::segment;

/// How a [`Recorder`] keeps its store.
#[derive(Debug, Clone)]
pub struct Options {
    /// Segments whose last frame is older than this are removed.
    pub retain: Duration,
    /// The store's size: beyond it, the oldest segments are removed.
    pub max_size: u64,
    /// A key frame (every value whole) every this many frames: how far a
    /// reader decodes to reach any moment, and how far a damaged frame's
    /// loss can reach.
    pub key_every: u32,
    /// A segment is closed after this long...
    pub segment_span: Duration,
    /// ...or this many bytes, whichever first.
    pub segment_bytes: u64,
}

impl Default for Options {
    /// 7 days, 2 GiB, a key frame a minute at 1 s, hour-long segments.
    fn default() -> Self {
        Self::sized(Duration::from_secs(7 * 86_400), 2 << 30)
    }
}

impl Options {
    /// Keeping `retain` and at most `max_size` bytes: a segment is at most
    /// an eighth of that (so removing one frees at most an eighth).
    pub fn sized(retain: Duration, max_size: u64) -> Self {
        Self {
            retain,
            max_size,
            key_every: 60,
            segment_span: Duration::from_secs(3600),
            segment_bytes: (max_size / 8).clamp(64 << 10, 256 << 20),
        }
    }
}

/// What one [`Recorder::record`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Bytes appended (frame header included).
    pub bytes: u64,
    /// Series values in the frame.
    pub samples: u64,
    /// Whether it was a key frame.
    pub key: bool,
}

/// The recorder's own counts since it opened the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames written.
    pub frames: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Series values written.
    pub samples: u64,
    /// Frames not written (the disk was full, or a write failed).
    pub lost_frames: u64,
    /// Segments removed by retention.
    pub removed_segments: u64,
}

/// A source as the last frame sent it.
#[derive(Debug)]
struct Sent {
    id: u32,
    meta: Meta,
    snap: Snapshot,
}

/// The open segment.
#[derive(Debug)]
struct Open {
    file: File,
    path: PathBuf,
    start_unix_ns: u64,
    /// Bytes known written whole: a failed write is cut back to it.
    len: u64,
}

/// Appends frames to a store, one [`record`](Self::record) per interval.
/// One recorder per store: a second one is refused while the first runs.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use topdeck_history::{History, Options, Recorder};
/// let registry = topdeck::Registry::builder().dir(dir.path().join("ns")).build()?;
/// let jobs = registry.counter("jobs_total", &[], "", "")?;
/// let mut tracker = topdeck_sources::Tracker::<()>::new(topdeck::Namespace::at(registry.path().parent().unwrap()), None);
/// let mut recorder = Recorder::open(&dir.path().join("history"), Options::default())?;
/// for (t, n) in [(1_000_000_000, 5), (2_000_000_000, 7)] {
///     jobs.add(n);
///     let look = tracker.look();
///     let snaps: Vec<_> = look.sources.iter().map(|s| tracker.open(s).unwrap().snapshot().unwrap()).collect();
///     recorder.record(t, look.sources.iter().zip(snaps))?;
/// }
/// let then = History::open(&dir.path().join("history"))?.at(1_500_000_000, &|_| true)?.unwrap();
/// assert_eq!(then.sources[0].1.get("jobs_total", &[]), Some(&topdeck::Value::Counter(5)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Recorder {
    dir: PathBuf,
    options: Options,
    /// Held for the recorder's life: the store's one writer.
    _lock: File,
    open: Option<Open>,
    sent: HashMap<PathBuf, Sent>,
    next_id: u32,
    /// Frames since the last key frame.
    since_key: u32,
    compressor: zstd::bulk::Compressor<'static>,
    stats: Stats,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("dir", &self.dir)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// Opens (creating, mode 0700) the store at `dir` for writing. Refused
    /// when another recorder writes it, or when the directory is another
    /// user's or writable by others (what it records would not be safe
    /// there). Recording starts a new segment: what was there is kept.
    pub fn open(dir: &Path, options: Options) -> Result<Self, Error> {
        let io = |what: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| Error::Io { what, path, source }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io("cannot create the store", dir))?;
        let meta = std::fs::symlink_metadata(dir).map_err(io("cannot read the store", dir))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
            return Err(Error::Unsafe {
                dir: dir.to_owned(),
                why: match meta.is_dir() {
                    false => "it is not a directory".into(),
                    true if meta.uid() != me => format!("it belongs to uid {}", meta.uid()),
                    true => format!("others may write it (mode {:o})", meta.mode() & 0o7777),
                },
            });
        }
        let lock_path = dir.join(".lock");
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io("cannot open the store's lock", &lock_path))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&lock),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        } != 0
        {
            return Err(Error::Busy {
                dir: dir.to_owned(),
            });
        }
        remove_unfinished(dir);
        Ok(Self {
            dir: dir.to_owned(),
            options,
            _lock: lock,
            open: None,
            sent: HashMap::new(),
            next_id: 0,
            since_key: 0,
            compressor: zstd::bulk::Compressor::new(3).map_err(io("cannot start zstd", dir))?,
            stats: Stats::default(),
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What it wrote so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Appends one frame: every source given, as of `unix_ns` (the
    /// snapshots are kept until the next frame, to say what changed). Sources
    /// not given are gone from this frame on. On an error (a full disk)
    /// nothing is left half-written, the frame is counted lost, and the
    /// next call starts afresh with a key frame in a new segment.
    pub fn record<'a>(
        &mut self,
        unix_ns: u64,
        sources: impl IntoIterator<Item = (&'a Source, Snapshot)>,
    ) -> Result<Written, Error> {
        let result = self.try_record(unix_ns, sources);
        if result.is_err() {
            self.stats.lost_frames += 1;
            self.sent.clear();
            self.since_key = 0;
            if let Some(open) = self.open.take() {
                // Cut back whatever part of the frame was written; a
                // reader would drop it anyway, but the next segment must
                // not follow a torn frame in this one.
                let _ = open.file.set_len(open.len);
            }
        }
        result
    }

    fn try_record<'a>(
        &mut self,
        unix_ns: u64,
        sources: impl IntoIterator<Item = (&'a Source, Snapshot)>,
    ) -> Result<Written, Error> {
        let key = self.since_key == 0 || self.open.is_none();
        if key && self.rotate(unix_ns)? {
            // A new segment stands alone.
            self.sent.clear();
        }
        let (payload, samples) = self.encode(key, sources);
        let compressed = self
            .compressor
            .compress(&payload)
            .map_err(|source| Error::Io {
                what: "cannot compress a frame",
                path: self.dir.clone(),
                source,
            })?;
        let frame = segment::frame(unix_ns, key, samples as u32, &compressed);
        let open = self.open.as_mut().expect("rotate opened a segment");
        let io = |what, source| Error::Io {
            what,
            path: open.path.clone(),
            source,
        };
        (&open.file)
            .write_all(&frame)
            .map_err(|e| io("cannot append a frame to", e))?;
        open.len += frame.len() as u64;
        if key {
            // A key frame is where a reader starts: make what led to it
            // durable (once a minute at 1 s).
            open.file.sync_data().map_err(|e| io("cannot sync", e))?;
        }
        self.since_key = (self.since_key + 1) % self.options.key_every.max(1);
        self.stats.frames += 1;
        self.stats.bytes += frame.len() as u64;
        self.stats.samples += samples;
        Ok(Written {
            bytes: frame.len() as u64,
            samples,
            key,
        })
    }

    /// The frame's payload and its number of series values.
    fn encode<'a>(
        &mut self,
        key: bool,
        sources: impl IntoIterator<Item = (&'a Source, Snapshot)>,
    ) -> (Vec<u8>, u64) {
        let mut chunks: Vec<(u32, Option<Meta>, Vec<u8>)> = Vec::new();
        let mut seen: HashMap<PathBuf, Sent> = HashMap::with_capacity(self.sent.len());
        let mut samples = 0u64;
        for (source, snap) in sources {
            let meta = Meta::of(source);
            samples += snap.len() as u64;
            let before = self
                .sent
                .remove(&source.path)
                .filter(|b| b.meta.same_writer(&meta));
            let (id, said, chunk) = match before {
                // The same series, perhaps more of them: changes only (and
                // all whole in a key frame, with the changes to undo it).
                Some(b) if b.snap.lineage() == snap.lineage() && b.snap.len() <= snap.len() => {
                    let known = b.snap.len();
                    let mut deltas: Vec<Delta> = snap
                        .iter()
                        .zip(b.snap.iter())
                        .map(|((_, n), (_, o))| delta(n, o))
                        .collect();
                    let chunk = match key {
                        true => Chunk {
                            undo: deltas,
                            ..whole(&snap)
                        },
                        false => {
                            let new = || snap.iter().skip(known);
                            deltas.extend(new().map(|(_, v)| Delta::Whole(Whole::of(v))));
                            Chunk {
                                reset: false,
                                defs: new().map(|(m, _)| Def::of(m)).collect(),
                                values: deltas,
                                undo: Vec::new(),
                            }
                        }
                    };
                    let said = (key || b.meta != meta).then(|| meta.clone());
                    (b.id, said, chunk)
                }
                // Renumbered series: all again, under the same number.
                Some(b) => (b.id, Some(meta.clone()), whole(&snap)),
                None => {
                    self.next_id = self.next_id.wrapping_add(1);
                    (self.next_id, Some(meta.clone()), whole(&snap))
                }
            };
            let bytes = postcard::to_stdvec(&chunk).expect("a chunk always encodes");
            chunks.push((id, said, bytes));
            seen.insert(source.path.clone(), Sent { id, meta, snap });
        }
        self.sent = seen;
        let payload = Payload {
            entries: chunks
                .iter()
                .map(|(id, meta, chunk)| Entry {
                    id: *id,
                    meta: meta.clone(),
                    chunk,
                })
                .collect(),
        };
        let bytes = postcard::to_stdvec(&payload).expect("a payload always encodes");
        (bytes, samples)
    }

    /// Opens a new segment when none is open, the open one is old or big
    /// enough (saying whether it did), and removes what retention says
    /// must go.
    fn rotate(&mut self, unix_ns: u64) -> Result<bool, Error> {
        let due = self.open.as_ref().is_none_or(|o| {
            o.len >= self.options.segment_bytes
                || unix_ns.saturating_sub(o.start_unix_ns)
                    >= self.options.segment_span.as_nanos() as u64
        });
        self.retain(unix_ns);
        if !due {
            return Ok(false);
        }
        let path = self.dir.join(segment::name(unix_ns));
        let io = |what, source| Error::Io {
            what,
            path: path.clone(),
            source,
        };
        // Written under a name readers skip, then linked to its own (which
        // must not exist yet): a segment is never seen without its header,
        // wherever a kill lands.
        let new = self.dir.join(segment::unfinished(unix_ns));
        let _ = std::fs::remove_file(&new);
        let file = File::options()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(&new)
            .map_err(|e| io("cannot create the segment", e))?;
        let header = segment::header(unix_ns);
        if let Err(e) = (&file)
            .write_all(&header)
            .and_then(|()| std::fs::hard_link(&new, &path))
        {
            drop(file);
            let _ = std::fs::remove_file(&new);
            return Err(io("cannot write the segment", e));
        }
        let _ = std::fs::remove_file(&new);
        self.open = Some(Open {
            file,
            path,
            start_unix_ns: unix_ns,
            len: header.len() as u64,
        });
        Ok(true)
    }

    /// Removes the oldest segments: those last written before `retain`,
    /// then as many as the size cap says. The open one is kept.
    fn retain(&mut self, unix_ns: u64) {
        let Ok(listing) = crate::history::segments(&self.dir) else {
            return;
        };
        let open = self.open.as_ref().map(|o| o.path.as_path());
        let horizon = SystemTime::UNIX_EPOCH + Duration::from_nanos(unix_ns);
        let horizon = horizon.checked_sub(self.options.retain);
        let mut total: u64 = listing.iter().map(|s| s.bytes).sum();
        for s in &listing {
            if Some(s.path.as_path()) == open {
                continue;
            }
            let old = horizon.is_some_and(|h| s.modified < h);
            if (old || total > self.options.max_size) && std::fs::remove_file(&s.path).is_ok() {
                total -= s.bytes;
                self.stats.removed_segments += 1;
            }
        }
    }
}

/// Removes the segments a killed recorder left before their header was
/// whole (see [`segment::unfinished`]); called holding the store's lock.
fn remove_unfinished(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(segment::UNFINISHED) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A source's series all whole, replacing any known before.
fn whole(snap: &Snapshot) -> Chunk {
    Chunk {
        reset: true,
        defs: snap.iter().map(|(m, _)| Def::of(m)).collect(),
        values: snap
            .iter()
            .map(|(_, v)| Delta::Whole(Whole::of(v)))
            .collect(),
        undo: Vec::new(),
    }
}
