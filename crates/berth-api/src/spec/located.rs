//! [`Located`]: a value with where it was written, and [`At`], that place.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_saphyr::{Location, Spanned};

/// Where a value was written in a YAML file: line and column, both from 1; zero when
/// unknown (a JSON body, a stored record, a value the program made). Eight bytes, so the typed
/// requests that the head keeps for every actor can carry it at little cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct At {
    line: u32,
    column: u32,
}

impl At {
    /// Nowhere known.
    pub const UNKNOWN: At = At { line: 0, column: 0 };

    /// The line, from 1; 0 when unknown.
    pub fn line(self) -> u64 {
        u64::from(self.line)
    }

    /// The column, from 1; 0 when unknown.
    pub fn column(self) -> u64 {
        u64::from(self.column)
    }
}

impl From<Location> for At {
    fn from(location: Location) -> At {
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        At { line: narrow(location.line()), column: narrow(location.column()) }
    }
}

/// A value and where it was written ([`At::UNKNOWN`] outside YAML files).
///
/// Read through serde-saphyr's `Spanned`, which learns the place from the YAML parser and
/// reads any other format's value plainly; written as the value alone, so a JSON body, a
/// stored record and the API's echo of a request have no trace of it.
#[derive(Clone, Default, PartialEq)]
pub struct Located<T> {
    /// The value.
    pub value: T,
    /// Where it was written (for a value reached through a YAML alias, where the alias is).
    pub referenced: At,
}

impl<T> Located<T> {
    /// `value`, written at `referenced`.
    pub fn new(value: T, referenced: At) -> Located<T> {
        Located { value, referenced }
    }

    /// `value`, written nowhere known (made by a program).
    pub fn unknown(value: T) -> Located<T> {
        Located { value, referenced: At::UNKNOWN }
    }
}

impl<T: fmt::Debug> fmt::Debug for Located<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Located<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Located<T>, D::Error> {
        let spanned = Spanned::<T>::deserialize(deserializer)?;
        Ok(Located { value: spanned.value, referenced: At::from(spanned.referenced) })
    }
}

impl<T: Serialize> Serialize for Located<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_gives_the_place_json_gives_none_and_writing_shows_the_value_alone() {
        #[derive(Deserialize, Serialize)]
        struct Doc {
            a: Located<u32>,
            b: Located<Vec<String>>,
        }
        let doc: Doc = serde_saphyr::from_str("a: 1\nb:\n  - x\n").unwrap();
        assert_eq!((doc.a.value, doc.a.referenced.line(), doc.a.referenced.column()), (1, 1, 4));
        assert_eq!(doc.b.referenced.line(), 3);
        let doc: Doc = serde_json::from_str(r#"{"a": 2, "b": ["y"]}"#).unwrap();
        assert_eq!((doc.a.value, doc.a.referenced), (2, At::UNKNOWN));
        assert_eq!(serde_json::to_string(&doc).unwrap(), r#"{"a":2,"b":["y"]}"#);
        assert_eq!(std::mem::size_of::<At>(), 8);
    }
}
