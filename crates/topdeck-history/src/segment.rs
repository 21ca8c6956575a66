// SPDX-License-Identifier: Apache-2.0
//! Segments on disk: one file per stretch of recording, a 16-byte header
//! then frames, each a 32-byte header and its compressed payload.
//!
//! ```text
//! segment: "TDHIST\0\x01"  start_unix_ns u64
//! frame:   "TDfr"  len u32  crc32 u32  flags u8  pad[3]
//!          unix_ns u64  samples u32  pad[4]  payload[len]
//! ```
//! Little-endian. `crc32` (IEEE) covers the header after itself and the
//! payload, so a torn tail (a frame cut by SIGKILL or power loss) or a
//! flipped byte is found, never misread. A frame whose header is damaged
//! is skipped by looking for the next magic whose checksum holds.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A segment file's first bytes, before its start time.
pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"TDHIST\0\x01";
pub(crate) const SEGMENT_HEADER: usize = 16;
const FRAME_MAGIC: &[u8; 4] = b"TDfr";
pub(crate) const FRAME_HEADER: usize = 32;
/// A frame no recorder writes: a damaged length, not a frame.
pub(crate) const MAX_FRAME: usize = 1 << 30;
/// Segment files' suffix.
pub(crate) const SUFFIX: &str = ".tdh";

/// A key frame: every source whole.
pub(crate) const KEY: u8 = 1;

/// One frame's header as found in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameAt {
    pub offset: u64,
    pub len: u32,
    pub unix_ns: u64,
    pub key: bool,
    pub samples: u32,
    crc: u32,
    header: [u8; FRAME_HEADER - 12],
}

impl FrameAt {
    /// Whether `payload` is this frame's, as its checksum says.
    fn holds(&self, payload: &[u8]) -> bool {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&self.header);
        crc.update(payload);
        crc.finalize() == self.crc
    }
}

/// A frame, header and payload, ready to append.
pub(crate) fn frame(unix_ns: u64, key: bool, samples: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME_HEADER + payload.len());
    f.extend_from_slice(FRAME_MAGIC);
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.push(if key { KEY } else { 0 });
    f.extend_from_slice(&[0; 3]);
    f.extend_from_slice(&unix_ns.to_le_bytes());
    f.extend_from_slice(&samples.to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(payload);
    let crc = crc32fast::hash(&f[12..]);
    f[8..12].copy_from_slice(&crc.to_le_bytes());
    f
}

/// A segment's header.
pub(crate) fn header(start_unix_ns: u64) -> [u8; SEGMENT_HEADER] {
    let mut h = [0; SEGMENT_HEADER];
    h[..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..].copy_from_slice(&start_unix_ns.to_le_bytes());
    h
}

/// The file name of a segment started at `start_unix_ns`: names sort as
/// times do.
pub(crate) fn name(start_unix_ns: u64) -> String {
    format!("{start_unix_ns:020}{SUFFIX}")
}

/// The name a segment has until its header is written (see
/// [`name`]); no reader lists it, and a recorder killed before the link
/// leaves one that the next recorder of the store removes.
pub(crate) fn unfinished(start_unix_ns: u64) -> String {
    format!(".{}{UNFINISHED}", name(start_unix_ns))
}

/// [`unfinished`] names' suffix.
pub(crate) const UNFINISHED: &str = ".new";

/// A segment's start time from its file name.
pub(crate) fn start_of(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(SUFFIX)?
        .parse()
        .ok()
}

/// What a scan of a segment found: its frames and its damage.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub frames: Vec<FrameAt>,
    /// Damaged stretches: (offset, what was wrong).
    pub damaged: Vec<(u64, String)>,
    /// Bytes at the end that are not a whole frame (cut while written).
    pub torn_tail: u64,
}

/// A segment's file, read with positioned reads only: whatever the
/// recorder appends meanwhile, a read past the end is short, never a
/// fault.
#[derive(Debug)]
pub(crate) struct Segment {
    pub path: PathBuf,
    file: File,
}

impl Segment {
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let mut h = [0u8; SEGMENT_HEADER];
        file.read_exact_at(&mut h, 0).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "shorter than a segment's 16-byte header (cut before it was written)",
            ),
            _ => e,
        })?;
        if &h[..8] != SEGMENT_MAGIC {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a topdeck history segment (wrong magic)",
            ));
        }
        Ok(Self {
            path: path.to_owned(),
            file,
        })
    }

    /// Every whole frame, in order, and the damage between. With
    /// `verify`, each frame's checksum is checked (its payload read);
    /// without, only headers are read, and [`payload`](Self::payload)
    /// checks the frames a reader decodes.
    pub(crate) fn scan(&self, verify: bool) -> std::io::Result<Scan> {
        let size = self.file.metadata()?.len();
        let mut scan = Scan::default();
        let mut at = SEGMENT_HEADER as u64;
        let mut buf = Vec::new();
        while at < size {
            match self.check(at, size, verify, &mut buf)? {
                Found::Frame(f) => {
                    at = f.offset + FRAME_HEADER as u64 + u64::from(f.len);
                    scan.frames.push(f);
                }
                // A damaged length reads as a frame cut short: a whole
                // frame after it says which.
                found @ (Found::Short | Found::Bad(_)) => {
                    let why = match found {
                        Found::Bad(why) => why,
                        _ => "a frame longer than what follows (damaged length)".into(),
                    };
                    // Look for the next frame whose checksum holds.
                    match self.resync(at + 1, size, &mut buf)? {
                        Some(next) => {
                            scan.damaged.push((at, why));
                            at = next;
                        }
                        None => {
                            // Nothing whole after it: what a cut write
                            // (or power loss) leaves at the end.
                            scan.torn_tail = size - at;
                            break;
                        }
                    }
                }
            }
        }
        Ok(scan)
    }

    fn check(&self, at: u64, size: u64, verify: bool, buf: &mut Vec<u8>) -> std::io::Result<Found> {
        if size - at < FRAME_HEADER as u64 {
            return Ok(Found::Short);
        }
        let mut h = [0u8; FRAME_HEADER];
        self.file.read_exact_at(&mut h, at)?;
        if &h[..4] != FRAME_MAGIC {
            return Ok(Found::Bad("no frame here (wrong magic)".into()));
        }
        let len = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        if len as usize > MAX_FRAME {
            return Ok(Found::Bad(format!(
                "a frame of {len} bytes (damaged length)"
            )));
        }
        let end = at + FRAME_HEADER as u64 + u64::from(len);
        if end > size {
            return Ok(Found::Short);
        }
        let f = FrameAt {
            offset: at,
            len,
            crc: u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")),
            header: h[12..].try_into().expect("20 bytes"),
            unix_ns: u64::from_le_bytes(h[16..24].try_into().expect("8 bytes")),
            key: h[12] & KEY != 0,
            samples: u32::from_le_bytes(h[24..28].try_into().expect("4 bytes")),
        };
        if verify {
            buf.resize(len as usize, 0);
            self.file.read_exact_at(buf, at + FRAME_HEADER as u64)?;
            if !f.holds(buf) {
                return Ok(Found::Bad("checksum mismatch".into()));
            }
        }
        Ok(Found::Frame(f))
    }

    /// The offset of the next checked frame at or after `from`.
    fn resync(&self, from: u64, size: u64, buf: &mut Vec<u8>) -> std::io::Result<Option<u64>> {
        const STEP: usize = 1 << 16;
        let mut window = vec![0u8; STEP + FRAME_MAGIC.len()];
        let mut at = from;
        while at < size {
            let n = self.file.read_at(&mut window, at)?;
            if n < FRAME_MAGIC.len() {
                return Ok(None);
            }
            for i in window[..n]
                .windows(FRAME_MAGIC.len())
                .enumerate()
                .filter(|(_, w)| *w == FRAME_MAGIC)
                .map(|(i, _)| i)
            {
                let candidate = at + i as u64;
                if let Found::Frame(_) = self.check(candidate, size, true, buf)? {
                    return Ok(Some(candidate));
                }
            }
            at += STEP as u64;
        }
        Ok(None)
    }

    /// A frame's payload, checked and decompressed; an error of kind
    /// `InvalidData` when its checksum does not hold.
    pub(crate) fn payload(&self, f: &FrameAt) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; f.len as usize];
        self.file
            .read_exact_at(&mut buf, f.offset + FRAME_HEADER as u64)?;
        if !f.holds(&buf) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "checksum mismatch",
            ));
        }
        // Grown as the data comes, never past MAX_FRAME: a damaged or
        // foreign frame cannot make a reader allocate what it claims.
        let mut out = Vec::with_capacity(buf.len() * 4);
        let decoder = zstd::stream::read::Decoder::new(buf.as_slice())?;
        std::io::Read::read_to_end(
            &mut std::io::Read::take(decoder, MAX_FRAME as u64),
            &mut out,
        )?;
        Ok(out)
    }
}

enum Found {
    Frame(FrameAt),
    /// Not enough bytes for the frame its header announces: the end of
    /// what was written so far.
    Short,
    Bad(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(path: &Path, frames: &[Vec<u8>]) {
        let mut f = File::create(path).unwrap();
        f.write_all(&header(7)).unwrap();
        for fr in frames {
            f.write_all(fr).unwrap();
        }
    }

    fn payload(s: &str) -> Vec<u8> {
        zstd::bulk::compress(s.as_bytes(), 3).unwrap()
    }

    #[test]
    fn frames_read_back_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name(7));
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|i| frame(100 + i, i == 0, 5, &payload(&format!("frame {i}"))))
            .collect();
        write(&path, &frames);
        let seg = Segment::open(&path).unwrap();
        let scan = seg.scan(true).unwrap();
        assert_eq!(scan.frames.len(), 3);
        assert!(scan.frames[0].key && !scan.frames[1].key);
        assert_eq!(seg.payload(&scan.frames[2]).unwrap(), b"frame 2");
        assert_eq!(start_of(&path), Some(7));
        // Cut in the middle of the last frame: two frames, the rest torn.
        let full = std::fs::metadata(&path).unwrap().len();
        for cut in [full - 1, full - frames[2].len() as u64 + 5] {
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(cut)
                .unwrap();
            let scan = Segment::open(&path).unwrap().scan(true).unwrap();
            assert_eq!(scan.frames.len(), 2, "cut at {cut}");
            assert!(scan.damaged.is_empty());
            assert!(scan.torn_tail > 0);
        }
    }

    #[test]
    fn a_flipped_byte_costs_its_frame_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name(7));
        let frames: Vec<Vec<u8>> = (0..4)
            .map(|i| frame(100 + i, false, 1, &payload(&format!("frame number {i}"))))
            .collect();
        let second = SEGMENT_HEADER + frames[0].len();
        // Anywhere in the second frame: its header (the length too) or
        // its payload.
        for at in [
            second + 1,
            second + 5,
            second + 20,
            second + FRAME_HEADER + 3,
        ] {
            write(&path, &frames);
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[at] ^= 0x40;
            std::fs::write(&path, &bytes).unwrap();
            let scan = Segment::open(&path).unwrap().scan(true).unwrap();
            let times: Vec<u64> = scan.frames.iter().map(|f| f.unix_ns).collect();
            assert_eq!(times, [100, 102, 103], "flipped at {at}");
            assert_eq!(scan.damaged.len(), 1);
            assert_eq!(scan.damaged[0].0, second as u64);
        }
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name(1));
        std::fs::write(&path, b"hello, this is not a segment at all").unwrap();
        let e = Segment::open(&path).unwrap_err();
        assert!(e.to_string().contains("not a topdeck history segment"));
    }
}
