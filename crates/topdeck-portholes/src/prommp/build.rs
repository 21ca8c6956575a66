// SPDX-License-Identifier: Apache-2.0
//! Small synthetic `*.db` files, laid out as prometheus_client's
//! `mmap_dict.py` lays out its own, for examples, tests and benches.

/// The bytes of a file holding `entries`, each a key (the JSON list
/// prometheus_client writes: metric, sample, labels, help), a value and a
/// timestamp, in that order.
///
/// ```
/// use topdeck_portholes::prommp::{file_of, parse};
///
/// let key = br#"["jobs", "jobs_total", {"q": "x"}, "Jobs"]"#;
/// let entries = parse(&file_of(&[(key, 5.0, 0.0)])).unwrap();
/// assert_eq!((entries[0].sample.as_str(), entries[0].value), ("jobs_total", 5.0));
/// ```
pub fn file_of(entries: &[(&[u8], f64, f64)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (key, value, timestamp) in entries {
        body.extend_from_slice(&(key.len() as i32).to_ne_bytes());
        body.extend_from_slice(key);
        // Padded so that the value is 8-aligned, by 1 to 8 spaces.
        body.extend(std::iter::repeat_n(b' ', 8 - (key.len() + 4) % 8));
        body.extend_from_slice(&value.to_ne_bytes());
        body.extend_from_slice(&timestamp.to_ne_bytes());
    }
    // `used`, then 4 bytes of padding, then the entries.
    let mut file = ((8 + body.len()) as i32).to_ne_bytes().to_vec();
    file.extend_from_slice(&[0; 4]);
    file.extend_from_slice(&body);
    file
}
