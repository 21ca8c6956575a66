// SPDX-License-Identifier: Apache-2.0
//! Prometheus names for other runtimes' counters: `[a-zA-Z_:][a-zA-Z0-9_:]*`,
//! built the same way for every source so a name never depends on the view.

/// `prefix` and `name` in snake case: camel case split (`allocBytes` is
/// `alloc_bytes`), every character outside `[a-zA-Z0-9]` turned into `_`,
/// runs of `_` collapsed, and `_<unit>` added unless already there.
///
/// ```
/// # use topdeck_sources::metric_name;
/// assert_eq!(metric_name("jvm_", "sun.gc.collector.0.time", "seconds"), "jvm_sun_gc_collector_0_time_seconds");
/// assert_eq!(metric_name("aeron_", "Bytes sent", ""), "aeron_bytes_sent");
/// assert_eq!(metric_name("jvm_", "sun.gc.tlab.allocBytes", "bytes"), "jvm_sun_gc_tlab_alloc_bytes");
/// ```
pub fn metric_name(prefix: &str, name: &str, unit: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + name.len() + unit.len() + 1);
    out.push_str(prefix);
    let mut after_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() && after_lower {
            out.push('_');
        }
        after_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    while out.len() > prefix.len() && out.ends_with('_') {
        out.pop();
    }
    if !unit.is_empty() && !out.ends_with(&format!("_{unit}")) {
        out.push('_');
        out.push_str(unit);
    }
    out
}

/// The base unit a Prometheus name ends in (`_seconds`, `_bytes`, before
/// any `_total`), for sources that name their unit only there
/// (prometheus_client's): every view then shows a duration as a duration.
///
/// ```
/// # use topdeck_sources::unit_of_name;
/// assert_eq!(unit_of_name("http_request_duration_seconds"), "seconds");
/// assert_eq!(unit_of_name("cpu_seconds_total"), "seconds");
/// assert_eq!(unit_of_name("body_bytes"), "bytes");
/// assert_eq!(unit_of_name("requests_total"), "");
/// ```
pub fn unit_of_name(name: &str) -> &'static str {
    let base = name.strip_suffix("_total").unwrap_or(name);
    ["seconds", "bytes"]
        .into_iter()
        .find(|u| base.ends_with(&format!("_{u}")))
        .unwrap_or("")
}
