//! Wall-clock time, for people only: timestamps in the history, events and broker states, the
//! epoch a boot's seed starts from, and the operator's own times (the end of a maintenance
//! pause, the hour of a scheduled step-down). Nothing the protocol measures uses it (that is
//! [`crate::clock::now`], which counts suspended time and never jumps); `clippy.toml` keeps every
//! other read of `SystemTime::now` out.

/// Days since 1970-01-01 to the civil (year, month 1-12, day 1-31), after H. Hinnant.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m as u32, d as u32)
}

/// The civil date's days since 1970-01-01, the inverse of [`civil_from_days`].
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let (yy, mm) = if m <= 2 {
        (y - 1, i64::from(m) + 9)
    } else {
        (y, i64::from(m) - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// RFC 3339 (UTC, milliseconds) without a date crate.
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    if !(0..=9999).contains(&y) {
        return format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            unix_ms % 1000
        );
    }
    // Digits into a template rather than `format!`: `GET /leader` writes one of these per
    // request, and the formatting machinery was a twentieth of the node's time there.
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, y as u64);
    put(5, 2, m as u64);
    put(8, 2, d as u64);
    put(11, 2, rem / 3600);
    put(14, 2, rem % 3600 / 60);
    put(17, 2, rem % 60);
    put(20, 3, unix_ms % 1000);
    out.iter().map(|&b| b as char).collect()
}

/// Parses an RFC 3339 timestamp (`2026-12-02T02:00:00Z`, fractions of a second and a
/// `+01:00`-style offset allowed) into unix milliseconds; the inverse of [`rfc3339`]. Years
/// 1970-9999 only: an operator's time is never before the epoch.
pub fn parse_rfc3339(s: &str) -> Result<u64, String> {
    let bad =
        |why: &str| format!("{s:?} is not an RFC 3339 time like 2026-12-02T02:00:00Z ({why})");
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad("expected YYYY-MM-DDTHH:MM:SS then Z or an offset"));
    }
    let num = |from: usize, to: usize| -> Result<i64, String> {
        s.get(from..to)
            .filter(|d| d.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| bad("a field is not a number"))
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, sec) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if y < 1970 || !(1..=12).contains(&mo) || d < 1 || d > days_in[(mo - 1) as usize] {
        return Err(bad("no such date"));
    }
    if h > 23 || mi > 59 || sec > 60 {
        return Err(bad("no such time of day"));
    }
    let mut rest = &s[19..];
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("a fraction needs digits"));
        }
        let first3: String = frac[..digits.min(3)]
            .chars()
            .chain("00".chars())
            .take(3)
            .collect();
        ms = first3.parse().map_err(|_| bad("bad fraction"))?;
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(&rest[..1], "+" | "-") && &rest[3..4] == ":" => {
            let oh: i64 = rest[1..3].parse().map_err(|_| bad("bad offset"))?;
            let om: i64 = rest[4..6].parse().map_err(|_| bad("bad offset"))?;
            if oh > 23 || om > 59 {
                return Err(bad("bad offset"));
            }
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (oh * 60 + om)
        }
        _ => return Err(bad("expected Z or an offset like +01:00 at the end")),
    };
    let days = days_from_civil(y, mo as u32, d as u32);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec.min(59) - offset_min * 60;
    u64::try_from(secs * 1000 + ms).map_err(|_| bad("before 1970"))
}

/// The one wall-clock read (display and boot epoch; never for timing).
#[allow(clippy::disallowed_methods)]
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(rfc3339(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
    }

    #[test]
    fn rfc3339_parses_what_it_formats_and_offsets() {
        for ms in [0, 1_709_210_096_789, 1_796_000_000_000, 951_782_400_000] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Ok(ms), "{}", rfc3339(ms));
        }
        assert_eq!(
            parse_rfc3339("2024-02-29T13:34:56+01:00"),
            Ok(1_709_210_096_000)
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T11:04:56.7-01:30"),
            Ok(1_709_210_096_700)
        );
        for bad in [
            "",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+0100",
            "1969-12-31T23:59:59Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T0a:00:00Z",
            "tomorrow",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad:?} parsed");
        }
    }
}
