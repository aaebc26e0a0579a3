//! Labels, taints, selectors and tolerations: maps of label key to text, each entry checked
//! while parsing, and the texts of their errors.

use super::strategy::PairMap;
use berth_core::labels;
use berth_core::labels::{LabelError, Labels};
use berth_core::selector::{LabelSelector, SelectorError};
use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

/// A map of label key to text, in file order: node labels, taints, a label selector or
/// tolerations. Each entry is checked while parsing by `T`'s rule, key and value together at
/// the value, so that the error's path names the key (`nodes[0].labels."example.com/x"`) and
/// its line is the value's.
///
/// Values are strings, as in Kubernetes: `team: 42` and `gpu_node: true` are errors that ask
/// for quotes (`"42"`, `"true"`), so the text is always exactly what was written (YAML would
/// read `1.10` as the number 1.1).
///
/// Like [`ByResource`], such a map is always parsed directly inside a [`Located`] (see
/// [`field_path`]).
pub struct ByLabelKey<T>(pub(super) Vec<(String, String)>, pub(super) PhantomData<T>);

impl<T> Clone for ByLabelKey<T> {
    fn clone(&self) -> Self {
        ByLabelKey(self.0.clone(), PhantomData)
    }
}

impl<T> PartialEq for ByLabelKey<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<T> fmt::Debug for ByLabelKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.pairs()).finish()
    }
}

impl<T> Serialize for ByLabelKey<T> {
    /// A map of strings, in the order read.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        PairMap(&self.0).serialize(serializer)
    }
}

impl<T> ByLabelKey<T> {
    /// The entries, key and text, in the order read.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// What a [`ByLabelKey`] map holds, and the rule each entry follows.
pub trait LabelText {
    /// The map as the parser's "expected …" message describes it.
    const EXPECTING: &'static str;
    /// What one value is, for the "expected a string" message.
    const VALUE: &'static str;
    /// Checks one entry; the message names what is wrong (the path names the key).
    fn check(key: &str, value: &str) -> Result<(), String>;
}

/// `labels:` of a node: user labels; `berth.io/node-id` is Berth's.
#[derive(Debug)]
pub(super) struct UserLabel;

impl LabelText for UserLabel {
    const EXPECTING: &'static str = "a map of label key to value, such as {team: ml}";
    const VALUE: &'static str = "a label value";
    fn check(key: &str, value: &str) -> Result<(), String> {
        if key == labels::NODE_ID {
            return Err(LabelError::ReservedNodeId.to_string());
        }
        Labels::new().insert(key, value).map_err(|err| label_error_text("label", &err))
    }
}

/// `taints:` of a node. The `berth.io/` prefix is Berth's: rare-resource isolation sets
/// `berth.io/rare-<resource>` itself.
#[derive(Debug)]
pub(super) struct TaintText;

/// The taint keys Berth sets itself start with this.
pub(super) const RESERVED_TAINT_PREFIX: &str = labels::BERTH_PREFIX;

impl LabelText for TaintText {
    const EXPECTING: &'static str = "a map of taint key to value, such as {gpu_node: \"true\"}";
    const VALUE: &'static str = "a taint value";
    fn check(key: &str, value: &str) -> Result<(), String> {
        check_taint(key, value)?;
        if key.starts_with(RESERVED_TAINT_PREFIX) {
            return Err(format!(
                "taint keys beginning with {RESERVED_TAINT_PREFIX} are set by Berth (list a \
                 resource in rare_resources to taint the nodes that have it)"
            ));
        }
        Ok(())
    }
}

/// `label_selector`, `hard`, `soft` and `tolerations`: key → expression.
#[derive(Debug)]
pub struct Expression;

impl LabelText for Expression {
    const EXPECTING: &'static str =
        "a map of label key to expression, such as {region: \"in(us-west,us-east)\"}";
    const VALUE: &'static str = "an expression";
    fn check(key: &str, value: &str) -> Result<(), String> {
        LabelSelector::parse([(key, value)]).map(drop).map_err(|err| match err {
            // The path names the key already.
            SelectorError::Expression { expression, rule, .. } => {
                format!("expression {expression:?} is invalid: {rule}")
            }
            err => selector_error_text(&err),
        })
    }
}

/// A node's user labels.
pub(super) type LabelMap = ByLabelKey<UserLabel>;
/// A node's taints.
pub(super) type TaintMap = ByLabelKey<TaintText>;
/// A label selector or tolerations.
pub type ExpressionMap = ByLabelKey<Expression>;

impl<'de, T: LabelText> Deserialize<'de> for ByLabelKey<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ByLabelKey<T>, D::Error> {
        deserializer.deserialize_any(ByLabelKeyVisitor(PhantomData))
    }
}

pub(super) struct ByLabelKeyVisitor<T>(pub(super) PhantomData<T>);

impl<'de, T: LabelText> Visitor<'de> for ByLabelKeyVisitor<T> {
    type Value = ByLabelKey<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }
    fn visit_unit<E: de::Error>(self) -> Result<ByLabelKey<T>, E> {
        // `labels:` with nothing after it: none.
        Ok(ByLabelKey(Vec::new(), PhantomData))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ByLabelKey<T>, A::Error> {
        let mut entries: Vec<(String, String)> = Vec::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            // The YAML parser rejects duplicate keys already; this keeps the rule if its
            // policy ever changes.
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("{key:?} is given twice")));
            }
            let value = map.next_value_seed(LabelTextSeed::<T>(&key, PhantomData))?;
            entries.push((key, value));
        }
        entries.shrink_to_fit();
        Ok(ByLabelKey(entries, PhantomData))
    }
}

/// Reads the value of `key` in a [`ByLabelKey`] map: a string that, with its key, follows
/// `T`'s rule.
pub(super) struct LabelTextSeed<'k, T>(pub(super) &'k str, pub(super) PhantomData<T>);

impl<'de, T: LabelText> DeserializeSeed<'de> for LabelTextSeed<'_, T> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        let value = deserializer.deserialize_any(StringOnly(T::VALUE))?;
        T::check(self.0, &value).map_err(de::Error::custom)?;
        Ok(value)
    }
}

/// A string and nothing else; other scalars are asked to be quoted.
pub(super) struct StringOnly(pub(super) &'static str);

impl StringOnly {
    pub(super) fn quote<E: de::Error>(&self, found: &str, text: impl fmt::Display) -> E {
        E::custom(format!(
            "expected {} (a string), found the {found} {text}; write it in quotes: \"{text}\"",
            self.0
        ))
    }
}

impl<'de> Visitor<'de> for StringOnly {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (a string)", self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Err(self.quote("boolean", v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Err(self.quote("number", v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Err(self.quote("number", v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Err(self.quote("number", v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Err(E::custom(format!(
            "expected {} (a string), found nothing (null); write \"\" for the empty string",
            self.0
        )))
    }
}

/// A node fact that becomes a default label (`availability_zone: us-west1-a`): a label value.
#[derive(Debug)]
pub(super) struct FactValue(pub(super) String);

impl<'de> Deserialize<'de> for FactValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<FactValue, D::Error> {
        let value = deserializer.deserialize_any(StringOnly("a label value"))?;
        labels::validate_value("", &value).map_err(|err| match err {
            LabelError::Value { value, rule, .. } => {
                de::Error::custom(format!("label value {value:?} is invalid: {rule}"))
            }
            err => de::Error::custom(err),
        })?;
        Ok(FactValue(value))
    }
}

/// A [`LabelError`] about a label, taint or other `what`, without the word "label" where it
/// is not one: `taint key "bad key" is invalid: …`.
pub fn label_error_text(what: &str, err: &LabelError) -> String {
    match err {
        LabelError::Key { key, rule } => format!("{what} key {key:?} is invalid: {rule}"),
        LabelError::Value { key, value, rule } => {
            format!("{what} {key:?}: value {value:?} is invalid: {rule}")
        }
        other => other.to_string(),
    }
}

/// A [`SelectorError`] with the key named once: `key "region": expression "in()" is invalid:
/// in() needs at least one value`.
pub fn selector_error_text(err: &SelectorError) -> String {
    match err {
        SelectorError::Key(err) => label_error_text("label", err),
        SelectorError::Expression { key, expression, rule } => {
            format!("key {key:?}: expression {expression:?} is invalid: {rule}")
        }
    }
}

/// Checks a taint `key=value` (the label syntax).
pub fn check_taint(key: &str, value: &str) -> Result<(), String> {
    labels::validate_key(key)
        .and_then(|()| labels::validate_value(key, value))
        .map_err(|err| label_error_text("taint", &err))
}

#[cfg(test)]
mod tests {
    use crate::spec::parsed::ClusterFile;
    use crate::spec::test_support::*;
    use crate::spec::FileKind;

    #[test]
    fn label_values_are_strings_only() {
        for (value, found) in [("42", "number 42"), ("true", "boolean true"), ("~", "null")] {
            let err = parse_error::<ClusterFile>(&format!(
                "nodes:\n  - id: a\n    resources: {{}}\n    labels: {{team: {value}}}\n"
            ));
            assert_eq!(err.field, "nodes[0].labels.team", "{value}");
            assert!(err.message.contains(found), "{value}: {}", err.message);
        }
        let file: ClusterFile = source(
            FileKind::Cluster,
            "nodes:\n  - id: a\n    resources: {}\n    labels: {v: \"1.10\", e: \"\"}\n",
        )
        .parse()
        .unwrap();
        let labels = file.nodes[0].labels.as_ref().unwrap();
        assert_eq!(labels.value.pairs().collect::<Vec<_>>(), [("v", "1.10"), ("e", "")]);
    }
}
