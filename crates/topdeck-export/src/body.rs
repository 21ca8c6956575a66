// SPDX-License-Identifier: Apache-2.0
//! An encoded exposition in pieces: each family's series in its own buffer
//! and the text around them (headers, length prefixes, `# EOF`) in
//! another, in order. A server writes the pieces out one after another, so
//! a 20 MB exposition is never copied into one more buffer just to be sent.

use std::io::{self, Read, Write};

use crate::histogram::LeCache;

/// Buffers an encoder fills, kept between encodings (by the
/// [`Scraper`](crate::Scraper), for one): once they have grown to the
/// exposition's size they stop allocating. The bucket bounds already
/// formatted are kept with them.
#[derive(Debug, Default)]
pub struct Buffers {
    pub(crate) sink: Sink,
    pub(crate) les: LeCache,
}

impl Buffers {
    /// The sink and the formatted bounds, borrowed apart.
    pub(crate) fn split(&mut self) -> (&mut Sink, &mut LeCache) {
        (&mut self.sink, &mut self.les)
    }

    /// Lets go of the encoded bytes and their buffers, keeping the
    /// formatted bounds.
    pub(crate) fn clear_sink(&mut self) {
        self.sink = Sink::default();
    }

    /// What the last encoding produced.
    pub(crate) fn body(&self) -> Body<'_> {
        Body {
            text: &self.sink.text,
            parts: &self.sink.parts,
            families: &self.sink.families,
        }
    }
}

/// Spare capacity a buffer may keep beyond twice what it last held.
const SPARE: usize = 64 << 10;

/// Empties `b`; gives back the capacity beyond twice what it held.
fn recycle(b: &mut Vec<u8>) {
    let used = b.len();
    b.clear();
    if b.capacity() > 2 * used + SPARE {
        b.shrink_to(2 * used);
    }
}

/// Where an encoding goes: one buffer per family, the text around them,
/// and the order of both.
#[derive(Debug, Default)]
pub(crate) struct Sink {
    pub(crate) families: Vec<Vec<u8>>,
    text: Vec<u8>,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, Copy)]
enum Part {
    Text { start: usize, end: usize },
    Family(usize),
}

impl Sink {
    /// Empties everything with `families` family buffers, keeping the
    /// capacity the last encoding used: one spike (a registry that grew,
    /// then rotated away) is not held for the rest of the process's life.
    pub(crate) fn reset(&mut self, families: usize) {
        self.families.truncate(families);
        self.families.resize_with(families, Vec::new);
        for b in &mut self.families {
            recycle(b);
        }
        recycle(&mut self.text);
        self.parts.clear();
    }

    /// Places family `index`'s buffer next in the body.
    pub(crate) fn family(&mut self, index: usize) {
        self.parts.push(Part::Family(index));
    }
}

/// Text written to a sink goes between the families, in order.
impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let start = self.text.len();
        self.text.extend_from_slice(buf);
        let end = self.text.len();
        match self.parts.last_mut() {
            Some(Part::Text { end: e, .. }) if *e == start => *e = end,
            _ => self.parts.push(Part::Text { start, end }),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// An encoded exposition, as pieces to be written in order.
#[derive(Debug, Clone, Copy)]
pub struct Body<'b> {
    text: &'b [u8],
    parts: &'b [Part],
    families: &'b [Vec<u8>],
}

impl<'b> Body<'b> {
    fn chunk(&self, part: Part) -> &'b [u8] {
        match part {
            Part::Text { start, end } => &self.text[start..end],
            Part::Family(i) => &self.families[i][..],
        }
    }

    /// The pieces, in order.
    pub fn chunks(&self) -> impl Iterator<Item = &'b [u8]> + 'b {
        let body = *self;
        self.parts.iter().map(move |&p| body.chunk(p))
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.chunks().map(<[u8]>::len).sum()
    }

    /// Whether there are no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes every piece to `w`.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        self.chunks().try_for_each(|c| w.write_all(c))
    }

    /// The body as a reader, for an HTTP library that sends from one.
    pub fn reader(&self) -> BodyReader<'b> {
        BodyReader {
            body: *self,
            part: 0,
            offset: 0,
        }
    }
}

/// Reads a [`Body`] piece by piece.
#[derive(Debug)]
pub struct BodyReader<'b> {
    body: Body<'b>,
    part: usize,
    offset: usize,
}

impl Read for BodyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while let Some(&part) = self.body.parts.get(self.part) {
            let chunk = self.body.chunk(part);
            let rest = &chunk[self.offset..];
            if rest.is_empty() {
                self.part += 1;
                self.offset = 0;
                continue;
            }
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            self.offset += n;
            return Ok(n);
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spike_is_given_back_once_encodings_are_small_again() {
        let mut sink = Sink::default();
        sink.reset(3);
        sink.families[1].resize(8 << 20, b'x');
        sink.reset(3);
        assert!(
            sink.families[1].capacity() >= 8 << 20,
            "kept while it may be needed again"
        );
        sink.families[1].extend_from_slice(b"small");
        sink.reset(3);
        assert!(
            sink.families[1].capacity() <= SPARE,
            "{}",
            sink.families[1].capacity()
        );
        sink.reset(1);
        assert_eq!(
            sink.families.len(),
            1,
            "buffers of families gone are dropped"
        );
    }

    #[test]
    fn text_and_families_come_out_in_the_order_written() {
        let mut b = Buffers::default();
        let (sink, _) = b.split();
        sink.reset(2);
        sink.families[0].extend_from_slice(b"zero\n");
        sink.families[1].extend_from_slice(b"one\n");
        sink.write_all(b"# a").unwrap();
        sink.write_all(b"\n").unwrap();
        sink.family(1);
        sink.write_all(b"# b\n").unwrap();
        sink.family(0);
        sink.family(0);
        sink.write_all(b"# EOF\n").unwrap();
        let body = b.body();
        let want = b"# a\none\n# b\nzero\nzero\n# EOF\n";
        assert_eq!(body.len(), want.len());
        assert_eq!(body.chunks().count(), 6, "adjacent text is one piece");
        let mut written = Vec::new();
        body.write_to(&mut written).unwrap();
        assert_eq!(written, want);
        // Read through buffers smaller than the pieces.
        let mut read = Vec::new();
        let mut r = body.reader();
        let mut small = [0u8; 3];
        loop {
            let n = r.read(&mut small).unwrap();
            if n == 0 {
                break;
            }
            read.extend_from_slice(&small[..n]);
        }
        assert_eq!(read, want);
    }
}
