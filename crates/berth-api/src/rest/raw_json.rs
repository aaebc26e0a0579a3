//! [`RawJson`]: a JSON value of a body kept as the client's text.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON value kept as text, exactly as the client sent it: the placement fields of create
/// bodies (`resources`, `scheduling_strategy`, `label_selector`, …).
///
/// Why text and not a [`Value`]: the head reads these fields once, into the typed request
/// document (`berth_api::spec`, the request file's parser), and otherwise only echoes them
/// (the object's `spec`, its durable record). A `Value` tree made them parsed twice (body, then
/// the document printed and parsed again) and cost a B-tree node of about 640 bytes per map in
/// every copy of every actor; the text of `{"CPU": 1}` is ten bytes.
///
/// Serializes as the JSON value itself (not a string); reads from JSON text or a [`Value`]
/// (serde_json's own deserializers: the value is written back as compact text).
#[derive(Clone)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The value as a tree (for code that inspects it: the dashboard, tests).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.get()).expect("RawJson holds valid JSON")
    }
}

impl From<Value> for RawJson {
    fn from(value: Value) -> RawJson {
        let text = serde_json::to_string(&value).expect("a JSON value serializes");
        RawJson(RawValue::from_string(text).expect("serde_json printed valid JSON"))
    }
}

impl Default for RawJson {
    /// `null`, as [`Value`]'s default.
    fn default() -> RawJson {
        RawJson::from(Value::Null)
    }
}

impl PartialEq for RawJson {
    /// Equal when the values are, whatever the spacing of their texts.
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get() || self.to_value() == other.to_value()
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawJson, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(RawJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_is_kept_as_sent_and_written_back_as_the_value_itself() {
        #[derive(Deserialize, Serialize)]
        struct Body {
            resources: RawJson,
        }
        let body: Body =
            serde_json::from_str(r#"{"resources": {"CPU": 1, "GPU": "0.5"}}"#).unwrap();
        assert_eq!(body.resources.get(), r#"{"CPU": 1, "GPU": "0.5"}"#);
        assert_eq!(body.resources.to_value(), json!({"CPU": 1, "GPU": "0.5"}));
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"resources":{"CPU": 1, "GPU": "0.5"}}"#
        );
        assert_eq!(body.resources, RawJson::from(json!({"GPU": "0.5", "CPU": 1})));
        assert_ne!(body.resources, RawJson::from(json!({"CPU": 2})));
    }

    #[test]
    fn a_value_tree_gives_its_compact_text() {
        let raw = serde_json::from_value::<RawJson>(json!({"CPU": 1, "GPU": "0.5"})).unwrap();
        assert_eq!(raw.get(), r#"{"CPU":1,"GPU":"0.5"}"#);
    }
}
