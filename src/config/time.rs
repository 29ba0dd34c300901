//! Kyuubi time values: a number of milliseconds, or an ISO-8601 duration as
//! `java.time.Duration.parse` takes it (`PT5M`, `PT1.5S`, `P1DT2H`).
//!
//! The ISO-8601 grammar is jiff's; what stays here is Java's subset of it (days of 24 hours and
//! smaller units, a fraction only on seconds, no sign) and podsweep's upper bound.

use std::time::Duration;

use jiff::fmt::temporal::SpanParser;
use jiff::SpanRelativeTo;

use super::ConfigError;

/// The longest duration any podsweep time key accepts (365 days). Every timer podsweep arms
/// stays far below the limit of tokio's timer wheel (about 2.2 years), and a retain period or a
/// retry wait of a year is already far beyond any sensible setting.
pub const MAX_TIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a Kyuubi time value of any length: milliseconds (a number of milliseconds too large
/// for 64 bits reads as [`Duration::MAX`]: longer than anything) or an ISO-8601 duration. `None`
/// when it is neither.
pub fn parse_duration(value: &str) -> Option<Duration> {
    let v = value.trim();
    match v.parse::<u64>() {
        Ok(ms) => Some(Duration::from_millis(ms)),
        Err(_) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => Some(Duration::MAX),
        Err(_) => parse_iso8601(v),
    }
}

/// Parses a Kyuubi time value, at most [`MAX_TIME`]; zero is allowed (callers that need a
/// positive value check it).
pub fn parse_time(key: &str, value: &str) -> Result<Duration, ConfigError> {
    let d = parse_duration(value).ok_or_else(|| {
        ConfigError::invalid(
            key,
            value,
            "expected milliseconds or an ISO-8601 duration such as PT5M",
        )
    })?;
    if d > MAX_TIME {
        return Err(ConfigError::invalid(
            key,
            value,
            "must be at most 365 days (P365D)",
        ));
    }
    Ok(d)
}

/// Java's `Duration.parse` subset of ISO-8601 through jiff's parser.
fn parse_iso8601(v: &str) -> Option<Duration> {
    // Java has no sign-less lower-case quirks beyond the designators; jiff takes both cases.
    let rest = v.strip_prefix('+').unwrap_or(v);
    if rest.starts_with('-') {
        return None;
    }
    // Java allows a fraction only on seconds: `PT1.5M` is an error there.
    if let Some((_, time)) = rest.to_ascii_uppercase().split_once('T') {
        let mut fraction = false;
        for c in time.chars() {
            match c {
                '.' | ',' => fraction = true,
                'H' | 'M' if fraction => return None,
                'S' => fraction = false,
                _ => {}
            }
        }
    }
    let span = SpanParser::new().parse_span(rest).ok()?;
    if span.is_negative() || span.get_years() != 0 || span.get_months() != 0 {
        return None;
    }
    if span.get_weeks() != 0 {
        return None;
    }
    let signed = span.to_duration(SpanRelativeTo::days_are_24_hours()).ok()?;
    Duration::try_from(signed).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_values() {
        let table: &[(&str, Option<Duration>)] = &[
            ("300000", Some(Duration::from_secs(300))),
            ("PT5M", Some(Duration::from_secs(300))),
            ("pt5m", Some(Duration::from_secs(300))),
            ("PT1.5S", Some(Duration::from_millis(1500))),
            ("P1DT2H", Some(Duration::from_secs(26 * 3600))),
            ("P2D", Some(Duration::from_secs(2 * 86400))),
            ("PT1H30M", Some(Duration::from_secs(5400))),
            ("PT0.001S", Some(Duration::from_millis(1))),
            ("P365D", Some(MAX_TIME)),
            ("PT0S", Some(Duration::ZERO)),
            ("PT", None),
            ("P", None),
            ("PT5", None),
            ("PT5M1H", None),
            ("5m", None),
            ("-PT5M", None),
            ("PT1.5M", None),
            ("P1Y", None),
            ("P1W", None),
            ("", None),
        ];
        for (input, want) in table {
            let got = parse_time("k", input).ok();
            assert_eq!(got, *want, "input {input:?}");
        }
    }

    #[test]
    fn durations_beyond_a_year_name_the_key() {
        for big in ["P366D", "PT8761H", "99999999999999", "P100000D"] {
            let e = parse_time("some.key", big).unwrap_err();
            assert_eq!(e.key(), "some.key", "{big}");
            assert!(e.to_string().starts_with("some.key"), "{e}");
        }
    }
}
