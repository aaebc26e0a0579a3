//! The published, read-only picture of the cluster that every reader (REST handlers, the
//! dashboard, `wait`) uses without asking the owner task.
//!
//! The owner edits its own `View` as it applies commands and hands a copy to the committer at
//! the end of each cycle; the committer publishes it once that cycle's changes are durable, so
//! a reader never sees a state that a crash could take back. Copies are cheap: the maps are
//! `imbl` persistent maps (structural sharing, O(1) clone, O(log n) update).

use berth_api::ObjectKind;
use std::sync::Arc;

use berth_api::rest::Forgotten;
use berth_api::rest::{
    Actor, ClusterStatus, Demand, Explanation, Group, List, ListQuery, Node, NodeCounts, NodeState,
    PendingItem, ResourceUse, StringMap, Task,
};
use berth_core::Quantity;
use imbl::OrdMap;

/// The most items a list answers with, whatever `limit` says.
pub const MAX_LIST_LIMIT: usize = 100_000;
/// Items a list answers with when `limit` is absent.
pub const DEFAULT_LIST_LIMIT: usize = 1_000;
/// Pending items shown in the cluster status.
pub const STATUS_PENDING_SHOWN: usize = 100;

/// A waiting request, as the status and autoscaler demand show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRequest {
    /// What and why.
    pub item: PendingItem,
    /// Resource maps: one for an actor or task, one per bundle for a group.
    pub shapes: Vec<StringMap>,
    /// Its label selector, key to expression.
    pub label_selector: StringMap,
    /// Its tolerations, key to expression.
    pub tolerations: StringMap,
}

/// The cluster as of the last durable cycle.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Nodes by ID.
    pub nodes: OrdMap<String, Arc<Node>>,
    /// Actors by sequence number (creation order).
    pub actors: OrdMap<u64, Arc<Actor>>,
    /// Tasks by sequence number.
    pub tasks: OrdMap<u64, Arc<Task>>,
    /// Placement groups by sequence number.
    pub groups: OrdMap<u64, Arc<Group>>,
    /// Waiting requests, oldest first.
    pub waiting: OrdMap<(ObjectKind, u64), Arc<PendingRequest>>,
    /// Commit cycles published so far (a change counter for pollers).
    pub generation: u64,
    /// Finished objects forgotten so far and what is kept, by [`ObjectKind::index`].
    pub forgotten: [Forgotten; 3],
    /// The changes that led here, for watchers.
    pub changes: crate::changes::ChangeLog,
    /// Resources under rare-resource isolation.
    pub rare_resources: Vec<String>,
    /// The autoscaler's status, when the head runs one.
    pub autoscaler: Option<Arc<berth_api::rest::AutoscalerStatus>>,
}

/// Why a query parameter was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryError {
    /// The parameter.
    pub field: &'static str,
    /// The rule.
    pub message: String,
}

/// A list query, checked.
struct Filter<'a> {
    state: Option<String>,
    namespace: Option<&'a str>,
    node: Option<&'a str>,
    label: Option<(&'a str, &'a str)>,
    limit: usize,
}

impl<'a> Filter<'a> {
    fn new(query: &'a ListQuery, states: &[&str]) -> Result<Filter<'a>, QueryError> {
        let state = match &query.state {
            None => None,
            Some(s) => {
                let upper = s.to_ascii_uppercase();
                if !states.contains(&upper.as_str()) {
                    return Err(QueryError {
                        field: "state",
                        message: format!("unknown state {s:?}; use one of {}", states.join(", ")),
                    });
                }
                Some(upper)
            }
        };
        let label = match &query.label {
            None => None,
            Some(text) => Some(text.split_once('=').ok_or_else(|| QueryError {
                field: "label",
                message: format!("{text:?} is not key=value"),
            })?),
        };
        let limit = match query.limit {
            None => DEFAULT_LIST_LIMIT,
            Some(0) => {
                return Err(QueryError { field: "limit", message: "must be at least 1".into() })
            }
            Some(n) if n > MAX_LIST_LIMIT => {
                return Err(QueryError {
                    field: "limit",
                    message: format!("{n} is more than the most a list answers, {MAX_LIST_LIMIT}"),
                })
            }
            Some(n) => n,
        };
        Ok(Filter {
            state,
            namespace: query.namespace.as_deref(),
            node: query.node.as_deref(),
            label,
            limit,
        })
    }

    fn keeps(
        &self,
        state: &str,
        namespace: Option<&str>,
        node: Option<&str>,
        labels: Option<&StringMap>,
    ) -> bool {
        self.state.as_deref().is_none_or(|s| s == state)
            && self.namespace.is_none_or(|n| namespace == Some(n))
            && self.node.is_none_or(|n| node == Some(n))
            && self
                .label
                .is_none_or(|(k, v)| labels.and_then(|l| l.get(k)).is_some_and(|value| value == v))
    }

    fn collect<T: Clone>(&self, items: impl Iterator<Item = (bool, T)>) -> List<T> {
        let mut total = 0;
        let mut out = Vec::new();
        for (keep, item) in items {
            if keep {
                total += 1;
                if out.len() < self.limit {
                    out.push(item);
                }
            }
        }
        List { items: out, total, forgotten: None }
    }
}

fn upper<T: serde::Serialize>(state: &T) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl View {
    /// The node with this ID, or else the one alive node with this address (seed 004:
    /// `--node-ip`).
    pub fn node(&self, id_or_ip: &str) -> Option<Arc<Node>> {
        if let Some(node) = self.nodes.get(id_or_ip) {
            return Some(node.clone());
        }
        let mut by_ip = self.nodes.values().filter(|n| n.address == id_or_ip);
        let first = by_ip.next()?;
        // Two nodes on one address (several agents on one machine): prefer the live one, and
        // refuse to guess between live ones.
        let live: Vec<&Arc<Node>> =
            std::iter::once(first).chain(by_ip).filter(|n| n.state != NodeState::Dead).collect();
        match live.as_slice() {
            [one] => Some((*one).clone()),
            [] => Some(first.clone()),
            _ => None,
        }
    }

    /// Nodes matching `query` (`state`, `label`; `namespace` and `node` do not apply).
    pub fn list_nodes(&self, query: &ListQuery) -> Result<List<Node>, QueryError> {
        let filter = Filter::new(query, &["ALIVE", "DRAINING", "DEAD"])?;
        Ok(filter.collect(self.nodes.values().map(|n| {
            let keep = filter.keeps(&upper(&n.state), None, Some(&n.node_id), Some(&n.labels));
            (keep, (**n).clone())
        })))
    }

    /// The actor with this ID.
    pub fn actor(&self, id: &str) -> Option<Arc<Actor>> {
        match ObjectKind::parse(id)? {
            (ObjectKind::Actor, seq) => self.actors.get(&seq).cloned(),
            _ => None,
        }
    }

    /// Actors matching `query`.
    pub fn list_actors(&self, query: &ListQuery) -> Result<List<Actor>, QueryError> {
        let filter = Filter::new(query, &["PENDING", "ALIVE", "RESTARTING", "DEAD"])?;
        let mut list = filter.collect(self.actors.values().map(|a| {
            let keep = filter.keeps(
                &upper(&a.state),
                Some(&a.namespace),
                a.node_id.as_deref(),
                Some(&a.spec.labels),
            );
            (keep, (**a).clone())
        }));
        list.forgotten = Some(self.forgotten[ObjectKind::Actor.index()]);
        Ok(list)
    }

    /// The task with this ID.
    pub fn task(&self, id: &str) -> Option<Arc<Task>> {
        match ObjectKind::parse(id)? {
            (ObjectKind::Task, seq) => self.tasks.get(&seq).cloned(),
            _ => None,
        }
    }

    /// Tasks matching `query` (`label` does not apply: tasks have none).
    pub fn list_tasks(&self, query: &ListQuery) -> Result<List<Task>, QueryError> {
        let filter =
            Filter::new(query, &["PENDING", "RUNNING", "FINISHED", "FAILED", "CANCELLED"])?;
        let mut list = filter.collect(self.tasks.values().map(|t| {
            let keep =
                filter.keeps(&upper(&t.state), Some(&t.namespace), t.node_id.as_deref(), None);
            (keep, (**t).clone())
        }));
        list.forgotten = Some(self.forgotten[ObjectKind::Task.index()]);
        Ok(list)
    }

    /// The placement group with this ID.
    pub fn group(&self, id: &str) -> Option<Arc<Group>> {
        match ObjectKind::parse(id)? {
            (ObjectKind::Group, seq) => self.groups.get(&seq).cloned(),
            _ => None,
        }
    }

    /// Groups matching `query` (`node`: groups with a bundle there).
    pub fn list_groups(&self, query: &ListQuery) -> Result<List<Group>, QueryError> {
        let filter = Filter::new(query, &["PENDING", "CREATED", "RESCHEDULING", "REMOVED"])?;
        let mut list = filter.collect(self.groups.values().map(|g| {
            let on_node = filter
                .node
                .is_none_or(|id| g.bundles.iter().any(|b| b.node_id.as_deref() == Some(id)));
            // The node filter is `on_node` (a group has a node per bundle).
            let keep =
                on_node && filter.keeps(&upper(&g.state), Some(&g.namespace), filter.node, None);
            (keep, (**g).clone())
        }));
        list.forgotten = Some(self.forgotten[ObjectKind::Group.index()]);
        Ok(list)
    }

    /// What `GET /api/v1/explain/{id}` answers for an actor, task or group.
    pub fn explain(&self, id: &str) -> Option<Explanation> {
        let (kind, state, node_id, diagnosis) = match ObjectKind::parse(id)? {
            (ObjectKind::Actor, _) => {
                let a = self.actor(id)?;
                let node = a.node_id.as_deref().map(str::to_string);
                (ObjectKind::Actor, upper(&a.state), node, a.diagnosis.as_deref().cloned())
            }
            (ObjectKind::Task, _) => {
                let t = self.task(id)?;
                let node = t.node_id.as_deref().map(str::to_string);
                (ObjectKind::Task, upper(&t.state), node, t.diagnosis.as_deref().cloned())
            }
            (ObjectKind::Group, _) => {
                let g = self.group(id)?;
                let node = g.bundles.first().and_then(|b| b.node_id.clone());
                (ObjectKind::Group, upper(&g.state), node, g.diagnosis.clone())
            }
        };
        let summary = match (&diagnosis, &node_id) {
            (Some(d), _) if d.infeasible => {
                format!("{id} is {state} and infeasible: no node could ever hold it. {}", d.summary)
            }
            (Some(d), _) => format!("{id} is {state}, waiting: {}", d.summary),
            (None, Some(node)) => format!("{id} is {state} on {node}"),
            (None, None) => format!("{id} is {state}"),
        };
        Some(Explanation {
            id: id.to_string(),
            kind: kind.word().to_string(),
            state,
            node_id,
            diagnosis,
            summary,
        })
    }

    /// Nodes alive, draining and dead.
    pub fn status_counts(&self) -> (u64, u64, u64) {
        let mut counts = (0, 0, 0);
        for node in self.nodes.values() {
            match node.state {
                NodeState::Alive => counts.0 += 1,
                NodeState::Draining => counts.1 += 1,
                NodeState::Dead => counts.2 += 1,
            }
        }
        counts
    }

    /// The cluster status: nodes by state, resources, counts, what waits and the demand.
    pub fn status(&self) -> ClusterStatus {
        let mut status = ClusterStatus::default();
        let mut sums: std::collections::BTreeMap<String, (Quantity, Quantity)> = Default::default();
        for node in self.nodes.values() {
            let counts: &mut NodeCounts = &mut status.nodes;
            match node.state {
                NodeState::Alive => counts.alive += 1,
                NodeState::Draining => counts.draining += 1,
                NodeState::Dead => {
                    counts.dead += 1;
                    continue;
                }
            }
            for (name, used) in node.resources.iter() {
                let entry =
                    sums.entry(name.to_string()).or_insert((Quantity::ZERO, Quantity::ZERO));
                entry.0 = entry.0.checked_add(used.total).unwrap_or(Quantity::MAX);
                entry.1 = entry.1.checked_add(used.available).unwrap_or(Quantity::MAX);
            }
        }
        status.resources = sums
            .into_iter()
            .map(|(name, (total, free))| (name, ResourceUse::new(total, free)))
            .collect();
        for a in self.actors.values() {
            *status.actors.entry(upper(&a.state)).or_default() += 1;
        }
        for t in self.tasks.values() {
            *status.tasks.entry(upper(&t.state)).or_default() += 1;
        }
        for g in self.groups.values() {
            *status.placement_groups.entry(upper(&g.state)).or_default() += 1;
        }
        status.pending_total = self.waiting.len() as u64;
        status.pending =
            self.waiting.values().take(STATUS_PENDING_SHOWN).map(|w| w.item.clone()).collect();
        status.demand = demand(self.waiting.values().map(|w| &**w));
        status.rare_resources = self.rare_resources.clone();
        status
    }
}

/// Waiting requests grouped by shape, selector and tolerations, largest group first.
fn demand<'a>(waiting: impl Iterator<Item = &'a PendingRequest>) -> Vec<Demand> {
    let mut groups: std::collections::BTreeMap<(StringMap, StringMap, StringMap), (u64, u64)> =
        Default::default();
    for w in waiting {
        for shape in &w.shapes {
            let key = (shape.clone(), w.label_selector.clone(), w.tolerations.clone());
            let entry = groups.entry(key).or_default();
            entry.0 += 1;
            if w.item.diagnosis.infeasible {
                entry.1 += 1;
            }
        }
    }
    let mut out: Vec<Demand> = groups
        .into_iter()
        .map(|((shape, label_selector, tolerations), (count, infeasible))| Demand {
            shape,
            label_selector,
            tolerations,
            count,
            infeasible,
        })
        .collect();
    out.sort_by_key(|d| std::cmp::Reverse(d.count));
    out
}
