// SPDX-License-Identifier: Apache-2.0
//! How values look to a person: numbers in the metric's unit (seconds, and
//! integer nanoseconds, as ns/µs/ms/s; bytes as KiB/MiB/...), rates, labels, ages, and a bold
//! header only when a terminal is there to show it. JSON output carries the
//! raw numbers instead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use topdeck::human::seconds;
use topdeck::{MetricInfo, MetricKind, Value};

/// How a metric's unit is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    /// A count of nanoseconds (a running total of time kept exact), shown
    /// as seconds are.
    Nanoseconds,
    Bytes,
    Other,
}

impl Unit {
    fn of(unit: &str) -> Self {
        match unit {
            "seconds" | "second" | "s" => Self::Seconds,
            "nanoseconds" | "nanosecond" | "ns" => Self::Nanoseconds,
            "bytes" | "byte" | "By" | "B" => Self::Bytes,
            _ => Self::Other,
        }
    }
}

/// `name{k="v",...}`.
pub fn series(m: &MetricInfo) -> String {
    if m.labels.is_empty() {
        return m.name.clone();
    }
    let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", m.name, labels.join(","))
}

/// `counter`, `gauge`, `histogram` or `summary`: the kind names of the
/// JSON output. Another runtime's summary has the metric kind `Histogram`
/// (the nearest), so the value tells.
pub fn kind(k: MetricKind, v: &Value) -> &'static str {
    match (k, v) {
        (_, Value::Summary { .. }) => "summary",
        (MetricKind::Counter, _) => "counter",
        (MetricKind::GaugeI64 | MetricKind::GaugeF64, _) => "gauge",
        (MetricKind::Histogram, _) => "histogram",
    }
}

/// A value in the metric's unit: `3.2ms`, `1.5MiB`, `0.25`, `42 requests`.
pub fn value(v: f64, unit: &str) -> String {
    match Unit::of(unit) {
        Unit::Seconds => seconds(v),
        Unit::Nanoseconds => seconds(v / 1e9),
        Unit::Bytes => bytes(v),
        Unit::Other if unit.is_empty() => number(v),
        Unit::Other => format!("{} {unit}", number(v)),
    }
}

/// An exact integer (a counter or gauge), with the unit's reading beside it
/// when that says more: `23068672 (22.0MiB)`.
pub fn integer(n: i128, unit: &str) -> String {
    match Unit::of(unit) {
        Unit::Seconds | Unit::Nanoseconds | Unit::Bytes if n.unsigned_abs() >= 1024 => {
            format!("{n} ({})", value(n as f64, unit))
        }
        Unit::Seconds | Unit::Nanoseconds | Unit::Bytes => value(n as f64, unit),
        Unit::Other if unit.is_empty() => n.to_string(),
        Unit::Other => format!("{n} {unit}"),
    }
}

/// A per-second rate in the metric's unit: `2.0k/s`, `63.4MiB/s`, `0.52s/s`.
pub fn rate(v: f64, unit: &str) -> String {
    match Unit::of(unit) {
        Unit::Seconds => format!("{}/s", seconds(v)),
        Unit::Nanoseconds => format!("{}/s", seconds(v / 1e9)),
        Unit::Bytes => format!("{}/s", bytes(v)),
        Unit::Other => {
            let (x, suffix) = match v.abs() {
                a if a >= 1e9 => (v / 1e9, "G"),
                a if a >= 1e6 => (v / 1e6, "M"),
                a if a >= 1e3 => (v / 1e3, "k"),
                _ => (v, ""),
            };
            let per = if unit.is_empty() {
                "/s".to_owned()
            } else {
                format!(" {unit}/s")
            };
            if x == 0.0 {
                format!("0{per}")
            } else if suffix.is_empty() && x.abs() < 10.0 {
                format!("{x:.2}{per}")
            } else {
                format!("{x:.1}{suffix}{per}")
            }
        }
    }
}

/// A plain number: integers exactly, others with about 4 significant digits.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        format!("{v}")
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

fn bytes(v: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if !v.is_finite() {
        return format!("{v}B");
    }
    let mut x = v;
    let mut i = 0;
    while x.abs() >= 1024.0 && i < UNITS.len() - 1 {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{}B", number(x.round()))
    } else {
        format!("{x:.1}{}", UNITS[i])
    }
}

/// `p50 3.2ms  p99 12.5ms` for the given quantiles, as `quantile`
/// estimates them; `-` where the histogram is empty.
pub fn quantiles(quantile: impl Fn(f64) -> Option<f64>, qs: &[(&str, f64)], unit: &str) -> String {
    qs.iter()
        .map(|&(name, q)| {
            format!(
                "{name} {}",
                quantile(q).map_or("-".into(), |v| value(v, unit))
            )
        })
        .collect::<Vec<_>>()
        .join("  ")
}

/// `count 3  sum 750ms  mean 250ms`: a histogram or summary of another
/// runtime, counts being floats; `mean -` when empty.
pub fn count_sum_mean(count: f64, sum: f64, unit: &str) -> String {
    let mean = if count > 0.0 {
        value(sum / count, unit)
    } else {
        "-".into()
    };
    format!(
        "count {}  sum {}  mean {mean}",
        number(count),
        value(sum, unit)
    )
}

/// `alive` or `dead`, as every view and the JSON write it.
pub use topdeck_sources::state_name as state;

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

/// `text` in bold when `styled` (stdout is a terminal), else as it is.
pub fn bold(text: &str, styled: bool) -> String {
    if styled {
        format!("\x1b[1m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// Rows of cells as left-aligned columns two spaces apart; the last column
/// is not padded.
pub fn table(rows: &[Vec<String>]) -> Vec<String> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c + 1 == r.len() {
                    line += cell;
                } else {
                    let pad = widths[c] - cell.chars().count();
                    line += cell;
                    line.extend(std::iter::repeat_n(' ', pad + 2));
                }
            }
            line
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_in_the_largest_fitting_unit() {
        assert_eq!(value(0.0032, "seconds"), "3.2ms");
        assert_eq!(value(0.5078, "seconds"), "508ms");
        assert_eq!(value(4.5e-7, "seconds"), "450ns");
        assert_eq!(value(1.25e-5, "seconds"), "12.5µs");
        assert_eq!(value(2.5, "seconds"), "2.50s");
        assert_eq!(value(125.0, "seconds"), "2m05s");
        assert_eq!(value(-0.002, "seconds"), "-2.0ms");
        assert_eq!(value(0.0, "seconds"), "0s");
    }

    #[test]
    fn a_count_of_nanoseconds_reads_as_seconds() {
        assert_eq!(integer(1_500_000_000, "nanoseconds"), "1500000000 (1.50s)");
        assert_eq!(integer(450, "nanoseconds"), "450ns");
        assert_eq!(rate(2.5e8, "nanoseconds"), "250ms/s");
    }

    #[test]
    fn bytes_read_in_binary_multiples() {
        assert_eq!(value(3.0 * 1024.0 * 1024.0, "bytes"), "3.0MiB");
        assert_eq!(value(1536.0, "bytes"), "1.5KiB");
        assert_eq!(value(512.0, "bytes"), "512B");
        assert_eq!(integer(3 << 20, "bytes"), "3145728 (3.0MiB)");
        assert_eq!(integer(100, "bytes"), "100B");
    }

    #[test]
    fn plain_numbers_stay_exact_or_short() {
        assert_eq!(value(42.0, ""), "42");
        assert_eq!(value(0.25, ""), "0.2500");
        assert_eq!(value(3.0, "requests"), "3 requests");
        assert_eq!(integer(-7, ""), "-7");
        assert_eq!(value(f64::NAN, ""), "NaN");
    }

    #[test]
    fn foreign_counts_read_with_sum_and_mean() {
        assert_eq!(
            count_sum_mean(3.0, 0.75, "seconds"),
            "count 3  sum 750ms  mean 250ms"
        );
        assert_eq!(count_sum_mean(0.0, 0.0, ""), "count 0  sum 0  mean -");
    }

    #[test]
    fn summaries_are_named_by_their_value() {
        let summary = Value::Summary {
            count: 1.0,
            sum: 1.0,
        };
        assert_eq!(kind(MetricKind::Histogram, &summary), "summary");
        assert_eq!(
            kind(MetricKind::Histogram, &Value::GaugeF64(1.0)),
            "histogram"
        );
        assert_eq!(
            kind(MetricKind::Counter, &Value::CounterF64(1.0)),
            "counter"
        );
    }

    #[test]
    fn rates_carry_the_unit() {
        assert_eq!(rate(1999.69, ""), "2.0k/s");
        assert_eq!(rate(0.5, ""), "0.50/s");
        assert_eq!(rate(0.0, ""), "0/s");
        assert_eq!(rate(65.4e6, "bytes"), "62.4MiB/s");
        assert_eq!(rate(0.52, "seconds"), "520ms/s");
    }

    #[test]
    fn tables_align_every_column_but_the_last() {
        let rows = vec![
            vec!["A".into(), "BB".into(), "x".into()],
            vec!["CCC".into(), "D".into(), "yy".into()],
        ];
        assert_eq!(table(&rows), ["A    BB  x", "CCC  D   yy"]);
    }

    #[test]
    fn bold_only_when_styled() {
        assert_eq!(bold("x", false), "x");
        assert!(bold("x", true).contains('\x1b'));
    }
}
