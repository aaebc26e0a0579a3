//! Refusing JSON objects that name a key twice. serde (and so every body type here) keeps the
//! last of two equal keys without a word: `{"labels": {"app": "a", "app": "b"}}` would be taken
//! as `app=b`. One scan of the text, before anything is done with it, finds every such key in
//! any object at any depth (batch items and placement fields included) and names its path.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

/// The path (`labels.app`, `items.3.env.PATH`) of the first key given twice in `bytes`, a valid
/// JSON text; `None` when every object's keys are distinct (or the text is not JSON: its parse
/// says why elsewhere).
pub(crate) fn first_repeated_key(bytes: &[u8]) -> Option<String> {
    let mut path = Vec::new();
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let _ = Scan { path: &mut path, found: &mut found }.deserialize(&mut de);
    found
}

/// Walks one JSON value; records the first repeated key's path in `found` and stops.
struct Scan<'a> {
    path: &'a mut Vec<String>,
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// What stops the scan once a repeated key is found.
const FOUND: &str = "repeated key";

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                self.path.push(key);
                *self.found = Some(self.path.join("."));
                return Err(A::Error::custom(FOUND));
            }
            self.path.push(key);
            map.next_value_seed(Scan { path: self.path, found: self.found })?;
            self.path.pop();
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            self.path.push(index.to_string());
            let more = seq.next_element_seed(Scan { path: self.path, found: self.found })?;
            self.path.pop();
            if more.is_none() {
                return Ok(());
            }
            index += 1;
        }
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

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(first_repeated_key(text.as_bytes()).as_deref(), expected, "{text}");
        }
        // Escapes spell the same key: found all the same.
        assert_eq!(first_repeated_key(br#"{"a": 1, "\u0061": 2}"#).as_deref(), Some("a"));
    }
}
