//! One scan of a JSON body before anything is done with it, refusing at their path:
//!
//! - a key given twice in one object: serde (and so every body type here) would keep the last
//!   without a word, `{"labels": {"app": "a", "app": "b"}}` taken as `app=b`;
//! - more entries than the head's [`Limits`] allow where a key holds counted things (`labels`,
//!   `bundles`, `label_selector`, `items`… at any depth, batch items included), and more values
//!   in one selector expression than allowed;
//! - a number written as not zero that reads as 0 (`1e-400` underflows a double): it would be
//!   taken as no amount at all.
//!
//! The scan stops at the first refusal, so a body of a million labels costs the first few
//! dozen: the cost of a refused request never grows with what it holds beyond the limit.

use std::collections::HashSet;
use std::fmt;

use berth_api::limits::{expression_values, Limit, Limits};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Why a body was refused: the field's path and the rule.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// `labels.app`, `items.3.env`; empty for the body as a whole.
    pub(crate) path: String,
    /// The rule it breaks, as a sentence.
    pub(crate) message: String,
}

/// The first key given twice or limit passed in `bytes`, a valid JSON text; `None` when the
/// body keeps every rule (or is not JSON: its parse says why elsewhere).
pub(crate) fn scan(bytes: &[u8], limits: &Limits) -> Option<Refusal> {
    let mut path = Vec::new();
    let (mut found, mut zeros) = (None, Vec::new());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let root =
        Scan { path: &mut path, found: &mut found, zeros: &mut zeros, limits, holds: Holds::Any };
    let _ = root.deserialize(&mut de);
    if found.is_none() && !zeros.is_empty() {
        found = underflow(bytes, &zeros);
    }
    found
}

/// The first number of `bytes` written as not zero that reads as 0, at its path: `zeros` are
/// the paths of the floating-point zeros the scan met, in text order, as the numbers with a
/// fraction or an exponent that read as 0 are found here.
fn underflow(bytes: &[u8], zeros: &[String]) -> Option<Refusal> {
    let mut zero = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // Past the string, escapes included.
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let token = std::str::from_utf8(&bytes[start..i]).unwrap_or_default();
                let float = token.contains(['.', 'e', 'E']);
                if float && token.parse::<f64>().is_ok_and(|v| v == 0.0) {
                    let mantissa = token.split(['e', 'E']).next().unwrap_or_default();
                    if mantissa.bytes().any(|b| matches!(b, b'1'..=b'9')) {
                        return Some(Refusal {
                            path: zeros.get(zero).cloned().unwrap_or_default(),
                            message: format!(
                                "{token} is not 0 but too small to be told from 0; give 0, or a \
                                 number of at least 0.0001"
                            ),
                        });
                    }
                    zero += 1;
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// What a value holds, by the key it is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holds {
    /// Nothing counted.
    Any,
    /// Entries counted by a limit; `expressions`: strings in it are selector expressions.
    Counted { limit: Limit, expressions: bool },
    /// A selector expression (a string), whose values are counted.
    Expression,
}

impl Holds {
    fn of_key(key: &str) -> Holds {
        match Limit::of_key(key) {
            Some(limit) => Holds::Counted { limit, expressions: Limit::holds_expressions(key) },
            None => Holds::Any,
        }
    }

    /// What each element of an array under `key` holds.
    fn of_element(key: Option<&str>) -> Holds {
        match key {
            // A bundle is a resource map; a bundle's selector is a selector.
            Some("bundles") => Holds::Counted { limit: Limit::Resources, expressions: false },
            Some("bundle_label_selector") => {
                Holds::Counted { limit: Limit::Expressions, expressions: true }
            }
            _ => Holds::Any,
        }
    }
}

/// Walks one JSON value; records the first refusal in `found` and stops.
struct Scan<'a> {
    path: &'a mut Vec<String>,
    found: &'a mut Option<Refusal>,
    /// The paths of the floating-point zeros met, in order (see [`underflow`]).
    zeros: &'a mut Vec<String>,
    limits: &'a Limits,
    holds: Holds,
}

/// What stops the scan once a refusal is found.
const FOUND: &str = "refused";

impl Scan<'_> {
    /// The scan of a value inside this one, which holds `holds`.
    fn child(&mut self, holds: Holds) -> Scan<'_> {
        Scan { path: self.path, found: self.found, zeros: self.zeros, limits: self.limits, holds }
    }

    fn refuse<E: serde::de::Error>(&mut self, message: String) -> E {
        *self.found = Some(Refusal { path: self.path.join("."), message });
        E::custom(FOUND)
    }

    /// Counts one more entry; refuses past the limit.
    fn count<E: serde::de::Error>(&mut self, entries: usize) -> Result<(), E> {
        if let Holds::Counted { limit, .. } = self.holds {
            if entries > self.limits.get(limit) {
                let field = self.path.last().cloned().unwrap_or_else(|| "the body".into());
                return Err(self.refuse(self.limits.refusal(limit, &field)));
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        let expressions = matches!(self.holds, Holds::Counted { expressions: true, .. });
        while let Some(key) = map.next_key::<String>()? {
            self.count(seen.len() + 1)?;
            if !seen.insert(key.clone()) {
                self.path.push(key.clone());
                return Err(
                    self.refuse(format!("the key {key:?} is given twice; give each key once"))
                );
            }
            let holds = if expressions { Holds::Expression } else { Holds::of_key(&key) };
            self.path.push(key);
            map.next_value_seed(self.child(holds))?;
            self.path.pop();
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let holds = Holds::of_element(self.path.last().map(String::as_str));
        let mut index = 0usize;
        loop {
            self.path.push(index.to_string());
            let more = seq.next_element_seed(self.child(holds))?;
            self.path.pop();
            if more.is_none() {
                return Ok(());
            }
            index += 1;
            self.count(index)?;
        }
    }

    fn visit_str<E: serde::de::Error>(mut self, text: &str) -> Result<(), E> {
        if self.holds == Holds::Expression {
            let values = expression_values(text);
            if values > self.limits.get(Limit::Values) {
                let field = self.path.last().cloned().unwrap_or_default();
                let field = format!("the expression of {field:?}");
                return Err(self.refuse(self.limits.refusal(Limit::Values, &field)));
            }
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, value: f64) -> Result<(), E> {
        if value == 0.0 {
            self.zeros.push(self.path.join("."));
        }
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_of_repeated(text: &str) -> Option<String> {
        scan(text.as_bytes(), &Limits::default())
            .filter(|r| r.message.contains("given twice"))
            .map(|r| r.path)
    }

    #[test]
    fn a_key_given_twice_is_found_with_its_path() {
        let cases: [(&str, Option<&str>); 7] = [
            (r#"{"command": "x", "labels": {"app": "a", "team": "b"}}"#, None),
            (r#"{"labels": {"app": "a", "app": "b"}}"#, Some("labels.app")),
            (r#"{"command": "x", "command": "y"}"#, Some("command")),
            (
                r#"{"items": [{"env": {}}, {"env": {"A": "1", "B": "2", "A": "3"}}]}"#,
                Some("items.1.env.A"),
            ),
            (
                r#"{"label_selector": {"zone": "in(a)", "zone": "in(b)"}}"#,
                Some("label_selector.zone"),
            ),
            (r#"[1, "two", null, true, 2.5, {"a": {"b": [{}]}}]"#, None),
            (r#"{"a": {"x": 1}, "b": {"x": 1}}"#, None),
        ];
        for (text, expected) in cases {
            assert_eq!(path_of_repeated(text).as_deref(), expected, "{text}");
        }
        // Escapes spell the same key: found all the same.
        assert_eq!(path_of_repeated(r#"{"a": 1, "\u0061": 2}"#).as_deref(), Some("a"));
    }

    #[test]
    fn counts_past_a_limit_are_refused_at_their_path() {
        let mut limits = Limits::default();
        for limit in Limit::ALL {
            limits.set(limit, 2);
        }
        let cases = [
            (r#"{"labels": {"a": "1", "b": "2", "c": "3"}}"#, "labels", "labels per object"),
            (r#"{"label_selector": {"z": "in(a,b,c)"}}"#, "label_selector.z", "values per"),
            (r#"{"bundles": [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}]}"#, "bundles", "bundles per"),
            (r#"{"bundles": [{"CPU": 1, "GPU": 1, "x": 1}]}"#, "bundles.0", "resources per"),
            (
                r#"{"bundle_label_selector": [{"a": "1", "b": "2", "c": "3"}]}"#,
                "bundle_label_selector.0",
                "expressions per selector",
            ),
            (
                r#"{"fallback_strategy": [{"label_selector": {"z": "!in(a,b,c)"}}]}"#,
                "fallback_strategy.0.label_selector.z",
                "values per expression",
            ),
            (r#"{"items": [{}, {}, {}]}"#, "items", "items per batch"),
            (
                r#"{"items": [{"env": {"A": "1", "B": "2", "C": "3"}}]}"#,
                "items.0.env",
                "environment",
            ),
            (
                r#"{"scheduling_strategy": {"expressions": [{"values": ["a", "b", "c"]}]}}"#,
                "scheduling_strategy.expressions.0.values",
                "values per expression",
            ),
            (r#"{"tolerations": {"a": "", "b": "", "c": ""}}"#, "tolerations", "tolerations per"),
        ];
        for (text, path, says) in cases {
            let refusal = scan(text.as_bytes(), &limits).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(refusal.path, path, "{text}");
            assert!(refusal.message.contains(says), "{text}: {}", refusal.message);
            assert!(refusal.message.contains("--limit"), "{}", refusal.message);
        }
        // At the limits: accepted.
        let within = r#"{"labels": {"a": "1", "b": "2"}, "label_selector": {"z": "in(a,b)"},
            "bundles": [{"CPU": 1, "GPU": 1}, {"CPU": 1}], "items": [{}, {}]}"#;
        assert_eq!(scan(within.as_bytes(), &limits), None);
    }

    #[test]
    fn a_number_that_reads_as_zero_but_is_not_is_refused_at_its_path() {
        let limits = Limits::default();
        let body = r#"{"name": "1e-400", "resources": {"CPU": 0.0, "GPU": -0e5, "x": 1e-400}}"#;
        let refusal = scan(body.as_bytes(), &limits).expect("refused");
        assert_eq!(refusal.path, "resources.x");
        assert!(refusal.message.starts_with("1e-400 is not 0"), "{}", refusal.message);
        let fine = r#"{"a": 0.0, "b": 0e10, "c": 1e-5, "d": [0.0, "2.5e-999"], "e": 0}"#;
        assert_eq!(scan(fine.as_bytes(), &limits), None);
        let escaped = r#"{"k\"1e-400": 0.0, "v": [1e-400]}"#;
        assert_eq!(scan(escaped.as_bytes(), &limits).map(|r| r.path).as_deref(), Some("v.0"));
    }

    #[test]
    fn a_huge_body_is_refused_after_the_limit_not_at_its_end() {
        // A million labels: the scan stops at the 65th, before reading the rest.
        let mut text = String::from(r#"{"labels": {"#);
        for i in 0..1_000_000 {
            text.push_str(&format!("\"k{i}\": \"v\","));
        }
        // Invalid JSON after the limit: had the scan gone on, it would fail there instead.
        text.push_str("!!!");
        let refusal = scan(text.as_bytes(), &Limits::default()).expect("refused");
        assert_eq!(refusal.path, "labels");
        assert!(refusal.message.contains("more than 64"), "{}", refusal.message);
    }
}
