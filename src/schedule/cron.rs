//! Cron expressions, read in UTC: the five fields of crontab(5) (minute, hour, day of month,
//! month, day of week) or six with seconds first, lists, ranges, steps, month and day names, and
//! the `@hourly`-style shorthands. No time zones: a firing is an instant every member names the
//! same way, and UTC has no hour that happens twice or not at all.

use std::fmt;

use crate::clock::wall::{civil_from_days, days_from_civil};

/// A parsed schedule.
#[derive(Clone, PartialEq, Eq)]
pub struct Cron {
    source: String,
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Day of month and day of week both restricted: either matches (crontab(5)).
    either_day: bool,
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cron({:?})", self.source)
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// How far ahead the next firing is looked for: an expression that names only 31 February
/// (or the like) never fires, and is refused.
const HORIZON_DAYS: i64 = 366 * 5;

impl Cron {
    pub fn parse(expr: &str) -> Result<Cron, String> {
        let source = expr.trim().to_string();
        let expanded = match source.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            s if s.starts_with('@') => {
                return Err(format!(
                    "{source:?}: unknown shorthand (@yearly, @monthly, @weekly, @daily, @hourly)"
                ))
            }
            _ => source.clone(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (sec, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                return Err(format!(
                    "{source:?} has {n} fields; a schedule has 5 (minute hour day-of-month month day-of-week) or 6 (seconds first), in UTC"
                ))
            }
        };
        let field = |name: &str, text: &str, lo: u32, hi: u32, names: &[&str]| {
            parse_field(text, lo, hi, names)
                .map_err(|why| format!("{source:?}: {name} field {text:?}: {why}"))
        };
        let seconds = field("seconds", sec, 0, 59, &[])?;
        let minutes = field("minute", rest[0], 0, 59, &[])?;
        let hours = field("hour", rest[1], 0, 23, &[])?;
        let days = field("day-of-month", rest[2], 1, 31, &[])?;
        let months = field("month", rest[3], 1, 12, &MONTHS)?;
        let mut weekdays = field("day-of-week", rest[4], 0, 7, &WEEKDAYS)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        let cron = Cron {
            either_day: !rest[2].starts_with('*') && !rest[4].starts_with('*'),
            source,
            seconds,
            minutes,
            hours,
            days,
            months,
            weekdays,
        };
        if cron.next_after(0).is_none() {
            return Err(format!(
                "{:?} never fires (no such day in any month)",
                cron.source
            ));
        }
        Ok(cron)
    }

    /// The first firing strictly after `t` (unix seconds), if one comes within five years.
    pub fn next_after(&self, t: u64) -> Option<u64> {
        let start = t.checked_add(1)?;
        let mut day = (start / 86_400) as i64;
        let mut from = start % 86_400;
        let last = day + HORIZON_DAYS;
        while day <= last {
            let (y, m, d) = civil_from_days(day);
            if self.months & (1 << m) == 0 {
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                day = days_from_civil(ny, nm, 1);
                from = 0;
                continue;
            }
            let weekday = (day + 4).rem_euclid(7) as u32;
            let dom = self.days & (1 << d) != 0;
            let dow = self.weekdays & (1 << weekday) != 0;
            let matches = if self.either_day {
                dom || dow
            } else {
                dom && dow
            };
            if matches {
                if let Some(s) = self.in_day(from) {
                    return Some(day as u64 * 86_400 + s);
                }
            }
            day += 1;
            from = 0;
        }
        None
    }

    /// The first second of a matching day at or after `from` seconds past midnight.
    fn in_day(&self, from: u64) -> Option<u64> {
        let (h0, m0, s0) = (from / 3600, from % 3600 / 60, from % 60);
        let mut h = next_bit(self.hours, h0)?;
        loop {
            let mfrom = if h == h0 { m0 } else { 0 };
            let mut minute = next_bit(self.minutes, mfrom);
            while let Some(mi) = minute {
                let sfrom = if h == h0 && mi == m0 { s0 } else { 0 };
                if let Some(s) = next_bit(self.seconds, sfrom) {
                    return Some(h * 3600 + mi * 60 + s);
                }
                // The hour's last minute has no second left: the next hour, not the next day.
                minute = next_bit(self.minutes, mi + 1);
            }
            h = next_bit(self.hours, h + 1)?;
        }
    }
}

/// The lowest set bit of `set` at or above `from`.
fn next_bit(set: u64, from: u64) -> Option<u64> {
    if from >= 64 {
        return None;
    }
    let masked = set & (!0u64 << from);
    (masked != 0).then(|| u64::from(masked.trailing_zeros()))
}

fn parse_field(text: &str, lo: u32, hi: u32, names: &[&str]) -> Result<u64, String> {
    let mut set = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("step {s:?} is not a number"))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (r, step)
            }
            None => (item, 1),
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, lo, hi, names)?, value(b, lo, hi, names)?)
        } else {
            let a = value(range, lo, hi, names)?;
            // `5/15`: from 5 to the end, every 15.
            (a, if step > 1 { hi } else { a })
        };
        if a > b {
            return Err(format!("the range {range:?} runs backwards"));
        }
        let mut v = a;
        while v <= b {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

fn value(text: &str, lo: u32, hi: u32, names: &[&str]) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = names.iter().position(|n| *n == lower) {
        // Month names count from 1, day names from 0 (Sunday).
        return Ok(i as u32 + u32::from(names.len() == 12));
    }
    let v: u32 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number{}", named(names)))?;
    if v < lo || v > hi {
        return Err(format!("{v} is outside {lo}-{hi}"));
    }
    Ok(v)
}

fn named(names: &[&str]) -> String {
    match names.first() {
        Some(first) => format!(" or a name ({first}, ...)"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::wall::parse_rfc3339;

    fn at(s: &str) -> u64 {
        parse_rfc3339(s).unwrap() / 1000
    }

    fn next(expr: &str, after: &str) -> String {
        let c = Cron::parse(expr).unwrap();
        crate::clock::wall::rfc3339(c.next_after(at(after)).unwrap() * 1000)
    }

    #[test]
    fn the_next_firing_of_common_schedules() {
        let t = "2026-12-07T03:04:05Z";
        assert_eq!(next("* * * * * *", t), "2026-12-07T03:04:06.000Z");
        assert_eq!(next("*/15 * * * * *", t), "2026-12-07T03:04:15.000Z");
        assert_eq!(next("* * * * *", t), "2026-12-07T03:05:00.000Z");
        assert_eq!(next("30 2 * * *", t), "2026-12-08T02:30:00.000Z");
        assert_eq!(next("@hourly", t), "2026-12-07T04:00:00.000Z");
        assert_eq!(next("@daily", t), "2026-12-08T00:00:00.000Z");
        assert_eq!(next("@monthly", t), "2027-01-01T00:00:00.000Z");
        assert_eq!(next("@yearly", t), "2027-01-01T00:00:00.000Z");
        // 7 December 2026 is a Monday.
        assert_eq!(next("0 9 * * mon-fri", t), "2026-12-07T09:00:00.000Z");
        assert_eq!(next("0 9 * * sat,SUN", t), "2026-12-12T09:00:00.000Z");
        assert_eq!(next("0 0 * * 7", t), "2026-12-13T00:00:00.000Z");
        assert_eq!(next("@weekly", t), "2026-12-13T00:00:00.000Z");
        assert_eq!(next("0 0 29 feb *", t), "2028-02-29T00:00:00.000Z");
        assert_eq!(next("5/20 * * * *", t), "2026-12-07T03:05:00.000Z");
        assert_eq!(next("0 0 1-3/2 jan *", t), "2027-01-01T00:00:00.000Z");
        // Day of month and day of week both given: either one.
        assert_eq!(next("0 0 15 * mon", t), "2026-12-14T00:00:00.000Z");
        // The end of a day, a month and a year roll over.
        assert_eq!(
            next("59 59 23 31 12 *", "2026-12-31T23:59:58Z"),
            "2026-12-31T23:59:59.000Z"
        );
        assert_eq!(
            next("0 0 0 * * *", "2026-12-31T23:59:59Z"),
            "2027-01-01T00:00:00.000Z"
        );
        // Strictly after.
        assert_eq!(
            next("* * * * *", "2026-12-07T03:05:00Z"),
            "2026-12-07T03:06:00.000Z"
        );
        // An hour's last minute with no second left goes on to the next hour, not the next
        // day (an every-minute schedule once skipped from XX:59:01 to midnight).
        assert_eq!(
            next("* * * * *", "2026-12-07T03:59:00Z"),
            "2026-12-07T04:00:00.000Z"
        );
        assert_eq!(
            next("*/7 * * * * *", "2026-12-07T03:59:57Z"),
            "2026-12-07T04:00:00.000Z"
        );
        assert_eq!(
            next("0 */20 * * * *", "2026-12-07T03:40:01Z"),
            "2026-12-07T04:00:00.000Z"
        );
        assert_eq!(
            next("30 59 * * * *", "2026-12-07T03:59:31Z"),
            "2026-12-07T04:59:30.000Z"
        );
    }

    /// Whether second `t` fires, read straight from the fields (the day's fields are all `*`
    /// in the expressions this is used with).
    fn matches_second(c: &Cron, t: u64) -> bool {
        let s = t % 86_400;
        let bit = |set: u64, v: u64| set & (1 << v) != 0;
        bit(c.hours, s / 3600) && bit(c.minutes, s % 3600 / 60) && bit(c.seconds, s % 60)
    }

    /// Every firing of a day, one by one, against a plain scan of its seconds.
    #[test]
    fn next_after_is_the_next_matching_second_for_a_whole_day() {
        let day = at("2026-12-07T00:00:00Z");
        for expr in [
            "* * * * *",
            "*/7 * * * * *",
            "0 */20 * * * *",
            "15 45 */5 * * *",
            "@hourly",
        ] {
            let c = Cron::parse(expr).unwrap();
            let mut t = day - 1;
            let mut expected = day;
            while t < day + 86_400 - 3_600 {
                let got = c.next_after(t).unwrap();
                while !matches_second(&c, expected) {
                    expected += 1;
                }
                assert_eq!(got, expected, "{expr} after {t}");
                t = got;
                expected = got + 1;
            }
        }
    }

    #[test]
    fn every_bad_expression_says_what_is_wrong() {
        for (expr, says) in [
            ("", "has 0 fields"),
            ("* * * *", "has 4 fields"),
            ("* * * * * * *", "has 7 fields"),
            ("60 * * * *", "minute field \"60\": 60 is outside 0-59"),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day-of-month field \"0\": 0 is outside 1-31"),
            ("* * * 13 *", "month field"),
            ("* * * * 8", "day-of-week field"),
            ("*/0 * * * *", "a step of 0"),
            ("*/x * * * *", "step \"x\" is not a number"),
            ("10-5 * * * *", "runs backwards"),
            (
                "* * * foo *",
                "\"foo\" is not a number or a name (jan, ...)",
            ),
            ("0 0 31 feb *", "never fires"),
            ("@often", "unknown shorthand"),
        ] {
            let err = Cron::parse(expr).unwrap_err();
            assert!(err.contains(says), "{expr:?}: {err}");
        }
        assert_eq!(Cron::parse(" @Daily ").unwrap().to_string(), "@Daily");
    }
}
