//! The dashboard (issue 10): a web page for the cluster, served by the head at `/` on the
//! REST port, rendered on the server.
//!
//! Layout:
//! - `GET /`: the page shell. Public and data-free: a top nav, a form that asks for the cluster
//!   token once (kept in the browser's `sessionStorage`), an alert region, and `<main>`.
//! - `GET /ui/assets/…`: htmx (vendored from npm, `assets/htmx.min.js`), the page's script and
//!   its style sheet, compiled into the binary, cached for a year (their URLs carry a hash of
//!   their bytes, so a new build is a new URL).
//! - `/ui/…`: HTML fragments that htmx swaps into `<main>`: `overview`, `nodes` (with taint
//!   and drain actions), `actors`, `tasks`, `groups` (filterable lists) and one detail page per
//!   actor, task and group. Every one needs the token (`Authorization: Bearer`, added to every
//!   htmx request by `assets/dashboard.js`) and answers errors as an HTML fragment that the
//!   script shows in the alert region: 401 asks for the token again.
//!
//! Key decisions, and why:
//! - askama templates (`templates/dashboard/`) are compiled into the binary and escape every
//!   value; URLs built from IDs go through [`format::segment`]. Nothing is inserted as raw HTML
//!   but a template rendered here.
//! - No inline script or style anywhere, so the page runs under a strict Content Security
//!   Policy (`script-src 'self'`); htmx runs with `allowEval` off (no `hx-on`, no trigger
//!   filters: the script pauses polls itself). Bars are `<meter>` elements, not inline widths.
//! - Live without reloading: regions marked `.live` look again when the cluster changed (the
//!   script reads the head's change stream, `GET /api/v1/watch?listing=false`, and fires
//!   `berth:changed` on them, at most every 250 ms), or every 2 s while the stream is down; a
//!   look is skipped while the person edits inside its region, so typing a taint is never
//!   wiped out. Pages that show measured use (a node's, a running actor's or task's) also
//!   look every 5 s: measurements change with every heartbeat, the cluster need not.
//! - Reads come from the published [`View`](crate::view::View); taints and drains call the
//!   [`HeadHandle`] in-process, exactly as the REST API does, and render the head's answer.

mod format;
mod nodes;
mod overview;
pub(crate) mod samples;
mod svg;
#[cfg(test)]
mod tests;
mod work;

use askama::Template;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::error::HeadError;
use crate::handle::HeadHandle;
use crate::keyring::{Keyring, Refusal};
use crate::view::QueryError;

/// The largest form body the dashboard takes (a taint is a few hundred bytes at most).
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The Content Security Policy of every dashboard answer: only this origin's scripts, styles
/// and requests; no inline code, no frames, no plugins.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// What the data routes share.
#[derive(Clone)]
pub(crate) struct Ui {
    handle: HeadHandle,
    /// The last hour of the cluster, for the overview's charts.
    samples: samples::Samples,
}

/// The dashboard's routes: `/`, `/ui/assets/{file}` (both public) and the data fragments
/// under `/ui/` (token required). No fallback: this router is merged into the REST router,
/// whose fallback answers unknown paths.
pub(crate) fn router(handle: HeadHandle, keyring: Keyring, samples: samples::Samples) -> Router {
    let data = Router::new()
        .route("/ui/overview", get(overview::overview))
        .route("/ui/nodes", get(nodes::page))
        .route("/ui/nodes/table", get(nodes::table))
        .route("/ui/nodes/{node}/taints", post(nodes::add_taint).delete(nodes::remove_taint))
        .route("/ui/nodes/{node}", get(nodes::detail))
        .route("/ui/nodes/{node}/drain", post(nodes::drain))
        .route("/ui/nodes/{node}/undrain", post(nodes::undrain))
        .route("/ui/actors", get(work::actors_page))
        .route("/ui/actors/rows", get(work::actor_rows))
        .route("/ui/actors/{id}", get(work::actor_detail))
        .route("/ui/actors/{id}/kill", post(work::kill_actor))
        .route("/ui/tasks", get(work::tasks_page))
        .route("/ui/tasks/rows", get(work::task_rows))
        .route("/ui/tasks/{id}", get(work::task_detail))
        .route("/ui/tasks/{id}/cancel", post(work::cancel_task))
        .route("/ui/groups", get(work::groups_page))
        .route("/ui/groups/rows", get(work::group_rows))
        .route("/ui/groups/{id}", get(work::group_detail))
        .route("/ui/groups/{id}/remove", post(work::remove_group))
        .route("/ui/jobs", get(work::jobs_page))
        .route("/ui/jobs/rows", get(work::job_rows))
        .route("/ui/jobs/{id}", get(work::job_detail))
        .route("/ui/jobs/{id}/stop", post(work::stop_job))
        .route_layer(middleware::from_fn_with_state(keyring, require_token))
        .with_state(Ui { handle, samples });
    Router::new()
        .route("/", get(shell))
        .route("/ui/assets/{file}", get(asset))
        .merge(data)
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(middleware::from_fn(security_headers))
}

// ---------------------------------------------------------------------------------------------
// The shell and the assets.

/// The page shell: no cluster data, so it needs no token.
#[derive(Template)]
#[template(path = "dashboard/shell.html")]
struct Shell {
    /// Appended to the asset URLs (`?v=`): changes whenever an asset does.
    version: String,
}

async fn shell() -> Response {
    let shell = Shell { version: format!("{:016x}", ASSETS_VERSION) };
    let mut response = render(&shell);
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

const HTMX: &str = include_str!("../assets/htmx.min.js");
const SCRIPT: &str = include_str!("../assets/dashboard.js");
const STYLE: &str = include_str!("../assets/dashboard.css");
const ICON: &str = include_str!("../assets/favicon.svg");

/// A hash of every asset's bytes (FNV-1a), computed at compile time.
const ASSETS_VERSION: u64 = {
    let mut hash = 0xcbf2_9ce4_8422_2325;
    hash = fnv1a(HTMX.as_bytes(), hash);
    hash = fnv1a(SCRIPT.as_bytes(), hash);
    hash = fnv1a(STYLE.as_bytes(), hash);
    fnv1a(ICON.as_bytes(), hash)
};

const fn fnv1a(bytes: &[u8], mut hash: u64) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// An embedded asset, cached for a year (its URL changes when it does).
async fn asset(Path(file): Path<String>) -> Response {
    let (body, content_type) = match file.as_str() {
        "htmx.min.js" => (HTMX, "text/javascript; charset=utf-8"),
        "dashboard.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "dashboard.css" => (STYLE, "text/css; charset=utf-8"),
        "favicon.svg" => (ICON, "image/svg+xml"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        body,
    )
        .into_response()
}

/// Headers on every dashboard answer: the CSP, no MIME sniffing, no referrer.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

// ---------------------------------------------------------------------------------------------
// The token check and errors.

/// 401 with an error fragment unless the request carries a token the head knows; 403 when
/// its role may not do this (the REST API's rule: a read token views, an admin token edits).
async fn require_token(State(keyring): State<Keyring>, req: Request, next: Next) -> Response {
    let presented = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let message = match keyring.check(presented) {
        Ok(role) => match crate::http::gate::forbidden(role, req.method(), req.uri().path()) {
            None => {
                // The pages show actions disabled for a token that may not take them.
                let mut req = req;
                req.extensions_mut().insert(role);
                return next.run(req).await;
            }
            Some(message) => {
                return UiError {
                    status: StatusCode::FORBIDDEN,
                    title: "Not allowed with this token",
                    field: None,
                    message,
                }
                .into_response();
            }
        },
        Err(Refusal::Unknown) => {
            "the head does not know this token (wrong, or revoked); the admin token is in \
             DATA_DIR/token (default ~/.berth/token)"
        }
        Err(Refusal::Missing) => {
            "no token was sent; the admin token is in DATA_DIR/token (default ~/.berth/token)"
        }
    };
    let mut response = UiError {
        status: StatusCode::UNAUTHORIZED,
        title: "Token refused — enter it again",
        field: None,
        message: message.to_string(),
    }
    .into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// An error, answered as a fragment for the page's alert region.
#[derive(Debug)]
pub(crate) struct UiError {
    status: StatusCode,
    /// What happened, in a few words.
    title: &'static str,
    /// The field at fault (`taint`, a taint key, `state`), when one is.
    field: Option<String>,
    /// The rule broken, or the cause.
    message: String,
}

impl UiError {
    /// 400: input that breaks a rule; nothing changed.
    fn invalid(field: impl Into<String>, message: impl Into<String>) -> UiError {
        UiError {
            status: StatusCode::BAD_REQUEST,
            title: "Refused",
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// 404: no such actor, task, group or node.
    fn not_found(what: &'static str, id: &str) -> UiError {
        HeadError::NotFound { what, id: id.to_string() }.into()
    }
}

impl From<HeadError> for UiError {
    fn from(err: HeadError) -> UiError {
        let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::BAD_REQUEST);
        let title = match &err {
            HeadError::Invalid { .. } => "Refused",
            HeadError::NotFound { .. } => "Not found",
            HeadError::Unauthorized(_) => "Not allowed",
            HeadError::Conflict(_) => "Not possible now",
            HeadError::Timeout(_) => "Timed out",
            HeadError::Unavailable(_) => "The head could not make the change durable",
        };
        let body = err.body();
        UiError { status, title, field: body.field, message: body.message }
    }
}

impl From<QueryError> for UiError {
    fn from(err: QueryError) -> UiError {
        UiError::invalid(err.field, err.message)
    }
}

/// The error fragment.
#[derive(Template)]
#[template(path = "dashboard/error.html")]
struct ErrorFragment<'a> {
    title: &'a str,
    field: Option<&'a str>,
    message: &'a str,
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let fragment = ErrorFragment {
            title: self.title,
            field: self.field.as_deref().filter(|f| !f.is_empty()),
            message: &self.message,
        };
        let mut response = render(&fragment);
        *response.status_mut() = self.status;
        response
    }
}

/// A template as an HTML answer that no cache keeps (it holds cluster data); a template that
/// fails to render (a bug) is a plain 500.
fn render(template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => {
            let mut response = Html(html).into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(err) => {
            tracing::error!(error = %err, "a dashboard template failed to render");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page could not be rendered").into_response()
        }
    }
}

/// The role of the request's token (the token check puts it there); read-only when absent.
fn is_admin(role: Option<&axum::Extension<berth_api::rest::Role>>) -> bool {
    matches!(role, Some(axum::Extension(berth_api::rest::Role::Admin)))
}

/// A path parameter, or a 400 fragment when it is not valid percent-encoded UTF-8.
fn path_param(
    param: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<String, UiError> {
    param.map(|Path(p)| p).map_err(|e| UiError::invalid("path", e.body_text()))
}
