//! Actors as the scheduler sees them: an ID, a namespace and labels, and the actor affinity
//! strategy (seed 000) that places actors relative to other actors.
//!
//! An expression `{key, operator, values, soft, topology_key}` names the nodes hosting at least
//! one actor *of the same namespace* whose label `key` has a value in `values` (`IN`,
//! `NOT_IN`) or has `key` at all (`EXISTS`, `DOES_NOT_EXIST`). `IN` and `EXISTS` keep the
//! request on those nodes; `NOT_IN` and `DOES_NOT_EXIST` keep it off them. With a
//! `topology_key` (a node label such as `berth.io/availability-zone`), "the node" widens to
//! "every node with the same value of that label": co-locate in a zone, or spread across zones.
//! A node without the topology label belongs to no domain: it satisfies no `IN`/`EXISTS`
//! expression and is excluded by no `NOT_IN`/`DOES_NOT_EXIST` one.
//!
//! Hard expressions filter (all must hold, or with `match: any` at least one); soft ones only
//! score. Hard anti-affinity is symmetric: an actor placed with a hard `NOT_IN` or
//! `DOES_NOT_EXIST` expression keeps later actors *whose labels match that expression* off its
//! domain. So an actor with `DOES_NOT_EXIST berth.io/actor-id` lands on a node without actors of
//! its namespace, and no actor of its namespace joins it afterwards: exclusive access.

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

use crate::labels::{validate_key, validate_value, LabelError, Labels};

/// The label every placed actor carries, with its ID as the value.
pub const ACTOR_ID: &str = "berth.io/actor-id";
/// The namespace an actor belongs to when none is given.
pub const DEFAULT_NAMESPACE: &str = "default";

/// An actor's ID: the syntax of a label value (it becomes the `berth.io/actor-id` label).
/// Shared, not copied, when cloned: the actor index keeps it per actor and per node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActorId(Arc<str>);

impl ActorId {
    /// Validates `text` as an actor ID.
    pub fn new(text: &str) -> Result<ActorId, LabelError> {
        if text.is_empty() {
            return Err(LabelError::Value {
                key: ACTOR_ID.to_string(),
                value: String::new(),
                rule: "an actor ID is not empty",
            });
        }
        validate_value(ACTOR_ID, text)?;
        Ok(ActorId(Arc::from(text)))
    }

    /// The ID as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ID as shared text (a reference count more, no copy).
    pub fn shared(&self) -> Arc<str> {
        self.0.clone()
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for ActorId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// What a request for an actor says about the actor itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorSpec {
    /// Its ID.
    pub id: ActorId,
    /// Its namespace; affinity only ever looks at actors of the same namespace.
    pub namespace: String,
    /// Its labels, without `berth.io/actor-id` (added on placement).
    pub labels: Labels,
}

impl ActorSpec {
    /// An actor in `namespace` (validated like a label value; empty means `default`).
    pub fn new(id: ActorId, namespace: &str, labels: Labels) -> Result<ActorSpec, ActorError> {
        let namespace = if namespace.is_empty() { DEFAULT_NAMESPACE } else { namespace };
        validate_value("namespace", namespace)
            .map_err(|_| ActorError::Namespace(namespace.into()))?;
        if labels.get(ACTOR_ID).is_some() {
            return Err(ActorError::ReservedLabel);
        }
        Ok(ActorSpec { id, namespace: namespace.to_string(), labels })
    }

    /// The labels the actor carries once placed: its own and `berth.io/actor-id`.
    pub fn placed_labels(&self) -> Labels {
        let mut labels = self.labels.clone();
        labels.insert(ACTOR_ID, self.id.as_str()).expect("an actor ID is a valid label value");
        labels
    }
}

/// The operators of seed 000.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AffinityOperator {
    /// With actors whose label has one of the values.
    In,
    /// Away from actors whose label has one of the values.
    NotIn,
    /// With actors that have the label.
    Exists,
    /// Away from actors that have the label.
    DoesNotExist,
}

impl AffinityOperator {
    /// True for `IN` and `EXISTS` (with), false for `NOT_IN` and `DOES_NOT_EXIST` (away).
    pub fn is_positive(self) -> bool {
        matches!(self, AffinityOperator::In | AffinityOperator::Exists)
    }

    /// The operator's name as written in files: `IN`, `NOT_IN`, `EXISTS`, `DOES_NOT_EXIST`.
    pub fn name(self) -> &'static str {
        match self {
            AffinityOperator::In => "IN",
            AffinityOperator::NotIn => "NOT_IN",
            AffinityOperator::Exists => "EXISTS",
            AffinityOperator::DoesNotExist => "DOES_NOT_EXIST",
        }
    }

    /// Parses a name, case-insensitively (`in`, `NOT_IN`, `not-in` too).
    pub fn parse(text: &str) -> Option<AffinityOperator> {
        match text.to_ascii_uppercase().replace('-', "_").as_str() {
            "IN" => Some(AffinityOperator::In),
            "NOT_IN" | "NOTIN" => Some(AffinityOperator::NotIn),
            "EXISTS" => Some(AffinityOperator::Exists),
            "DOES_NOT_EXIST" | "DOESNOTEXIST" => Some(AffinityOperator::DoesNotExist),
            _ => None,
        }
    }
}

/// One match expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AffinityExpression {
    /// The actor label's key.
    pub key: String,
    /// The operator.
    pub operator: AffinityOperator,
    /// The values (`IN`, `NOT_IN` only).
    pub values: Vec<String>,
    /// Prefer rather than require.
    pub soft: bool,
    /// A node label whose value defines the domain (`None`: the node itself).
    pub topology_key: Option<String>,
}

impl AffinityExpression {
    /// A validated expression: key and topology key in label-key syntax, values in
    /// label-value syntax, values present exactly for `IN` and `NOT_IN`.
    pub fn new(
        key: &str,
        operator: AffinityOperator,
        values: Vec<String>,
        soft: bool,
        topology_key: Option<String>,
    ) -> Result<AffinityExpression, ActorError> {
        validate_key(key).map_err(ActorError::Label)?;
        for value in &values {
            validate_value(key, value).map_err(ActorError::Label)?;
        }
        if let Some(topology) = &topology_key {
            validate_key(topology).map_err(ActorError::Label)?;
        }
        match operator {
            AffinityOperator::In | AffinityOperator::NotIn if values.is_empty() => {
                return Err(ActorError::Values { operator, needs_values: true });
            }
            AffinityOperator::Exists | AffinityOperator::DoesNotExist if !values.is_empty() => {
                return Err(ActorError::Values { operator, needs_values: false });
            }
            _ => {}
        }
        Ok(AffinityExpression { key: key.to_string(), operator, values, soft, topology_key })
    }

    /// True when an actor with `labels` is one this expression names.
    pub fn names_actor(&self, labels: &Labels) -> bool {
        self.names_value(labels.get(&self.key))
    }

    /// True when an actor whose label under this expression's key has `value` (`None`: it has
    /// no such label) is one this expression names.
    pub fn names_value(&self, value: Option<&str>) -> bool {
        match (self.operator, value) {
            (_, None) => false,
            (AffinityOperator::In | AffinityOperator::NotIn, Some(value)) => {
                self.values.iter().any(|v| v == value)
            }
            (AffinityOperator::Exists | AffinityOperator::DoesNotExist, Some(_)) => true,
        }
    }
}

impl fmt::Display for AffinityExpression {
    /// `location IN (dc_1, dc_2) per berth.io/availability-zone, soft`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key, self.operator.name())?;
        if !self.values.is_empty() {
            write!(f, " ({})", self.values.join(", "))?;
        }
        if let Some(topology) = &self.topology_key {
            write!(f, " per {topology}")?;
        }
        if self.soft {
            f.write_str(", soft")?;
        }
        Ok(())
    }
}

/// How hard expressions combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatchMode {
    /// Every hard expression must hold (seed 000).
    #[default]
    All,
    /// At least one must hold (seed 000's follow-on "OR" semantics).
    Any,
}

/// What an actor does when a peer it is co-located with moves (seed 000, failures 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnPeerMoved {
    /// Stay where it is.
    #[default]
    Stay,
    /// Report itself as violating its hard affinity, so the head restarts it next to the peer.
    Follow,
}

/// The actor affinity strategy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ActorAffinity {
    /// The expressions, in order (diagnoses refer to them by position).
    pub expressions: Vec<AffinityExpression>,
    /// How hard expressions combine.
    pub match_mode: MatchMode,
    /// What to do when a peer moves.
    pub on_peer_moved: OnPeerMoved,
}

/// An actor or affinity expression that is not valid.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ActorError {
    /// A key, value or topology key breaks the label syntax.
    #[error(transparent)]
    Label(LabelError),
    /// Values where none belong, or none where they must be.
    #[error("{} {}", operator.name(), if *needs_values { "needs at least one value" } else { "takes no values" })]
    Values {
        /// The operator.
        operator: AffinityOperator,
        /// True when values were missing.
        needs_values: bool,
    },
    /// A malformed namespace.
    #[error("namespace {0:?} is invalid: use 1 to 63 characters of letters, digits, '-', '_' and '.', beginning and ending with a letter or digit")]
    Namespace(String),
    /// A user label for `berth.io/actor-id`.
    #[error(
        "label key \"berth.io/actor-id\" is set by Berth to the actor's ID and cannot be given"
    )]
    ReservedLabel,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(values: &[&str]) -> Vec<String> {
        values.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn expressions_check_their_values() {
        use AffinityOperator::*;
        assert!(AffinityExpression::new("location", In, v(&["dc_1"]), false, None).is_ok());
        assert!(AffinityExpression::new("location", Exists, vec![], true, None).is_ok());
        let cases = [
            (In, v(&[]), "IN needs at least one value"),
            (NotIn, v(&[]), "NOT_IN needs at least one value"),
            (Exists, v(&["x"]), "EXISTS takes no values"),
            (DoesNotExist, v(&["x"]), "DOES_NOT_EXIST takes no values"),
        ];
        for (operator, values, message) in cases {
            let err = AffinityExpression::new("k", operator, values, false, None).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
        let err = AffinityExpression::new("bad key", In, v(&["a"]), false, None).unwrap_err();
        assert!(err.to_string().contains("\"bad key\""), "{err}");
        let err = AffinityExpression::new("k", In, v(&["bad value"]), false, None).unwrap_err();
        assert!(err.to_string().contains("\"bad value\""), "{err}");
        let err =
            AffinityExpression::new("k", Exists, vec![], false, Some("no way".into())).unwrap_err();
        assert!(err.to_string().contains("\"no way\""), "{err}");
    }

    #[test]
    fn operators_parse_case_insensitively() {
        assert_eq!(AffinityOperator::parse("in"), Some(AffinityOperator::In));
        assert_eq!(AffinityOperator::parse("Not_In"), Some(AffinityOperator::NotIn));
        assert_eq!(AffinityOperator::parse("does-not-exist"), Some(AffinityOperator::DoesNotExist));
        assert_eq!(AffinityOperator::parse("near"), None);
    }

    #[test]
    fn actor_specs_check_ids_namespaces_and_labels() {
        assert!(ActorId::new("").is_err());
        assert!(ActorId::new("a b").is_err());
        let id = ActorId::new("actor-1").unwrap();
        let spec =
            ActorSpec::new(id.clone(), "", Labels::parse_list("location=dc_1").unwrap()).unwrap();
        assert_eq!(spec.namespace, "default");
        assert_eq!(spec.placed_labels().to_string(), "berth.io/actor-id=actor-1,location=dc_1");
        let reserved = Labels::parse_list("berth.io/actor-id=x").unwrap();
        assert_eq!(ActorSpec::new(id.clone(), "ns", reserved), Err(ActorError::ReservedLabel));
        assert!(matches!(
            ActorSpec::new(id, "bad ns", Labels::new()),
            Err(ActorError::Namespace(_))
        ));
    }
}
