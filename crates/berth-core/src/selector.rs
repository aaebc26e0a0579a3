//! Label selectors and tolerations: `key → expression`, in seed 003's string grammar.
//!
//! An expression is one or more comma-separated conditions, all of which must hold:
//!
//! | text | holds when the node's value of the key … |
//! | --- | --- |
//! | `value` (also empty) | equals `value` |
//! | `!value` | differs from `value`, or the key is absent |
//! | `in(v1,v2,…)` | is one of the values |
//! | `!in(v1,v2,…)` | is none of them, or the key is absent |
//! | `exists()` | is present |
//! | `!exists()` | is absent |
//!
//! Operators are case-insensitive; spaces after commas are allowed. A selector holds on a node
//! when every key's expression holds. Tolerations use the same grammar: a taint `k=v` is
//! tolerated when the tolerations have key `k` and its expression holds for `v`.

use std::collections::BTreeMap;
use std::fmt;

use thiserror::Error;

use crate::labels::{is_valid_name, validate_key, LabelError};

/// One condition on a label's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    /// The value equals this.
    Equal(String),
    /// The value differs from this, or the key is absent.
    NotEqual(String),
    /// The value is one of these.
    In(Vec<String>),
    /// The value is none of these, or the key is absent.
    NotIn(Vec<String>),
    /// The key is present.
    Exists,
    /// The key is absent.
    DoesNotExist,
}

impl Condition {
    /// True when a label whose value is `value` (`None`: absent) meets the condition.
    pub fn holds(&self, value: Option<&str>) -> bool {
        match self {
            Condition::Equal(v) => value == Some(v.as_str()),
            Condition::NotEqual(v) => value != Some(v.as_str()),
            Condition::In(vs) => value.is_some_and(|value| vs.iter().any(|v| v == value)),
            Condition::NotIn(vs) => !value.is_some_and(|value| vs.iter().any(|v| v == value)),
            Condition::Exists => value.is_some(),
            Condition::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Condition {
    /// The canonical text: `in(a,b)`, `!exists()`, `v`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Equal(v) => f.write_str(v),
            Condition::NotEqual(v) => write!(f, "!{v}"),
            Condition::In(vs) => write!(f, "in({})", vs.join(",")),
            Condition::NotIn(vs) => write!(f, "!in({})", vs.join(",")),
            Condition::Exists => f.write_str("exists()"),
            Condition::DoesNotExist => f.write_str("!exists()"),
        }
    }
}

/// An expression that could not be read, with the key and the reason.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SelectorError {
    /// The key breaks the label-key syntax.
    #[error(transparent)]
    Key(#[from] LabelError),
    /// The expression breaks the grammar.
    #[error("{key:?}: {expression:?} is invalid: {rule}")]
    Expression {
        /// The key.
        key: String,
        /// The expression as given.
        expression: String,
        /// What is wrong.
        rule: String,
    },
}

/// Parses one expression (`exists(),!in(a,b)`) into its conditions.
pub fn parse_expression(key: &str, text: &str) -> Result<Vec<Condition>, SelectorError> {
    let fail = |rule: String| SelectorError::Expression {
        key: key.to_string(),
        expression: text.to_string(),
        rule,
    };
    if text.trim().is_empty() {
        return Ok(vec![Condition::Equal(String::new())]);
    }
    let mut conditions = Vec::new();
    for part in split_top_level(text).map_err(fail)? {
        conditions.push(parse_condition(part.trim()).map_err(fail)?);
    }
    Ok(conditions)
}

/// Splits at commas outside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1).ok_or("a ')' without its '('")?;
            }
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err("a '(' is not closed with ')'".to_string());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn parse_condition(text: &str) -> Result<Condition, String> {
    if text.is_empty() {
        return Err("an empty condition between commas".to_string());
    }
    let (negated, body) = match text.strip_prefix('!') {
        Some(rest) if rest.starts_with('!') => return Err("more than one '!'".to_string()),
        Some(rest) => (true, rest.trim_start()),
        None => (false, text),
    };
    let Some(open) = body.find('(') else {
        // A plain value: equal / not equal.
        check_value(body)?;
        return Ok(if negated {
            Condition::NotEqual(body.to_string())
        } else {
            Condition::Equal(body.to_string())
        });
    };
    let operator = body[..open].trim().to_ascii_lowercase();
    let inner = body[open + 1..]
        .strip_suffix(')')
        .ok_or_else(|| format!("text after the closing ')' of {operator}(…)"))?;
    if inner.contains('(') || inner.contains(')') {
        return Err("parentheses inside parentheses".to_string());
    }
    match operator.as_str() {
        "in" => {
            let values = parse_values(inner)?;
            Ok(if negated { Condition::NotIn(values) } else { Condition::In(values) })
        }
        "exists" if inner.trim().is_empty() => {
            Ok(if negated { Condition::DoesNotExist } else { Condition::Exists })
        }
        "exists" => Err("exists() takes no values".to_string()),
        "" => Err("a '(' without an operator; use in(…) or exists()".to_string()),
        other => Err(format!("unknown operator {other:?}; use in(…) or exists()")),
    }
}

fn parse_values(inner: &str) -> Result<Vec<String>, String> {
    if inner.trim().is_empty() {
        return Err("in() needs at least one value".to_string());
    }
    let mut values = Vec::new();
    // Values repeated are kept once, in the order first given.
    let mut seen = std::collections::HashSet::new();
    for value in inner.split(',').map(str::trim) {
        if value.is_empty() {
            return Err("an empty value in in(…)".to_string());
        }
        check_value(value)?;
        if seen.insert(value) {
            values.push(value.to_string());
        }
    }
    Ok(values)
}

fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_valid_name(value) {
        Ok(())
    } else if value.len() > 63 {
        Err(format!("value {value:?} is longer than 63 characters"))
    } else {
        Err(format!(
            "value {value:?} is not a label value (letters, digits, '-', '_' and '.', \
             beginning and ending with a letter or digit)"
        ))
    }
}

/// `key → conditions`, all of which must hold. The empty selector matches every node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector(BTreeMap<String, Vec<Condition>>);

impl LabelSelector {
    /// The selector with no conditions (every node matches).
    pub const EMPTY: LabelSelector = LabelSelector(BTreeMap::new());

    /// Parses `key → expression` pairs (a JSON or YAML map), validating keys and expressions.
    pub fn parse<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<LabelSelector, SelectorError> {
        let mut map = BTreeMap::new();
        for (key, expression) in pairs {
            let key = key.as_ref();
            validate_key(key)?;
            map.insert(key.to_string(), parse_expression(key, expression.as_ref())?);
        }
        Ok(LabelSelector(map))
    }

    /// True when there are no conditions.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keys and their conditions, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[Condition])> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// True when a node whose label lookup is `label` meets every condition.
    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.iter().all(|(key, conditions)| {
            let value = label(key);
            conditions.iter().all(|c| c.holds(value))
        })
    }

    /// Each key with its canonical expression text, for display and round trips.
    pub fn expressions(&self) -> impl Iterator<Item = (&str, String)> {
        self.iter().map(|(key, conditions)| {
            let texts: Vec<String> = conditions.iter().map(Condition::to_string).collect();
            (key, texts.join(","))
        })
    }
}

impl fmt::Display for LabelSelector {
    /// `{region: in(us-west,us-east), gpu: exists()}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (key, expression)) in self.expressions().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key}: {expression}")?;
        }
        f.write_str("}")
    }
}

/// Tolerations of a request: the selector grammar, read against each taint of a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tolerations(pub LabelSelector);

impl Tolerations {
    /// Parses `key → expression` pairs.
    pub fn parse<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Tolerations, SelectorError> {
        LabelSelector::parse(pairs).map(Tolerations)
    }

    /// True when the taint `key=value` is tolerated: a toleration of that key holds for it.
    pub fn tolerates(&self, key: &str, value: &str) -> bool {
        self.0 .0.get(key).is_some_and(|conditions| conditions.iter().all(|c| c.holds(Some(value))))
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Tolerations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use Condition::*;

    fn s(v: &str) -> String {
        v.to_string()
    }

    #[test]
    fn grammar_accepts_every_operator() {
        let cases: Vec<(&str, Vec<Condition>)> = vec![
            ("us-west", vec![Equal(s("us-west"))]),
            ("", vec![Equal(s(""))]),
            ("!us-west", vec![NotEqual(s("us-west"))]),
            ("in(a,b)", vec![In(vec![s("a"), s("b")])]),
            ("IN(a, b)", vec![In(vec![s("a"), s("b")])]),
            ("In( a , b )", vec![In(vec![s("a"), s("b")])]),
            ("!in(a)", vec![NotIn(vec![s("a")])]),
            ("!IN(a,a)", vec![NotIn(vec![s("a")])]),
            ("exists()", vec![Exists]),
            ("EXISTS()", vec![Exists]),
            ("!exists()", vec![DoesNotExist]),
            ("exists(),!in(a,b)", vec![Exists, NotIn(vec![s("a"), s("b")])]),
            ("exists(), !in(a,b)", vec![Exists, NotIn(vec![s("a"), s("b")])]),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_expression("k", text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn grammar_rejects_malformed_expressions_with_the_reason() {
        let cases = [
            ("in()", "needs at least one value"),
            ("in(a,", "not closed"),
            ("in(a", "not closed"),
            ("in(a,)", "empty value"),
            ("!!in(a)", "more than one '!'"),
            ("in(a b)", "not a label value"),
            ("in(a/b)", "not a label value"),
            ("a b", "not a label value"),
            ("-a", "not a label value"),
            ("in(a))", "without its '('"),
            ("in(a)x", "text after the closing"),
            ("exists(a)", "takes no values"),
            ("has(a)", "unknown operator \"has\""),
            ("(a)", "without an operator"),
            ("in((a))", "inside parentheses"),
            ("exists(),", "empty condition"),
            ("a,,b", "empty condition"),
        ];
        for (text, rule) in cases {
            let err = parse_expression("region", text).unwrap_err().to_string();
            assert!(err.starts_with("\"region\": "), "names the key: {err}");
            assert!(err.contains(rule), "{text:?}: {err}");
        }
        let long = "v".repeat(64);
        let err = parse_expression("k", &format!("in({long})")).unwrap_err().to_string();
        assert!(err.contains("longer than 63"), "{err}");
        let err = LabelSelector::parse([("bad key", "a")]).unwrap_err().to_string();
        assert!(err.contains("\"bad key\""), "{err}");
    }

    #[test]
    fn conditions_match_present_and_absent_keys() {
        // (expression, value of the key or None for absent, expected)
        let cases = [
            ("a", Some("a"), true),
            ("a", Some("b"), false),
            ("a", None, false),
            ("!a", Some("a"), false),
            ("!a", Some("b"), true),
            ("!a", None, true),
            ("in(a,b)", Some("b"), true),
            ("in(a,b)", Some("c"), false),
            ("in(a,b)", None, false),
            ("!in(a,b)", Some("b"), false),
            ("!in(a,b)", Some("c"), true),
            ("!in(a,b)", None, true),
            ("exists()", Some(""), true),
            ("exists()", None, false),
            ("!exists()", Some("x"), false),
            ("!exists()", None, true),
            ("", Some(""), true),
            ("", None, false),
            ("exists(),!in(a,b)", Some("c"), true),
            ("exists(),!in(a,b)", Some("a"), false),
            ("exists(),!in(a,b)", None, false),
        ];
        for (text, value, expected) in cases {
            let selector = LabelSelector::parse([("k", text)]).unwrap();
            assert_eq!(selector.matches(|_| value), expected, "{text:?} on {value:?}");
        }
    }

    #[test]
    fn every_key_must_hold() {
        let selector = LabelSelector::parse([("region", "us"), ("gpu", "in(a100)")]).unwrap();
        let node = |key: &str| match key {
            "region" => Some("us"),
            "gpu" => Some("a100"),
            _ => None,
        };
        assert!(selector.matches(node));
        assert!(!selector.matches(|key| if key == "region" { Some("us") } else { None }));
        assert!(LabelSelector::default().matches(|_| None), "the empty selector matches");
    }

    #[test]
    fn tolerations_read_the_taint_value() {
        let tolerations = Tolerations::parse([
            ("gpu_node", "exists()"),
            ("gpu_type", "in(A100)"),
            ("team", "ml"),
        ])
        .unwrap();
        assert!(tolerations.tolerates("gpu_node", "true"));
        assert!(tolerations.tolerates("gpu_type", "A100"));
        assert!(!tolerations.tolerates("gpu_type", "V100"));
        assert!(tolerations.tolerates("team", "ml"));
        assert!(!tolerations.tolerates("memory-pressure", "high"), "no toleration for the key");
    }

    fn value() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,10}[a-zA-Z0-9])?"
    }

    fn values() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::btree_set(value(), 1..4).prop_map(|set| set.into_iter().collect())
    }

    fn condition() -> impl Strategy<Value = Condition> {
        prop_oneof![
            value().prop_map(Equal),
            value().prop_map(NotEqual),
            values().prop_map(In),
            values().prop_map(NotIn),
            Just(Exists),
            Just(DoesNotExist),
        ]
    }

    proptest! {
        /// Display then parse gives back the same conditions.
        #[test]
        fn display_parse_round_trip(conditions in proptest::collection::vec(condition(), 1..4)) {
            let text: Vec<String> = conditions.iter().map(Condition::to_string).collect();
            prop_assert_eq!(parse_expression("k", &text.join(",")), Ok(conditions));
        }

        /// Arbitrary text never panics the parser.
        #[test]
        fn parse_never_panics(text in "[a-z!(), .]{0,20}") {
            let _ = parse_expression("k", &text);
        }
    }
}
