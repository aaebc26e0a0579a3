//! Fixed-point resource quantities.
//!
//! A [`Quantity`] counts in steps of 1/10000 of a unit, stored in an `i64`, so that adding and
//! subtracting resources is exact: 0.1 + 0.2 GPU is exactly 0.3 GPU, and releasing what was
//! reserved restores the ledger to the bit.
//!
//! Parsing is strict rather than rounding: a quantity that cannot be represented exactly (more than
//! four decimal places, or a non-zero quantity below 0.0001) is an error. Rounding silently would
//! let two requests of 0.33333 GPU each fit three times into one GPU in the user's arithmetic but
//! not in ours; an error tells the user at the edge instead.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

/// Units per whole resource unit: the resolution is 0.0001.
pub const UNITS_PER_WHOLE: i64 = 10_000;

/// Number of decimal places a quantity can carry.
const DECIMALS: u32 = 4;

/// The largest quantity accepted from input: 10^14 (about 88 TiB when the resource is bytes).
///
/// Capping input well below `i64::MAX / UNITS_PER_WHOLE` leaves head-room so that sums of a
/// node's totals and requests can never overflow inside the ledger.
pub const MAX_WHOLE: i64 = 100_000_000_000_000;

/// A non-negative quantity of a resource, exact to 0.0001.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(i64);

/// Why a quantity was rejected. The caller adds the field name (`resources.GPU: …`).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum QuantityError {
    /// Not a decimal number.
    #[error("{0:?} is not a decimal number (expected e.g. 2, 0.5 or \"16Gi\")")]
    Malformed(String),
    /// Below zero.
    #[error("{0} is negative; amounts must be 0 or more")]
    Negative(String),
    /// NaN or infinite.
    #[error("{0} is not a finite number")]
    NotFinite(String),
    /// Non-zero but smaller than the resolution.
    #[error("{0} is below the resolution of 0.0001; the smallest non-zero amount is 0.0001")]
    BelowResolution(String),
    /// Would lose digits beyond the fourth decimal place.
    #[error("{0} has more than 4 decimal places; amounts are exact to 0.0001 and are not rounded")]
    TooPrecise(String),
    /// Larger than [`MAX_WHOLE`].
    #[error("{0} is larger than the maximum amount 100000000000000 (1e14)")]
    Overflow(String),
}

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity(0);
    /// One whole unit.
    pub const ONE: Quantity = Quantity(UNITS_PER_WHOLE);
    /// The largest quantity input may carry.
    pub const MAX: Quantity = Quantity(MAX_WHOLE * UNITS_PER_WHOLE);

    /// A quantity from raw units of 1/10000. Quantities are never negative: a negative
    /// argument is a programming error and panics (input goes through [`Quantity::parse`]).
    pub const fn from_units(units: i64) -> Quantity {
        assert!(units >= 0, "quantities are never negative");
        Quantity(units)
    }

    /// A quantity of `n` whole units. Callers pass quantities they control (tests, constants);
    /// input goes through [`Quantity::parse`] or [`Quantity::from_f64`].
    pub const fn from_whole(n: i64) -> Quantity {
        Quantity(n * UNITS_PER_WHOLE)
    }

    /// Raw units of 1/10000.
    pub const fn units(self) -> i64 {
        self.0
    }

    /// True when zero.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// True when a whole number of units (0, 1, 2, …).
    pub const fn is_whole(self) -> bool {
        self.0 % UNITS_PER_WHOLE == 0
    }

    /// The whole part, rounded down.
    pub const fn whole(self) -> i64 {
        self.0 / UNITS_PER_WHOLE
    }

    /// The nearest `f64`, for ratios and display; never fed back into the ledger.
    pub fn to_f64(self) -> f64 {
        self.0 as f64 / UNITS_PER_WHOLE as f64
    }

    /// `self - other`, or zero when `other` is larger.
    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity((self.0 - other.0).max(0))
    }

    /// `self + other`, or `None` on overflow.
    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        self.0.checked_add(other.0).map(Quantity)
    }

    /// `self - other`, or `None` when the result would be negative.
    pub fn checked_sub(self, other: Quantity) -> Option<Quantity> {
        (self.0 >= other.0).then(|| Quantity(self.0 - other.0))
    }

    /// Parses a decimal string: digits with an optional fraction of at most four places and an
    /// optional suffix, decimal (`k`, `M`, `G`, `T`, `P`) or binary (`Ki`, `Mi`, `Gi`, `Ti`,
    /// `Pi`), so that `memory: 16Gi` reads as 16 × 2^30 bytes. Surrounding spaces are ignored.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let trimmed = text.trim();
        let malformed = || QuantityError::Malformed(text.to_string());
        if trimmed.starts_with('-') {
            return Err(QuantityError::Negative(trimmed.to_string()));
        }
        let digits_end =
            trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
        let (number, suffix) = trimmed.split_at(digits_end);
        let multiplier: u128 = match suffix {
            "" => 1,
            "k" | "K" => 1_000,
            "M" => 1_000_000,
            "G" => 1_000_000_000,
            "T" => 1_000_000_000_000,
            "P" => 1_000_000_000_000_000,
            "Ki" => 1 << 10,
            "Mi" => 1 << 20,
            "Gi" => 1 << 30,
            "Ti" => 1 << 40,
            "Pi" => 1 << 50,
            _ => return Err(malformed()),
        };
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        let well_formed = !int_part.is_empty()
            && int_part.bytes().all(|b| b.is_ascii_digit())
            && frac_part.bytes().all(|b| b.is_ascii_digit())
            && !(number.contains('.') && frac_part.is_empty());
        if !well_formed {
            return Err(malformed());
        }
        // Leading zeros and trailing fractional zeros carry no value.
        let int_part = int_part.trim_start_matches('0');
        let frac_part = frac_part.trim_end_matches('0');
        let overflow = || QuantityError::Overflow(trimmed.to_string());
        let below = || QuantityError::BelowResolution(trimmed.to_string());
        let too_precise = || QuantityError::TooPrecise(trimmed.to_string());
        // Bounds that keep every product below in u128: 20 integer digits already exceed the
        // maximum; 30 fractional digits are beyond any suffix's reach (2^50 < 10^16).
        if int_part.len() > 20 {
            return Err(overflow());
        }
        // units = (int + num/den) × multiplier × 10^4, exactly, or an error. Size is checked
        // before precision: a number that is too large is reported as such.
        let units_per_whole = multiplier * UNITS_PER_WHOLE as u128;
        let int_value = digits_value(int_part);
        let int_units = int_value.checked_mul(units_per_whole).ok_or_else(overflow)?;
        if int_units > Quantity::MAX.0 as u128 {
            return Err(overflow());
        }
        if frac_part.len() > 30 {
            let tiny = int_part.is_empty() && frac_part.bytes().take(30).all(|b| b == b'0');
            return Err(if tiny { below() } else { too_precise() });
        }
        let frac_units = if frac_part.is_empty() {
            0
        } else {
            let (num, den) = reduce(digits_value(frac_part), 10u128.pow(frac_part.len() as u32));
            if !units_per_whole.is_multiple_of(den) {
                let is_below = int_value == 0
                    && num.checked_mul(units_per_whole).is_some_and(|scaled| scaled < den);
                return Err(if is_below { below() } else { too_precise() });
            }
            num.checked_mul(units_per_whole / den).ok_or_else(overflow)?
        };
        let units = int_units.checked_add(frac_units).ok_or_else(overflow)?;
        if units > Quantity::MAX.0 as u128 {
            return Err(overflow());
        }
        Ok(Quantity(units as i64))
    }

    /// Converts a JSON/YAML floating-point number. The shortest decimal that round-trips the
    /// `f64` is what the user wrote (`0.1` stays `0.1`), so it is parsed exactly as text.
    pub fn from_f64(value: f64) -> Result<Quantity, QuantityError> {
        if !value.is_finite() {
            return Err(QuantityError::NotFinite(value.to_string()));
        }
        if value == 0.0 {
            // Also -0.0, which prints as "-0".
            return Ok(Quantity::ZERO);
        }
        if value < 0.0 {
            return Err(QuantityError::Negative(value.to_string()));
        }
        // `Display` for f64 never uses exponent notation, so `parse` accepts its output.
        Quantity::parse(&value.to_string())
    }

    /// Converts a whole number from input.
    pub fn from_u64(value: u64) -> Result<Quantity, QuantityError> {
        if value > MAX_WHOLE as u64 {
            return Err(QuantityError::Overflow(value.to_string()));
        }
        Ok(Quantity::from_whole(value as i64))
    }
}

/// The value of a string of at most 30 ASCII digits (the caller checks both).
fn digits_value(digits: &str) -> u128 {
    digits.bytes().fold(0, |value, b| value * 10 + u128::from(b - b'0'))
}

/// `num/den` in lowest terms.
fn reduce(num: u128, den: u128) -> (u128, u128) {
    let (mut a, mut b) = (num, den);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    (num / a, den / a)
}

impl Add for Quantity {
    type Output = Quantity;
    /// Saturating: a sum past `i64` stays at `i64::MAX` units, far above [`Quantity::MAX`]
    /// (the most any node can have), so it never fits anywhere and what asked for it is
    /// infeasible, never a wrapped small number that seems to fit.
    fn add(self, rhs: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Quantity {
    fn add_assign(&mut self, rhs: Quantity) {
        *self = *self + rhs;
    }
}

impl Sub for Quantity {
    type Output = Quantity;
    /// Exact subtraction; the ledger only subtracts what it checked is there. Should that
    /// ever be wrong, release builds floor at zero rather than go negative.
    fn sub(self, rhs: Quantity) -> Quantity {
        debug_assert!(self.0 >= rhs.0, "quantity underflow: {self} - {rhs}");
        Quantity((self.0 - rhs.0).max(0))
    }
}

impl SubAssign for Quantity {
    fn sub_assign(&mut self, rhs: Quantity) {
        *self = *self - rhs;
    }
}

impl fmt::Display for Quantity {
    /// The shortest exact decimal: `2`, `0.5`, `0.0001`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let whole = abs / UNITS_PER_WHOLE as u64;
        let frac = abs % UNITS_PER_WHOLE as u64;
        if frac == 0 {
            write!(f, "{sign}{whole}")
        } else {
            let digits = format!("{frac:0width$}", width = DECIMALS as usize);
            write!(f, "{sign}{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Quantity, QuantityError> {
        Quantity::parse(s)
    }
}

impl Serialize for Quantity {
    /// A JSON number: whole quantities as integers (exact for byte counts), others as the nearest
    /// `f64`, whose shortest form is the exact decimal.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_whole() {
            serializer.serialize_i64(self.whole())
        } else {
            serializer.serialize_f64(self.to_f64())
        }
    }
}

impl<'de> Deserialize<'de> for Quantity {
    /// Accepts a number (`0.5`, `4`) or a decimal string with an optional suffix (`"16Gi"`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Quantity, D::Error> {
        deserializer.deserialize_any(QuantityVisitor)
    }
}

struct QuantityVisitor;

impl Visitor<'_> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative amount: a number such as 0.5 or a string such as \"16Gi\"")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
        Quantity::from_u64(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
        if v < 0 {
            return Err(E::custom(QuantityError::Negative(v.to_string())));
        }
        Quantity::from_u64(v as u64).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
        Quantity::from_f64(v).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
        Quantity::parse(v).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_valid_quantities() {
        let cases = [
            ("0", 0),
            ("1", 10_000),
            ("0.5", 5_000),
            ("0.0001", 1),
            ("2.25", 22_500),
            ("007.50", 75_000),
            ("0.50000", 5_000),
            (" 3 ", 30_000),
            ("1k", 10_000_000),
            ("16Gi", 16 * (1 << 30) * 10_000),
            ("1.5Ki", 1536 * 10_000),
            ("100000000000000", MAX_WHOLE * 10_000),
        ];
        for (text, units) in cases {
            assert_eq!(Quantity::parse(text), Ok(Quantity::from_units(units)), "{text}");
        }
    }

    #[test]
    fn rejects_invalid_quantities_with_the_rule() {
        let cases: [(&str, &str); 12] = [
            ("-1", "negative"),
            ("-0.5", "negative"),
            ("", "not a decimal number"),
            ("abc", "not a decimal number"),
            ("1.", "not a decimal number"),
            (".5", "not a decimal number"),
            ("1.2.3", "not a decimal number"),
            ("2Xi", "not a decimal number"),
            ("0.00001", "below the resolution"),
            ("0.00005", "below the resolution"),
            ("1.23456", "more than 4 decimal places"),
            ("100000000000001", "larger than the maximum"),
        ];
        for (text, rule) in cases {
            let err = Quantity::parse(text).expect_err(text).to_string();
            assert!(err.contains(rule), "{text}: {err}");
        }
    }

    #[test]
    fn below_resolution_versus_too_precise() {
        assert!(matches!(Quantity::parse("0.00009"), Err(QuantityError::BelowResolution(_))));
        assert!(matches!(Quantity::parse("0.00011"), Err(QuantityError::TooPrecise(_))));
        assert_eq!(Quantity::parse("0.1Ki"), Ok(Quantity::parse("102.4").unwrap()));
        assert!(matches!(Quantity::parse("0.00001Ki"), Err(QuantityError::TooPrecise(_))));
        assert!(matches!(
            Quantity::parse("999999999999999999999999"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn floats_convert_exactly_or_fail() {
        assert_eq!(Quantity::from_f64(0.1), Ok(Quantity::from_units(1_000)));
        assert_eq!(Quantity::from_f64(0.3), Ok(Quantity::from_units(3_000)));
        assert_eq!(Quantity::from_f64(1e9), Ok(Quantity::from_whole(1_000_000_000)));
        assert!(matches!(Quantity::from_f64(f64::NAN), Err(QuantityError::NotFinite(_))));
        assert!(matches!(Quantity::from_f64(f64::INFINITY), Err(QuantityError::NotFinite(_))));
        assert!(matches!(Quantity::from_f64(-0.5), Err(QuantityError::Negative(_))));
        assert_eq!(Quantity::from_f64(-0.0), Ok(Quantity::ZERO));
        assert!(matches!(Quantity::from_f64(1e-30), Err(QuantityError::BelowResolution(_))));
        assert!(matches!(Quantity::from_f64(1e-5), Err(QuantityError::BelowResolution(_))));
        assert!(matches!(Quantity::from_f64(0.123456), Err(QuantityError::TooPrecise(_))));
        assert!(matches!(Quantity::from_f64(1e20), Err(QuantityError::Overflow(_))));
    }

    #[test]
    fn sums_are_exact() {
        let tenth = Quantity::parse("0.1").unwrap();
        let mut sum = Quantity::ZERO;
        for _ in 0..10 {
            sum += tenth;
        }
        assert_eq!(sum, Quantity::ONE);
        assert_eq!(Quantity::ONE.saturating_sub(Quantity::from_whole(2)), Quantity::ZERO);
        assert_eq!(Quantity::ONE.checked_sub(Quantity::from_whole(2)), None);
    }

    #[test]
    fn json_accepts_numbers_and_strings() {
        let q: Quantity = serde_json::from_str("0.25").unwrap();
        assert_eq!(q, Quantity::from_units(2_500));
        let q: Quantity = serde_json::from_str("\"4Gi\"").unwrap();
        assert_eq!(q.whole(), 4 << 30);
        let err = serde_json::from_str::<Quantity>("-3").unwrap_err().to_string();
        assert!(err.contains("negative"), "{err}");
        assert_eq!(serde_json::to_string(&Quantity::from_units(5_000)).unwrap(), "0.5");
        assert_eq!(serde_json::to_string(&Quantity::from_whole(3)).unwrap(), "3");
    }

    #[test]
    fn huge_and_tiny_inputs_with_suffixes_are_errors_not_wraparounds() {
        for text in [
            "99999999999999999999Pi",
            "20000000000000000000P",
            "20000000000000000000Pi",
            "12345678901234567890.123456789012345678901",
            "100000000000000.0001",
            "0.2P",
        ] {
            assert!(matches!(Quantity::parse(text), Err(QuantityError::Overflow(_))), "{text}");
        }
        assert!(matches!(
            Quantity::parse("0.0000000000000000000000000000000001Pi"),
            Err(QuantityError::BelowResolution(_))
        ));
        assert!(matches!(
            Quantity::parse("1.0000000000000000000000000000000001"),
            Err(QuantityError::TooPrecise(_))
        ));
        assert_eq!(Quantity::parse("0.0001Ki"), Ok(Quantity::parse("0.1024").unwrap()));
        assert_eq!(Quantity::parse("0.001k"), Ok(Quantity::ONE));
    }

    proptest! {
        /// Any digits with any suffix: never a panic, and an accepted value is within range
        /// and agrees with floating-point arithmetic.
        #[test]
        fn parse_is_total_and_exact(
            int in "[0-9]{1,25}",
            frac in proptest::option::of("[0-9]{1,35}"),
            suffix in proptest::sample::select(vec!["", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"]),
        ) {
            let text = match &frac {
                Some(frac) => format!("{int}.{frac}{suffix}"),
                None => format!("{int}{suffix}"),
            };
            if let Ok(q) = Quantity::parse(&text) {
                prop_assert!(q <= Quantity::MAX);
                let multiplier = match suffix {
                    "" => 1.0, "k" => 1e3, "M" => 1e6, "G" => 1e9, "T" => 1e12, "P" => 1e15,
                    "Ki" => 1024f64, "Mi" => 1024f64.powi(2), "Gi" => 1024f64.powi(3),
                    "Ti" => 1024f64.powi(4), _ => 1024f64.powi(5),
                };
                let number: f64 = text.trim_end_matches(char::is_alphabetic).parse().unwrap();
                let expected = number * multiplier;
                prop_assert!((q.to_f64() - expected).abs() <= expected * 1e-12 + 1e-4, "{text}: {q}");
            }
        }

        /// Sums saturate instead of wrapping: never below a term, and past `MAX` (so they fit
        /// nowhere) when two terms are at `MAX`.
        #[test]
        fn sums_never_wrap(units in proptest::collection::vec(0i64..=i64::MAX, 1..12)) {
            let sum = units.iter().fold(Quantity::ZERO, |sum, &u| sum + Quantity::from_units(u));
            for &u in &units {
                prop_assert!(sum >= Quantity::from_units(u), "{sum} < a term {u}");
            }
            let at_max = units.iter().filter(|&&u| u >= Quantity::MAX.units()).count();
            if at_max >= 2 {
                prop_assert!(sum > Quantity::MAX, "two terms at MAX sum to {sum}: it must never fit");
            }
        }

        /// Display then parse gives back the same quantity.
        #[test]
        fn display_parse_round_trip(units in 0i64..=Quantity::MAX.units()) {
            let q = Quantity::from_units(units);
            prop_assert_eq!(Quantity::parse(&q.to_string()), Ok(q));
        }

        /// JSON serialisation round-trips for quantities of up to 15 significant digits, which
        /// an f64 carries exactly (whole quantities are integers and always exact).
        #[test]
        fn json_round_trip(units in 0i64..1_000_000_000_000_000) {
            let q = Quantity::from_units(units);
            let text = serde_json::to_string(&q).unwrap();
            prop_assert_eq!(serde_json::from_str::<Quantity>(&text).unwrap(), q);
        }
    }
}
