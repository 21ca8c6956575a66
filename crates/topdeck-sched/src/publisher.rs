// SPDX-License-Identifier: Apache-2.0
//! The agent's registry file: one label family per metric of
//! [`crate::schema`], what a window adds to them, what did not fit, and the
//! rotation to a fresh file that carries the live series over (see
//! [`crate::agent`], "Churn").

use std::collections::HashSet;

use topdeck::{Counter, Family, Gauge, GaugeF64, Histogram, Registry, RegistryReader, Value};

use crate::buckets::BucketTable;
use crate::config::AgentConfig;
use crate::container_name;
use crate::error::{Error, ErrorKind, Result};
use crate::maps::CAUSES;
use crate::schema::{self, key, value, DropReason, MetricSpec, Unpublished};
use crate::step::{CgroupDelta, PairDelta};
use crate::verdict::Verdict;

fn reg_err(what: &'static str) -> impl FnOnce(topdeck::Error) -> Error {
    move |e| Error::with_source(ErrorKind::Registry, what, e)
}

/// The registry file being written and its families.
pub(crate) struct Publisher {
    registry: Registry,
    capacity: u32,
    /// A series did not fit since the last rotation.
    full: bool,
    /// The registry being full was said on stderr (once per agent).
    said_full: bool,
    runq: Family<Histogram>,
    switch_out: Family<Counter>,
    oncpu: Family<Counter>,
    wait_behind: Family<Counter>,
    verdict: Family<Gauge>,
    p99: Family<GaugeF64>,
    share: Family<GaugeF64>,
    cost: Family<GaugeF64>,
    dropped: Family<Counter>,
    placed: Family<Gauge>,
    unpublished: Family<Counter>,
    rotations: Counter,
}

/// Whether a series whose labels are `keys` = `values` belongs to live
/// cgroups only: every `cgroup` and `culprit` value is in `live`.
fn is_live(keys: &[String], values: &[String], live: &HashSet<String>) -> bool {
    keys.iter()
        .zip(values)
        .all(|(k, v)| !(k == key::CGROUP || k == key::CULPRIT) || live.contains(v))
}

fn count_live<M: Clone>(f: &Family<M>, live: &HashSet<String>) -> u32 {
    let mut n = 0;
    f.for_each(|values, _| n += u32::from(is_live(f.keys(), values, live)));
    n
}

impl Publisher {
    /// A fresh registry file with the agent's families, its own counters
    /// registered (at zero) from the start.
    pub(crate) fn create(config: &AgentConfig) -> Result<Self> {
        let mut b = Registry::builder()
            .name(schema::REGISTRY_NAME)
            .metrics(config.max_series)
            .shards(2)
            .shard_bytes(32 << 20)
            .string_bytes(4 << 20)
            .gauge_bytes(1 << 20);
        if let Some(d) = &config.dir {
            b = b.dir(d);
        }
        let registry = b.build().map_err(|e| {
            crate::nsdir::registry_error(
                config.dir.as_deref(),
                "creating the topdeck-agent registry",
                e,
            )
        })?;
        let p = Self::families(registry, config.max_series)
            .map_err(reg_err("registering the agent's own counters"))?;
        p.rule(config)
            .map_err(reg_err("publishing the verdict rule"))?;
        Ok(p)
    }

    /// The verdict rule in force ([`schema::THRESHOLD`]), set once.
    fn rule(&self, config: &AgentConfig) -> topdeck::Result<()> {
        let t = &config.thresholds;
        let values = [
            t.rise_factor,
            t.min_p99_seconds,
            t.min_other_share,
            t.suspect_rise_factor,
            t.suspect_other_share,
            f64::from(t.hold),
            config.interval.as_secs_f64(),
        ];
        let s = schema::THRESHOLD;
        let rule = self
            .registry
            .gauge_f64_family(s.name, s.keys, s.help, s.unit)?;
        for (name, v) in schema::RULES.into_iter().zip(values) {
            rule.with(&[name])?.set(v);
        }
        Ok(())
    }

    fn families(r: Registry, capacity: u32) -> topdeck::Result<Self> {
        let counters = |m: MetricSpec| r.counter_family(m.name, m.keys, m.help, m.unit);
        let gauges = |m: MetricSpec| r.gauge_f64_family(m.name, m.keys, m.help, m.unit);
        let s = schema::RUNQ_LATENCY;
        let runq = r.histogram_family(
            s.name,
            s.keys,
            s.help,
            s.unit,
            BucketTable::topdeck_buckets(),
        )?;
        let s = schema::VERDICT;
        let verdict = r.gauge_family(s.name, s.keys, s.help, s.unit)?;
        let s = schema::PLACED;
        let placed = r.gauge_family(s.name, s.keys, s.help, s.unit)?;
        let s = schema::ROTATIONS;
        let p = Self {
            runq,
            switch_out: counters(schema::SWITCH_OUT)?,
            oncpu: counters(schema::ONCPU)?,
            wait_behind: counters(schema::WAIT_BEHIND)?,
            verdict,
            p99: gauges(schema::VERDICT_P99)?,
            share: gauges(schema::VERDICT_SHARE)?,
            cost: gauges(schema::BPF_COST)?,
            dropped: counters(schema::DROPPED)?,
            placed,
            unpublished: counters(schema::UNPUBLISHED)?,
            rotations: r.counter(s.name, &[], s.help, s.unit)?,
            registry: r,
            capacity,
            full: false,
            said_full: false,
        };
        for reason in DropReason::ALL {
            let _ = p.dropped.with(&[reason.as_str()])?;
        }
        for what in Unpublished::ALL {
            let _ = p.unpublished.with(&[what.as_str()])?;
        }
        for place in [value::SLOT, value::HASH] {
            let _ = p.placed.with(&[place])?;
        }
        Ok(p)
    }

    /// The file it publishes.
    pub(crate) fn path(&self) -> &std::path::Path {
        self.registry.path()
    }

    /// Metrics registered in the file.
    pub(crate) fn used(&self) -> u32 {
        self.registry.registered()
    }

    /// Whether the file is full enough to think of rotating.
    pub(crate) fn crowded(&self, share: f64) -> bool {
        self.full || f64::from(self.used()) >= share * f64::from(self.capacity)
    }

    /// Metrics it holds.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Clears the note that a series did not fit.
    pub(crate) fn forget_full(&mut self) {
        self.full = false;
    }

    /// `family`'s member for `values`; what does not fit is counted as
    /// `what` and said once.
    fn member<M: Clone>(
        &mut self,
        family: fn(&Self) -> &Family<M>,
        values: &[&str],
        what: Unpublished,
    ) -> Option<M> {
        match family(self).with(values) {
            Ok(m) => Some(m),
            Err(e) => {
                self.unpublished(what, &e);
                None
            }
        }
    }

    fn unpublished(&mut self, what: Unpublished, e: &topdeck::Error) {
        if e.kind() == topdeck::ErrorKind::RegistryFull {
            self.full = true;
        }
        // Registered when the file was made: found, not registered.
        if let Ok(c) = self.unpublished.with(&[what.as_str()]) {
            c.inc();
        }
        if !self.said_full {
            self.said_full = true;
            eprintln!(
                "topdeck agent: {e:#}; carrying on without the series that do not fit \
                 (counted in {}); fewer live cgroups, or a larger registry, would publish them",
                schema::UNPUBLISHED.name
            );
        }
    }

    /// Adds one cgroup id's window to its series.
    pub(crate) fn cgroup(&mut self, c: &CgroupDelta, table: &BucketTable) {
        let label = c.name.label();
        let container = container_name(label);
        let what = Unpublished::Cgroup;
        if let Some(h) = self.member(|p| &p.runq, &[label, &container], what) {
            h.record_n(0.0, c.runq.zero_count);
            for (k, &n) in c.runq.buckets.iter().enumerate() {
                h.record_n(table.seconds_of(k), n);
            }
        }
        for (cause, &n) in CAUSES.iter().zip(&c.switch_out) {
            if let Some(s) = self.member(|p| &p.switch_out, &[label, cause], what) {
                s.add(n);
            }
        }
        if let Some(n) = self.member(|p| &p.oncpu, &[label], what) {
            n.add(c.oncpu_ns);
        }
    }

    /// Adds one pair's wait; added, not set: ids that share a name share
    /// the series.
    pub(crate) fn wait_behind(&mut self, d: &PairDelta) {
        let labels = [d.victim.label(), d.culprit.label()];
        if let Some(n) = self.member(|p| &p.wait_behind, &labels, Unpublished::WaitBehind) {
            n.add(d.ns);
        }
    }

    /// Samples lost or not measured.
    pub(crate) fn dropped(&mut self, reason: DropReason, n: u64) {
        // Registered when the file was made: found, not registered.
        if let Ok(c) = self.dropped.with(&[reason.as_str()]) {
            c.add(n);
        }
    }

    /// How many cgroups the probe keeps in slots and in its hash.
    pub(crate) fn placed(&mut self, in_slots: usize, in_hash: usize) {
        for (place, n) in [(value::SLOT, in_slots), (value::HASH, in_hash)] {
            // Registered when the file was made: found, not registered.
            if let Ok(g) = self.placed.with(&[place]) {
                g.set(n as i64);
            }
        }
    }

    /// The probe's cost per event of `program`, seconds.
    pub(crate) fn cost(&mut self, program: &str, seconds: f64) {
        if let Some(g) = self.member(|p| &p.cost, &[program], Unpublished::Cost) {
            g.set(seconds);
        }
    }

    /// The verdicts in force: their gauges at 1 with their evidence, every
    /// other verdict gauge at 0.
    pub(crate) fn verdicts(&mut self, verdicts: &[Verdict]) {
        let mut holding: Vec<[&str; 3]> = Vec::new();
        for v in verdicts {
            let victim = v.victim.as_str();
            let kind = v.kind.as_str();
            if v.culprits.is_empty() {
                holding.push([victim, value::SELF, kind]);
            }
            for (c, share) in &v.culprits {
                holding.push([victim, c, kind]);
                let what = Unpublished::Evidence;
                if let Some(g) = self.member(|p| &p.share, &[victim, c], what) {
                    g.set(*share);
                }
            }
            for (when, p99) in [(value::BASELINE, v.p99_before), (value::NOW, v.p99_after)] {
                let what = Unpublished::Evidence;
                if let Some(g) = self.member(|p| &p.p99, &[victim, when], what) {
                    g.set(p99.unwrap_or(f64::NAN));
                }
            }
        }
        for labels in &holding {
            if let Some(g) = self.member(|p| &p.verdict, labels, Unpublished::Verdict) {
                g.set(1);
            }
        }
        self.verdict.for_each(|values, g| {
            if !holding.iter().any(|h| values.iter().eq(h.iter())) {
                g.set(0);
            }
        });
    }

    /// Metrics a rotation would carry over: the series of live cgroups
    /// and every global one.
    pub(crate) fn carried(&self, live: &HashSet<String>) -> u32 {
        let histograms = count_live(&self.runq, live);
        let counters = [
            &self.switch_out,
            &self.oncpu,
            &self.wait_behind,
            &self.dropped,
            &self.unpublished,
        ]
        .into_iter()
        .map(|f| count_live(f, live))
        .sum::<u32>();
        let gauges = [&self.p99, &self.share, &self.cost]
            .into_iter()
            .map(|f| count_live(f, live))
            .sum::<u32>();
        histograms + counters + gauges + count_live(&self.verdict, live) + 1
    }

    /// Replaces the file with a fresh one holding the series of `live`
    /// cgroups and every global one, values carried over from a snapshot
    /// of the old file. The old file goes when its registry is dropped,
    /// here: readers already find the new one, which is newer.
    pub(crate) fn rotate(
        &mut self,
        config: &AgentConfig,
        live: &HashSet<String>,
        table: &BucketTable,
    ) -> Result<()> {
        let old = RegistryReader::open(self.path())
            .and_then(|mut r| r.snapshot())
            .map_err(reg_err(
                "reading the agent's registry to carry its series over",
            ))?;
        let mut new = Self::create(config)?;
        new.said_full = self.said_full;
        let mut lost = Vec::new();
        for (info, value) in old.iter() {
            let values: Vec<String> = info.labels.iter().map(|(_, v)| v.clone()).collect();
            let keys: Vec<String> = info.labels.iter().map(|(k, _)| k.clone()).collect();
            if !is_live(&keys, &values, live) {
                continue;
            }
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            if let Err((what, e)) = new.carry(&info.name, &values, value, table) {
                lost.push((what, e));
            }
        }
        let rotations = match old.get(schema::ROTATIONS.name, &[]) {
            Some(Value::Counter(n)) => *n,
            _ => 0,
        };
        new.rotations.add(rotations + 1);
        // What does not fit now is counted as any other unpublished
        // series, and registered again when there is room.
        for (what, e) in lost {
            new.unpublished(what, &e);
        }
        *self = new;
        Ok(())
    }

    /// Sets one series of the new file to its value in the old one.
    fn carry(
        &self,
        name: &str,
        values: &[&str],
        value: &Value,
        table: &BucketTable,
    ) -> std::result::Result<(), (Unpublished, topdeck::Error)> {
        let counter = |f: &Family<Counter>, what| match value {
            Value::Counter(n) => f.with(values).map(|c| c.add(*n)).map_err(|e| (what, e)),
            _ => Ok(()),
        };
        let gauge = |f: &Family<GaugeF64>, what| match value {
            Value::GaugeF64(v) => f.with(values).map(|g| g.set(*v)).map_err(|e| (what, e)),
            _ => Ok(()),
        };
        let int_gauge = |f: &Family<Gauge>, what| match value {
            Value::Gauge(v) => f.with(values).map(|g| g.set(*v)).map_err(|e| (what, e)),
            _ => Ok(()),
        };
        match name {
            n if n == schema::RUNQ_LATENCY.name => {
                let Value::Histogram(h) = value else {
                    return Ok(());
                };
                let new = self
                    .runq
                    .with(values)
                    .map_err(|e| (Unpublished::Cgroup, e))?;
                // Same layout in both files: bucket k is the table's k.
                new.record_n(0.0, h.zero_count);
                for (k, &n) in h.buckets.iter().enumerate() {
                    new.record_n(table.seconds_of(k), n);
                }
                Ok(())
            }
            n if n == schema::VERDICT.name => int_gauge(&self.verdict, Unpublished::Verdict),
            n if n == schema::SWITCH_OUT.name => counter(&self.switch_out, Unpublished::Cgroup),
            // Registered when the file was made: these cannot fail.
            n if n == schema::DROPPED.name => counter(&self.dropped, Unpublished::Cost),
            n if n == schema::PLACED.name => int_gauge(&self.placed, Unpublished::Cost),
            n if n == schema::UNPUBLISHED.name => counter(&self.unpublished, Unpublished::Cost),
            n if n == schema::ONCPU.name => counter(&self.oncpu, Unpublished::Cgroup),
            n if n == schema::WAIT_BEHIND.name => {
                counter(&self.wait_behind, Unpublished::WaitBehind)
            }
            n if n == schema::VERDICT_P99.name => gauge(&self.p99, Unpublished::Evidence),
            n if n == schema::VERDICT_SHARE.name => gauge(&self.share, Unpublished::Evidence),
            n if n == schema::BPF_COST.name => gauge(&self.cost, Unpublished::Cost),
            _ => Ok(()),
        }
    }
}
