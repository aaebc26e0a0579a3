//! Health, metrics, the cluster status and the OpenAPI document.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::rest::{ApiError, ClusterStatus, Health};

use super::Api;

/// Is the head up? Needs no token.
#[utoipa::path(
    get, path = "/healthz", tag = "cluster", operation_id = "healthz",
    responses((status = 200, description = "The head answers", body = Health))
)]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into(), active: None })
}

/// The head's Prometheus metrics (OpenMetrics text).
#[utoipa::path(
    get, path = "/metrics", tag = "cluster", operation_id = "metrics",
    responses((status = 200, description = "The metrics", body = String,
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"))
)]
pub(crate) async fn metrics(State(api): State<Api>) -> Response {
    let measured = api.handle.measurements.nodes();
    let text = api.metrics.scrape(&api.handle.view(), &measured);
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

/// The cluster at a glance: nodes, resources, counts, what waits, and autoscaler demand.
#[utoipa::path(
    get, path = "/api/v1/cluster/status", tag = "cluster", operation_id = "cluster_status",
    responses((status = 200, description = "The status", body = ClusterStatus))
)]
pub(crate) async fn status(State(api): State<Api>) -> Json<ClusterStatus> {
    let mut status = api.handle.view().status();
    status.warnings = api.handle.store.warnings();
    Json(status)
}

/// This document.
#[utoipa::path(
    get, path = "/api/v1/openapi.json", tag = "cluster", operation_id = "openapi",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document", body = Object),
        (status = 401, description = "No token, or the wrong one", body = ApiError),
    )
)]
pub(crate) async fn openapi(State(api): State<Api>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], api.openapi.clone()).into_response()
}
