//! What the scheduler is asked to place: resources and a scheduling strategy.

use thiserror::Error;

use crate::actors::{ActorAffinity, ActorSpec, DEFAULT_NAMESPACE};
use crate::node::{NodeId, NodeIndex};
use crate::placement_group::GroupId;
use crate::quantity::Quantity;
use crate::resource::{ResourceId, ResourceRegistry, ResourceSet, UnknownResources};
use crate::selector::{LabelSelector, Tolerations};

/// The user-facing `scheduling_strategy`: which stages run and how the node is chosen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Hybrid: pack until a node is `spread_threshold` full, then spread; random among the best
    /// `top_k`; requests without GPUs avoid GPU nodes.
    #[default]
    Default,
    /// Round-robin over nodes that can take the request now.
    Spread,
    /// A uniformly random node among those that can take the request now.
    Random,
    /// A named node, hard or soft.
    NodeAffinity(NodeAffinity),
    /// Nodes whose labels match `hard`, preferring those that also match `soft`.
    NodeLabel(NodeLabel),
    /// With or away from other actors, by their labels (seed 000).
    ActorAffinity(ActorAffinity),
    /// Into a placement group's reservation: one bundle, or the first bundle that can take it.
    /// The request's label selector and tolerations do not apply: the bundle's node was chosen
    /// when the group was reserved.
    PlacementGroup(GroupPlacement),
}

/// Which placement group, and which bundle of it, a request goes into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPlacement {
    /// The group.
    pub group: GroupId,
    /// A bundle index, or `None` for any bundle (tried in index order).
    pub bundle: Option<usize>,
}

/// Node-label scheduling: `hard` must hold; among the nodes that can take the request now,
/// those that also match `soft` come first (a tier above every score).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLabel {
    /// Must hold.
    pub hard: LabelSelector,
    /// Preferred.
    pub soft: LabelSelector,
}

/// Node affinity with Ray's meanings:
/// - hard (`soft: false`): only `node`. Pending while it is busy; infeasible if it does not
///   exist, is dead or draining, can never hold the request, or is busy and
///   `fail_on_unavailable` is set.
/// - soft: `node` if it can take the request now; if it can never hold it (or is gone), the
///   DEFAULT strategy over all nodes; if it is only busy, wait for it, unless
///   `spill_on_unavailable` is set, in which case DEFAULT too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAffinity {
    /// The node, by ID (it may not exist: that is a diagnosis, not an input error).
    pub node: String,
    /// Prefer rather than require.
    pub soft: bool,
    /// Soft only: go elsewhere rather than wait when the node is busy.
    pub spill_on_unavailable: bool,
    /// Hard only: fail rather than wait when the node is busy.
    pub fail_on_unavailable: bool,
}

/// A request rejected before scheduling. Displays as `field: rule`; callers that nest the
/// request in a larger document use [`RequestError::field`] and [`RequestError::rule`].
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RequestError {
    /// A unit-instance quantity of 1 or more that is not whole.
    FractionalInstances {
        /// The resource.
        resource: String,
        /// The rejected quantity.
        quantity: Quantity,
    },
    /// `spill_on_unavailable` on hard affinity, or `fail_on_unavailable` on soft.
    AffinityFlag {
        /// The flag's name.
        field: &'static str,
        /// The value of `soft` the flag needs.
        needs_soft: bool,
    },
    /// The affinity node ID is malformed; the rule it breaks.
    AffinityNode(String),
    /// A resource ID that the cluster's registry did not give (a programming error).
    ForeignResource(ResourceId),
}

impl RequestError {
    /// The field's path within the request (`resources.GPU`, `scheduling_strategy.node_id`).
    pub fn field(&self) -> String {
        match self {
            RequestError::FractionalInstances { resource, .. } => format!("resources.{resource}"),
            RequestError::AffinityFlag { field, .. } => format!("scheduling_strategy.{field}"),
            RequestError::AffinityNode(_) => "scheduling_strategy.node_id".to_string(),
            RequestError::ForeignResource(_) => "resources".to_string(),
        }
    }

    /// The rule broken, without the field.
    pub fn rule(&self) -> String {
        match self {
            RequestError::FractionalInstances { resource, quantity } => format!(
                "{quantity} is not allowed: {resource} is shared per instance, so a request must \
                 be below 1 (a share of one instance) or a whole number of instances"
            ),
            RequestError::AffinityFlag { needs_soft, .. } => {
                format!("only allowed when soft is {needs_soft}")
            }
            RequestError::AffinityNode(rule) => rule.clone(),
            RequestError::ForeignResource(id) => {
                format!("resource #{} is not one of this cluster's resources", id.index())
            }
        }
    }
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field(), self.rule())
    }
}

/// A request to place one actor or task.
///
/// What most requests leave at its default (the strategy, selectors, tolerations, unknown
/// resources) is kept boxed and only when set: a head holds a request per actor for the
/// actor's whole life, and these parts made up half of it (296 bytes inline, now 152).
#[derive(Clone, Debug, Default)]
pub struct Request {
    resources: ResourceSet,
    preferred_node: Option<NodeIndex>,
    /// Set for an actor: its ID, namespace and labels, recorded when it is placed.
    actor: Option<ActorSpec>,
    /// `None` while every part of it has its default.
    rare: Option<Box<Rare>>,
}

/// The parts of a [`Request`] that most requests leave at their default.
#[derive(Clone, Debug, Default)]
struct Rare {
    strategy: Strategy,
    /// Must hold on the node, whatever the strategy (seed 003's `label_selector`).
    label_selector: LabelSelector,
    /// Selectors tried in order when `label_selector` finds no node that can take the request
    /// now (seed 003's `fallback_strategy`).
    fallback: Vec<LabelSelector>,
    /// Taints the request accepts (seed 004).
    tolerations: Tolerations,
    /// Quantities of resources no node has (yet): the request is infeasible while any is left.
    unknown: UnknownResources,
}

/// What [`Request`]'s accessors answer when it has no [`Rare`] part.
static NO_RARE: Rare = Rare {
    strategy: Strategy::Default,
    label_selector: LabelSelector::EMPTY,
    fallback: Vec::new(),
    tolerations: Tolerations(LabelSelector::EMPTY),
    unknown: UnknownResources::EMPTY,
};

impl PartialEq for Request {
    /// Equal when every part is, whether or not a default part is boxed.
    fn eq(&self, other: &Request) -> bool {
        let (a, b) = (self.rare(), other.rare());
        self.resources == other.resources
            && self.preferred_node == other.preferred_node
            && self.actor == other.actor
            && a.strategy == b.strategy
            && a.label_selector == b.label_selector
            && a.fallback == b.fallback
            && a.tolerations == b.tolerations
            && a.unknown == b.unknown
    }
}

impl Eq for Request {}

impl Request {
    /// A validated request: unit-instance quantities are below 1 or whole; affinity flags fit.
    pub fn new(
        resources: ResourceSet,
        strategy: Strategy,
        registry: &ResourceRegistry,
    ) -> Result<Request, RequestError> {
        for (resource, quantity) in resources.iter() {
            if !registry.contains(resource) {
                return Err(RequestError::ForeignResource(resource));
            }
            if registry.is_unit_instance(resource)
                && quantity > Quantity::ONE
                && !quantity.is_whole()
            {
                return Err(RequestError::FractionalInstances {
                    resource: registry.name(resource).to_string(),
                    quantity,
                });
            }
        }
        if let Strategy::NodeAffinity(affinity) = &strategy {
            NodeId::new(&affinity.node).map_err(|e| RequestError::AffinityNode(e.rule()))?;
            if affinity.spill_on_unavailable && !affinity.soft {
                return Err(RequestError::AffinityFlag {
                    field: "spill_on_unavailable",
                    needs_soft: true,
                });
            }
            if affinity.fail_on_unavailable && affinity.soft {
                return Err(RequestError::AffinityFlag {
                    field: "fail_on_unavailable",
                    needs_soft: false,
                });
            }
        }
        let mut request = Request { resources, ..Request::default() };
        if strategy != Strategy::Default {
            request.rare_mut().strategy = strategy;
        }
        Ok(request)
    }

    fn rare(&self) -> &Rare {
        self.rare.as_deref().unwrap_or(&NO_RARE)
    }

    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The node the request comes from (the caller's node), which wins ties under DEFAULT.
    pub fn with_preferred_node(mut self, node: Option<NodeIndex>) -> Request {
        self.preferred_node = node;
        self
    }

    /// Requires `selector` to hold on the node.
    pub fn with_label_selector(mut self, selector: LabelSelector) -> Request {
        if !selector.is_empty() || self.rare.is_some() {
            self.rare_mut().label_selector = selector;
        }
        self
    }

    /// Alternatives to `label_selector`, tried in order.
    pub fn with_fallback(mut self, fallback: Vec<LabelSelector>) -> Request {
        if !fallback.is_empty() || self.rare.is_some() {
            self.rare_mut().fallback = fallback;
        }
        self
    }

    /// Makes this the request of an actor, recorded in the actor index once placed.
    pub fn with_actor(mut self, actor: ActorSpec) -> Request {
        self.actor = Some(actor);
        self
    }

    /// Also asks for these resources, which no node has (yet): see [`UnknownResources`].
    pub fn with_unknown_resources(mut self, unknown: UnknownResources) -> Request {
        if !unknown.is_empty() || self.rare.is_some() {
            self.rare_mut().unknown = unknown;
        }
        self
    }

    /// The resources asked for that no node has (yet).
    pub fn unknown_resources(&self) -> &UnknownResources {
        &self.rare().unknown
    }

    /// Takes in the resources a node has brought since the request was made; true when any
    /// did (the request may be placeable now). Names are never unit-instance when interned
    /// after the registry was made, so the quantities need no new check.
    pub fn resolve_unknown(&mut self, registry: &ResourceRegistry) -> bool {
        match self.rare.as_deref_mut() {
            Some(rare) if !rare.unknown.is_empty() => {
                rare.unknown.resolve(registry, &mut self.resources)
            }
            _ => false,
        }
    }

    /// The actor this request places, if it is an actor's.
    pub fn actor(&self) -> Option<&ActorSpec> {
        self.actor.as_ref()
    }

    /// The namespace actor affinity looks in: the actor's, or `default` for a task.
    pub fn namespace(&self) -> &str {
        self.actor.as_ref().map_or(DEFAULT_NAMESPACE, |a| a.namespace.as_str())
    }

    /// Accepts nodes with these taints.
    pub fn with_tolerations(mut self, tolerations: Tolerations) -> Request {
        if !tolerations.is_empty() || self.rare.is_some() {
            self.rare_mut().tolerations = tolerations;
        }
        self
    }

    /// The label selector.
    pub fn label_selector(&self) -> &LabelSelector {
        &self.rare().label_selector
    }

    /// The fallback selectors.
    pub fn fallback(&self) -> &[LabelSelector] {
        &self.rare().fallback
    }

    /// The tolerations.
    pub fn tolerations(&self) -> &Tolerations {
        &self.rare().tolerations
    }

    /// The selector of alternative `i`: 0 is `label_selector`, `i ≥ 1` is `fallback[i − 1]`.
    pub fn alternative(&self, i: usize) -> Option<&LabelSelector> {
        if i == 0 {
            Some(self.label_selector())
        } else {
            self.fallback().get(i - 1)
        }
    }

    /// The resources to reserve.
    pub fn resources(&self) -> &ResourceSet {
        &self.resources
    }

    /// The strategy.
    pub fn strategy(&self) -> &Strategy {
        &self.rare().strategy
    }

    /// The caller's node, if any.
    pub fn preferred_node(&self) -> Option<NodeIndex> {
        self.preferred_node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(gpu: &str) -> ResourceSet {
        [(ResourceId::GPU, Quantity::parse(gpu).unwrap())].into_iter().collect()
    }

    #[test]
    fn defaults_take_no_box_and_set_parts_read_back() {
        let registry = ResourceRegistry::default();
        let plain = Request::new(set("1"), Strategy::Default, &registry)
            .unwrap()
            .with_label_selector(LabelSelector::default())
            .with_fallback(Vec::new())
            .with_tolerations(Tolerations::default())
            .with_unknown_resources(UnknownResources::default());
        assert!(plain.rare.is_none());
        assert_eq!(plain.strategy(), &Strategy::Default);
        assert!(plain.label_selector().is_empty() && plain.alternative(1).is_none());

        let selector = LabelSelector::parse([("zone", "in(a,b)")]).unwrap();
        let tolerations = Tolerations::parse([("dedicated", "ml")]).unwrap();
        let full = Request::new(set("1"), Strategy::Spread, &registry)
            .unwrap()
            .with_label_selector(selector.clone())
            .with_fallback(vec![LabelSelector::default()])
            .with_tolerations(tolerations.clone());
        assert_eq!(full.strategy(), &Strategy::Spread);
        assert_eq!(full.label_selector(), &selector);
        assert_eq!(full.alternative(1), Some(&LabelSelector::default()));
        assert_eq!(full.tolerations(), &tolerations);
        assert_ne!(full, plain);
    }

    #[test]
    fn equality_does_not_depend_on_whether_defaults_are_boxed() {
        let mut registry = ResourceRegistry::default();
        let mut unknown = UnknownResources::default();
        unknown.push("TPU", Quantity::ONE);
        let mut waiting = Request::new(set("1"), Strategy::Default, &registry)
            .unwrap()
            .with_unknown_resources(unknown);
        let tpu = registry.intern("TPU").unwrap();
        assert!(waiting.resolve_unknown(&registry));
        // The boxed part now holds only defaults; the request equals one made with the TPU.
        assert!(waiting.rare.is_some() && waiting.unknown_resources().is_empty());
        let mut resources = set("1");
        resources.set(tpu, Quantity::ONE);
        assert_eq!(waiting, Request::new(resources, Strategy::Default, &registry).unwrap());
    }

    #[test]
    fn gpu_quantities_are_fractions_or_whole() {
        let registry = ResourceRegistry::default();
        for ok in ["0.25", "0.9999", "1", "2", "8"] {
            assert!(Request::new(set(ok), Strategy::Default, &registry).is_ok(), "{ok}");
        }
        for bad in ["1.5", "2.0001"] {
            let err = Request::new(set(bad), Strategy::Default, &registry).unwrap_err().to_string();
            assert!(err.starts_with("resources.GPU: ") && err.contains("whole number"), "{err}");
        }
        let custom = ResourceRegistry::with_unit_instance(["TPU"]).unwrap();
        assert!(
            Request::new(set("1.5"), Strategy::Default, &custom).is_ok(),
            "GPU is no longer per instance"
        );
    }

    #[test]
    fn resources_from_another_registry_are_rejected() {
        let mut big = ResourceRegistry::default();
        let tpu = big.intern("TPU").unwrap();
        let set: ResourceSet = [(tpu, Quantity::ONE)].into_iter().collect();
        let err = Request::new(set, Strategy::Default, &ResourceRegistry::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "resources: resource #4 is not one of this cluster's resources"
        );
    }

    #[test]
    fn affinity_flags_must_match_softness() {
        let registry = ResourceRegistry::default();
        let affinity = |soft, spill, fail| {
            Strategy::NodeAffinity(NodeAffinity {
                node: "n1".into(),
                soft,
                spill_on_unavailable: spill,
                fail_on_unavailable: fail,
            })
        };
        let err = Request::new(set("1"), affinity(false, true, false), &registry).unwrap_err();
        assert!(err.to_string().contains("scheduling_strategy.spill_on_unavailable"), "{err}");
        let err = Request::new(set("1"), affinity(true, false, true), &registry).unwrap_err();
        assert!(err.to_string().contains("scheduling_strategy.fail_on_unavailable"), "{err}");
        assert!(Request::new(set("1"), affinity(true, true, false), &registry).is_ok());
        let bad_node = Strategy::NodeAffinity(NodeAffinity {
            node: "no such/node".into(),
            soft: false,
            spill_on_unavailable: false,
            fail_on_unavailable: false,
        });
        let err = Request::new(set("1"), bad_node, &registry).unwrap_err();
        assert!(err.to_string().contains("scheduling_strategy.node_id"), "{err}");
    }
}
