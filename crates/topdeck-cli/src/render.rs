// SPDX-License-Identifier: Apache-2.0
//! How values look to a person: units, labels, ages. JSON output carries
//! raw numbers instead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use topdeck::{Liveness, MetricInfo};

/// `name{k="v",...}`.
pub fn series(m: &MetricInfo) -> String {
    if m.labels.is_empty() {
        return m.name.clone();
    }
    let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", m.name, labels.join(","))
}

/// A value in the metric's unit: seconds as ns/µs/ms/s, bytes in binary
/// multiples, anything else as a plain number.
pub fn value(v: f64, unit: &str) -> String {
    match unit {
        "seconds" => seconds(v),
        "bytes" => bytes(v),
        _ => number(v),
    }
}

/// A per-second rate in the metric's unit: `2.0k/s`, `63.4MiB/s`.
pub fn rate(v: f64, unit: &str) -> String {
    if unit == "bytes" {
        return format!("{}/s", bytes(v));
    }
    let (x, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    if suffix.is_empty() && x.abs() < 10.0 {
        format!("{x:.2}/s")
    } else {
        format!("{x:.1}{suffix}/s")
    }
}

/// A plain number: integers exactly, others with 4 significant digits.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

fn seconds(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0s".into()
    } else if a < 1e-6 {
        format!("{:.1}ns", v * 1e9)
    } else if a < 1e-3 {
        format!("{:.1}µs", v * 1e6)
    } else if a < 1.0 {
        format!("{:.1}ms", v * 1e3)
    } else {
        format!("{v:.2}s")
    }
}

fn bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v;
    let mut i = 0;
    while x.abs() >= 1024.0 && i < UNITS.len() - 1 {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{x:.0}B")
    } else {
        format!("{x:.1}{}", UNITS[i])
    }
}

/// `alive` or `dead`.
pub fn state(l: Liveness) -> &'static str {
    match l {
        Liveness::Alive => "alive",
        Liveness::Dead => "dead",
    }
}

/// Time since `unix_ns`, coarsely: `42s`, `7m`, `3h`, `2d`.
pub fn age(unix_ns: u64) -> String {
    let then = UNIX_EPOCH + Duration::from_nanos(unix_ns);
    let secs = SystemTime::now()
        .duration_since(then)
        .map_or(0, |d| d.as_secs());
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_naturally() {
        assert_eq!(value(0.0032, "seconds"), "3.2ms");
        assert_eq!(value(4.5e-7, "seconds"), "450.0ns");
        assert_eq!(value(3.0 * 1024.0 * 1024.0, "bytes"), "3.0MiB");
        assert_eq!(value(42.0, ""), "42");
        assert_eq!(value(0.25, ""), "0.2500");
        assert_eq!(rate(1999.69, ""), "2.0k/s");
        assert_eq!(rate(0.5, ""), "0.50/s");
        assert_eq!(rate(65.4e6, "bytes"), "62.4MiB/s");
    }
}
