// SPDX-License-Identifier: Apache-2.0
//! prometheus_client 0.26.0's `generate_latest` (text format 0.0.4, default
//! `underscores` name escaping) over merged families, byte for byte.

use std::fmt::Write;

use super::merge::Family;

/// The exposition of `families`, as `generate_latest` writes it.
pub(crate) fn exposition(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        let shown = if f.kind == "counter" {
            format!("{}_total", f.name)
        } else {
            f.name.clone()
        };
        let help = escape_help(&f.help);
        let _ = writeln!(out, "# HELP {} {help}", metric_name(&shown));
        let _ = writeln!(out, "# TYPE {} {}", metric_name(&shown), f.kind);
        // OpenMetrics-only samples go into gauges of their own, after.
        let mut extra: Vec<(&str, Vec<String>)> = Vec::new();
        for s in &f.samples {
            let line = sample_line(&s.name, &s.labels, s.value);
            match ["_created", "_gcount", "_gsum"]
                .into_iter()
                .find(|suffix| s.name.strip_suffix(suffix) == Some(&f.name))
            {
                Some(suffix) => match extra.iter_mut().find(|(x, _)| *x == suffix) {
                    Some((_, lines)) => lines.push(line),
                    None => extra.push((suffix, vec![line])),
                },
                None => out.push_str(&line),
            }
        }
        extra.sort_by(|a, b| a.0.cmp(b.0));
        for (suffix, lines) in extra {
            let name = metric_name(&format!("{}{suffix}", f.name));
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            out.extend(lines);
        }
    }
    out
}

fn sample_line(name: &str, labels: &[(String, String)], value: f64) -> String {
    // `dict(labels)`: a later duplicate wins; then sorted by name.
    let mut shown: Vec<(&str, &str)> = Vec::with_capacity(labels.len());
    for (n, v) in labels {
        match shown.iter_mut().find(|(k, _)| k == n) {
            Some(slot) => slot.1 = v,
            None => shown.push((n, v)),
        }
    }
    shown.sort();
    let mut line = metric_name(name);
    if !shown.is_empty() {
        line.push('{');
        for (i, (n, v)) in shown.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            let _ = write!(line, "{}=\"{}\"", label_name(n), escape_value(v));
        }
        line.push('}');
    }
    let _ = writeln!(line, " {}", float_to_go_string(value));
    line
}

fn escape_help(s: &str) -> String {
    s.replace('\\', r"\\").replace('\n', r"\n")
}

fn escape_value(s: &str) -> String {
    s.replace('\\', r"\\")
        .replace('\n', r"\n")
        .replace('"', r#"\""#)
}

fn metric_name(s: &str) -> String {
    escape_name(s, true)
}

fn label_name(s: &str) -> String {
    escape_name(s, false)
}

/// `escape_metric_name`/`escape_label_name` with `underscores`: a valid
/// legacy name as it is (Python's `$` also matches before one final
/// newline), otherwise every other character replaced by `_`.
fn escape_name(s: &str, colon: bool) -> String {
    let ok = |c: char, i: usize| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (c.is_ascii_digit() && i > 0)
    };
    let body = s.strip_suffix('\n').unwrap_or(s);
    if s.is_empty() || (!body.is_empty() && body.chars().enumerate().all(|(i, c)| ok(c, i))) {
        return s.to_string();
    }
    s.chars()
        .enumerate()
        .map(|(i, c)| if ok(c, i) { c } else { '_' })
        .collect()
}

/// Python's `floatToGoString`: `repr(float)` but `+Inf`/`-Inf`/`NaN`, and
/// positive numbers of 7 or more integer digits in Go's exponent form.
///
/// ```
/// use topdeck_portholes::prommp::float_to_go_string;
///
/// assert_eq!(float_to_go_string(1.0), "1.0");
/// assert_eq!(float_to_go_string(0.00001), "1e-05");
/// assert_eq!(float_to_go_string(1234567.0), "1.234567e+06");
/// assert_eq!(float_to_go_string(f64::INFINITY), "+Inf");
/// ```
pub fn float_to_go_string(d: f64) -> String {
    if d == f64::INFINITY {
        return "+Inf".into();
    }
    if d == f64::NEG_INFINITY {
        return "-Inf".into();
    }
    if d.is_nan() {
        return "NaN".into();
    }
    let s = python_repr(d);
    match s.find('.') {
        Some(dot) if d > 0.0 && dot > 6 => {
            let digits = format!("{}.{}{}", &s[..1], &s[1..dot], &s[dot + 1..]);
            let mantissa = digits.trim_end_matches(['0', '.']);
            format!("{mantissa}e+{:02}", dot - 1)
        }
        _ => s,
    }
}

/// Python's `repr` of a finite float: the shortest digits that round-trip
/// (Rust's `{:e}` finds the same), fixed notation for decimal exponents
/// -4 ..= 15, otherwise `d.ddde±XX`.
fn python_repr(d: f64) -> String {
    let sci = format!("{d:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let point = exp + 1; // digits are 0.DDD × 10^point
    if d == 0.0 {
        return format!("{sign}0.0");
    }
    if !(-4 < point && point <= 16) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    if point <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= n {
        format!("{sign}{digits}{}.0", "0".repeat((point - n) as usize))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}
