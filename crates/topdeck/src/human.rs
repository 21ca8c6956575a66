// SPDX-License-Identifier: Apache-2.0
//! Figures as people read them, shared by every tool that prints them, so
//! that one duration reads the same in a table, a log line and a verdict.

/// A duration in seconds in its largest fitting unit, three significant
/// digits below a second: `3.2ms`, `508ms`, `12.5µs`, `2.50s`, `2m05s`.
///
/// ```
/// assert_eq!(topdeck::human::seconds(0.0032), "3.2ms");
/// assert_eq!(topdeck::human::seconds(125.0), "2m05s");
/// assert_eq!(topdeck::human::seconds(0.0), "0s");
/// ```
pub fn seconds(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        format!("{v}s")
    } else if a == 0.0 {
        "0s".into()
    } else if a < 1e-6 {
        format!("{}ns", digits3(v * 1e9))
    } else if a < 1e-3 {
        format!("{}µs", digits3(v * 1e6))
    } else if a < 1.0 {
        format!("{}ms", digits3(v * 1e3))
    } else if a < 60.0 {
        format!("{v:.2}s")
    } else {
        let sign = if v < 0.0 { "-" } else { "" };
        let s = a.round() as u64;
        match s {
            s if s < 3600 => format!("{sign}{}m{:02}s", s / 60, s % 60),
            s if s < 86_400 => format!("{sign}{}h{:02}m", s / 3600, s / 60 % 60),
            s => format!("{sign}{}d{:02}h", s / 86_400, s / 3600 % 24),
        }
    }
}

/// About three significant digits: `3.2`, `45.3`, `507`.
fn digits3(x: f64) -> String {
    if x.abs() < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}
