// SPDX-License-Identifier: Apache-2.0
//! A series' identity: the name and labels that say which series a value
//! belongs to, whoever wrote it and whenever it was read.

use std::borrow::Cow;
use std::fmt;

use super::snapshot::MetricInfo;

/// A series' identity: its name and its labels, in registration order.
/// Borrowed from a [`MetricInfo`] it costs no allocation, so pairing two
/// snapshots by name hashes and compares strings already read;
/// [`into_owned`](Self::into_owned) keeps one beyond the snapshot.
///
/// Two keys are equal when name and labels are, the same labels in
/// another order being another series (as the writer registers them).
///
/// ```
/// use topdeck::SeriesKey;
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.counter("requests_total", &[("route", "/")], "", "").unwrap();
/// let snap = topdeck::RegistryReader::open(registry.path()).unwrap().snapshot().unwrap();
/// let (info, _) = snap.iter().next().unwrap();
/// let key = info.key();
/// assert_eq!(key, SeriesKey::new("requests_total", vec![("route".into(), "/".into())]));
/// assert_eq!(key.to_string(), r#"requests_total{route="/"}"#);
/// let kept: SeriesKey<'static> = key.into_owned();
/// assert_eq!(kept.name(), "requests_total");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey<'a> {
    name: Cow<'a, str>,
    labels: Cow<'a, [(String, String)]>,
}

impl<'a> SeriesKey<'a> {
    /// The key of `name` with `labels` (borrowed or owned).
    pub fn new(
        name: impl Into<Cow<'a, str>>,
        labels: impl Into<Cow<'a, [(String, String)]>>,
    ) -> Self {
        Self {
            name: name.into(),
            labels: labels.into(),
        }
    }

    /// The metric's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The label pairs, in registration order.
    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    /// The same key, owning its strings.
    pub fn into_owned(self) -> SeriesKey<'static> {
        SeriesKey {
            name: Cow::Owned(self.name.into_owned()),
            labels: Cow::Owned(self.labels.into_owned()),
        }
    }
}

impl<'a> From<&'a MetricInfo> for SeriesKey<'a> {
    fn from(m: &'a MetricInfo) -> Self {
        m.key()
    }
}

impl MetricInfo {
    /// This metric's series identity, borrowed from it.
    pub fn key(&self) -> SeriesKey<'_> {
        SeriesKey::new(self.name.as_str(), self.labels.as_slice())
    }
}

/// The value of label `key` among `labels` (a [`MetricInfo`]'s, a
/// [`SeriesKey`]'s, or a copy of them); `None` if the series has no such
/// label.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.counter("requests_total", &[("route", "/"), ("code", "200")], "", "").unwrap();
/// let snap = topdeck::RegistryReader::open(registry.path()).unwrap().snapshot().unwrap();
/// let (info, _) = snap.iter().next().unwrap();
/// assert_eq!(topdeck::label_value(&info.labels, "code"), Some("200"));
/// assert_eq!(topdeck::label_value(&info.labels, "method"), None);
/// ```
pub fn label_value<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `name{k="v",...}`, as Prometheus writes a series (values escaped as
/// Rust strings, which they are close to); the name alone without labels.
impl fmt::Display for SeriesKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if self.labels.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (k, v)) in self.labels.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{k}={v:?}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn borrowed_and_owned_keys_are_the_same_series() {
        let l = labels(&[("a", "1"), ("b", "2")]);
        let borrowed = SeriesKey::new("x_total", l.as_slice());
        let owned = SeriesKey::new(String::from("x_total"), l.clone()).into_owned();
        assert_eq!(borrowed, owned);
        let table: HashMap<SeriesKey<'static>, u32> = HashMap::from([(owned, 7)]);
        assert_eq!(table.get(&borrowed), Some(&7));
        // Label order and values make other series.
        let swapped = labels(&[("b", "2"), ("a", "1")]);
        assert!(!table.contains_key(&SeriesKey::new("x_total", swapped.as_slice())));
        assert!(!table.contains_key(&SeriesKey::new("x_total", &[][..])));
        assert_eq!(SeriesKey::new("up", &[][..]).to_string(), "up");
        assert_eq!(SeriesKey::new("x", l).to_string(), r#"x{a="1",b="2"}"#);
    }
}
