//! `/api/v1/autoscaler`: the autoscaler's status, and its plan as a dry run.

use axum::extract::State;
use axum::Json;
use berth_api::rest::{ApiError, AutoscalerPlan, AutoscalerStatus};

use super::extract::Failure;
use super::Api;

/// The autoscaler: node types and their nodes, launching and idle nodes, the last plan and the
/// last decisions with why. `enabled: false` when the head runs without `--autoscaler`.
#[utoipa::path(
    get, path = "/api/v1/autoscaler", tag = "autoscaler", operation_id = "autoscaler_status",
    responses((status = 200, description = "The status", body = AutoscalerStatus))
)]
pub(crate) async fn status(State(api): State<Api>) -> Json<AutoscalerStatus> {
    let view = api.handle.view();
    Json(view.autoscaler.as_deref().cloned().unwrap_or_default())
}

/// Plan for what waits now, launching nothing: per waiting item, whether it fits, which node
/// type would be launched for it, or why no type can take it (the reasons `explain` gives).
///
/// An empty body plans with the head's node types; an autoscaler file (YAML or JSON) as the
/// body plans with its types instead ("what if I had these types?").
#[utoipa::path(
    post, path = "/api/v1/autoscaler/plan", tag = "autoscaler", operation_id = "autoscaler_plan",
    request_body(content = String, description = "Empty, or an autoscaler file", content_type = "application/yaml"),
    responses(
        (status = 200, description = "The plan", body = AutoscalerPlan),
        (status = 400, description = "A bad field of the file; `field` names it", body = ApiError),
        (status = 429, description = "A read token ran more dry runs than 10 a second (20 at once); `Retry-After` says when to try again", body = ApiError),
        (status = 409, description = "No body, and the head runs without an autoscaler", body = ApiError),
    )
)]
pub(crate) async fn plan(
    State(api): State<Api>,
    body: String,
) -> Result<Json<AutoscalerPlan>, Failure> {
    let file = (!body.trim().is_empty()).then_some(body);
    Ok(Json(api.handle.autoscaler_plan(file).await?))
}
