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
    Actor, ClusterStatus, Demand, Explanation, Group, Job, List, ListQuery, Node, NodeCounts,
    NodeState, PendingItem, ResourceUse, StringMap, Task,
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
    /// Jobs by sequence number.
    pub jobs: OrdMap<u64, Arc<Job>>,
    /// Waiting requests, oldest first.
    pub waiting: OrdMap<(ObjectKind, u64), Arc<PendingRequest>>,
    /// Commit cycles published so far (a change counter for pollers).
    pub generation: u64,
    /// Finished objects forgotten so far and what is kept, by [`ObjectKind::index`].
    pub forgotten: [Forgotten; 4],
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

/// The longest `name` a list query takes.
pub const MAX_NAME_SEARCH: usize = 256;
/// The longest `cursor` a list query takes (a cursor this head gives is far shorter).
const MAX_CURSOR: usize = 2048;

/// A list query, checked.
struct Filter<'a> {
    state: Option<String>,
    namespace: Option<&'a str>,
    node: Option<&'a str>,
    job: Option<&'a str>,
    label: Option<(&'a str, &'a str)>,
    /// Lower-cased: matched against lower-cased names and IDs.
    name: Option<String>,
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
        let name = match query.name.as_deref() {
            Some(text) if text.chars().count() > MAX_NAME_SEARCH => {
                return Err(QueryError {
                    field: "name",
                    message: format!("at most {MAX_NAME_SEARCH} characters"),
                })
            }
            Some(text) if !text.is_empty() => Some(text.to_lowercase()),
            _ => None,
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
            job: query.job.as_deref(),
            label,
            name,
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

    /// Whether an object of job `job` is asked for.
    fn of_job(&self, job: Option<&str>) -> bool {
        self.job.is_none_or(|wanted| job == Some(wanted))
    }

    /// Whether one of `texts` (a name, an ID) contains the `name` searched for, in any case.
    fn names(&self, texts: &[Option<&str>]) -> bool {
        self.name.as_deref().is_none_or(|wanted| {
            texts.iter().flatten().any(|text| text.to_lowercase().contains(wanted))
        })
    }

    /// The page `order` asks for of `rows` (the matching objects, each with its tie-break
    /// key, in tie-break order), and the cursor of the next page.
    fn page<T: Clone>(&self, order: &Order<'_, T>, rows: Vec<(Key, &Arc<T>)>) -> List<T> {
        let total = rows.len();
        let key = order.column.key;
        let mut keyed: Vec<(Key, Key, &Arc<T>)> = if order.column.is_tie {
            // The tie-break column is the order the rows came in: nothing to sort.
            rows.into_iter().map(|(tie, item)| (Key::Absent, tie, item)).collect()
        } else {
            let mut keyed: Vec<_> =
                rows.into_iter().map(|(tie, item)| (key(item), tie, item)).collect();
            keyed.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
            keyed
        };
        if order.descending {
            keyed.reverse();
        }
        let start = match &order.after {
            None => 0,
            Some((k, t)) => keyed.partition_point(|(key, tie, _)| {
                let ord = (key, tie).cmp(&(k, t));
                if order.descending {
                    ord != std::cmp::Ordering::Less
                } else {
                    ord != std::cmp::Ordering::Greater
                }
            }),
        };
        let end = start.saturating_add(self.limit).min(keyed.len());
        let next_cursor = (end < keyed.len() && end > start).then(|| {
            let (k, t, _) = &keyed[end - 1];
            encode_cursor(&order.sort, k, t)
        });
        let items = keyed[start..end].iter().map(|(_, _, item)| (***item).clone()).collect();
        List { items, total, next_cursor, forgotten: None }
    }
}

/// One column's value, for sorting. Within a column every value is of one variant, or absent
/// (absent sorts first).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
enum Key {
    Absent,
    Int(i64),
    Text(String),
}

impl Key {
    fn text(text: Option<&str>) -> Key {
        text.map_or(Key::Absent, |t| Key::Text(t.to_string()))
    }

    fn int(n: impl Into<i64>) -> Key {
        Key::Int(n.into())
    }
}

/// A column a list sorts by.
struct Column<T> {
    name: &'static str,
    key: fn(&T) -> Key,
    /// The column is the tie-break itself (the ID): rows already come in its order.
    is_tie: bool,
}

const fn column<T>(name: &'static str, key: fn(&T) -> Key) -> Column<T> {
    Column { name, key, is_tie: false }
}

fn no_key<T>(_: &T) -> Key {
    Key::Absent
}

/// The ID column: sorted as the rows come (creation order; nodes: by ID).
const fn id_column<T>(name: &'static str) -> Column<T> {
    Column { name, key: no_key::<T>, is_tie: true }
}

/// The columns of each list; the first is the default order.
const NODE_COLUMNS: &[Column<Node>] = &[
    id_column("node_id"),
    column("address", |n| Key::Text(n.address.clone())),
    column("state", |n| Key::Text(upper(&n.state))),
    column("registered_at_ms", |n| Key::Int(n.registered_at_ms.min(i64::MAX as u64) as i64)),
    column("actors", |n| Key::Int(n.actors.min(i64::MAX as u64) as i64)),
    column("tasks", |n| Key::Int(n.tasks.min(i64::MAX as u64) as i64)),
];
const ACTOR_COLUMNS: &[Column<Actor>] = &[
    id_column("actor_id"),
    column("created_at_ms", |a| Key::Int(a.created_at_ms.min(i64::MAX as u64) as i64)),
    column("name", |a| Key::text(a.name.as_deref())),
    column("namespace", |a| Key::Text(a.namespace.clone())),
    column("state", |a| Key::Text(upper(&a.state))),
    column("node_id", |a| Key::text(a.node_id.as_deref())),
    column("restarts", |a| Key::int(a.restarts)),
];
const TASK_COLUMNS: &[Column<Task>] = &[
    id_column("task_id"),
    column("created_at_ms", |t| Key::Int(t.created_at_ms.min(i64::MAX as u64) as i64)),
    column("name", |t| Key::text(t.name.as_deref())),
    column("namespace", |t| Key::Text(t.namespace.clone())),
    column("state", |t| Key::Text(upper(&t.state))),
    column("node_id", |t| Key::text(t.node_id.as_deref())),
    column("attempts", |t| Key::int(t.attempts)),
    column("exit_code", |t| t.exit_code.map_or(Key::Absent, Key::int)),
];
const JOB_COLUMNS: &[Column<Job>] = &[
    id_column("job_id"),
    column("created_at_ms", |j| Key::Int(j.created_at_ms.min(i64::MAX as u64) as i64)),
    column("name", |j| Key::text(j.spec.name.as_deref())),
    column("state", |j| Key::Text(upper(&j.state))),
    column("ended_at_ms", |j| {
        j.ended_at_ms.map_or(Key::Absent, |t| Key::Int(t.min(i64::MAX as u64) as i64))
    }),
];
const GROUP_COLUMNS: &[Column<Group>] = &[
    id_column("group_id"),
    column("created_at_ms", |g| Key::Int(g.created_at_ms.min(i64::MAX as u64) as i64)),
    column("name", |g| Key::text(g.name.as_deref())),
    column("namespace", |g| Key::Text(g.namespace.clone())),
    column("state", |g| Key::Text(upper(&g.state))),
    column("strategy", |g| Key::Text(g.strategy.clone())),
];

/// The order a list query asks for, checked, and where its page starts.
struct Order<'c, T> {
    column: &'c Column<T>,
    descending: bool,
    /// The order as `sort` writes it (`-created_at_ms`): a cursor names the order it is of.
    sort: String,
    /// The last row of the previous page (its key and tie-break), from `cursor`.
    after: Option<(Key, Key)>,
}

impl<'c, T> Order<'c, T> {
    fn new(query: &ListQuery, columns: &'c [Column<T>]) -> Result<Order<'c, T>, QueryError> {
        let text = query.sort.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let (descending, name) = match text {
            None => (false, columns[0].name),
            Some(t) => match t.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, t.strip_prefix('+').unwrap_or(t)),
            },
        };
        let column = columns.iter().find(|c| c.name == name).ok_or_else(|| {
            let names: Vec<&str> = columns.iter().map(|c| c.name).collect();
            QueryError {
                field: "sort",
                message: format!(
                    "{:?} is not a column of this list; sort by one of {}, with - before it \
                     for descending order",
                    name.chars().take(64).collect::<String>(),
                    names.join(", ")
                ),
            }
        })?;
        let sort = format!("{}{}", if descending { "-" } else { "" }, column.name);
        let after = match query.cursor.as_deref() {
            None | Some("") => None,
            Some(cursor) => Some(decode_cursor(cursor, &sort)?),
        };
        Ok(Order { column, descending, sort, after })
    }
}

/// A cursor: the order and the last row's key and tie-break, as JSON in hex (opaque, safe in
/// a URL as it is).
fn encode_cursor(sort: &str, key: &Key, tie: &Key) -> String {
    let json = serde_json::to_vec(&(sort, key, tie)).unwrap_or_default();
    json.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_cursor(cursor: &str, sort: &str) -> Result<(Key, Key), QueryError> {
    let bad = || QueryError {
        field: "cursor",
        message: "not a cursor this head gave: pass a list's next_cursor unchanged".into(),
    };
    if cursor.len() > MAX_CURSOR || !cursor.len().is_multiple_of(2) || !cursor.is_ascii() {
        return Err(bad());
    }
    let bytes: Option<Vec<u8>> = (0..cursor.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&cursor[i..i + 2], 16).ok())
        .collect();
    let (made_for, key, tie): (String, Key, Key) =
        serde_json::from_slice(&bytes.ok_or_else(bad)?).map_err(|_| bad())?;
    if made_for != sort {
        return Err(QueryError {
            field: "cursor",
            message: format!(
                "this cursor is of a list sorted by {made_for:?}, not {sort:?}: ask with the \
                 sort it was given with, or without a cursor"
            ),
        });
    }
    Ok((key, tie))
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

    /// Nodes matching `query` (`state`, `label`, `name`: the ID or address; `namespace` and
    /// `node` do not apply), one page of them.
    pub fn list_nodes(&self, query: &ListQuery) -> Result<List<Node>, QueryError> {
        let filter = Filter::new(query, &["ALIVE", "DRAINING", "SUSPECT", "DEAD"])?;
        let order = Order::new(query, NODE_COLUMNS)?;
        let rows = self
            .nodes
            .values()
            .filter(|n| {
                filter.keeps(&upper(&n.state), None, Some(&n.node_id), Some(&n.labels))
                    && filter.names(&[Some(&n.node_id), Some(&n.address)])
            })
            .map(|n| (Key::Text(n.node_id.clone()), n))
            .collect();
        Ok(filter.page(&order, rows))
    }

    /// The actor with this ID.
    pub fn actor(&self, id: &str) -> Option<Arc<Actor>> {
        match ObjectKind::parse(id)? {
            (ObjectKind::Actor, seq) => self.actors.get(&seq).cloned(),
            _ => None,
        }
    }

    /// Actors matching `query`, one page of them.
    pub fn list_actors(&self, query: &ListQuery) -> Result<List<Actor>, QueryError> {
        let filter = Filter::new(query, &["PENDING", "ALIVE", "RESTARTING", "DEAD"])?;
        let order = Order::new(query, ACTOR_COLUMNS)?;
        let rows = self
            .actors
            .iter()
            .filter(|(_, a)| {
                filter.keeps(
                    &upper(&a.state),
                    Some(&a.namespace),
                    a.node_id.as_deref(),
                    Some(&a.spec.labels),
                ) && filter.of_job(a.spec.ownership.job_id.as_deref())
                    && filter.names(&[a.name.as_deref(), Some(&a.actor_id)])
            })
            .map(|(seq, a)| (Key::Int(*seq as i64), a))
            .collect();
        let mut list = filter.page(&order, rows);
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

    /// Tasks matching `query` (`label` does not apply: tasks have none), one page of them.
    pub fn list_tasks(&self, query: &ListQuery) -> Result<List<Task>, QueryError> {
        let filter =
            Filter::new(query, &["PENDING", "RUNNING", "FINISHED", "FAILED", "CANCELLED"])?;
        let order = Order::new(query, TASK_COLUMNS)?;
        let rows = self
            .tasks
            .iter()
            .filter(|(_, t)| {
                filter.keeps(&upper(&t.state), Some(&t.namespace), t.node_id.as_deref(), None)
                    && filter.of_job(t.spec.ownership.job_id.as_deref())
                    && filter.names(&[t.name.as_deref(), Some(&t.task_id)])
            })
            .map(|(seq, t)| (Key::Int(*seq as i64), t))
            .collect();
        let mut list = filter.page(&order, rows);
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

    /// Groups matching `query` (`node`: groups with a bundle there), one page of them.
    pub fn list_groups(&self, query: &ListQuery) -> Result<List<Group>, QueryError> {
        let filter = Filter::new(query, &["PENDING", "CREATED", "RESCHEDULING", "REMOVED"])?;
        let order = Order::new(query, GROUP_COLUMNS)?;
        let rows = self
            .groups
            .iter()
            .filter(|(_, g)| {
                let on_node = filter
                    .node
                    .is_none_or(|id| g.bundles.iter().any(|b| b.node_id.as_deref() == Some(id)));
                // The node filter is `on_node` (a group has a node per bundle).
                on_node
                    && filter.keeps(&upper(&g.state), Some(&g.namespace), filter.node, None)
                    && filter.of_job(g.spec.ownership.job_id.as_deref())
                    && filter.names(&[g.name.as_deref(), Some(&g.group_id)])
            })
            .map(|(seq, g)| (Key::Int(*seq as i64), g))
            .collect();
        let mut list = filter.page(&order, rows);
        list.forgotten = Some(self.forgotten[ObjectKind::Group.index()]);
        Ok(list)
    }

    /// The job with this ID.
    pub fn job(&self, id: &str) -> Option<Arc<Job>> {
        match ObjectKind::parse(id)? {
            (ObjectKind::Job, seq) => self.jobs.get(&seq).cloned(),
            _ => None,
        }
    }

    /// Jobs matching `query` (`state`, `name`), one page of them.
    pub fn list_jobs(&self, query: &ListQuery) -> Result<List<Job>, QueryError> {
        let filter = Filter::new(query, &["RUNNING", "FINISHED", "STOPPED", "LOST"])?;
        let order = Order::new(query, JOB_COLUMNS)?;
        let rows = self
            .jobs
            .iter()
            .filter(|(_, j)| {
                filter.keeps(
                    &upper(&j.state),
                    j.spec.namespace.as_deref().or(Some("default")),
                    None,
                    None,
                ) && filter.names(&[j.spec.name.as_deref(), Some(&j.job_id)])
            })
            .map(|(seq, j)| (Key::Int(*seq as i64), j))
            .collect();
        let mut list = filter.page(&order, rows);
        list.forgotten = Some(self.forgotten[ObjectKind::Job.index()]);
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
            // A job is not placed: nothing to explain.
            (ObjectKind::Job, _) => return None,
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

    /// Nodes by state.
    pub fn status_counts(&self) -> NodeCounts {
        let mut counts = NodeCounts::default();
        for node in self.nodes.values() {
            match node.state {
                NodeState::Alive => counts.alive += 1,
                NodeState::Draining => counts.draining += 1,
                NodeState::Suspect => counts.suspect += 1,
                NodeState::Dead => counts.dead += 1,
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
                // Not counted in the sums, as the status says: until it is heard from, what it
                // has is not what the cluster can use.
                NodeState::Suspect => {
                    counts.suspect += 1;
                    continue;
                }
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

#[cfg(test)]
mod tests {
    use berth_api::rest::{TaskState, TaskSubmit};

    use super::*;

    fn task(seq: u64, name: &str, state: TaskState, created_at_ms: u64) -> Arc<Task> {
        Arc::new(Task {
            task_id: format!("task-{seq}").into(),
            name: Some(name.into()),
            namespace: "default".into(),
            state,
            node_id: None,
            instances: Default::default(),
            attempts: 1,
            exit_code: None,
            failure: None,
            diagnosis: None,
            history: Default::default(),
            created_at_ms,
            spec: Arc::new(TaskSubmit::default()),
            work_key: None,
        })
    }

    /// Tasks 1..=n, named `t<seq % 3>`, created a second apart, every other one FINISHED.
    fn view(n: u64) -> View {
        let mut view = View::default();
        for seq in 1..=n {
            let state = if seq % 2 == 0 { TaskState::Finished } else { TaskState::Running };
            view.tasks.insert(seq, task(seq, &format!("t{}", seq % 3), state, 1_000 * seq));
        }
        view
    }

    fn ids(list: &List<Task>) -> Vec<String> {
        list.items.iter().map(|t| t.task_id.to_string()).collect()
    }

    fn query(sort: Option<&str>, limit: usize, cursor: Option<String>) -> ListQuery {
        ListQuery {
            sort: sort.map(str::to_string),
            limit: Some(limit),
            cursor,
            ..Default::default()
        }
    }

    #[test]
    fn the_default_is_creation_order_and_minus_created_at_is_newest_first() {
        let view = view(5);
        let list = view.list_tasks(&query(None, 2, None)).unwrap();
        assert_eq!(ids(&list), ["task-1", "task-2"]);
        assert_eq!(list.total, 5);
        let list = view.list_tasks(&query(Some("-created_at_ms"), 2, None)).unwrap();
        assert_eq!(ids(&list), ["task-5", "task-4"]);
    }

    /// Walking every page with the cursors gives every matching object once, in order, for
    /// every column in both directions.
    #[test]
    fn cursors_walk_every_page_once_in_every_order() {
        let view = view(23);
        for column in TASK_COLUMNS {
            for sort in [column.name.to_string(), format!("-{}", column.name)] {
                let all = view.list_tasks(&query(Some(&sort), 1000, None)).unwrap();
                let mut walked = Vec::new();
                let mut cursor = None;
                loop {
                    let page = view.list_tasks(&query(Some(&sort), 4, cursor)).unwrap();
                    assert_eq!(page.total, 23);
                    walked.extend(ids(&page));
                    match page.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                assert_eq!(walked, ids(&all), "sort {sort}");
            }
        }
        let by_name = view.list_tasks(&query(Some("name"), 1000, None)).unwrap();
        let names: Vec<&str> = by_name.items.iter().map(|t| t.name.as_deref().unwrap()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(ids(&by_name)[..2], ["task-3", "task-6"], "ties in creation order");
    }

    #[test]
    fn a_cursor_survives_objects_going_away_and_filters_narrow_the_count() {
        let mut view = view(10);
        let page = view.list_tasks(&query(Some("-created_at_ms"), 3, None)).unwrap();
        assert_eq!(ids(&page), ["task-10", "task-9", "task-8"]);
        view.tasks.remove(&8);
        view.tasks.remove(&7);
        let next = view.list_tasks(&query(Some("-created_at_ms"), 3, page.next_cursor)).unwrap();
        assert_eq!(ids(&next), ["task-6", "task-5", "task-4"]);
        let q = ListQuery {
            state: Some("finished".into()),
            name: Some("T1".into()),
            ..query(None, 1, None)
        };
        let list = view.list_tasks(&q).unwrap();
        assert_eq!((ids(&list), list.total), (vec!["task-4".to_string()], 2), "task-4 and task-10");
    }

    #[test]
    fn bad_sorts_cursors_and_names_are_refused_naming_the_field() {
        let view = view(3);
        let err = view.list_tasks(&query(Some("-colour"), 5, None)).unwrap_err();
        assert_eq!(err.field, "sort");
        assert!(err.message.contains("created_at_ms") && err.message.contains("\"colour\""));
        let err = view.list_tasks(&query(None, 5, Some("zz".into()))).unwrap_err();
        assert_eq!(err.field, "cursor");
        let cursor = view.list_tasks(&query(Some("name"), 1, None)).unwrap().next_cursor;
        let err = view.list_tasks(&query(Some("-name"), 1, cursor)).unwrap_err();
        assert_eq!(err.field, "cursor");
        assert!(err.message.contains("\"name\""), "{}", err.message);
        let long = "x".repeat(MAX_NAME_SEARCH + 1);
        let q = ListQuery { name: Some(long), ..Default::default() };
        assert_eq!(view.list_tasks(&q).unwrap_err().field, "name");
        let err = view.list_actors(&query(Some("attempts"), 5, None)).unwrap_err();
        assert_eq!(err.field, "sort", "attempts are the tasks' column");
    }
}
