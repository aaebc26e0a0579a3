//! Placement groups: atomic reservations of resource bundles, and the small ledgers that let
//! tasks and actors use a bundle's reservation.
//!
//! A group is a list of bundles (each a resource set), a strategy, optional per-bundle label
//! selectors, tolerations for every bundle, and fallback alternatives (seed 003: "prefer 2
//! H100s, fall back to 4 A100s, then 8 V100s"). Either every bundle of one alternative is
//! reserved, or none is. Planning is in [`crate::pipeline::group`].
//!
//! Once reserved, a bundle is a ledger of its own: work placed into it takes from the bundle's
//! reservation (including the GPU instances reserved for it), never from the node's free pool,
//! and a bundle cannot be over-committed.

use std::fmt;

use smallvec::SmallVec;
use thiserror::Error;

use crate::actors::ActorId;
use crate::instances::{InstanceId, InstanceShare, InstanceShares};
use crate::labels::{validate_value, LabelError};
use crate::node::{NodeIndex, NodeShares};
use crate::quantity::Quantity;
use crate::resource::{ResourceId, ResourceRegistry, ResourceSet, Shortfall, UnknownResources};
use crate::selector::{LabelSelector, Tolerations};

/// A placement group's ID: the syntax of a label value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(String);

impl GroupId {
    /// Validates `text` as a group ID.
    pub fn new(text: &str) -> Result<GroupId, LabelError> {
        if text.is_empty() {
            return Err(LabelError::Value {
                key: "placement_group".into(),
                value: String::new(),
                rule: "a placement group ID is not empty",
            });
        }
        validate_value("placement_group", text)?;
        Ok(GroupId(text.to_string()))
    }

    /// The ID as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for GroupId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// How a group's bundles spread over nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupStrategy {
    /// As few nodes as possible, best effort.
    Pack,
    /// Distinct nodes where possible, best effort.
    Spread,
    /// All bundles on one node.
    StrictPack,
    /// Every bundle on a different node.
    StrictSpread,
}

impl GroupStrategy {
    /// The name as written in files: `PACK`, `SPREAD`, `STRICT_PACK`, `STRICT_SPREAD`.
    pub fn name(self) -> &'static str {
        match self {
            GroupStrategy::Pack => "PACK",
            GroupStrategy::Spread => "SPREAD",
            GroupStrategy::StrictPack => "STRICT_PACK",
            GroupStrategy::StrictSpread => "STRICT_SPREAD",
        }
    }

    /// Parses a name, case-insensitively.
    pub fn parse(text: &str) -> Option<GroupStrategy> {
        match text.to_ascii_uppercase().replace('-', "_").as_str() {
            "PACK" => Some(GroupStrategy::Pack),
            "SPREAD" => Some(GroupStrategy::Spread),
            "STRICT_PACK" => Some(GroupStrategy::StrictPack),
            "STRICT_SPREAD" => Some(GroupStrategy::StrictSpread),
            _ => None,
        }
    }
}

/// One alternative: the bundles and, optionally, one label selector per bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleSet {
    /// The bundles.
    pub bundles: Vec<ResourceSet>,
    /// Empty, or one selector per bundle.
    pub selectors: Vec<LabelSelector>,
    /// Empty, or per bundle the resources it asks for that no node has (yet): while any is
    /// left, this alternative is infeasible (see [`UnknownResources`]).
    pub unknown: Vec<UnknownResources>,
}

impl BundleSet {
    /// The selector of bundle `i` (the empty selector when none was given).
    pub fn selector(&self, i: usize) -> Option<&LabelSelector> {
        self.selectors.get(i)
    }

    /// Why this alternative can never be reserved as it is: a bundle asks for a resource no
    /// node has.
    pub fn unknown_reason(&self) -> Option<String> {
        self.unknown
            .iter()
            .enumerate()
            .find_map(|(i, u)| Some(format!("bundle {i}: {}", u.reason()?)))
    }

    /// Takes in the resources nodes have brought since; true when any did.
    fn resolve_unknown(&mut self, registry: &ResourceRegistry) -> bool {
        let mut any = false;
        for (unknown, bundle) in self.unknown.iter_mut().zip(self.bundles.iter_mut()) {
            any |= unknown.resolve(registry, bundle);
        }
        any
    }
}

/// A placement group as requested.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    /// Its ID.
    pub id: GroupId,
    /// A human name (may be empty).
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// The strategy, for every alternative.
    pub strategy: GroupStrategy,
    /// The alternatives in order: the bundles asked for, then each `fallback_strategy` entry.
    pub alternatives: Vec<BundleSet>,
    /// Tolerations applied to every bundle.
    pub tolerations: Tolerations,
}

impl GroupSpec {
    /// Takes in the resources nodes have brought since the group was asked for (see
    /// [`UnknownResources`]); true when any did, so the group may be placeable now.
    pub fn resolve_unknown(&mut self, registry: &ResourceRegistry) -> bool {
        let mut any = false;
        for alternative in &mut self.alternatives {
            any |= alternative.resolve_unknown(registry);
        }
        any
    }
}

/// A group that cannot be accepted. Displays as `field: rule`; callers that nest the group in
/// a larger document use [`GroupError::field`] and [`GroupError::rule`].
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum GroupError {
    /// An alternative without bundles.
    NoBundles {
        /// `bundles` or `fallback_strategy[i].bundles`.
        field: String,
    },
    /// A bundle that asks for nothing.
    EmptyBundle {
        /// The bundle's path.
        field: String,
    },
    /// Selectors whose count differs from the bundles'.
    SelectorCount {
        /// The selectors' path.
        field: String,
        /// How many selectors.
        selectors: usize,
        /// How many bundles.
        bundles: usize,
    },
    /// A unit-instance quantity of 1 or more that is not whole.
    FractionalInstances {
        /// The quantity's path.
        field: String,
        /// The resource.
        resource: String,
        /// The quantity.
        quantity: Quantity,
    },
    /// A resource from another registry.
    ForeignResource {
        /// The bundle's path.
        field: String,
    },
    /// A malformed namespace.
    Namespace(String),
}

impl GroupError {
    /// The field's path within the group (`bundles[1].GPU`, `fallback_strategy[0].bundles`).
    pub fn field(&self) -> &str {
        match self {
            GroupError::NoBundles { field }
            | GroupError::EmptyBundle { field }
            | GroupError::SelectorCount { field, .. }
            | GroupError::FractionalInstances { field, .. }
            | GroupError::ForeignResource { field } => field,
            GroupError::Namespace(_) => "namespace",
        }
    }

    /// The rule broken, without the field.
    pub fn rule(&self) -> String {
        match self {
            GroupError::NoBundles { .. } => "a placement group needs at least one bundle".into(),
            GroupError::EmptyBundle { .. } => "a bundle must ask for at least one resource".into(),
            GroupError::SelectorCount { selectors, bundles, .. } => {
                format!("{selectors} selectors for {bundles} bundles; give one per bundle or none")
            }
            GroupError::FractionalInstances { resource, quantity, .. } => format!(
                "{quantity} is not allowed: {resource} is shared per instance, so a bundle asks for \
                 a share below 1 or whole instances"
            ),
            GroupError::ForeignResource { .. } => {
                "a resource that is not one of this cluster's resources".into()
            }
            GroupError::Namespace(namespace) => format!(
                "{namespace:?} is invalid: use 1 to 63 characters of letters, digits, '-', '_' \
                 and '.', beginning and ending with a letter or digit"
            ),
        }
    }
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field(), self.rule())
    }
}

impl GroupSpec {
    /// Checks every alternative: bundles present and non-empty, selectors one per bundle (or
    /// none), unit-instance quantities below 1 or whole.
    pub fn validate(&self, registry: &ResourceRegistry) -> Result<(), GroupError> {
        if self.namespace.is_empty() || validate_value("namespace", &self.namespace).is_err() {
            return Err(GroupError::Namespace(self.namespace.clone()));
        }
        for (i, alternative) in self.alternatives.iter().enumerate() {
            let prefix =
                if i == 0 { String::new() } else { format!("fallback_strategy[{}].", i - 1) };
            if alternative.bundles.is_empty() {
                return Err(GroupError::NoBundles { field: format!("{prefix}bundles") });
            }
            if !alternative.selectors.is_empty()
                && alternative.selectors.len() != alternative.bundles.len()
            {
                return Err(GroupError::SelectorCount {
                    field: format!("{prefix}bundle_label_selector"),
                    selectors: alternative.selectors.len(),
                    bundles: alternative.bundles.len(),
                });
            }
            for (b, bundle) in alternative.bundles.iter().enumerate() {
                let field = format!("{prefix}bundles[{b}]");
                let unknown = alternative.unknown.get(b).is_some_and(|u| !u.is_empty());
                if bundle.is_empty() && !unknown {
                    return Err(GroupError::EmptyBundle { field });
                }
                for (resource, quantity) in bundle.iter() {
                    if !registry.contains(resource) {
                        return Err(GroupError::ForeignResource { field });
                    }
                    if registry.is_unit_instance(resource)
                        && quantity > Quantity::ONE
                        && !quantity.is_whole()
                    {
                        let name = registry.name(resource).to_string();
                        return Err(GroupError::FractionalInstances {
                            field: format!("{field}.{name}"),
                            resource: name,
                            quantity,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// A reserved instance share of a bundle and how much of it is still free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BundleInstance {
    share: InstanceShare,
    free: Quantity,
}

/// A bundle's own ledger: what it reserved on its node and what is still free of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleLedger {
    /// The node the bundle is on.
    pub node: NodeIndex,
    reserved: ResourceSet,
    available: ResourceSet,
    /// The node-level shares the bundle holds, to give back on removal.
    node_shares: NodeShares,
    instances: SmallVec<[(ResourceId, SmallVec<[BundleInstance; 2]>); 1]>,
    /// Actors placed into the bundle, reported when the group is removed.
    pub actors: Vec<ActorId>,
}

impl BundleLedger {
    pub(crate) fn new(
        node: NodeIndex,
        reserved: ResourceSet,
        node_shares: NodeShares,
    ) -> BundleLedger {
        let instances = node_shares
            .iter()
            .map(|(resource, shares)| {
                let entries = shares
                    .iter()
                    .map(|&share| BundleInstance { share, free: share.quantity })
                    .collect();
                (*resource, entries)
            })
            .collect();
        BundleLedger {
            node,
            available: reserved.clone(),
            reserved,
            node_shares,
            instances,
            actors: Vec::new(),
        }
    }

    /// What the bundle reserved.
    pub fn reserved(&self) -> &ResourceSet {
        &self.reserved
    }

    /// What is still free of the reservation.
    pub fn available(&self) -> &ResourceSet {
        &self.available
    }

    /// The node-level shares the bundle holds.
    pub(crate) fn node_shares(&self) -> &NodeShares {
        &self.node_shares
    }

    /// The instance IDs reserved for a unit-instance resource.
    pub fn instance_ids(&self, resource: ResourceId) -> Vec<InstanceId> {
        self.instances
            .iter()
            .filter(|(r, _)| *r == resource)
            .flat_map(|(_, entries)| entries.iter().map(|e| e.share.instance))
            .collect()
    }

    /// The first resource `request` needs more of than the reservation holds at all.
    pub fn total_shortfall(&self, request: &ResourceSet) -> Option<Shortfall> {
        request.first_shortfall(&self.reserved)
    }

    /// Why `request` cannot be taken from the bundle now, if it cannot: a resource short, or
    /// a unit-instance quantity that no reserved instance can serve in the required shape.
    pub fn unfit(&self, request: &ResourceSet) -> Option<Shortfall> {
        if let Some(shortfall) = request.first_shortfall(&self.available) {
            return Some(shortfall);
        }
        request.iter().find_map(|(resource, quantity)| {
            let entries = self.instances.iter().find(|(r, _)| *r == resource).map(|(_, e)| e)?;
            let fits = if quantity < Quantity::ONE {
                entries.iter().any(|e| e.free >= quantity)
            } else {
                entries.iter().filter(|e| e.free == Quantity::ONE).count() as i64
                    >= quantity.whole()
            };
            (!fits).then_some(Shortfall {
                resource,
                requested: quantity,
                have: self.available.get(resource),
            })
        })
    }

    /// Takes `request` from the reservation; `None` (and no change) when it does not fit.
    pub(crate) fn take(&mut self, request: &ResourceSet) -> Option<NodeShares> {
        if self.unfit(request).is_some() {
            return None;
        }
        let mut taken = NodeShares::new();
        for (resource, quantity) in request.iter() {
            let Some((_, entries)) = self.instances.iter_mut().find(|(r, _)| *r == resource) else {
                continue;
            };
            let mut shares = InstanceShares::new();
            if quantity < Quantity::ONE {
                let entry = entries
                    .iter_mut()
                    .filter(|e| e.free >= quantity)
                    .min_by_key(|e| (e.free, e.share.instance))
                    .expect("fit was checked");
                entry.free -= quantity;
                shares.push(InstanceShare { quantity, ..entry.share });
            } else {
                for entry in entries
                    .iter_mut()
                    .filter(|e| e.free == Quantity::ONE)
                    .take(quantity.whole() as usize)
                {
                    entry.free = Quantity::ZERO;
                    shares.push(InstanceShare { quantity: Quantity::ONE, ..entry.share });
                }
            }
            taken.push((resource, shares));
        }
        self.available.checked_sub(request).expect("fit was checked");
        Some(taken)
    }

    /// Gives back what [`BundleLedger::take`] took.
    pub(crate) fn give_back(&mut self, request: &ResourceSet, taken: &NodeShares) {
        self.available.add_capped(request, &self.reserved);
        for (resource, shares) in taken {
            let Some((_, entries)) = self.instances.iter_mut().find(|(r, _)| r == resource) else {
                continue;
            };
            for share in shares {
                if let Some(entry) = entries.iter_mut().find(|e| e.share.instance == share.instance)
                {
                    entry.free = (entry.free + share.quantity).min(entry.share.quantity);
                }
            }
        }
    }
}

/// The state of one bundle of a placed group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BundleState {
    /// Reserved on a node.
    Reserved(Box<BundleLedger>),
    /// Its node died: to be planned again.
    Lost,
}

/// A group whose bundles are reserved (or were, until a node died).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedGroup {
    /// The group as requested.
    pub spec: GroupSpec,
    /// Which alternative was reserved (0: the bundles asked for; `i`: `fallback_strategy[i−1]`).
    pub alternative: usize,
    /// Each bundle of that alternative.
    pub bundles: Vec<BundleState>,
}

impl PlacedGroup {
    /// The bundles of the chosen alternative.
    pub fn bundle_set(&self) -> &BundleSet {
        &self.spec.alternatives[self.alternative]
    }

    /// Indices of bundles lost with their nodes.
    pub fn lost(&self) -> Vec<usize> {
        self.bundles
            .iter()
            .enumerate()
            .filter(|(_, b)| matches!(b, BundleState::Lost))
            .map(|(i, _)| i)
            .collect()
    }

    /// True when every bundle is reserved.
    pub fn is_whole(&self) -> bool {
        self.bundles.iter().all(|b| matches!(b, BundleState::Reserved(_)))
    }

    /// The ledger of bundle `i`, if reserved.
    pub fn bundle(&self, i: usize) -> Option<&BundleLedger> {
        match self.bundles.get(i) {
            Some(BundleState::Reserved(ledger)) => Some(ledger),
            _ => None,
        }
    }

    pub(crate) fn bundle_mut(&mut self, i: usize) -> Option<&mut BundleLedger> {
        match self.bundles.get_mut(i) {
            Some(BundleState::Reserved(ledger)) => Some(ledger),
            _ => None,
        }
    }
}

/// What removing a group reports: the actors that ran inside it, for the head to stop.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovedGroup {
    /// Actors placed into its bundles, in bundle order.
    pub actors: Vec<ActorId>,
}
