// SPDX-License-Identifier: Apache-2.0
//! Buffers laid out as a JVM lays them out, for tests and examples (a
//! reader's tests need files no JVM would write, built from ones it would).

use super::parse::{ENTRY_HEADER_SIZE, MAGIC, PROLOGUE_SIZE};
use super::{ByteOrder, Units, Variability};

/// Builds a PerfData 2.0 buffer entry by entry, as `PerfData::create_entry`
/// (perfData.cpp) does: header, name and NUL, padding to the data's
/// alignment, data, the whole rounded up to 8 bytes. The buffer ends at the
/// used area, so that every shorter slice of it is a truncated file.
///
/// ```
/// use topdeck_portholes::hsperf::{self, ByteOrder, SyntheticBuffer, Units, Variability};
///
/// let bytes = SyntheticBuffer::with_byte_order(ByteOrder::Big)
///     .long("java.threads.live", Units::None, Variability::Variable, 12)
///     .build();
/// assert_eq!(bytes[4], 0);
/// assert_eq!(hsperf::parse(&bytes)?.long("java.threads.live"), Some(12));
/// # Ok::<(), hsperf::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SyntheticBuffer {
    order: ByteOrder,
    accessible: bool,
    entries: Vec<u8>,
    count: u32,
}

impl Default for SyntheticBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl SyntheticBuffer {
    /// An empty little-endian, accessible buffer.
    pub fn new() -> Self {
        Self::with_byte_order(ByteOrder::Little)
    }

    /// An empty accessible buffer whose fields are all in `order`.
    pub fn with_byte_order(order: ByteOrder) -> Self {
        SyntheticBuffer {
            order,
            accessible: true,
            entries: Vec::new(),
            count: 0,
        }
    }

    /// Sets the `accessible` byte, 0 while a JVM is starting.
    pub fn accessible(mut self, accessible: bool) -> Self {
        self.accessible = accessible;
        self
    }

    /// Adds an `i64` counter (type `'J'`).
    pub fn long(self, name: &str, units: Units, variability: Variability, value: i64) -> Self {
        let data = match self.order {
            ByteOrder::Big => value.to_be_bytes(),
            ByteOrder::Little => value.to_le_bytes(),
        };
        self.entry(name, b'J', units, variability, 8, 0, &data)
    }

    /// Adds a string (a `'B'` array in [`Units::String`], NUL-terminated).
    pub fn string(self, name: &str, variability: Variability, value: &str) -> Self {
        let mut data = value.as_bytes().to_vec();
        data.push(0);
        let len = data.len();
        self.entry(name, b'B', Units::String, variability, 1, len, &data)
    }

    /// Adds a byte array in `units`.
    pub fn bytes(self, name: &str, units: Units, variability: Variability, value: &[u8]) -> Self {
        self.entry(name, b'B', units, variability, 1, value.len(), value)
    }

    #[allow(clippy::too_many_arguments)]
    fn entry(
        mut self,
        name: &str,
        data_type: u8,
        units: Units,
        variability: Variability,
        align: usize,
        vector_length: usize,
        data: &[u8],
    ) -> Self {
        let name_offset = ENTRY_HEADER_SIZE;
        let data_offset = (name_offset + name.len() + 1).next_multiple_of(align);
        let length = (data_offset + data.len()).next_multiple_of(8);
        let units = match units {
            Units::None => 1,
            Units::Bytes => 2,
            Units::Ticks => 3,
            Units::Events => 4,
            Units::String => 5,
            Units::Hertz => 6,
        };
        let variability = match variability {
            Variability::Constant => 1,
            Variability::Monotonic => 2,
            Variability::Variable => 3,
        };
        let supported = u8::from(name.starts_with("java.") || name.starts_with("com.sun."));
        let mut entry = Vec::with_capacity(length);
        for field in [length, name_offset, vector_length] {
            entry.extend_from_slice(&self.i32(field));
        }
        entry.extend_from_slice(&[data_type, supported, units, variability]);
        entry.extend_from_slice(&self.i32(data_offset));
        entry.extend_from_slice(name.as_bytes());
        entry.resize(data_offset, 0);
        entry.extend_from_slice(data);
        entry.resize(length, 0);
        self.entries.extend_from_slice(&entry);
        self.count += 1;
        self
    }

    fn i32(&self, value: usize) -> [u8; 4] {
        let value = i32::try_from(value).unwrap_or(i32::MAX);
        match self.order {
            ByteOrder::Big => value.to_be_bytes(),
            ByteOrder::Little => value.to_le_bytes(),
        }
    }

    /// The buffer: prologue and entries, `used` bytes long.
    pub fn build(&self) -> Vec<u8> {
        let used = PROLOGUE_SIZE + self.entries.len();
        let mut out = Vec::with_capacity(used);
        out.extend_from_slice(&MAGIC);
        out.push(match self.order {
            ByteOrder::Big => 0,
            ByteOrder::Little => 1,
        });
        out.extend_from_slice(&[2, 0, u8::from(self.accessible)]);
        out.extend_from_slice(&self.i32(used));
        out.extend_from_slice(&self.i32(0));
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&self.i32(PROLOGUE_SIZE));
        out.extend_from_slice(&self.i32(self.count as usize));
        out.extend_from_slice(&self.entries);
        out
    }
}
