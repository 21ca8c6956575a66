// SPDX-License-Identifier: Apache-2.0
//! Label families: metrics that share a name and label keys, one member per
//! set of label values, registered the first time it is asked for.
//!
//! A family only saves the caller a map of handles: each member is an
//! ordinary metric of the registry, with an ordinary handle whose updates
//! take no lock. Asking for a member ([`Family::with`]) takes the family's
//! lock, and registering a new one the registry's too.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};

use super::counter::Counter;
use super::gauge::{Gauge, GaugeF64};
use super::histogram::Buckets;
use super::histogram::Histogram;
use super::registry::{Inner, Make, Registry, Spec};
use crate::error::{Error, ErrorKind, Result};

/// Families are made by the registry their members live in.
impl Registry {
    /// A family of counters that share a name and label keys; each set of
    /// label values is registered the first time [`Family::with`] asks
    /// for it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
    /// let requests = registry.counter_family("requests_total", &["method", "code"], "Requests.", "")?;
    /// requests.with(&["GET", "200"])?.inc();
    /// requests.with(&["GET", "200"])?.inc();
    /// assert_eq!(requests.with(&["GET", "200"])?.get(), 2);
    /// assert_eq!(registry.registered(), 1);
    /// # Ok::<(), topdeck::Error>(())
    /// ```
    pub fn counter_family(
        &self,
        name: &str,
        keys: &[&str],
        help: &str,
        unit: &str,
    ) -> Result<Family<Counter>> {
        self.family(Spec::new(name, help, unit), keys, Inner::counter)
    }

    /// A family of integer gauges (see [`Registry::counter_family`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
    /// let queued = registry.gauge_family("queued", &["queue"], "Jobs waiting.", "")?;
    /// queued.with(&["mail"])?.set(3);
    /// # Ok::<(), topdeck::Error>(())
    /// ```
    pub fn gauge_family(
        &self,
        name: &str,
        keys: &[&str],
        help: &str,
        unit: &str,
    ) -> Result<Family<Gauge>> {
        self.family(Spec::new(name, help, unit), keys, Inner::gauge)
    }

    /// A family of floating-point gauges (see [`Registry::counter_family`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
    /// let load = registry.gauge_f64_family("load_ratio", &["cpu"], "Busy share.", "")?;
    /// load.with(&["0"])?.set(0.25);
    /// # Ok::<(), topdeck::Error>(())
    /// ```
    pub fn gauge_f64_family(
        &self,
        name: &str,
        keys: &[&str],
        help: &str,
        unit: &str,
    ) -> Result<Family<GaugeF64>> {
        self.family(Spec::new(name, help, unit), keys, Inner::gauge_f64)
    }

    /// A family of histograms with the given bucket range (see
    /// [`Registry::counter_family`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
    /// let latency = registry.histogram_family(
    ///     "request_seconds", &["route"], "Request latency.", "seconds",
    ///     topdeck::Buckets::default_seconds(),
    /// )?;
    /// latency.with(&["/login"])?.record(0.003);
    /// # Ok::<(), topdeck::Error>(())
    /// ```
    pub fn histogram_family(
        &self,
        name: &str,
        keys: &[&str],
        help: &str,
        unit: &str,
        buckets: Buckets,
    ) -> Result<Family<Histogram>> {
        let spec = Spec {
            buckets,
            ..Spec::new(name, help, unit)
        };
        self.family(spec, keys, Inner::histogram)
    }

    fn family<M: Clone>(&self, spec: Spec<'_>, keys: &[&str], make: Make<M>) -> Result<Family<M>> {
        // Checked now, with placeholder values, so that a bad name or key
        // fails where the family is made, not at its first member.
        let probe: Vec<(&str, &str)> = keys.iter().map(|k| (*k, "")).collect();
        self.inner.check(&spec, &probe)?;
        Ok(Family::new(self.inner.clone(), &spec, keys, make))
    }
}

/// Metrics of one name and label keys, one per set of label values: see
/// [`Registry::counter_family`](crate::Registry::counter_family) and its
/// siblings. Cheap to clone (clones share the members); `Send` and `Sync`
/// whenever the handles are.
///
/// Members are never removed: a registry's metrics are append-only
/// (docs/FORMAT.md), so a member dropped from the family could not be made
/// again. To shed members, build the family anew in a fresh registry and
/// carry over the ones to keep.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
/// let errors = registry.counter_family("errors_total", &["kind"], "Errors.", "")?;
/// errors.with(&["timeout"])?.inc();
/// errors.with(&["refused"])?.add(2);
/// let mut seen = Vec::new();
/// errors.for_each(|values, c| seen.push((values[0].clone(), c.get())));
/// assert_eq!(seen, [("timeout".to_string(), 1), ("refused".to_string(), 2)]);
/// // A wrong number of values is refused, saying which keys the family has.
/// assert!(errors.with(&["timeout", "extra"]).is_err());
/// # Ok::<(), topdeck::Error>(())
/// ```
#[must_use]
pub struct Family<M> {
    shared: Arc<Shared<M>>,
}

impl<M> Clone for Family<M> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<M> {
    registry: Arc<Inner>,
    name: String,
    keys: Vec<String>,
    help: String,
    unit: String,
    buckets: Buckets,
    make: Make<M>,
    hasher: RandomState,
    members: Mutex<Members<M>>,
}

/// Members in the order they were made, and an index by the hash of their
/// values, so that a lookup hashes the caller's `&[&str]` without building
/// owned strings.
struct Members<M> {
    list: Vec<(Box<[String]>, M)>,
    by_hash: HashMap<u64, Vec<usize>>,
}

impl<M: Clone> Family<M> {
    pub(crate) fn new(registry: Arc<Inner>, spec: &Spec<'_>, keys: &[&str], make: Make<M>) -> Self {
        Self {
            shared: Arc::new(Shared {
                registry,
                name: spec.name.to_owned(),
                keys: keys.iter().map(|k| (*k).to_owned()).collect(),
                help: spec.help.to_owned(),
                unit: spec.unit.to_owned(),
                buckets: spec.buckets,
                make,
                hasher: RandomState::new(),
                members: Mutex::new(Members {
                    list: Vec::new(),
                    by_hash: HashMap::new(),
                }),
            }),
        }
    }

    /// The member with these label values, one per key in the family's
    /// order: registered the first time, the same handle (a clone) after.
    /// Fails with [`ErrorKind::InvalidName`] for a wrong number of values
    /// or a value the format refuses, and [`ErrorKind::RegistryFull`]
    /// when the registry has no room for a new member (asking again later
    /// tries again).
    pub fn with(&self, values: &[&str]) -> Result<M> {
        let s = &*self.shared;
        if values.len() != s.keys.len() {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!(
                    "{}: metric family {:?} has the label keys {:?}: {} values given ({values:?}), {} needed",
                    s.registry.path().display(),
                    s.name,
                    s.keys,
                    values.len(),
                    s.keys.len()
                ),
            )
            .with_path(s.registry.path()));
        }
        let hash = s.hasher.hash_one(values);
        let mut m = self.lock();
        let found = m.by_hash.get(&hash).and_then(|ix| {
            ix.iter()
                .map(|&i| &m.list[i])
                .find(|(v, _)| v.iter().map(String::as_str).eq(values.iter().copied()))
        });
        if let Some((_, handle)) = found {
            return Ok(handle.clone());
        }
        let labels: Vec<(&str, &str)> = s
            .keys
            .iter()
            .map(String::as_str)
            .zip(values.iter().copied())
            .collect();
        let spec = Spec {
            buckets: s.buckets,
            ..Spec::new(&s.name, &s.help, &s.unit)
        };
        let handle = (s.make)(&s.registry, &spec, &labels)?;
        let i = m.list.len();
        m.list.push((
            values.iter().map(|v| (*v).to_owned()).collect(),
            handle.clone(),
        ));
        m.by_hash.entry(hash).or_default().push(i);
        Ok(handle)
    }

    /// Calls `f` with each member's label values and handle, in the order
    /// they were made. The family's lock is held meanwhile: `f` must not
    /// ask this family for a member.
    pub fn for_each(&self, mut f: impl FnMut(&[String], &M)) {
        for (values, handle) in &self.lock().list {
            f(values, handle);
        }
    }

    /// Members made so far.
    pub fn len(&self) -> usize {
        self.lock().list.len()
    }

    /// Whether no member was made yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The family's label keys, in the order [`Family::with`] takes values.
    pub fn keys(&self) -> &[String] {
        &self.shared.keys
    }

    fn lock(&self) -> MutexGuard<'_, Members<M>> {
        // Each change is one push after the registration succeeded: a
        // panic cannot leave the members half made, so poison is ignored.
        self.shared
            .members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl<M> fmt::Debug for Family<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family")
            .field("name", &self.shared.name)
            .field("keys", &self.shared.keys)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::{ErrorKind, Registry, RegistryReader, Value};

    fn registry(dir: &std::path::Path, metrics: u32) -> Registry {
        Registry::builder()
            .dir(dir)
            .metrics(metrics)
            .string_bytes(8192)
            .build()
            .unwrap()
    }

    #[test]
    fn a_member_is_registered_once_and_handed_out_after() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), 16);
        let f = r
            .counter_family("switch_total", &["cgroup", "cause"], "h", "")
            .unwrap();
        f.with(&["/a", "same"]).unwrap().inc();
        f.with(&["/a", "same"]).unwrap().add(2);
        f.with(&["/b", "same"]).unwrap().inc();
        assert_eq!(r.registered(), 2);
        assert_eq!(f.len(), 2);
        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        assert_eq!(
            snap.get("switch_total", &[("cgroup", "/a"), ("cause", "same")]),
            Some(&Value::Counter(3))
        );
        assert_eq!(
            snap.get("switch_total", &[("cgroup", "/b"), ("cause", "same")]),
            Some(&Value::Counter(1))
        );
    }

    #[test]
    fn every_kind_has_a_family() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), 16);
        r.gauge_family("g", &["k"], "", "")
            .unwrap()
            .with(&["x"])
            .unwrap()
            .set(-4);
        r.gauge_f64_family("gf", &["k"], "", "")
            .unwrap()
            .with(&["x"])
            .unwrap()
            .set(0.5);
        r.histogram_family("h_seconds", &["k"], "", "seconds", Default::default())
            .unwrap()
            .with(&["x"])
            .unwrap()
            .record(0.25);
        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        assert_eq!(snap.get("g", &[("k", "x")]), Some(&Value::Gauge(-4)));
        assert_eq!(snap.get("gf", &[("k", "x")]), Some(&Value::GaugeF64(0.5)));
        let Some(Value::Histogram(h)) = snap.get("h_seconds", &[("k", "x")]) else {
            panic!("no histogram");
        };
        assert_eq!(h.count, 1);
    }

    #[test]
    fn a_wrong_number_of_values_names_the_keys() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), 16);
        let f = r.gauge_family("g", &["cgroup", "culprit"], "", "").unwrap();
        let err = f.with(&["/a"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidName);
        assert!(
            err.to_string().contains(r#"["cgroup", "culprit"]"#),
            "{err}"
        );
        assert!(err.to_string().contains("1 values given"), "{err}");
        assert_eq!(r.registered(), 0);
    }

    #[test]
    fn bad_names_fail_when_the_family_is_made() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), 16);
        let err = r.counter_family("bad-name", &["k"], "", "").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidName);
        let err = r
            .counter_family("ok_total", &["k", "k"], "", "")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidName);
    }

    #[test]
    fn a_full_registry_is_an_error_and_a_later_ask_tries_again() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), 2);
        let f = r.counter_family("c_total", &["k"], "", "").unwrap();
        let _a = f.with(&["a"]).unwrap();
        let _b = f.with(&["b"]).unwrap();
        let err = f.with(&["c"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::RegistryFull);
        assert_eq!(f.len(), 2);
        // Existing members are still handed out.
        f.with(&["a"]).unwrap().inc();
        assert_eq!(f.with(&["c"]).unwrap_err().kind(), ErrorKind::RegistryFull);
    }

    #[test]
    fn threads_asking_for_the_same_member_share_one_handle() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), 16);
        let f = r.counter_family("c_total", &["k"], "", "").unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                let f = f.clone();
                s.spawn(move || {
                    for _ in 0..1000 {
                        f.with(&["same"]).unwrap().inc();
                    }
                });
            }
        });
        assert_eq!(r.registered(), 1);
        assert_eq!(f.with(&["same"]).unwrap().get(), 4000);
    }

    #[test]
    fn a_family_outlives_its_registry_on_the_unlinked_file() {
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), 16);
        let f = r.counter_family("c_total", &["k"], "", "").unwrap();
        let path = r.path().to_owned();
        drop(r);
        assert!(!path.exists(), "the file goes with the registry");
        let c = f.with(&["late"]).unwrap();
        c.inc();
        assert_eq!(c.get(), 1);
    }
}
