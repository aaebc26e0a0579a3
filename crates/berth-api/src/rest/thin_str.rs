//! [`ThinStr`]: a string held by one pointer, for fields that are rarely set on records the head
//! keeps per object (each object's spec lives as long as the object).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thin_vec::ThinVec;

/// An immutable UTF-8 string in 8 bytes (`Option<ThinStr>` too), its length on the heap beside
/// its bytes: a `Box<str>` takes 16. Serialized as a JSON string.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct ThinStr(ThinVec<u8>);

impl ThinStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ever built from a `&str` (see `From`), so always UTF-8.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl From<&str> for ThinStr {
    fn from(text: &str) -> ThinStr {
        ThinStr(text.as_bytes().iter().copied().collect())
    }
}

impl From<String> for ThinStr {
    fn from(text: String) -> ThinStr {
        ThinStr::from(text.as_str())
    }
}

impl From<Box<str>> for ThinStr {
    fn from(text: Box<str>) -> ThinStr {
        ThinStr::from(&*text)
    }
}

impl std::ops::Deref for ThinStr {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for ThinStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ThinStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ThinStr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ThinStr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ThinStr, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(ThinStr::from(&*text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thin_string_is_one_pointer_and_round_trips_as_json() {
        assert_eq!(std::mem::size_of::<Option<ThinStr>>(), 8);
        let key = ThinStr::from("job-7 ü");
        assert_eq!(&*key, "job-7 ü");
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(json, r#""job-7 ü""#);
        assert_eq!(serde_json::from_str::<ThinStr>(&json).unwrap(), key);
        assert_eq!(serde_json::from_str::<ThinStr>(r#""a\nb""#).unwrap().as_str(), "a\nb");
        assert!(serde_json::from_str::<ThinStr>("7").is_err());
    }
}
