// SPDX-License-Identifier: Apache-2.0
//! TIME as a person types it when asking what happened: `03:12`,
//! `yesterday 03:12`, `-10m`, `now` or RFC 3339.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Days, Local, NaiveDate, NaiveTime, TimeZone};

use crate::error::Error;

/// The moment `text` names, ns since the Unix epoch, relative to `now`:
///
/// - `now`; `-10m`, `-1h30m`, `-90s` (that long before now);
/// - `03:12` or `03:12:30`, local time: the last such time at or before
///   now (today's, or yesterday's when today's is still to come);
/// - `today 03:12`, `yesterday 03:12`;
/// - `2026-11-29 03:12[:30]` (local), or RFC 3339
///   (`2026-11-29T03:12:00Z`, `2026-11-29T03:12:00+01:00`).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
/// let ns = |s| topdeck_history::parse_time(s, now).unwrap();
/// assert_eq!(ns("-10m"), (1_800_000_000 - 600) * 1_000_000_000);
/// assert_eq!(ns("2027-01-15T08:00:00Z"), 1_800_000_000 * 1_000_000_000);
/// assert!(topdeck_history::parse_time("at noon", now).is_err());
/// ```
pub fn parse_time(text: &str, now: SystemTime) -> Result<u64, Error> {
    let fail = |why: &str| Error::Time {
        text: text.to_owned(),
        why: why.to_owned(),
    };
    let now_ns = ns(now);
    let t = text.trim();
    if t == "now" {
        return Ok(now_ns);
    }
    if let Some(ago) = t.strip_prefix('-') {
        let d = humantime::parse_duration(ago).map_err(|e| fail(&e.to_string()))?;
        return Ok(now_ns.saturating_sub(d.as_nanos() as u64));
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
        return to_ns(dt.timestamp_nanos_opt()).ok_or_else(|| fail("out of range"));
    }
    let local_now: DateTime<Local> = now.into();
    let (day, clock) = match t.split_once(' ') {
        Some(("today", c)) => (Some(local_now.date_naive()), c),
        Some(("yesterday", c)) => (local_now.date_naive().checked_sub_days(Days::new(1)), c),
        Some((d, c)) => match NaiveDate::parse_from_str(d, "%Y-%m-%d") {
            Ok(d) => (Some(d), c),
            Err(_) => return Err(fail("not a date, `today` or `yesterday` before the time")),
        },
        None => (None, t),
    };
    let clock = NaiveTime::parse_from_str(clock, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(clock, "%H:%M"))
        .map_err(|_| fail("not a time of day (HH:MM or HH:MM:SS)"))?;
    let at = |d: NaiveDate| {
        Local
            .from_local_datetime(&d.and_time(clock))
            .earliest()
            .and_then(|dt| to_ns(dt.timestamp_nanos_opt()))
    };
    let today = local_now.date_naive();
    let found = match day {
        Some(d) => at(d),
        None => at(today)
            .filter(|&ns| ns <= now_ns)
            .or_else(|| at(today.checked_sub_days(Days::new(1))?)),
    };
    found.ok_or_else(|| fail("no such local time"))
}

fn to_ns(n: Option<i64>) -> Option<u64> {
    n.and_then(|n| u64::try_from(n).ok())
}

fn ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

/// `unix_ns` as local time, to the second, with its offset
/// (`2026-11-29T03:12:00+00:00`): how views name a recorded moment.
pub fn format(unix_ns: u64) -> String {
    let t: DateTime<Local> = (SystemTime::UNIX_EPOCH + Duration::from_nanos(unix_ns)).into();
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_times_are_the_last_one_at_or_before_now() {
        let now = SystemTime::now();
        let now_ns = ns(now);
        let local: DateTime<Local> = now.into();
        let later = local + chrono::Duration::minutes(5);
        let earlier = local - chrono::Duration::minutes(5);
        let hm = |t: DateTime<Local>| t.format("%H:%M:%S").to_string();
        // Five minutes ago: today's (or, just after midnight, yesterday's).
        let e = parse_time(&hm(earlier), now).unwrap();
        assert!(e <= now_ns && now_ns - e < 301_000_000_000, "{e} {now_ns}");
        // In five minutes: yesterday's, a day less five minutes ago.
        let l = parse_time(&hm(later), now).unwrap();
        let day = 86_400_000_000_000u64;
        assert!(l < now_ns && (now_ns - l).abs_diff(day - 300_000_000_000) < 2_000_000_000);
        let y = parse_time(&format!("yesterday {}", hm(earlier)), now).unwrap();
        assert!(
            (e - y).abs_diff(day) <= 3_600_000_000_000,
            "a day apart, give or take DST"
        );
        let named = parse_time(
            &format!("{} {}", earlier.format("%Y-%m-%d"), hm(earlier)),
            now,
        );
        assert_eq!(named.unwrap(), e);
    }

    #[test]
    fn what_is_not_a_time_says_so() {
        let now = SystemTime::now();
        for bad in [
            "",
            "noon",
            "25:00",
            "-",
            "-10 lightyears",
            "tomorrow 03:00",
            "2026-13-01 03:00",
        ] {
            let e = parse_time(bad, now).unwrap_err().to_string();
            assert!(
                e.contains("cannot read the time") && e.contains("try"),
                "{bad}: {e}"
            );
        }
        assert_eq!(parse_time("now", now).unwrap(), ns(now));
    }

    #[test]
    fn format_reads_back() {
        let t = 1_800_000_000_000_000_000;
        assert_eq!(parse_time(&format(t), SystemTime::now()).unwrap(), t);
    }
}
