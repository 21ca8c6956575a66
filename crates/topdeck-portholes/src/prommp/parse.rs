// SPDX-License-Identifier: Apache-2.0
//! The bytes of one `*.db` file (prometheus_client's `mmap_dict.py`), parsed
//! with every length bounded by both `used` and the copied buffer.

use std::collections::HashMap;
use std::hash::Hash;

/// Labels in upstream's order: sorted, then `pid` (gauges) or `le`
/// (buckets) appended. Kept as a list, not a map, because the output's
/// `dict(labels)` lets a later duplicate win.
pub(crate) type Labels = Vec<(String, String)>;

use serde_json::Value;

/// A fast hasher seeded per process: keys and labels come from files other
/// users may write, so not a fixed-seed one.
pub(crate) type Fast = foldhash::fast::RandomState;

/// One `(key, value, timestamp)` of a `*.db` file, its JSON key decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The family's name (`Counter("reqs")` → `reqs`).
    pub metric: String,
    /// The sample's name (`reqs_total`, `lat_bucket`, `lat_sum`, …).
    pub sample: String,
    /// Label pairs sorted by name, as upstream sorts them before merging.
    pub labels: Vec<(String, String)>,
    /// The family's help text.
    pub help: String,
    /// The value the writer last stored.
    pub value: f64,
    /// Unix seconds of the last write; 0 except for `mostrecent` gauges.
    pub timestamp: f64,
}

/// Why the bytes of a `*.db` file are not a prometheus_client file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Fewer than the 8 header bytes.
    #[error("{len} bytes, shorter than the 8-byte header")]
    NoHeader {
        /// The buffer's length.
        len: usize,
    },
    /// `used` is negative or inside the header (0 is a file being created).
    #[error("its header says {used} bytes are in use, which is neither 0 nor at least the 8 header bytes")]
    BadUsed {
        /// The header's `used`.
        used: i32,
    },
    /// `used` goes past the bytes there are.
    #[error("its header says {used} bytes are in use but only {len} were read (truncated, or not a prometheus_client file)")]
    UsedPastEnd {
        /// The header's `used`.
        used: usize,
        /// The buffer's length.
        len: usize,
    },
    /// An entry's length field or its value run past `used`.
    #[error("the entry at byte {at} runs past the {used} bytes in use (key length {key_len})")]
    EntryPastEnd {
        /// Offset of the entry's length field.
        at: usize,
        /// The key length it claims.
        key_len: i64,
        /// The header's `used`.
        used: usize,
    },
    /// The key is not UTF-8 or not the JSON `[metric, sample, {labels}, help]`.
    #[error(
        "the key at byte {at} is not a JSON [metric, sample, {{labels}}, help] of strings: {why}"
    )]
    BadKey {
        /// Offset of the entry's length field.
        at: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A new key past the most distinct keys a reader decodes (see
    /// `read_open_dir`'s budget).
    #[error("the key at byte {at} is one more than the {max} distinct keys this reader decodes from one directory in one look")]
    TooManyKeys {
        /// Offset of the entry's length field.
        at: usize,
        /// The limit.
        max: usize,
    },
}

const HEADER: usize = 8;

/// Parses a copy of a `*.db` file: an `i32` `used` and 4 pad bytes, then
/// entries of `i32` key length, the key padded with 1–8 spaces to a multiple
/// of 8 (counting the length field), an `f64` value and an `f64` timestamp,
/// all in native byte order. Reads only up to `used`; bytes after it (the
/// zeroed rest of the file) are ignored.
///
/// ```
/// use topdeck_portholes::prommp::parse;
///
/// let key = br#"["reqs", "reqs_total", {"route": "/"}, "Requests"]"#;
/// let pad = 8 - (key.len() + 4) % 8;
/// let mut entry = (key.len() as i32).to_ne_bytes().to_vec();
/// entry.extend_from_slice(key);
/// entry.extend(std::iter::repeat(b' ').take(pad));
/// entry.extend_from_slice(&3.0f64.to_ne_bytes());
/// entry.extend_from_slice(&0.0f64.to_ne_bytes());
/// let mut file = ((8 + entry.len()) as i32).to_ne_bytes().to_vec();
/// file.extend_from_slice(&[0; 4]);
/// file.extend_from_slice(&entry);
/// file.resize(4096, 0); // the zeroed rest of the file
///
/// let entries = parse(&file).unwrap();
/// assert_eq!(entries[0].sample, "reqs_total");
/// assert_eq!(entries[0].labels, [("route".to_string(), "/".to_string())]);
/// assert_eq!(entries[0].value, 3.0);
/// ```
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, ParseError> {
    let mut keys = KeyCache::default();
    let raw = parse_keyed(bytes, &mut keys)?;
    Ok(raw
        .into_iter()
        .map(|r| {
            let key = &keys.keys[r.key as usize];
            Entry {
                metric: keys.strings.get(key.metric).clone(),
                sample: keys.strings.get(key.sample).clone(),
                labels: keys.label_sets.get(key.labels).clone(),
                help: key.help.clone(),
                value: r.value,
                timestamp: r.timestamp,
            }
        })
        .collect())
}

/// Decoded keys by their text, numbered: every worker's file repeats the
/// same keys, and decoding the JSON and copying its strings would be most
/// of a scrape's work (upstream caches too). Names and label sets are
/// numbered as well, so that the merge compares numbers, not strings.
#[derive(Default)]
pub(crate) struct KeyCache {
    ids: HashMap<Box<[u8]>, u32, Fast>,
    pub(crate) keys: Vec<Key>,
    /// Metric and sample names, and pids as label values.
    pub(crate) strings: Interner<String>,
    /// Label pairs, sorted (as decoded) or as the merge extends them.
    pub(crate) label_sets: Interner<Labels>,
    /// Most distinct keys decoded, when bounded: decoding a new key is
    /// most of the cost of a file of distinct keys.
    pub(crate) max_keys: Option<usize>,
}

/// A decoded key, its strings numbered in the [`KeyCache`].
pub(crate) struct Key {
    pub(crate) metric: u32,
    pub(crate) sample: u32,
    pub(crate) labels: u32,
    pub(crate) help: String,
}

/// One entry of a file: its key's number in the [`KeyCache`], its value
/// and its timestamp.
#[derive(Clone, Copy)]
pub(crate) struct RawEntry {
    pub(crate) key: u32,
    pub(crate) value: f64,
    pub(crate) timestamp: f64,
}

/// [`parse`], decoding each distinct key once per cache.
pub(crate) fn parse_keyed(bytes: &[u8], cache: &mut KeyCache) -> Result<Vec<RawEntry>, ParseError> {
    let used = i32_at(bytes, 0).ok_or(ParseError::NoHeader { len: bytes.len() })?;
    if used == 0 {
        // A writer truncates the new file to zeroes before it stores 8.
        return Ok(Vec::new());
    }
    let used = match usize::try_from(used) {
        Ok(u) if u >= HEADER => u,
        _ => return Err(ParseError::BadUsed { used }),
    };
    if used > bytes.len() {
        return Err(ParseError::UsedPastEnd {
            used,
            len: bytes.len(),
        });
    }
    let data = &bytes[..used];
    let mut entries = Vec::new();
    let mut at = HEADER;
    while at < used {
        let past_end = |key_len: i64| ParseError::EntryPastEnd { at, key_len, used };
        let key_len = i32_at(data, at).ok_or(past_end(-1))?;
        let len = usize::try_from(key_len).map_err(|_| past_end(key_len.into()))?;
        let key_start = at + 4;
        // The padding is 1–8 bytes, never 0 (upstream's `8 - (len + 4) % 8`).
        let values = key_start + len + (8 - (len + 4) % 8);
        let end = values + 16;
        if end > used {
            return Err(past_end(key_len.into()));
        }
        let key = &data[key_start..key_start + len];
        // A key seen before was valid UTF-8 and JSON then: same bytes, same
        // verdict, so only a new key is checked.
        let key = match cache.ids.get(key) {
            Some(&id) => id,
            None => {
                if let Some(max) = cache.max_keys.filter(|&max| cache.keys.len() >= max) {
                    return Err(ParseError::TooManyKeys { at, max });
                }
                let text = std::str::from_utf8(key).map_err(|e| ParseError::BadKey {
                    at,
                    why: e.to_string(),
                })?;
                cache
                    .insert(text)
                    .map_err(|why| ParseError::BadKey { at, why })?
            }
        };
        entries.push(RawEntry {
            key,
            value: f64_at(data, values),
            timestamp: f64_at(data, values + 8),
        });
        at = end;
    }
    Ok(entries)
}

impl KeyCache {
    fn insert(&mut self, text: &str) -> Result<u32, String> {
        let (metric, sample, labels, help) = decode_key(text)?;
        let key = Key {
            metric: self.strings.id(metric),
            sample: self.strings.id(sample),
            labels: self.label_sets.id(labels),
            help,
        };
        let id = u32::try_from(self.keys.len()).map_err(|_| "more than 2^32 distinct keys")?;
        self.keys.push(key);
        self.ids.insert(text.as_bytes().into(), id);
        Ok(id)
    }
}

/// Values numbered in first-seen order; equal values get equal numbers.
pub(crate) struct Interner<T> {
    ids: HashMap<T, u32, Fast>,
    items: Vec<T>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            ids: HashMap::default(),
            items: Vec::new(),
        }
    }
}

impl<T: Hash + Eq + Clone> Interner<T> {
    /// The number of `value`, numbering it if it is new.
    pub(crate) fn id(&mut self, value: T) -> u32 {
        if let Some(&id) = self.ids.get(&value) {
            return id;
        }
        // Bounded by the copied bytes: every value comes from an entry of
        // at least 24 bytes, or from a bucket of one.
        let id = self.items.len() as u32;
        self.items.push(value.clone());
        self.ids.insert(value, id);
        id
    }

    /// The value numbered `id`.
    pub(crate) fn get(&self, id: u32) -> &T {
        &self.items[id as usize]
    }
}

type Decoded = (String, String, Labels, String);

fn decode_key(key: &str) -> Result<Decoded, String> {
    let value: Value = serde_json::from_str(key).map_err(|e| e.to_string())?;
    let Value::Array(parts) = value else {
        return Err("not a JSON array".into());
    };
    let [metric, sample, labels, help]: [Value; 4] = parts
        .try_into()
        .map_err(|p: Vec<Value>| format!("{} elements, not 4", p.len()))?;
    fn string(v: Value, what: impl FnOnce() -> String) -> Result<String, String> {
        match v {
            Value::String(s) => Ok(s),
            other => Err(format!("the {} is {other}, not a string", what())),
        }
    }
    let metric = string(metric, || "metric name".into())?;
    if metric.is_empty() {
        // Upstream's `Metric()` refuses an empty name.
        return Err("the metric name is empty".into());
    }
    let Value::Object(labels) = labels else {
        return Err("the labels are not a JSON object".into());
    };
    let mut pairs = Vec::with_capacity(labels.len());
    for (name, value) in labels {
        let value = string(value, || format!("value of label {name:?}"))?;
        pairs.push((name, value));
    }
    pairs.sort();
    Ok((
        metric,
        string(sample, || "sample name".into())?,
        pairs,
        string(help, || "help text".into())?,
    ))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    let bytes = b.get(at..at.checked_add(4)?)?;
    Some(i32::from_ne_bytes(bytes.try_into().ok()?))
}

fn f64_at(b: &[u8], at: usize) -> f64 {
    let mut raw = [0; 8];
    raw.copy_from_slice(&b[at..at + 8]);
    f64::from_ne_bytes(raw)
}
