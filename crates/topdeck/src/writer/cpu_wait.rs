// SPDX-License-Identifier: Apache-2.0
//! A timer's CPU wait: the thread's slot of the agent's thread-waits array
//! read at start and at stop (one plain load each), the difference recorded
//! in a companion histogram while the array's agent is live, the request's
//! latency in another when the wait cannot be known.
//!
//! The registry maps the array once and shares it with its timers. An
//! array whose agent has gone is replaced by the one a restarted agent
//! pins, looked for at most once a second, from a stop that found it gone:
//! no background thread, no system call otherwise.

use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use topdeck_format::waits as fmt_waits;

use super::Histogram;
use crate::waits::{host_tid, ThreadWaits};

/// The registry's array, shared by its timers.
pub(crate) struct WaitSource {
    /// The array in use. Replaced ones are leaked, never unmapped: a guard
    /// begun on one may still read its slot (one mapping per agent restart).
    current: AtomicPtr<ThreadWaits>,
    pin: PathBuf,
    /// Tick count of the last look for a new array.
    last_look: AtomicU64,
}

impl WaitSource {
    pub(crate) fn new(waits: ThreadWaits) -> Self {
        Self {
            pin: waits.path().to_owned(),
            current: AtomicPtr::new(Box::into_raw(Box::new(waits))),
            last_look: AtomicU64::new(0),
        }
    }

    /// The array in use.
    #[inline(always)]
    pub(crate) fn current(&self) -> &ThreadWaits {
        // SAFETY: `current` always holds a leaked box, freed only by our
        // drop; replaced ones are never freed (see `look_again`).
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The array's agent is not live: opens the pin again if a second has
    /// passed since the last look, and uses what it finds if that is
    /// another array.
    #[cold]
    #[inline(never)]
    fn look_again(&self) {
        let now = topdeck_clock::ticks();
        let last = self.last_look.load(Ordering::Relaxed);
        let second = (1.0 / topdeck_clock::secs_per_tick()) as u64;
        if last != 0 && now.wrapping_sub(last) < second {
            return;
        }
        // One thread looks; the others carry on.
        if self
            .last_look
            .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let Ok(Some(new)) = ThreadWaits::open_if_pinned(&self.pin) else {
            return;
        };
        if new.id() == self.current().id() {
            return; // the same array, still pinned; this mapping was never shared
        }
        let old = self
            .current
            .swap(Box::into_raw(Box::new(new)), Ordering::AcqRel);
        // Leaked on purpose: guards begun on the old array hold pointers
        // into its mapping, and nothing counts them. One mapping (and a
        // few words) per agent restart, for the life of the registry.
        let _ = old;
    }
}

impl std::fmt::Debug for WaitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitSource")
            .field("current", self.current())
            .finish_non_exhaustive()
    }
}

impl Drop for WaitSource {
    fn drop(&mut self) {
        // SAFETY: the last owner: no timer (hence no guard) is left, and
        // `current` is a box only we free.
        drop(unsafe { Box::from_raw(*self.current.get_mut()) });
    }
}

/// A timer's CPU-wait histograms and the array they read.
pub(crate) struct CpuWait {
    pub(crate) source: std::sync::Arc<WaitSource>,
    /// Per request, the wait during the section, seconds.
    pub(crate) wait: Histogram,
    /// Latency of requests whose wait could not be known, seconds.
    pub(crate) unknown: Histogram,
}

/// A section's start as the wait sees it: the thread's slot and header
/// state word, and the slot's total then. A null `total` records nothing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitStart {
    pub(crate) total: *const AtomicU64,
    pub(crate) state: *const AtomicU64,
    pub(crate) wait: u64,
}

// SAFETY: the pointers are to atomics in a shared mapping that outlives
// the timer the start belongs to; a guard or timing may move to another
// thread (its wait is then the starting thread's slot's difference).
unsafe impl Send for WaitStart {}
// SAFETY: as above; shared use only reads the pointers.
unsafe impl Sync for WaitStart {}

impl WaitStart {
    pub(crate) const NONE: WaitStart = WaitStart {
        total: std::ptr::null(),
        state: std::ptr::null(),
        wait: 0,
    };
}

impl CpuWait {
    /// One TLS load (the thread's host id), the array's pointer and bound,
    /// one load of the slot.
    #[inline(always)]
    pub(crate) fn begin(&self) -> WaitStart {
        let waits = self.source.current();
        match waits.slot_total(host_tid()) {
            Some(total) => WaitStart {
                total,
                state: waits.state_word(),
                wait: total.load(Ordering::Relaxed),
            },
            None => WaitStart::NONE,
        }
    }

    /// Records the wait since `start` if the agent was live at the end, the
    /// section's latency (`ticks`) as unknown otherwise.
    #[inline(always)]
    pub(crate) fn end(&self, start: WaitStart, ticks: i64) {
        if start.total.is_null() {
            return;
        }
        // SAFETY: non-null pointers of a WaitStart point into a mapping
        // that is never unmapped while a timer sharing its source lives
        // (the caller holds one).
        let (total, state) = unsafe { (&*start.total, &*start.state) };
        // Acquire: the state is read after the slot (FORMAT.md §10: a
        // difference is trusted only if state reads LIVE after it).
        let now = total.load(Ordering::Acquire);
        if state.load(Ordering::Relaxed) == fmt_waits::LIVE {
            match now.wrapping_sub(start.wait) {
                0 => self.wait.record_zero(),
                ns => self.wait.record(ns as f64 * 1e-9),
            }
        } else {
            self.unknown(ticks);
        }
    }

    #[cold]
    #[inline(never)]
    fn unknown(&self, ticks: i64) {
        let secs = ticks.max(0) as f64 * topdeck_clock::secs_per_tick();
        self.unknown.record(secs);
        self.source.look_again();
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use topdeck_format::waits::{GONE, LIVE};

    use crate::waits::testing::{pid_max, TestArray};
    use crate::waits::{host_tid, ThreadWaits};
    use crate::{HistogramValue, Registry, RegistryReader, Value};

    fn registry(dir: &Path, pin: &Path) -> Registry {
        Registry::builder()
            .dir(dir)
            .thread_waits(pin)
            .build()
            .unwrap()
    }

    fn histogram(r: &Registry, name: &str) -> Option<HistogramValue> {
        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        match snap.get(name, &[("route", "/")]) {
            Some(Value::Histogram(h)) => Some((**h).clone()),
            None => None,
            other => panic!("{name}: {other:?}"),
        }
    }

    #[test]
    fn a_guard_records_the_wait_of_its_section() {
        let Some(a) = TestArray::create(pid_max()) else {
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), a.pin());
        assert!(r.thread_waits_problem().is_none());
        let timer = r
            .timer("serve_seconds", &[("route", "/")], "Serving.")
            .unwrap();
        let tid = host_tid();
        let g = timer.start();
        a.add_wait(tid, 3_000_000); // the probe saw 3 ms on the run queue
        g.stop();
        timer.time(|| ()); // no wait: the zero bucket
        let t = timer.begin();
        a.add_wait(tid, 250_000);
        timer.end(t);
        timer.start().cancel();
        let wait = histogram(&r, "serve_cpu_wait_seconds").unwrap();
        assert_eq!((wait.count, wait.zero_count), (3, 1));
        assert!((wait.sum - 0.00325).abs() < 1e-12, "{}", wait.sum);
        assert_eq!(wait.max, Some(0.003));
        let unknown = histogram(&r, "serve_cpu_wait_unknown_seconds").unwrap();
        assert_eq!(unknown.count, 0);
        assert_eq!(histogram(&r, "serve_seconds").unwrap().count, 3);
        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        let (info, _) = snap
            .iter()
            .find(|(i, _)| i.name == "serve_cpu_wait_seconds")
            .unwrap();
        assert_eq!(info.unit, "seconds");
        assert!(info.help.contains("serve_seconds"), "{}", info.help);
    }

    #[test]
    fn an_agent_gone_mid_section_makes_the_latency_unknown() {
        let Some(a) = TestArray::create(pid_max()) else {
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), a.pin());
        let timer = r.timer("serve_seconds", &[("route", "/")], "").unwrap();
        let g = timer.start();
        std::thread::sleep(Duration::from_millis(5));
        a.add_wait(host_tid(), 1_000_000);
        a.set_state(GONE);
        let latency = g.stop();
        let wait = histogram(&r, "serve_cpu_wait_seconds").unwrap();
        assert_eq!(wait.count, 0, "no wait recorded, not even 0");
        let unknown = histogram(&r, "serve_cpu_wait_unknown_seconds").unwrap();
        assert_eq!(unknown.count, 1);
        assert!((unknown.sum - latency.as_secs_f64()).abs() < 1e-6);
        assert!(unknown.sum >= 0.005, "{}", unknown.sum);
    }

    #[test]
    fn a_restarted_agents_array_is_picked_up_after_a_second() {
        let Some(old) = TestArray::create(pid_max()) else {
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), old.pin());
        let timer = r.timer("serve_seconds", &[("route", "/")], "").unwrap();
        let tid = host_tid();
        let old_id = r.thread_waits().unwrap().id();
        old.set_state(GONE);
        timer.time(|| ()); // unknown; looks at once: the same array
                           // The agent restarts: a new array at the same pin.
        let new = TestArray::create(pid_max()).unwrap();
        old.unpin();
        new.pin_at(old.pin()).unwrap();
        new.set_total(tid, 5_000_000);
        let g = timer.start();
        new.add_wait(tid, 1); // not seen: this guard reads the old array
        g.stop(); // unknown, and within the second: no look
        assert_eq!(r.thread_waits().unwrap().id(), old_id, "rate-limited");
        std::thread::sleep(Duration::from_millis(1100));
        timer.time(|| ()); // unknown, and a look: the new array from now on
        let new_id = ThreadWaits::open(new.pin()).unwrap().id();
        assert_eq!(r.thread_waits().unwrap().id(), new_id);
        let g = timer.start();
        new.add_wait(tid, 2_000);
        g.stop();
        let wait = histogram(&r, "serve_cpu_wait_seconds").unwrap();
        assert_eq!(wait.count, 1);
        assert!((wait.sum - 2e-6).abs() < 1e-15, "{}", wait.sum);
        let unknown = histogram(&r, "serve_cpu_wait_unknown_seconds").unwrap();
        assert_eq!(unknown.count, 3);
    }

    #[test]
    fn without_the_array_a_timer_has_no_companions() {
        let d = tempfile::tempdir().unwrap();
        let absent = Path::new("/sys/fs/bpf/topdeck-unit-absent/thread_waits");
        for b in [
            Registry::builder().thread_waits(absent),
            Registry::builder().no_thread_waits(),
        ] {
            let r = b.dir(d.path()).build().unwrap();
            assert!(r.thread_waits_problem().is_none());
            let timer = r.timer("serve_seconds", &[("route", "/")], "").unwrap();
            timer.time(|| ());
            assert!(timer.cpu_wait_histogram().is_none());
            assert_eq!(r.registered(), 1);
            assert!(histogram(&r, "serve_cpu_wait_seconds").is_none());
        }
        // A pin that exists but cannot be used: no companions, and why.
        let Some(a) = TestArray::create(16) else {
            return;
        };
        std::os::unix::fs::chown(a.dir(), Some(65534), None).unwrap();
        let r = registry(d.path(), a.pin());
        let why = r.thread_waits_problem().expect("a reason");
        assert!(why.contains("uid 65534"), "{why}");
        let _timer = r.timer("serve_seconds", &[], "").unwrap();
        assert_eq!(r.registered(), 1);
    }

    #[test]
    fn the_environments_off_means_no_companions() {
        let Some(a) = TestArray::create(pid_max()) else {
            return;
        };
        crate::waits::tests::in_child_with_env(
            "writer::cpu_wait::tests::child_registry_with_env_pin",
            a.pin(),
        );
        crate::waits::tests::in_child_with_env(
            "writer::cpu_wait::tests::child_registry_with_env_off",
            Path::new("off"),
        );
    }

    #[test]
    #[ignore = "run by the_environments_off_means_no_companions, in a child"]
    fn child_registry_with_env_pin() {
        let d = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(d.path()).build().unwrap();
        let timer = r.timer("serve_seconds", &[], "").unwrap();
        assert!(timer.cpu_wait_histogram().is_some());
        assert_eq!(r.registered(), 3);
    }

    #[test]
    #[ignore = "run by the_environments_off_means_no_companions, in a child"]
    fn child_registry_with_env_off() {
        let d = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(d.path()).build().unwrap();
        let timer = r.timer("serve_seconds", &[], "").unwrap();
        assert!(timer.cpu_wait_histogram().is_none());
        assert_eq!(r.registered(), 1);
    }

    #[test]
    fn a_duplicate_timer_registers_no_companions_twice() {
        let Some(a) = TestArray::create(16) else {
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), a.pin());
        let _t = r.timer("serve_seconds", &[("route", "/")], "").unwrap();
        assert_eq!(r.registered(), 3);
        let err = r.timer("serve_seconds", &[("route", "/")], "").unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Duplicate, "{err}");
        assert!(r.timer("bad-name", &[], "").is_err());
        assert_eq!(r.registered(), 3);
        // Another label value is another series of all three.
        let _u = r.timer("serve_seconds", &[("route", "/x")], "").unwrap();
        assert_eq!(r.registered(), 6);
    }

    #[test]
    fn a_thread_without_a_slot_records_no_wait() {
        // Slots for thread ids below 16 only: no test thread has one.
        let Some(a) = TestArray::create(16) else {
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), a.pin());
        let timer = r.timer("serve", &[("route", "/")], "").unwrap();
        timer.time(|| ());
        a.set_state(GONE);
        timer.time(|| ());
        a.set_state(LIVE);
        assert_eq!(histogram(&r, "serve").unwrap().count, 2);
        assert_eq!(histogram(&r, "serve_cpu_wait_seconds").unwrap().count, 0);
        assert_eq!(
            histogram(&r, "serve_cpu_wait_unknown_seconds")
                .unwrap()
                .count,
            0
        );
    }

    #[test]
    fn timers_on_several_threads_read_their_own_slots() {
        let Some(a) = TestArray::create(pid_max()) else {
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let r = registry(d.path(), a.pin());
        let timer = r.timer("serve_seconds", &[("route", "/")], "").unwrap();
        std::thread::scope(|s| {
            for i in 1..=4u64 {
                let (timer, a) = (timer.clone(), &a);
                s.spawn(move || {
                    let g = timer.start();
                    a.add_wait(host_tid(), i * 1_000);
                    g.stop();
                });
            }
        });
        let wait = histogram(&r, "serve_cpu_wait_seconds").unwrap();
        assert_eq!(wait.count, 4);
        assert!((wait.sum - 10e-6).abs() < 1e-15, "{}", wait.sum);
    }
}
