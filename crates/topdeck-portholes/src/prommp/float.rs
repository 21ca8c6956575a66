// SPDX-License-Identifier: Apache-2.0
//! Numbers as prometheus_client writes them, in bucket bounds (`le`) and
//! sample values alike.

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
