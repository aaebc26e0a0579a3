//! `/api/v1/actors`: create, list, get, kill.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::rest::{
    Actor, ActorCreate, ActorEndpoint, ApiError, Batch, BatchAnswer, EndpointQuery,
    EndpointRegister, List, ListQuery,
};

use super::caller::Caller;
use super::extract::{created, Failure, IdempotencyKey, JsonBody, PathId, Query};
use super::groups::wait_timeout;
use super::Api;
use crate::error::HeadError;

/// Create an actor: checked, placed now or queued, durable, then answered.
#[utoipa::path(
    post, path = "/api/v1/actors", tag = "actors", operation_id = "create_actor",
    params(("Idempotency-Key" = Option<String>, Header, description = "A key for this creation: a second request with the same key answers with the first one's object and creates nothing (see `idempotency_key`)")),
    request_body(content = ActorCreate, description = "What to run and where it may go"),
    responses(
        (status = 201, description = "The actor (ALIVE soon, or PENDING with a diagnosis)", body = Actor),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 409, description = "The name is in use in its namespace", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn create_actor(
    State(api): State<Api>,
    caller: Caller,
    key: IdempotencyKey,
    JsonBody(mut body): JsonBody<ActorCreate>,
) -> Result<Response, Failure> {
    key.into_body(&mut body.idempotency_key)?;
    caller.claim(&api.handle.view(), &mut body.ownership)?;
    let actor = api.handle.create_actor(body).await?;
    Ok(created(format!("/api/v1/actors/{}", actor.actor_id), &actor))
}

/// Create up to 10,000 actors in one request: each item as `POST /api/v1/actors` takes it,
/// checked and answered on its own (in order), the whole batch durable before the answer.
#[utoipa::path(
    post, path = "/api/v1/actors:batch", tag = "actors", operation_id = "create_actors",
    request_body(content = Batch<ActorCreate>, description = "The actors (1 to 10,000)"),
    responses(
        (status = 200, description = "One answer per item: 201 with the actor, or its error", body = BatchAnswer<Actor>),
        (status = 400, description = "Not a batch (`items` missing, empty or over 10,000)", body = ApiError),
        (status = 413, description = "The body is over 16 MiB", body = ApiError),
        (status = 503, description = "The batch could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn create_actors(
    State(api): State<Api>,
    caller: Caller,
    key: IdempotencyKey,
    JsonBody(body): JsonBody<Batch<Box<serde_json::value::RawValue>>>,
) -> Result<Response, Failure> {
    key.refuse_for_batch()?;
    let view = api.handle.view();
    let items = super::batch::items::<ActorCreate>(body)?
        .into_iter()
        .map(|item| item.and_then(|mut a| caller.claim(&view, &mut a.ownership).map(|()| a)))
        .collect();
    let handle = api.handle.clone();
    let answer =
        super::batch::answer(items, |bodies| async move { handle.create_actors(bodies).await })
            .await?;
    Ok(super::batch::json(&answer))
}

/// List actors.
///
/// Filters: `state` (PENDING, ALIVE, RESTARTING, DEAD), `namespace`, `node`, `label`
/// (`key=value`), `name` (in the name or ID). Paged: `limit`, `sort` (`actor_id`, creation
/// order, by default; `-created_at_ms` is newest first; also `name`, `namespace`, `state`,
/// `node_id`, `restarts`), `cursor` (the last page's `next_cursor`).
#[utoipa::path(
    get, path = "/api/v1/actors", tag = "actors", operation_id = "list_actors",
    params(ListQuery),
    responses(
        (status = 200, description = "The matching actors", body = List<Actor>),
        (status = 400, description = "A bad filter; `field` names it", body = ApiError),
    )
)]
pub(crate) async fn list_actors(
    State(api): State<Api>,
    caller: Caller,
    Query(mut query): Query<ListQuery>,
) -> Result<Json<List<Actor>>, Failure> {
    let view = api.handle.view();
    caller.scope(&view, &mut query)?;
    Ok(Json(view.list_actors(&query)?))
}

/// Get one actor.
#[utoipa::path(
    get, path = "/api/v1/actors/{id}", tag = "actors", operation_id = "get_actor",
    params(("id" = String, Path, description = "The actor's ID (`actor-17`)")),
    responses(
        (status = 200, description = "The actor", body = Actor),
        (status = 404, description = "No such actor", body = ApiError),
    )
)]
pub(crate) async fn get_actor(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Response, Failure> {
    let view = api.handle.view();
    caller.may_reach(&view, &id)?;
    let actor = view.actor(&id).ok_or(HeadError::NotFound { what: "actor", id })?;
    Ok(Json(&*actor).into_response())
}

/// Kill an actor for good (no restart); its process is stopped.
#[utoipa::path(
    delete, path = "/api/v1/actors/{id}", tag = "actors", operation_id = "kill_actor",
    params(("id" = String, Path, description = "The actor's ID (`actor-17`)")),
    responses(
        (status = 200, description = "The actor, now DEAD", body = Actor),
        (status = 404, description = "No such actor", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn kill_actor(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Json<Actor>, Failure> {
    caller.may_reach(&api.handle.view(), &id)?;
    Ok(Json(api.handle.kill_actor(&id).await?))
}

/// An actor's process says where it listens (the SDKs' worker runtimes call this once they
/// listen). Authorised by the actor's work key (the process's `BERTH_WORK_KEY`), not by a
/// token; only the attempt placed now may register.
#[utoipa::path(
    put, path = "/api/v1/actors/{id}/endpoint", tag = "actors", operation_id = "register_endpoint",
    params(("id" = String, Path, description = "The actor's ID (`actor-17`)")),
    request_body(content = EndpointRegister, description = "The process's attempt and address"),
    responses(
        (status = 200, description = "The actor, with its endpoint", body = Actor),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 401, description = "Not the actor's work key", body = ApiError),
        (status = 404, description = "No such actor", body = ApiError),
        (status = 409, description = "The actor is DEAD, or that attempt is not the current one", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn register_endpoint(
    State(api): State<Api>,
    PathId(id): PathId,
    headers: HeaderMap,
    JsonBody(body): JsonBody<EndpointRegister>,
) -> Result<Json<Actor>, Failure> {
    let key = bearer(&headers);
    Ok(Json(api.handle.register_endpoint(&id, key, body).await?))
}

/// How to call an actor: where its current attempt listens and its work key. Waits (long
/// poll, at most `timeout_s`) until an attempt later than `after_attempt` listens or the actor
/// is DEAD. Admin tokens only: the work key lets its holder call the actor.
#[utoipa::path(
    get, path = "/api/v1/actors/{id}/endpoint", tag = "actors", operation_id = "actor_endpoint",
    params(("id" = String, Path, description = "The actor's ID (`actor-17`)"), EndpointQuery),
    responses(
        (status = 200, description = "Where it listens, or DEAD with the reason", body = ActorEndpoint),
        (status = 400, description = "A bad `timeout_s` or `after_attempt`", body = ApiError),
        (status = 403, description = "A read token", body = ApiError),
        (status = 404, description = "No such actor", body = ApiError),
        (status = 408, description = "No such attempt listens yet after `timeout_s`", body = ApiError),
        (status = 503, description = "The head is shutting down", body = ApiError),
    )
)]
pub(crate) async fn actor_endpoint(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
    Query(query): Query<EndpointQuery>,
) -> Result<Json<ActorEndpoint>, Failure> {
    caller.may_reach(&api.handle.view(), &id)?;
    let timeout = wait_timeout(query.timeout_s)?;
    let after = query.after_attempt.unwrap_or(0);
    Ok(Json(api.handle.actor_endpoint(&id, after, timeout).await?))
}

/// The secret of an `Authorization: Bearer …` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, secret) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| secret.trim())
}
