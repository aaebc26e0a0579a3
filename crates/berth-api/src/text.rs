//! Text conventions shared by everything that shows Berth's values to people: the CLI, the
//! dashboard and the agent's log headers.

/// `secs` after the Unix epoch as UTC, `YYYY-MM-DD{between}HH:MM:SSZ` (`between` is `'T'` for
/// RFC 3339, `' '` for tables), in the proleptic Gregorian calendar.
pub fn utc(secs: u64, between: char) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rest = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}{between}{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// A whole number of seconds in the largest unit that divides it: `90 s`, `15 min`, `1 h`,
/// `2 d`.
pub fn duration_words(secs: u64) -> String {
    match secs {
        0 => "0 s".to_string(),
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// True for the resources counted in bytes (`memory`, `object_store_memory`).
fn is_bytes(resource: &str) -> bool {
    resource.ends_with("memory")
}

/// An amount for people: bytes of memory resources with a binary unit (`16Gi`, one decimal
/// at most), others (and text that is not a number) as written.
pub fn amount(resource: &str, text: &str) -> String {
    if !is_bytes(resource) {
        return text.to_string();
    }
    let Ok(bytes) = text.parse::<f64>() else {
        return text.to_string();
    };
    const UNITS: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        return text.to_string();
    }
    let shown = format!("{value:.1}");
    let shown = shown.strip_suffix(".0").unwrap_or(&shown);
    format!("{shown}{}", UNITS[unit])
}

/// The date of a day count since 1970-01-01 (Howard Hinnant's days-to-civil algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_their_largest_whole_unit() {
        for (secs, words) in [
            (0, "0 s"),
            (90, "90 s"),
            (900, "15 min"),
            (3600, "1 h"),
            (5400, "90 min"),
            (172_800, "2 d"),
        ] {
            assert_eq!(duration_words(secs), words);
        }
    }

    #[test]
    fn epoch_leap_days_and_far_dates() {
        assert_eq!(utc(0, 'T'), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400, 'T'), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_700_000_000, ' '), "2023-11-14 22:13:20Z");
        assert_eq!(utc(4_102_444_799, 'T'), "2099-12-31T23:59:59Z");
        // Never panics, whatever the input.
        assert!(utc(u64::MAX, 'T').ends_with('Z'));
    }
}

/// The first character of `text` that changes how text around it is shown without being
/// seen itself (Unicode's format characters, category Cf: bidirectional overrides such as
/// U+202E, zero-width spaces and joiners, the byte-order mark), or a control character. A name
/// holding one can pass for another on the dashboard and in the CLI's tables.
pub fn hidden_character(text: &str) -> Option<char> {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    text.chars().find(|c| c.is_control() || c.general_category() == GeneralCategory::Format)
}

/// The message refusing `c` in a name: "holds U+202E, a character that is not shown but
/// changes how the text around it is (…)".
pub fn hidden_character_rule(c: char) -> String {
    format!(
        "holds U+{:04X}, a character that is not shown but changes how the text around it \
         is (a control or format character, such as a right-to-left override); names may \
         not hold one",
        c as u32
    )
}

#[cfg(test)]
mod hidden_tests {
    use super::*;

    #[test]
    fn format_and_control_characters_are_found() {
        for (text, found) in [
            ("db", None),
            ("naïve-日本", None),
            ("a\u{202e}b", Some('\u{202e}')),
            ("\u{200b}x", Some('\u{200b}')),
            ("x\u{feff}", Some('\u{feff}')),
            ("tab\there", Some('\t')),
        ] {
            assert_eq!(hidden_character(text), found, "{text:?}");
        }
        assert!(hidden_character_rule('\u{202e}').contains("U+202E"));
    }
}
