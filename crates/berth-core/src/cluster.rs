//! The cluster model: nodes by dense index, their states as node sets, and the ledger operations
//! (reserve, release, capacity changes) that keep every node's invariants.

use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::instances::InstanceId;
use crate::node::{Node, NodeError, NodeId, NodeIndex, NodeShares, NodeState};
use crate::nodeset::NodeSet;
use crate::quantity::Quantity;
use crate::resource::{ResourceId, ResourceRegistry, ResourceSet};

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
    /// The node lacks a resource now (or its instances are fragmented).
    #[error("node {node} cannot hold the request now: not enough {resource}")]
    Insufficient {
        /// The node.
        node: NodeId,
        /// The short resource's name.
        resource: String,
    },
    /// A dead node does not come back; an agent that returns registers as a new node.
    #[error("node {0} is dead; a returning machine registers as a new node")]
    Dead(NodeId),
}

/// Resources reserved on one node: what a release needs to give them back.
///
/// It is `Clone` so that the head can persist it. Release it exactly once: the ledger cannot
/// see a second release, and although capping at `total` keeps the invariants, a second
/// release of a GPU share could credit an instance that another placement holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    node: NodeIndex,
    resources: ResourceSet,
    shares: NodeShares,
}

impl Allocation {
    /// The node the resources are on.
    pub fn node(&self) -> NodeIndex {
        self.node
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
        self.shares
            .iter()
            .map(|(id, shares)| (*id, shares.iter().map(|s| s.instance).collect()))
    }
}

/// All nodes of a cluster and their ledgers.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    registry: ResourceRegistry,
    /// Slot per index; `None` once removed. Indices are never reused.
    nodes: Vec<Option<Node>>,
    by_id: FxHashMap<NodeId, NodeIndex>,
    alive: NodeSet,
    draining: NodeSet,
    dead: NodeSet,
}

impl Cluster {
    /// An empty cluster whose resource names are interned in `registry`.
    pub fn new(registry: ResourceRegistry) -> Cluster {
        Cluster {
            registry,
            ..Cluster::default()
        }
    }

    /// The resource names of this cluster.
    pub fn registry(&self) -> &ResourceRegistry {
        &self.registry
    }

    /// The resource names, for interning new ones (a request naming a custom resource).
    pub fn registry_mut(&mut self) -> &mut ResourceRegistry {
        &mut self.registry
    }

    /// Adds a live node with `total` resources, all available.
    pub fn add_node(&mut self, id: NodeId, total: ResourceSet) -> Result<NodeIndex, ClusterError> {
        if self.by_id.contains_key(&id) {
            return Err(ClusterError::DuplicateNode(id));
        }
        let node = Node::new(id.clone(), total, &self.registry)?;
        let index = NodeIndex(self.nodes.len() as u32);
        self.nodes.push(Some(node));
        self.by_id.insert(id, index);
        self.alive.insert(index);
        Ok(index)
    }

    /// The node at `index`, unless removed.
    pub fn node(&self, index: NodeIndex) -> Option<&Node> {
        self.nodes.get(index.0 as usize).and_then(Option::as_ref)
    }

    fn node_mut(&mut self, index: NodeIndex) -> Result<&mut Node, ClusterError> {
        self.nodes
            .get_mut(index.0 as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| ClusterError::UnknownNode(format!("#{}", index.0)))
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

    /// Number of nodes that were not removed (alive, draining or dead).
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

    /// Nodes declared dead.
    pub fn dead(&self) -> &NodeSet {
        &self.dead
    }

    /// Moves a node to `state`. Alive ⇄ draining in either direction; any state → dead; a dead
    /// node stays dead.
    pub fn set_state(&mut self, index: NodeIndex, state: NodeState) -> Result<(), ClusterError> {
        let node = self.node_mut(index)?;
        if node.state() == NodeState::Dead && state != NodeState::Dead {
            return Err(ClusterError::Dead(node.id().clone()));
        }
        node.set_state(state);
        for set in [&mut self.alive, &mut self.draining, &mut self.dead] {
            set.remove(index);
        }
        match state {
            NodeState::Alive => self.alive.insert(index),
            NodeState::Draining => self.draining.insert(index),
            NodeState::Dead => self.dead.insert(index),
        };
        Ok(())
    }

    /// Removes a node from the cluster; allocations on it become void.
    pub fn remove_node(&mut self, index: NodeIndex) -> Result<Node, ClusterError> {
        let node = self
            .nodes
            .get_mut(index.0 as usize)
            .and_then(Option::take)
            .ok_or_else(|| ClusterError::UnknownNode(format!("#{}", index.0)))?;
        self.by_id.remove(node.id());
        for set in [&mut self.alive, &mut self.draining, &mut self.dead] {
            set.remove(index);
        }
        Ok(node)
    }

    /// Reserves `request` on a live node, all or nothing.
    pub fn reserve(
        &mut self,
        index: NodeIndex,
        request: &ResourceSet,
    ) -> Result<Allocation, ClusterError> {
        let registry = &self.registry;
        let node = self
            .nodes
            .get_mut(index.0 as usize)
            .and_then(Option::as_mut);
        let node = node.ok_or_else(|| ClusterError::UnknownNode(format!("#{}", index.0)))?;
        if node.state() != NodeState::Alive {
            return Err(ClusterError::NotAlive {
                node: node.id().clone(),
                state: node.state(),
            });
        }
        let shares =
            node.reserve(request, registry)
                .map_err(|resource| ClusterError::Insufficient {
                    node: node.id().clone(),
                    resource: registry.name(resource).to_string(),
                })?;
        Ok(Allocation {
            node: index,
            resources: request.clone(),
            shares,
        })
    }

    /// Gives an allocation back. On a dead or removed node this does nothing: its resources are
    /// gone with it.
    pub fn release(&mut self, allocation: &Allocation) {
        if let Some(Some(node)) = self.nodes.get_mut(allocation.node.0 as usize) {
            node.release(&allocation.resources, &allocation.shares);
        }
    }

    /// Sets a node's total of one resource (seed 002's dynamic capacity: available moves by the
    /// change, floored at zero); zero deletes it.
    pub fn set_capacity(
        &mut self,
        index: NodeIndex,
        resource: ResourceId,
        total: Quantity,
    ) -> Result<(), ClusterError> {
        let registry = &self.registry;
        let node = self
            .nodes
            .get_mut(index.0 as usize)
            .and_then(Option::as_mut);
        let node = node.ok_or_else(|| ClusterError::UnknownNode(format!("#{}", index.0)))?;
        node.set_capacity(resource, total, registry)?;
        Ok(())
    }

    /// Deletes a resource from a node.
    pub fn delete_resource(
        &mut self,
        index: NodeIndex,
        resource: ResourceId,
    ) -> Result<(), ClusterError> {
        self.node_mut(index)?.delete_resource(resource);
        Ok(())
    }

    /// Checks every node's ledger and the state sets.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (index, node) in self.nodes() {
            node.check_invariants()?;
            let in_sets = [&self.alive, &self.draining, &self.dead]
                .iter()
                .filter(|set| set.contains(index))
                .count();
            if in_sets != 1 {
                return Err(format!("{} is in {in_sets} state sets", node.id()));
            }
        }
        Ok(())
    }
}
