//! `/api/v1/placement_groups`: create, list, get, remove, wait.

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::rest::{ApiError, Group, GroupCreate, List, ListQuery, WaitQuery};

use super::caller::Caller;
use super::extract::{created, Failure, IdempotencyKey, JsonBody, PathId, Query};
use super::Api;
use crate::error::HeadError;
use crate::handle::MAX_WAIT;

/// Seconds `wait` waits when `timeout_s` is absent.
pub(crate) const DEFAULT_WAIT_S: f64 = 30.0;

/// Create a placement group: all bundles reserved at once, or it waits.
#[utoipa::path(
    post, path = "/api/v1/placement_groups", tag = "placement_groups", operation_id = "create_group",
    params(("Idempotency-Key" = Option<String>, Header, description = "A key for this creation: a second request with the same key answers with the first one's object and creates nothing (see `idempotency_key`)")),
    request_body(content = GroupCreate, description = "The bundles and how to place them"),
    responses(
        (status = 201, description = "The group (CREATED, or PENDING with a diagnosis)", body = Group),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 409, description = "Conflicts with the cluster's state", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn create_group(
    State(api): State<Api>,
    caller: Caller,
    key: IdempotencyKey,
    JsonBody(mut body): JsonBody<GroupCreate>,
) -> Result<Response, Failure> {
    key.into_body(&mut body.idempotency_key)?;
    caller.claim(&api.handle.view(), &mut body.ownership)?;
    let group = api.handle.create_group(body).await?;
    Ok(created(format!("/api/v1/placement_groups/{}", group.group_id), &group))
}

/// List placement groups.
///
/// Filters: `state` (PENDING, CREATED, RESCHEDULING, REMOVED), `namespace`, `node` (groups
/// with a bundle there), `name` (in the name or ID). Paged: `limit`, `sort` (`group_id`,
/// creation order, by default; `-created_at_ms` is newest first; also `name`, `namespace`,
/// `state`, `strategy`), `cursor` (the last page's `next_cursor`).
#[utoipa::path(
    get, path = "/api/v1/placement_groups", tag = "placement_groups", operation_id = "list_groups",
    params(ListQuery),
    responses(
        (status = 200, description = "The matching groups", body = List<Group>),
        (status = 400, description = "A bad filter; `field` names it", body = ApiError),
    )
)]
pub(crate) async fn list_groups(
    State(api): State<Api>,
    caller: Caller,
    Query(mut query): Query<ListQuery>,
) -> Result<Json<List<Group>>, Failure> {
    let view = api.handle.view();
    caller.scope(&view, &mut query)?;
    Ok(Json(view.list_groups(&query)?))
}

/// Get one placement group.
#[utoipa::path(
    get, path = "/api/v1/placement_groups/{id}", tag = "placement_groups", operation_id = "get_group",
    params(("id" = String, Path, description = "The group's ID (`pg-3`)")),
    responses(
        (status = 200, description = "The group", body = Group),
        (status = 404, description = "No such group", body = ApiError),
    )
)]
pub(crate) async fn get_group(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Response, Failure> {
    let view = api.handle.view();
    caller.may_reach(&view, &id)?;
    let group = view.group(&id).ok_or(HeadError::NotFound { what: "placement_group", id })?;
    Ok(Json(&*group).into_response())
}

/// Remove a placement group, stopping the actors and tasks inside it.
#[utoipa::path(
    delete, path = "/api/v1/placement_groups/{id}", tag = "placement_groups", operation_id = "remove_group",
    params(("id" = String, Path, description = "The group's ID (`pg-3`)")),
    responses(
        (status = 200, description = "The group, now REMOVED", body = Group),
        (status = 404, description = "No such group", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn remove_group(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Json<Group>, Failure> {
    caller.may_reach(&api.handle.view(), &id)?;
    Ok(Json(api.handle.remove_group(&id).await?))
}

/// Wait until a placement group is created (or removed), at most `timeout_s` seconds.
#[utoipa::path(
    get, path = "/api/v1/placement_groups/{id}/wait", tag = "placement_groups", operation_id = "wait_group",
    params(("id" = String, Path, description = "The group's ID (`pg-3`)"), WaitQuery),
    responses(
        (status = 200, description = "The group, no longer PENDING", body = Group),
        (status = 400, description = "A bad `timeout_s`", body = ApiError),
        (status = 404, description = "No such group", body = ApiError),
        (status = 408, description = "Still PENDING after `timeout_s`", body = ApiError),
        (status = 503, description = "The head is shutting down", body = ApiError),
    )
)]
pub(crate) async fn wait_group(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
    Query(query): Query<WaitQuery>,
) -> Result<Json<Group>, Failure> {
    caller.may_reach(&api.handle.view(), &id)?;
    let timeout = wait_timeout(query.timeout_s)?;
    Ok(Json(api.handle.wait_group(&id, timeout).await?))
}

/// `timeout_s` checked: finite, 0 to 600 seconds.
pub(crate) fn wait_timeout(timeout_s: Option<f64>) -> Result<Duration, Failure> {
    let seconds = timeout_s.unwrap_or(DEFAULT_WAIT_S);
    let max = MAX_WAIT.as_secs_f64();
    let bad = |rule: String| Failure::invalid(Some("timeout_s".into()), rule);
    if !seconds.is_finite() {
        return Err(bad(format!("must be a number of seconds from 0 to {max}")));
    }
    if seconds < 0.0 {
        return Err(bad(format!("{seconds} is negative; give 0 to {max} seconds")));
    }
    if seconds > max {
        return Err(bad(format!("{seconds} is more than the longest wait, {max} seconds")));
    }
    Duration::try_from_secs_f64(seconds.max(0.0))
        .map_err(|_| bad(format!("must be a number of seconds from 0 to {max}")))
}
