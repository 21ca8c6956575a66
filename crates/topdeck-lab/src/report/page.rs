// SPDX-License-Identifier: Apache-2.0
//! The page around the sections: its style (inline, so the file stands
//! alone: no script, no font, nothing fetched), the header naming the
//! machine the results were recorded on, and dates a person reads.

use std::time::{Duration, UNIX_EPOCH};

/// Inline CSS: laptop-width, tables with aligned digits, charts two abreast.
pub const STYLE: &str = "\
*{box-sizing:border-box}\
body{margin:0;font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#1f2328;background:#f6f8fa}\
header{background:#1f2937;color:#f9fafb;padding:20px 0 16px}\
header h1{margin:0 0 4px;font-size:26px;font-weight:600}\
header p{margin:2px 0;color:#d1d5db}\
header strong{color:#f9fafb;font-weight:600}\
nav{margin-top:10px;display:flex;flex-wrap:wrap;gap:8px}\
nav a{color:#f9fafb;text-decoration:none;border:1px solid #4b5563;border-radius:14px;padding:2px 12px;font-size:14px}\
nav a.missing{color:#9ca3af;border-style:dashed}\
.wrap{max-width:1240px;margin:0 auto;padding:0 20px}\
section{background:#fff;border:1px solid #d0d7de;border-radius:8px;margin:20px 0;padding:4px 16px 16px}\
h2{font-size:21px;margin:14px 0 2px}\
h3{font-size:15px;margin:16px 0 6px}\
p{margin:6px 0}\
.question{font-style:italic;color:#424a53}\
.meta{color:#59636e;font-size:13px}\
.missing-note{color:#59636e}\
code{font:13px ui-monospace,'DejaVu Sans Mono',monospace;background:#eff1f3;padding:1px 4px;border-radius:4px}\
.table{overflow-x:auto;margin:8px 0}\
table{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}\
th,td{padding:4px 7px;border-bottom:1px solid #e5e7eb;vertical-align:top;white-space:nowrap}\
thead th{border-bottom:2px solid #9ca3af;text-align:left;background:#f3f4f6}\
.wrap{white-space:normal;min-width:14em}\
tbody th{text-align:left;font-weight:600}\
.num{text-align:right}\
tbody tr:nth-child(even){background:#f9fafb}\
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:12px 20px;margin-top:12px}\
figure{margin:0}\
figcaption{font-weight:600;font-size:14px;margin-bottom:2px}\
figure svg{width:100%;height:auto;display:block}\
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:13px;margin-left:64px}\
.legend i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px;border-radius:2px}\
";

/// Seconds since the epoch as `2026-11-24 11:40 UTC`.
pub fn utc(unix_time: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs(unix_time);
    // RFC 3339 is `2026-11-24T11:40:36Z`: its date and minutes, spaced.
    let s = humantime::format_rfc3339_seconds(t).to_string();
    match (s.get(..10), s.get(11..16)) {
        (Some(date), Some(time)) => format!("{date} {time} UTC"),
        _ => s,
    }
}

/// A saved machine description (`2 CPUs, Linux 6.18.44, AMD EPYC`, as
/// `experiments::machine` writes it) as the page names it:
/// `AMD EPYC · 2 vCPUs · Linux 6.18.44`. Anything else is shown as it is.
pub fn machine(saved: &str) -> String {
    let parsed = saved.split_once(" CPUs, Linux ").and_then(|(cpus, rest)| {
        let (kernel, model) = rest.split_once(", ")?;
        let model = if model.is_empty() {
            "unknown CPU"
        } else {
            model
        };
        Some(format!("{model} · {cpus} vCPUs · Linux {kernel}"))
    });
    parsed.unwrap_or_else(|| saved.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_to_the_minute() {
        assert_eq!(utc(1_795_520_436), "2026-11-24 11:40 UTC");
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
    }

    #[test]
    fn machines_lead_with_the_cpu_model() {
        assert_eq!(
            machine("2 CPUs, Linux 6.18.44-fc, AMD EPYC 7B13, 64-Core"),
            "AMD EPYC 7B13, 64-Core · 2 vCPUs · Linux 6.18.44-fc"
        );
        assert_eq!(
            machine("8 CPUs, Linux 6.1.0, "),
            "unknown CPU · 8 vCPUs · Linux 6.1.0"
        );
        assert_eq!(machine("a laptop"), "a laptop");
    }
}
