// SPDX-License-Identifier: Apache-2.0
//! Keys: what a key press is to the view ([`Key`]), and how the bytes a
//! terminal sends become keys ([`KeyParser`]), for the input thread that
//! reads the terminal itself (see `event`).

/// A key press, as far as the view cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A printable character (no Control held).
    Char(char),
    /// Arrow up.
    Up,
    /// Arrow down.
    Down,
    /// Arrow left.
    Left,
    /// Arrow right.
    Right,
    /// Page up.
    PageUp,
    /// Page down.
    PageDown,
    /// Home.
    Home,
    /// End.
    End,
    /// Tab.
    Tab,
    /// Shift-Tab.
    BackTab,
    /// Enter.
    Enter,
    /// Escape.
    Esc,
    /// Backspace.
    Backspace,
    /// Control-C.
    CtrlC,
}

const ESC: u8 = 0x1b;

/// The longest escape sequence kept while waiting for its end; anything
/// longer is not a key the view knows, and is dropped.
const MAX_SEQUENCE: usize = 32;

/// Turns the bytes a terminal sends into [`Key`]s: printable characters
/// (UTF-8), Control-C, Enter, Tab, Backspace, Escape, and the legacy
/// sequences for the four arrows, Home/End, Page Up/Down and Shift-Tab (CSI and
/// SS3 forms, modifiers ignored). Alt with a character is that character;
/// anything else is skipped. A sequence cut by the end of a read waits
/// for the next read, except a lone ESC, which is the Escape key: what
/// terminals send for it, and how crossterm reads it too.
#[derive(Debug, Default)]
pub struct KeyParser {
    pending: Vec<u8>,
}

/// One step of [`KeyParser`]: a key and the bytes it took, bytes to
/// skip, or a sequence that needs more bytes.
#[derive(Debug, PartialEq)]
enum Parsed {
    Key(Key, usize),
    Skip(usize),
    Incomplete,
}

impl KeyParser {
    /// The keys of `bytes`, one read's worth.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Key> {
        self.pending.extend_from_slice(bytes);
        let mut keys = Vec::new();
        let mut at = 0;
        while at < self.pending.len() {
            match parse(&self.pending[at..]) {
                Parsed::Key(k, n) => {
                    keys.push(k);
                    at += n;
                }
                Parsed::Skip(n) => at += n,
                Parsed::Incomplete => break,
            }
        }
        self.pending.drain(..at);
        if self.pending == [ESC] {
            keys.push(Key::Esc);
            self.pending.clear();
        }
        if self.pending.len() > MAX_SEQUENCE {
            self.pending.clear();
        }
        keys
    }
}

/// The first key of `b` (not empty).
fn parse(b: &[u8]) -> Parsed {
    match b[0] {
        ESC => escape(b),
        0x03 => Parsed::Key(Key::CtrlC, 1),
        b'\r' | b'\n' => Parsed::Key(Key::Enter, 1),
        b'\t' => Parsed::Key(Key::Tab, 1),
        0x7f | 0x08 => Parsed::Key(Key::Backspace, 1),
        0x00..=0x1f => Parsed::Skip(1),
        first => {
            let len = match first {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                0x80..=0xff => return Parsed::Skip(1),
                _ => 1,
            };
            if b.len() < len {
                return Parsed::Incomplete;
            }
            match std::str::from_utf8(&b[..len])
                .ok()
                .and_then(|s| s.chars().next())
            {
                Some(c) => Parsed::Key(Key::Char(c), len),
                None => Parsed::Skip(1),
            }
        }
    }
}

/// `b` starts with ESC.
fn escape(b: &[u8]) -> Parsed {
    match b.get(1) {
        None => Parsed::Incomplete,
        Some(b'[') => csi(b),
        Some(b'O') => match b.get(2) {
            None => Parsed::Incomplete,
            Some(f) => match cursor_key(*f) {
                Some(k) => Parsed::Key(k, 3),
                None => Parsed::Skip(3),
            },
        },
        // Escape pressed twice: the first is one.
        Some(&ESC) => Parsed::Key(Key::Esc, 1),
        Some(_) => match parse(&b[1..]) {
            Parsed::Key(Key::Char(c), n) => Parsed::Key(Key::Char(c), 1 + n),
            Parsed::Key(_, n) | Parsed::Skip(n) => Parsed::Skip(1 + n),
            Parsed::Incomplete => Parsed::Incomplete,
        },
    }
}

/// `b` starts with ESC `[`: parameters, intermediates, one final byte.
fn csi(b: &[u8]) -> Parsed {
    for (i, &c) in b.iter().enumerate().skip(2) {
        match c {
            0x20..=0x3f => continue,
            0x40..=0x7e => {
                let params = std::str::from_utf8(&b[2..i]).unwrap_or("");
                let first: Option<u32> = params.split(';').next().and_then(|p| p.parse().ok());
                let key = match c {
                    b'~' => match first {
                        Some(1 | 7) => Some(Key::Home),
                        Some(4 | 8) => Some(Key::End),
                        Some(5) => Some(Key::PageUp),
                        Some(6) => Some(Key::PageDown),
                        _ => None,
                    },
                    b'Z' => Some(Key::BackTab),
                    f => cursor_key(f),
                };
                return match key {
                    Some(k) => Parsed::Key(k, i + 1),
                    None => Parsed::Skip(i + 1),
                };
            }
            // Not a CSI byte: the sequence was cut; drop what came before.
            _ => return Parsed::Skip(i),
        }
    }
    Parsed::Incomplete
}

/// The key of a cursor sequence's final byte (CSI or SS3).
fn cursor_key(f: u8) -> Option<Key> {
    match f {
        b'A' => Some(Key::Up),
        b'B' => Some(Key::Down),
        b'C' => Some(Key::Right),
        b'D' => Some(Key::Left),
        b'H' => Some(Key::Home),
        b'F' => Some(Key::End),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_bytes_become_view_keys() {
        let keys = |b: &[u8]| KeyParser::default().feed(b);
        assert_eq!(keys(b"q"), [Key::Char('q')]);
        assert_eq!(keys(b"\x03"), [Key::CtrlC]);
        assert_eq!(
            keys(b"/al\r"),
            [Key::Char('/'), Key::Char('a'), Key::Char('l'), Key::Enter]
        );
        assert_eq!(
            keys(b"\t\x1b[Z\x7f"),
            [Key::Tab, Key::BackTab, Key::Backspace]
        );
        assert_eq!(
            keys(b"\x1b[A\x1bOB\x1b[5~\x1b[6~\x1b[1~\x1b[F\x1b[1;5A\x1b[C\x1bOD"),
            [
                Key::Up,
                Key::Down,
                Key::PageUp,
                Key::PageDown,
                Key::Home,
                Key::End,
                Key::Up,
                Key::Right,
                Key::Left
            ]
        );
        assert_eq!(keys("é".as_bytes()), [Key::Char('é')]);
        // A lone ESC at the end of a read is the Escape key; Alt-x is x.
        assert_eq!(keys(b"\x1b"), [Key::Esc]);
        assert_eq!(keys(b"\x1bx"), [Key::Char('x')]);
        assert_eq!(keys(b"\x1b\x1b"), [Key::Esc, Key::Esc]);
        // Keys the view does not use are skipped, whatever follows them.
        assert_eq!(keys(b"\x1b[E\x1b[15~\x01q"), [Key::Char('q')]);
    }

    #[test]
    fn a_sequence_cut_between_reads_is_completed_by_the_next() {
        let mut p = KeyParser::default();
        assert!(p.feed(b"\x1b[").is_empty());
        assert!(p.feed(b"5").is_empty());
        assert_eq!(p.feed(b"~q"), [Key::PageUp, Key::Char('q')]);
        assert!(p.feed(&"é".as_bytes()[..1]).is_empty());
        assert_eq!(p.feed(&"é".as_bytes()[1..]), [Key::Char('é')]);
        // Garbage that never ends is dropped, not kept forever.
        assert!(p
            .feed(b"\x1b[0000000000000000000000000000000000000000")
            .is_empty());
        assert_eq!(p.feed(b"q"), [Key::Char('q')]);
    }
}
