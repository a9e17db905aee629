//! Line timestamps and scheduled campaign windows (SPEC.md, "Campaign windows").
//!
//! With line timestamps, line `n` carries `"timestamp": start + n * interval` (milliseconds
//! since the Unix epoch), so file mode's clock walks through the log. With scheduled
//! campaigns, a share of the campaigns get a window, `starts_at` / `ends_at`, drawn within
//! the span of the timestamps (the first line's to the last line's), so they open and
//! close while the job reads the log: usually both bounds, sometimes only one, now and then
//! `ends_at <= starts_at` (valid, never open). Each bound is written in its own form: UTC
//! (`Z`) or an offset (`+03:00`, `-05:30`, …), with 0, 3, 6 or 9 fractional digits, exact
//! to the nanosecond. Edits later in the log move windows: a moved start, an extended end,
//! a postponed window.
//!
//! Everything here draws from its own random streams, seeded from the spec's seed: the
//! marketplace itself (products, campaigns' criteria, updates, malformed records) is the
//! one the same spec writes without these options, and without them nothing is drawn.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use dataflows::instant::format_rfc3339_at_offset;
use dataflows::instant::{format_rfc3339, parse_rfc3339, EpochNanos};

/// The first line's timestamp unless told otherwise: Black Friday 2026, midnight UTC.
pub const DEFAULT_START_AT: &str = "2026-11-27T00:00:00Z";
/// [`DEFAULT_START_AT`] in milliseconds since the Unix epoch.
pub const DEFAULT_START_AT_MS: u64 = 1_795_737_600_000;
/// Milliseconds between two lines' timestamps unless told otherwise.
pub const DEFAULT_LINE_INTERVAL_MS: u64 = 1;
/// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z).
pub const MAX_RFC3339_MS: u64 = 253_402_300_799_999;

/// Share of the malformed lines that are valid records but for a bad `timestamp`
/// (negative, a string, a float), when lines carry timestamps.
pub const BAD_TIMESTAMP_SHARE: f64 = 0.15;
/// Share of the malformed campaign lines that are valid records but for a bad window
/// bound (no zone, a number, a date alone), with scheduled campaigns.
pub const BAD_WINDOW_SHARE: f64 = 0.3;
/// Share of the edits of a campaign with a window that also move the window.
pub const WINDOW_MOVE_SHARE: f64 = 0.5;

#[cfg(test)]
const NANOS_PER_SECOND: i128 = 1_000_000_000;
const NANOS_PER_MILLI: i128 = 1_000_000;

/// The zones bounds are written in besides `Z`, in minutes east of UTC.
const OFFSETS: [i32; 7] = [180, -330, 0, 345, -480, 540, -210];

/// `--start-at`: an RFC 3339 instant with a zone, as milliseconds since the Unix epoch; it
/// must be a whole millisecond, from 1970 on.
pub fn parse_start_at_ms(text: &str) -> Result<u64, String> {
    let at = parse_rfc3339(text).map_err(|error| format!("not an RFC 3339 timestamp with a zone: {error}"))?;
    if at.0 < 0 {
        return Err("must not be before 1970-01-01T00:00:00Z (timestamps are non-negative)".to_owned());
    }
    if at.0 % NANOS_PER_MILLI != 0 {
        return Err("must be a whole millisecond (timestamps are milliseconds)".to_owned());
    }
    u64::try_from(at.0 / NANOS_PER_MILLI).map_err(|_| "out of range".to_owned())
}

/// A share in `[0, 1]`, as `--scheduled-campaigns` takes it.
pub fn parse_share(text: &str) -> Result<f64, String> {
    let share: f64 = text.trim().parse().map_err(|_| format!("not a number: {text:?}"))?;
    if (0.0..=1.0).contains(&share) {
        Ok(share)
    } else {
        Err(format!("{share} is not a share between 0 and 1"))
    }
}

/// The timestamps of the lines: line `n` gets `start_ms + n * interval_ms`.
pub(crate) struct LineClock {
    start_ms: u64,
    interval_ms: u64,
    /// Draws which malformed lines get a bad timestamp, and which one.
    rng: ChaCha8Rng,
}

impl LineClock {
    pub(crate) fn new(seed: u64, start_ms: u64, interval_ms: u64) -> Self {
        LineClock {
            start_ms,
            interval_ms,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7157_a3b9_0c1d_e5f2),
        }
    }

    /// The timestamp of line `line` (0-based).
    pub(crate) fn at(&self, line: u64) -> u64 {
        self.start_ms.saturating_add(line.saturating_mul(self.interval_ms))
    }

    /// The envelope's tail for line `line`: `, "timestamp": …`.
    pub(crate) fn tail(&self, line: u64) -> String {
        format!(r#", "timestamp": {}"#, self.at(line))
    }

    /// Whether a malformed line should rather be a good record with a bad timestamp.
    pub(crate) fn spoils(&mut self) -> bool {
        self.rng.random_bool(BAD_TIMESTAMP_SHARE)
    }

    /// A tail with a bad timestamp for line `line`: negative, a string or a float.
    pub(crate) fn bad_tail(&mut self, line: u64) -> String {
        let at = self.at(line);
        match self.rng.random_range(0..3) {
            0 => format!(r#", "timestamp": -{}"#, at.max(1)),
            1 => format!(r#", "timestamp": "{at}""#),
            _ => format!(r#", "timestamp": {at}.5"#),
        }
    }
}

/// One bound of a window: the instant, and the text it is written as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    pub at: EpochNanos,
    pub text: String,
}

impl Bound {
    /// The bound at `at`, written in UTC.
    pub(crate) fn utc(at: EpochNanos) -> Self {
        Bound {
            at,
            text: format_rfc3339(at),
        }
    }
}

/// A campaign's window as the generator writes it; no bound for no window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WindowState {
    pub starts_at: Option<Bound>,
    pub ends_at: Option<Bound>,
}

impl WindowState {
    pub(crate) fn is_some(&self) -> bool {
        self.starts_at.is_some() || self.ends_at.is_some()
    }

    /// Adds the value's fields for the window to `fields`: `"starts_at": "…"` and
    /// `"ends_at": "…"`, each only when set.
    pub(crate) fn fields(&self, fields: &mut Vec<String>) {
        if let Some(start) = &self.starts_at {
            fields.push(format!(r#""starts_at": "{}""#, start.text));
        }
        if let Some(end) = &self.ends_at {
            fields.push(format!(r#""ends_at": "{}""#, end.text));
        }
    }
}

/// Draws the windows of scheduled campaigns within `first..=last` (the span of the lines'
/// timestamps, in nanoseconds).
pub(crate) struct Schedule {
    share: f64,
    first: i128,
    last: i128,
    rng: ChaCha8Rng,
}

impl Schedule {
    /// Windows for `share` of the campaigns, within the timestamps `first_ms..=last_ms`.
    pub(crate) fn new(seed: u64, share: f64, first_ms: u64, last_ms: u64) -> Self {
        Schedule {
            share,
            first: EpochNanos::from_millis(first_ms).0,
            last: EpochNanos::from_millis(last_ms.max(first_ms)).0,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5c4e_d01e_b1ac_f21d),
        }
    }

    /// The window of a campaign created at `now` (the timestamp of its line): none for
    /// `1 - share` of them.
    pub(crate) fn new_window(&mut self, now: EpochNanos) -> WindowState {
        if !self.rng.random_bool(self.share) {
            return WindowState::default();
        }
        let now = now.0.clamp(self.first, self.last);
        // Mostly ahead of its creation, as campaigns are planned; else already running.
        let start = if self.rng.random_bool(0.8) {
            self.uniform(now, self.last)
        } else {
            self.uniform(self.first, now)
        };
        match self.rng.random_range(0..100) {
            0..65 => {
                let end = self.uniform(start, self.last);
                let (start, end) = (
                    self.bound(start, self.first, self.last),
                    self.bound(end, start, self.last),
                );
                sorted(start, end)
            }
            65..77 => WindowState {
                starts_at: Some(self.bound(start, self.first, self.last)),
                ends_at: None,
            },
            77..89 => {
                let end = self.uniform(now, self.last);
                WindowState {
                    starts_at: None,
                    ends_at: Some(self.bound(end, self.first, self.last)),
                }
            }
            // `ends_at <= starts_at`: valid, never open; a quarter of them the same instant
            // (each bound in its own form).
            _ => {
                let (at, digits) = self.round(start, self.first, self.last);
                let starts_at = Bound {
                    at: EpochNanos(at),
                    text: self.render(at, digits),
                };
                let ends_at = if self.rng.random_bool(0.25) {
                    Bound {
                        at: EpochNanos(at),
                        text: self.render(at, digits),
                    }
                } else {
                    let end = self.uniform(self.first, at);
                    self.bound(end, self.first, at)
                };
                WindowState {
                    starts_at: Some(starts_at),
                    ends_at: Some(ends_at),
                }
            }
        }
    }

    /// Whether a malformed campaign record should rather be valid but for a bad bound.
    pub(crate) fn spoils(&mut self) -> bool {
        self.rng.random_bool(BAD_WINDOW_SHARE)
    }

    /// An edit of a campaign with a window, at `now`: now and then it moves the window, as
    /// a marketplace team does (a moved start, an extended end, a postponed window).
    /// Whether it moved.
    pub(crate) fn edit_window(&mut self, window: &mut WindowState, now: EpochNanos) -> bool {
        if !window.is_some() || !self.rng.random_bool(WINDOW_MOVE_SHARE) {
            return false;
        }
        let now = now.0.clamp(self.first, self.last);
        match (self.rng.random_range(0..3), &window.ends_at) {
            (1, Some(end)) => {
                // The campaign runs longer.
                let from = end.at.0;
                let to = self.uniform(from, self.last);
                window.ends_at = Some(self.bound(to, from, self.last));
            }
            (2, _) => {
                // Postponed: both bounds later by the same delay.
                let latest = [&window.starts_at, &window.ends_at]
                    .into_iter()
                    .flatten()
                    .map(|bound| bound.at.0)
                    .max()
                    .expect("a window has a bound");
                let delay = self.uniform(0, self.last - latest);
                for bound in [&mut window.starts_at, &mut window.ends_at].into_iter().flatten() {
                    let at = bound.at.0;
                    *bound = self.bound(at + delay, at, self.last);
                }
            }
            _ => {
                // A moved start: from now up to the end (or the log's), earlier or later
                // than it was.
                let to = window.ends_at.as_ref().map_or(self.last, |end| end.at.0.max(now));
                let start = self.uniform(now, to);
                window.starts_at = Some(self.bound(start, now, to));
            }
        }
        true
    }

    /// A bad value for a window bound (a text without a zone, a number, a date alone), and
    /// which bound it goes in.
    pub(crate) fn bad_bound(&mut self) -> (&'static str, String) {
        let at = self.uniform(self.first, self.last);
        let field = if self.rng.random_bool(0.5) {
            "starts_at"
        } else {
            "ends_at"
        };
        let utc = format_rfc3339_at_offset(EpochNanos(at), 0, 0);
        let value = match self.rng.random_range(0..3) {
            0 => format!(r#""{}""#, utc.trim_end_matches("+00:00")),
            1 => (at / NANOS_PER_MILLI).to_string(),
            _ => format!(r#""{}""#, &utc[..10]),
        };
        (field, value)
    }

    fn uniform(&mut self, low: i128, high: i128) -> i128 {
        if low >= high {
            low
        } else {
            self.rng.random_range(low..=high)
        }
    }

    /// A bound near `at` (within `low..=high`, which holds `at`), in a drawn form.
    fn bound(&mut self, at: i128, low: i128, high: i128) -> Bound {
        let (at, digits) = self.round(at, low, high);
        Bound {
            at: EpochNanos(at),
            text: self.render(at, digits),
        }
    }

    /// `at` cut to a drawn number of fractional digits (0, 3, 6 or 9) and kept within
    /// `low..=high` (more digits when no instant that coarse lies there), and the digits.
    fn round(&mut self, at: i128, low: i128, high: i128) -> (i128, u32) {
        let mut digits = 3 * self.rng.random_range(0..4u32);
        loop {
            let step = 10i128.pow(9 - digits);
            let down = at.div_euclid(step) * step;
            if down >= low {
                return (down, digits);
            }
            if down + step <= high {
                return (down + step, digits);
            }
            digits += 3;
        }
    }

    /// `at` in a drawn zone: half in UTC (`Z`), half at an offset.
    fn render(&mut self, at: i128, digits: u32) -> String {
        if self.rng.random_bool(0.5) {
            format_rfc3339(EpochNanos(at))
        } else {
            let offset = OFFSETS[self.rng.random_range(0..OFFSETS.len())];
            format_rfc3339_at_offset(EpochNanos(at), offset, digits)
        }
    }
}

/// Both bounds, the earlier first.
fn sorted(start: Bound, end: Bound) -> WindowState {
    let (starts_at, ends_at) = if end.at < start.at { (end, start) } else { (start, end) };
    WindowState {
        starts_at: Some(starts_at),
        ends_at: Some(ends_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i128, nanos: i128) -> EpochNanos {
        EpochNanos(seconds * NANOS_PER_SECOND + nanos)
    }

    #[test]
    fn offsets_render_the_local_time_exactly() {
        let black_friday = at(1_795_737_600, 0);
        for (instant, offset, digits, text) in [
            (black_friday, 180, 0, "2026-11-27T03:00:00+03:00"),
            (black_friday, -330, 0, "2026-11-26T18:30:00-05:30"),
            (black_friday, 0, 3, "2026-11-27T00:00:00.000+00:00"),
            (at(1_795_737_600, 250_000_000), 180, 3, "2026-11-27T03:00:00.250+03:00"),
            (at(1_795_737_600, 250_000_000), 180, 0, "2026-11-27T03:00:00.250+03:00"),
            (at(1_795_737_600, 1), 345, 6, "2026-11-27T05:45:00.000000001+05:45"),
            (
                at(1_795_737_600, 123_456_789),
                -480,
                9,
                "2026-11-26T16:00:00.123456789-08:00",
            ),
            (at(0, 0), 0, 0, "1970-01-01T00:00:00+00:00"),
            (at(-1, 0), 0, 0, "1969-12-31T23:59:59+00:00"),
            (at(951_782_400, 0), 0, 0, "2000-02-29T00:00:00+00:00"),
            (at(951_782_400, 0), -1, 0, "2000-02-28T23:59:00-00:01"),
            (
                at(253_402_300_799, 999_999_999),
                0,
                9,
                "9999-12-31T23:59:59.999999999+00:00",
            ),
        ] {
            assert_eq!(format_rfc3339_at_offset(instant, offset, digits), text);
        }
    }

    #[test]
    fn rendered_instants_parse_back_exactly() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for _ in 0..20_000 {
            let instant =
                EpochNanos(rng.random_range(-62_135_596_800 * NANOS_PER_SECOND..253_402_214_400 * NANOS_PER_SECOND));
            let offset = rng.random_range(-(24 * 60 - 1)..24 * 60);
            let digits = rng.random_range(0..=9);
            let text = format_rfc3339_at_offset(instant, offset, digits);
            assert_eq!(parse_rfc3339(&text), Ok(instant), "{text}");
            let utc = format_rfc3339(instant);
            assert_eq!(parse_rfc3339(&utc), Ok(instant), "{utc}");
        }
    }

    #[test]
    fn start_at_takes_whole_milliseconds_from_1970_on() {
        assert_eq!(parse_start_at_ms(DEFAULT_START_AT), Ok(DEFAULT_START_AT_MS));
        assert_eq!(
            parse_start_at_ms("2026-11-27T03:00:00.250+03:00"),
            Ok(DEFAULT_START_AT_MS + 250)
        );
        assert_eq!(parse_start_at_ms("1970-01-01T00:00:00Z"), Ok(0));
        for bad in [
            "1969-12-31T23:59:59Z",
            "2026-11-27T00:00:00.0001Z",
            "2026-11-27T00:00:00",
            "1795737600000",
        ] {
            assert!(parse_start_at_ms(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_share("0.25"), Ok(0.25));
        assert!(parse_share("1.5").is_err() && parse_share("-0.1").is_err() && parse_share("NaN").is_err());
    }

    #[test]
    fn rounding_keeps_bounds_within_the_span() {
        let mut schedule = Schedule::new(1, 1.0, DEFAULT_START_AT_MS + 400, DEFAULT_START_AT_MS + 900);
        for _ in 0..2_000 {
            let x = schedule.uniform(schedule.first, schedule.last);
            let (rounded, digits) = schedule.round(x, schedule.first, schedule.last);
            assert!((schedule.first..=schedule.last).contains(&rounded));
            // Within one second that holds no whole second: never 0 digits.
            assert!(digits >= 3);
        }
    }
}
