//! `/api/v1/nodes`: list, get, drain, taints.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::rest::{ApiError, List, ListQuery, Node, TaintsBody};

use super::extract::{Failure, JsonBody, PathId, Query};
use super::Api;
use crate::error::HeadError;

/// List nodes.
///
/// Filters: `state` (ALIVE, DRAINING, DEAD), `label` (`key=value`), `node` (an ID), `limit`.
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
    Ok(Json(api.handle.view().list_nodes(&query)?))
}

/// Get one node, by ID or by address.
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
    Ok(Json(&*found).into_response())
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

/// Add taints to a node (seed 004): `{"gpu_node": "true"}`.
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
