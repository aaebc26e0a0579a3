//! A node and its resource ledger: `total`, `available`, and the instance pools of unit-instance
//! resources.
//!
//! Invariants, for every resource: `0 ≤ available ≤ total`; for unit-instance resources,
//! `available = Σ free over its instances` and `total = number of instances`.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use thiserror::Error;

use crate::diagnosis::Reason;
use crate::instances::{InstanceId, InstancePool, InstanceShares, MAX_INSTANCES};
use crate::labels::{node_labels, LabelError, Labels, NodeFacts};
use crate::quantity::Quantity;
use crate::resource::{ResourceId, ResourceRegistry, ResourceSet, Shortfall};
use crate::taints::TaintId;

/// A node's name, unique in its cluster. It follows the syntax of a label value (1 to 63
/// characters of letters, digits, `-`, `_`, `.`, beginning and ending with a letter or digit)
/// because it becomes the value of the `berth.io/node-id` label. Shared, not copied, when
/// cloned: the head gives it to every object placed on the node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct NodeId(Arc<str>);

impl NodeId {
    /// Validates `text` as a node ID.
    pub fn new(text: &str) -> Result<NodeId, NodeError> {
        let bytes = text.as_bytes();
        let ok = !bytes.is_empty()
            && bytes.len() <= 63
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if ok {
            Ok(NodeId(Arc::from(text)))
        } else {
            Err(NodeError::InvalidId(text.to_string()))
        }
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

impl std::borrow::Borrow<str> for NodeId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<NodeId, D::Error> {
        let text = String::deserialize(deserializer)?;
        NodeId::new(&text).map_err(serde::de::Error::custom)
    }
}

/// A node's dense position in its cluster: the bit in every [`NodeSet`](crate::NodeSet).
/// Never reused within a cluster, so a stale index cannot name a different node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeIndex(pub u32);

/// Whether a node takes new work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Takes new work.
    Alive,
    /// Keeps what it runs, takes nothing new.
    Draining,
    /// Its heartbeats are late: it keeps what it runs (nothing is released or restarted) and
    /// takes nothing new until it is heard from again (alive) or declared dead. Unlike a
    /// draining node, it may come back at any moment, so work that only it could take waits
    /// (pending) rather than being called infeasible.
    Suspect,
    /// Gone: takes nothing, and releases against it are ignored (its resources went with it).
    /// Its ledger is kept as it was, for inspection.
    Dead,
}

/// Why a node or a change to it was rejected. Displays as `field: rule`.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum NodeError {
    /// Bad node ID syntax.
    InvalidId(String),
    /// A unit-instance resource with a fractional or too large total.
    BadInstanceTotal {
        /// The resource's name.
        resource: String,
        /// The rejected total.
        quantity: Quantity,
    },
}

impl NodeError {
    /// The field's path within a node's description (`id`, `resources.GPU`).
    pub fn field(&self) -> String {
        match self {
            NodeError::InvalidId(_) => "id".to_string(),
            NodeError::BadInstanceTotal { resource, .. } => format!("resources.{resource}"),
        }
    }

    /// The rule broken, without the field.
    pub fn rule(&self) -> String {
        match self {
            NodeError::InvalidId(id) => format!(
                "{id:?} is invalid: use 1 to 63 characters of letters, digits, '-', '_' and '.', \
                 beginning and ending with a letter or digit"
            ),
            NodeError::BadInstanceTotal { resource, quantity } => format!(
                "{quantity} is not allowed: {resource} is counted in whole instances, so a \
                 node's total must be a whole number from 0 to 4096"
            ),
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field(), self.rule())
    }
}

/// Why a reservation on named instances failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ExactReserveError {
    /// The node cannot hold the request at all or now.
    Unfit(Reason),
    /// The named instances are wrong for the request.
    Instances { resource: ResourceId, detail: String },
}

/// A node of the cluster and its resource ledger.
#[derive(Clone, Debug)]
pub struct Node {
    id: NodeId,
    /// Its position in the cluster, so that stages can test set membership without a lookup.
    index: NodeIndex,
    state: NodeState,
    total: ResourceSet,
    available: ResourceSet,
    /// One pool per unit-instance resource the node has; few, so a small vector.
    pools: SmallVec<[(ResourceId, InstancePool); 1]>,
    /// Every label: the defaults and the user's, as indexed by the cluster.
    labels: Labels,
    /// The user's labels alone, kept to recompute `labels` when they change.
    user_labels: Labels,
    /// What the default labels are made of.
    facts: NodeFacts,
    /// Taints, sorted; few per node.
    taints: SmallVec<[TaintId; 2]>,
    /// Changes with every change to the node (see [`Version`]).
    version: Version,
}

/// Identifies what a node is at one moment: every change to a node gives it a value that no
/// node of any cluster in this process has had, so a cache keyed by a node's version (a
/// scorer's memo) knows the node is unchanged without comparing it. A clone keeps the value,
/// as it is the same. Not part of what the node is: `Debug` does not show it, so a dry run
/// that reserves and releases shows the cluster unchanged.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Version(u64);

impl Version {
    /// A version no node ever has (they start at 1): for an entry not filled yet.
    pub(crate) const NONE: Version = Version(0);

    fn next() -> Version {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Version(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(version)")
    }
}

/// What a reservation on one node took of its unit-instance resources. A plain vector, empty
/// (no allocation) for the many reservations without GPUs: every allocation the head holds,
/// one per running actor or task, keeps one, and an inline entry was 32 of its 168 bytes.
pub type NodeShares = Vec<(ResourceId, InstanceShares)>;

impl Node {
    /// A live node at `index` with `total` resources, all available.
    pub(crate) fn new(
        id: NodeId,
        index: NodeIndex,
        total: ResourceSet,
        registry: &ResourceRegistry,
    ) -> Result<Node, NodeError> {
        let mut node = Node {
            id,
            index,
            state: NodeState::Alive,
            total: ResourceSet::new(),
            available: ResourceSet::new(),
            pools: SmallVec::new(),
            labels: Labels::new(),
            user_labels: Labels::new(),
            facts: NodeFacts::default(),
            taints: SmallVec::new(),
            version: Version::next(),
        };
        for (resource, quantity) in total.iter() {
            node.set_capacity(resource, quantity, registry)?;
        }
        Ok(node)
    }

    /// The node's ID.
    pub fn id(&self) -> &NodeId {
        &self.id
    }

    /// What the node is now (see [`Version`]).
    pub fn version(&self) -> Version {
        self.version
    }

    /// The node's index in its cluster.
    pub fn index(&self) -> NodeIndex {
        self.index
    }

    /// Every label of the node (defaults included).
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// The labels the user gave (no defaults).
    pub fn user_labels(&self) -> &Labels {
        &self.user_labels
    }

    /// The facts behind the default labels.
    pub fn facts(&self) -> &NodeFacts {
        &self.facts
    }

    /// The node's taints, automatic ones included, in [`TaintId`] order.
    pub fn taints(&self) -> &[TaintId] {
        &self.taints
    }

    /// Sets the labels; returns the previous full set (for the cluster's index).
    pub(crate) fn set_labels(
        &mut self,
        facts: NodeFacts,
        user: Labels,
    ) -> Result<Labels, LabelError> {
        self.version = Version::next();
        let labels = node_labels(self.id.as_str(), &facts, &user)?;
        self.facts = facts;
        self.user_labels = user;
        Ok(std::mem::replace(&mut self.labels, labels))
    }

    /// Adds a taint; false when it was there.
    pub(crate) fn add_taint(&mut self, taint: TaintId) -> bool {
        self.version = Version::next();
        match self.taints.binary_search(&taint) {
            Ok(_) => false,
            Err(i) => {
                self.taints.insert(i, taint);
                true
            }
        }
    }

    /// Removes a taint; false when it was not there.
    pub(crate) fn remove_taint(&mut self, taint: TaintId) -> bool {
        self.version = Version::next();
        match self.taints.binary_search(&taint) {
            Ok(i) => {
                self.taints.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// The node's state.
    pub fn state(&self) -> NodeState {
        self.state
    }

    pub(crate) fn set_state(&mut self, state: NodeState) {
        self.version = Version::next();
        self.state = state;
    }

    /// Everything the node has.
    pub fn total(&self) -> &ResourceSet {
        &self.total
    }

    /// What is free now.
    pub fn available(&self) -> &ResourceSet {
        &self.available
    }

    /// The instance pool of a unit-instance resource, if the node has that resource.
    pub fn pool(&self, resource: ResourceId) -> Option<&InstancePool> {
        self.pools
            .iter()
            .find(|(id, _)| *id == resource)
            .map(|(_, pool)| pool)
            .filter(|pool| !pool.is_empty())
    }

    fn pool_mut(&mut self, resource: ResourceId) -> Option<&mut InstancePool> {
        self.pools.iter_mut().find(|(id, _)| *id == resource).map(|(_, pool)| pool)
    }

    /// True when the node has at least one instance of a unit-instance resource (a "GPU node").
    pub fn has_resource(&self, resource: ResourceId) -> bool {
        !self.total.get(resource).is_zero()
    }

    /// The first resource of `request` that the node lacks even when empty.
    #[inline]
    pub fn total_shortfall(&self, request: &ResourceSet) -> Option<Shortfall> {
        request.first_shortfall(&self.total)
    }

    /// The first resource of `request` that the node lacks now.
    #[inline]
    pub fn available_shortfall(&self, request: &ResourceSet) -> Option<Shortfall> {
        request.first_shortfall(&self.available)
    }

    /// The first unit-instance resource of `request` of which enough is free in sum, but not in
    /// the shape the rules need (a fraction inside one instance, whole free instances). A
    /// resource that is short in sum is not fragmented: the other filters report it.
    pub fn fragmented(
        &self,
        request: &ResourceSet,
        registry: &ResourceRegistry,
    ) -> Option<ResourceId> {
        // Most nodes have no unit-instance resource, and then nothing is fragmented: a node
        // with some of one has its pool, so without pools none is available.
        if self.pools.is_empty() {
            return None;
        }
        request.iter().find_map(|(resource, quantity)| {
            if !registry.is_unit_instance(resource) || self.available.get(resource) < quantity {
                return None;
            }
            let fits = self.pool(resource).is_some_and(|pool| pool.fits(quantity));
            (!fits).then_some(resource)
        })
    }

    /// Why `request` cannot be reserved now, in filter order, or `None` when it can.
    pub fn unfit_reason(
        &self,
        request: &ResourceSet,
        registry: &ResourceRegistry,
    ) -> Option<Reason> {
        if let Some(shortfall) = self.total_shortfall(request) {
            return Some(Reason::InsufficientTotal(shortfall));
        }
        if let Some(shortfall) = self.available_shortfall(request) {
            return Some(Reason::InsufficientAvailable(shortfall));
        }
        self.fragmented(request, registry)
            .map(|resource| Reason::Fragmented { resource, requested: request.get(resource) })
    }

    /// Reserves `request`, all or nothing; a failure changes nothing and says why.
    pub(crate) fn reserve(
        &mut self,
        request: &ResourceSet,
        registry: &ResourceRegistry,
    ) -> Result<NodeShares, Reason> {
        self.version = Version::next();
        if let Some(reason) = self.unfit_reason(request, registry) {
            return Err(reason);
        }
        let mut shares = NodeShares::new();
        for (resource, quantity) in request.iter() {
            if let Some(pool) = self.pool_mut(resource) {
                let taken = pool.take(quantity).expect("fit was checked above");
                shares.push((resource, taken));
            }
        }
        self.available.checked_sub(request).expect("availability was checked above");
        Ok(shares)
    }

    /// Reserves `request` on the named instances of each unit-instance resource (to rebuild a
    /// placement recorded earlier), all or nothing.
    pub(crate) fn reserve_exact(
        &mut self,
        request: &ResourceSet,
        instances: &[(ResourceId, Vec<InstanceId>)],
        registry: &ResourceRegistry,
    ) -> Result<NodeShares, ExactReserveError> {
        self.version = Version::next();
        if let Some(shortfall) = self.total_shortfall(request) {
            return Err(ExactReserveError::Unfit(Reason::InsufficientTotal(shortfall)));
        }
        if let Some(shortfall) = self.available_shortfall(request) {
            return Err(ExactReserveError::Unfit(Reason::InsufficientAvailable(shortfall)));
        }
        if let Some((resource, _)) = instances
            .iter()
            .find(|(r, _)| !registry.is_unit_instance(*r) || request.get(*r).is_zero())
        {
            return Err(ExactReserveError::Instances {
                resource: *resource,
                detail: "instances are named only for unit-instance resources the request asks for"
                    .into(),
            });
        }
        // Validate every pool on a copy first, so a failure on the second leaves the first alone.
        let mut trial = self.pools.clone();
        let mut shares = NodeShares::new();
        for (resource, quantity) in request.iter().filter(|(r, _)| registry.is_unit_instance(*r)) {
            let ids = instances.iter().find(|(r, _)| *r == resource).map(|(_, ids)| ids.as_slice());
            let Some(ids) = ids else {
                return Err(ExactReserveError::Instances {
                    resource,
                    detail: "name the instances it takes".into(),
                });
            };
            let pool = trial.iter_mut().find(|(r, _)| *r == resource).map(|(_, p)| p);
            let pool = pool.expect("the total check found this resource on the node");
            let taken = pool
                .take_exact(quantity, ids)
                .map_err(|detail| ExactReserveError::Instances { resource, detail })?;
            shares.push((resource, taken));
        }
        self.pools = trial;
        self.available.checked_sub(request).expect("availability was checked above");
        Ok(shares)
    }

    /// Returns what a reservation took; never more than `total` becomes available.
    pub(crate) fn release(&mut self, request: &ResourceSet, shares: &NodeShares) {
        self.version = Version::next();
        if self.state == NodeState::Dead {
            return;
        }
        for (resource, quantity) in request.iter() {
            match self.pools.iter_mut().find(|(id, _)| *id == resource) {
                Some((_, pool)) => {
                    if let Some((_, taken)) = shares.iter().find(|(id, _)| *id == resource) {
                        pool.give_back(taken);
                    }
                    let free = pool.free_sum();
                    self.available.set(resource, free);
                }
                None => {
                    let back =
                        (self.available.get(resource) + quantity).min(self.total.get(resource));
                    self.available.set(resource, back);
                }
            }
        }
    }

    /// Sets the total of one resource (seed 002's `UpdateResource`): the available quantity
    /// moves by the change in total, floored at zero. A total of zero deletes the resource.
    /// Unit-instance resources resize their pool (see [`crate::instances`]).
    pub(crate) fn set_capacity(
        &mut self,
        resource: ResourceId,
        total: Quantity,
        registry: &ResourceRegistry,
    ) -> Result<(), NodeError> {
        self.version = Version::next();
        if registry.is_unit_instance(resource) {
            if !total.is_whole() || total.whole() > MAX_INSTANCES {
                return Err(NodeError::BadInstanceTotal {
                    resource: registry.name(resource).to_string(),
                    quantity: total,
                });
            }
            let count = total.whole() as u32;
            match self.pool_mut(resource) {
                Some(pool) => pool.resize(count),
                None => self.pools.push((resource, InstancePool::new(count))),
            }
            let free = self.pool(resource).map_or(Quantity::ZERO, InstancePool::free_sum);
            self.total.set(resource, total);
            self.available.set(resource, free);
            // An emptied pool is kept (`pool` hides it) so that its generations go on: a share
            // of a removed instance must not credit an instance re-created with the same number.
            return Ok(());
        }
        let old_total = self.total.get(resource);
        let available = self.available.get(resource);
        // available + (new − old), floored at zero; computed without going negative.
        let new_available = if total >= old_total {
            available + (total - old_total)
        } else {
            available.saturating_sub(old_total - total)
        };
        self.total.set(resource, total);
        self.available.set(resource, new_available);
        Ok(())
    }

    /// Removes a resource from the node entirely.
    pub(crate) fn delete_resource(&mut self, resource: ResourceId) {
        self.version = Version::next();
        self.total.remove(resource);
        self.available.remove(resource);
        // Emptied, not dropped: see `set_capacity`.
        if let Some(pool) = self.pool_mut(resource) {
            pool.resize(0);
        }
    }

    /// Checks the ledger invariants; used by tests and debug assertions.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (resource, total) in self.total.iter() {
            let available = self.available.get(resource);
            if available > total {
                return Err(format!("{}: available {available} > total {total}", self.id));
            }
            if let Some(pool) = self.pool(resource) {
                if Quantity::from_whole(i64::from(pool.len())) != total {
                    return Err(format!("{}: {} instances for total {total}", self.id, pool.len()));
                }
                if pool.free_sum() != available {
                    return Err(format!(
                        "{}: instances free {} != available {available}",
                        self.id,
                        pool.free_sum()
                    ));
                }
            }
        }
        if let Some((resource, _)) =
            self.available.iter().find(|(r, _)| self.total.get(*r).is_zero())
        {
            return Err(format!("{}: available resource {resource:?} without total", self.id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    fn node(cpu: &str, gpu: &str) -> (Node, ResourceRegistry) {
        let registry = ResourceRegistry::default();
        let total: ResourceSet =
            [(ResourceId::CPU, q(cpu)), (ResourceId::GPU, q(gpu))].into_iter().collect();
        (Node::new(NodeId::new("n1").unwrap(), NodeIndex(0), total, &registry).unwrap(), registry)
    }

    /// Every change gives the node a version no node has had; a clone keeps it; a node made
    /// afresh gets its own.
    #[test]
    fn every_change_gives_a_new_version() {
        let (mut n, registry) = node("8", "2");
        let mut seen = vec![n.version()];
        let mut changed = |n: &Node| {
            assert!(!seen.contains(&n.version()), "a version came back");
            seen.push(n.version());
        };
        let ask: ResourceSet =
            [(ResourceId::CPU, q("1")), (ResourceId::GPU, q("0.5"))].into_iter().collect();
        let shares = n.reserve(&ask, &registry).unwrap();
        changed(&n);
        let clone = n.clone();
        assert_eq!(clone.version(), n.version());
        n.release(&ask, &shares);
        changed(&n);
        let taint = crate::taints::TaintTable::default().intern("dedicated", "ml").unwrap();
        n.add_taint(taint);
        changed(&n);
        n.remove_taint(taint);
        changed(&n);
        n.set_state(NodeState::Draining);
        changed(&n);
        n.set_capacity(ResourceId::CPU, q("4"), &registry).unwrap();
        changed(&n);
        n.delete_resource(ResourceId::GPU);
        changed(&n);
        n.set_labels(NodeFacts::default(), Labels::new()).unwrap();
        changed(&n);
        let (again, _) = node("8", "2");
        changed(&again);
    }

    #[test]
    fn node_ids_follow_the_label_value_rule() {
        for good in ["n1", "node-1.zone_a", "A", &"x".repeat(63)] {
            assert!(NodeId::new(good).is_ok(), "{good}");
        }
        for bad in ["", "-n", "n-", "n 1", "n/1", &"x".repeat(64)] {
            let err = NodeId::new(bad).unwrap_err().to_string();
            assert!(err.contains("1 to 63 characters"), "{bad}: {err}");
        }
    }

    #[test]
    fn seed_capacity_update_floors_available_at_zero() {
        let (mut node, registry) = node("8", "0");
        let used: ResourceSet = [(ResourceId::CPU, q("6"))].into_iter().collect();
        let shares = node.reserve(&used, &registry).unwrap();
        node.set_capacity(ResourceId::CPU, q("4"), &registry).unwrap();
        assert_eq!(
            node.available().get(ResourceId::CPU),
            Quantity::ZERO,
            "2 + (4 − 8) floors at 0"
        );
        node.set_capacity(ResourceId::CPU, q("10"), &registry).unwrap();
        assert_eq!(node.available().get(ResourceId::CPU), q("6"), "0 + (10 − 4)");
        node.release(&used, &shares);
        assert_eq!(node.available().get(ResourceId::CPU), q("10"), "release is capped at total");
        node.check_invariants().unwrap();
    }

    #[test]
    fn unit_instance_totals_must_be_whole() {
        let registry = ResourceRegistry::default();
        let total: ResourceSet = [(ResourceId::GPU, q("1.5"))].into_iter().collect();
        let err = Node::new(NodeId::new("n1").unwrap(), NodeIndex(0), total, &registry)
            .unwrap_err()
            .to_string();
        assert!(err.contains("resources.GPU") && err.contains("whole number"), "{err}");
    }

    #[test]
    fn reserve_is_all_or_nothing_and_release_restores() {
        let (mut node, registry) = node("4", "2");
        let before = node.clone();
        let too_much: ResourceSet =
            [(ResourceId::CPU, q("1")), (ResourceId::GPU, q("3"))].into_iter().collect();
        assert!(
            matches!(node.reserve(&too_much, &registry), Err(Reason::InsufficientTotal(s)) if s.resource == ResourceId::GPU)
        );
        assert_eq!(node.available(), before.available());
        let request: ResourceSet =
            [(ResourceId::CPU, q("1")), (ResourceId::GPU, q("0.5"))].into_iter().collect();
        let shares = node.reserve(&request, &registry).unwrap();
        assert_eq!(node.available().get(ResourceId::GPU), q("1.5"));
        node.release(&request, &shares);
        assert_eq!(node.available(), before.available());
        assert_eq!(node.pool(ResourceId::GPU), before.pool(ResourceId::GPU));
    }

    #[test]
    fn delete_resource_removes_it() {
        let (mut node, _) = node("4", "2");
        node.delete_resource(ResourceId::GPU);
        assert!(!node.has_resource(ResourceId::GPU));
        assert!(node.pool(ResourceId::GPU).is_none());
        node.check_invariants().unwrap();
    }
}
