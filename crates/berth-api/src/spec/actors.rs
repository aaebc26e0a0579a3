//! Actors in the input files (seed 000): the placed actors of the cluster file (`actors:`),
//! the actor a request places (`actor:`), and the expressions of `ACTOR_AFFINITY`.
//!
//! As elsewhere, a value that breaks a rule on its own (a label key, an operator name) is
//! rejected while parsing, at its own path. The one rule that needs two fields, "values are
//! given exactly for IN and NOT_IN", is the core's ([`AffinityExpression::new`]) and is checked
//! when the request or cluster is built, naming `…expressions[i].values`.

use std::collections::HashMap;

use super::Located;
use berth_core::actors::{
    ActorAffinity, ActorError, ActorId, ActorSpec, AffinityExpression, AffinityOperator, MatchMode,
    OnPeerMoved, ACTOR_ID,
};
use berth_core::labels::{self, LabelError, Labels};
use berth_core::{Cluster, NodeId, NodeState, Strategy};
use serde::de::{self, Deserializer};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::cluster::{reserve_on, Reservation};
use super::label_maps::{label_error_text, ByLabelKey, LabelText, StringOnly};
use super::parsed::ResourceMap;
use super::source::{under, Source};
use super::InputError;

// ---------------------------------------------------------------------------------------------
// Values checked while parsing.

/// A label key (`app`, `berth.io/availability-zone`): an expression's `key` or
/// `topology_key`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub(super) struct LabelKeyText(pub(super) String);

impl<'de> Deserialize<'de> for LabelKeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LabelKeyText, D::Error> {
        let key = deserializer.deserialize_any(StringOnly("a label key"))?;
        labels::validate_key(&key)
            .map_err(|err| de::Error::custom(label_error_text("label", &err)))?;
        Ok(LabelKeyText(key))
    }
}

/// A label value (`dc_1`), one of an expression's `values`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub(super) struct LabelValueText(pub(super) String);

impl<'de> Deserialize<'de> for LabelValueText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LabelValueText, D::Error> {
        let value = deserializer.deserialize_any(StringOnly("a label value"))?;
        labels::validate_value("", &value).map_err(|err| match err {
            LabelError::Value { value, rule, .. } => {
                de::Error::custom(format!("label value {value:?} is invalid: {rule}"))
            }
            err => de::Error::custom(err),
        })?;
        Ok(LabelValueText(value))
    }
}

/// An actor ID: the syntax of a label value, not empty (it becomes the `berth.io/actor-id`
/// label of the actor).
#[derive(Debug)]
pub(super) struct ActorIdText(pub(super) ActorId);

impl<'de> Deserialize<'de> for ActorIdText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ActorIdText, D::Error> {
        let text = deserializer.deserialize_any(StringOnly("an actor ID"))?;
        ActorId::new(&text).map(ActorIdText).map_err(|err| match err {
            LabelError::Value { value, rule, .. } => {
                de::Error::custom(format!("actor ID {value:?} is invalid: {rule}"))
            }
            err => de::Error::custom(err),
        })
    }
}

/// A namespace: the syntax of a label value; empty means `default`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub(super) struct NamespaceText(pub(super) String);

impl<'de> Deserialize<'de> for NamespaceText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NamespaceText, D::Error> {
        let text = deserializer.deserialize_any(StringOnly("a namespace"))?;
        labels::validate_value("namespace", &text)
            .map_err(|_| de::Error::custom(ActorError::Namespace(text.clone())))?;
        Ok(NamespaceText(text))
    }
}

/// `labels:` of an actor: the label syntax; `berth.io/actor-id` is Berth's.
#[derive(Debug)]
pub(super) struct ActorLabel;

impl LabelText for ActorLabel {
    const EXPECTING: &'static str = "a map of label key to value, such as {app: web}";
    const VALUE: &'static str = "a label value";
    fn check(key: &str, value: &str) -> Result<(), String> {
        if key == ACTOR_ID {
            return Err(ActorError::ReservedLabel.to_string());
        }
        Labels::new().insert(key, value).map_err(|err| label_error_text("label", &err))
    }
}

/// An actor's labels.
pub(super) type ActorLabelMap = ByLabelKey<ActorLabel>;

/// Reads one of a few names, case-insensitively, or says which names there are.
fn one_of<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    what: &'static str,
    parse: fn(&str) -> Option<T>,
    names: &'static str,
) -> Result<T, D::Error> {
    let text = deserializer.deserialize_any(StringOnly(what))?;
    parse(&text).ok_or_else(|| de::Error::custom(format!("unknown {what} {text:?}; use {names}")))
}

/// An expression's `operator`: `IN`, `NOT_IN`, `EXISTS`, `DOES_NOT_EXIST`, any case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct OperatorName(AffinityOperator);

impl Serialize for OperatorName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.name())
    }
}

impl<'de> Deserialize<'de> for OperatorName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<OperatorName, D::Error> {
        one_of(
            deserializer,
            "operator",
            AffinityOperator::parse,
            "IN, NOT_IN, EXISTS or DOES_NOT_EXIST",
        )
        .map(OperatorName)
    }
}

/// ACTOR_AFFINITY's `match`: `all` or `any`, any case.
#[derive(Debug)]
pub(super) struct MatchName(pub(super) MatchMode);

impl<'de> Deserialize<'de> for MatchName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MatchName, D::Error> {
        let parse = |text: &str| match text.to_ascii_lowercase().as_str() {
            "all" => Some(MatchMode::All),
            "any" => Some(MatchMode::Any),
            _ => None,
        };
        one_of(deserializer, "match", parse, "all or any").map(MatchName)
    }
}

/// `on_peer_moved`: `stay` or `follow`, any case.
#[derive(Debug)]
pub(super) struct OnPeerMovedName(pub(super) OnPeerMoved);

impl<'de> Deserialize<'de> for OnPeerMovedName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<OnPeerMovedName, D::Error> {
        let parse = |text: &str| match text.to_ascii_lowercase().as_str() {
            "stay" => Some(OnPeerMoved::Stay),
            "follow" => Some(OnPeerMoved::Follow),
            _ => None,
        };
        one_of(deserializer, "on_peer_moved", parse, "stay or follow").map(OnPeerMovedName)
    }
}

// ---------------------------------------------------------------------------------------------
// The sections, as parsed.

/// One expression of ACTOR_AFFINITY (or of a placed actor's `affinity`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExpressionEntry {
    key: LabelKeyText,
    operator: OperatorName,
    /// Located for "IN needs at least one value" and its opposite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    values: Option<Located<Vec<LabelValueText>>>,
    #[serde(default, skip_serializing_if = "is_false")]
    soft: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    topology_key: Option<LabelKeyText>,
}

fn is_false(flag: &bool) -> bool {
    !flag
}

/// ACTOR_AFFINITY as parsed: the expressions wait for [`affinity`] to be checked.
#[derive(Clone, Debug, PartialEq)]
pub struct AffinityDraft {
    pub(super) match_mode: MatchMode,
    pub(super) on_peer_moved: OnPeerMoved,
    pub(super) expressions: Located<Vec<Located<ExpressionEntry>>>,
}

impl Serialize for AffinityDraft {
    /// The map it was read from, defaults left out.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", "ACTOR_AFFINITY")?;
        map.serialize_entry("expressions", &self.expressions)?;
        if self.match_mode == MatchMode::Any {
            map.serialize_entry("match", "any")?;
        }
        if self.on_peer_moved == OnPeerMoved::Follow {
            map.serialize_entry("on_peer_moved", "follow")?;
        }
        map.end()
    }
}

/// `actor:` of a request file: the actor the request places.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActorSection {
    id: ActorIdText,
    #[serde(default)]
    namespace: Option<NamespaceText>,
    /// Located for [`super::field_path`].
    #[serde(default)]
    labels: Option<Located<ActorLabelMap>>,
}

/// One entry of `actors:` in the cluster file: an actor already placed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActorEntry {
    /// Located for the duplicate-ID error.
    id: Located<ActorIdText>,
    #[serde(default)]
    namespace: Option<NamespaceText>,
    #[serde(default)]
    labels: Option<Located<ActorLabelMap>>,
    /// Located for "no such node" and "the node is dead".
    node: Located<NodeId>,
    /// The expressions it was placed with: its hard anti-affinity keeps matching actors off
    /// its node (or domain).
    #[serde(default)]
    affinity: Vec<Located<ExpressionEntry>>,
    #[serde(default)]
    on_peer_moved: Option<OnPeerMovedName>,
    /// What it holds on its node, if the file says; reserved like an allocation.
    #[serde(default)]
    resources: Option<Located<ResourceMap>>,
}

// ---------------------------------------------------------------------------------------------
// Building.

/// The expressions of `list`, found at `field` (`scheduling_strategy.expressions`,
/// `actors[2].affinity`), checked by the core.
fn expressions(
    source: &Source,
    list: &[Located<ExpressionEntry>],
    field: &str,
) -> Result<Vec<AffinityExpression>, InputError> {
    list.iter()
        .enumerate()
        .map(|(i, entry)| {
            let e = &entry.value;
            let values: Vec<String> = e
                .values
                .as_ref()
                .map_or_else(Vec::new, |v| v.value.iter().map(|v| v.0.clone()).collect());
            let topology = e.topology_key.as_ref().map(|t| t.0.clone());
            AffinityExpression::new(&e.key.0, e.operator.0, values, e.soft, topology).map_err(
                |err| {
                    let at = format!("{field}[{i}]");
                    let (path, location) = match &err {
                        // Keys and values were checked while parsing; kept for rules the core
                        // may add.
                        ActorError::Label(LabelError::Key { key, .. }) if *key != e.key.0 => {
                            (under(&at, "topology_key"), entry.referenced)
                        }
                        ActorError::Label(LabelError::Key { .. }) => {
                            (under(&at, "key"), entry.referenced)
                        }
                        _ => (
                            under(&at, "values"),
                            e.values.as_ref().map_or(entry.referenced, |v| v.referenced),
                        ),
                    };
                    source.invalid(path, err.to_string(), Some(location))
                },
            )
        })
        .collect()
}

/// The ACTOR_AFFINITY strategy of a request file.
pub(super) fn affinity(source: &Source, draft: &AffinityDraft) -> Result<Strategy, InputError> {
    let field = "scheduling_strategy.expressions";
    if draft.expressions.value.is_empty() {
        return Err(source.invalid(
            field,
            "ACTOR_AFFINITY needs at least one expression, such as {key: app, operator: IN, \
             values: [web]}",
            Some(draft.expressions.referenced),
        ));
    }
    Ok(Strategy::ActorAffinity(ActorAffinity {
        expressions: expressions(source, &draft.expressions.value, field)?,
        match_mode: draft.match_mode,
        on_peer_moved: draft.on_peer_moved,
    }))
}

/// An actor's ID, namespace and labels; `field` is where the actor is (`actor`, `actors[1]`).
fn spec(
    source: &Source,
    field: &str,
    id: &ActorId,
    namespace: Option<&NamespaceText>,
    labels: Option<&Located<ActorLabelMap>>,
) -> Result<ActorSpec, InputError> {
    let location = labels.map(|l| l.referenced);
    let labels = match labels {
        None => Labels::new(),
        Some(map) => Labels::from_pairs(map.value.pairs()).map_err(|err| {
            source.invalid(under(field, "labels"), label_error_text("label", &err), location)
        })?,
    };
    let namespace = namespace.map_or("", |n| n.0.as_str());
    // Checked while parsing; kept for rules the core may add.
    ActorSpec::new(id.clone(), namespace, labels)
        .map_err(|err| source.invalid(field, err.to_string(), location))
}

/// The actor of a request file's `actor:` section.
pub(super) fn request_actor(
    source: &Source,
    section: &Located<ActorSection>,
) -> Result<ActorSpec, InputError> {
    let actor = &section.value;
    spec(source, "actor", &actor.id.0, actor.namespace.as_ref(), actor.labels.as_ref())
}

/// Places the cluster file's actors in order: reserves their resources, if given, and records
/// them with the affinity they were placed with. `states` is each node's state in the file
/// (applied after this, so that actors on draining nodes can hold resources).
pub(super) fn place_actors(
    source: &Source,
    cluster: &mut Cluster,
    entries: &[ActorEntry],
    states: &HashMap<&str, NodeState>,
) -> Result<(), InputError> {
    // First index of each ID, to name it when a later actor repeats it.
    let mut first: HashMap<&str, (usize, u64)> = HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let field = format!("actors[{i}]");
        let id = &entry.id.value.0;
        if let Some((j, line)) = first.get(id.as_str()) {
            return Err(source.invalid(
                under(&field, "id"),
                format!(
                    "actor ID {id} is already used by actors[{j}] (line {line}); actor IDs are \
                     unique across namespaces"
                ),
                Some(entry.id.referenced),
            ));
        }
        first.insert(id.as_str(), (i, entry.id.referenced.line()));
        let node_id = entry.node.value.as_str();
        let Some(node) = cluster.index_of(node_id) else {
            return Err(source.invalid(
                under(&field, "node"),
                format!("there is no node {node_id} in the cluster file; name one of its nodes"),
                Some(entry.node.referenced),
            ));
        };
        if states.get(node_id) == Some(&NodeState::Dead) {
            return Err(source.invalid(
                under(&field, "node"),
                format!("node {node_id} is dead, and a dead node runs no actors"),
                Some(entry.node.referenced),
            ));
        }
        let actor = spec(source, &field, id, entry.namespace.as_ref(), entry.labels.as_ref())?;
        let affinity = ActorAffinity {
            expressions: expressions(source, &entry.affinity, &under(&field, "affinity"))?,
            match_mode: MatchMode::All,
            on_peer_moved: entry.on_peer_moved.as_ref().map_or(OnPeerMoved::Stay, |o| o.0),
        };
        if let Some(resources) = &entry.resources {
            let amounts_field = under(&field, "resources");
            reserve_on(
                source,
                cluster,
                node,
                Reservation {
                    field: &amounts_field,
                    location: resources.referenced,
                    amounts: &resources.value,
                    amounts_field: amounts_field.clone(),
                    amounts_location: resources.referenced,
                    exact: None,
                    before: "the allocations and actors listed before it",
                },
            )?;
        }
        cluster
            .place_actor(&actor, node, affinity)
            .map_err(|err| source.invalid(field, err.to_string(), Some(entry.id.referenced)))?;
    }
    Ok(())
}

/// The actor of a request file's `actor:` section. It must be a new one: an ID the cluster
/// file places already is an error (the head removes an actor before it places it again
/// elsewhere).
pub(super) fn new_actor(
    source: &Source,
    cluster: &Cluster,
    section: &Located<ActorSection>,
) -> Result<ActorSpec, InputError> {
    let actor = request_actor(source, section)?;
    if let Some(placed) = cluster.actors().get(actor.id.as_str()) {
        let node = cluster.node(placed.node()).map_or_else(String::new, |n| n.id().to_string());
        return Err(source.invalid(
            "actor.id",
            format!(
                "actor {} is already placed on {node} in the cluster file; a request places a \
                 new actor (actor IDs are unique across namespaces)",
                actor.id
            ),
            Some(section.referenced),
        ));
    }
    Ok(actor)
}

/// The actor `id` of a REST body, with its namespace (`default` when none) and labels, each
/// label checked by the request file's rules and named `labels.<key>`.
pub fn actor_spec<'a>(
    source: &Source,
    id: &str,
    namespace: Option<&str>,
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<ActorSpec, InputError> {
    let id = ActorId::new(id).map_err(|err| source.invalid("", err.to_string(), None))?;
    let mut checked = Labels::new();
    for (key, value) in labels {
        ActorLabel::check(key, value)
            .map_err(|rule| source.invalid(under("labels", key), rule, None))?;
        checked.insert(key, value).map_err(|err| {
            source.invalid(under("labels", key), label_error_text("label", &err), None)
        })?;
    }
    let namespace = namespace.unwrap_or("");
    ActorSpec::new(id, namespace, checked)
        .map_err(|err| source.invalid("namespace", err.to_string(), None))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use berth_core::actors::{AffinityOperator, MatchMode, OnPeerMoved};

    use super::super::parsed::RequestFile;
    use super::super::{FileKind, InputError, Source, StrategySpec};
    use super::*;

    fn source(text: &str) -> Source {
        Source { kind: FileKind::Request, path: PathBuf::from("r.yaml"), text: text.to_string() }
    }

    /// The ACTOR_AFFINITY strategy of a request file whose strategy map is `strategy`.
    fn built(strategy: &str) -> Result<ActorAffinity, InputError> {
        let source = source(&format!("resources: {{}}\nscheduling_strategy: {strategy}\n"));
        let file: RequestFile = source.parse()?;
        let Some(StrategySpec::ActorAffinity(draft)) = file.scheduling_strategy.map(|s| s.value)
        else {
            panic!("an ACTOR_AFFINITY draft: {strategy}");
        };
        match affinity(&source, &draft)? {
            Strategy::ActorAffinity(affinity) => Ok(affinity),
            other => panic!("{other:?}"),
        }
    }

    fn field(result: Result<ActorAffinity, InputError>) -> String {
        match result {
            Err(InputError::Invalid(invalid)) => invalid.field,
            other => panic!("expected an invalid-input error, got {other:?}"),
        }
    }

    #[test]
    fn operators_match_and_on_peer_moved_parse_in_any_case() {
        let affinity = built(
            "{type: actor_affinity, match: ANY, on_peer_moved: Follow, expressions: [\
             {key: a, operator: in, values: [x]}, {key: b, operator: Not_In, values: [y]}, \
             {key: c, operator: exists, soft: true}, \
             {key: d, operator: DOES_NOT_EXIST, topology_key: zone}]}",
        )
        .unwrap();
        assert_eq!(affinity.match_mode, MatchMode::Any);
        assert_eq!(affinity.on_peer_moved, OnPeerMoved::Follow);
        let operators: Vec<AffinityOperator> =
            affinity.expressions.iter().map(|e| e.operator).collect();
        use AffinityOperator::*;
        assert_eq!(operators, [In, NotIn, Exists, DoesNotExist]);
        assert!(affinity.expressions[2].soft);
        assert_eq!(affinity.expressions[3].topology_key.as_deref(), Some("zone"));
        let defaults =
            built("{type: ACTOR_AFFINITY, expressions: [{key: a, operator: EXISTS}]}").unwrap();
        assert_eq!(
            (defaults.match_mode, defaults.on_peer_moved),
            (MatchMode::All, OnPeerMoved::Stay)
        );
    }

    #[test]
    fn expression_errors_name_the_expression_field() {
        let cases = [
            (
                "[{key: a, operator: IN, values: [x]}, {key: b, operator: IN, values: []}]",
                "scheduling_strategy.expressions[1].values",
            ),
            ("[{key: a, operator: IN}]", "scheduling_strategy.expressions[0].values"),
            (
                "[{key: a, operator: EXISTS, values: [x]}]",
                "scheduling_strategy.expressions[0].values",
            ),
            ("[]", "scheduling_strategy.expressions"),
        ];
        for (expressions, expected) in cases {
            let text = format!("{{type: ACTOR_AFFINITY, expressions: {expressions}}}");
            assert_eq!(field(built(&text)), expected, "{expressions}");
        }
    }
}
