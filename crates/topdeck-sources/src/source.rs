// SPDX-License-Identifier: Apache-2.0
//! What every view knows of a source, whatever wrote it: a topdeck
//! registry and another runtime's porthole are one [`Source`], told apart
//! by their [`Kind`] only where reading them differs.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use topdeck::{Liveness, RegistryEntry};

/// Which runtime publishes a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A topdeck registry (Rust, C, Python, Go or Java).
    Topdeck,
    /// A HotSpot JVM's hsperfdata.
    Jvm,
    /// A prometheus_client multiprocess directory.
    Python,
    /// An Aeron media driver's `cnc.dat`.
    Aeron,
    /// A PCP MMV file (libpcp_mmv, python3-pcp, Parfait, speed, hornet).
    Mmv,
}

impl Kind {
    /// The name views show: `topdeck`, `jvm`, `python`, `aeron`, `mmv`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Topdeck => "topdeck",
            Kind::Jvm => "jvm",
            Kind::Python => "python",
            Kind::Aeron => "aeron",
            Kind::Mmv => "mmv",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One source of series, as a look found it: who wrote it, where, and
/// whether its writer still runs.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let mut tracker = topdeck_sources::Tracker::<()>::new(topdeck::Namespace::at(dir.path()), None);
/// let source = &tracker.look().sources[0];
/// assert_eq!(source.kind, topdeck_sources::Kind::Topdeck);
/// assert_eq!(source.pid, Some(std::process::id()));
/// assert_eq!(source.liveness, topdeck::Liveness::Alive);
/// # drop(registry);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// Which runtime.
    #[serde(rename = "source")]
    pub kind: Kind,
    /// The file (a directory for Python), through `/proc/<pid>/root` for
    /// another mount namespace. With the kind, what names the source from
    /// one look to the next.
    pub path: PathBuf,
    /// The writing process as this reader sees it, named only where it is
    /// proven to have written the file (its uid, its start time); a
    /// prometheus_client directory's is the oldest process naming it (a
    /// pre-forking server's master, whatever its workers do).
    pub pid: Option<u32>,
    /// That process's start, clock ticks since boot: with the pid, which
    /// process it is (a pid is reused, a pid and start time are not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ticks: Option<u64>,
    /// The owner of its file (of its directory, for Python), as the kernel
    /// reports it: who wrote it, whatever it says of itself; `None` when
    /// that could not be read.
    pub uid: Option<u32>,
    /// What a person calls it: a registry's writer as it named itself, a
    /// JVM's main class, else the process name.
    pub process: String,
    /// A topdeck registry's name; `None` for other runtimes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// The container its process runs in, named from its cgroup as the
    /// scheduler probe names it; `None` for the host's root cgroup or an
    /// unknown process.
    pub container: Option<String>,
    /// Whether its writer still writes it (files outlive their writers).
    #[serde(serialize_with = "state")]
    #[serde(rename = "state")]
    pub liveness: Liveness,
    /// Metrics (series, for other runtimes) it held when found.
    pub metrics: usize,
    /// Text values it held when found, by name (an MMV file's strings):
    /// shown by `show`, not series, so never exported.
    #[serde(skip)]
    pub texts: Vec<(String, String)>,
    /// When the source began, ns since the Unix epoch, where it says: a
    /// registry's creation time; `None` for other runtimes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_unix_ns: Option<u64>,
    /// What reopening a registry needs (the verified directory and inode).
    #[serde(skip)]
    pub(crate) entry: Option<Box<RegistryEntry>>,
}

fn state<S: serde::Serializer>(l: &Liveness, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(state_name(*l))
}

/// `alive` or `dead`, as every view writes a writer's state.
pub fn state_name(l: Liveness) -> &'static str {
    match l {
        Liveness::Alive => "alive",
        Liveness::Dead => "dead",
    }
}

impl Source {
    /// A source of `kind` at `path` written by `process`, alive, with
    /// nothing else known of it (a test's, or a caller's own).
    ///
    /// ```
    /// use topdeck_sources::{Kind, Source};
    /// let s = Source::new(Kind::Jvm, "/tmp/hsperfdata_app/42", "Billing");
    /// assert_eq!((s.pid, s.liveness), (None, topdeck::Liveness::Alive));
    /// ```
    pub fn new(kind: Kind, path: impl Into<PathBuf>, process: impl Into<String>) -> Self {
        Self {
            kind,
            path: path.into(),
            pid: None,
            start_ticks: None,
            uid: None,
            process: process.into(),
            registry: None,
            container: None,
            liveness: Liveness::Alive,
            metrics: 0,
            texts: Vec::new(),
            created_unix_ns: None,
            entry: None,
        }
    }

    /// A registry listed by a [`Namespace`](topdeck::Namespace).
    pub fn of_registry(e: RegistryEntry) -> Self {
        Self {
            kind: Kind::Topdeck,
            path: e.path.clone(),
            // 0: a writer in another view that no process here matches.
            pid: (e.pid != 0).then_some(e.pid),
            start_ticks: Some(e.start_ticks),
            uid: Some(e.uid),
            process: e.process_name.clone(),
            registry: Some(e.registry_name.clone()),
            container: e.container.clone(),
            liveness: e.liveness,
            metrics: e.metrics as usize,
            texts: Vec::new(),
            created_unix_ns: Some(e.created_unix_ns),
            entry: Some(Box::new(e)),
        }
    }

    /// The registry's namespace entry, for a topdeck registry listed by a
    /// look; `None` for other runtimes.
    pub fn registry_entry(&self) -> Option<&RegistryEntry> {
        self.entry.as_deref()
    }

    /// What views name it by beside its process: a registry's name, or
    /// another runtime's kind.
    ///
    /// ```
    /// use topdeck_sources::{Kind, Source};
    /// assert_eq!(Source::new(Kind::Jvm, "/tmp/hsperfdata_app/7", "Billing").registry_or_kind(), "jvm");
    /// ```
    pub fn registry_or_kind(&self) -> &str {
        self.registry.as_deref().unwrap_or(self.kind.name())
    }

    /// Its path as its own view of the file system names it: without the
    /// `/proc/<pid>/root` a reader in another view reached it through (a
    /// pid that names another process once this one is gone).
    ///
    /// ```
    /// use topdeck_sources::{Kind, Source};
    /// let s = Source::new(Kind::Python, "/proc/4242/root/run/prom", "gunicorn");
    /// assert_eq!(s.path_in_its_view(), std::path::Path::new("/run/prom"));
    /// let here = Source::new(Kind::Python, "/run/prom", "gunicorn");
    /// assert_eq!(here.path_in_its_view(), here.path);
    /// ```
    pub fn path_in_its_view(&self) -> PathBuf {
        let mut parts = self.path.components();
        let through_root = parts.next() == Some(Component::RootDir)
            && parts.next() == Some(Component::Normal("proc".as_ref()))
            && parts.next().is_some_and(|pid| {
                pid.as_os_str()
                    .to_str()
                    .is_some_and(|p| p.parse::<u32>().is_ok())
            })
            && parts.next() == Some(Component::Normal("root".as_ref()));
        match through_root {
            true => Path::new("/").join(parts.as_path()),
            false => self.path.clone(),
        }
    }

    /// A JVM's collection at a glance from a snapshot of this source, as
    /// `jstat -gcutil` shows it; `None` for other runtimes (without
    /// looking at their series).
    ///
    /// ```
    /// use topdeck_sources::{Kind, Source};
    /// let snap = topdeck::Snapshot::default();
    /// assert!(Source::new(Kind::Topdeck, "/x", "svc").jvm_summary(&snap).is_none());
    /// ```
    pub fn jvm_summary(&self, snap: &topdeck::Snapshot) -> Option<crate::JvmSummary> {
        match self.kind {
            Kind::Jvm => crate::JvmSummary::of(snap.iter()),
            _ => None,
        }
    }

    /// Whether the service behind this source is every process of its
    /// cgroup: a prometheus_client directory is written by a pre-forking
    /// server's workers, which the master forks and replaces.
    ///
    /// ```
    /// use topdeck_sources::{Kind, Source};
    /// assert!(Source::new(Kind::Python, "/run/prom", "gunicorn").serves_from_its_cgroup());
    /// assert!(!Source::new(Kind::Jvm, "/tmp/hsperfdata_app/7", "Billing").serves_from_its_cgroup());
    /// ```
    pub fn serves_from_its_cgroup(&self) -> bool {
        self.kind == Kind::Python
    }

    /// The key a tracker knows this source by from one look to the next.
    pub(crate) fn key(&self) -> (Kind, &Path) {
        (self.kind, &self.path)
    }

    /// Whether `target` (what a user typed) names this source: its path
    /// or file name (an MMV file's is what PCP names it by), its pid, or,
    /// whatever their case, its process, registry or container name or
    /// its kind.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).name("billing").build().unwrap();
    /// let mut tracker = topdeck_sources::Tracker::<()>::new(topdeck::Namespace::at(dir.path()), None);
    /// let source = &tracker.look().sources[0];
    /// assert!(source.is_named(&std::process::id().to_string()));
    /// assert!(source.is_named("billing") && source.is_named("Billing") && source.is_named("topdeck"));
    /// assert!(!source.is_named("1"));
    /// # drop(registry);
    /// ```
    pub fn is_named(&self, target: &str) -> bool {
        self.path == Path::new(target)
            || self.path.file_name().is_some_and(|n| n == target)
            || target
                .parse::<u32>()
                .ok()
                .is_some_and(|p| self.pid == Some(p))
            || [
                Some(self.process.as_str()),
                self.registry.as_deref(),
                self.container.as_deref(),
                Some(self.kind.name()),
            ]
            .into_iter()
            .flatten()
            .any(|name| name.eq_ignore_ascii_case(target))
    }
}
