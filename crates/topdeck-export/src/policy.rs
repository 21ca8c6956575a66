// SPDX-License-Identifier: Apache-2.0
//! Who and how much an exporter exports: allow and deny lists (by owner,
//! registry, source kind and metric name) and caps (series and estimated
//! exposition bytes per registry, per user and in all), applied by the
//! [`Scraper`](crate::Scraper) to every look, so `serve` and `push` export
//! one set. What is left out is counted by reason and owner
//! ([`DROPPED`]) and said once per cause, never per series.
//!
//! Caps cut a source's series at a point and keep everything before it
//! (in registration order), and name lists are decisions about one metric
//! at a time: so a registry's kept series are always a prefix of its
//! series that pass the lists, and what an encoder prepared for position
//! `i` of a kept list is the same metric at every look.
//!
//! The caller's own series (`exempt`, the uid the exporter runs as) are
//! never capped: a fleet is protected from other users' floods without
//! hiding the data of whoever runs the exporter. The lists apply to all.

use std::collections::BTreeMap;

use glob::Pattern;
use topdeck::{MetricInfo, Snapshot, Value};
use topdeck_sources::{Kind, Source as Origin};

use crate::scrape::Skipped;

/// `topdeck_export_dropped_series_total{reason,owner_uid}`: series a look left
/// out, by why and whose.
pub const DROPPED: &str = "topdeck_export_dropped_series_total";

/// Why a series was left out: the `reason` of [`DROPPED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// An allow list it is not on, or a deny list it is on.
    Denied,
    /// Past `series_per_registry`.
    RegistrySeries,
    /// Past `series_per_user`.
    UserSeries,
    /// Past `series`, other users' series in all.
    TotalSeries,
    /// Past `bytes_per_registry`.
    RegistryBytes,
    /// Past `bytes_per_user`.
    UserBytes,
    /// Past `bytes`, other users' bytes in all.
    TotalBytes,
}

impl DropReason {
    /// The `reason` label.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Denied => "denied",
            DropReason::RegistrySeries => "registry_series_cap",
            DropReason::UserSeries => "user_series_cap",
            DropReason::TotalSeries => "total_series_cap",
            DropReason::RegistryBytes => "registry_bytes_cap",
            DropReason::UserBytes => "user_bytes_cap",
            DropReason::TotalBytes => "total_bytes_cap",
        }
    }

    /// What to change to export more.
    fn remedy(self) -> &'static str {
        match self {
            DropReason::Denied => "the allow and deny lists",
            DropReason::RegistrySeries => "--max-series-per-registry",
            DropReason::UserSeries => "--max-series-per-user",
            DropReason::TotalSeries => "--max-series",
            DropReason::RegistryBytes => "--max-bytes-per-registry",
            DropReason::UserBytes => "--max-bytes-per-user",
            DropReason::TotalBytes => "--max-bytes",
        }
    }
}

/// A list of owners, registries, kinds and metric names. A series is on
/// it if any entry of any of its parts matches.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Owners (uids, as the kernel reports the file's owner).
    pub uids: Vec<u32>,
    /// Registry names (a topdeck registry's name; another runtime's
    /// process name), as globs (`*`, `?`, `[..]`).
    pub registries: Vec<Pattern>,
    /// Source kinds.
    pub kinds: Vec<Kind>,
    /// Metric names, as globs.
    pub metrics: Vec<Pattern>,
}

impl Rules {
    fn is_empty(&self) -> bool {
        self.uids.is_empty()
            && self.registries.is_empty()
            && self.kinds.is_empty()
            && self.metrics.is_empty()
    }
}

/// Limits on what is exported of users other than the exempt one; `None`
/// is no limit. Bytes are an upper estimate of the text exposition
/// (labels as escaped at worst, one line per classic bucket), taken
/// before anything is encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// Series of one registry.
    pub series_per_registry: Option<usize>,
    /// Series of one user, across all of that user's sources.
    pub series_per_user: Option<usize>,
    /// Series of all other users together.
    pub series: Option<usize>,
    /// Bytes of one registry.
    pub bytes_per_registry: Option<usize>,
    /// Bytes of one user.
    pub bytes_per_user: Option<usize>,
    /// Bytes of all other users together.
    pub bytes: Option<usize>,
}

impl Caps {
    /// The caps `--all-users` starts from: a fleet's Prometheus gets at
    /// most 2,000 series (2 MiB) of a registry, 5,000 series (4 MiB) of a
    /// user and 50,000 series (64 MiB) of all other users together; an
    /// ordinary service publishes hundreds, the flood the issue found was
    /// 5,100 from one user.
    pub const FLEET: Caps = Caps {
        series_per_registry: Some(2_000),
        series_per_user: Some(5_000),
        series: Some(50_000),
        bytes_per_registry: Some(2 << 20),
        bytes_per_user: Some(4 << 20),
        bytes: Some(64 << 20),
    };
}

/// Who and how much an exporter exports.
///
/// ```
/// use topdeck_export::{Caps, Policy, Rules};
/// let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// for i in 0..5 {
///     registry.counter("jobs_total", &[("queue", &i.to_string())], "", "").unwrap();
/// }
/// registry.gauge("secret_depth", &[], "", "").unwrap();
/// let policy = Policy::new(
///     Rules::default(),
///     Rules { metrics: vec![glob::Pattern::new("secret_*").unwrap()], ..Rules::default() },
///     Caps { series_per_registry: Some(3), ..Caps::default() },
///     None,
/// );
/// let mut scraper = topdeck_export::Scraper::new(topdeck::Namespace::at(dir.path()))
///     .with_policy(policy);
/// let gathered = scraper.gather();
/// assert_eq!(gathered.sources[0].1.len(), 3);
/// let why: Vec<_> = gathered.report.dropped.iter().map(|d| d.reason).collect();
/// assert_eq!(why, ["denied", "registry_series_cap"]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Policy {
    allow: Rules,
    deny: Rules,
    caps: Caps,
    exempt: Option<u32>,
}

/// Series left out by one look, by reason and owner.
pub type Drops = BTreeMap<(DropReason, Option<u32>), u64>;

impl Policy {
    /// Exports what `allow` admits (everything, where a part of it is
    /// empty) and `deny` does not, within `caps` for every owner but
    /// `exempt`.
    pub fn new(allow: Rules, deny: Rules, caps: Caps, exempt: Option<u32>) -> Self {
        Self {
            allow,
            deny,
            caps,
            exempt,
        }
    }

    /// Whether nothing is ever left out.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty() && self.caps == Caps::default()
    }

    /// Whether a source passes the lists as a whole (owner, registry,
    /// kind), decided before it is opened.
    pub fn admits(&self, origin: &Origin) -> bool {
        let name = origin.registry.as_deref().unwrap_or(&origin.process);
        let on = |r: &Rules, empty_is: bool| {
            let uid = origin.uid.is_some_and(|u| r.uids.contains(&u));
            let registry = r.registries.iter().any(|p| p.matches(name));
            let kind = r.kinds.contains(&origin.kind);
            (
                if r.uids.is_empty() { empty_is } else { uid },
                if r.registries.is_empty() {
                    empty_is
                } else {
                    registry
                },
                if r.kinds.is_empty() { empty_is } else { kind },
            )
        };
        let (u, r, k) = on(&self.allow, true);
        let (du, dr, dk) = on(&self.deny, false);
        u && r && k && !(du || dr || dk)
    }

    fn admits_metric(&self, name: &str) -> bool {
        let allowed =
            self.allow.metrics.is_empty() || self.allow.metrics.iter().any(|p| p.matches(name));
        allowed && !self.deny.metrics.iter().any(|p| p.matches(name))
    }

    /// Applies the metric lists and the caps to the sources one look
    /// read, in their order, and returns what was left out. Sources keep
    /// their place (with fewer series, maybe none).
    pub fn apply(&self, read: &mut [(Origin, Snapshot)]) -> Drops {
        let mut drops = Drops::new();
        let mut users: BTreeMap<Option<u32>, Tally> = BTreeMap::new();
        let mut all = Tally::default();
        for (origin, snap) in read.iter_mut() {
            let uid = origin.uid;
            let capped = uid.is_none() || uid != self.exempt;
            let labels = source_label_bytes(origin);
            let user = users.entry(uid).or_default();
            let mut registry = Tally::default();
            // Once a cap is reached, the rest of the source is left out.
            let mut cut: Option<DropReason> = None;
            snap.retain(|info, value| {
                if !self.admits_metric(&info.name) {
                    *drops.entry((DropReason::Denied, uid)).or_default() += 1;
                    return false;
                }
                if capped && cut.is_none() {
                    let bytes = labels + series_bytes(info, value);
                    cut = self.over(&registry, user, &all, bytes);
                }
                if let Some(why) = cut.filter(|_| capped) {
                    *drops.entry((why, uid)).or_default() += 1;
                    return false;
                }
                let bytes = labels + series_bytes(info, value);
                for t in [&mut registry, &mut *user, &mut all] {
                    t.series += 1;
                    t.bytes += bytes;
                }
                true
            });
        }
        drops
    }

    /// The cap one more series of `bytes` would pass, if any.
    fn over(
        &self,
        registry: &Tally,
        user: &Tally,
        all: &Tally,
        bytes: usize,
    ) -> Option<DropReason> {
        let c = &self.caps;
        let past = |cap: Option<usize>, n: usize| cap.is_some_and(|cap| n > cap);
        [
            (
                past(c.series_per_registry, registry.series + 1),
                DropReason::RegistrySeries,
            ),
            (
                past(c.series_per_user, user.series + 1),
                DropReason::UserSeries,
            ),
            (past(c.series, all.series + 1), DropReason::TotalSeries),
            (
                past(c.bytes_per_registry, registry.bytes + bytes),
                DropReason::RegistryBytes,
            ),
            (
                past(c.bytes_per_user, user.bytes + bytes),
                DropReason::UserBytes,
            ),
            (past(c.bytes, all.bytes + bytes), DropReason::TotalBytes),
        ]
        .into_iter()
        .find_map(|(past, why)| past.then_some(why))
    }

    /// One notice per cause and owner, worded the same while it lasts
    /// (no counts that change from one look to the next), so that a log
    /// that says each notice once says it once.
    pub fn notices(&self, drops: &Drops) -> Vec<Skipped> {
        drops
            .keys()
            .map(|&(why, uid)| {
                let whose =
                    uid.map_or_else(|| "an unknown owner".to_owned(), |u| format!("uid {u}"));
                let whose_label = uid.map_or_else(|| "unknown".to_owned(), |u| u.to_string());
                Skipped {
                    reason: why.name(),
                    message: format!(
                        "{whose}: series left out ({}); see {}; counted in \
                         {DROPPED}{{reason=\"{}\",owner_uid=\"{whose_label}\"}}",
                        why.name(),
                        why.remedy(),
                        why.name(),
                    ),
                }
            })
            .collect()
    }
}

/// Series and bytes counted against a cap.
#[derive(Debug, Default)]
struct Tally {
    series: usize,
    bytes: usize,
}

/// The labels every series of `origin` carries, at worst as text.
fn source_label_bytes(origin: &Origin) -> usize {
    let text = |s: &str| 2 * s.len() + 16;
    text(&origin.process)
        + origin.registry.as_deref().map_or(0, text)
        + origin.container.as_deref().map_or(0, text)
        + 64 // source, pid, uid
}

/// An upper estimate of a series' text exposition, its source's labels
/// aside: every line repeats the name and labels (escaped, a character
/// can take two bytes), and a histogram has a line per bucket besides
/// its sum and count.
pub fn series_bytes(info: &MetricInfo, value: &Value) -> usize {
    let labels: usize = info
        .labels
        .iter()
        .map(|(k, v)| k.len() + 2 * v.len() + 4)
        .sum();
    let line = info.name.len() + labels + 48;
    let lines = match value {
        // Classic buckets from the first populated to the last.
        Value::Histogram(h) => populated(&h.buckets) + 4,
        Value::Buckets(b) => b.buckets.len() + 3,
        Value::Summary { .. } => 2,
        _ => 1,
    };
    line.saturating_mul(lines)
}

/// Buckets from the first that holds a count to the last.
fn populated(buckets: &[u64]) -> usize {
    match (
        buckets.iter().position(|&n| n > 0),
        buckets.iter().rposition(|&n| n > 0),
    ) {
        (Some(first), Some(last)) => last - first + 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scraper;

    fn registry(dir: &std::path::Path, name: &str) -> topdeck::Registry {
        topdeck::Registry::builder()
            .dir(dir)
            .name(name)
            .build()
            .unwrap()
    }

    fn glob(p: &str) -> Pattern {
        Pattern::new(p).unwrap()
    }

    #[test]
    fn lists_decide_by_registry_and_metric_name() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            registry(dir.path(), "orders"),
            registry(dir.path(), "noisy"),
        );
        a.counter("orders_total", &[], "", "").unwrap().inc();
        a.counter("debug_total", &[], "", "").unwrap().inc();
        b.counter("noise_total", &[], "", "").unwrap().inc();
        let deny = Rules {
            registries: vec![glob("noi*")],
            metrics: vec![glob("debug_*")],
            ..Rules::default()
        };
        let policy = Policy::new(Rules::default(), deny, Caps::default(), None);
        let mut s = Scraper::new(topdeck::Namespace::at(dir.path())).with_policy(policy);
        let mut out = Vec::new();
        s.scrape(crate::Format::Text, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("orders_total{"), "{text}");
        assert!(!text.contains("debug_total{"), "{text}");
        assert!(!text.contains("noise_total{"), "{text}");
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert!(
            text.contains(&format!(
                "{DROPPED}{{reason=\"denied\",owner_uid=\"{uid}\"}} 2\n"
            )),
            "a denied registry's series and a denied metric: {text}"
        );
    }

    #[test]
    fn caps_keep_a_prefix_of_each_registry_and_spare_the_exempt_owner() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), "many");
        for i in 0..10 {
            r.gauge("depth", &[("queue", &i.to_string())], "", "")
                .unwrap()
                .set(i);
        }
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let caps = Caps {
            series_per_user: Some(4),
            ..Caps::default()
        };
        let capped = Policy::new(Rules::default(), Rules::default(), caps, None);
        let mut s = Scraper::new(topdeck::Namespace::at(dir.path())).with_policy(capped);
        for _ in 0..2 {
            let g = s.gather();
            let queues: Vec<&str> = g.sources[0]
                .1
                .iter()
                .map(|(m, _)| m.labels[0].1.as_str())
                .collect();
            assert_eq!(
                queues,
                ["0", "1", "2", "3"],
                "the same prefix at every look"
            );
            assert_eq!(g.report.dropped.len(), 1, "{:?}", g.report.dropped);
            assert_eq!(g.report.dropped[0].reason, "user_series_cap");
        }
        let own = Policy::new(Rules::default(), Rules::default(), caps, Some(uid));
        let mut s = Scraper::new(topdeck::Namespace::at(dir.path())).with_policy(own);
        assert_eq!(
            s.gather().sources[0].1.len(),
            10,
            "the caller's own are never capped"
        );
    }

    #[test]
    fn a_byte_cap_bounds_huge_labels() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), "wide");
        let wide = "x".repeat(1024);
        for i in 0..50 {
            let h = r
                .histogram(
                    "wide_seconds",
                    &[("i", &i.to_string()), ("w", &wide)],
                    "",
                    "seconds",
                )
                .unwrap();
            h.record(0.001);
            h.record(1.0);
        }
        let caps = Caps {
            bytes_per_registry: Some(256 << 10),
            ..Caps::default()
        };
        let policy = Policy::new(Rules::default(), Rules::default(), caps, None);
        let mut s = Scraper::new(topdeck::Namespace::at(dir.path())).with_policy(policy);
        let mut out = Vec::new();
        s.scrape(crate::Format::Text, &mut out).unwrap();
        let kept = String::from_utf8_lossy(&out)
            .lines()
            .filter(|l| l.starts_with("wide_seconds_count{"))
            .count();
        assert!(kept > 0 && kept < 50, "{kept} series kept");
        assert!(out.len() < 300 << 10, "{} bytes", out.len());
    }
}
