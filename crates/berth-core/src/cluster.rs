//! The cluster model: nodes by dense index, their states as node sets, and the ledger operations
//! (reserve, release, capacity changes) that keep every node's invariants.

use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::diagnosis::Reason;
use crate::instances::InstanceId;
use crate::node::{ExactReserveError, Node, NodeError, NodeId, NodeIndex, NodeShares, NodeState};
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
    /// The node cannot hold the request (at all, or now); `detail` gives the figures.
    #[error("node {node} cannot hold the request: {detail}")]
    Insufficient {
        /// The node.
        node: NodeId,
        /// Why, as the filters would say it.
        reason: Reason,
        /// The reason in words, with resource names and amounts.
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
        self.shares.iter().map(|(id, shares)| (*id, shares.iter().map(|s| s.instance).collect()))
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

    fn reserve_with(
        &mut self,
        index: NodeIndex,
        request: &ResourceSet,
        instances: Option<&[(ResourceId, Vec<InstanceId>)]>,
    ) -> Result<Allocation, ClusterError> {
        let registry = &self.registry;
        let node = self.nodes.get_mut(index.0 as usize).and_then(Option::as_mut);
        let node = node.ok_or_else(|| ClusterError::UnknownNode(format!("#{}", index.0)))?;
        if node.state() != NodeState::Alive {
            return Err(ClusterError::NotAlive { node: node.id().clone(), state: node.state() });
        }
        let unfit = |node: &Node, reason: Reason| ClusterError::Insufficient {
            node: node.id().clone(),
            reason,
            detail: reason.describe(registry),
        };
        let shares = match instances {
            None => node.reserve(request, registry).map_err(|reason| unfit(node, reason))?,
            Some(instances) => {
                node.reserve_exact(request, instances, registry).map_err(|err| match err {
                    ExactReserveError::Unfit(reason) => unfit(node, reason),
                    ExactReserveError::Instances { resource, detail } => ClusterError::Instances {
                        node: node.id().clone(),
                        resource: registry.name(resource).to_string(),
                        detail,
                    },
                })?
            }
        };
        Ok(Allocation { node: index, resources: request.clone(), shares })
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
        let node = self.nodes.get_mut(index.0 as usize).and_then(Option::as_mut);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, index, resources};

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
}
