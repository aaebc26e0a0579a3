//! The REST API (axum): `/healthz`, `/metrics`, and everything under `/api/v1`.
//!
//! Reads answer from the published [`View`](crate::view::View); changes go through the
//! [`HeadHandle`] and are answered once durable. Every route but `GET /healthz` needs the
//! cluster token (`Authorization: Bearer <token>`). Every error is an [`ApiError`] JSON body:
//! bad input 400 naming the field, 401, 404 (unknown ID or route), 405, 408, 409, 413, and 503
//! only when the head cannot make a change durable. `GET /api/v1/logs/{id}` is the one route
//! that answers `text/plain`, streamed from the node's agent (`logs`).
//!
//! One module per resource; `extract` holds the extractors that turn bad input into
//! [`ApiError`]s.

mod actors;
mod autoscaler;
mod batch;
pub(crate) mod body_scan;
mod caller;
mod cluster;
mod explain;
mod extract;
pub(crate) mod gate;
mod groups;
mod jobs;
mod logs;
mod nodes;
mod tasks;
#[cfg(test)]
mod tests;
mod tokens;
mod watch;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use berth_api::rest::{self, ApiError, ErrorKind};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{RefOr, ResponseBuilder};
use utoipa::OpenApi;

use crate::handle::HeadHandle;
use crate::keyring::Keyring;
use crate::logs::LogStreams;
use crate::metrics::Metrics;
use extract::{Failure, MAX_BODY_BYTES};

/// What every handler shares, behind one reference count: axum clones a router's state for
/// every request, and cloning each part was an atomic increment and decrement per part, shared
/// by every worker (`perf` of `berth bench api`'s single creations: 5 % of the HTTP layer).
#[derive(Clone)]
pub(crate) struct Api(Arc<Shared>);

impl std::ops::Deref for Api {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`Api`].
pub(crate) struct Shared {
    handle: HeadHandle,
    /// The tokens (`/api/v1/tokens`).
    keyring: Keyring,
    metrics: Arc<Metrics>,
    /// The agents' log streams (`GET /api/v1/logs/{id}`).
    logs: Arc<LogStreams>,
    /// The OpenAPI document, rendered once.
    openapi: Bytes,
    /// The watch hub, started by the first watch.
    watchers: watch::Watchers,
}

/// [`router_with_logs`] without agents: no node has a log stream (the HTTP mapping's tests).
#[cfg(test)]
pub(crate) fn router(handle: HeadHandle, keyring: Keyring, metrics: Arc<Metrics>) -> Router {
    router_with_logs(handle, keyring, metrics, Arc::default())
}

/// The REST routes, token check included (on these routes only, so routes merged in later,
/// like the agent protocol's gRPC services, keep their own checks). Logs are read through the
/// agents' log streams in `logs`.
///
/// Layers, outermost first: request metrics (every answer, 401s and unknown routes
/// included), the 1 MiB body limit, then the token check (on matched routes only). The
/// router has a fallback (404 `ApiError`, or gRPC `UNIMPLEMENTED` for `application/grpc`
/// requests), so a router merged into it must not have one: call
/// [`Router::reset_fallback`] on tonic's router first.
pub(crate) fn router_with_logs(
    handle: HeadHandle,
    keyring: Keyring,
    metrics: Arc<Metrics>,
    logs: Arc<LogStreams>,
) -> Router {
    let openapi = openapi_json();
    let work_keys = handle.work_keys.clone();
    let api = Api(Arc::new(Shared {
        handle,
        keyring: keyring.clone(),
        metrics: metrics.clone(),
        logs,
        openapi,
        watchers: Default::default(),
    }));
    let protected = Router::new()
        .route("/metrics", get(cluster::metrics))
        .route("/api/v1/openapi.json", get(cluster::openapi))
        .route("/api/v1/cluster/status", get(cluster::status))
        .route("/api/v1/watch", get(watch::watch))
        .route("/api/v1/autoscaler", get(autoscaler::status))
        .route("/api/v1/autoscaler/plan", post(autoscaler::plan))
        .route("/api/v1/nodes", get(nodes::list_nodes))
        .route("/api/v1/nodes/{node}", get(nodes::get_node))
        .route("/api/v1/nodes/{node}/drain", post(nodes::drain_node))
        .route("/api/v1/nodes/{node}/undrain", post(nodes::undrain_node))
        .route("/api/v1/nodes/{node}/taints", post(nodes::add_taints).delete(nodes::remove_taints))
        .route("/api/v1/nodes/{node}/labels", post(nodes::set_labels).delete(nodes::remove_labels))
        .route("/api/v1/nodes/{node}/resources", put(nodes::set_resources))
        .route("/api/v1/actors", post(actors::create_actor).get(actors::list_actors))
        .route("/api/v1/actors/{id}", get(actors::get_actor).delete(actors::kill_actor))
        .route(
            "/api/v1/actors/{id}/endpoint",
            get(actors::actor_endpoint).put(actors::register_endpoint),
        )
        .route("/api/v1/tasks", post(tasks::submit_task).get(tasks::list_tasks))
        .route("/api/v1/tasks:wait", post(tasks::wait_tasks))
        .route("/api/v1/tasks:delivered", post(tasks::tasks_delivered))
        .route("/api/v1/tasks:batch", post(tasks::submit_tasks).layer(batch_limit()))
        .route("/api/v1/actors:batch", post(actors::create_actors).layer(batch_limit()))
        .route("/api/v1/tasks/{id}", get(tasks::get_task))
        .route("/api/v1/tasks/{id}/cancel", post(tasks::cancel_task))
        .route("/api/v1/placement_groups", post(groups::create_group).get(groups::list_groups))
        .route("/api/v1/placement_groups/{id}", get(groups::get_group).delete(groups::remove_group))
        .route("/api/v1/placement_groups/{id}/wait", get(groups::wait_group))
        .route("/api/v1/jobs", post(jobs::create_job).get(jobs::list_jobs))
        .route("/api/v1/jobs/{id}", get(jobs::get_job))
        .route("/api/v1/jobs/{id}/renew", post(jobs::renew_job))
        .route("/api/v1/jobs/{id}/finish", post(jobs::finish_job))
        .route("/api/v1/jobs/{id}/stop", post(jobs::stop_job))
        .route("/api/v1/explain", post(explain::dry_run))
        .route("/api/v1/explain/{id}", get(explain::explain))
        .route("/api/v1/logs/{id}", get(logs::logs))
        .route("/api/v1/tokens", get(tokens::list_tokens).post(tokens::create_token))
        .route("/api/v1/tokens/{id}", axum::routing::delete(tokens::revoke_token))
        .method_not_allowed_fallback(method_not_allowed)
        .route_layer(gate::TokenLayer::new(keyring, work_keys))
        .with_state(api);
    Router::new()
        .route("/healthz", get(cluster::healthz))
        .method_not_allowed_fallback(method_not_allowed)
        .merge(protected)
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(gate::RecordLayer::new(metrics))
}

/// The body limit of the batch routes (inside the router-wide 1 MiB, so it wins there).
fn batch_limit() -> DefaultBodyLimit {
    DefaultBodyLimit::max(extract::MAX_BATCH_BODY_BYTES)
}

/// Unknown route: 404 `ApiError`; for a gRPC request, gRPC's UNIMPLEMENTED.
async fn no_route(req: Request) -> Response {
    let grpc = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"));
    if grpc {
        return (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, HeaderValue::from_static("application/grpc")),
                (header::HeaderName::from_static("grpc-status"), HeaderValue::from_static("12")),
            ],
        )
            .into_response();
    }
    Failure::no_route(req.method().as_str(), req.uri().path()).into_response()
}

/// Known route, wrong method: 405 `ApiError` (axum keeps the `Allow` header).
async fn method_not_allowed(req: Request) -> Response {
    let body = ApiError {
        error: ErrorKind::Invalid,
        field: None,
        message: format!(
            "{} is not allowed on {}; see the Allow header",
            extract::clip(req.method().as_str()),
            extract::clip(req.uri().path())
        ),
    };
    (StatusCode::METHOD_NOT_ALLOWED, Json(body)).into_response()
}

/// The OpenAPI document of the routes above.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Berth",
        description = "Berth's REST API: a label-aware cluster scheduler for actors, tasks and \
                       placement groups. Every route but /healthz needs `Authorization: Bearer \
                       <token>` (the token is in DATA_DIR/token).",
    ),
    paths(
        cluster::healthz,
        cluster::metrics,
        cluster::openapi,
        cluster::status,
        watch::watch,
        autoscaler::status,
        autoscaler::plan,
        nodes::list_nodes,
        nodes::get_node,
        nodes::drain_node,
        nodes::undrain_node,
        nodes::add_taints,
        nodes::remove_taints,
        nodes::set_labels,
        nodes::remove_labels,
        nodes::set_resources,
        actors::create_actor,
        actors::create_actors,
        actors::list_actors,
        actors::get_actor,
        actors::kill_actor,
        actors::register_endpoint,
        actors::actor_endpoint,
        tasks::submit_task,
        tasks::submit_tasks,
        tasks::list_tasks,
        tasks::get_task,
        tasks::cancel_task,
        tasks::wait_tasks,
        tasks::tasks_delivered,
        groups::create_group,
        groups::list_groups,
        groups::get_group,
        groups::remove_group,
        groups::wait_group,
        jobs::create_job,
        jobs::list_jobs,
        jobs::get_job,
        jobs::renew_job,
        jobs::finish_job,
        jobs::stop_job,
        explain::explain,
        explain::dry_run,
        logs::logs,
        tokens::list_tokens,
        tokens::create_token,
        tokens::revoke_token,
    ),
    components(schemas(
        rest::ApiError,
        rest::ErrorKind,
        rest::Health,
        rest::ClusterStatus,
        rest::AutoscalerStatus,
        rest::AutoscalerPlan,
        rest::AutoscaledNode,
        rest::AutoscalerDecision,
        rest::NodeTypeStatus,
        rest::PlanItem,
        rest::Node,
        rest::NodeEvent,
        rest::NodeMeasured,
        rest::WorkMeasured,
        rest::NodeState,
        rest::Taint,
        rest::TaintsBody,
        rest::LabelsBody,
        rest::LabelKeysBody,
        rest::ResourcesBody,
        rest::Actor,
        rest::ActorState,
        rest::ActorCreate,
        rest::Endpoint,
        rest::EndpointRegister,
        rest::ActorEndpoint,
        rest::TasksWait,
        rest::TasksDelivered,
        rest::TasksMarked,
        rest::TasksEnded,
        rest::Task,
        rest::TaskState,
        rest::TaskSubmit,
        rest::Group,
        rest::GroupState,
        rest::GroupCreate,
        rest::Bundle,
        rest::Job,
        rest::JobState,
        rest::JobCreate,
        rest::JobEnd,
        rest::Lifetime,
        rest::Ownership,
        rest::DryRun,
        rest::Explanation,
        rest::Diagnosis,
        rest::ReasonCount,
        rest::Event,
        rest::ResourceUse,
        rest::PendingItem,
        rest::Demand,
        rest::NodeCounts,
        rest::LogStream,
    )),
    modifiers(&TokenSecurity),
    tags(
        (name = "cluster", description = "Health, metrics, status and this document"),
        (name = "nodes", description = "Machines, their drain and taints"),
        (name = "actors", description = "Long-running processes, restarted on failure"),
        (name = "tasks", description = "Processes run to completion, retried on failure"),
        (name = "placement_groups", description = "Atomic reservations of bundles"),
        (name = "jobs", description = "Drivers' sessions: what they own ends with them"),
        (name = "explain", description = "Why something is where it is, or waits; dry runs"),
        (name = "logs", description = "The output of actors and tasks, from their nodes"),
        (name = "tokens", description = "Who may do what: admin, read and agent tokens"),
        (name = "autoscaler", description = "Node types launched for what waits, idle nodes removed"),
    )
)]
pub(crate) struct ApiDoc;

/// Declares the bearer scheme `token`, requires it on every operation but `/healthz`, and
/// documents the 401 answer there.
struct TokenSecurity;

impl utoipa::Modify for TokenSecurity {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The cluster token, from DATA_DIR/token"))
                    .build(),
            ),
        );
        let unauthorized = ResponseBuilder::new()
            .description("No token, or the wrong one")
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name("ApiError"))))
                    .build(),
            )
            .build();
        for (path, item) in openapi.paths.paths.iter_mut() {
            if path == "/healthz" {
                continue;
            }
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.head,
                &mut item.options,
            ];
            for operation in operations.into_iter().flatten() {
                operation.security =
                    Some(vec![SecurityRequirement::new("token", Vec::<String>::new())]);
                operation
                    .responses
                    .responses
                    .entry("401".to_string())
                    .or_insert_with(|| RefOr::T(unauthorized.clone()));
            }
        }
    }
}

/// The OpenAPI document (for `GET /api/v1/openapi.json`, and for tools that export it).
pub(crate) fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    doc
}

fn openapi_json() -> Bytes {
    match openapi().to_pretty_json() {
        Ok(text) => Bytes::from(text),
        Err(err) => {
            tracing::error!(error = %err, "the OpenAPI document does not serialize");
            Bytes::from_static(b"{}")
        }
    }
}
