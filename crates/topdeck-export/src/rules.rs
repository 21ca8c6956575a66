// SPDX-License-Identifier: Apache-2.0
//! Every naming, labelling, escaping and number-formatting rule of the
//! exposition formats, in one place, so that the three encoders cannot
//! disagree about what a series is called.
//!
//! - Counters are exposed as `<name>_total` in every format (the suffix is
//!   added when the registered name lacks it); the OpenMetrics family name
//!   is the name without `_total`.
//! - A counter registered in [`NANOSECONDS`] (a running total of time kept
//!   exactly, as an integer) is exposed in [`SECONDS`], Prometheus' base
//!   unit, so that its name says `_seconds_total` ([`counter_value`],
//!   [`exposed_unit`]); every other value is exposed as it is stored.
//! - Every series carries the labels of its source (`process`, `pid`, and
//!   `registry` when the registry is not the default `main`), then the
//!   metric's own. An own label that collides with a source label, or `le`
//!   on a histogram, is renamed `exported_<name>`, as Prometheus itself
//!   does with `honor_labels: false`.
//! - `# UNIT` is written (OpenMetrics only) when the family name ends in
//!   `_<unit>`, as the OpenMetrics specification requires; otherwise the
//!   unit is left out rather than the metric renamed. Protobuf's `unit`
//!   field follows the same rule.
//! - Two registries of one process with the same registry name that publish
//!   the same series would expose it twice; give such registries names.

use std::borrow::Cow;
use std::io::{self, Write};

/// Names of the labels that say where a series comes from.
pub const PROCESS_LABEL: &str = "process";
/// The writer's pid.
pub const PID_LABEL: &str = "pid";
/// The file owner's uid: the one source label the system vouches for (a
/// writer names its own process, and may name it anything).
pub const UID_LABEL: &str = "uid";
/// The writer's container, from its cgroup: present only when it runs in
/// one (not in the root cgroup), in a container or on the host.
pub const CONTAINER_LABEL: &str = "container";
/// The registry's name, present only when it is not [`DEFAULT_REGISTRY`].
pub const REGISTRY_LABEL: &str = "registry";
/// The label naming another runtime's porthole kind (`jvm`, `python`, `aeron`, `mmv`).
pub const SOURCE_LABEL: &str = "source";
/// The registry name the library gives when none is chosen.
pub const DEFAULT_REGISTRY: &str = "main";
/// Prefix given to an own label that collides with a reserved one.
pub const EXPORTED_PREFIX: &str = "exported_";
/// The bucket bound label of classic histograms.
pub const LE_LABEL: &str = "le";

/// The base unit of time, as exposed.
pub const SECONDS: &str = "seconds";
/// The unit of a counter of integer nanoseconds, exposed in [`SECONDS`].
pub const NANOSECONDS: &str = "nanoseconds";

/// A counter's value as exposed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CounterValue {
    /// The integer it is.
    Integer(u64),
    /// Seconds, from a counter of nanoseconds.
    Seconds(f64),
}

impl CounterValue {
    /// As a float (protobuf and OTLP carry counters as doubles).
    pub fn as_f64(self) -> f64 {
        match self {
            Self::Integer(n) => n as f64,
            Self::Seconds(s) => s,
        }
    }
}

/// The exposed value of a counter registered with `unit`: seconds for
/// [`NANOSECONDS`], else the integer as it is.
///
/// ```
/// use topdeck_export::rules::{counter_value, CounterValue};
/// assert_eq!(counter_value(1_500_000_000, "nanoseconds"), CounterValue::Seconds(1.5));
/// assert_eq!(counter_value(7, ""), CounterValue::Integer(7));
/// ```
pub fn counter_value(v: u64, unit: &str) -> CounterValue {
    if unit == NANOSECONDS {
        CounterValue::Seconds(v as f64 / 1e9)
    } else {
        CounterValue::Integer(v)
    }
}

/// The unit a metric registered with `unit` is exposed in: [`SECONDS`] for
/// a `counter` of [`NANOSECONDS`] (see [`counter_value`]), else `unit`.
/// A gauge keeps its unit: its value is exposed as it is stored.
///
/// ```
/// use topdeck_export::rules::exposed_unit;
/// assert_eq!(exposed_unit(true, "nanoseconds"), "seconds");
/// assert_eq!(exposed_unit(false, "nanoseconds"), "nanoseconds");
/// assert_eq!(exposed_unit(true, "bytes"), "bytes");
/// ```
pub fn exposed_unit(counter: bool, unit: &str) -> &str {
    if counter && unit == NANOSECONDS {
        SECONDS
    } else {
        unit
    }
}

/// The sample name of a counter: `name` with `_total` added if missing.
///
/// ```
/// use topdeck_export::rules::counter_sample_name;
/// assert_eq!(counter_sample_name("jobs_total"), "jobs_total");
/// assert_eq!(counter_sample_name("jobs"), "jobs_total");
/// ```
pub fn counter_sample_name(name: &str) -> Cow<'_, str> {
    if name.ends_with("_total") {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(format!("{name}_total"))
    }
}

/// The OpenMetrics family name of a counter: the name without `_total`.
pub fn counter_family_name(name: &str) -> &str {
    name.strip_suffix("_total").unwrap_or(name)
}

/// The unit to declare for an OpenMetrics family, if the name allows one.
pub fn openmetrics_unit<'a>(family_name: &str, unit: &'a str) -> Option<&'a str> {
    let ok = !unit.is_empty()
        && family_name.len() > unit.len()
        && family_name.ends_with(unit)
        && family_name.as_bytes()[family_name.len() - unit.len() - 1] == b'_';
    ok.then_some(unit)
}

/// The exposed name of one of a metric's own labels.
pub fn own_label_name(name: &str, histogram: bool) -> Cow<'_, str> {
    own_label_name_beside(name, histogram, false)
}

/// The exposed name of one of a metric's own labels, `carried` when its
/// source carries a label of that name only some sources have
/// ([`CONTAINER_LABEL`], [`SOURCE_LABEL`]): a metric that names containers
/// itself (the scheduler probe's) keeps its label as it is, unless its
/// source is in a container too.
///
/// ```
/// use topdeck_export::rules::own_label_name_beside;
/// assert_eq!(own_label_name_beside("container", false, false), "container");
/// assert_eq!(own_label_name_beside("container", false, true), "exported_container");
/// assert_eq!(own_label_name_beside("pid", false, false), "exported_pid");
/// ```
pub fn own_label_name_beside(name: &str, histogram: bool, carried: bool) -> Cow<'_, str> {
    let reserved = name == PROCESS_LABEL
        || name == PID_LABEL
        || name == UID_LABEL
        || name == REGISTRY_LABEL
        || carried
        || (histogram && name == LE_LABEL);
    if reserved {
        Cow::Owned(format!("{EXPORTED_PREFIX}{name}"))
    } else {
        Cow::Borrowed(name)
    }
}

/// Writes a label value escaped for both text formats: `\`, `"` and line
/// feed become `\\`, `\"` and `\n`.
pub fn write_label_value(w: &mut impl Write, v: &str) -> io::Result<()> {
    write_escaped(w, v, true)
}

/// Writes help text escaped for the Prometheus text format 0.0.4 (`\` and
/// line feed only; quotes stay as they are).
pub fn write_help_text(w: &mut impl Write, v: &str) -> io::Result<()> {
    write_escaped(w, v, false)
}

/// Writes help text escaped for OpenMetrics (`\`, `"` and line feed).
pub fn write_help_openmetrics(w: &mut impl Write, v: &str) -> io::Result<()> {
    write_escaped(w, v, true)
}

fn write_escaped(w: &mut impl Write, v: &str, quote: bool) -> io::Result<()> {
    let bytes = v.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'"' if quote => b"\\\"",
            _ => continue,
        };
        w.write_all(&bytes[start..i])?;
        w.write_all(esc)?;
        start = i + 1;
    }
    w.write_all(&bytes[start..])
}

/// Writes the start of a sample line in either text format, up to and
/// including the space before the value: `name suffix{labels,le="..."} `
/// (bucket lines use [`bucket_prefix`] instead).
/// `labels` is already escaped and comma-separated (see
/// `Source::labels`); braces are left out when there are none.
#[inline]
pub fn write_sample_start(
    w: &mut impl Write,
    name: &[u8],
    suffix: &[u8],
    labels: &[u8],
    le: Option<&[u8]>,
) -> io::Result<()> {
    w.write_all(name)?;
    w.write_all(suffix)?;
    match (labels.is_empty(), le) {
        (true, None) => return w.write_all(b" "),
        (true, Some(le)) => {
            w.write_all(b"{le=\"")?;
            w.write_all(le)?;
            return w.write_all(b"\"} ");
        }
        (false, _) => {}
    }
    w.write_all(b"{")?;
    w.write_all(labels)?;
    if let Some(le) = le {
        w.write_all(b",le=\"")?;
        w.write_all(le)?;
        w.write_all(b"\"")?;
    }
    w.write_all(b"} ")
}

/// The part of a `_bucket` line before the bound: `name_bucket{labels,le="`,
/// built once per histogram and copied for each of its buckets.
pub fn bucket_prefix(name: &[u8], labels: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(name);
    out.extend_from_slice(b"_bucket{");
    out.extend_from_slice(labels);
    if !labels.is_empty() {
        out.push(b',');
    }
    out.extend_from_slice(b"le=\"");
}

/// Writes an unsigned integer.
#[inline]
pub fn write_u64(w: &mut impl Write, v: u64) -> io::Result<()> {
    w.write_all(itoa::Buffer::new().format(v).as_bytes())
}

/// Writes a signed integer.
#[inline]
pub fn write_i64(w: &mut impl Write, v: i64) -> io::Result<()> {
    w.write_all(itoa::Buffer::new().format(v).as_bytes())
}

/// Writes a float the way both text formats accept it: shortest
/// round-trip digits, `NaN`, `+Inf`, `-Inf`.
///
/// ```
/// let mut out = Vec::new();
/// for v in [0.25, 1.0, 1e-9, f64::INFINITY, f64::NAN] {
///     topdeck_export::rules::write_f64(&mut out, v).unwrap();
///     out.push(b' ');
/// }
/// assert_eq!(String::from_utf8(out).unwrap(), "0.25 1.0 1e-9 +Inf NaN ");
/// ```
#[inline]
pub fn write_f64(w: &mut impl Write, v: f64) -> io::Result<()> {
    if v.is_finite() {
        w.write_all(ryu::Buffer::new().format_finite(v).as_bytes())
    } else if v.is_nan() {
        w.write_all(b"NaN")
    } else if v > 0.0 {
        w.write_all(b"+Inf")
    } else {
        w.write_all(b"-Inf")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(f: fn(&mut Vec<u8>, &str) -> io::Result<()>, v: &str) -> String {
        let mut out = Vec::new();
        f(&mut out, v).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert_eq!(escaped(write_label_value, "a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(escaped(write_label_value, "plain"), "plain");
        assert_eq!(escaped(write_label_value, "ünï\""), "ünï\\\"");
    }

    #[test]
    fn help_keeps_quotes_in_text_and_escapes_them_in_openmetrics() {
        assert_eq!(
            escaped(write_help_text, "say \"hi\"\n\\"),
            "say \"hi\"\\n\\\\"
        );
        assert_eq!(
            escaped(write_help_openmetrics, "say \"hi\""),
            "say \\\"hi\\\""
        );
    }

    #[test]
    fn counters_get_one_total_suffix() {
        assert_eq!(counter_sample_name("a_total"), "a_total");
        assert_eq!(counter_sample_name("a"), "a_total");
        assert_eq!(counter_family_name("a_total"), "a");
        assert_eq!(counter_family_name("a"), "a");
    }

    #[test]
    fn units_are_declared_only_as_name_suffixes() {
        assert_eq!(
            openmetrics_unit("latency_seconds", "seconds"),
            Some("seconds")
        );
        assert_eq!(openmetrics_unit("latency", "seconds"), None);
        assert_eq!(openmetrics_unit("latencyseconds", "seconds"), None);
        assert_eq!(openmetrics_unit("seconds", "seconds"), None);
        assert_eq!(openmetrics_unit("x_seconds", ""), None);
    }

    #[test]
    fn own_labels_that_collide_are_renamed() {
        assert_eq!(own_label_name("route", true), "route");
        assert_eq!(own_label_name("pid", false), "exported_pid");
        assert_eq!(own_label_name("process", false), "exported_process");
        assert_eq!(own_label_name("le", false), "le");
        assert_eq!(own_label_name("le", true), "exported_le");
    }

    #[test]
    fn floats_round_trip_and_spell_infinities_as_prometheus_does() {
        for v in [0.1, 1.0 / 3.0, 2e300, -5.5, 1e-300, 0.0] {
            let mut out = Vec::new();
            write_f64(&mut out, v).unwrap();
            assert_eq!(
                std::str::from_utf8(&out).unwrap().parse::<f64>().unwrap(),
                v
            );
        }
        let mut out = Vec::new();
        write_f64(&mut out, f64::NEG_INFINITY).unwrap();
        assert_eq!(out, b"-Inf");
    }
}
