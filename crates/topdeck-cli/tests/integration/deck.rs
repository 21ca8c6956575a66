// SPDX-License-Identifier: Apache-2.0
//! The top deck on the real kernel, through tmux as a person sees it
//! (root): a service with a latency timer in one cgroup and a CPU hog in
//! another, on the same CPU, and a quiet service in a third on another
//! CPU, under the real agent. At 80×24 the service's container row shows
//! its latency p99, its run-queue p99, the hog's container as whom it
//! waited behind with a share, and a verdict: at least `suspect` while the
//! hog has the same weight, `noisy` once it has the heaviest, with the
//! hog's row near 100% of a CPU and its weight. At 200×50 the wider
//! columns come back. The quiet container gets no verdict throughout.

use std::time::{Duration, Instant};

use topdeck_sched::testing::CgroupGuard;

use super::explain::{Scene, PACE};
use super::top::Tmux;
use super::*;

/// How long a screen may take to show what the scene makes happen: the
/// agent needs a baseline and a verdict must hold for 3 of its windows.
const SETTLE: Duration = Duration::from_secs(60);

/// The captured screens, for a person reading the log of a failure.
fn show(what: &str, s: &str) {
    eprintln!("--- {what}\n{s}");
}

/// The row of the container named `name`: the line that starts with it.
fn row<'a>(s: &'a str, name: &str) -> Option<&'a str> {
    s.lines().find(|l| l.starts_with(&format!("│{name} ")))
}

/// Waits until `ok` holds for the screen, failing if any screen seen on
/// the way gives the quiet container a verdict.
fn settle(tmux: &Tmux, quiet: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + SETTLE;
    loop {
        let s = tmux.screen();
        let quiet_verdict = s
            .lines()
            .any(|l| l.contains(&format!("{quiet}:")) || row(&s, quiet).is_some_and(has_verdict));
        assert!(!quiet_verdict, "the quiet container got a verdict:\n{s}");
        if ok(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "the screen never showed {what} within {SETTLE:?}; last screen:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn has_verdict(row: &str) -> bool {
    row.contains("noisy") || row.contains("suspect") || row.contains("quota")
}

/// The CPU column of a container row: its first percentage.
fn cpu_percent(row: &str) -> Option<f64> {
    row.split_whitespace()
        .find_map(|w| w.strip_suffix('%')?.parse().ok())
}

#[test]
fn the_top_deck_joins_a_services_latency_with_whom_it_waited_behind() {
    let Some(scene) = Scene::new("deck") else {
        return;
    };
    // Short names, so that an 80-column screen shows them whole.
    let tag = std::process::id() % 100_000;
    let name = |what: &str| format!("td{tag}{what}");
    let (web_n, hog_n, quiet_n) = (name("web"), name("hog"), name("calm"));
    let cg = |n: &str| CgroupGuard::at(&scene.h, &format!("/{n}"));
    let (web_cg, hog_cg, quiet_cg) = (cg(&web_n), cg(&hog_n), cg(&quiet_n));
    let _web = scene.start("victim", &web_cg, &[]);
    let other_cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let _quiet = scene.start_on(other_cpu, "victim", &quiet_cg, &[(PACE, "0.01")]);

    let bin = env!("CARGO_BIN_EXE_topdeck");
    let tmux = Tmux::sized(
        &[
            ("TOPDECK_DIR", scene.ns.path()),
            ("TOPDECK_BIN", Path::new(bin)),
        ],
        80,
        24,
    );
    tmux.wait_for("a shell prompt", |s| s.contains("td$"));
    tmux.type_text("exec \"$TOPDECK_BIN\" top --interval 1s", true);
    settle(&tmux, &quiet_n, "the service's latency", |s| {
        row(s, &web_n).is_some_and(|r| r.contains("ms") || r.contains("µs"))
    });
    // A calm baseline for the agent (3 windows of 500 ms and some).
    std::thread::sleep(Duration::from_secs(3));

    // An equal-weight hog on the service's CPU: at least a suspect.
    let _hog = scene.start("hog", &hog_cg, &[]);
    let s = settle(&tmux, &quiet_n, "a verdict naming the hog", |s| {
        row(s, &web_n).is_some_and(|r| has_verdict(r) && r.contains(&format!("{hog_n} ")))
    });
    show("80x24, equal weight", &s);
    assert!(s.lines().all(|l| l.chars().count() <= 80), "{s}");

    // The heaviest weight: a noisy neighbour, using its CPU.
    hog_cg.set_max_weight();
    let heavy = if scene.h.cpu_v1 { "256x" } else { "100x" };
    let s = settle(&tmux, &quiet_n, "the hog named noisy at full CPU", |s| {
        let (Some(web), Some(hog)) = (row(s, &web_n), row(s, &hog_n)) else {
            return false;
        };
        web.contains("noisy") && hog.contains(heavy) && cpu_percent(hog).is_some_and(|c| c >= 85.0)
    });
    show("80x24, heaviest weight", &s);
    let web = row(&s, &web_n).unwrap();
    // Run-queue p99 and app p99 are durations; whom it waited behind, with a share.
    let durations = web
        .split_whitespace()
        .filter(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.ends_with('s'))
        .count();
    assert!(durations >= 2, "{web}");
    let behind = web
        .split_once(&format!("{hog_n} "))
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map_or("", |w| w.trim_end_matches(','));
    assert!(behind.ends_with('%'), "a share after the hog's name: {web}");
    assert!(
        s.lines()
            .any(|l| l.contains(&format!("/{web_n}: noisy neighbour /{hog_n}"))),
        "the verdict line with its evidence: {s}"
    );

    // Wider, every column: the CPUs, the trend, the cgroup.
    let out = tmux.run_args(&["resize-window", "-t", "top", "-x", "200", "-y", "50"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = settle(&tmux, &quiet_n, "the wide columns", |s| {
        s.contains("CPUS") && s.contains("TREND") && s.contains("CGROUP")
    });
    show("200x50", &s);
    let quiet = row(&s, &quiet_n).expect("the quiet container's row at 200x50");
    assert!(!has_verdict(quiet), "{quiet}");
    let hog = row(&s, &hog_n).unwrap();
    assert!(hog.contains(&format!("/{hog_n}")), "{hog}");
    assert!(s.lines().all(|l| l.chars().count() <= 200), "{s}");
}
