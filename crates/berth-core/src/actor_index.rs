//! The actor-label index (seed 000's label manager): per namespace, label key → value → the
//! nodes hosting at least one such actor, with reference counts; node → actors; and the guards
//! that hard anti-affinity leaves behind.
//!
//! Every question a decision asks costs set operations on node bitmaps, independent of how
//! many actors are placed: no code path scans the actors of every node.

use std::borrow::Cow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};
use smallvec::SmallVec;
use thiserror::Error;

use crate::actors::{
    ActorAffinity, ActorId, ActorSpec, AffinityExpression, AffinityOperator, MatchMode,
    OnPeerMoved, ACTOR_ID,
};
use crate::label_index::{LabelIndex, Nodes};
use crate::labels::Labels;
use crate::node::NodeIndex;
use crate::nodeset::NodeSet;

/// A set of nodes with a count per node: a node is in the set while its count is above zero.
/// Only counts above one are kept beside the set: the replicas of a service mostly run one per
/// node, and their value's set then needs no table.
#[derive(Clone, Debug, Default)]
struct Counted {
    nodes: NodeSet,
    /// Count − 1, for the nodes counted more than once.
    more: FxHashMap<NodeIndex, u32>,
}

impl Counted {
    fn add(&mut self, node: NodeIndex) {
        if !self.nodes.insert(node) {
            *self.more.entry(node).or_insert(0) += 1;
        }
    }

    /// Returns true when the set became empty.
    fn sub(&mut self, node: NodeIndex) -> bool {
        match self.more.get_mut(&node) {
            Some(more) => {
                *more -= 1;
                if *more == 0 {
                    self.more.remove(&node);
                }
            }
            None => {
                self.nodes.remove(node);
            }
        }
        self.is_empty()
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// Label key → nodes hosting an actor with the key (`any`) or with each value.
#[derive(Clone, Debug, Default)]
struct KeyEntry {
    any: Counted,
    values: FxHashMap<String, Counted>,
}

/// Guard sets per topology key (`None`: the node itself). Almost always one: kept inline, as a
/// map would allocate a table per guarded value.
#[derive(Clone, Debug, Default)]
struct ByTopology(SmallVec<[(Option<String>, Counted); 1]>);

impl ByTopology {
    fn add(&mut self, topology: &Option<String>, node: NodeIndex) {
        match self.0.iter_mut().find(|(t, _)| t == topology) {
            Some((_, set)) => set.add(node),
            None => {
                let mut set = Counted::default();
                set.add(node);
                self.0.push((topology.clone(), set));
            }
        }
    }

    fn sub(&mut self, topology: &Option<String>, node: NodeIndex) {
        if let Some(at) = self.0.iter().position(|(t, _)| t == topology) {
            if self.0[at].1.sub(node) {
                self.0.remove(at);
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = (Option<&str>, &Counted)> {
        self.0.iter().map(|(topology, set)| (topology.as_deref(), set))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Guards of one actor label key: where actors with the key (`any`, from `DOES_NOT_EXIST`) or
/// with a value (from `NOT_IN`) must not go.
#[derive(Clone, Debug, Default)]
struct GuardEntry {
    any: ByTopology,
    values: FxHashMap<String, ByTopology>,
}

#[derive(Clone, Debug, Default)]
struct Namespace {
    labels: FxHashMap<String, KeyEntry>,
    guards: FxHashMap<String, GuardEntry>,
}

/// One shared copy of each distinct value in use, with the number of its users: replicas of
/// one service carry equal labels and affinities, and keep one copy between them.
#[derive(Clone, Debug)]
struct Shared<T: Eq + Hash>(FxHashMap<Arc<T>, u32>);

impl<T: Eq + Hash> Default for Shared<T> {
    fn default() -> Self {
        Shared(FxHashMap::default())
    }
}

impl<T: Eq + Hash> Shared<T> {
    /// The shared copy of `value`, one more user counted.
    fn share(&mut self, value: Arc<T>) -> Arc<T> {
        if let Some((shared, users)) = self.0.get_key_value(&*value) {
            let shared = shared.clone();
            *self.0.get_mut(&*value).expect("just found") = users + 1;
            return shared;
        }
        self.0.insert(value.clone(), 1);
        value
    }

    /// One user fewer of `value`; the copy is dropped with its last user.
    fn release(&mut self, value: &T) {
        if let Some(users) = self.0.get_mut(value) {
            *users -= 1;
            if *users == 0 {
                self.0.remove(value);
            }
        }
    }
}

/// A placed actor as the index keeps it. Its labels and affinity are shared with the placed
/// actors that have equal ones, its ID and namespace are shared strings: a replica of a
/// service costs the index little more than its ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedActor {
    id: ActorId,
    namespace: Arc<str>,
    /// Its own labels, without `berth.io/actor-id` (its ID is that label's value).
    labels: Arc<Labels>,
    node: NodeIndex,
    affinity: Arc<ActorAffinity>,
}

impl PlacedActor {
    /// `spec`'s actor on `node`, placed with `affinity`: its hard anti-affinity guards its
    /// domain, and with `on_peer_moved: follow` its hard affinity is rechecked after changes.
    pub fn new(spec: &ActorSpec, node: NodeIndex, affinity: ActorAffinity) -> PlacedActor {
        let mut labels = spec.labels.clone();
        labels.remove(ACTOR_ID);
        PlacedActor {
            id: spec.id.clone(),
            namespace: Arc::from(spec.namespace.as_str()),
            labels: Arc::new(labels),
            node,
            affinity: Arc::new(affinity),
        }
    }

    /// Its ID.
    pub fn id(&self) -> &ActorId {
        &self.id
    }

    /// Its namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Where it runs.
    pub fn node(&self) -> NodeIndex {
        self.node
    }

    /// The affinity it was placed with.
    pub fn affinity(&self) -> &ActorAffinity {
        &self.affinity
    }

    /// The value of its label `key`, `berth.io/actor-id` included.
    pub fn label(&self, key: &str) -> Option<&str> {
        if key == ACTOR_ID {
            Some(self.id.as_str())
        } else {
            self.labels.get(key)
        }
    }

    /// Its labels, `berth.io/actor-id` last.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().chain(std::iter::once((ACTOR_ID, self.id.as_str())))
    }

    /// True when `expression` names this actor.
    pub fn is_named_by(&self, expression: &AffinityExpression) -> bool {
        expression.names_value(self.label(&expression.key))
    }
}

/// The placed actors by ID: a table of the actors themselves, as a map would keep each ID twice.
#[derive(Clone, Debug, Default)]
struct ById(HashTable<PlacedActor>);

impl ById {
    fn hash(id: &str) -> u64 {
        FxBuildHasher.hash_one(id)
    }

    fn get(&self, id: &str) -> Option<&PlacedActor> {
        self.0.find(Self::hash(id), |actor| actor.id.as_str() == id)
    }

    fn insert(&mut self, actor: PlacedActor) {
        let hash = Self::hash(actor.id.as_str());
        self.0.insert_unique(hash, actor, |actor| Self::hash(actor.id.as_str()));
    }

    fn remove(&mut self, id: &str) -> Option<PlacedActor> {
        let found = self.0.find_entry(Self::hash(id), |actor| actor.id.as_str() == id).ok()?;
        Some(found.remove().0)
    }
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
    actors: ById,
    by_node: FxHashMap<NodeIndex, Vec<ActorId>>,
    namespaces: FxHashMap<Arc<str>, Namespace>,
    labels: Shared<Labels>,
    affinities: Shared<ActorAffinity>,
}

impl ActorIndex {
    /// Records a placed actor.
    pub fn insert(&mut self, mut actor: PlacedActor) -> Result<(), ActorIndexError> {
        if self.actors.get(actor.id.as_str()).is_some() {
            return Err(ActorIndexError::Duplicate(actor.id));
        }
        actor.labels = self.labels.share(actor.labels);
        actor.affinity = self.affinities.share(actor.affinity);
        let ns = match self.namespaces.get_key_value(&*actor.namespace) {
            Some((name, _)) => {
                actor.namespace = name.clone();
                self.namespaces.get_mut(&*actor.namespace).expect("just found")
            }
            None => self.namespaces.entry(actor.namespace.clone()).or_default(),
        };
        for (key, value) in actor.labels() {
            if !ns.labels.contains_key(key) {
                ns.labels.insert(key.to_string(), KeyEntry::default());
            }
            let entry = ns.labels.get_mut(key).expect("just inserted");
            entry.any.add(actor.node);
            if by_value(key) {
                if !entry.values.contains_key(value) {
                    entry.values.insert(value.to_string(), Counted::default());
                }
                entry.values.get_mut(value).expect("just inserted").add(actor.node);
            }
        }
        for guard in hard_anti(&actor.affinity) {
            if !ns.guards.contains_key(&guard.key) {
                ns.guards.insert(guard.key.clone(), GuardEntry::default());
            }
            let entry = ns.guards.get_mut(&guard.key).expect("just inserted");
            update_guards(entry, guard, actor.node, true);
        }
        self.by_node.entry(actor.node).or_default().push(actor.id.clone());
        self.actors.insert(actor);
        Ok(())
    }

    /// Forgets an actor (stopped, dead, or about to restart elsewhere).
    pub fn remove(&mut self, id: &str) -> Option<PlacedActor> {
        let actor = self.actors.remove(id)?;
        if let Some(ns) = self.namespaces.get_mut(&*actor.namespace) {
            for (key, value) in actor.labels() {
                if let Some(entry) = ns.labels.get_mut(key) {
                    entry.any.sub(actor.node);
                    let emptied = by_value(key)
                        && entry.values.get_mut(value).is_some_and(|c| c.sub(actor.node));
                    if emptied {
                        entry.values.remove(value);
                    }
                    if entry.any.is_empty() {
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
        self.labels.release(&actor.labels);
        self.affinities.release(&actor.affinity);
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
        self.actors.0.len()
    }

    /// True when no actor is placed.
    pub fn is_empty(&self) -> bool {
        self.actors.0.is_empty()
    }

    /// Every placed actor, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &PlacedActor> {
        self.actors.0.iter()
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
                            actor.namespace() == namespace
                                && actor.label(&expression.key) == Some(value.as_str())
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
            let by_topology = entry
                .any
                .iter()
                .chain(entry.values.get(value).into_iter().flat_map(ByTopology::iter));
            for (topology, set) in by_topology {
                let guarded = match topology {
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
            let by_topology = entry
                .any
                .iter()
                .chain(entry.values.get(value).into_iter().flat_map(ByTopology::iter));
            for (topology, set) in by_topology {
                guarded.union_with(&widen(labels, topology, &set.nodes));
            }
        }
        guarded
    }

    /// Actors placed with `on_peer_moved: follow` whose hard affinity no longer holds where
    /// they run (their peers moved or left), in ID order. Only those actors are looked at.
    pub fn violations(&self, labels: &LabelIndex) -> Vec<ActorId> {
        let mut violating: Vec<ActorId> = self
            .actors
            .0
            .iter()
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
                .any(|other| other.is_named_by(expression));
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
    let apply = |by_topology: &mut ByTopology| {
        if add {
            by_topology.add(topology, node);
        } else {
            by_topology.sub(topology, node);
        }
    };
    match guard.operator {
        AffinityOperator::DoesNotExist => apply(&mut entry.any),
        _ => {
            for value in &guard.values {
                if !entry.values.contains_key(value) {
                    entry.values.insert(value.clone(), ByTopology::default());
                }
                let by_topology = entry.values.get_mut(value).expect("just inserted");
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn a_counted_set_holds_the_nodes_counted_above_zero(
            ops in prop::collection::vec((any::<bool>(), 0..6u32), 0..60),
        ) {
            let mut counted = Counted::default();
            let mut model: BTreeMap<u32, u32> = BTreeMap::new();
            for (add, node) in ops {
                let present = model.contains_key(&node);
                if add {
                    counted.add(NodeIndex(node));
                    *model.entry(node).or_insert(0) += 1;
                } else if present {
                    let emptied = counted.sub(NodeIndex(node));
                    let count = model.get_mut(&node).unwrap();
                    *count -= 1;
                    if *count == 0 {
                        model.remove(&node);
                    }
                    prop_assert_eq!(emptied, model.is_empty());
                }
                let nodes: Vec<u32> = counted.nodes.iter().map(|n| n.0).collect();
                prop_assert_eq!(nodes, model.keys().copied().collect::<Vec<_>>());
                prop_assert!(counted.more.values().all(|&more| more > 0));
            }
        }
    }

    fn replica(id: &str, node: u32, service: &str) -> PlacedActor {
        let labels = Labels::from_pairs([("app", service)]).unwrap();
        let spec = ActorSpec::new(ActorId::new(id).unwrap(), "team", labels).unwrap();
        let anti = AffinityExpression::new(
            "app",
            AffinityOperator::NotIn,
            vec![service.to_string()],
            false,
            Some("zone".to_string()),
        )
        .unwrap();
        let affinity = ActorAffinity { expressions: vec![anti], ..ActorAffinity::default() };
        PlacedActor::new(&spec, NodeIndex(node), affinity)
    }

    #[test]
    fn a_placed_actor_carries_its_id_as_a_label() {
        let actor = replica("web-1", 3, "web");
        assert_eq!(actor.label(ACTOR_ID), Some("web-1"));
        assert_eq!(actor.label("app"), Some("web"));
        assert_eq!(actor.labels().collect::<Vec<_>>(), [("app", "web"), (ACTOR_ID, "web-1")]);
        let by_id = AffinityExpression::new(
            ACTOR_ID,
            AffinityOperator::In,
            vec!["web-1".to_string()],
            false,
            None,
        )
        .unwrap();
        assert!(actor.is_named_by(&by_id));
        assert!(!replica("web-2", 3, "web").is_named_by(&by_id));
    }

    #[test]
    fn replicas_share_one_copy_of_their_labels_and_affinity_until_the_last_leaves() {
        let mut index = ActorIndex::default();
        for (id, node) in [("web-1", 0), ("web-2", 1), ("db-1", 2)] {
            let service = id.split('-').next().unwrap();
            index.insert(replica(id, node, service)).unwrap();
        }
        let (one, two) = (index.get("web-1").unwrap(), index.get("web-2").unwrap());
        assert!(Arc::ptr_eq(&one.labels, &two.labels));
        assert!(Arc::ptr_eq(&one.affinity, &two.affinity));
        assert!(Arc::ptr_eq(&one.namespace, &index.get("db-1").unwrap().namespace));
        assert!(!Arc::ptr_eq(&one.labels, &index.get("db-1").unwrap().labels));
        assert_eq!((index.labels.0.len(), index.affinities.0.len()), (2, 2));

        index.remove("web-1").unwrap();
        assert_eq!(index.labels.0.get(&*index.get("web-2").unwrap().labels), Some(&1));
        index.remove("web-2").unwrap();
        assert_eq!((index.labels.0.len(), index.affinities.0.len()), (1, 1), "web's copy left");
        // An actor kept outside the index does not keep the shared copy in it.
        let kept = index.get("db-1").cloned().unwrap();
        index.remove("db-1").unwrap();
        assert!(index.labels.0.is_empty() && index.affinities.0.is_empty());
        assert_eq!(kept.label("app"), Some("db"));
    }

    #[test]
    fn guards_of_two_topologies_are_kept_apart() {
        let mut index = ActorIndex::default();
        let mut by_node = replica("a", 0, "web");
        Arc::make_mut(&mut by_node.affinity).expressions[0].topology_key = None;
        index.insert(by_node).unwrap();
        index.insert(replica("b", 1, "web")).unwrap();
        let entry = &index.namespaces["team"].guards["app"].values["web"];
        let sets: Vec<_> = entry.iter().map(|(t, set)| (t, set.nodes.len())).collect();
        assert_eq!(sets, [(None, 1), (Some("zone"), 1)]);
        index.remove("a").unwrap();
        let entry = &index.namespaces["team"].guards["app"].values["web"];
        assert_eq!(entry.iter().map(|(t, _)| t).collect::<Vec<_>>(), [Some("zone")]);
        index.remove("b").unwrap();
        assert!(index.namespaces["team"].guards.is_empty());
    }
}
