//! The actor-label index (seed 000's label manager): per namespace, label key → value → the
//! nodes hosting at least one such actor, with reference counts; node → actors; and the guards
//! that hard anti-affinity leaves behind.
//!
//! Every question a decision asks costs set operations on node bitmaps, independent of how
//! many actors are placed: no code path scans the actors of every node.

use std::borrow::Cow;

use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::actors::{
    ActorAffinity, ActorId, AffinityExpression, AffinityOperator, MatchMode, OnPeerMoved, ACTOR_ID,
};
use crate::label_index::{LabelIndex, Nodes};
use crate::labels::Labels;
use crate::node::NodeIndex;
use crate::nodeset::NodeSet;

/// A set of nodes with a count per node: a node is in the set while its count is above zero.
#[derive(Clone, Debug, Default)]
struct Counted {
    nodes: NodeSet,
    counts: FxHashMap<NodeIndex, u32>,
}

impl Counted {
    fn add(&mut self, node: NodeIndex) {
        *self.counts.entry(node).or_insert(0) += 1;
        self.nodes.insert(node);
    }

    /// Returns true when the set became empty.
    fn sub(&mut self, node: NodeIndex) -> bool {
        if let Some(count) = self.counts.get_mut(&node) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&node);
                self.nodes.remove(node);
            }
        }
        self.counts.is_empty()
    }
}

/// Label key → nodes hosting an actor with the key (`any`) or with each value.
#[derive(Clone, Debug, Default)]
struct KeyEntry {
    any: Counted,
    values: FxHashMap<String, Counted>,
}

/// Guards of one actor label key, per topology key: where actors with the key (`any`, from
/// `DOES_NOT_EXIST`) or with a value (from `NOT_IN`) must not go.
#[derive(Clone, Debug, Default)]
struct GuardEntry {
    any: FxHashMap<Option<String>, Counted>,
    values: FxHashMap<String, FxHashMap<Option<String>, Counted>>,
}

#[derive(Clone, Debug, Default)]
struct Namespace {
    labels: FxHashMap<String, KeyEntry>,
    guards: FxHashMap<String, GuardEntry>,
}

/// A placed actor as the index keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedActor {
    /// Its ID.
    pub id: ActorId,
    /// Its namespace.
    pub namespace: String,
    /// Its labels, `berth.io/actor-id` included.
    pub labels: Labels,
    /// Where it runs.
    pub node: NodeIndex,
    /// The affinity it was placed with: its hard anti-affinity guards its domain, and with
    /// `on_peer_moved: follow` its hard affinity is rechecked after changes.
    pub affinity: ActorAffinity,
}

/// An actor the index cannot take.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ActorIndexError {
    /// An actor with this ID is placed already.
    #[error("actor {0} is placed already")]
    Duplicate(ActorId),
}

/// Which actors run where, by label.
#[derive(Clone, Debug, Default)]
pub struct ActorIndex {
    actors: FxHashMap<ActorId, PlacedActor>,
    by_node: FxHashMap<NodeIndex, Vec<ActorId>>,
    namespaces: FxHashMap<String, Namespace>,
}

impl ActorIndex {
    /// Records a placed actor.
    pub fn insert(&mut self, actor: PlacedActor) -> Result<(), ActorIndexError> {
        if self.actors.contains_key(&actor.id) {
            return Err(ActorIndexError::Duplicate(actor.id));
        }
        let ns = self.namespaces.entry(actor.namespace.clone()).or_default();
        for (key, value) in actor.labels.iter() {
            let entry = ns.labels.entry(key.to_string()).or_default();
            entry.any.add(actor.node);
            if by_value(key) {
                entry.values.entry(value.to_string()).or_default().add(actor.node);
            }
        }
        for guard in hard_anti(&actor.affinity) {
            update_guards(ns.guards.entry(guard.key.clone()).or_default(), guard, actor.node, true);
        }
        self.by_node.entry(actor.node).or_default().push(actor.id.clone());
        self.actors.insert(actor.id.clone(), actor);
        Ok(())
    }

    /// Forgets an actor (stopped, dead, or about to restart elsewhere).
    pub fn remove(&mut self, id: &str) -> Option<PlacedActor> {
        let actor = self.actors.remove(id)?;
        if let Some(ns) = self.namespaces.get_mut(&actor.namespace) {
            for (key, value) in actor.labels.iter() {
                if let Some(entry) = ns.labels.get_mut(key) {
                    entry.any.sub(actor.node);
                    let emptied = by_value(key)
                        && entry.values.get_mut(value).is_some_and(|c| c.sub(actor.node));
                    if emptied {
                        entry.values.remove(value);
                    }
                    if entry.any.counts.is_empty() {
                        ns.labels.remove(key);
                    }
                }
            }
            for guard in hard_anti(&actor.affinity) {
                if let Some(entry) = ns.guards.get_mut(&guard.key) {
                    update_guards(entry, guard, actor.node, false);
                    if entry.any.is_empty() && entry.values.is_empty() {
                        ns.guards.remove(&guard.key);
                    }
                }
            }
        }
        if let Some(ids) = self.by_node.get_mut(&actor.node) {
            ids.retain(|other| other != &actor.id);
            if ids.is_empty() {
                self.by_node.remove(&actor.node);
            }
        }
        Some(actor)
    }

    /// Forgets every actor of a node (the node died), returning them in ID order.
    pub fn remove_node(&mut self, node: NodeIndex) -> Vec<PlacedActor> {
        let mut ids = self.by_node.get(&node).cloned().unwrap_or_default();
        ids.sort();
        ids.iter().filter_map(|id| self.remove(id.as_str())).collect()
    }

    /// The placed actor with this ID.
    pub fn get(&self, id: &str) -> Option<&PlacedActor> {
        self.actors.get(id)
    }

    /// The actors on a node, in placement order.
    pub fn actors_on(&self, node: NodeIndex) -> &[ActorId] {
        self.by_node.get(&node).map_or(&[], Vec::as_slice)
    }

    /// Number of placed actors.
    pub fn len(&self) -> usize {
        self.actors.len()
    }

    /// True when no actor is placed.
    pub fn is_empty(&self) -> bool {
        self.actors.is_empty()
    }

    /// Every placed actor, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &PlacedActor> {
        self.actors.values()
    }

    /// The nodes (or, with a topology key, the domains) hosting an actor of `namespace` that
    /// `expression` names, whatever its polarity.
    pub fn named_nodes(
        &self,
        namespace: &str,
        expression: &AffinityExpression,
        labels: &LabelIndex,
    ) -> NodeSet {
        widen(labels, expression.topology_key.as_deref(), &self.hosting(namespace, expression))
    }

    /// The nodes hosting an actor of `namespace` that `expression` names (no widening).
    fn hosting(&self, namespace: &str, expression: &AffinityExpression) -> NodeSet {
        let mut nodes = NodeSet::new();
        let entry = self.namespaces.get(namespace).and_then(|ns| ns.labels.get(&expression.key));
        if let Some(entry) = entry {
            match expression.operator {
                AffinityOperator::Exists | AffinityOperator::DoesNotExist => {
                    nodes = entry.any.nodes.clone()
                }
                AffinityOperator::In | AffinityOperator::NotIn if !by_value(&expression.key) => {
                    // An actor's ID label is its ID: the actors themselves are that index.
                    for value in &expression.values {
                        let named = self.actors.get(value.as_str()).filter(|actor| {
                            actor.namespace == namespace
                                && actor.labels.get(&expression.key) == Some(value.as_str())
                        });
                        if let Some(actor) = named {
                            nodes.insert(actor.node);
                        }
                    }
                }
                AffinityOperator::In | AffinityOperator::NotIn => {
                    for value in &expression.values {
                        if let Some(set) = entry.values.get(value) {
                            nodes.union_with(&set.nodes);
                        }
                    }
                }
            }
        }
        nodes
    }

    /// The nodes that satisfy `expression` for a request in `namespace`: the named nodes for
    /// `IN`/`EXISTS`, the others for `NOT_IN`/`DOES_NOT_EXIST`, within `universe`.
    pub fn satisfying(
        &self,
        namespace: &str,
        expression: &AffinityExpression,
        labels: &LabelIndex,
        universe: &NodeSet,
    ) -> NodeSet {
        let hosting = self.hosting(namespace, expression);
        let positive = expression.operator.is_positive();
        match expression.topology_key.as_deref() {
            None if positive => universe.intersection(&hosting),
            None => universe.difference(&hosting),
            // The domains holding a named actor, as one (cached) union: one set operation
            // against `universe` per decision.
            Some(topology) => {
                let domains = labels.domains_of(topology, &hosting);
                if positive {
                    universe.intersection(&domains)
                } else {
                    universe.difference(&domains)
                }
            }
        }
    }

    /// `from` without the domains guarded against an actor of `namespace` with `actor_labels`
    /// (see [`ActorIndex::guarded`]), one (cached) union of domains per guard. `from` itself
    /// when no guard applies: a decision then copies nothing.
    pub fn unguarded<'f>(
        &self,
        namespace: &str,
        actor_labels: &Labels,
        labels: &LabelIndex,
        from: &'f NodeSet,
    ) -> Cow<'f, NodeSet> {
        let mut result = Cow::Borrowed(from);
        let Some(ns) = self.namespaces.get(namespace) else { return result };
        for (key, value) in actor_labels.iter() {
            let Some(entry) = ns.guards.get(key) else { continue };
            let by_topology = entry.any.iter().chain(entry.values.get(value).into_iter().flatten());
            for (topology, set) in by_topology {
                let guarded = match topology.as_deref() {
                    None => Nodes::Borrowed(&set.nodes),
                    Some(topology) => labels.domains_of(topology, &set.nodes),
                };
                result = Cow::Owned(match result {
                    Cow::Borrowed(from) => from.difference(&guarded),
                    Cow::Owned(mut kept) => {
                        kept.difference_with(&guarded);
                        kept
                    }
                });
            }
        }
        result
    }

    /// Where an actor of `namespace` with `labels` must not go: the domains guarded by placed
    /// actors whose hard anti-affinity names such an actor (the symmetric half of the rule).
    pub fn guarded(&self, namespace: &str, actor_labels: &Labels, labels: &LabelIndex) -> NodeSet {
        let mut guarded = NodeSet::new();
        let Some(ns) = self.namespaces.get(namespace) else { return guarded };
        for (key, value) in actor_labels.iter() {
            let Some(entry) = ns.guards.get(key) else { continue };
            let by_topology = entry.any.iter().chain(entry.values.get(value).into_iter().flatten());
            for (topology, set) in by_topology {
                guarded.union_with(&widen(labels, topology.as_deref(), &set.nodes));
            }
        }
        guarded
    }

    /// Actors placed with `on_peer_moved: follow` whose hard affinity no longer holds where
    /// they run (their peers moved or left), in ID order. Only those actors are looked at.
    pub fn violations(&self, labels: &LabelIndex) -> Vec<ActorId> {
        let mut violating: Vec<ActorId> = self
            .actors
            .values()
            .filter(|a| a.affinity.on_peer_moved == OnPeerMoved::Follow)
            .filter(|a| !self.holds_without_itself(a, labels))
            .map(|a| a.id.clone())
            .collect();
        violating.sort();
        violating
    }

    /// True when `actor`'s hard expressions hold on its node, not counting `actor` itself.
    fn holds_without_itself(&self, actor: &PlacedActor, labels: &LabelIndex) -> bool {
        let hard = actor.affinity.expressions.iter().filter(|e| !e.soft);
        let mut results = hard.map(|expression| {
            let mut hosting = self.hosting(&actor.namespace, expression);
            let others_here = self
                .actors_on(actor.node)
                .iter()
                .filter(|id| **id != actor.id)
                .filter_map(|id| self.actors.get(id.as_str()))
                .any(|other| expression.names_actor(&other.labels));
            if !others_here {
                hosting.remove(actor.node);
            }
            let named = widen(labels, expression.topology_key.as_deref(), &hosting);
            named.contains(actor.node) == expression.operator.is_positive()
        });
        match actor.affinity.match_mode {
            MatchMode::All => results.all(|holds| holds),
            MatchMode::Any => {
                let results: Vec<bool> = results.collect();
                results.is_empty() || results.into_iter().any(|holds| holds)
            }
        }
    }
}

/// True when the index keeps, for label `key`, the nodes of each value. Not for the actor-ID
/// label: each of its values names one actor, found by ID in the actors themselves, and a
/// counted node set per actor was most of what a placed actor cost the index.
fn by_value(key: &str) -> bool {
    key != ACTOR_ID
}

/// The hard anti-affinity expressions of an affinity: the ones that guard.
fn hard_anti(affinity: &ActorAffinity) -> impl Iterator<Item = &AffinityExpression> {
    affinity.expressions.iter().filter(|e| !e.soft && !e.operator.is_positive())
}

/// Adds (or removes) `node` in every guard set `guard` covers, dropping sets that empty.
fn update_guards(entry: &mut GuardEntry, guard: &AffinityExpression, node: NodeIndex, add: bool) {
    let topology = &guard.topology_key;
    let apply = |by_topology: &mut FxHashMap<Option<String>, Counted>| {
        let set = by_topology.entry(topology.clone()).or_default();
        if add {
            set.add(node);
        } else if set.sub(node) {
            by_topology.remove(topology);
        }
    };
    match guard.operator {
        AffinityOperator::DoesNotExist => apply(&mut entry.any),
        _ => {
            for value in &guard.values {
                let by_topology = entry.values.entry(value.clone()).or_default();
                apply(by_topology);
                if by_topology.is_empty() {
                    entry.values.remove(value);
                }
            }
        }
    }
}

/// `nodes` widened to whole domains of `topology` (a node label key); unchanged without one.
/// See [`LabelIndex::domains_of`].
pub fn widen(labels: &LabelIndex, topology: Option<&str>, nodes: &NodeSet) -> NodeSet {
    match topology {
        None => nodes.clone(),
        Some(topology) => labels.domains_of(topology, nodes).into_owned(),
    }
}
