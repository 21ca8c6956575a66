// SPDX-License-Identifier: Apache-2.0
//! prometheus_client 0.26.0's `generate_latest` (text format 0.0.4, default
//! `underscores` name escaping) over merged families, byte for byte.

use std::borrow::Cow;
use std::fmt::Write;

use super::float::float_to_go_string;
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
            match ["_created", "_gcount", "_gsum"]
                .into_iter()
                .find(|suffix| s.name.strip_suffix(suffix) == Some(&f.name))
            {
                Some(suffix) => {
                    let mut line = String::new();
                    sample_line(&mut line, &s.name, &s.labels, s.value);
                    match extra.iter_mut().find(|(x, _)| *x == suffix) {
                        Some((_, lines)) => lines.push(line),
                        None => extra.push((suffix, vec![line])),
                    }
                }
                None => sample_line(&mut out, &s.name, &s.labels, s.value),
            }
        }
        extra.sort_by(|a, b| a.0.cmp(b.0));
        for (suffix, lines) in extra {
            let name = metric_name(&format!("{}{suffix}", f.name)).into_owned();
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            out.extend(lines);
        }
    }
    out
}

/// Appends one sample's line to `line`.
fn sample_line(line: &mut String, name: &str, labels: &[(String, String)], value: f64) {
    // `dict(labels)`: a later duplicate wins; then sorted by name.
    let mut shown: Vec<(&str, &str)> = Vec::with_capacity(labels.len());
    for (n, v) in labels {
        match shown.iter_mut().find(|(k, _)| k == n) {
            Some(slot) => slot.1 = v,
            None => shown.push((n, v)),
        }
    }
    shown.sort();
    line.push_str(&metric_name(name));
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
}

fn escape_help(s: &str) -> Cow<'_, str> {
    if !s.contains(['\\', '\n']) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(s.replace('\\', r"\\").replace('\n', r"\n"))
}

fn escape_value(s: &str) -> Cow<'_, str> {
    if !s.contains(['\\', '\n', '"']) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.replace('\\', r"\\")
            .replace('\n', r"\n")
            .replace('"', r#"\""#),
    )
}

fn metric_name(s: &str) -> Cow<'_, str> {
    escape_name(s, true)
}

fn label_name(s: &str) -> Cow<'_, str> {
    escape_name(s, false)
}

/// `escape_metric_name`/`escape_label_name` with `underscores`: a valid
/// legacy name as it is (Python's `$` also matches before one final
/// newline), otherwise every other character replaced by `_`.
fn escape_name(s: &str, colon: bool) -> Cow<'_, str> {
    let ok = |c: char, i: usize| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (c.is_ascii_digit() && i > 0)
    };
    let body = s.strip_suffix('\n').unwrap_or(s);
    if s.is_empty() || (!body.is_empty() && body.chars().enumerate().all(|(i, c)| ok(c, i))) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .enumerate()
            .map(|(i, c)| if ok(c, i) { c } else { '_' })
            .collect(),
    )
}
