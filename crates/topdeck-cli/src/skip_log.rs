// SPDX-License-Identifier: Apache-2.0
//! What an exporter or recorder could not read, told on stderr so that no
//! user can grow that log at will: a problem is said once while it lasts
//! (its identity leaves counts out, so a count that changes at every look
//! is not a new problem), at most [`PER_GROUP`] new problems are said per
//! directory or owner and [`IN_ALL`] in all per [`WINDOW`], and one line
//! per window says what was held back.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use topdeck_export::Skipped;

/// How long a rate window lasts, and how long a problem must be gone
/// before it counts as new again.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Most new problems said per directory (or per user, for a user's
/// topdeck directories and per-user notices) in one window.
pub const PER_GROUP: usize = 16;
/// Most new problems said in one window, all groups together.
pub const IN_ALL: usize = 256;
/// Groups named in a window's summary line; the rest are counted.
const GROUPS_NAMED: usize = 4;

/// Problems reported once while they last, rate-limited per directory or
/// owner; see the module docs.
///
/// ```ignore
/// let mut log = SkipLog::new("serve");
/// log.log(&report.notices()); // at each look
/// ```
#[derive(Debug)]
pub struct SkipLog {
    command: &'static str,
    /// When the current window began.
    window: Instant,
    /// Problems said, by identity, with the window (0 the current, 1 the
    /// previous) they were last seen in: one gone for a whole window is
    /// forgotten, one that comes back sooner is not said again.
    said: HashMap<String, Seen>,
    /// Problems said this window, by group.
    spent: HashMap<String, usize>,
    /// Problems held back this window, by group (each counted once).
    held: HashMap<String, HashSet<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    ThisWindow,
    LastWindow,
}

impl SkipLog {
    /// A log for `command` (`serve`, `push`, `record`), whose lines start
    /// `topdeck <command>:`.
    pub fn new(command: &'static str) -> Self {
        Self {
            command,
            window: Instant::now(),
            said: HashMap::new(),
            spent: HashMap::new(),
            held: HashMap::new(),
        }
    }

    /// Reports the problems of this look not said already, within the
    /// window's allowance.
    pub fn log(&mut self, skipped: &[Skipped]) {
        let mut out = std::io::stderr().lock();
        for line in self.lines(skipped, Instant::now()) {
            use std::io::Write;
            let _ = writeln!(out, "{line}");
        }
    }

    /// The lines [`log`](Self::log) writes for `skipped` at `now`.
    fn lines(&mut self, skipped: &[Skipped], now: Instant) -> Vec<String> {
        let mut lines = Vec::new();
        if now.duration_since(self.window) >= WINDOW {
            lines.extend(self.summary());
            self.said.retain(|_, seen| *seen == Seen::ThisWindow);
            self.said.values_mut().for_each(|s| *s = Seen::LastWindow);
            self.spent.clear();
            self.held.clear();
            self.window = now;
        }
        let mut in_all: usize = self.spent.values().sum();
        for s in skipped {
            let id = identity(s);
            if let Some(seen) = self.said.get_mut(&id) {
                *seen = Seen::ThisWindow;
                continue;
            }
            let group = group(&s.message);
            let spent = self.spent.entry(group.clone()).or_default();
            if *spent >= PER_GROUP || in_all >= IN_ALL {
                self.held.entry(group).or_default().insert(id);
                continue;
            }
            *spent += 1;
            in_all += 1;
            self.said.insert(id, Seen::ThisWindow);
            lines.push(format!(
                "topdeck {}: skipped ({}): {}",
                self.command, s.reason, s.message
            ));
        }
        lines
    }

    /// One line saying what the ending window held back, if anything.
    fn summary(&self) -> Option<String> {
        let total: usize = self.held.values().map(HashSet::len).sum();
        if total == 0 {
            return None;
        }
        let mut groups: Vec<(&String, usize)> =
            self.held.iter().map(|(g, ids)| (g, ids.len())).collect();
        groups.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut named: Vec<String> = groups
            .iter()
            .take(GROUPS_NAMED)
            .map(|(g, n)| format!("{g} ({n})"))
            .collect();
        if groups.len() > GROUPS_NAMED {
            named.push(format!("{} more", groups.len() - GROUPS_NAMED));
        }
        Some(format!(
            "topdeck {}: {total} more problems were not printed in the last {}s (at most \
             {PER_GROUP} new ones a directory or user and {IN_ALL} in all are printed per {}s): \
             {}; `topdeck ls` lists them all",
            self.command,
            WINDOW.as_secs(),
            WINDOW.as_secs(),
            named.join(", ")
        ))
    }
}

/// What decides whether a problem was said already: its reason, its
/// subject (the path or user its message begins with, before `: `) as
/// written, and the rest with every number left out, so that a count that
/// changes from one look to the next does not make it a new problem.
fn identity(s: &Skipped) -> String {
    let (subject, rest) = split_subject(&s.message);
    let mut id = format!("{}\0{subject}\0", s.reason);
    let mut in_number = false;
    for c in rest.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                id.push('#');
            }
            in_number = true;
        } else {
            id.push(c);
            in_number = false;
        }
    }
    id
}

/// The subject a message begins with and the rest.
fn split_subject(message: &str) -> (&str, &str) {
    message.split_once(": ").unwrap_or(("", message))
}

/// Whose allowance a problem is said from: the user of a topdeck
/// directory (`/dev/shm/topdeck-<uid>` and its fallbacks, which are
/// only read when owned by that uid) or of a per-user notice (`uid N`),
/// else the directory its subject is in, taken to its first three
/// components (`/tmp/hsperfdata_<user>`, a `/proc/<pid>/root`).
fn group(message: &str) -> String {
    let (subject, _) = split_subject(message);
    if subject.starts_with("uid ") {
        return subject.to_owned();
    }
    let top: Vec<&str> = subject.split('/').take(4).collect();
    if let Some(uid) = top
        .get(3)
        .and_then(|n| n.strip_prefix("topdeck-"))
        .map(|n| n.split('.').next().unwrap_or(n))
        .filter(|u| u.parse::<u32>().is_ok())
    {
        return format!("uid {uid}");
    }
    top.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(message: String) -> Skipped {
        Skipped {
            reason: "corrupt",
            message,
        }
    }

    #[test]
    fn a_count_that_changes_is_the_same_problem() {
        let mut log = SkipLog::new("serve");
        let t = Instant::now();
        let at = |n: usize| {
            vec![skipped(format!(
                "uid 1001: {n} registries left out of this scrape"
            ))]
        };
        assert_eq!(log.lines(&at(3), t).len(), 1);
        assert!(log.lines(&at(4), t).is_empty());
        assert!(log.lines(&at(5), t + Duration::from_secs(1)).is_empty());
    }

    #[test]
    fn a_problem_that_comes_back_within_a_window_is_not_said_again() {
        let mut log = SkipLog::new("serve");
        let t = Instant::now();
        let a = vec![skipped("/dev/shm/topdeck-7/1-1-a.topdeck: bad".into())];
        let b = vec![skipped("/dev/shm/topdeck-7/1-1-b.topdeck: bad".into())];
        assert_eq!(log.lines(&a, t).len(), 1);
        assert_eq!(log.lines(&b, t).len(), 1);
        for _ in 0..10 {
            assert!(log.lines(&a, t).is_empty());
            assert!(log.lines(&b, t).is_empty());
        }
        // Gone for a whole window, it is new again.
        assert!(log.lines(&[], t + WINDOW).is_empty());
        assert!(log.lines(&[], t + 2 * WINDOW).is_empty());
        assert_eq!(log.lines(&a, t + 2 * WINDOW).len(), 1);
    }

    #[test]
    fn each_directory_or_user_says_a_few_per_window_and_the_rest_is_summed_up() {
        let mut log = SkipLog::new("record");
        let t = Instant::now();
        let many = |dir: &str, n: usize| -> Vec<Skipped> {
            (0..n)
                .map(|i| skipped(format!("{dir}/1-1-{i}x.topdeck: bad")))
                .collect()
        };
        let mut flood = many("/dev/shm/topdeck-1001.a", 100);
        flood.extend(many("/dev/shm/topdeck-1001", 100));
        flood.extend(many("/dev/shm/topdeck-1002", 3));
        let said = log.lines(&flood, t);
        assert_eq!(said.len(), PER_GROUP + 3, "{said:#?}");
        assert!(said.iter().filter(|l| l.contains("topdeck-1002/")).count() == 3);
        let next = log.lines(&flood, t + WINDOW);
        assert!(
            next[0].contains("184 more problems were not printed")
                && next[0].contains("uid 1001 (184)"),
            "{next:#?}"
        );
        assert_eq!(next.len(), 1 + PER_GROUP);
    }

    #[test]
    fn no_window_says_more_than_its_allowance_in_all() {
        let mut log = SkipLog::new("serve");
        let t = Instant::now();
        let flood: Vec<Skipped> = (0..1000)
            .map(|i| skipped(format!("/tmp/hsperfdata_u{i}/1: bad")))
            .collect();
        assert_eq!(log.lines(&flood, t).len(), IN_ALL);
        assert!(log.lines(&flood, t).is_empty());
    }
}
