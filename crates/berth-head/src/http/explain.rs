//! `/api/v1/explain`: why an object is where it is (or waits), and dry runs.

use axum::extract::State;
use axum::Json;
use berth_api::rest::{ApiError, DryRun, Explanation};

use super::extract::{Failure, JsonObjectText, PathId};
use super::Api;
use crate::error::HeadError;

/// Explain an actor, task or placement group: where it is, or why it waits.
#[utoipa::path(
    get, path = "/api/v1/explain/{id}", tag = "explain", operation_id = "explain",
    params(("id" = String, Path, description = "An actor, task or group ID")),
    responses(
        (status = 200, description = "The explanation", body = Explanation),
        (status = 404, description = "No such object", body = ApiError),
    )
)]
pub(crate) async fn explain(
    State(api): State<Api>,
    PathId(id): PathId,
) -> Result<Json<Explanation>, Failure> {
    let what = match berth_api::ObjectKind::parse(&id) {
        Some((kind, _)) => kind.word(),
        None => "object",
    };
    let found = api.handle.view().explain(&id).ok_or(HeadError::NotFound { what, id })?;
    Ok(Json(found))
}

/// Decide a request document against the live cluster without reserving anything.
///
/// The body is a request file's content as JSON (`docs/file-formats.md`): `resources`,
/// `scheduling_strategy`, `label_selector`, ... or a `placement_group`.
#[utoipa::path(
    post, path = "/api/v1/explain", tag = "explain", operation_id = "dry_run",
    request_body(content = Object, description = "A request document"),
    responses(
        (status = 200, description = "Where it would go, or why not", body = DryRun),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 429, description = "A read token ran more dry runs than 10 a second (20 at once); `Retry-After` says when to try again", body = ApiError),
        (status = 503, description = "The head is shutting down", body = ApiError),
    )
)]
pub(crate) async fn dry_run(
    State(api): State<Api>,
    JsonObjectText(document): JsonObjectText,
) -> Result<Json<DryRun>, Failure> {
    Ok(Json(api.handle.dry_run(document).await?))
}
