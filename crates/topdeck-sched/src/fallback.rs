// SPDX-License-Identifier: Apache-2.0
//! Coarse figures for hosts where the probe cannot run (not root, no BTF,
//! a load error): per cgroup, the run-queue delay the kernel's schedstats
//! keep per task (`/proc/<tid>/schedstat`: on-CPU ns, run-queue wait ns,
//! timeslices; Documentation/scheduler/sched-stats.rst), the cgroup's
//! throttling (`cpu.stat`) and CPU pressure (`cpu.pressure`, PSI, cgroup v2
//! only; Documentation/accounting/psi.rst). Coarse: a mean per timeslice
//! instead of a distribution, no culprit, and tasks that exit within the
//! window are missed.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::cgroupfs::{self, Hierarchy, Throttling};
use crate::container_name;
use crate::schema::{self, MetricSpec};

/// One cgroup's coarse figures over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoarseRow {
    /// Cgroup path.
    pub cgroup: String,
    /// Container, pod or service name.
    pub container: String,
    /// Threads in the cgroup at the end of the window.
    pub threads: usize,
    /// Seconds its threads spent runnable but waiting, per second of window.
    pub wait_per_second: f64,
    /// Mean wait per timeslice, seconds (`None` without timeslices).
    pub mean_wait_seconds: Option<f64>,
    /// Throttling by its own quota in the window.
    pub throttled: Option<Throttling>,
    /// `some avg10` of the cgroup's cpu.pressure, percent (v2 only).
    pub pressure_some_avg10: Option<f64>,
}

/// The coarse view: why eBPF is not used, and the rows, busiest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoarseView {
    /// Always `coarse`: these are not run-queue latency distributions.
    pub resolution: &'static str,
    /// Why the probe was not used.
    pub why: String,
    /// Host CPU pressure (`/proc/pressure/cpu`, `some avg10`), percent.
    pub host_pressure_some_avg10: Option<f64>,
    /// Cgroups with waiting threads.
    pub cgroups: Vec<CoarseRow>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    wait_ns: u64,
    slices: u64,
    threads: usize,
}

/// `(run-queue wait ns, timeslices)` from schedstat text.
pub fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    let (_oncpu, wait, slices) = (f.next()??, f.next()??, f.next()??);
    Some((wait, slices))
}

/// `some avg10` from PSI text, percent (one parser, the host view's).
pub use topdeck_procfs::host::parse_pressure as parse_pressure_some_avg10;

fn cgroup_dirs(h: &Hierarchy) -> Vec<(String, std::path::PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![("/".to_string(), h.mount.clone())];
    while let Some((path, dir)) = stack.pop() {
        if let Ok(entries) = fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let child = match path.as_str() {
                        "/" => format!("/{name}"),
                        p => format!("{p}/{name}"),
                    };
                    stack.push((child, e.path()));
                }
            }
        }
        out.push((path, dir));
    }
    out
}

fn sample_cgroup(h: &Hierarchy, dir: &Path) -> Sample {
    let list = if h.cpu_v1 { "tasks" } else { "cgroup.threads" };
    let mut s = Sample::default();
    let Ok(text) = fs::read_to_string(dir.join(list)) else {
        return s;
    };
    for tid in text.lines() {
        if let Some((wait, slices)) = fs::read_to_string(format!("/proc/{tid}/schedstat"))
            .ok()
            .and_then(|t| parse_schedstat(&t))
        {
            s.wait_ns = s.wait_ns.wrapping_add(wait);
            s.slices = s.slices.wrapping_add(slices);
            s.threads += 1;
        }
    }
    s
}

/// Watches every cgroup of `h` for `window` and returns the coarse view;
/// `why` says why the probe is not used.
pub fn observe(h: &Hierarchy, window: Duration, why: String) -> CoarseView {
    let sleep = |d| {
        std::thread::sleep(d);
        true
    };
    observe_waiting(h, window, why, sleep).unwrap_or_else(|| unreachable!("the sleep completes"))
}

/// [`observe`] with `wait(window)` in place of its sleep, so that a
/// long-running caller can be stopped mid-window: `wait` returns `false`
/// when it was cut short, and then there is no view (its rates would be
/// over the wrong time).
pub fn observe_waiting(
    h: &Hierarchy,
    window: Duration,
    why: String,
    wait: impl FnOnce(Duration) -> bool,
) -> Option<CoarseView> {
    let dirs = cgroup_dirs(h);
    let before: BTreeMap<&str, (Sample, Option<Throttling>)> = dirs
        .iter()
        .map(|(p, d)| (p.as_str(), (sample_cgroup(h, d), cgroupfs::throttling(d))))
        .collect();
    if !wait(window) {
        return None;
    }
    let secs = window.as_secs_f64().max(1e-3);
    let mut rows = Vec::new();
    for (path, dir) in &dirs {
        let now = sample_cgroup(h, dir);
        let (then, t0) = before.get(path.as_str()).copied().unwrap_or_default();
        let wait = now.wait_ns.saturating_sub(then.wait_ns);
        let slices = now.slices.saturating_sub(then.slices);
        if wait == 0 {
            continue;
        }
        let throttled = match (t0, cgroupfs::throttling(dir)) {
            (Some(a), Some(b)) => Some(Throttling {
                nr_throttled: b.nr_throttled.saturating_sub(a.nr_throttled),
                throttled_ns: b.throttled_ns.saturating_sub(a.throttled_ns),
            }),
            _ => None,
        };
        rows.push(CoarseRow {
            cgroup: path.clone(),
            container: container_name(path),
            threads: now.threads,
            wait_per_second: wait as f64 / 1e9 / secs,
            mean_wait_seconds: (slices > 0).then(|| wait as f64 / 1e9 / slices as f64),
            throttled,
            pressure_some_avg10: fs::read_to_string(dir.join("cpu.pressure"))
                .ok()
                .and_then(|t| parse_pressure_some_avg10(&t)),
        });
    }
    rows.sort_by(|a, b| b.wait_per_second.total_cmp(&a.wait_per_second));
    Some(CoarseView {
        resolution: "coarse",
        why,
        host_pressure_some_avg10: fs::read_to_string("/proc/pressure/cpu")
            .ok()
            .and_then(|t| parse_pressure_some_avg10(&t)),
        cgroups: rows,
    })
}

fn registering(m: MetricSpec) -> impl FnOnce(topdeck::Error) -> crate::Error {
    move |e| {
        crate::Error::with_source(
            crate::ErrorKind::Registry,
            format!("registering {}", m.name),
            e,
        )
    }
}

/// The agent without eBPF: publishes the coarse figures of every window in
/// the `topdeck-agent` registry, as gauges whose names say `coarse`.
#[derive(Debug)]
pub struct CoarseAgent {
    hierarchy: Hierarchy,
    /// Kept for its file: dropping it removes the registry.
    _registry: topdeck::Registry,
    why: String,
    /// Wait per second, mean wait, throttled time: [`schema::COARSE_WAIT_PER_SECOND`],
    /// [`schema::COARSE_MEAN_WAIT`], [`schema::COARSE_THROTTLED`].
    gauges: [(MetricSpec, topdeck::Family<topdeck::GaugeF64>); 3],
}

impl CoarseAgent {
    /// Creates the registry (in `dir`, else the default namespace); `why`
    /// says why eBPF is not used.
    pub fn start(dir: Option<&Path>, why: String) -> crate::Result<Self> {
        let hierarchy = Hierarchy::detect()?;
        let mut b = topdeck::Registry::builder()
            .name(schema::REGISTRY_NAME)
            .metrics(16_384)
            .gauge_bytes(1 << 20)
            .string_bytes(4 << 20);
        if let Some(d) = dir {
            b = b.dir(d);
        }
        let registry = b.build().map_err(|e| {
            crate::nsdir::registry_error(dir, "creating the topdeck-agent registry", e)
        })?;
        let family = |m: MetricSpec| {
            registry
                .gauge_f64_family(m.name, m.keys, m.help, m.unit)
                .map(|f| (m, f))
                .map_err(registering(m))
        };
        let gauges = [
            family(schema::COARSE_WAIT_PER_SECOND)?,
            family(schema::COARSE_MEAN_WAIT)?,
            family(schema::COARSE_THROTTLED)?,
        ];
        Ok(Self {
            hierarchy,
            _registry: registry,
            why,
            gauges,
        })
    }

    /// Watches one window and publishes it.
    pub fn tick(&mut self, window: Duration) -> crate::Result<CoarseView> {
        let sleep = |d| {
            std::thread::sleep(d);
            true
        };
        let view = self.tick_waiting(window, sleep)?;
        Ok(view.unwrap_or_else(|| unreachable!("the sleep completes")))
    }

    /// [`CoarseAgent::tick`] with `wait(window)` in place of its sleep (see
    /// [`observe_waiting`]): `None`, and nothing published, when `wait`
    /// returns `false`.
    pub fn tick_waiting(
        &mut self,
        window: Duration,
        wait: impl FnOnce(Duration) -> bool,
    ) -> crate::Result<Option<CoarseView>> {
        let Some(view) = observe_waiting(&self.hierarchy, window, self.why.clone(), wait) else {
            return Ok(None);
        };
        for r in &view.cgroups {
            let values = [
                r.wait_per_second,
                r.mean_wait_seconds.unwrap_or(f64::NAN),
                r.throttled
                    .map_or(f64::NAN, |t| t.throttled_ns as f64 / 1e9),
            ];
            for ((spec, family), v) in self.gauges.iter().zip(values) {
                let g = family
                    .with(&[&r.cgroup, &r.container])
                    .map_err(registering(*spec))?;
                g.set(v);
            }
        }
        Ok(Some(view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_and_pressure_parse() {
        assert_eq!(parse_schedstat("123 456 7\n"), Some((456, 7)));
        assert_eq!(parse_schedstat("123\n"), None);
        let psi = "some avg10=1.50 avg60=0.20 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure_some_avg10(psi), Some(1.5));
        assert_eq!(parse_pressure_some_avg10("full avg10=3.0\n"), None);
    }

    #[test]
    fn this_host_shows_waiting_in_some_cgroup() {
        let h = Hierarchy::detect().unwrap();
        // Threads that take turns on the CPUs make run-queue waits to see.
        let spin = || {
            std::thread::spawn(|| {
                let t = std::time::Instant::now();
                while t.elapsed() < Duration::from_millis(300) {
                    std::hint::spin_loop();
                }
            })
        };
        let threads: Vec<_> = (0..6).map(|_| spin()).collect();
        let v = observe(&h, Duration::from_millis(200), "testing".into());
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(v.resolution, "coarse");
        assert!(!v.cgroups.is_empty(), "no cgroup waited: {v:?}");
        assert!(v.cgroups.iter().all(|r| r.wait_per_second > 0.0));
    }
}
