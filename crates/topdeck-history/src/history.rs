// SPDX-License-Identifier: Apache-2.0
//! The reading side: what a store holds, every source as it was at a
//! moment, and every moment of a stretch in order, for the views.
//!
//! A reader never writes the store and takes no lock: it reads whole
//! frames whose checksums hold, and the recorder's appends meanwhile are
//! just bytes it has not reached yet.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use topdeck::Snapshot;
use topdeck_sources::Source;

use crate::codec::{Chunk, Meta, Payload, State};
use crate::error::Error;
use crate::segment::{self, FrameAt, Segment};

/// Which sources a read rebuilds: the others' series are not decoded.
pub type Filter<'a> = &'a dyn Fn(&Source) -> bool;

/// Every source as it was at one recorded moment.
#[derive(Debug)]
pub struct Moment {
    /// When the frame was recorded, ns since the Unix epoch.
    pub unix_ns: u64,
    /// The sources, in the order the recorder found them, with their
    /// series then.
    pub sources: Vec<(Source, Snapshot)>,
    /// Damage met on the way, said once; `None` when the moment was read
    /// as recorded.
    pub damage: Option<String>,
}

/// One segment file of a store.
#[derive(Debug, Clone)]
pub(crate) struct SegmentFile {
    pub path: PathBuf,
    pub start_unix_ns: u64,
    pub bytes: u64,
    pub modified: SystemTime,
}

/// A store's segments, oldest first; files of other names are ignored.
pub(crate) fn segments(dir: &Path) -> std::io::Result<Vec<SegmentFile>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let path = e.path();
        let Some(start_unix_ns) = segment::start_of(&path) else {
            continue;
        };
        let Ok(m) = e.metadata() else { continue };
        if m.is_file() {
            out.push(SegmentFile {
                path,
                start_unix_ns,
                bytes: m.len(),
                modified: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
    }
    out.sort_by_key(|s| s.start_unix_ns);
    Ok(out)
}

/// What a store holds, from its frames' headers (no payload is read).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// The store.
    pub dir: PathBuf,
    /// First and last frame, ns since the Unix epoch.
    pub from_unix_ns: Option<u64>,
    /// Last frame.
    pub to_unix_ns: Option<u64>,
    /// Frames.
    pub frames: u64,
    /// Series values in all frames.
    pub samples: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Segment files.
    pub segments: usize,
    /// Sources and series in the last frame.
    pub sources: usize,
    /// Series in the last frame.
    pub series: usize,
    /// Stretches of bytes that are not whole frames, each said.
    pub damage: Vec<String>,
}

/// A store, read.
///
/// ```no_run
/// let history = topdeck_history::History::open("/var/lib/topdeck/history".as_ref())?;
/// let then = topdeck_history::parse_time("-10m", std::time::SystemTime::now())?;
/// if let Some(moment) = history.at(then, &|s| s.process == "billing")? {
///     for (source, snap) in &moment.sources {
///         println!("{} {} series", source.process, snap.len());
///     }
/// }
/// # Ok::<(), topdeck_history::Error>(())
/// ```
#[derive(Debug)]
pub struct History {
    dir: PathBuf,
    segments: Vec<SegmentFile>,
}

impl History {
    /// The store at `dir`: an error when there is none, or nothing in it.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        let segments = segments(dir).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => Error::Empty {
                dir: dir.to_owned(),
            },
            _ => Error::Io {
                what: "cannot read the store",
                path: dir.to_owned(),
                source,
            },
        })?;
        if segments.is_empty() {
            return Err(Error::Empty {
                dir: dir.to_owned(),
            });
        }
        Ok(Self {
            dir: dir.to_owned(),
            segments,
        })
    }

    /// What it holds: span, frames, samples, bytes, and the sources and
    /// series of its last frame. With `verify`, every frame's checksum is
    /// checked and the damage listed (every byte is read).
    pub fn summary(&self, verify: bool) -> Result<Summary, Error> {
        let mut s = Summary {
            dir: self.dir.clone(),
            segments: self.segments.len(),
            ..Summary::default()
        };
        let mut last = None;
        for file in &self.segments {
            s.bytes += file.bytes;
            let (seg, scan) = match self.scan(file, verify) {
                Ok(found) => found,
                Err(e) => {
                    s.damage.push(e.to_string());
                    continue;
                }
            };
            for (at, why) in &scan.damaged {
                s.damage
                    .push(format!("{} at byte {at}: {why}", file.path.display()));
            }
            s.frames += scan.frames.len() as u64;
            s.samples += scan
                .frames
                .iter()
                .map(|f| u64::from(f.samples))
                .sum::<u64>();
            if let (Some(first), Some(end)) = (scan.frames.first(), scan.frames.last()) {
                s.from_unix_ns.get_or_insert(first.unix_ns);
                s.to_unix_ns = Some(end.unix_ns);
                last = Some((seg, scan.frames));
            }
        }
        if let Some((seg, frames)) = last {
            let mut read = Read::new(seg, frames, &|_| true);
            if let Ok(m) = read.moment(read.frames.len() - 1) {
                s.sources = m.sources.len();
                s.series = m.sources.iter().map(|(_, snap)| snap.len()).sum();
            }
        }
        Ok(s)
    }

    fn scan(&self, file: &SegmentFile, verify: bool) -> Result<(Segment, segment::Scan), Error> {
        let io = |source| Error::Io {
            what: "cannot read the segment",
            path: file.path.clone(),
            source,
        };
        let seg = Segment::open(&file.path).map_err(io)?;
        let scan = seg.scan(verify).map_err(io)?;
        Ok((seg, scan))
    }

    /// The sources `filter` keeps as they were at `unix_ns`: the last frame
    /// recorded at or before it. `None` when nothing was recorded by then.
    pub fn at(&self, unix_ns: u64, filter: Filter) -> Result<Option<Moment>, Error> {
        // The segment it falls in, or an earlier one when it falls before
        // that segment's first frame.
        let mut i = self
            .segments
            .partition_point(|s| s.start_unix_ns <= unix_ns);
        while i > 0 {
            i -= 1;
            let (seg, scan) = self.scan(&self.segments[i], false)?;
            let n = scan.frames.partition_point(|f| f.unix_ns <= unix_ns);
            if n > 0 {
                let mut read = Read::new(seg, scan.frames, filter);
                return read.moment(n - 1).map(Some);
            }
        }
        Ok(None)
    }

    /// Every moment recorded from `from` to `to` (ns since the Unix
    /// epoch, both included), in order, with the sources `filter` keeps.
    pub fn replay<'f>(&self, from: u64, to: u64, filter: Filter<'f>) -> Replay<'f> {
        Replay {
            files: self
                .segments
                .iter()
                .enumerate()
                .filter(|(i, s)| {
                    let next = self
                        .segments
                        .get(i + 1)
                        .map_or(u64::MAX, |n| n.start_unix_ns);
                    s.start_unix_ns <= to && next > from
                })
                .map(|(_, s)| s.clone())
                .collect::<Vec<_>>()
                .into_iter(),
            from,
            to,
            filter,
            read: None,
        }
    }
}

/// The moments of a stretch, in order (see [`History::replay`]).
pub struct Replay<'f> {
    files: std::vec::IntoIter<SegmentFile>,
    from: u64,
    to: u64,
    filter: Filter<'f>,
    /// The segment being read: its reader, the next frame, and the
    /// states after the frame before (`None` after damage).
    read: Option<(Read<'f>, usize, Option<States>)>,
}

impl Iterator for Replay<'_> {
    type Item = Result<Moment, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((read, i, states)) = &mut self.read {
                if let Some(f) = read.frames.get(*i).copied() {
                    if f.unix_ns > self.to {
                        self.read = None;
                        self.files = Vec::new().into_iter();
                        return None;
                    }
                    let at = *i;
                    *i += 1;
                    // The frame after a whole one is one step on; after
                    // damage (or first), rebuilt from its key frame.
                    let stepped = states
                        .take()
                        .and_then(|s| read.step(at).ok().map(|step| read.forward(s, &step)));
                    let (next, damage) = match stepped {
                        Some(next) => (next, None),
                        None => match read.states_at(at) {
                            Ok(found) => found,
                            Err(e) => return Some(Err(e)),
                        },
                    };
                    let moment = Moment {
                        unix_ns: f.unix_ns,
                        sources: next.iter().map(|(_, s)| s.view()).collect(),
                        damage,
                    };
                    *states = Some(next);
                    return Some(Ok(moment));
                }
                self.read = None;
            }
            let file = self.files.next()?;
            let io = |source| Error::Io {
                what: "cannot read the segment",
                path: file.path.clone(),
                source,
            };
            let opened = Segment::open(&file.path).and_then(|seg| {
                let scan = seg.scan(false)?;
                Ok((seg, scan))
            });
            match opened {
                Ok((seg, scan)) => {
                    let first = scan.frames.partition_point(|f| f.unix_ns < self.from);
                    self.read = Some((Read::new(seg, scan.frames, self.filter), first, None));
                }
                Err(e) => return Some(Err(io(e))),
            }
        }
    }
}

/// Sources rebuilt, by number, in their frame's order.
type States = Vec<(u32, State)>;

/// One frame's sources, decoded for those the filter keeps.
type Step = Vec<(u32, Option<Meta>, Chunk)>;

/// Reading one segment's frames for a filter.
struct Read<'f> {
    seg: Segment,
    frames: Vec<FrameAt>,
    filter: Filter<'f>,
    /// Sources by number: whether the filter keeps them.
    wanted: HashMap<u32, bool>,
}

impl<'f> Read<'f> {
    fn new(seg: Segment, frames: Vec<FrameAt>, filter: Filter<'f>) -> Self {
        Self {
            seg,
            frames,
            filter,
            wanted: HashMap::new(),
        }
    }

    /// Frame `i`, decoded for the sources wanted; why not, when it is
    /// damaged.
    fn step(&mut self, i: usize) -> Result<Step, String> {
        let f = self.frames[i];
        let bytes = self
            .seg
            .payload(&f)
            .map_err(|e| self.damaged(&f, &e.to_string()))?;
        let payload: Payload =
            postcard::from_bytes(&bytes).map_err(|e| self.damaged(&f, &e.to_string()))?;
        let mut step = Vec::with_capacity(payload.entries.len());
        for e in payload.entries {
            let wanted = match &e.meta {
                Some(m) => {
                    let w = (self.filter)(&m.source(0));
                    self.wanted.insert(e.id, w);
                    w
                }
                None => self.wanted.get(&e.id).copied().unwrap_or(false),
            };
            if wanted {
                let chunk: Chunk = postcard::from_bytes(e.chunk)
                    .map_err(|err| self.damaged(&f, &err.to_string()))?;
                step.push((e.id, e.meta, chunk));
            }
        }
        Ok(step)
    }

    fn damaged(&self, f: &FrameAt, why: &str) -> String {
        format!(
            "the frame of {} in {} is damaged ({why})",
            crate::time::format(f.unix_ns),
            self.seg.path.display()
        )
    }

    /// The states after `step` from those before it: the sources the
    /// frame lists, in its order; one whose change does not fit is left
    /// out.
    fn forward(&self, before: States, step: &Step) -> States {
        let mut before: HashMap<u32, State> = before.into_iter().collect();
        step.iter()
            .filter_map(|(id, meta, chunk)| {
                State::next(meta.as_ref(), chunk, before.remove(id))
                    .ok()
                    .map(|s| (*id, s))
            })
            .collect()
    }

    /// The states at frame `target`, and the damage met: forward from the
    /// key frame before it, or, past a damaged frame, backward from the
    /// key frame after it; failing both, as far forward as it got.
    fn states_at(&mut self, target: usize) -> Result<(States, Option<String>), Error> {
        let key = (0..=target)
            .rev()
            .find(|&i| self.frames[i].key)
            .unwrap_or(0);
        let mut states = Vec::new();
        let mut damage = None;
        for i in key..=target {
            match self.step(i) {
                Ok(step) => states = self.forward(states, &step),
                Err(why) => {
                    damage = Some(why);
                    break;
                }
            }
        }
        let Some(why) = damage else {
            return Ok((states, None));
        };
        match self.backward_to(target) {
            Some(back) => Ok((
                back,
                Some(format!("{why}; rebuilt from the next key frame")),
            )),
            None => Ok((states, Some(format!("{why}; later values may be stale")))),
        }
    }

    /// The states at `target` rebuilt backward from the next key frame.
    fn backward_to(&mut self, target: usize) -> Option<States> {
        let next = (target + 1..self.frames.len()).find(|&i| self.frames[i].key)?;
        let mut steps = Vec::with_capacity(next - target);
        for i in target + 1..=next {
            steps.push(self.step(i).ok()?);
        }
        let mut states = self.forward(Vec::new(), steps.last()?);
        for step in steps.iter().rev() {
            let by_id: HashMap<u32, &Chunk> = step.iter().map(|(id, _, c)| (*id, c)).collect();
            states = states
                .into_iter()
                .filter_map(|(id, s)| s.backward(by_id.get(&id)?).map(|b| (id, b)))
                .collect();
        }
        Some(states)
    }

    fn moment(&mut self, target: usize) -> Result<Moment, Error> {
        let (states, damage) = self.states_at(target)?;
        Ok(Moment {
            unix_ns: self.frames[target].unix_ns,
            sources: states.iter().map(|(_, s)| s.view()).collect(),
            damage,
        })
    }
}
