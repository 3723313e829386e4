//! Times an operator types: an absolute time (RFC 3339, or a date meaning its midnight UTC)
//! or a time relative to now (`30m`, `1h`, `2h30m`, `7d`: that long ago). One parser for
//! every place a time is taken (`tern replay --since/--until`, and the tools built on this
//! crate), so "replay what failed in the last hour" is `--since 1h` everywhere.

use chrono::{DateTime, Utc};

/// Why a time argument was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeArgError {
    /// Neither an absolute time nor a duration.
    #[error(
        "{0:?} is not a time: use a duration ago like 30m, 1h, 2h30m or 7d, RFC 3339 like 2026-11-30T10:00:00Z, or a date like 2026-11-30"
    )]
    Unreadable(String),
    /// A duration beyond what can be subtracted from now.
    #[error("{0:?} reaches too far into the past")]
    TooFar(String),
}

/// Reads `text` as a point in time, `now` being the reference for relative forms.
///
/// Accepted: RFC 3339 (`2026-11-30T10:00:00Z`, any offset, converted to UTC); a date
/// (`2026-11-30`, midnight UTC); a duration ago in `humantime`'s syntax (`90s`, `30m`,
/// `1h`, `2h30m`, `7d`, `1week`; units from seconds to weeks, no sign).
///
/// # Errors
/// [`TimeArgError::Unreadable`] for anything else (including an empty string and a
/// negative duration), [`TimeArgError::TooFar`] when the duration overflows the calendar.
pub fn parse_time(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, TimeArgError> {
    let trimmed = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(trimmed) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Some(midnight) = chrono::NaiveDate::parse_from_str(trimmed, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
    {
        return Ok(midnight.and_utc());
    }
    let ago = humantime::parse_duration(trimmed)
        .map_err(|_| TimeArgError::Unreadable(text.to_owned()))?;
    let ago = chrono::Duration::from_std(ago).map_err(|_| TimeArgError::TooFar(text.to_owned()))?;
    now.checked_sub_signed(ago)
        .ok_or_else(|| TimeArgError::TooFar(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
            .expect("valid")
            .with_timezone(&Utc)
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("valid")
            .with_timezone(&Utc)
    }

    #[test]
    fn durations_mean_that_long_ago() {
        assert_eq!(parse_time("1h", now()), Ok(at("2026-12-01T11:00:00Z")));
        assert_eq!(parse_time("30m", now()), Ok(at("2026-12-01T11:30:00Z")));
        assert_eq!(parse_time("2h30m", now()), Ok(at("2026-12-01T09:30:00Z")));
        assert_eq!(parse_time("90s", now()), Ok(at("2026-12-01T11:58:30Z")));
        assert_eq!(parse_time("7d", now()), Ok(at("2026-11-24T12:00:00Z")));
        assert_eq!(parse_time(" 1h ", now()), Ok(at("2026-12-01T11:00:00Z")));
    }

    #[test]
    fn absolute_times_and_dates_are_kept() {
        assert_eq!(
            parse_time("2026-11-30T10:00:00+02:00", now()),
            Ok(at("2026-11-30T08:00:00Z"))
        );
        assert_eq!(
            parse_time("2026-11-30", now()),
            Ok(at("2026-11-30T00:00:00Z"))
        );
    }

    #[test]
    fn anything_else_is_refused_with_the_forms_named() {
        for bad in ["", "yesterday", "-1h", "1x", "2026-13-01", "h"] {
            let err = parse_time(bad, now()).expect_err(bad);
            assert!(matches!(err, TimeArgError::Unreadable(_)), "{bad}: {err}");
            assert!(err.to_string().contains("30m, 1h"), "{err}");
        }
        assert!(matches!(
            parse_time("300000000years", now()),
            Err(TimeArgError::TooFar(_) | TimeArgError::Unreadable(_))
        ));
    }
}
