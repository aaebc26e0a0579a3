//! `scheduling_strategy`: its names, its map form and the checks of each strategy's keys.

use super::actors::AffinityDraft;
use super::actors::{ExpressionEntry, MatchName, OnPeerMovedName};
use super::groups::{BundleIndex, GroupIdText};
use super::label_maps::{selector_error_text, ByLabelKey, ExpressionMap};
use super::located::Located;
use berth_core::actors::{MatchMode, OnPeerMoved};
use berth_core::request::{GroupPlacement, NodeLabel};
use berth_core::selector::LabelSelector;
use berth_core::NodeAffinity;
use berth_core::Strategy;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A strategy name, case-insensitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StrategyName {
    Default,
    Spread,
    Random,
    NodeAffinity,
    NodeLabel,
    ActorAffinity,
    PlacementGroup,
}

/// Shown when a strategy name is not one of ours.
pub(super) const STRATEGY_HELP: &str = "use DEFAULT, SPREAD, RANDOM, or a map such as \
                             {type: NODE_AFFINITY, node_id: node-1}, \
                             {type: NODE_LABEL, hard: {zone: a}}, \
                             {type: ACTOR_AFFINITY, expressions: [{key: app, operator: IN, \
                             values: [web]}]} or {type: PLACEMENT_GROUP, group: pg-1}";

impl StrategyName {
    pub(super) fn parse(text: &str) -> Option<StrategyName> {
        match text.to_ascii_uppercase().as_str() {
            "DEFAULT" => Some(StrategyName::Default),
            "SPREAD" => Some(StrategyName::Spread),
            "RANDOM" => Some(StrategyName::Random),
            "NODE_AFFINITY" => Some(StrategyName::NodeAffinity),
            "NODE_LABEL" => Some(StrategyName::NodeLabel),
            "ACTOR_AFFINITY" => Some(StrategyName::ActorAffinity),
            "PLACEMENT_GROUP" => Some(StrategyName::PlacementGroup),
            _ => None,
        }
    }

    /// The name as files write it.
    pub(super) fn name(self) -> &'static str {
        match self {
            StrategyName::Default => "DEFAULT",
            StrategyName::Spread => "SPREAD",
            StrategyName::Random => "RANDOM",
            StrategyName::NodeAffinity => "NODE_AFFINITY",
            StrategyName::NodeLabel => "NODE_LABEL",
            StrategyName::ActorAffinity => "ACTOR_AFFINITY",
            StrategyName::PlacementGroup => "PLACEMENT_GROUP",
        }
    }

    pub(super) fn parse_or_error<E: de::Error>(text: &str) -> Result<StrategyName, E> {
        StrategyName::parse(text).ok_or_else(|| {
            E::custom(format!("unknown scheduling strategy {text:?}; {STRATEGY_HELP}"))
        })
    }
}

impl<'de> Deserialize<'de> for StrategyName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StrategyName, D::Error> {
        let text = String::deserialize(deserializer)?;
        StrategyName::parse_or_error(&text)
    }
}

/// The map form of `scheduling_strategy`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StrategyMap {
    #[serde(rename = "type")]
    pub(super) kind: StrategyName,
    pub(super) node_id: Option<String>,
    /// `true`/`false` with NODE_AFFINITY, a selector with NODE_LABEL.
    pub(super) soft: Option<Located<Soft>>,
    pub(super) spill_on_unavailable: Option<bool>,
    pub(super) fail_on_unavailable: Option<bool>,
    /// NODE_LABEL: the selector that must hold.
    pub(super) hard: Option<Located<ExpressionMap>>,
    /// ACTOR_AFFINITY: the expressions, checked together with their operators when the request
    /// is built (so that an error names `expressions[i].values`). Located for "none given".
    pub(super) expressions: Option<Located<Vec<Located<ExpressionEntry>>>>,
    /// ACTOR_AFFINITY: how hard expressions combine.
    #[serde(rename = "match")]
    pub(super) match_mode: Option<MatchName>,
    /// ACTOR_AFFINITY: what the actor does when a peer moves.
    pub(super) on_peer_moved: Option<OnPeerMovedName>,
    /// PLACEMENT_GROUP: the group.
    pub(super) group: Option<GroupIdText>,
    /// PLACEMENT_GROUP: the bundle; absent for the first bundle that can take the request.
    pub(super) bundle: Option<BundleIndex>,
}

/// `soft:` in the map form of `scheduling_strategy`: a flag for NODE_AFFINITY, the preferred
/// selector for NODE_LABEL. Told apart by the value; which one fits the `type` is checked by
/// [`StrategyMap::into_strategy`].
#[derive(Debug)]
pub(super) enum Soft {
    Flag(bool),
    Selector(ExpressionMap),
}

impl<'de> Deserialize<'de> for Soft {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Soft, D::Error> {
        struct SoftVisitor;
        impl<'de> Visitor<'de> for SoftVisitor {
            type Value = Soft;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "true or false (NODE_AFFINITY), or a map of label key to expression \
                     (NODE_LABEL)",
                )
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Soft, E> {
                Ok(Soft::Flag(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Soft, A::Error> {
                ExpressionMap::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(Soft::Selector)
            }
        }
        deserializer.deserialize_any(SoftVisitor)
    }
}

/// `scheduling_strategy`: a name (`SPREAD`) or a map (`{type: NODE_AFFINITY, node_id: …}`).
/// The core's [`Request::new`] checks the affinity flags against `soft`. Written back in the
/// canonical form it is read in (names in capitals, flags only when set).
#[derive(Clone, Debug, PartialEq)]
pub enum StrategySpec {
    /// Every rule that a single value can break was checked while parsing.
    Ready(Strategy),
    /// ACTOR_AFFINITY, whose expressions are checked when the request is built
    /// ([`actors::affinity`]), so that the error can name the expression's field.
    ActorAffinity(AffinityDraft),
}

impl StrategySpec {
    /// The strategy, when it needed no building.
    #[cfg(test)]
    pub(super) fn ready(&self) -> Option<&Strategy> {
        match self {
            StrategySpec::Ready(strategy) => Some(strategy),
            StrategySpec::ActorAffinity(_) => None,
        }
    }
}

impl Serialize for StrategySpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let strategy = match self {
            StrategySpec::ActorAffinity(draft) => return draft.serialize(serializer),
            StrategySpec::Ready(strategy) => strategy,
        };
        let selector = |s: &LabelSelector| -> Vec<(String, String)> {
            s.expressions().map(|(k, e)| (k.to_string(), e)).collect()
        };
        match strategy {
            Strategy::Default => serializer.serialize_str(StrategyName::Default.name()),
            Strategy::Spread => serializer.serialize_str(StrategyName::Spread.name()),
            Strategy::Random => serializer.serialize_str(StrategyName::Random.name()),
            Strategy::NodeAffinity(a) => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", StrategyName::NodeAffinity.name())?;
                map.serialize_entry("node_id", &a.node)?;
                for (key, set) in [
                    ("soft", a.soft),
                    ("spill_on_unavailable", a.spill_on_unavailable),
                    ("fail_on_unavailable", a.fail_on_unavailable),
                ] {
                    if set {
                        map.serialize_entry(key, &true)?;
                    }
                }
                map.end()
            }
            Strategy::NodeLabel(l) => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", StrategyName::NodeLabel.name())?;
                for (key, s) in [("hard", &l.hard), ("soft", &l.soft)] {
                    if !s.is_empty() {
                        map.serialize_entry(key, &PairMap(&selector(s)))?;
                    }
                }
                map.end()
            }
            Strategy::PlacementGroup(g) => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", StrategyName::PlacementGroup.name())?;
                map.serialize_entry("group", g.group.as_str())?;
                if let Some(bundle) = g.bundle {
                    map.serialize_entry("bundle", &bundle)?;
                }
                map.end()
            }
            // Read as a draft, never as a built strategy.
            Strategy::ActorAffinity(_) => Err(serde::ser::Error::custom(
                "an ACTOR_AFFINITY strategy is written from its draft",
            )),
        }
    }
}

/// Key-value pairs written as a map, in their order.
pub(super) struct PairMap<'a>(pub(super) &'a [(String, String)]);

impl Serialize for PairMap<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de> Deserialize<'de> for StrategySpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StrategySpec, D::Error> {
        struct SpecVisitor;
        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = StrategySpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a scheduling strategy; {STRATEGY_HELP}")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<StrategySpec, E> {
                let strategy = match StrategyName::parse_or_error(text)? {
                    StrategyName::Default => Strategy::Default,
                    StrategyName::Spread => Strategy::Spread,
                    StrategyName::Random => Strategy::Random,
                    StrategyName::NodeAffinity => {
                        return Err(E::custom(
                            "NODE_AFFINITY needs a node: write it as a map, such as \
                             {type: NODE_AFFINITY, node_id: node-1}",
                        ))
                    }
                    StrategyName::NodeLabel => {
                        return Err(E::custom(NODE_LABEL_NEEDS_SELECTORS));
                    }
                    StrategyName::ActorAffinity => {
                        return Err(E::custom(ACTOR_AFFINITY_NEEDS_EXPRESSIONS));
                    }
                    StrategyName::PlacementGroup => {
                        return Err(E::custom(PLACEMENT_GROUP_NEEDS_GROUP));
                    }
                };
                Ok(StrategySpec::Ready(strategy))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StrategySpec, A::Error> {
                let spec = StrategyMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                spec.into_strategy().map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_any(SpecVisitor)
    }
}

impl StrategyMap {
    /// Checks which keys go with which `type`; the flag combinations are the core's to check,
    /// and ACTOR_AFFINITY's expressions are checked when the request is built.
    pub(super) fn into_strategy(self) -> Result<StrategySpec, String> {
        let (affinity, label, actor, group) = (
            StrategyName::NodeAffinity,
            StrategyName::NodeLabel,
            StrategyName::ActorAffinity,
            StrategyName::PlacementGroup,
        );
        // Keys that belong to some types only (`soft` is checked per type below: its meaning
        // differs between the two types that take it).
        let owned: [(&str, bool, StrategyName); 9] = [
            ("node_id", self.node_id.is_some(), affinity),
            ("spill_on_unavailable", self.spill_on_unavailable.is_some(), affinity),
            ("fail_on_unavailable", self.fail_on_unavailable.is_some(), affinity),
            ("hard", self.hard.is_some(), label),
            ("expressions", self.expressions.is_some(), actor),
            ("match", self.match_mode.is_some(), actor),
            ("on_peer_moved", self.on_peer_moved.is_some(), actor),
            ("group", self.group.is_some(), group),
            ("bundle", self.bundle.is_some(), group),
        ];
        if let Some((key, _, owner)) =
            owned.iter().find(|(_, given, owner)| *given && *owner != self.kind)
        {
            return Err(format!("{key} is only allowed with type {}", owner.name()));
        }
        let (soft_flag, soft_selector) = match self.soft.map(|soft| soft.value) {
            None => (None, None),
            Some(Soft::Flag(flag)) => (Some(flag), None),
            Some(Soft::Selector(map)) => (None, Some(map)),
        };
        let soft_given = soft_flag.is_some() || soft_selector.is_some();
        let strategy = match self.kind {
            StrategyName::Default => Strategy::Default,
            StrategyName::Spread => Strategy::Spread,
            StrategyName::Random => Strategy::Random,
            StrategyName::NodeAffinity => {
                if soft_selector.is_some() {
                    return Err("soft is true or false with type NODE_AFFINITY; a selector in \
                                soft needs type NODE_LABEL"
                        .to_string());
                }
                let node = self.node_id.ok_or("node_id is required with type NODE_AFFINITY")?;
                Strategy::NodeAffinity(NodeAffinity {
                    node,
                    soft: soft_flag.unwrap_or(false),
                    spill_on_unavailable: self.spill_on_unavailable.unwrap_or(false),
                    fail_on_unavailable: self.fail_on_unavailable.unwrap_or(false),
                })
            }
            StrategyName::NodeLabel => {
                if soft_flag.is_some() {
                    return Err("soft is a map of label key to expression with type \
                                NODE_LABEL, such as {type: NODE_LABEL, soft: {zone: a}}"
                        .to_string());
                }
                if self.hard.is_none() && soft_selector.is_none() {
                    return Err(NODE_LABEL_NEEDS_SELECTORS.to_string());
                }
                let selector = |map: Option<&ExpressionMap>| {
                    LabelSelector::parse(map.into_iter().flat_map(ByLabelKey::pairs))
                        .map_err(|err| selector_error_text(&err))
                };
                Strategy::NodeLabel(NodeLabel {
                    hard: selector(self.hard.as_ref().map(|hard| &hard.value))?,
                    soft: selector(soft_selector.as_ref())?,
                })
            }
            StrategyName::ActorAffinity => {
                if soft_given {
                    return Err("soft is given per expression with type ACTOR_AFFINITY: \
                                {key: app, operator: IN, values: [web], soft: true}"
                        .to_string());
                }
                let expressions =
                    self.expressions.ok_or_else(|| ACTOR_AFFINITY_NEEDS_EXPRESSIONS.to_string())?;
                return Ok(StrategySpec::ActorAffinity(AffinityDraft {
                    match_mode: self.match_mode.map_or(MatchMode::All, |m| m.0),
                    on_peer_moved: self.on_peer_moved.map_or(OnPeerMoved::Stay, |o| o.0),
                    expressions,
                }));
            }
            StrategyName::PlacementGroup => {
                if soft_given {
                    return Err(
                        "soft is only allowed with type NODE_AFFINITY or NODE_LABEL".to_string()
                    );
                }
                let group = self.group.ok_or_else(|| PLACEMENT_GROUP_NEEDS_GROUP.to_string())?;
                Strategy::PlacementGroup(GroupPlacement {
                    group: group.0,
                    bundle: self.bundle.map(|b| b.0),
                })
            }
        };
        if soft_given && self.kind != affinity && self.kind != label {
            return Err("soft is only allowed with type NODE_AFFINITY or NODE_LABEL".to_string());
        }
        Ok(StrategySpec::Ready(strategy))
    }
}

/// Shown when NODE_LABEL has neither selector.
pub(super) const NODE_LABEL_NEEDS_SELECTORS: &str =
    "NODE_LABEL needs hard, soft or both: maps of label \
                                          key to expression, such as \
                                          {type: NODE_LABEL, hard: {zone: a}}";

/// Shown when ACTOR_AFFINITY has no expressions.
pub(super) const ACTOR_AFFINITY_NEEDS_EXPRESSIONS: &str =
    "ACTOR_AFFINITY needs expressions: write it as a map, such as {type: ACTOR_AFFINITY, \
     expressions: [{key: app, operator: IN, values: [web]}]}";

/// Shown when PLACEMENT_GROUP names no group.
pub(super) const PLACEMENT_GROUP_NEEDS_GROUP: &str =
    "PLACEMENT_GROUP needs a group: write it as a map, such as {type: PLACEMENT_GROUP, group: \
     pg-1, bundle: 0}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parsed::RequestFile;
    use crate::spec::test_support::*;
    use crate::spec::FileKind;

    #[test]
    fn strategy_accepts_names_in_any_case_and_the_map_form() {
        for (text, expected) in [
            ("spread", Strategy::Spread),
            ("Random", Strategy::Random),
            ("{type: default}", Strategy::Default),
            (
                "{type: NODE_AFFINITY, node_id: n1, soft: true}",
                Strategy::NodeAffinity(NodeAffinity {
                    node: "n1".into(),
                    soft: true,
                    spill_on_unavailable: false,
                    fail_on_unavailable: false,
                }),
            ),
        ] {
            let yaml = format!("resources: {{}}\nscheduling_strategy: {text}\n");
            let file: RequestFile = source(FileKind::Request, &yaml).parse().unwrap();
            assert_eq!(file.scheduling_strategy.unwrap().value.ready(), Some(&expected), "{text}");
        }
    }

    #[test]
    fn node_label_strategy_and_selectors_parse() {
        let yaml = "resources: {}\nscheduling_strategy:\n  type: node_label\n  \
                    hard: {zone: \"IN(a, b)\"}\n  soft: {value: \"!exists()\"}\n\
                    label_selector: {team: ml}\nfallback_strategy:\n  - label_selector: {}\n\
                    tolerations: {gpu_node: \"exists()\"}\n";
        let file: RequestFile = source(FileKind::Request, yaml).parse().unwrap();
        let expected = Strategy::NodeLabel(NodeLabel {
            hard: LabelSelector::parse([("zone", "in(a,b)")]).unwrap(),
            soft: LabelSelector::parse([("value", "!exists()")]).unwrap(),
        });
        assert_eq!(file.scheduling_strategy.unwrap().value.ready(), Some(&expected));
        let pairs = |map: &ExpressionMap| -> Vec<(String, String)> {
            map.pairs().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(pairs(&file.label_selector.unwrap().value), [("team".into(), "ml".into())]);
        assert!(pairs(&file.fallback_strategy[0].label_selector.value).is_empty());
        assert_eq!(
            pairs(&file.tolerations.unwrap().value),
            [("gpu_node".into(), "exists()".into())]
        );
    }

    #[test]
    fn strategy_errors_name_the_rule() {
        let cases = [
            ("PACK", "scheduling_strategy", "unknown scheduling strategy \"PACK\""),
            ("NODE_AFFINITY", "scheduling_strategy", "needs a node"),
            ("{type: SPREAD, soft: true}", "scheduling_strategy", "soft is only allowed"),
            ("{type: NODE_AFFINITY}", "scheduling_strategy", "node_id is required"),
            ("{type: SPREAD, weight: 2}", "scheduling_strategy.weight", "unknown field"),
            ("{type: NODE_AFFINITY, node_id: n1, soft: 1}", "scheduling_strategy.soft", ""),
        ];
        for (text, field, rule) in cases {
            let err = parse_error::<RequestFile>(&format!(
                "resources: {{}}\nscheduling_strategy: {text}\n"
            ));
            assert_eq!(err.field, field, "{text}: {}", err.message);
            assert!(err.message.contains(rule), "{text}: {}", err.message);
            assert_eq!(err.location.map(|l| l.0), Some(2), "{text}");
        }
    }
}
