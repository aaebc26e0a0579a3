//! `/api/v1/tasks`: submit, list, get, cancel.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::rest::{
    ApiError, Batch, BatchAnswer, List, ListQuery, Task, TaskSubmit, TasksDelivered, TasksEnded,
    TasksMarked, TasksWait,
};

use super::caller::Caller;
use super::extract::{created, Failure, IdempotencyKey, JsonBody, PathId, Query};
use super::groups::wait_timeout;
use super::Api;
use crate::error::HeadError;

/// Submit a task: checked, placed now or queued, durable, then answered.
#[utoipa::path(
    post, path = "/api/v1/tasks", tag = "tasks", operation_id = "submit_task",
    params(("Idempotency-Key" = Option<String>, Header, description = "A key for this creation: a second request with the same key answers with the first one's object and creates nothing (see `idempotency_key`)")),
    request_body(content = TaskSubmit, description = "What to run and where it may go"),
    responses(
        (status = 201, description = "The task (RUNNING soon, or PENDING with a diagnosis)", body = Task),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 413, description = "The body is over 1 MiB", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn submit_task(
    State(api): State<Api>,
    caller: Caller,
    key: IdempotencyKey,
    JsonBody(mut body): JsonBody<TaskSubmit>,
) -> Result<Response, Failure> {
    key.into_body(&mut body.idempotency_key)?;
    caller.claim(&api.handle.view(), &mut body.ownership)?;
    let task = api.handle.submit_task(body).await?;
    Ok(created(format!("/api/v1/tasks/{}", task.task_id), &task))
}

/// Submit up to 10,000 tasks in one request: each item as `POST /api/v1/tasks` takes it,
/// checked and answered on its own (in order), the whole batch durable before the answer.
#[utoipa::path(
    post, path = "/api/v1/tasks:batch", tag = "tasks", operation_id = "submit_tasks",
    request_body(content = Batch<TaskSubmit>, description = "The tasks (1 to 10,000)"),
    responses(
        (status = 200, description = "One answer per item: 201 with the task, or its error", body = BatchAnswer<Task>),
        (status = 400, description = "Not a batch (`items` missing, empty or over 10,000)", body = ApiError),
        (status = 413, description = "The body is over 16 MiB", body = ApiError),
        (status = 503, description = "The batch could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn submit_tasks(
    State(api): State<Api>,
    caller: Caller,
    key: IdempotencyKey,
    JsonBody(body): JsonBody<Batch<Box<serde_json::value::RawValue>>>,
) -> Result<Response, Failure> {
    key.refuse_for_batch()?;
    let view = api.handle.view();
    let items = super::batch::items::<TaskSubmit>(body)?
        .into_iter()
        .map(|item| item.and_then(|mut t| caller.claim(&view, &mut t.ownership).map(|()| t)))
        .collect();
    let handle = api.handle.clone();
    let answer =
        super::batch::answer(items, |bodies| async move { handle.submit_tasks(bodies).await })
            .await?;
    Ok(super::batch::json(&answer))
}

/// The owner of these tasks has their results: each ends FINISHED however its attempt ends
/// (stopped because its owner ended, its node lost), never CANCELLED, FAILED or retried. The
/// SDKs send the tasks whose results arrived lately when their process ends, so that what ends
/// with it is not cancelled after it finished its part.
#[utoipa::path(
    post, path = "/api/v1/tasks:delivered", tag = "tasks", operation_id = "tasks_delivered",
    request_body(content = TasksDelivered, description = "The tasks (1 to 10,000)"),
    responses(
        (status = 200, description = "The tasks marked (those that had not ended)", body = TasksMarked),
        (status = 400, description = "No IDs, or too many", body = ApiError),
        (status = 403, description = "A read token, or a work credential naming another job's task", body = ApiError),
        (status = 503, description = "The head is shutting down", body = ApiError),
    )
)]
pub(crate) async fn tasks_delivered(
    State(api): State<Api>,
    caller: Caller,
    JsonBody(body): JsonBody<TasksDelivered>,
) -> Result<Json<TasksMarked>, Failure> {
    let view = api.handle.view();
    for id in &body.task_ids {
        caller.may_reach(&view, id)?;
        // A process says what reached it: only a task's owner may.
        if let (Some(me), Some(task)) = (caller.work(), view.task(id)) {
            if task.spec.ownership.owner_id.as_deref() != Some(me) {
                return Err(Failure::forbidden(format!(
                    "task_ids: {id} is not owned by {me}: a process marks its own tasks only"
                )));
            }
        }
    }
    drop(view);
    Ok(Json(TasksMarked { marked: api.handle.tasks_delivered(body.task_ids).await? }))
}

/// List tasks.
///
/// Filters: `state` (PENDING, RUNNING, FINISHED, FAILED, CANCELLED), `namespace`, `node`,
/// `name` (in the name or ID). Paged: `limit`, `sort` (`task_id`, creation order, by
/// default; `-created_at_ms` is newest first; also `name`, `namespace`, `state`, `node_id`,
/// `attempts`, `exit_code`), `cursor` (the last page's `next_cursor`).
#[utoipa::path(
    get, path = "/api/v1/tasks", tag = "tasks", operation_id = "list_tasks",
    params(ListQuery),
    responses(
        (status = 200, description = "The matching tasks", body = List<Task>),
        (status = 400, description = "A bad filter; `field` names it", body = ApiError),
    )
)]
pub(crate) async fn list_tasks(
    State(api): State<Api>,
    caller: Caller,
    Query(mut query): Query<ListQuery>,
) -> Result<Json<List<Task>>, Failure> {
    let view = api.handle.view();
    caller.scope(&view, &mut query)?;
    Ok(Json(view.list_tasks(&query)?))
}

/// Get one task.
#[utoipa::path(
    get, path = "/api/v1/tasks/{id}", tag = "tasks", operation_id = "get_task",
    params(("id" = String, Path, description = "The task's ID (`task-9`)")),
    responses(
        (status = 200, description = "The task", body = Task),
        (status = 404, description = "No such task", body = ApiError),
    )
)]
pub(crate) async fn get_task(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Response, Failure> {
    let view = api.handle.view();
    caller.may_reach(&view, &id)?;
    let task = view.task(&id).ok_or(HeadError::NotFound { what: "task", id })?;
    Ok(Json(&*task).into_response())
}

/// Cancel a task, stopping it if it runs.
#[utoipa::path(
    post, path = "/api/v1/tasks/{id}/cancel", tag = "tasks", operation_id = "cancel_task",
    params(("id" = String, Path, description = "The task's ID (`task-9`)")),
    responses(
        (status = 200, description = "The task, now CANCELLED (or already ended)", body = Task),
        (status = 404, description = "No such task", body = ApiError),
        (status = 409, description = "The task has already ended", body = ApiError),
        (status = 503, description = "The change could not be made durable", body = ApiError),
    )
)]
pub(crate) async fn cancel_task(
    State(api): State<Api>,
    caller: Caller,
    PathId(id): PathId,
) -> Result<Json<Task>, Failure> {
    caller.may_reach(&api.handle.view(), &id)?;
    Ok(Json(api.handle.cancel_task(&id).await?))
}

/// Wait until one of these tasks ends (long poll): answers at once with every named task that
/// is FINISHED, FAILED or CANCELLED and every ID the head does not know; when there is none,
/// as soon as one ends, or with empty lists after `timeout_s`. An SDK's driver watches the
/// tasks it awaits with one such call instead of one per task.
#[utoipa::path(
    post, path = "/api/v1/tasks:wait", tag = "tasks", operation_id = "wait_tasks",
    request_body(content = TasksWait, description = "The tasks (1 to 10,000 IDs) and the longest wait"),
    responses(
        (status = 200, description = "The tasks that ended and the IDs not known (both empty after the timeout)", body = TasksEnded),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 503, description = "The head is shutting down", body = ApiError),
    )
)]
pub(crate) async fn wait_tasks(
    State(api): State<Api>,
    caller: Caller,
    JsonBody(body): JsonBody<TasksWait>,
) -> Result<Json<TasksEnded>, Failure> {
    let timeout = wait_timeout(body.timeout_s)?;
    let view = api.handle.view();
    for id in &body.task_ids {
        caller.may_reach(&view, id)?;
    }
    drop(view);
    Ok(Json(api.handle.wait_tasks(&body.task_ids, timeout).await?))
}
