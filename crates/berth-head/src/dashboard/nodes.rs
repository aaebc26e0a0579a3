//! Nodes: a table with resources as bars, labels, taints and state; per node a form that
//! adds a taint, a button per taint that removes it (seed 004: "On the Dashboard page, there
//! is an operations feature for setting taints on nodes") and a drain button.
//!
//! The actions call the [`HeadHandle`](crate::HeadHandle) in this process, as the REST API
//! does, and answer the table again with the node the head returned, plus a status line; a
//! refusal (a bad taint, an unknown node) is an error fragment for the alert region.

use std::sync::Arc;

use askama::Template;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use berth_api::rest::{Node, NodeState, StringMap};

use super::format::{self, Bar};
use super::{path_param, render, Ui, UiError};
use crate::view::View;

/// Taint keys with this prefix are Berth's own (rare-resource isolation): shown, not editable.
const BERTH_PREFIX: &str = "berth.io/";

/// `GET /ui/nodes`: the heading and the live table.
pub(crate) async fn page(State(ui): State<Ui>) -> Response {
    render(&NodesPage { table: NodesTable::new(&ui.handle.view(), None, None) })
}

/// `GET /ui/nodes/table`: the table alone (what the page polls).
pub(crate) async fn table(State(ui): State<Ui>) -> Response {
    render(&NodesTable::new(&ui.handle.view(), None, None))
}

/// `POST /ui/nodes/{node}/taints`, form `taint=key=value`: adds the taint.
pub(crate) async fn add_taint(
    State(ui): State<Ui>,
    node: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, UiError> {
    let node = path_param(node)?;
    let (key, value) = taint_field(&body)?;
    let taints = StringMap::from([(key.clone(), value.clone())]);
    let changed = ui.handle.add_taints(&node, taints).await?;
    let flash = format!("Taint {key}={value} added to {}.", changed.node_id);
    Ok(render(&NodesTable::new(&ui.handle.view(), Some(changed), Some(flash))))
}

/// `DELETE /ui/nodes/{node}/taints`, form `taint=key=value`: removes the taint.
pub(crate) async fn remove_taint(
    State(ui): State<Ui>,
    node: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, UiError> {
    let node = path_param(node)?;
    let (key, value) = taint_field(&body)?;
    let taints = StringMap::from([(key.clone(), value.clone())]);
    let changed = ui.handle.remove_taints(&node, taints).await?;
    let flash = format!(
        "Taint {key}={value} removed from {}; waiting work is decided again.",
        changed.node_id
    );
    Ok(render(&NodesTable::new(&ui.handle.view(), Some(changed), Some(flash))))
}

/// `POST /ui/nodes/{node}/drain`: drains the node.
pub(crate) async fn drain(
    State(ui): State<Ui>,
    node: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let node = path_param(node)?;
    let changed = ui.handle.drain_node(&node).await?;
    let flash = format!(
        "{} is draining: it takes no new work, and its actors move to other nodes.",
        changed.node_id
    );
    Ok(render(&NodesTable::new(&ui.handle.view(), Some(changed), Some(flash))))
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

/// The nodes page.
#[derive(Template)]
#[template(path = "dashboard/nodes.html")]
pub(crate) struct NodesPage {
    table: NodesTable,
}

/// The nodes table, and the status line of the action that caused it, if any.
#[derive(Template)]
#[template(path = "dashboard/nodes_table.html")]
pub(crate) struct NodesTable {
    rows: Vec<NodeRow>,
    flash: Option<String>,
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
    /// The table of `view`'s nodes, with `changed` (the head's answer to an action) in place
    /// of its stale row.
    pub(crate) fn new(view: &View, changed: Option<Node>, flash: Option<String>) -> NodesTable {
        let mut nodes: Vec<Arc<Node>> = view.nodes.values().cloned().collect();
        if let Some(changed) = changed {
            match nodes.iter_mut().find(|n| n.node_id == changed.node_id) {
                Some(slot) => *slot = Arc::new(changed),
                None => nodes.push(Arc::new(changed)),
            }
        }
        let rows =
            nodes.iter().enumerate().map(|(index, node)| NodeRow::new(index, node)).collect();
        NodesTable { rows, flash }
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
            dead_reason: node.dead_reason.clone(),
        }
    }
}
