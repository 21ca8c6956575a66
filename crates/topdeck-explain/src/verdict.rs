// SPDX-License-Identifier: Apache-2.0
//! A window's verdict on one latency series, in one line a person reads:
//! `p99 4.1ms (baseline 0.9ms): 78% waiting for a CPU, 91% of it behind
//! /batch`, or `p99 4.1ms: not the CPU (wait 2% of latency)`.

use topdeck::human::seconds;

use crate::window::{Culprit, Finding, Row};

fn percent(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The verdict line of `row`, naming the largest of `culprits`; `waited`
/// is what the service's threads waited for a CPU in the window, seconds,
/// when known (a recording does not keep it).
pub fn line(row: &Row, culprits: &[Culprit], waited: Option<f64>) -> String {
    let p99 = row.p99.map_or("-".into(), seconds);
    let mut head = format!("p99 {p99}");
    if let Some(b) = row.baseline_p99 {
        head += &format!(" (baseline {}", seconds(b));
        if let Some(r) = row.rise_explained {
            head += &format!(", {} of the rise is CPU wait", percent(r));
        }
        head += ")";
    }
    let share = row.share.unwrap_or(0.0);
    let behind = |c: &Culprit| format!(", {} of it behind {}", percent(c.share), c.who);
    match (row.finding, waited) {
        // A service starved of the CPU finishes nothing: its threads' wait
        // is then all there is to say.
        (Finding::NoRequests, Some(waited)) if waited > 0.0 => format!(
            "no request ended in the window, while its threads waited {} for a CPU{}",
            seconds(waited),
            culprits.first().map(behind).unwrap_or_default()
        ),
        (Finding::NoRequests, _) => "no requests in the window".into(),
        (Finding::Unknown, _) if row.per_request => format!(
            "{head}: CPU wait unknown for all {} requests (the agent's thread-waits array was gone)",
            row.requests
        ),
        (Finding::Unknown, _) => format!(
            "{head}: CPU wait unknown for its {} requests (its timer did not measure it, and its threads' wait was not recorded){}",
            row.requests,
            match culprits.first() {
                Some(c) => format!(
                    "; of its cgroup's wait, the agent charged {} to {}",
                    percent(c.share),
                    c.who
                ),
                None => String::new(),
            }
        ),
        (Finding::NotCpu, _) => format!("{head}: not the CPU (wait {} of latency)", percent(share)),
        (Finding::Cpu, _) => {
            let behind = match culprits.first() {
                Some(c) => behind(c),
                None => ", who held it unknown (no agent)".into(),
            };
            format!("{head}: {} waiting for a CPU{behind}", percent(share))
        }
    }
}
