// SPDX-License-Identifier: Apache-2.0
//! Metric names, label names and the encoding of label sets. The rules are
//! Prometheus's, so an exporter translates and never renames.

use crate::error::FormatError;

/// Longest metric name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 200;
/// Longest label name accepted, in bytes.
pub const MAX_LABEL_NAME_LEN: usize = 100;
/// Longest label value accepted, in bytes.
pub const MAX_LABEL_VALUE_LEN: usize = 1024;
/// Most label pairs on one metric.
pub const MAX_LABELS: usize = 32;
/// Longest help text accepted, in bytes.
pub const MAX_HELP_LEN: usize = 1024;
/// Longest unit accepted, in bytes.
pub const MAX_UNIT_LEN: usize = 64;

/// Longest encoded label set: every pair at its longest.
pub const MAX_LABELS_LEN: usize = MAX_LABELS * (2 + MAX_LABEL_NAME_LEN + 2 + MAX_LABEL_VALUE_LEN);

/// Checks a metric name against `[a-zA-Z_:][a-zA-Z0-9_:]*`.
///
/// ```
/// use topdeck_format::names::validate_metric_name;
/// assert!(validate_metric_name("http_requests_total").is_ok());
/// assert!(validate_metric_name("9lives").is_err());
/// ```
pub fn validate_metric_name(name: &str) -> Result<(), FormatError> {
    validate_identifier(name, MAX_NAME_LEN, true, "metric name")
}

/// Checks a label name against `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__`
/// (reserved for Prometheus).
pub fn validate_label_name(name: &str) -> Result<(), FormatError> {
    validate_identifier(name, MAX_LABEL_NAME_LEN, false, "label name")?;
    if name.starts_with("__") {
        return Err(FormatError::InvalidName {
            what: "label name",
            name: name.into(),
            why: "names starting with `__` are reserved",
        });
    }
    Ok(())
}

fn validate_identifier(
    name: &str,
    max: usize,
    colon: bool,
    what: &'static str,
) -> Result<(), FormatError> {
    let bad = |why| {
        Err(FormatError::InvalidName {
            what,
            name: name.into(),
            why,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > max {
        return bad("it is too long");
    }
    let ok_first = |c: u8| c.is_ascii_alphabetic() || c == b'_' || (colon && c == b':');
    let ok_rest = |c: u8| ok_first(c) || c.is_ascii_digit();
    let bytes = name.as_bytes();
    if !ok_first(bytes[0]) {
        return bad("it must start with a letter or `_`");
    }
    if !bytes[1..].iter().all(|&c| ok_rest(c)) {
        return bad(if colon {
            "only letters, digits, `_` and `:` are allowed"
        } else {
            "only letters, digits and `_` are allowed"
        });
    }
    Ok(())
}

/// Checks a whole label set: names valid and unique, values within limits.
pub fn validate_labels(labels: &[(&str, &str)]) -> Result<(), FormatError> {
    if labels.len() > MAX_LABELS {
        return Err(FormatError::TooLong {
            what: "label set",
            len: labels.len(),
            max: MAX_LABELS,
        });
    }
    for (i, (k, v)) in labels.iter().enumerate() {
        validate_label_name(k)?;
        if v.len() > MAX_LABEL_VALUE_LEN {
            return Err(FormatError::TooLong {
                what: "label value",
                len: v.len(),
                max: MAX_LABEL_VALUE_LEN,
            });
        }
        if labels[..i].iter().any(|(k2, _)| k2 == k) {
            return Err(FormatError::InvalidName {
                what: "label name",
                name: (*k).into(),
                why: "it appears twice in one label set",
            });
        }
    }
    Ok(())
}

/// Encodes a label set: for each pair, `u16` key length, key bytes, `u16`
/// value length, value bytes (little-endian lengths).
///
/// ```
/// use topdeck_format::names::{decode_labels, encode_labels};
/// let blob = encode_labels(&[("method", "GET")]);
/// assert_eq!(decode_labels(&blob).unwrap(), vec![("method".to_string(), "GET".to_string())]);
/// ```
pub fn encode_labels(labels: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in labels {
        for s in [k, v] {
            out.extend_from_slice(&(s.len() as u16).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// Decodes and validates an encoded label set.
pub fn decode_labels(mut blob: &[u8]) -> Result<Vec<(String, String)>, FormatError> {
    let mut out = Vec::new();
    while !blob.is_empty() {
        let mut pair = [String::new(), String::new()];
        for s in &mut pair {
            let len = blob
                .get(..2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
                .ok_or(FormatError::Corrupt("label set ends inside a length"))?;
            let bytes = blob
                .get(2..2 + len)
                .ok_or(FormatError::Corrupt("label set ends inside a string"))?;
            *s = std::str::from_utf8(bytes)
                .map_err(|_| FormatError::NotUtf8("label"))?
                .to_owned();
            blob = &blob[2 + len..];
        }
        let [k, v] = pair;
        validate_label_name(&k)?;
        if v.len() > MAX_LABEL_VALUE_LEN {
            return Err(FormatError::TooLong {
                what: "label value",
                len: v.len(),
                max: MAX_LABEL_VALUE_LEN,
            });
        }
        out.push((k, v));
        if out.len() > MAX_LABELS {
            return Err(FormatError::Corrupt("more labels than a metric may have"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_follow_prometheus() {
        for ok in ["a", "_x", "ns:sub:rate5m", "http_requests_total", "A9"] {
            assert!(validate_metric_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "9a", "a-b", "a b", "é", "a.b", &"x".repeat(201)] {
            assert!(validate_metric_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn label_names_reject_colons_and_reserved_prefix() {
        assert!(validate_label_name("method").is_ok());
        assert!(validate_label_name("a:b").is_err());
        assert!(validate_label_name("__name__").is_err());
        assert!(validate_labels(&[("a", "1"), ("a", "2")]).is_err());
    }

    #[test]
    fn truncated_label_blobs_are_errors_not_panics() {
        let blob = encode_labels(&[("method", "GET"), ("code", "200")]);
        for cut in 0..blob.len() {
            let _ = decode_labels(&blob[..cut]);
        }
        assert!(decode_labels(&blob[..blob.len() - 1]).is_err());
        assert!(decode_labels(&[2, 0, 0xff, 0xfe, 0, 0]).is_err());
    }

    #[test]
    fn decoded_label_values_keep_the_writers_limit() {
        let long = "v".repeat(MAX_LABEL_VALUE_LEN);
        assert!(decode_labels(&encode_labels(&[("k", &long)])).is_ok());
        let longer = "v".repeat(MAX_LABEL_VALUE_LEN + 1);
        assert!(matches!(
            decode_labels(&encode_labels(&[("k", &longer)])),
            Err(FormatError::TooLong {
                what: "label value",
                ..
            })
        ));
        // The longest valid set fits the limit on an encoded set.
        let names: Vec<String> = (0..MAX_LABELS)
            .map(|i| format!("{i:x>width$}", width = MAX_LABEL_NAME_LEN))
            .collect();
        let set: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), long.as_str())).collect();
        validate_labels(&set).unwrap();
        assert_eq!(encode_labels(&set).len(), MAX_LABELS_LEN);
    }
}
