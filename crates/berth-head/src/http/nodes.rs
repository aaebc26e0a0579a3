//! `/api/v1/nodes`: list, get, drain, taints, labels, resources.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::rest::{
    ApiError, LabelKeysBody, LabelsBody, List, ListQuery, Node, ResourcesBody, TaintsBody,
};

use super::extract::{Failure, JsonBody, PathId, Query};
use super::Api;
use crate::error::HeadError;

/// List nodes.
///
/// Each live node carries its machine's last measurement (`measured`, without the attempts:
/// those are in `GET /api/v1/nodes/{node}`).
///
/// Filters: `state` (ALIVE, DRAINING, SUSPECT, DEAD), `label` (`key=value`), `name` (in the ID or
/// address). Paged: `limit`, `sort` (`node_id` by default), `cursor`.
#[utoipa::path(
    get, path = "/api/v1/nodes", tag = "nodes", operation_id = "list_nodes",
    params(ListQuery),
    responses(
        (status = 200, description = "The matching nodes", body = List<Node>),
        (status = 400, description = "A bad filter; `field` names it", body = ApiError),
    )
)]
pub(crate) async fn list_nodes(
    State(api): State<Api>,
    Query(query): Query<ListQuery>,
) -> Result<Json<List<Node>>, Failure> {
    let mut list = api.handle.view().list_nodes(&query)?;
    for node in &mut list.items {
        api.handle.measurements.fill(node, false);
    }
    Ok(Json(list))
}

/// Get one node, by ID or by address, with what its machine and each attempt on it use as
/// last measured (`measured`, when its agent measures).
#[utoipa::path(
    get, path = "/api/v1/nodes/{node}", tag = "nodes", operation_id = "get_node",
    params(("node" = String, Path, description = "The node's ID, or its address")),
    responses(
        (status = 200, description = "The node", body = Node),
        (status = 404, description = "No such node", body = ApiError),
    )
)]
pub(crate) async fn get_node(
    State(api): State<Api>,
    PathId(node): PathId,
) -> Result<Response, Failure> {
    let view = api.handle.view();
    let found = view.node(&node).ok_or(HeadError::NotFound { what: "node", id: node })?;
    let mut node = (*found).clone();
    api.handle.measurements.fill(&mut node, true);
    Ok(Json(node).into_response())
}

/// Drain a node: it takes no new work and its actors move elsewhere.
#[utoipa::path(
    post, path = "/api/v1/nodes/{node}/drain", tag = "nodes", operation_id = "drain_node",
    params(("node" = String, Path, description = "The node's ID, or its address")),
    responses(
        (status = 200, description = "The node, now DRAINING", body = Node),
        (status = 404, description = "No such node", body = ApiError),
        (status = 409, description = "The node cannot be drained in its state", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn drain_node(
    State(api): State<Api>,
    PathId(node): PathId,
) -> Result<Json<Node>, Failure> {
    Ok(Json(api.handle.drain_node(&node).await?))
}

/// End a node's drain: it takes new work again and waiting work is decided again. A node
/// that is not draining is answered as it is.
#[utoipa::path(
    post, path = "/api/v1/nodes/{node}/undrain", tag = "nodes", operation_id = "undrain_node",
    params(("node" = String, Path, description = "The node's ID, or its address")),
    responses(
        (status = 200, description = "The node, now ALIVE", body = Node),
        (status = 404, description = "No such node", body = ApiError),
        (status = 409, description = "The node is dead", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn undrain_node(
    State(api): State<Api>,
    PathId(node): PathId,
) -> Result<Json<Node>, Failure> {
    Ok(Json(api.handle.undrain_node(&node).await?))
}

/// Add taints to a node: `{"gpu_node": "true"}`.
#[utoipa::path(
    post, path = "/api/v1/nodes/{node}/taints", tag = "nodes", operation_id = "add_taints",
    params(("node" = String, Path, description = "The node's ID, or its address")),
    request_body(content = TaintsBody, description = "Taint key to value"),
    responses(
        (status = 200, description = "The node with its taints", body = Node),
        (status = 400, description = "A bad taint; `field` names its key", body = ApiError),
        (status = 404, description = "No such node", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn add_taints(
    State(api): State<Api>,
    PathId(node): PathId,
    JsonBody(TaintsBody(taints)): JsonBody<TaintsBody>,
) -> Result<Json<Node>, Failure> {
    Ok(Json(api.handle.add_taints(&node, taints).await?))
}

/// Remove taints from a node; work waiting for them to go is decided again.
#[utoipa::path(
    delete, path = "/api/v1/nodes/{node}/taints", tag = "nodes", operation_id = "remove_taints",
    params(("node" = String, Path, description = "The node's ID, or its address")),
    request_body(content = TaintsBody, description = "Taint key to value"),
    responses(
        (status = 200, description = "The node with its taints", body = Node),
        (status = 400, description = "A bad taint; `field` names its key", body = ApiError),
        (status = 404, description = "No such node", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn remove_taints(
    State(api): State<Api>,
    PathId(node): PathId,
    JsonBody(TaintsBody(taints)): JsonBody<TaintsBody>,
) -> Result<Json<Node>, Failure> {
    Ok(Json(api.handle.remove_taints(&node, taints).await?))
}

/// Add or change node labels: `{"zone": "us-west4-a"}`. Work waiting for them is decided
/// again; work already running stays (labels are not checked again once placed).
#[utoipa::path(
    post, path = "/api/v1/nodes/{node}/labels", tag = "nodes", operation_id = "set_labels",
    params(("node" = String, Path, description = "The node's ID, or its address")),
    request_body(content = LabelsBody, description = "Label key to value"),
    responses(
        (status = 200, description = "The node with its labels", body = Node),
        (status = 400, description = "A bad label; `field` names its key", body = ApiError),
        (status = 404, description = "No such node", body = ApiError),
        (status = 409, description = "The node is dead", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn set_labels(
    State(api): State<Api>,
    PathId(node): PathId,
    JsonBody(LabelsBody(labels)): JsonBody<LabelsBody>,
) -> Result<Json<Node>, Failure> {
    Ok(Json(api.handle.set_labels(&node, labels).await?))
}

/// Remove node labels by key: `["zone"]` (a key the node does not have is ignored; removing
/// an override of a `berth.io/` default brings the default back).
#[utoipa::path(
    delete, path = "/api/v1/nodes/{node}/labels", tag = "nodes", operation_id = "remove_labels",
    params(("node" = String, Path, description = "The node's ID, or its address")),
    request_body(content = LabelKeysBody, description = "Label keys"),
    responses(
        (status = 200, description = "The node with its labels", body = Node),
        (status = 400, description = "A bad body", body = ApiError),
        (status = 404, description = "No such node", body = ApiError),
        (status = 409, description = "The node is dead", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn remove_labels(
    State(api): State<Api>,
    PathId(node): PathId,
    JsonBody(LabelKeysBody(keys)): JsonBody<LabelKeysBody>,
) -> Result<Json<Node>, Failure> {
    Ok(Json(api.handle.remove_labels(&node, keys).await?))
}

/// Set resource totals of a node at run time: `{"GPU": "2", "my_res":
/// "0"}`. The named resources get these totals, the others stay; `"0"` deletes one. GPUs
/// shrink from the highest instance. Work waiting for capacity is decided again; work already
/// running stays, and a total below what it holds leaves nothing available until it ends.
#[utoipa::path(
    put, path = "/api/v1/nodes/{node}/resources", tag = "nodes", operation_id = "set_resources",
    params(("node" = String, Path, description = "The node's ID, or its address")),
    request_body(content = ResourcesBody, description = "Resource name to total"),
    responses(
        (status = 200, description = "The node with its resources", body = Node),
        (status = 400, description = "A bad amount or name; `field` names the resource", body = ApiError),
        (status = 404, description = "No such node", body = ApiError),
        (status = 409, description = "The node is dead", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn set_resources(
    State(api): State<Api>,
    PathId(node): PathId,
    JsonBody(ResourcesBody(resources)): JsonBody<ResourcesBody>,
) -> Result<Json<Node>, Failure> {
    Ok(Json(api.handle.set_resources(&node, resources).await?))
}
