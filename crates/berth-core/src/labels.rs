//! Node labels: Kubernetes label syntax, label sets, the `k1=v1,k2=v2` list form, and the
//! default labels every node carries.
//!
//! Syntax (as in Kubernetes): a key is an optional prefix — a DNS subdomain of at most 253
//! characters — and `/`, then a name of 1 to 63 characters that begins and ends with a letter or
//! digit and has only letters, digits, `-`, `_` and `.` between. A value is empty or follows the
//! rule of a name. Taints use the same syntax for their keys and values.

use std::fmt;

use thiserror::Error;

/// The prefix of the labels Berth sets itself.
pub const BERTH_PREFIX: &str = "berth.io/";
/// The node's ID; set by Berth, never by users.
pub const NODE_ID: &str = "berth.io/node-id";
/// The accelerator model (`nvidia-h100`); empty on CPU-only nodes.
pub const ACCELERATOR_TYPE: &str = "berth.io/accelerator-type";
/// `spot` or `on-demand`.
pub const MARKET_TYPE: &str = "berth.io/market-type";
/// The node group (`head`, or the autoscaler's worker group).
pub const NODE_GROUP: &str = "berth.io/node-group";
/// The availability zone.
pub const AVAILABILITY_ZONE: &str = "berth.io/availability-zone";
/// The availability region.
pub const AVAILABILITY_REGION: &str = "berth.io/availability-region";

/// A label key or value that breaks the syntax, or a list that cannot be read.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum LabelError {
    /// A malformed key.
    #[error("label key {key:?} is invalid: {rule}")]
    Key {
        /// The key as given.
        key: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A malformed value.
    #[error("label {key:?}: value {value:?} is invalid: {rule}")]
    Value {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// An item of a `k1=v1,k2=v2` list without `=`.
    #[error("label list item {0:?} is not key=value")]
    NotKeyValue(String),
    /// A key given twice in one list.
    #[error("label key {0:?} is given twice")]
    Duplicate(String),
    /// A user label for `berth.io/node-id`.
    #[error("label key \"berth.io/node-id\" is set by Berth to the node's ID and cannot be given")]
    ReservedNodeId,
}

const NAME_RULE: &str = "a name is 1 to 63 characters of letters, digits, '-', '_' and '.', \
                         beginning and ending with a letter or digit";
const VALUE_RULE: &str = "a value is empty or 1 to 63 characters of letters, digits, '-', '_' \
                          and '.', beginning and ending with a letter or digit";
const PREFIX_RULE: &str = "a prefix is a DNS subdomain of at most 253 characters: lower-case \
                           letters, digits, '-' and '.', each dot-separated part beginning and \
                           ending with a letter or digit";

/// True when `text` is a valid name part (also the rule of a non-empty value).
pub fn is_valid_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= 253
        && prefix.split('.').all(|part| {
            let bytes = part.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= 63
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        })
}

/// Checks a label key.
pub fn validate_key(key: &str) -> Result<(), LabelError> {
    let bad = |rule| Err(LabelError::Key { key: key.to_string(), rule });
    match key.split_once('/') {
        Some((prefix, name)) => {
            if !is_valid_prefix(prefix) {
                return bad(PREFIX_RULE);
            }
            if name.contains('/') || !is_valid_name(name) {
                return bad(NAME_RULE);
            }
        }
        None if !is_valid_name(key) => return bad(NAME_RULE),
        None => {}
    }
    Ok(())
}

/// Checks a label value (of `key`, named in the error).
pub fn validate_value(key: &str, value: &str) -> Result<(), LabelError> {
    if value.is_empty() || is_valid_name(value) {
        Ok(())
    } else {
        Err(LabelError::Value { key: key.to_string(), value: value.to_string(), rule: VALUE_RULE })
    }
}

/// A validated set of labels, sorted by key.
///
/// A sorted vector of boxed strings: nodes carry five or six labels and actors one or two,
/// where a B-tree map allocates a 560-byte node for even one entry (most of what a placed
/// actor cost) and keeps 24-byte `String`s with spare capacity.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Vec<(Box<str>, Box<str>)>);

impl fmt::Debug for Labels {
    /// As a map, `{"k": "v"}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Labels {
    /// No labels.
    pub fn new() -> Labels {
        Labels::default()
    }

    /// Labels from pairs, each validated. A key given twice keeps the last value (as YAML and
    /// JSON maps do); [`Labels::parse_list`] is stricter.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Labels, LabelError> {
        let mut labels = Labels::new();
        for (key, value) in pairs {
            labels.insert(key.as_ref(), value.as_ref())?;
        }
        labels.0.shrink_to_fit();
        Ok(labels)
    }

    /// Parses the `--labels` form: `k1=v1,k2=v2`, spaces around items ignored, empty list
    /// allowed, each key at most once.
    pub fn parse_list(text: &str) -> Result<Labels, LabelError> {
        let mut labels = Labels::new();
        for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (key, value) =
                item.split_once('=').ok_or_else(|| LabelError::NotKeyValue(item.to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            if labels.get(key).is_some() {
                return Err(LabelError::Duplicate(key.to_string()));
            }
            labels.insert(key, value)?;
        }
        labels.0.shrink_to_fit();
        Ok(labels)
    }

    /// Sets `key` to `value` after validating both.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), LabelError> {
        validate_key(key)?;
        validate_value(key, value)?;
        self.set(key, value);
        Ok(())
    }

    /// Sets `key` to `value` (both valid).
    fn set(&mut self, key: &str, value: &str) {
        match self.position(key) {
            Ok(i) => self.0[i].1 = value.into(),
            Err(i) => self.0.insert(i, (key.into(), value.into())),
        }
    }

    /// Where `key` is, or where it would go: a forward scan, as a B-tree node searches, since
    /// sets are small and the keys read most (`berth.io/accelerator-type` for every node a
    /// GPU decision scores) sort first.
    fn position(&self, key: &str) -> Result<usize, usize> {
        for (i, (k, _)) in self.0.iter().enumerate() {
            match (**k).cmp(key) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => return Ok(i),
                std::cmp::Ordering::Greater => return Err(i),
            }
        }
        Err(self.0.len())
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.position(key).ok()?;
        Some(self.0.remove(i).1.into_string())
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.position(key).ok().map(|i| &*self.0[i].1)
    }

    /// Labels in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `self` with every label of `over` set on top (the `--labels` flag over `--labels-file`).
    pub fn merged_with(mut self, over: &Labels) -> Labels {
        for (key, value) in over.iter() {
            self.set(key, value);
        }
        // Kept as long as the node or actor is: no spare capacity.
        self.0.shrink_to_fit();
        self
    }
}

impl fmt::Display for Labels {
    /// The `--labels` form, keys sorted: `k1=v1,k2=v2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (key, value)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{key}={value}")?;
        }
        Ok(())
    }
}

/// The node facts that become default labels. Only `accelerator_type` is always set (empty on a
/// CPU-only node); the others are set when known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The accelerator model, if the node has accelerators.
    pub accelerator_type: Option<String>,
    /// `spot` or `on-demand`.
    pub market_type: Option<String>,
    /// The node group.
    pub node_group: Option<String>,
    /// The availability zone.
    pub availability_zone: Option<String>,
    /// The availability region.
    pub availability_region: Option<String>,
}

/// The fact keys nodes are registered with (`--facts`, the agent protocol, node types).
pub const FACT_KEYS: [&str; 5] =
    ["accelerator-type", "market-type", "node-group", "availability-zone", "region"];

impl NodeFacts {
    /// Sets the fact `key` (one of [`FACT_KEYS`]; `availability-region` is `region`'s long
    /// name) to `value`; an empty value leaves it unset. `Err` names the rule for an unknown key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let slot = match key {
            "accelerator-type" => &mut self.accelerator_type,
            "market-type" => &mut self.market_type,
            "node-group" => &mut self.node_group,
            "availability-zone" => &mut self.availability_zone,
            "region" | "availability-region" => &mut self.availability_region,
            _ => return Err(format!("unknown fact; use one of {}", FACT_KEYS.join(", "))),
        };
        *slot = (!value.is_empty()).then(|| value.to_string());
        Ok(())
    }
}

/// A node's full label set: the defaults from its ID and facts, then the user's labels on top.
/// Users may override any default except `berth.io/node-id`.
pub fn node_labels(node_id: &str, facts: &NodeFacts, user: &Labels) -> Result<Labels, LabelError> {
    if user.get(NODE_ID).is_some() {
        return Err(LabelError::ReservedNodeId);
    }
    let mut labels = Labels::new();
    labels.insert(NODE_ID, node_id)?;
    labels.insert(ACCELERATOR_TYPE, facts.accelerator_type.as_deref().unwrap_or(""))?;
    let optional = [
        (MARKET_TYPE, &facts.market_type),
        (NODE_GROUP, &facts.node_group),
        (AVAILABILITY_ZONE, &facts.availability_zone),
        (AVAILABILITY_REGION, &facts.availability_region),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            labels.insert(key, value)?;
        }
    }
    Ok(labels.merged_with(user))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefix of 3 × 63 + `last` characters and 3 dots: 253 characters when `last` is 61.
    fn long_prefix(last: usize) -> String {
        format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(last))
    }

    #[test]
    fn keys_follow_the_kubernetes_rule() {
        let good = [
            "region",
            "a",
            "berth.io/node-id",
            "example.com/GPU_type.v2",
            "x-1.y_2",
            &"k".repeat(63),
            &format!("{}/n", long_prefix(61)),
        ];
        for key in good {
            assert_eq!(validate_key(key), Ok(()), "{key}");
        }
        let bad = [
            ("", NAME_RULE),
            ("-region", NAME_RULE),
            ("region-", NAME_RULE),
            ("re gion", NAME_RULE),
            ("région", NAME_RULE),
            (&"k".repeat(64), NAME_RULE),
            ("Example.com/x", PREFIX_RULE),
            ("/x", PREFIX_RULE),
            ("a..b/x", PREFIX_RULE),
            ("a/b/c", NAME_RULE),
            ("example.com/", NAME_RULE),
            (&format!("{}/n", long_prefix(62)), PREFIX_RULE),
            (&format!("{}/n", "a".repeat(64)), PREFIX_RULE),
        ];
        for (key, rule) in bad {
            let err = validate_key(key).unwrap_err();
            assert_eq!(err, LabelError::Key { key: key.to_string(), rule }, "{key}");
            assert!(err.to_string().contains(&format!("{key:?}")), "the error names the key");
        }
    }

    #[test]
    fn values_are_empty_or_names() {
        for value in ["", "us-west1", "A100", "1.2_3"] {
            assert_eq!(validate_value("k", value), Ok(()), "{value}");
        }
        for value in ["-x", "x-", "a b", "a/b", &"v".repeat(64)] {
            let err = validate_value("k", value).unwrap_err().to_string();
            assert!(err.contains("label \"k\"") && err.contains(&format!("{value:?}")), "{err}");
        }
    }

    #[test]
    fn lists_parse_and_print() {
        let labels = Labels::parse_list(" region=us-west , gpu=A100,empty= ").unwrap();
        assert_eq!(labels.to_string(), "empty=,gpu=A100,region=us-west");
        assert_eq!(Labels::parse_list(&labels.to_string()), Ok(labels));
        assert_eq!(Labels::parse_list(""), Ok(Labels::new()));
        assert_eq!(Labels::parse_list("a"), Err(LabelError::NotKeyValue("a".into())));
        assert_eq!(Labels::parse_list("a=1,a=2"), Err(LabelError::Duplicate("a".into())));
        assert!(matches!(Labels::parse_list("a=b c"), Err(LabelError::Value { .. })));
    }

    #[test]
    fn the_flag_wins_over_the_file() {
        let file = Labels::from_pairs([("zone", "a"), ("team", "ml")]).unwrap();
        let flag = Labels::parse_list("zone=b").unwrap();
        assert_eq!(file.merged_with(&flag).to_string(), "team=ml,zone=b");
    }

    #[test]
    fn default_labels() {
        let facts = NodeFacts {
            accelerator_type: Some("nvidia-h100".into()),
            availability_zone: Some("us-west1-a".into()),
            ..NodeFacts::default()
        };
        let user = Labels::parse_list("team=ml,berth.io/market-type=spot").unwrap();
        let labels = node_labels("n1", &facts, &user).unwrap();
        assert_eq!(
            labels.to_string(),
            "berth.io/accelerator-type=nvidia-h100,berth.io/availability-zone=us-west1-a,\
             berth.io/market-type=spot,berth.io/node-id=n1,team=ml"
        );
        let cpu = node_labels("n2", &NodeFacts::default(), &Labels::new()).unwrap();
        assert_eq!(cpu.get(ACCELERATOR_TYPE), Some(""), "empty on CPU-only nodes");
        assert_eq!(cpu.get(MARKET_TYPE), None);
        let reserved = Labels::parse_list("berth.io/node-id=other").unwrap();
        assert_eq!(node_labels("n3", &facts, &reserved), Err(LabelError::ReservedNodeId));
    }

    proptest::proptest! {
        /// Any sequence of inserts, removes and merges leaves the labels a map would hold, in
        /// key order, and each one found by `get`.
        #[test]
        fn labels_behave_as_a_sorted_map(
            ops in proptest::collection::vec((0u8..3, 0u8..8, 0u8..4), 0..40),
        ) {
            let mut labels = Labels::new();
            let mut model = std::collections::BTreeMap::new();
            for (op, key, value) in ops {
                let (key, value) = (format!("k{key}"), format!("v{value}"));
                match op {
                    0 => {
                        labels.insert(&key, &value).unwrap();
                        model.insert(key, value);
                    }
                    1 => {
                        proptest::prop_assert_eq!(labels.remove(&key), model.remove(&key));
                    }
                    _ => {
                        let over = Labels::from_pairs([(&key, &value)]).unwrap();
                        labels = labels.merged_with(&over);
                        model.insert(key, value);
                    }
                }
            }
            let listed: Vec<(&str, &str)> = labels.iter().collect();
            let expected: Vec<(&str, &str)> =
                model.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            proptest::prop_assert_eq!(listed, expected);
            for key in (0..8).map(|k| format!("k{k}")) {
                proptest::prop_assert_eq!(labels.get(&key), model.get(&key).map(String::as_str));
            }
            proptest::prop_assert_eq!(format!("{labels:?}"), format!("{model:?}"));
        }
    }
}
