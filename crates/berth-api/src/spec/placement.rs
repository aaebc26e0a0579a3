//! The typed placement of an actor or task ([`PlacementSpec`]) and of a placement group
//! ([`PlacementGroupSpec`]): one form for the request file, the REST bodies and the head's
//! stored records, read with every rule a value can check alone, written back as the same
//! JSON, and built into the core's [`Request`] or [`GroupSpec`] here and nowhere else.

use berth_core::actors::ActorSpec;
use berth_core::placement_group::{GroupId, GroupSpec, GroupStrategy};
use berth_core::selector::{LabelSelector, Tolerations};
use berth_core::{Cluster, Request, RequestError, Strategy};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::actors::affinity;
use super::cluster::request_amounts;
use super::groups::{build_group, GroupFallback, GroupStrategyName, SelectorList};
use super::request::selector;
use super::schema;
use super::source::core_path;
use super::StrategySpec;
use super::{At, ExpressionMap, FallbackEntry, InputError, Located, ResourceMap, Source};

/// Where and on what an actor or task runs: what it reserves, how a node is chosen, which
/// labels the node must have (and the alternatives), which taints it accepts.
///
/// The head keeps one per actor and task: the fields most requests leave out are boxed, so the
/// whole is no larger than the five JSON texts it replaced (80 bytes).
// No `deny_unknown_fields`: the bodies that embed it (flattened) refuse unknown keys
// themselves, and with it the OpenAPI document would forbid the bodies' own keys.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct PlacementSpec {
    /// What to reserve: resource name to amount, `{CPU: 1, GPU: 0.5}`.
    #[schema(value_type = schema::Resources)]
    pub resources: Located<ResourceMap>,
    /// DEFAULT, SPREAD, RANDOM, or a map (NODE_AFFINITY, NODE_LABEL, ACTOR_AFFINITY,
    /// PLACEMENT_GROUP); default DEFAULT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<schema::SchedulingStrategy>)]
    pub scheduling_strategy: Option<Box<Located<StrategySpec>>>,
    /// Label key to expression: must hold on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<schema::Selector>)]
    pub label_selector: Option<Box<Located<ExpressionMap>>>,
    /// Selectors tried in order when `label_selector` finds no node that can take the request
    /// now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_strategy: Vec<FallbackEntry>,
    /// Taint key to expression: the taints it accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<schema::Selector>)]
    pub tolerations: Option<Box<Located<ExpressionMap>>>,
}

impl PlacementSpec {
    /// Reads a spec from a JSON value (`{"resources": {"CPU": 1}}`), by the same rules as a
    /// body.
    pub fn from_json(value: serde_json::Value) -> Result<PlacementSpec, serde_json::Error> {
        const KEYS: &[&str] = &[
            "resources",
            "scheduling_strategy",
            "label_selector",
            "fallback_strategy",
            "tolerations",
        ];
        refuse_unknown(&value, KEYS)?;
        serde_json::from_value(value)
    }

    /// Builds the core request against `cluster`, an actor's when `actor` is given. Errors
    /// name the field as `source` has it (the request file's and a body's paths are the same).
    /// A resource no node has is a reason (the request is infeasible), not an input error,
    /// and is not interned: only nodes grow the registry.
    pub fn build(
        &self,
        source: &Source,
        cluster: &Cluster,
        actor: Option<ActorSpec>,
    ) -> Result<Request, InputError> {
        let resource_at = self.resources.referenced;
        let (resources, unknown) =
            request_amounts(source, cluster, &self.resources.value, "resources", resource_at)?;
        let (strategy, strategy_at) = match &self.scheduling_strategy {
            Some(spec) => {
                let strategy = match &spec.value {
                    StrategySpec::Ready(strategy) => strategy.clone(),
                    StrategySpec::ActorAffinity(draft) => affinity(source, draft)?,
                };
                (strategy, Some(spec.referenced))
            }
            None => (Strategy::Default, None),
        };
        if let Strategy::PlacementGroup(_) = strategy {
            // The bundle's node was chosen when the group was reserved.
            let selectors = [
                ("label_selector", self.label_selector.as_ref().map(|l| l.referenced)),
                (
                    "fallback_strategy",
                    self.fallback_strategy.first().map(|f| f.label_selector.referenced),
                ),
                ("tolerations", self.tolerations.as_ref().map(|t| t.referenced)),
            ];
            if let Some((key, at)) = selectors.iter().find(|(_, given)| given.is_some()) {
                return Err(source.invalid(
                    *key,
                    format!(
                        "{key} does not apply with scheduling_strategy PLACEMENT_GROUP: the \
                         request runs on its bundle's node, chosen when the group was reserved \
                         (give selectors and tolerations to the group)"
                    ),
                    *at,
                ));
            }
        }
        let request = Request::new(resources, strategy, cluster.registry())
            .map_err(|err| {
                let at = match err {
                    RequestError::FractionalInstances { .. } | RequestError::ForeignResource(_) => {
                        Some(resource_at)
                    }
                    RequestError::AffinityFlag { .. } | RequestError::AffinityNode(_) => {
                        strategy_at
                    }
                };
                // The spec is the request: the core's paths start at its top.
                source.invalid(core_path(&err.field(), str::to_string), err.rule(), at)
            })?
            .with_unknown_resources(unknown);
        let label_selector = match &self.label_selector {
            None => LabelSelector::default(),
            Some(map) => selector(source, map, "label_selector")?,
        };
        let fallback = self
            .fallback_strategy
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                let field = format!("fallback_strategy[{i}].label_selector");
                selector(source, &entry.label_selector, &field)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tolerations = match &self.tolerations {
            None => Tolerations::default(),
            Some(map) => Tolerations(selector(source, map, "tolerations")?),
        };
        let request = request
            .with_label_selector(label_selector)
            .with_fallback(fallback)
            .with_tolerations(tolerations);
        Ok(match actor {
            Some(actor) => request.with_actor(actor),
            None => request,
        })
    }
}

/// How a placement group is placed: its bundles (and the alternatives), how they spread,
/// which labels their nodes must have, which taints they accept.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct PlacementGroupSpec {
    /// PACK (default), SPREAD, STRICT_PACK or STRICT_SPREAD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<schema::GroupStrategy>)]
    pub strategy: Option<GroupStrategyName>,
    /// Resource maps, one per bundle: `[{GPU: 1}, {GPU: 1}]`.
    #[schema(value_type = Vec<schema::Resources>)]
    pub bundles: Located<Vec<Located<ResourceMap>>>,
    /// One selector per bundle, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<schema::Selector>>)]
    pub bundle_label_selector: Option<SelectorList>,
    /// Taint key to expression, for every bundle of every alternative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<schema::Selector>)]
    pub tolerations: Option<Located<ExpressionMap>>,
    /// Alternatives tried in order when the bundles cannot be reserved now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<GroupFallback>)]
    pub fallback_strategy: Vec<Located<GroupFallback>>,
}

impl PlacementGroupSpec {
    /// Reads a spec from a JSON value (`{"bundles": [{"CPU": 1}]}`), by the same rules as a
    /// body.
    pub fn from_json(value: serde_json::Value) -> Result<PlacementGroupSpec, serde_json::Error> {
        const KEYS: &[&str] =
            &["strategy", "bundles", "bundle_label_selector", "tolerations", "fallback_strategy"];
        refuse_unknown(&value, KEYS)?;
        serde_json::from_value(value)
    }

    /// The strategy, PACK when none is given.
    pub fn group_strategy(&self) -> GroupStrategy {
        self.strategy.as_ref().map_or(GroupStrategy::Pack, |s| s.0)
    }

    /// Builds the core group `id` against `cluster`. `top` is where the spec is in `source`
    /// (`placement_group` in a request file, empty in a body), `at` where it starts.
    pub fn build(
        &self,
        source: &Source,
        cluster: &Cluster,
        id: GroupId,
        name: &str,
        namespace: &str,
        (top, at): (&str, At),
    ) -> Result<GroupSpec, InputError> {
        build_group(source, cluster, self, id, (name, namespace), (top, at))
    }
}

/// Refuses a key of `value` (an object) that is not one of `keys`, as the bodies do.
fn refuse_unknown(
    value: &serde_json::Value,
    keys: &'static [&'static str],
) -> Result<(), serde_json::Error> {
    let unknown =
        value.as_object().and_then(|map| map.keys().find(|k| !keys.contains(&k.as_str())));
    match unknown {
        Some(key) => Err(serde::de::Error::unknown_field(key, keys)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::ResourceRegistry;

    #[test]
    fn a_spec_is_written_back_as_it_was_read_and_reads_again_the_same() {
        for body in [
            r#"{"resources":{"CPU":1,"GPU":0.5,"memory":4294967296}}"#,
            r#"{"resources":{},"scheduling_strategy":"SPREAD"}"#,
            r#"{"resources":{"CPU":1},"scheduling_strategy":{"type":"NODE_AFFINITY","node_id":"n1","soft":true,"spill_on_unavailable":true}}"#,
            r#"{"resources":{"CPU":1},"scheduling_strategy":{"type":"NODE_LABEL","hard":{"zone":"in(a,b)"},"soft":{"gpu":"!exists()"}}}"#,
            r#"{"resources":{"CPU":1},"scheduling_strategy":{"type":"ACTOR_AFFINITY","expressions":[{"key":"app","operator":"IN","values":["web"],"soft":true,"topology_key":"zone"}],"match":"any","on_peer_moved":"follow"}}"#,
            r#"{"resources":{"CPU":1},"scheduling_strategy":{"type":"PLACEMENT_GROUP","group":"pg-1","bundle":0}}"#,
            r#"{"resources":{"CPU":1},"label_selector":{"zone":"in(a,b)"},"fallback_strategy":[{"label_selector":{}}],"tolerations":{"gpu":"exists()"}}"#,
        ] {
            let spec: PlacementSpec = serde_json::from_str(body).unwrap();
            let written = serde_json::to_string(&spec).unwrap();
            assert_eq!(written, body);
            assert_eq!(serde_json::from_str::<PlacementSpec>(&written).unwrap(), spec);
        }
        // Client spellings come back canonical.
        let spec: PlacementSpec = serde_json::from_str(
            r#"{"resources":{"memory":"4Gi","CPU":0.50},"scheduling_strategy":"spread"}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&spec).unwrap(),
            r#"{"resources":{"memory":4294967296,"CPU":0.5},"scheduling_strategy":"SPREAD"}"#
        );
        for body in [
            r#"{"bundles":[{"GPU":1},{"GPU":1}],"strategy":"STRICT_SPREAD"}"#,
            r#"{"strategy":"PACK","bundles":[{"CPU":1}],"bundle_label_selector":[{"zone":"a"}],"tolerations":{"t":"exists()"},"fallback_strategy":[{"bundles":[{"CPU":2}]}]}"#,
        ] {
            let spec: PlacementGroupSpec = serde_json::from_str(body).unwrap();
            let again: PlacementGroupSpec =
                serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
            assert_eq!(again, spec);
        }
    }

    #[test]
    fn a_spec_is_no_larger_than_the_json_texts_it_replaced() {
        assert!(
            std::mem::size_of::<PlacementSpec>() <= 80,
            "{}",
            std::mem::size_of::<PlacementSpec>()
        );
    }

    #[test]
    fn build_names_the_body_field_and_makes_the_core_request() {
        let cluster = Cluster::new(ResourceRegistry::default());
        let source = Source::body("POST /api/v1/tasks");
        let spec = PlacementSpec::from_json(serde_json::json!({
            "resources": {"GPU": 1.5},
        }))
        .unwrap();
        let err = spec.build(&source, &cluster, None).unwrap_err().to_string();
        assert!(err.contains("resources.GPU"), "{err}");
        let spec = PlacementSpec::from_json(serde_json::json!({
            "resources": {"CPU": 1},
            "scheduling_strategy": {"type": "PLACEMENT_GROUP", "group": "pg-1"},
            "tolerations": {"a": "exists()"},
        }))
        .unwrap();
        let err = spec.build(&source, &cluster, None).unwrap_err().to_string();
        assert!(err.contains("tolerations: tolerations does not apply"), "{err}");
        let spec = PlacementSpec::from_json(serde_json::json!({"resources": {"CPU": 1}})).unwrap();
        assert!(spec.build(&source, &cluster, None).is_ok());
        let typo = PlacementSpec::from_json(serde_json::json!({"resources": {}, "toleration": {}}));
        assert!(typo.unwrap_err().to_string().contains("unknown field `toleration`"));
    }
}
