//! Instants of campaign windows and of the job's clock: RFC 3339 text in, nanoseconds out.
//!
//! A campaign's `starts_at`/`ends_at` and the job's clock meet as [`EpochNanos`], so a
//! window opens and closes by exact integer comparison, with no zone, float or rounding
//! in between. The parser is strict (RFC 3339 `date-time` and nothing else) because a
//! timestamp it guessed at would open a campaign at the wrong moment; its errors say what
//! was wrong, for the dead-letter reason a user reads.

use serde::{Deserialize, Serialize};

/// An instant: nanoseconds since the Unix epoch (UTC), negative before 1970.
///
/// `i128` holds every instant RFC 3339 can name (years 0000-9999, offsets up to ±23:59)
/// and [`EpochNanos::BEGINNING`] below them all, with no overflow to handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EpochNanos(pub i128);

impl EpochNanos {
    /// The beginning of time: before every instant a timestamp can name.
    pub const BEGINNING: EpochNanos = EpochNanos(i128::MIN);

    /// The instant `millis` milliseconds after the epoch (a Kafka or file-mode timestamp).
    pub fn from_millis(millis: u64) -> Self {
        EpochNanos(i128::from(millis) * 1_000_000)
    }

    /// The least whole millisecond (since the epoch) at or after this instant.
    ///
    /// Rounds up, not toward zero, also before 1970, so a clock in milliseconds that
    /// reaches this value has reached the instant.
    pub fn ceil_millis(self) -> i128 {
        self.0.div_euclid(1_000_000) + i128::from(self.0.rem_euclid(1_000_000) != 0)
    }
}

/// Why a text is not an RFC 3339 timestamp with a zone.
///
/// Each message is short and names what was wrong (and where), since it becomes the
/// dead-letter reason of the record that carried the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rfc3339Error {
    /// The text is empty.
    #[error("is empty: expected an RFC 3339 timestamp such as `2026-11-27T00:00:00Z`")]
    Empty,
    /// A character (or the end) where the RFC 3339 layout needs something else.
    #[error("expected {expected} at byte {at}, found {}", describe(*.found))]
    Shape {
        /// Byte offset in the text.
        at: usize,
        /// What the layout needs there.
        expected: &'static str,
        /// What is there; `None` for the end of the text.
        found: Option<char>,
    },
    /// The text ends after the time: a local time names no instant.
    #[error("has no zone: RFC 3339 needs `Z` or an offset such as `+03:00`")]
    NoZone,
    /// A `.` with no digit after it.
    #[error("has a `.` with no digits after it at byte {at}")]
    EmptyFraction {
        /// Byte offset of the `.`.
        at: usize,
    },
    /// More fractional digits than nanoseconds hold.
    #[error("has {digits} fractional digits: at most 9 (nanoseconds)")]
    FractionTooLong {
        /// How many digits the fraction has.
        digits: usize,
    },
    /// Month not in 01-12.
    #[error("month {0:02} is out of range 01-12")]
    Month(u32),
    /// Day not in the month (leap years counted).
    #[error("day {day:02} is out of range for {year:04}-{month:02} (01-{last:02})")]
    Day {
        /// The year of the date.
        year: u32,
        /// The month of the date.
        month: u32,
        /// The day as written.
        day: u32,
        /// The month's last day.
        last: u32,
    },
    /// Hour not in 00-23.
    #[error("hour {0:02} is out of range 00-23")]
    Hour(u32),
    /// Minute not in 00-59.
    #[error("minute {0:02} is out of range 00-59")]
    Minute(u32),
    /// Second not in 00-60 (60 being a leap second).
    #[error("second {0:02} is out of range 00-60")]
    Second(u32),
    /// Offset hours not in 00-23.
    #[error("offset hour {0:02} is out of range 00-23")]
    OffsetHour(u32),
    /// Offset minutes not in 00-59.
    #[error("offset minute {0:02} is out of range 00-59")]
    OffsetMinute(u32),
    /// Text after a complete timestamp.
    #[error("has trailing text at byte {at}, starting with {}", describe(Some(*.found)))]
    Trailing {
        /// Byte offset of the first extra character.
        at: usize,
        /// The first extra character.
        found: char,
    },
}

/// A found character for a message: quoted and escaped, so a control character or a
/// space stays visible.
fn describe(found: Option<char>) -> String {
    match found {
        None => "the end".to_owned(),
        Some(c) => format!("`{}`", c.escape_debug()),
    }
}

const NANOS_PER_SECOND: i128 = 1_000_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Parses an RFC 3339 timestamp with a zone (RFC 3339 section 5.6 `date-time`).
///
/// The form is `YYYY-MM-DDTHH:MM:SS`, an optional `.` with 1 to 9 digits, then `Z` or
/// `±HH:MM`; digits are ASCII only. Choices where RFC 3339 leaves room:
/// - `t` and `z` are accepted as well as `T` and `Z`, and a single space in place of `T`,
///   as section 5.6 allows (its NOTE), since producers do write these.
/// - `-00:00` (UTC with the local offset unknown, in RFC 3339) is the same instant as `Z`.
/// - Second `60` (a leap second) is accepted and names the instant one second after
///   second `59`, that is the next minute's second `00`: the epoch count (like Unix time)
///   has no leap seconds, and a window bound must still be an instant.
/// - Offsets are `00:00` to `23:59` either way; the day is checked against the month and
///   leap years.
///
/// Everything else (a missing zone or seconds, `+0300`, `+03`, more than 9 fractional
/// digits, text after the zone) is an error saying what was wrong and where.
pub fn parse_rfc3339(text: &str) -> Result<EpochNanos, Rfc3339Error> {
    if text.is_empty() {
        return Err(Rfc3339Error::Empty);
    }
    let mut cursor = Cursor { text, at: 0 };

    let year = cursor.digits(4, "a digit of the year")?;
    cursor.byte(b'-', "`-` after the year")?;
    let month = cursor.digits(2, "a digit of the month")?;
    if !(1..=12).contains(&month) {
        return Err(Rfc3339Error::Month(month));
    }
    cursor.byte(b'-', "`-` after the month")?;
    let day = cursor.digits(2, "a digit of the day")?;
    let last = days_in_month(year, month);
    if !(1..=last).contains(&day) {
        return Err(Rfc3339Error::Day { year, month, day, last });
    }
    match cursor.peek() {
        Some(b'T' | b't' | b' ') => cursor.at += 1,
        _ => return Err(cursor.shape("`T` (or a space) after the date")),
    }
    let hour = cursor.digits(2, "a digit of the hour")?;
    if hour > 23 {
        return Err(Rfc3339Error::Hour(hour));
    }
    cursor.byte(b':', "`:` after the hour")?;
    let minute = cursor.digits(2, "a digit of the minute")?;
    if minute > 59 {
        return Err(Rfc3339Error::Minute(minute));
    }
    cursor.byte(b':', "`:` after the minute")?;
    let second = cursor.digits(2, "a digit of the second")?;
    if second > 60 {
        return Err(Rfc3339Error::Second(second));
    }

    let mut nanos: u32 = 0;
    let mut zone_expected = "`.`, `Z` or an offset such as `+03:00` after the second";
    if cursor.peek() == Some(b'.') {
        let dot = cursor.at;
        cursor.at += 1;
        let mut digits = 0;
        while let Some(digit @ b'0'..=b'9') = cursor.peek() {
            if digits < 9 {
                nanos = nanos * 10 + u32::from(digit - b'0');
            }
            digits += 1;
            cursor.at += 1;
        }
        match digits {
            0 => return Err(Rfc3339Error::EmptyFraction { at: dot }),
            1..=9 => nanos *= 10u32.pow(9 - digits as u32),
            _ => return Err(Rfc3339Error::FractionTooLong { digits }),
        }
        zone_expected = "`Z` or an offset such as `+03:00` after the fraction";
    }

    // Seconds east of UTC: the local time minus this is the UTC time.
    let offset: i64 = match cursor.peek() {
        None => return Err(Rfc3339Error::NoZone),
        Some(b'Z' | b'z') => {
            cursor.at += 1;
            0
        }
        Some(sign @ (b'+' | b'-')) => {
            cursor.at += 1;
            let hours = cursor.digits(2, "a digit of the offset hour")?;
            if hours > 23 {
                return Err(Rfc3339Error::OffsetHour(hours));
            }
            cursor.byte(b':', "`:` after the offset hour")?;
            let minutes = cursor.digits(2, "a digit of the offset minute")?;
            if minutes > 59 {
                return Err(Rfc3339Error::OffsetMinute(minutes));
            }
            let magnitude = i64::from(hours * 3600 + minutes * 60);
            if sign == b'-' {
                -magnitude
            } else {
                magnitude
            }
        }
        Some(_) => return Err(cursor.shape(zone_expected)),
    };
    if let Some(found) = text[cursor.at..].chars().next() {
        return Err(Rfc3339Error::Trailing { at: cursor.at, found });
    }

    let seconds = days_from_civil(i64::from(year), month, day) * SECONDS_PER_DAY
        + i64::from(hour * 3600 + minute * 60 + second)
        - offset;
    Ok(EpochNanos(i128::from(seconds) * NANOS_PER_SECOND + i128::from(nanos)))
}

/// Formats an instant as RFC 3339 in UTC, e.g. `2026-11-27T00:00:00.250Z`.
///
/// The fraction is omitted when zero, else written with 3, 6 or 9 digits, the fewest that
/// are exact, so `parse_rfc3339(&format_rfc3339(x)) == Ok(x)` for every instant in the
/// years 0000-9999 (UTC). RFC 3339 cannot name an instant outside those years (such as
/// [`EpochNanos::BEGINNING`]); for one, the function does not panic or clamp (a clamped
/// text would name another instant) but returns the exact count in a form that reads as
/// what it is and that `parse_rfc3339` rejects, e.g.
/// `-170141183460469231731687303715884105728 ns since the epoch (outside years 0000-9999)`.
pub fn format_rfc3339(at: EpochNanos) -> String {
    let first = i128::from(days_from_civil(0, 1, 1) * SECONDS_PER_DAY) * NANOS_PER_SECOND;
    let end = i128::from(days_from_civil(10_000, 1, 1) * SECONDS_PER_DAY) * NANOS_PER_SECOND;
    if !(first..end).contains(&at.0) {
        return format!("{} ns since the epoch (outside years 0000-9999)", at.0);
    }
    // In range, the seconds fit an i64 and the days a civil date with a 4-digit year.
    let seconds = at.0.div_euclid(NANOS_PER_SECOND) as i64;
    let nanos = at.0.rem_euclid(NANOS_PER_SECOND) as u32;
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (of_day / 3600, of_day / 60 % 60, of_day % 60);
    let fraction = if nanos == 0 {
        String::new()
    } else if nanos % 1_000_000 == 0 {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    };
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}{fraction}Z")
}

/// A position in the text being parsed; every byte consumed so far is ASCII, so `at` is
/// always a character boundary.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// The error for an unexpected character (or end) at the cursor.
    fn shape(&self, expected: &'static str) -> Rfc3339Error {
        Rfc3339Error::Shape {
            at: self.at,
            expected,
            found: self.text[self.at..].chars().next(),
        }
    }

    fn byte(&mut self, wanted: u8, expected: &'static str) -> Result<(), Rfc3339Error> {
        if self.peek() == Some(wanted) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.shape(expected))
        }
    }

    /// Exactly `count` ASCII digits, as a number.
    fn digits(&mut self, count: usize, expected: &'static str) -> Result<u32, Rfc3339Error> {
        let mut value = 0;
        for _ in 0..count {
            match self.peek() {
                Some(digit @ b'0'..=b'9') => value = value * 10 + u32::from(digit - b'0'),
                _ => return Err(self.shape(expected)),
            }
            self.at += 1;
        }
        Ok(value)
    }
}

/// `at` as RFC 3339 in the zone `offset_minutes` east of UTC (`+03:00`, `-05:30`; `+00:00`
/// for 0: [`format_rfc3339`] writes `Z`), with `digits` fractional digits (0 to 9; if `at`
/// needs more to stay exact, the next of 3, 6 or 9 that suffices). Years 0 to 9999 only, as RFC 3339.
pub fn format_rfc3339_at_offset(at: EpochNanos, offset_minutes: i32, digits: u32) -> String {
    assert!(offset_minutes.abs() < 24 * 60, "offset {offset_minutes} min");
    let local = at.0 + i128::from(offset_minutes) * 60 * NANOS_PER_SECOND;
    let seconds = local.div_euclid(NANOS_PER_SECOND);
    let nanos = local.rem_euclid(NANOS_PER_SECOND);
    let days = i64::try_from(seconds.div_euclid(86_400)).expect("years 0 to 9999");
    let (year, month, day) = civil_from_days(days);
    assert!((0..=9999).contains(&year), "{at:?} is outside RFC 3339's years");
    let second_of_day = seconds.rem_euclid(86_400);
    let mut text = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    );
    let mut digits = digits.min(9);
    while digits < 9 && nanos % 10i128.pow(9 - digits) != 0 {
        digits = ((digits / 3 + 1) * 3).min(9);
    }
    if digits > 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(&fraction[..digits as usize]);
    }
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let offset = offset_minutes.unsigned_abs();
    text.push_str(&format!("{sign}{:02}:{:02}", offset / 60, offset % 60));
    text
}

fn is_leap_year(year: u32) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`):
/// years start in March so the leap day ends a year, and 400-year eras repeat exactly.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400; // 0..=399
    let month_from_march = i64::from((month + 9) % 12); // March is 0
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1; // 0..=365
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`] (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097; // 0..=146_096
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153; // 0..=11
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
    use proptest::prelude::*;

    const SECOND: i128 = 1_000_000_000;
    const DAY: i128 = 86_400 * SECOND;

    /// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z.
    const FIRST: i128 = -62_167_219_200 * SECOND;
    const LAST: i128 = 253_402_300_800 * SECOND - 1;

    fn ok(text: &str) -> i128 {
        match parse_rfc3339(text) {
            Ok(at) => at.0,
            Err(error) => panic!("{text:?}: {error}"),
        }
    }

    #[test]
    fn parses_valid_forms_to_exact_nanos() {
        let table: &[(&str, i128)] = &[
            ("1970-01-01T00:00:00Z", 0),
            ("2026-11-27T00:00:00Z", 1_795_737_600 * SECOND),
            ("2026-11-27T03:00:00.250+03:00", 1_795_737_600 * SECOND + 250_000_000),
            ("2026-11-26T18:30:00-05:30", 1_795_737_600 * SECOND),
            ("1970-01-01T00:00:00-00:00", 0),
            ("1969-12-31T23:59:59Z", -SECOND),
            ("1969-12-31T23:59:59.999999999Z", -1),
            ("1969-12-31T00:00:00Z", -DAY),
            ("1900-01-01T00:00:00Z", -2_208_988_800 * SECOND),
            ("1970-01-01T00:00:00.1Z", 100_000_000),
            ("1970-01-01T00:00:00.12Z", 120_000_000),
            ("1970-01-01T00:00:00.123Z", 123_000_000),
            ("1970-01-01T00:00:00.1234Z", 123_400_000),
            ("1970-01-01T00:00:00.12345Z", 123_450_000),
            ("1970-01-01T00:00:00.123456Z", 123_456_000),
            ("1970-01-01T00:00:00.1234567Z", 123_456_700),
            ("1970-01-01T00:00:00.12345678Z", 123_456_780),
            ("1970-01-01T00:00:00.123456789Z", 123_456_789),
            ("1970-01-01T00:00:00.000000001Z", 1),
            ("1970-01-01T00:00:00.000Z", 0),
            ("2024-02-29T00:00:00Z", 1_709_164_800 * SECOND),
            ("2000-02-29T12:00:00Z", 951_825_600 * SECOND),
            // A leap second is the instant one second after :59.
            ("2016-12-31T23:59:60Z", 1_483_228_800 * SECOND),
            ("2016-12-31T23:59:60.5Z", 1_483_228_800 * SECOND + 500_000_000),
            ("2026-11-27t00:00:00z", 1_795_737_600 * SECOND),
            ("2026-11-27 00:00:00Z", 1_795_737_600 * SECOND),
            ("2026-11-27 03:00:00+03:00", 1_795_737_600 * SECOND),
            ("0000-01-01T00:00:00Z", FIRST),
            ("9999-12-31T23:59:59.999999999Z", LAST),
            ("0000-01-01T00:00:00+23:59", FIRST - (23 * 3600 + 59 * 60) * SECOND),
            (
                "9999-12-31T23:59:59-23:59",
                LAST + 1 - SECOND + (23 * 3600 + 59 * 60) * SECOND,
            ),
        ];
        for &(text, nanos) in table {
            assert_eq!(ok(text), nanos, "{text}");
        }
    }

    #[test]
    fn rejects_invalid_forms_with_the_precise_error() {
        use Rfc3339Error::*;
        let shape = |at, expected, found| Shape { at, expected, found };
        let table: &[(&str, Rfc3339Error)] = &[
            ("", Empty),
            ("2026-11-27T00:00:00", NoZone),
            ("2026-11-27T00:00:00.250", NoZone),
            (
                "2026-11-27T00:00:00+0300",
                shape(22, "`:` after the offset hour", Some('0')),
            ),
            ("2026-11-27T00:00:00+03", shape(22, "`:` after the offset hour", None)),
            (
                "2023-02-29T00:00:00Z",
                Day {
                    year: 2023,
                    month: 2,
                    day: 29,
                    last: 28,
                },
            ),
            (
                "1900-02-29T00:00:00Z",
                Day {
                    year: 1900,
                    month: 2,
                    day: 29,
                    last: 28,
                },
            ),
            (
                "2026-04-31T00:00:00Z",
                Day {
                    year: 2026,
                    month: 4,
                    day: 31,
                    last: 30,
                },
            ),
            (
                "2026-01-00T00:00:00Z",
                Day {
                    year: 2026,
                    month: 1,
                    day: 0,
                    last: 31,
                },
            ),
            ("2026-13-01T00:00:00Z", Month(13)),
            ("2026-00-01T00:00:00Z", Month(0)),
            ("2026-11-27T24:00:00Z", Hour(24)),
            ("2026-11-27T00:60:00Z", Minute(60)),
            ("2026-11-27T00:00:61Z", Second(61)),
            ("2026-11-27T00:00:00+24:00", OffsetHour(24)),
            ("2026-11-27T00:00:00-03:60", OffsetMinute(60)),
            ("2026-11-27T00:00:00.1234567890Z", FractionTooLong { digits: 10 }),
            ("2026-11-27T00:00:00.Z", EmptyFraction { at: 19 }),
            ("2026-11-27T00:00:00Z ", Trailing { at: 20, found: ' ' }),
            (
                "2026-11-27T00:00:00+03:00[Europe/Istanbul]",
                Trailing { at: 25, found: '[' },
            ),
            ("2026-11-27T00:00:00Zé", Trailing { at: 20, found: 'é' }),
            ("2026-11-27", shape(10, "`T` (or a space) after the date", None)),
            ("2026-11-27T00:00Z", shape(16, "`:` after the minute", Some('Z'))),
            (
                "2026-11-27T00:00:00 UTC",
                shape(19, "`.`, `Z` or an offset such as `+03:00` after the second", Some(' ')),
            ),
            (
                "2026-11-27T00:00:00.5 UTC",
                shape(21, "`Z` or an offset such as `+03:00` after the fraction", Some(' ')),
            ),
            ("2026/11/27T00:00:00Z", shape(4, "`-` after the year", Some('/'))),
            ("26-11-27T00:00:00Z", shape(2, "a digit of the year", Some('-'))),
            ("+2026-11-27T00:00:00Z", shape(0, "a digit of the year", Some('+'))),
            ("2026-W48-5T00:00:00Z", shape(5, "a digit of the month", Some('W'))),
            ("2026-11-27T00:00:00ZZ", Trailing { at: 20, found: 'Z' }),
            ("2026-11-27  00:00:00Z", shape(11, "a digit of the hour", Some(' '))),
            ("2026-11-27T0:00:00Z", shape(12, "a digit of the hour", Some(':'))),
            // Unicode digits are not ASCII digits (U+0662 ARABIC-INDIC DIGIT TWO).
            (
                "\u{662}026-11-27T00:00:00Z",
                shape(0, "a digit of the year", Some('\u{662}')),
            ),
            ("1795737600", shape(4, "`-` after the year", Some('7'))),
        ];
        for (text, expected) in table {
            assert_eq!(parse_rfc3339(text).as_ref(), Err(expected), "{text:?}");
        }
    }

    #[test]
    fn error_messages_say_what_was_wrong() {
        let message = |text: &str| parse_rfc3339(text).unwrap_err().to_string();
        assert_eq!(
            message("2026-11-27T00:00:00"),
            "has no zone: RFC 3339 needs `Z` or an offset such as `+03:00`"
        );
        assert_eq!(
            message("2026/11/27T00:00:00Z"),
            "expected `-` after the year at byte 4, found `/`"
        );
        assert_eq!(
            message("2026-11-27"),
            "expected `T` (or a space) after the date at byte 10, found the end"
        );
        assert_eq!(
            message("2023-02-29T00:00:00Z"),
            "day 29 is out of range for 2023-02 (01-28)"
        );
        assert_eq!(message("2026-13-01T00:00:00Z"), "month 13 is out of range 01-12");
        assert_eq!(message("2026-11-27T00:00:61Z"), "second 61 is out of range 00-60");
        assert_eq!(
            message("2026-11-27T00:00:00+24:00"),
            "offset hour 24 is out of range 00-23"
        );
        assert_eq!(
            message("2026-11-27T00:00:00.1234567890Z"),
            "has 10 fractional digits: at most 9 (nanoseconds)"
        );
        assert_eq!(
            message("2026-11-27T00:00:00.Z"),
            "has a `.` with no digits after it at byte 19"
        );
        assert_eq!(
            message("2026-11-27T00:00:00Z\n"),
            "has trailing text at byte 20, starting with `\\n`"
        );
    }

    #[test]
    fn formats_utc_with_the_fewest_exact_fraction_digits() {
        let table: &[(i128, &str)] = &[
            (0, "1970-01-01T00:00:00Z"),
            (-1, "1969-12-31T23:59:59.999999999Z"),
            (-SECOND, "1969-12-31T23:59:59Z"),
            (1_795_737_600 * SECOND + 250_000_000, "2026-11-27T00:00:00.250Z"),
            (1_000, "1970-01-01T00:00:00.000001Z"),
            (120_000, "1970-01-01T00:00:00.000120Z"),
            (1, "1970-01-01T00:00:00.000000001Z"),
            (1_709_164_800 * SECOND, "2024-02-29T00:00:00Z"),
            (FIRST, "0000-01-01T00:00:00Z"),
            (LAST, "9999-12-31T23:59:59.999999999Z"),
        ];
        for &(nanos, text) in table {
            assert_eq!(format_rfc3339(EpochNanos(nanos)), text, "{nanos}");
        }
    }

    #[test]
    fn formats_out_of_range_instants_as_raw_nanos_that_do_not_parse() {
        for nanos in [i128::MIN, FIRST - 1, LAST + 1, i128::MAX] {
            let text = format_rfc3339(EpochNanos(nanos));
            assert_eq!(text, format!("{nanos} ns since the epoch (outside years 0000-9999)"));
            assert!(parse_rfc3339(&text).is_err(), "{text}");
        }
        assert!(format_rfc3339(EpochNanos::BEGINNING).starts_with("-170141183460469231731687303715884105728 ns"));
    }

    #[test]
    fn ceil_millis_rounds_up_also_before_the_epoch() {
        let table: &[(i128, i128)] = &[
            (0, 0),
            (1, 1),
            (999_999, 1),
            (1_000_000, 1),
            (1_000_001, 2),
            (-1, 0),
            (-999_999, 0),
            (-1_000_000, -1),
            (-1_000_001, -1),
            (-2_500_000, -2),
            (i128::MIN, i128::MIN / 1_000_000),
        ];
        for &(nanos, millis) in table {
            assert_eq!(EpochNanos(nanos).ceil_millis(), millis, "{nanos}");
        }
        assert_eq!(
            EpochNanos::from_millis(1_700_000_000_123).ceil_millis(),
            1_700_000_000_123
        );
        assert_eq!(EpochNanos::from_millis(u64::MAX).0, i128::from(u64::MAX) * 1_000_000);
    }

    #[test]
    fn civil_days_round_trip_over_whole_eras() {
        let first = days_from_civil(0, 1, 1);
        let end = days_from_civil(10_000, 1, 1);
        let mut expected = (0, 1, 1);
        for days in first..end {
            assert_eq!(civil_from_days(days), expected);
            let (year, month, day) = expected;
            assert_eq!(days_from_civil(year, month, day), days);
            expected = if day < days_in_month(year as u32, month) {
                (year, month, day + 1)
            } else if month < 12 {
                (year, month + 1, 1)
            } else {
                (year + 1, 1, 1)
            };
        }
        assert_eq!(expected, (10_000, 1, 1));
    }

    /// A valid RFC 3339 text with a random separator, fraction length, zone and case, and
    /// optionally a leap second.
    fn timestamp(years: std::ops::RangeInclusive<i32>, leap: bool) -> impl Strategy<Value = String> {
        let seconds = if leap { 0..=60u32 } else { 0..=59u32 };
        (
            (years, 1..=12u32, 1..=31u32).prop_filter("a real date", |&(y, m, d)| {
                chrono::NaiveDate::from_ymd_opt(y, m, d).is_some()
            }),
            (0..=23u32, 0..=59u32, seconds),
            (0..=9usize, 0..1_000_000_000u32),
            prop::sample::select(vec!['T', 't', ' ']),
            prop_oneof![
                Just("Z".to_owned()),
                Just("z".to_owned()),
                Just("-00:00".to_owned()),
                (prop::sample::select(vec!['+', '-']), 0..=23u32, 0..=59u32)
                    .prop_map(|(sign, h, m)| format!("{sign}{h:02}:{m:02}")),
            ],
        )
            .prop_map(|((y, mo, d), (h, mi, s), (digits, fraction), separator, zone)| {
                let fraction = if digits == 0 {
                    String::new()
                } else {
                    format!(".{:09}", fraction)[..=digits].to_owned()
                };
                format!("{y:04}-{mo:02}-{d:02}{separator}{h:02}:{mi:02}:{s:02}{fraction}{zone}")
            })
    }

    /// Characters an edit puts in: each can make or break some position of the layout.
    const EDITS: &[char] = &['0', '5', '9', ':', '-', '+', '.', 'T', 'Z', ' ', 'x'];

    /// Chrono's instant for a text, in our units (a leap second's nanos count past 1e9, as
    /// ours do).
    fn chrono_nanos(text: &str) -> i128 {
        let at = DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        i128::from(at.timestamp()) * SECOND + i128::from(at.timestamp_subsec_nanos())
    }

    /// An instant in the years 0000-9999, often a whole second, millisecond or microsecond
    /// so that every fraction length gets formatted.
    fn instant() -> impl Strategy<Value = i128> {
        prop_oneof![
            FIRST..=LAST,
            (FIRST / SECOND..=LAST / SECOND).prop_map(|s| s * SECOND),
            (FIRST / 1_000_000..=LAST / 1_000_000).prop_map(|ms| ms * 1_000_000),
            (FIRST / 1_000..=LAST / 1_000).prop_map(|us| us * 1_000),
        ]
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(nanos in instant()) {
            let text = format_rfc3339(EpochNanos(nanos));
            prop_assert_eq!(parse_rfc3339(&text), Ok(EpochNanos(nanos)), "{}", text);
        }

        #[test]
        fn format_agrees_with_chrono(nanos in instant()) {
            let at = DateTime::<Utc>::from_timestamp(
                nanos.div_euclid(SECOND) as i64,
                nanos.rem_euclid(SECOND) as u32,
            ).unwrap();
            prop_assert_eq!(
                format_rfc3339(EpochNanos(nanos)),
                at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
            );
        }

        #[test]
        fn parse_agrees_with_chrono(text in timestamp(0..=9999, true)) {
            prop_assert_eq!(parse_rfc3339(&text), Ok(EpochNanos(chrono_nanos(&text))), "{}", text);
        }

        // Chrono orders a leap second before the next minute, while ours is that minute's
        // second 00, so leap seconds stay out; narrow years make offsets reorder often.
        #[test]
        fn parsed_order_agrees_with_chrono(
            a in timestamp(2025..=2026, false),
            b in timestamp(2025..=2026, false),
        ) {
            let chrono = |text: &str| DateTime::<FixedOffset>::parse_from_rfc3339(text).unwrap();
            prop_assert_eq!(
                ok(&a).cmp(&ok(&b)),
                chrono(&a).cmp(&chrono(&b)),
                "{} vs {}", a, b
            );
        }

        // One edit away from valid: ours and chrono accept the same texts as the same
        // instants, except that chrono also accepts more than 9 fractional digits.
        #[test]
        fn parse_of_edited_texts_agrees_with_chrono(
            text in timestamp(0..=9999, true),
            at in any::<prop::sample::Index>(),
            edit in prop::option::of(prop::sample::select(EDITS)),
        ) {
            let mut chars: Vec<char> = text.chars().collect();
            let i = at.index(chars.len());
            match edit {
                None => {
                    chars.remove(i);
                }
                Some(c) => chars[i] = c,
            }
            let edited: String = chars.into_iter().collect();
            match (parse_rfc3339(&edited), DateTime::parse_from_rfc3339(&edited)) {
                (Ok(ours), Ok(_)) => prop_assert_eq!(ours.0, chrono_nanos(&edited), "{}", edited),
                (Err(_), Err(_)) | (Err(Rfc3339Error::FractionTooLong { .. }), Ok(_)) => {}
                (ours, chrono) => prop_assert!(false, "{:?}: ours {:?}, chrono {:?}", edited, ours, chrono),
            }
        }
    }
}
