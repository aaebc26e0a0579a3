//! The cluster model: nodes by dense index, their states as node sets, and the ledger operations
//! (reserve, release, capacity changes) that keep every node's invariants.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::actor_index::{ActorIndex, PlacedActor};
use crate::actors::{ActorAffinity, ActorId, ActorSpec};
use crate::diagnosis::{Names, Reason};
use crate::feed::{ChangeFeed, FeedCursor};
use crate::instances::InstanceId;
use crate::label_index::LabelIndex;
use crate::labels::{LabelError, Labels, NodeFacts};
use crate::node::{ExactReserveError, Node, NodeError, NodeId, NodeIndex, NodeShares, NodeState};
use crate::nodeset::NodeSet;
use crate::placement_group::{
    BundleLedger, BundleState, GroupError, GroupId, GroupSpec, PlacedGroup, RemovedGroup,
};
use crate::quantity::Quantity;
use crate::resource::{ResourceId, ResourceRegistry, ResourceSet};
use crate::taints::{check_user_taint, Taint, TaintId, TaintTable};

/// Why a cluster operation was refused. Nothing changed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ClusterError {
    /// A node with this ID exists already.
    #[error("node {0} already exists")]
    DuplicateNode(NodeId),
    /// No node has this index or ID (or it was removed).
    #[error("no node {0}")]
    UnknownNode(String),
    /// The node or its resources are invalid.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The node is not alive, so it takes no new reservation.
    #[error("node {node} is {state:?} and takes no new work")]
    NotAlive {
        /// The node.
        node: NodeId,
        /// Its state.
        state: NodeState,
    },
    /// The node cannot hold the request (at all, or now); `detail` gives the figures.
    #[error("node {node} cannot hold the request: {detail}")]
    Insufficient {
        /// The node.
        node: NodeId,
        /// Why, as the filters would say it.
        reason: Reason,
        /// The reason in words, with resource names and quantities.
        detail: String,
    },
    /// A reservation on named instances named the wrong ones.
    #[error("node {node}: {resource} instances: {detail}")]
    Instances {
        /// The node.
        node: NodeId,
        /// The resource's name.
        resource: String,
        /// What is wrong.
        detail: String,
    },
    /// A label or taint breaks the label syntax (or sets `berth.io/node-id`).
    #[error(transparent)]
    Label(#[from] LabelError),
    /// A rare-resource taint cannot be removed by hand.
    #[error("taint {taint} is set by rare-resource isolation because the node has {resource}; it cannot be removed by hand")]
    RareTaint {
        /// The taint, `key=value`.
        taint: String,
        /// The rare resource.
        resource: String,
    },
    /// A placement group that breaks [`GroupSpec::validate`].
    #[error(transparent)]
    Group(#[from] GroupError),
    /// A placement group with this ID exists already.
    #[error("placement group {0} exists already")]
    DuplicateGroup(GroupId),
    /// No such placement group (or a plan that does not fit it).
    #[error("no placement group {0}")]
    UnknownGroup(String),
    /// The bundle index is out of range, or the bundle was lost with its node.
    #[error("placement group {group} has no reserved bundle {bundle}")]
    NoBundle {
        /// The group.
        group: GroupId,
        /// The bundle index.
        bundle: usize,
    },
    /// The bundle's free reservation cannot hold the request.
    #[error("bundle {bundle} of placement group {group} cannot hold the request now")]
    BundleFull {
        /// The group.
        group: GroupId,
        /// The bundle index.
        bundle: usize,
    },
    /// A dead node does not come back; an agent that returns registers as a new node.
    #[error("node {0} is dead; a returning machine registers as a new node")]
    Dead(NodeId),
}

/// The instances a reservation takes, named per unit-instance resource (to rebuild a
/// placement recorded earlier, or to commit a plan).
pub type NamedInstances = Vec<(ResourceId, Vec<InstanceId>)>;

/// Resources reserved on one node: what a release needs to give them back.
///
/// It is `Clone` so that the head can persist it. Release it exactly once: the ledger cannot
/// see a second release, and although capping at `total` keeps the invariants, a second
/// release of a GPU share could credit an instance that another placement holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    node: NodeIndex,
    /// The generation of the node's slot when reserved: slots of removed nodes are reused, and
    /// a release into a later node of the slot does nothing.
    generation: u32,
    resources: ResourceSet,
    shares: NodeShares,
    source: AllocationSource,
}

/// Which ledger an allocation was taken from, and so returns to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AllocationSource {
    /// The node's free pool.
    Node,
    /// A placement group's bundle.
    Bundle {
        /// The group.
        group: GroupId,
        /// The bundle's index.
        bundle: usize,
    },
}

impl Allocation {
    /// The node the resources are on.
    pub fn node(&self) -> NodeIndex {
        self.node
    }

    /// The ledger it came from.
    pub fn source(&self) -> &AllocationSource {
        &self.source
    }

    /// The reserved resources.
    pub fn resources(&self) -> &ResourceSet {
        &self.resources
    }

    /// The instance IDs taken of a unit-instance resource (`CUDA_VISIBLE_DEVICES` for GPU);
    /// a fractional share lists the one instance it shares.
    pub fn instance_ids(&self, resource: ResourceId) -> Vec<InstanceId> {
        self.shares
            .iter()
            .filter(|(id, _)| *id == resource)
            .flat_map(|(_, shares)| shares.iter().map(|s| s.instance))
            .collect()
    }

    /// Every unit-instance resource taken, with its instance IDs.
    pub fn instances(&self) -> impl Iterator<Item = (ResourceId, Vec<InstanceId>)> + '_ {
        self.shares.iter().map(|(id, shares)| (*id, shares.iter().map(|s| s.instance).collect()))
    }
}

impl<'a> From<&'a Cluster> for Names<'a> {
    fn from(cluster: &'a Cluster) -> Names<'a> {
        cluster.names()
    }
}

/// All nodes of a cluster and their ledgers.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    registry: ResourceRegistry,
    /// Slot per index; `None` once removed, until a new node takes the slot.
    nodes: Vec<Option<Node>>,
    /// Slots of removed nodes, reused lowest first, so a cluster whose nodes come and go (a
    /// machine that dies and registers again, an autoscaler's churn) does not grow for ever.
    free_slots: BTreeSet<u32>,
    /// Per slot, how many nodes it held before the current one: an allocation records it, so
    /// that releasing an allocation of a removed node never credits the slot's new node.
    generations: Vec<u32>,
    by_id: FxHashMap<NodeId, NodeIndex>,
    alive: NodeSet,
    draining: NodeSet,
    suspect: NodeSet,
    dead: NodeSet,
    /// Label key → value → nodes, for selectors.
    label_index: LabelIndex,
    taint_table: TaintTable,
    /// Nodes with at least one taint: the only ones the taint filter must look at closely.
    tainted: NodeSet,
    /// Resources whose nodes are tainted automatically (rare-resource isolation).
    rare_resources: Vec<ResourceId>,
    /// Placed actors by label, for actor affinity.
    actors: ActorIndex,
    /// Placement groups with reserved bundles, by ID (ordered: node death walks them).
    groups: BTreeMap<GroupId, PlacedGroup>,
    /// Per resource (by [`ResourceId::index`]), the nodes that have some of it in total: a
    /// request for GPUs starts from the GPU nodes instead of visiting every node.
    having: Vec<NodeSet>,
    /// The largest total of each resource among the alive nodes, computed when first asked
    /// after a change of the alive nodes or their totals (rare), not per decision.
    largest: Derived<ResourceSet>,
    /// Per resource, the alive nodes that have some of it: where a request for it starts.
    /// Computed, and forgotten, as `largest` is.
    alive_having: Derived<Vec<NodeSet>>,
    /// The slots changed, for stages that keep counts over the nodes ([`crate::feed`]).
    feed: ChangeFeed,
}

/// A value computed from the cluster and kept until the cluster changes: a cache, not part of
/// what the cluster is, so its `Debug` does not show it (a dry run that fills it changes
/// nothing).
#[derive(Clone, Default)]
struct Derived<T>(OnceLock<T>);

impl<T> std::fmt::Debug for Derived<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(derived)")
    }
}

/// Everything a node is registered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Its ID.
    pub id: NodeId,
    /// Its resources.
    pub total: ResourceSet,
    /// The user's labels (the defaults are added).
    pub labels: Labels,
    /// The facts behind the default labels.
    pub facts: NodeFacts,
    /// Its taints, `key=value`.
    pub taints: Vec<(String, String)>,
}

impl NodeSpec {
    /// A node with resources only: default labels, no taints.
    pub fn new(id: NodeId, total: ResourceSet) -> NodeSpec {
        NodeSpec {
            id,
            total,
            labels: Labels::new(),
            facts: NodeFacts::default(),
            taints: Vec::new(),
        }
    }
}

/// The node in `nodes` at `index`, unless removed, noted in `feed` as changed: every change to
/// a node goes through here or notes its slot itself. A free function so that callers can
/// borrow other fields of the cluster at the same time.
fn slot_mut<'a>(
    nodes: &'a mut [Option<Node>],
    feed: &mut ChangeFeed,
    index: NodeIndex,
) -> Result<&'a mut Node, ClusterError> {
    let node = nodes
        .get_mut(index.0 as usize)
        .and_then(Option::as_mut)
        .ok_or_else(|| ClusterError::UnknownNode(format!("#{}", index.0)))?;
    feed.note(index);
    Ok(node)
}

/// Takes `request` from `ledger` (bundle `bundle` of group `group`), as an allocation that
/// returns there.
fn take_from_bundle(
    ledger: &mut BundleLedger,
    generations: &[u32],
    group: GroupId,
    bundle: usize,
    request: &ResourceSet,
) -> Result<Allocation, ClusterError> {
    let shares =
        ledger.take(request).ok_or(ClusterError::BundleFull { group: group.clone(), bundle })?;
    Ok(Allocation {
        node: ledger.node,
        generation: generations.get(ledger.node.0 as usize).copied().unwrap_or(0),
        resources: request.clone(),
        shares,
        source: AllocationSource::Bundle { group, bundle },
    })
}

impl Cluster {
    /// An empty cluster whose resource names are interned in `registry`.
    pub fn new(registry: ResourceRegistry) -> Cluster {
        Cluster { registry, ..Cluster::default() }
    }

    /// The resource names of this cluster.
    pub fn registry(&self) -> &ResourceRegistry {
        &self.registry
    }

    /// The resource names, for interning new ones (a request naming a custom resource).
    pub fn registry_mut(&mut self) -> &mut ResourceRegistry {
        &mut self.registry
    }

    /// Adds a live node with `total` resources, all available, default labels and no taints.
    pub fn add_node(&mut self, id: NodeId, total: ResourceSet) -> Result<NodeIndex, ClusterError> {
        self.add_node_with(NodeSpec::new(id, total))
    }

    /// Adds a live node as registered: resources, labels, taints. All or nothing.
    pub fn add_node_with(&mut self, spec: NodeSpec) -> Result<NodeIndex, ClusterError> {
        if self.by_id.contains_key(&spec.id) {
            return Err(ClusterError::DuplicateNode(spec.id));
        }
        let index = match self.free_slots.first() {
            Some(&slot) => NodeIndex(slot),
            None => NodeIndex(self.nodes.len() as u32),
        };
        let mut node = Node::new(spec.id.clone(), index, spec.total, &self.registry)?;
        node.set_labels(spec.facts, spec.labels)?;
        // All checked before any is interned: a refused node leaves no taint behind.
        for (key, value) in &spec.taints {
            check_user_taint(key, value)?;
        }
        for (key, value) in &spec.taints {
            let taint = self.taint_table.intern(key, value)?;
            if node.add_taint(taint) {
                self.taint_table.acquire(taint);
            }
        }
        self.label_index.insert(index, node.labels());
        if self.free_slots.remove(&index.0) {
            self.nodes[index.0 as usize] = Some(node);
        } else {
            self.nodes.push(Some(node));
            self.generations.push(0);
        }
        self.by_id.insert(spec.id, index);
        self.alive.insert(index);
        self.feed.note(index);
        self.refresh_derived(index);
        Ok(index)
    }

    /// Replaces a node's user labels (and the facts behind its defaults), keeping the index
    /// current. Nothing changes on error.
    pub fn set_labels(
        &mut self,
        index: NodeIndex,
        facts: NodeFacts,
        labels: Labels,
    ) -> Result<(), ClusterError> {
        let node = slot_mut(&mut self.nodes, &mut self.feed, index)?;
        let old = node.set_labels(facts, labels)?;
        self.label_index.remove(index, &old);
        self.label_index.insert(index, node.labels());
        Ok(())
    }

    /// Adds the taint `key=value` to a node; false when it had it already.
    pub fn add_taint(
        &mut self,
        index: NodeIndex,
        key: &str,
        value: &str,
    ) -> Result<bool, ClusterError> {
        slot_mut(&mut self.nodes, &mut self.feed, index)?;
        let taint = self.taint_table.intern(key, value)?;
        let added = slot_mut(&mut self.nodes, &mut self.feed, index)?.add_taint(taint);
        if added {
            self.taint_table.acquire(taint);
        }
        self.refresh_derived(index);
        Ok(added)
    }

    /// Removes the taint `key=value` from a node; false when it did not have it. The taints of
    /// rare-resource isolation follow the node's resources and cannot be removed by hand.
    pub fn remove_taint(
        &mut self,
        index: NodeIndex,
        key: &str,
        value: &str,
    ) -> Result<bool, ClusterError> {
        let node = slot_mut(&mut self.nodes, &mut self.feed, index)?;
        let Some(taint) = self.taint_table.lookup(key, value) else { return Ok(false) };
        if let Some(resource) = self.taint_table.get(taint).rare_resource {
            return Err(ClusterError::RareTaint {
                taint: format!("{key}={value}"),
                resource: self.registry.name(resource).to_string(),
            });
        }
        let removed = node.remove_taint(taint);
        if removed {
            self.taint_table.release(taint);
        }
        self.refresh_derived(index);
        Ok(removed)
    }

    /// Lists the resources whose nodes are tainted automatically, and re-taints every node.
    pub fn set_rare_resources(&mut self, resources: &[ResourceId]) {
        self.rare_resources = resources.to_vec();
        for index in 0..self.nodes.len() {
            self.refresh_derived(NodeIndex(index as u32));
        }
    }

    /// The resources under rare-resource isolation.
    pub fn rare_resources(&self) -> &[ResourceId] {
        &self.rare_resources
    }

    /// Brings what is derived from a node's resources in line with them: its automatic taints,
    /// the tainted set, and the per-resource node sets.
    fn refresh_derived(&mut self, index: NodeIndex) {
        self.largest.0.take();
        self.alive_having.0.take();
        let Ok(node) = slot_mut(&mut self.nodes, &mut self.feed, index) else { return };
        // The per-resource sets follow the same changes as the automatic taints.
        for (i, set) in self.having.iter_mut().enumerate() {
            if !node.total().iter().any(|(r, _)| r.index() == i) {
                set.remove(index);
            }
        }
        for (resource, _) in node.total().iter() {
            if self.having.len() <= resource.index() {
                self.having.resize(resource.index() + 1, NodeSet::new());
            }
            self.having[resource.index()].insert(index);
        }
        let stale: Vec<TaintId> = node
            .taints()
            .iter()
            .copied()
            .filter(|&t| {
                self.taint_table
                    .get(t)
                    .rare_resource
                    .is_some_and(|r| !self.rare_resources.contains(&r) || !node.has_resource(r))
            })
            .collect();
        for taint in stale {
            node.remove_taint(taint);
        }
        for &resource in &self.rare_resources {
            if node.has_resource(resource) {
                node.add_taint(self.taint_table.intern_rare(resource, &self.registry));
            }
        }
        if node.taints().is_empty() {
            self.tainted.remove(index);
        } else {
            self.tainted.insert(index);
        }
    }

    /// The label index.
    pub fn label_index(&self) -> &LabelIndex {
        &self.label_index
    }

    /// The taint behind `id`.
    pub fn taint(&self, id: TaintId) -> &Taint {
        self.taint_table.get(id)
    }

    /// The interned taints, to look one up by key and value.
    pub fn taint_table(&self) -> &TaintTable {
        &self.taint_table
    }

    /// The names behind the cluster's resource and taint IDs, for describing reasons.
    pub fn names(&self) -> Names<'_> {
        Names { resources: &self.registry, taints: &self.taint_table }
    }

    /// Nodes with at least one taint.
    pub fn tainted(&self) -> &NodeSet {
        &self.tainted
    }

    /// The nodes that have some of `resource` in total (whatever their state).
    pub fn nodes_having(&self, resource: ResourceId) -> Option<&NodeSet> {
        self.having.get(resource.index())
    }

    /// The alive nodes that have some of `resource` in total: computed once per change of the
    /// alive nodes or their totals, so that a request for a resource few nodes have starts from
    /// them without a set operation per decision.
    pub fn alive_having(&self, resource: ResourceId) -> Option<&NodeSet> {
        let sets = self.alive_having.0.get_or_init(|| {
            self.having.iter().map(|having| self.alive.intersection(having)).collect()
        });
        sets.get(resource.index())
    }

    /// The placed actors, by label.
    pub fn actors(&self) -> &ActorIndex {
        &self.actors
    }

    /// Records that the actor `spec` runs on `node`, placed with `affinity`. An actor with the
    /// same ID that was placed before is replaced: the actor moved (a restart elsewhere).
    pub fn place_actor(
        &mut self,
        spec: &ActorSpec,
        node: NodeIndex,
        affinity: ActorAffinity,
    ) -> Result<(), ClusterError> {
        let state = self.node(node).map(Node::state);
        match state {
            None => return Err(ClusterError::UnknownNode(format!("#{}", node.0))),
            Some(NodeState::Dead) => {
                return Err(ClusterError::Dead(self.node(node).expect("found").id().clone()))
            }
            Some(_) => {}
        }
        self.actors.remove(spec.id.as_str());
        let actor = PlacedActor::new(spec, node, affinity);
        self.actors.insert(actor).expect("the old entry was removed");
        Ok(())
    }

    /// Forgets a placed actor (it stopped or died); its allocation is released separately.
    pub fn remove_actor(&mut self, id: &str) -> Option<PlacedActor> {
        self.actors.remove(id)
    }

    /// Actors placed with `on_peer_moved: follow` whose hard affinity no longer holds where they
    /// run, in ID order: the head restarts them next to their peers.
    pub fn affinity_violations(&self) -> Vec<ActorId> {
        self.actors.violations(&self.label_index)
    }

    /// The node at `index`, unless removed.
    pub fn node(&self, index: NodeIndex) -> Option<&Node> {
        self.nodes.get(index.0 as usize).and_then(Option::as_ref)
    }

    /// The index of the node with this ID.
    pub fn index_of(&self, id: &str) -> Option<NodeIndex> {
        self.by_id.get(id).copied()
    }

    /// Every node that was not removed, in index order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeIndex, &Node)> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| slot.as_ref().map(|node| (NodeIndex(i as u32), node)))
    }

    /// Number of nodes that were not removed (alive, draining, suspect or dead).
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// One past the highest index ever given: the size of per-node arrays.
    pub fn index_bound(&self) -> usize {
        self.nodes.len()
    }

    /// Nodes that take new work.
    pub fn alive(&self) -> &NodeSet {
        &self.alive
    }

    /// Nodes that keep their work but take nothing new.
    pub fn draining(&self) -> &NodeSet {
        &self.draining
    }

    /// Nodes whose heartbeats are late: they keep their work but take nothing new.
    pub fn suspect(&self) -> &NodeSet {
        &self.suspect
    }

    /// Nodes declared dead.
    pub fn dead(&self) -> &NodeSet {
        &self.dead
    }

    /// Moves a node to `state`. Alive, draining and suspect to one another in any direction;
    /// any state → dead; a dead node stays dead. Only death touches what the node holds.
    pub fn set_state(&mut self, index: NodeIndex, state: NodeState) -> Result<(), ClusterError> {
        let node = slot_mut(&mut self.nodes, &mut self.feed, index)?;
        if node.state() == NodeState::Dead && state != NodeState::Dead {
            return Err(ClusterError::Dead(node.id().clone()));
        }
        node.set_state(state);
        if state == NodeState::Dead {
            // Its actors died with it; the head restarts them elsewhere. Its bundles are lost
            // and wait to be planned again.
            self.actors.remove_node(index);
            for group in self.groups.values_mut() {
                for bundle in &mut group.bundles {
                    if matches!(bundle, BundleState::Reserved(l) if l.node == index) {
                        *bundle = BundleState::Lost;
                    }
                }
            }
        }
        for set in [&mut self.alive, &mut self.draining, &mut self.suspect, &mut self.dead] {
            set.remove(index);
        }
        self.largest.0.take();
        self.alive_having.0.take();
        match state {
            NodeState::Alive => self.alive.insert(index),
            NodeState::Draining => self.draining.insert(index),
            NodeState::Suspect => self.suspect.insert(index),
            NodeState::Dead => self.dead.insert(index),
        };
        Ok(())
    }

    /// Removes a node from the cluster; allocations on it become void (their release does
    /// nothing, even once a new node takes the slot), and its bundles are lost.
    pub fn remove_node(&mut self, index: NodeIndex) -> Result<Node, ClusterError> {
        let node = self
            .nodes
            .get_mut(index.0 as usize)
            .and_then(Option::take)
            .ok_or_else(|| ClusterError::UnknownNode(format!("#{}", index.0)))?;
        self.generations[index.0 as usize] = self.generations[index.0 as usize].wrapping_add(1);
        self.free_slots.insert(index.0);
        self.feed.note(index);
        for group in self.groups.values_mut() {
            for bundle in &mut group.bundles {
                if matches!(bundle, BundleState::Reserved(l) if l.node == index) {
                    *bundle = BundleState::Lost;
                }
            }
        }
        for &taint in node.taints() {
            self.taint_table.release(taint);
        }
        self.by_id.remove(node.id());
        self.label_index.remove(index, node.labels());
        self.actors.remove_node(index);
        for set in [
            &mut self.alive,
            &mut self.draining,
            &mut self.suspect,
            &mut self.dead,
            &mut self.tainted,
        ] {
            set.remove(index);
        }
        self.largest.0.take();
        self.alive_having.0.take();
        for set in &mut self.having {
            set.remove(index);
        }
        Ok(node)
    }

    /// Reserves `request` on a live node, all or nothing; unit-instance shares are chosen by
    /// the pool's rules (see [`crate::instances`]).
    pub fn reserve(
        &mut self,
        index: NodeIndex,
        request: &ResourceSet,
    ) -> Result<Allocation, ClusterError> {
        self.reserve_with(index, request, None)
    }

    /// Reserves `request` on a live node taking exactly the named instances of each
    /// unit-instance resource it asks for: how a placement recorded earlier (by the head's
    /// store, or in a snapshot file) is rebuilt with the same `CUDA_VISIBLE_DEVICES`.
    pub fn reserve_instances(
        &mut self,
        index: NodeIndex,
        request: &ResourceSet,
        instances: &[(ResourceId, Vec<InstanceId>)],
    ) -> Result<Allocation, ClusterError> {
        self.reserve_with(index, request, Some(instances))
    }

    /// What [`Cluster::reserve`] would take on `index` (the same instance IDs), reserving
    /// nothing: the ledger arithmetic runs on a copy of that one node. For dry runs, which must
    /// neither change the cluster nor copy all of it.
    pub fn preview_reserve(
        &self,
        index: NodeIndex,
        request: &ResourceSet,
    ) -> Result<Allocation, ClusterError> {
        let node =
            self.node(index).ok_or_else(|| ClusterError::UnknownNode(format!("#{}", index.0)))?;
        if node.state() != NodeState::Alive {
            return Err(ClusterError::NotAlive { node: node.id().clone(), state: node.state() });
        }
        let shares = node.clone().reserve(request, &self.registry).map_err(|reason| {
            ClusterError::Insufficient {
                node: node.id().clone(),
                reason,
                detail: reason.describe(self.names()),
            }
        })?;
        Ok(self.node_allocation(index, request, shares))
    }

    /// An allocation of `shares` from node `index`'s own pool, tagged with its slot's
    /// generation.
    fn node_allocation(
        &self,
        index: NodeIndex,
        request: &ResourceSet,
        shares: NodeShares,
    ) -> Allocation {
        Allocation {
            node: index,
            generation: self.generations[index.0 as usize],
            resources: request.clone(),
            shares,
            source: AllocationSource::Node,
        }
    }

    fn reserve_with(
        &mut self,
        index: NodeIndex,
        request: &ResourceSet,
        instances: Option<&[(ResourceId, Vec<InstanceId>)]>,
    ) -> Result<Allocation, ClusterError> {
        let registry = &self.registry;
        let node = slot_mut(&mut self.nodes, &mut self.feed, index)?;
        if node.state() != NodeState::Alive {
            return Err(ClusterError::NotAlive { node: node.id().clone(), state: node.state() });
        }
        let result = match instances {
            None => node.reserve(request, registry).map_err(ExactReserveError::Unfit),
            Some(instances) => node.reserve_exact(request, instances, registry),
        };
        // The node's borrow ends here, so the error can be described against the whole cluster.
        let shares = result.map_err(|err| {
            let node = self.node(index).map(|n| n.id().clone()).expect("found above");
            match err {
                ExactReserveError::Unfit(reason) => ClusterError::Insufficient {
                    node,
                    reason,
                    detail: reason.describe(self.names()),
                },
                ExactReserveError::Instances { resource, detail } => ClusterError::Instances {
                    node,
                    resource: self.registry.name(resource).to_string(),
                    detail,
                },
            }
        })?;
        Ok(self.node_allocation(index, request, shares))
    }

    /// Gives an allocation back to the ledger it came from: the node, or the group bundle. On a
    /// dead or removed node, or a removed group, this does nothing: the resources went with it.
    pub fn release(&mut self, allocation: &Allocation) {
        match &allocation.source {
            AllocationSource::Node => {
                let slot = allocation.node.0 as usize;
                if self.generations.get(slot) != Some(&allocation.generation) {
                    return; // its node was removed; the slot holds another node now
                }
                if let Some(Some(node)) = self.nodes.get_mut(slot) {
                    node.release(&allocation.resources, &allocation.shares);
                    self.feed.note(allocation.node);
                }
            }
            AllocationSource::Bundle { group, bundle } => {
                let ledger = self.groups.get_mut(group).and_then(|g| g.bundle_mut(*bundle));
                if let Some(ledger) = ledger.filter(|l| l.node == allocation.node) {
                    ledger.give_back(&allocation.resources, &allocation.shares);
                }
            }
        }
    }

    /// Reserves every bundle of alternative `alternative` of `spec`, bundle `i` on
    /// `plan[i].0` taking exactly the instances `plan[i].1`; all or nothing.
    pub fn reserve_group(
        &mut self,
        spec: GroupSpec,
        alternative: usize,
        plan: &[(NodeIndex, NamedInstances)],
    ) -> Result<(), ClusterError> {
        if self.groups.contains_key(&spec.id) {
            return Err(ClusterError::DuplicateGroup(spec.id));
        }
        // Every placed group is valid, so re-planning its bundles can rely on it.
        spec.validate(&self.registry)?;
        let bundles =
            spec.alternatives.get(alternative).map(|a| a.bundles.clone()).unwrap_or_default();
        if bundles.len() != plan.len() {
            return Err(ClusterError::UnknownGroup(format!(
                "{} (a plan for {} bundles)",
                spec.id,
                plan.len()
            )));
        }
        let mut ledgers = Vec::with_capacity(bundles.len());
        for (bundle, (node, instances)) in bundles.iter().zip(plan) {
            match self.reserve_instances(*node, bundle, instances) {
                Ok(allocation) => {
                    let ledger = BundleLedger::new(*node, bundle.clone(), allocation.shares);
                    ledgers.push(BundleState::Reserved(Box::new(ledger)));
                }
                Err(err) => {
                    for ledger in &ledgers {
                        if let BundleState::Reserved(ledger) = ledger {
                            self.release_bundle(ledger);
                        }
                    }
                    return Err(err);
                }
            }
        }
        self.groups.insert(spec.id.clone(), PlacedGroup { spec, alternative, bundles: ledgers });
        Ok(())
    }

    /// Reserves the lost bundles of a group again, bundle `i` of `plan` on its node with
    /// exactly its instances; all or nothing.
    pub fn restore_bundles(
        &mut self,
        id: &str,
        plan: &[(usize, NodeIndex, NamedInstances)],
    ) -> Result<(), ClusterError> {
        let group =
            self.groups.get(id).ok_or_else(|| ClusterError::UnknownGroup(id.to_string()))?;
        let bundles = group.bundle_set().bundles.clone();
        let mut restored = Vec::with_capacity(plan.len());
        for (i, node, instances) in plan {
            let reserved = bundles.get(*i).cloned().unwrap_or_default();
            match self.reserve_instances(*node, &reserved, instances) {
                Ok(allocation) => {
                    restored.push((*i, BundleLedger::new(*node, reserved, allocation.shares)))
                }
                Err(err) => {
                    for (_, ledger) in &restored {
                        self.release_bundle(ledger);
                    }
                    return Err(err);
                }
            }
        }
        let group = self.groups.get_mut(id).expect("checked above");
        for (i, ledger) in restored {
            group.bundles[i] = BundleState::Reserved(Box::new(ledger));
        }
        Ok(())
    }

    /// Takes `request` from bundle `bundle` of group `id`.
    pub fn reserve_in_bundle(
        &mut self,
        id: &str,
        bundle: usize,
        request: &ResourceSet,
    ) -> Result<Allocation, ClusterError> {
        let group =
            self.groups.get_mut(id).ok_or_else(|| ClusterError::UnknownGroup(id.to_string()))?;
        let group_id = group.spec.id.clone();
        let ledger = group
            .bundle_mut(bundle)
            .ok_or(ClusterError::NoBundle { group: group_id.clone(), bundle })?;
        take_from_bundle(ledger, &self.generations, group_id, bundle, request)
    }

    /// What [`Cluster::reserve_in_bundle`] would take, reserving nothing (a copy of the one
    /// bundle's ledger takes it). For dry runs.
    pub fn preview_in_bundle(
        &self,
        id: &str,
        bundle: usize,
        request: &ResourceSet,
    ) -> Result<Allocation, ClusterError> {
        let group =
            self.groups.get(id).ok_or_else(|| ClusterError::UnknownGroup(id.to_string()))?;
        let group_id = group.spec.id.clone();
        let mut ledger = group
            .bundle(bundle)
            .cloned()
            .ok_or(ClusterError::NoBundle { group: group_id.clone(), bundle })?;
        take_from_bundle(&mut ledger, &self.generations, group_id, bundle, request)
    }

    /// Records that actor `actor` runs in bundle `bundle` of group `id`.
    pub(crate) fn note_bundle_actor(&mut self, id: &str, bundle: usize, actor: ActorId) {
        if let Some(ledger) = self.groups.get_mut(id).and_then(|g| g.bundle_mut(bundle)) {
            ledger.actors.push(actor);
        }
    }

    /// Removes a group, giving every reserved resource back to its node; reports the actors
    /// that ran inside it, for the head to stop.
    pub fn remove_group(&mut self, id: &str) -> Option<RemovedGroup> {
        let group = self.groups.remove(id)?;
        let mut removed = RemovedGroup::default();
        for bundle in &group.bundles {
            if let BundleState::Reserved(ledger) = bundle {
                self.release_bundle(ledger);
                removed.actors.extend(ledger.actors.iter().cloned());
            }
        }
        Some(removed)
    }

    fn release_bundle(&mut self, ledger: &BundleLedger) {
        if let Some(Some(node)) = self.nodes.get_mut(ledger.node.0 as usize) {
            node.release(ledger.reserved(), ledger.node_shares());
            self.feed.note(ledger.node);
        }
    }

    /// The placed group with this ID.
    pub fn group(&self, id: &str) -> Option<&PlacedGroup> {
        self.groups.get(id)
    }

    /// Every placed group, in ID order.
    pub fn groups(&self) -> impl Iterator<Item = &PlacedGroup> {
        self.groups.values()
    }

    /// Sets a node's total of one resource (seed 002's dynamic capacity: available moves by the
    /// change, floored at zero); zero deletes it.
    pub fn set_capacity(
        &mut self,
        index: NodeIndex,
        resource: ResourceId,
        total: Quantity,
    ) -> Result<(), ClusterError> {
        slot_mut(&mut self.nodes, &mut self.feed, index)?.set_capacity(
            resource,
            total,
            &self.registry,
        )?;
        self.refresh_derived(index);
        Ok(())
    }

    /// Deletes a resource from a node.
    pub fn delete_resource(
        &mut self,
        index: NodeIndex,
        resource: ResourceId,
    ) -> Result<(), ClusterError> {
        slot_mut(&mut self.nodes, &mut self.feed, index)?.delete_resource(resource);
        self.refresh_derived(index);
        Ok(())
    }

    /// Calls `changed` with each node slot changed since `cursor`, or with every slot below
    /// `slots` when the feed cannot say ([`ChangeFeed::each_changed`]); `cursor` then points
    /// past them.
    pub fn each_changed(&self, cursor: &mut FeedCursor, slots: usize, changed: impl FnMut(usize)) {
        self.feed.each_changed(cursor, slots, changed);
    }

    /// The largest total of each resource among the alive nodes (what the best-fit scorer
    /// scales leftovers by). Computed once per change of the alive nodes or their totals.
    pub fn largest_totals(&self) -> &ResourceSet {
        self.largest.0.get_or_init(|| self.scan_largest_totals())
    }

    fn scan_largest_totals(&self) -> ResourceSet {
        let mut largest = ResourceSet::new();
        for node in self.alive.iter().filter_map(|index| self.node(index)) {
            for (resource, total) in node.total().iter() {
                if total > largest.get(resource) {
                    largest.set(resource, total);
                }
            }
        }
        largest
    }

    /// Checks every node's ledger and the state sets.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(cached) = self.largest.0.get() {
            if *cached != self.scan_largest_totals() {
                return Err(format!("largest totals are stale: {cached:?}"));
            }
        }
        if let Some(cached) = self.alive_having.0.get() {
            let fresh: Vec<NodeSet> =
                self.having.iter().map(|having| self.alive.intersection(having)).collect();
            if *cached != fresh {
                return Err("the alive nodes per resource are stale".to_string());
            }
        }
        for (index, node) in self.nodes() {
            node.check_invariants()?;
            for (i, set) in self.having.iter().enumerate() {
                let has = node.total().iter().any(|(r, _)| r.index() == i);
                if set.contains(index) != has {
                    return Err(format!("{}: resource #{i} index says {}", node.id(), !has));
                }
            }
            let sets = [
                (&self.alive, NodeState::Alive),
                (&self.draining, NodeState::Draining),
                (&self.suspect, NodeState::Suspect),
                (&self.dead, NodeState::Dead),
            ];
            let in_sets = sets.iter().filter(|(set, _)| set.contains(index)).count();
            if in_sets != 1 {
                return Err(format!("{} is in {in_sets} state sets", node.id()));
            }
            if !sets.iter().any(|(set, state)| set.contains(index) && *state == node.state()) {
                return Err(format!(
                    "{} is {:?} but not in that state's set",
                    node.id(),
                    node.state()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, index, resources};
    use crate::ResourceRegistry;

    #[test]
    fn taints_no_node_carries_are_forgotten_and_their_ids_reused() {
        let mut c = cluster(&[("a", "CPU=4"), ("b", "CPU=4")]);
        let (a, b) = (index(&c, "a"), index(&c, "b"));
        let known = c.taint_table.len();
        // A dated maintenance taint every day for a year: the table does not grow.
        for day in 0..365 {
            let value = format!("day-{day}");
            assert!(c.add_taint(a, "maintenance", &value).unwrap());
            assert!(c.add_taint(b, "maintenance", &value).unwrap());
            assert!(c.remove_taint(a, "maintenance", &value).unwrap());
            assert_eq!(c.taint_table.len(), known + 1, "b still carries it");
            assert!(c.remove_taint(b, "maintenance", &value).unwrap());
            assert_eq!(c.taint_table.len(), known);
        }
        assert_eq!(c.taint_table.capacity(), known + 1, "one slot, reused every day");
        // A node removed gives its taints up too; a refused node interns none.
        c.add_taint(a, "team", "ml").unwrap();
        c.remove_node(a).unwrap();
        assert_eq!(c.taint_table.len(), known);
        let mut spec = NodeSpec::new(NodeId::new("c").unwrap(), ResourceSet::new());
        spec.taints = vec![("ok".into(), "yes".into()), ("bad key".into(), "x".into())];
        assert!(c.add_node_with(spec).is_err());
        assert_eq!(c.taint_table.len(), known);
        // The taint a node still carries keeps its meaning.
        c.add_taint(b, "gpu_node", "true").unwrap();
        c.add_taint(b, "maintenance", "later").unwrap();
        c.remove_taint(b, "maintenance", "later").unwrap();
        let kept = c.node(b).unwrap().taints()[0];
        assert_eq!(
            (c.taint(kept).key.as_str(), c.taint(kept).value.as_str()),
            ("gpu_node", "true")
        );
    }

    #[test]
    fn removed_nodes_slots_are_reused_and_their_old_allocations_release_nothing() {
        let mut c = cluster(&[("a", "CPU=4"), ("b", "CPU=4")]);
        let four = resources(c.registry_mut(), "CPU=4");
        let stale = c.reserve(index(&c, "a"), &four).unwrap();
        let slot = index(&c, "a");
        c.remove_node(slot).unwrap();
        // Nodes coming and going do not grow the cluster: the slot is taken again.
        for round in 0..100 {
            let id = NodeId::new(&format!("r{round}")).unwrap();
            assert_eq!(c.add_node(id, four.clone()).unwrap(), slot);
            if round < 99 {
                c.remove_node(slot).unwrap();
            }
        }
        assert_eq!(c.nodes.len(), 2, "two slots, however many nodes came and went");
        // The slot's node now is full; the removed node's allocation must not free it.
        let held = c.reserve(slot, &four).unwrap();
        c.release(&stale);
        assert_eq!(c.node(slot).unwrap().available().get(ResourceId::CPU), Quantity::ZERO);
        c.release(&held);
        assert_eq!(c.node(slot).unwrap().available().get(ResourceId::CPU), Quantity::from_whole(4));
        c.check_invariants().unwrap();
    }

    #[test]
    fn reserve_instances_rebuilds_recorded_placements_or_says_why() {
        let mut c = cluster(&[("g", "CPU=4,GPU=2")]);
        let node = index(&c, "g");
        let set = resources(c.registry_mut(), "CPU=1,GPU=0.5");
        let allocation = c.reserve_instances(node, &set, &[(ResourceId::GPU, vec![1])]).unwrap();
        assert_eq!(allocation.instance_ids(ResourceId::GPU), [1]);

        let err = c.reserve_instances(node, &set, &[]).unwrap_err().to_string();
        assert_eq!(err, "node g: GPU instances: name the instances it takes");
        let err = c
            .reserve_instances(
                node,
                &set,
                &[(ResourceId::GPU, vec![0]), (ResourceId::CPU, vec![0])],
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("CPU instances: instances are named only for unit-instance"), "{err}");
        let big = resources(c.registry_mut(), "CPU=8,GPU=1");
        let err = c.reserve_instances(node, &big, &[(ResourceId::GPU, vec![0])]).unwrap_err();
        assert_eq!(err.to_string(), "node g cannot hold the request: needs 8 CPU, has 4 in total");
        let whole = resources(c.registry_mut(), "GPU=1");
        let err = c.reserve_instances(node, &whole, &[(ResourceId::GPU, vec![1])]).unwrap_err();
        assert!(err.to_string().contains("instance 1 has 0.5 free, 1 is needed"), "{err}");
        c.check_invariants().unwrap();
        c.release(&allocation);
        assert_eq!(c.node(node).unwrap().available(), c.node(node).unwrap().total());
    }

    fn spec(id: &str, total: &str, registry: &mut ResourceRegistry) -> NodeSpec {
        NodeSpec::new(NodeId::new(id).unwrap(), resources(registry, total))
    }

    #[test]
    fn labels_are_indexed_and_kept_current() {
        let mut c = Cluster::new(ResourceRegistry::default());
        let mut a = spec("a", "CPU=4", c.registry_mut());
        a.labels = Labels::parse_list("zone=z1,team=ml").unwrap();
        let a = c.add_node_with(a).unwrap();
        let b = spec("b", "CPU=4", c.registry_mut());
        let b = c.add_node_with(b).unwrap();
        let with = |c: &Cluster, k: &str, v: &str| -> Vec<NodeIndex> {
            c.label_index().nodes_with(k, v).map(|s| s.iter().collect()).unwrap_or_default()
        };
        assert_eq!(with(&c, "zone", "z1"), [a]);
        assert_eq!(with(&c, "berth.io/node-id", "b"), [b]);
        assert_eq!(with(&c, "berth.io/accelerator-type", ""), [a, b]);
        c.set_labels(a, NodeFacts::default(), Labels::parse_list("zone=z2").unwrap()).unwrap();
        assert!(with(&c, "zone", "z1").is_empty());
        assert!(with(&c, "team", "ml").is_empty());
        assert_eq!(with(&c, "zone", "z2"), [a]);
        let err = c.set_labels(
            b,
            NodeFacts::default(),
            Labels::parse_list("berth.io/node-id=x").unwrap(),
        );
        assert_eq!(err, Err(ClusterError::Label(LabelError::ReservedNodeId)));
        assert_eq!(with(&c, "berth.io/node-id", "b"), [b], "a refused change changes nothing");
        c.remove_node(a).unwrap();
        assert!(with(&c, "zone", "z2").is_empty());
    }

    #[test]
    fn taints_can_be_added_and_removed_and_rare_resources_taint_themselves() {
        let mut c = Cluster::new(ResourceRegistry::default());
        let mut g = spec("g", "CPU=4,GPU=1", c.registry_mut());
        g.taints = vec![("gpu_node".into(), "true".into())];
        let g = c.add_node_with(g).unwrap();
        let cpu = spec("cpu", "CPU=4", c.registry_mut());
        let cpu = c.add_node_with(cpu).unwrap();
        let taints = |c: &Cluster, n: NodeIndex| -> Vec<String> {
            let node = c.node(n).unwrap();
            node.taints()
                .iter()
                .map(|&t| format!("{}={}", c.taint(t).key, c.taint(t).value))
                .collect()
        };
        assert_eq!(taints(&c, g), ["gpu_node=true"]);
        assert_eq!(c.tainted().iter().collect::<Vec<_>>(), [g]);
        assert_eq!(c.add_taint(cpu, "memory-pressure", "high"), Ok(true));
        assert_eq!(c.add_taint(cpu, "memory-pressure", "high"), Ok(false));
        assert!(matches!(c.add_taint(cpu, "bad key", "x"), Err(ClusterError::Label(_))));
        assert_eq!(c.remove_taint(cpu, "memory-pressure", "high"), Ok(true));
        assert_eq!(c.remove_taint(cpu, "memory-pressure", "high"), Ok(false));
        assert!(!c.tainted().contains(cpu));

        c.set_rare_resources(&[ResourceId::GPU]);
        assert_eq!(taints(&c, g), ["gpu_node=true", "berth.io/rare-GPU=true"]);
        assert!(taints(&c, cpu).is_empty());
        let err = c.remove_taint(g, "berth.io/rare-GPU", "true").unwrap_err();
        assert!(err.to_string().contains("rare-resource isolation"), "{err}");
        // The taint follows the resource.
        c.set_capacity(cpu, ResourceId::GPU, Quantity::from_whole(2)).unwrap();
        assert_eq!(taints(&c, cpu), ["berth.io/rare-GPU=true"]);
        c.delete_resource(cpu, ResourceId::GPU).unwrap();
        assert!(taints(&c, cpu).is_empty());
        c.set_rare_resources(&[]);
        assert_eq!(taints(&c, g), ["gpu_node=true"]);
    }

    #[test]
    fn reserve_refuses_dead_draining_and_unknown_nodes() {
        let mut c = cluster(&[("a", "CPU=4"), ("b", "CPU=4")]);
        let set = resources(c.registry_mut(), "CPU=1");
        c.set_state(index(&c, "a"), NodeState::Draining).unwrap();
        c.set_state(index(&c, "b"), NodeState::Dead).unwrap();
        assert!(matches!(c.reserve(index(&c, "a"), &set), Err(ClusterError::NotAlive { .. })));
        assert!(matches!(c.reserve(index(&c, "b"), &set), Err(ClusterError::NotAlive { .. })));
        assert!(matches!(c.reserve(NodeIndex(9), &set), Err(ClusterError::UnknownNode(_))));
        assert!(matches!(
            c.set_state(index(&c, "b"), NodeState::Alive),
            Err(ClusterError::Dead(_))
        ));
    }

    #[test]
    fn a_suspect_node_moves_between_the_live_states_and_can_still_die() {
        let mut c = cluster(&[("a", "CPU=4")]);
        let a = index(&c, "a");
        let set = resources(c.registry_mut(), "CPU=1");
        for state in [NodeState::Suspect, NodeState::Draining, NodeState::Suspect] {
            c.set_state(a, state).unwrap();
            assert_eq!(c.node(a).unwrap().state(), state);
            assert_eq!(c.suspect().contains(a), state == NodeState::Suspect);
            assert!(matches!(c.reserve(a, &set), Err(ClusterError::NotAlive { .. })));
            c.check_invariants().unwrap();
        }
        c.set_state(a, NodeState::Alive).unwrap();
        assert!(c.reserve(a, &set).is_ok());
        c.set_state(a, NodeState::Suspect).unwrap();
        c.set_state(a, NodeState::Dead).unwrap();
        assert!(!c.suspect().contains(a) && c.dead().contains(a));
        assert!(matches!(c.set_state(a, NodeState::Suspect), Err(ClusterError::Dead(_))));
        c.check_invariants().unwrap();
    }
}
