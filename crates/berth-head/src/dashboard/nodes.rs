//! Nodes: a table with resources as bars, labels, taints and state; per node a form that
//! adds a taint, a button per taint that removes it (seed 004: "On the Dashboard page, there
//! is an operations feature for setting taints on nodes") and a drain button. Filtered (state,
//! label, ID or address), sorted and paged like the other lists, through the REST list's
//! `sort` and `cursor` (`View::list_nodes`); by node ID unless a heading is clicked.
//!
//! The actions call the [`HeadHandle`](crate::HeadHandle) in this process, as the REST API
//! does, and answer the table again (the page shown: the filter form's fields travel with
//! each action) with the node the head returned, plus a status line; a refusal (a bad taint,
//! an unknown node) is an error fragment for the alert region. For a read token they are
//! shown disabled (the head refuses them anyway).

use askama::Template;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use axum::Extension;
use berth_api::rest::{ActorState, Node, NodeMeasured, NodeState, Role, StringMap};
use berth_api::spec::ResourceMap;

use super::format::{self, Bar};
use super::svg::{self, Holder};
use super::work::{headings, Filters, Heading, PAGE_SIZES};
use super::{is_admin, path_param, render, Ui, UiError};
use crate::view::View;

/// The nodes' default order: by ID.
const NODE_SORT: &str = "node_id";

/// The node states the filter offers.
const NODE_STATES: &[&str] = &["ALIVE", "DRAINING", "SUSPECT", "DEAD"];

/// The table's columns: heading, and the REST list's sort column (none: not sortable).
const NODE_COLUMNS: [(&str, Option<&str>); 8] = [
    ("Node", Some("node_id")),
    ("State", Some("state")),
    ("Resources, used / total", None),
    ("Labels", None),
    ("Taints", None),
    ("Actors", Some("actors")),
    ("Tasks", Some("tasks")),
    ("Actions", None),
];

/// The filters of a query string or form body, over the nodes' order.
fn node_filters(text: Option<&str>) -> Result<Filters, UiError> {
    Ok(Filters::parse(text)?.ordered_by(NODE_SORT))
}

/// Taint keys with this prefix are Berth's own (rare-resource isolation): shown, not editable.
const BERTH_PREFIX: &str = "berth.io/";

/// `GET /ui/nodes` (filters, order and page in the query, as the table's form sends them):
/// the heading, the filter form and the live table.
pub(crate) async fn page(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    let filters = node_filters(q.as_deref())?;
    let table = NodesTable::new(&ui.handle.view(), &filters, is_admin(role.as_ref()), None, None)?;
    Ok(render(&NodesPage { filters, states: NODE_STATES, sizes: PAGE_SIZES, table }))
}

/// `GET /ui/nodes/table`: the table alone (what the page polls, the filter form asks for,
/// a heading or the pager asks for).
pub(crate) async fn table(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    let filters = node_filters(q.as_deref())?;
    Ok(render(&NodesTable::new(&ui.handle.view(), &filters, is_admin(role.as_ref()), None, None)?))
}

/// `POST /ui/nodes/{node}/taints`, form `taint=key=value` (and the table's filters): adds
/// the taint.
pub(crate) async fn add_taint(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    node: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, UiError> {
    let node = path_param(node)?;
    let (key, value) = taint_field(&body)?;
    let filters = node_filters(std::str::from_utf8(&body).ok())?;
    let taints = StringMap::from([(key.clone(), value.clone())]);
    let changed = ui.handle.add_taints(&node, taints).await?;
    let flash = format!("Taint {key}={value} added to {}.", changed.node_id);
    let admin = is_admin(role.as_ref());
    Ok(render(&NodesTable::new(&ui.handle.view(), &filters, admin, Some(changed), Some(flash))?))
}

/// `DELETE /ui/nodes/{node}/taints`, form `taint=key=value` (and the table's filters):
/// removes the taint.
pub(crate) async fn remove_taint(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    node: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, UiError> {
    let node = path_param(node)?;
    let (key, value) = taint_field(&body)?;
    let filters = node_filters(std::str::from_utf8(&body).ok())?;
    let taints = StringMap::from([(key.clone(), value.clone())]);
    let changed = ui.handle.remove_taints(&node, taints).await?;
    let flash = format!(
        "Taint {key}={value} removed from {}; waiting work is decided again.",
        changed.node_id
    );
    let admin = is_admin(role.as_ref());
    Ok(render(&NodesTable::new(&ui.handle.view(), &filters, admin, Some(changed), Some(flash))?))
}

/// `POST /ui/nodes/{node}/drain` (`?from=detail`: answered with the node's page; else the
/// body holds the table's filters): drains the node.
pub(crate) async fn drain(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    node: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Result<Response, UiError> {
    let node = path_param(node)?;
    let filters = node_filters(std::str::from_utf8(&body).ok())?;
    let changed = ui.handle.drain_node(&node).await?;
    let flash = format!(
        "{} is draining: it takes no new work, and its actors move to other nodes.",
        changed.node_id
    );
    answer(&ui, role, q, &filters, changed, flash)
}

/// `POST /ui/nodes/{node}/undrain` (`?from=detail` and the body as for drain): ends the
/// node's drain.
pub(crate) async fn undrain(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    node: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Result<Response, UiError> {
    let node = path_param(node)?;
    let filters = node_filters(std::str::from_utf8(&body).ok())?;
    let changed = ui.handle.undrain_node(&node).await?;
    let flash = format!(
        "{} is {}: it takes new work again, and waiting work is decided again.",
        changed.node_id,
        format::word(&changed.state)
    );
    answer(&ui, role, q, &filters, changed, flash)
}

/// The answer to a drain or undrain: the table, or the node's page when asked from there.
fn answer(
    ui: &Ui,
    role: Option<Extension<Role>>,
    query: Option<String>,
    filters: &Filters,
    changed: Node,
    flash: String,
) -> Result<Response, UiError> {
    let from_detail = query.as_deref().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "from" && v == "detail")
    });
    let view = ui.handle.view();
    let admin = is_admin(role.as_ref());
    Ok(if from_detail {
        let measured = ui.handle.measurements.node(&changed.node_id, true);
        render(&NodeDetail::new(&view, &changed, measured.as_ref(), admin, Some(flash)))
    } else {
        render(&NodesTable::new(&view, filters, admin, Some(changed), Some(flash))?)
    })
}

/// `GET /ui/nodes/{node}`: one node's page.
pub(crate) async fn detail(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    node: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let node = path_param(node)?;
    let view = ui.handle.view();
    let found = view.node(&node).ok_or_else(|| UiError::not_found("node", &node))?;
    let measured = ui.handle.measurements.node(&found.node_id, true);
    Ok(render(&NodeDetail::new(&view, &found, measured.as_ref(), is_admin(role.as_ref()), None)))
}

/// A node's page: what it has and holds, its GPU map, the work on it, its history, and drain
/// or undrain.
#[derive(Template)]
#[template(path = "dashboard/node.html")]
pub(crate) struct NodeDetail {
    id: String,
    path: String,
    address: String,
    state: String,
    class: &'static str,
    registered: String,
    dead_reason: Option<String>,
    bars: Vec<Bar>,
    /// What the machine uses, measured by its agent: CPU and memory bars, and when.
    measured: Vec<Bar>,
    measured_at: Option<String>,
    labels: String,
    taints: String,
    /// The GPU map as SVG; empty when the node has no GPU.
    gpu_map: String,
    work: Vec<WorkRow>,
    history: Vec<(String, String, String)>,
    drainable: bool,
    undrainable: bool,
    admin: bool,
    flash: Option<String>,
}

/// An actor or task on the node.
struct WorkRow {
    id: String,
    href: String,
    state: String,
    class: &'static str,
    resources: String,
    instances: String,
    /// What it uses, measured (empty when not measured).
    uses: String,
}

impl NodeDetail {
    /// The page of `node`, with its agent's last measurement (`measured`, attempts included)
    /// unless the node is dead.
    pub(crate) fn new(
        view: &View,
        node: &Node,
        measured: Option<&NodeMeasured>,
        admin: bool,
        flash: Option<String>,
    ) -> NodeDetail {
        let measured = measured.filter(|_| node.state != NodeState::Dead);
        let uses = |id: &str| {
            let attempts = measured.into_iter().flat_map(|m| m.work.iter());
            attempts
                .filter(|w| w.work_id == id)
                .max_by_key(|w| w.attempt)
                .map(format::work_use)
                .unwrap_or_default()
        };
        let state = format::word(&node.state);
        let mut work = Vec::new();
        let mut holders: std::collections::BTreeMap<u32, Vec<Holder>> = Default::default();
        let mut hold =
            |id: &str,
             href: String,
             resources: &ResourceMap,
             instances: &std::collections::BTreeMap<String, Vec<u32>>| {
                let Some(gpus) = instances.get("GPU") else { return };
                let amount = gpu_amount(resources);
                for instance in gpus {
                    let share = if amount > 0.0 && amount < 1.0 { amount } else { 1.0 };
                    holders.entry(*instance).or_default().push(Holder {
                        id: id.to_string(),
                        href: href.clone(),
                        share,
                    });
                }
            };
        let here = |node_id: &Option<std::sync::Arc<str>>| {
            node_id.as_deref() == Some(node.node_id.as_str())
        };
        // What runs here, actors then tasks: (kind, ID, state, resources, instances).
        let actors =
            view.actors.values().filter(|a| here(&a.node_id) && a.state != ActorState::Dead);
        let tasks = view.tasks.values().filter(|t| here(&t.node_id) && !t.state.is_final());
        let running = actors
            .map(|a| {
                ("actor", &a.actor_id, format::word(&a.state), &a.spec.placement, &a.instances)
            })
            .chain(tasks.map(|t| {
                ("task", &t.task_id, format::word(&t.state), &t.spec.placement, &t.instances)
            }));
        for (kind, id, state, placement, instances) in running {
            let href = format::link(kind, id);
            hold(id, href.clone(), &placement.resources.value, instances);
            work.push(WorkRow {
                id: id.to_string(),
                href,
                class: format::state_class(&state),
                state,
                resources: format::spec_resources(&placement.resources.value),
                instances: format::instances(instances),
                uses: uses(id),
            });
        }
        let gpus =
            node.resources.iter().find(|(name, _)| *name == "GPU").map(|(_, u)| u.total.to_f64());
        let gpu_map = match gpus {
            Some(total) if total >= 1.0 => {
                let count = total.floor().min(1024.0) as u32;
                let rows: Vec<(u32, Vec<Holder>)> =
                    (0..count).map(|i| (i, holders.remove(&i).unwrap_or_default())).collect();
                svg::gpu_map(&node.node_id, &rows)
            }
            _ => String::new(),
        };
        let history = node
            .history
            .iter()
            .rev()
            .map(|e| (format::time(e.at_ms), e.kind.replace('_', " "), e.message.clone()))
            .collect();
        NodeDetail {
            id: node.node_id.clone(),
            path: format::segment(&node.node_id),
            address: node.address.clone(),
            class: format::state_class(&state),
            state,
            registered: format::time(node.registered_at_ms),
            dead_reason: node.dead_reason.clone(),
            bars: Bar::all(node.resources.iter()),
            measured: measured.map(Bar::machine).unwrap_or_default(),
            measured_at: measured.map(|m| format::time(m.at_ms)),
            labels: format::pairs(&node.labels),
            taints: node
                .taints
                .iter()
                .map(|t| format!("{}={}", t.key, t.value))
                .collect::<Vec<_>>()
                .join(", "),
            gpu_map,
            work,
            history,
            drainable: node.state == NodeState::Alive,
            undrainable: node.state == NodeState::Draining,
            admin,
            flash,
        }
    }
}

/// The GPUs a spec's resources ask for (`{"GPU": 0.5}`); 0 when none.
fn gpu_amount(resources: &ResourceMap) -> f64 {
    resources.get("GPU").map_or(0.0, |amount| amount.to_f64())
}

/// The `taint` field of a form body, `key=value`, split. The head checks the key and value.
pub(crate) fn taint_field(body: &[u8]) -> Result<(String, String), UiError> {
    let text = form_urlencoded::parse(body)
        .find(|(name, _)| name == "taint")
        .map(|(_, value)| value.trim().to_string())
        .unwrap_or_default();
    if text.is_empty() {
        return Err(UiError::invalid("taint", "give a taint as key=value, e.g. gpu_node=true"));
    }
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(UiError::invalid(
            "taint",
            format!("{text:?} is not key=value; write it as e.g. gpu_node=true"),
        )),
    }
}

/// `1 actor`, `2 actors`.
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The nodes page: the filter form and the table.
#[derive(Template)]
#[template(path = "dashboard/nodes.html")]
pub(crate) struct NodesPage {
    filters: Filters,
    states: &'static [&'static str],
    sizes: &'static [usize],
    table: NodesTable,
}

/// The nodes table (one page of it, with sortable headings and the pager), and the status
/// line of the action that caused it, if any.
#[derive(Template)]
#[template(path = "dashboard/nodes_table.html")]
pub(crate) struct NodesTable {
    headings: Vec<Heading>,
    rows: Vec<NodeRow>,
    flash: Option<String>,
    /// The token may take actions (admin); else they are shown disabled.
    admin: bool,
    /// Nodes matching the filters, over every page.
    total: usize,
    /// The first row's position, from 1.
    first: usize,
    page: usize,
    next_cursor: Option<String>,
    /// The order and page shown, held by hidden fields in the table itself that every
    /// request of the page includes (not out of band into the form, as the other lists do: a
    /// refresh answered after the person left the page would find no form to swap into).
    sort: String,
    cursor: String,
    /// No node at all has registered (rather than none matching the filters).
    no_nodes: bool,
}

/// One node, ready to show.
struct NodeRow {
    /// Its position: element IDs use it, never the node ID.
    index: usize,
    id: String,
    /// The ID as a URL path segment.
    path: String,
    address: String,
    state: String,
    class: &'static str,
    bars: Vec<Bar>,
    /// The user's labels, then Berth's (`berth.io/…`), without the node ID label.
    labels: Vec<LabelChip>,
    taints: Vec<TaintChip>,
    /// `1 actor`, `3 actors`.
    actors: String,
    /// `0 tasks`.
    tasks: String,
    /// Alive: it can be drained.
    drainable: bool,
    /// Draining: the drain can end.
    undrainable: bool,
    dead_reason: Option<String>,
}

/// A label on a node.
struct LabelChip {
    /// `key=value`, in full.
    text: String,
    /// Berth's own (`berth.io/…`): shown without the prefix, which only screen readers read.
    own: bool,
    /// What is shown: `text`, less `berth.io/` for Berth's own.
    shown: String,
}

/// A taint on a node.
struct TaintChip {
    /// `key=value`: what the remove form sends.
    text: String,
    /// Berth's own (rare-resource isolation): no remove button.
    own: bool,
}

impl NodesTable {
    /// The page of `view`'s nodes that `filters` ask for, with `changed` (the head's answer to
    /// an action) in place of its stale row when it is on the page.
    pub(crate) fn new(
        view: &View,
        filters: &Filters,
        admin: bool,
        changed: Option<Node>,
        flash: Option<String>,
    ) -> Result<NodesTable, UiError> {
        let list = view.list_nodes(&filters.query()?)?;
        let mut nodes = list.items;
        if let Some(changed) = changed {
            if let Some(slot) = nodes.iter_mut().find(|n| n.node_id == changed.node_id) {
                *slot = changed;
            }
        }
        let rows =
            nodes.iter().enumerate().map(|(index, node)| NodeRow::new(index, node)).collect();
        let sort = filters.sort().to_string();
        let page = filters.page()?;
        let limit = filters.limit()?;
        Ok(NodesTable {
            headings: headings(&NODE_COLUMNS, &sort, &["actors", "tasks"]),
            rows,
            flash,
            admin,
            total: list.total,
            first: (page - 1).saturating_mul(limit).saturating_add(1),
            page,
            next_cursor: list.next_cursor,
            sort,
            cursor: filters.cursor().to_string(),
            no_nodes: view.nodes.is_empty(),
        })
    }

    /// The last row's position.
    fn last(&self) -> usize {
        self.first + self.rows.len().saturating_sub(1)
    }

    /// The hidden fields that hold the order and page shown.
    fn state_fields(&self) -> String {
        format!(
            r#"<span id="node-list-state"><input type="hidden" name="sort" value="{}"><input type="hidden" name="cursor" value="{}"><input type="hidden" name="page" value="{}"></span>"#,
            format::attr(&self.sort),
            format::attr(&self.cursor),
            self.page
        )
    }
}

impl NodeRow {
    fn new(index: usize, node: &Node) -> NodeRow {
        let state = format::word(&node.state);
        let mut labels: Vec<LabelChip> = node
            .labels
            .iter()
            .filter(|(k, v)| {
                *k != "berth.io/node-id" && !(k.starts_with(BERTH_PREFIX) && v.is_empty())
            })
            .map(|(k, v)| {
                let text = format!("{k}={v}");
                let own = k.starts_with(BERTH_PREFIX);
                let shown = text.strip_prefix(BERTH_PREFIX).unwrap_or(&text).to_string();
                LabelChip { text, own, shown }
            })
            .collect();
        labels.sort_by_key(|l| l.own);
        NodeRow {
            index,
            id: node.node_id.clone(),
            path: format::segment(&node.node_id),
            address: node.address.clone(),
            class: format::state_class(&state),
            state,
            bars: Bar::all(node.resources.iter()),
            labels,
            taints: node
                .taints
                .iter()
                .map(|t| TaintChip {
                    text: format!("{}={}", t.key, t.value),
                    own: t.key.starts_with(BERTH_PREFIX),
                })
                .collect(),
            actors: count(node.actors, "actor"),
            tasks: count(node.tasks, "task"),
            drainable: node.state == NodeState::Alive,
            undrainable: node.state == NodeState::Draining,
            dead_reason: node.dead_reason.clone(),
        }
    }
}
