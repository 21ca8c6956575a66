// SPDX-License-Identifier: Apache-2.0
//! The latest two snapshots of one source: what an observer that follows
//! a source over time keeps to say what changed.

use super::since::Changes;
use super::snapshot::Snapshot;

/// The latest two snapshots of one source, for what changed between them:
/// what every observer that follows a source over time keeps.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
/// let jobs = registry.counter("jobs_total", &[], "", "")?;
/// let mut reader = topdeck::RegistryReader::open(registry.path())?;
/// let mut kept = topdeck::Snapshots::default();
/// jobs.add(4);
/// kept.push(reader.snapshot()?);
/// jobs.add(3);
/// let changes = kept.push(reader.snapshot()?);
/// assert_eq!(changes.iter().next().unwrap().change(), topdeck::Change::Counter(3));
/// # Ok::<(), topdeck::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Snapshots {
    latest: Option<Snapshot>,
    previous: Option<Snapshot>,
}

impl Snapshots {
    /// Keeps `snap` as the latest (the one it replaces becomes the
    /// previous) and returns what changed since the previous: since start
    /// the first time.
    pub fn push(&mut self, snap: Snapshot) -> Changes<'_> {
        self.previous = self.latest.replace(snap);
        self.changes().expect("a snapshot was just kept")
    }

    /// What changed between the previous and the latest kept snapshots
    /// (since start when there is only one); `None` before the first
    /// [`push`](Self::push).
    pub fn changes(&self) -> Option<Changes<'_>> {
        let latest = self.latest.as_ref()?;
        Some(match &self.previous {
            Some(p) => latest.since(p),
            None => latest.since_start(),
        })
    }

    /// The snapshot pushed last.
    pub fn latest(&self) -> Option<&Snapshot> {
        self.latest.as_ref()
    }

    /// The snapshot before that.
    pub fn previous(&self) -> Option<&Snapshot> {
        self.previous.as_ref()
    }

    /// Hands over the kept snapshots, as a source's successor takes them
    /// over (a writer that rotated to a new file with its values).
    pub fn take(&mut self) -> (Option<Snapshot>, Option<Snapshot>) {
        (self.previous.take(), self.latest.take())
    }

    /// Keeps `latest` as the latest snapshot, as if [`push`](Self::push)ed:
    /// the next one's changes are since it (another file's, paired by name).
    pub fn set_latest(&mut self, latest: Option<Snapshot>) {
        self.previous = None;
        self.latest = latest;
    }
}
