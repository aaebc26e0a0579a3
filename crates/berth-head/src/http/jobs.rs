//! `/api/v1/jobs`: create (a driver's session), list, get, renew, finish, stop.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::rest::{ApiError, Job, JobCreate, JobEnd, List, ListQuery};

use super::caller::Caller;
use super::extract::{created, Failure, IdempotencyKey, JsonBody, OptionalJsonBody, PathId, Query};
use super::Api;
use crate::error::HeadError;

/// Create a job: a driver's session, held by a lease the driver renews.
///
/// What names the job (`job_id`) or an actor or task of it (`owner_id`) at its creation ends
/// when the job ends, unless it is `detached`.
#[utoipa::path(
    post, path = "/api/v1/jobs", tag = "jobs", operation_id = "create_job",
    params(("Idempotency-Key" = Option<String>, Header, description = "A key for this creation: a second request with the same key answers with the first one's object and creates nothing (see `idempotency_key`)")),
    request_body(content = JobCreate, description = "The job's name, lease and what the driver says of itself"),
    responses(
        (status = 201, description = "The job, RUNNING", body = Job),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn create_job(
    State(api): State<Api>,
    key: IdempotencyKey,
    JsonBody(mut body): JsonBody<JobCreate>,
) -> Result<Response, Failure> {
    key.into_body(&mut body.idempotency_key)?;
    let job = api.handle.create_job(body).await?;
    Ok(created(format!("/api/v1/jobs/{}", job.job_id), &job))
}

/// List jobs.
///
/// Filters: `state` (RUNNING, FINISHED, STOPPED, LOST), `namespace`, `name` (in the name or
/// ID). Paged: `limit`, `sort` (`job_id`, creation order, by default; `-created_at_ms` is
/// newest first; also `name`, `state`, `ended_at_ms`), `cursor`.
#[utoipa::path(
    get, path = "/api/v1/jobs", tag = "jobs", operation_id = "list_jobs",
    params(ListQuery),
    responses(
        (status = 200, description = "The matching jobs", body = List<Job>),
        (status = 400, description = "A bad filter; `field` names it", body = ApiError),
    )
)]
pub(crate) async fn list_jobs(
    State(api): State<Api>,
    Query(query): Query<ListQuery>,
) -> Result<Json<List<Job>>, Failure> {
    Ok(Json(api.handle.view().list_jobs(&query)?))
}

/// Get one job.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}", tag = "jobs", operation_id = "get_job",
    params(("id" = String, Path, description = "The job's ID (`job-3`)")),
    responses(
        (status = 200, description = "The job", body = Job),
        (status = 404, description = "No such job", body = ApiError),
    )
)]
pub(crate) async fn get_job(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Response, Failure> {
    let view = api.handle.view();
    caller.may_reach(&view, &id)?;
    let job = view.job(&id).ok_or(HeadError::NotFound { what: "job", id })?;
    Ok(Json(&*job).into_response())
}

/// Renew a running job's lease: it lives a whole lease (`lease_ms`) from now.
///
/// The SDKs renew every sixth of the lease. A job whose lease runs out is LOST, and what it
/// owns ends.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/renew", tag = "jobs", operation_id = "renew_job",
    params(("id" = String, Path, description = "The job's ID (`job-3`)")),
    responses(
        (status = 200, description = "The job, still RUNNING", body = Job),
        (status = 404, description = "No such job", body = ApiError),
        (status = 409, description = "The job has ended (`message` says how): start another", body = ApiError),
    )
)]
pub(crate) async fn renew_job(
    State(api): State<Api>,
    PathId(id): PathId,
) -> Result<Json<Job>, Failure> {
    Ok(Json(api.handle.renew_job(&id).await?))
}

/// End a job as its driver: FINISHED. What it owns (its non-detached actors, tasks and
/// placement groups, and what they own) ends with it.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/finish", tag = "jobs", operation_id = "finish_job",
    params(("id" = String, Path, description = "The job's ID (`job-3`)")),
    request_body(content = Option<JobEnd>, description = "Why (optional)"),
    responses(
        (status = 200, description = "The job, ended (as it was, if it had ended already)", body = Job),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 404, description = "No such job", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn finish_job(
    State(api): State<Api>,
    PathId(id): PathId,
    OptionalJsonBody(body): OptionalJsonBody<JobEnd>,
) -> Result<Json<Job>, Failure> {
    let reason = body.and_then(|b| b.reason);
    Ok(Json(api.handle.finish_job(&id, reason).await?))
}

/// Stop a job as a user: STOPPED. What it owns ends with it, as when it finishes.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/stop", tag = "jobs", operation_id = "stop_job",
    params(("id" = String, Path, description = "The job's ID (`job-3`)")),
    request_body(content = Option<JobEnd>, description = "Why (optional)"),
    responses(
        (status = 200, description = "The job, ended (as it was, if it had ended already)", body = Job),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 404, description = "No such job", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn stop_job(
    State(api): State<Api>,
    PathId(id): PathId,
    OptionalJsonBody(body): OptionalJsonBody<JobEnd>,
) -> Result<Json<Job>, Failure> {
    let reason = body.and_then(|b| b.reason);
    Ok(Json(api.handle.stop_job(&id, reason).await?))
}
