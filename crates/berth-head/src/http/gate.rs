//! The two layers every REST request passes: the request metrics (outermost) and the token
//! check (on matched routes).
//!
//! Written as tower layers rather than with `axum::middleware::from_fn`: `from_fn` clones the
//! inner service and boxes two futures for every request, and with two such layers that was
//! about a tenth of the HTTP layer's time in `berth bench api`'s single creations (`perf`).
//! These call the inner service in place and wrap its future without an allocation.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::rest::{ApiError, ErrorKind, Role};
use futures::future::{Either, Ready};
use tower::{Layer, Service};

use super::caller::{self, Caller};
use crate::keyring::{Keyring, Refusal};
use crate::metrics::Metrics;
use crate::work_keys::WorkKeys;

/// Records method, route template, status and latency of every answer.
#[derive(Clone)]
pub(crate) struct RecordLayer {
    metrics: Arc<Metrics>,
}

impl RecordLayer {
    pub(crate) fn new(metrics: Arc<Metrics>) -> RecordLayer {
        RecordLayer { metrics }
    }
}

impl<S> Layer<S> for RecordLayer {
    type Service = Record<S>;

    fn layer(&self, inner: S) -> Record<S> {
        Record { inner, metrics: self.metrics.clone() }
    }
}

/// [`RecordLayer`]'s service.
#[derive(Clone)]
pub(crate) struct Record<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> Service<Request> for Record<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Recorded<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let method = method_label(req.method());
        let route = req.extensions().get::<MatchedPath>().cloned();
        Recorded {
            inner: self.inner.call(req),
            metrics: Some(self.metrics.clone()),
            method,
            route,
            start: Instant::now(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner answer, recorded once it is ready.
    pub(crate) struct Recorded<F> {
        #[pin]
        inner: F,
        // Taken when the answer is recorded.
        metrics: Option<Arc<Metrics>>,
        method: &'static str,
        route: Option<MatchedPath>,
        start: Instant,
    }
}

impl<F> Future for Recorded<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(response) = std::task::ready!(this.inner.poll(cx));
        if let Some(metrics) = this.metrics.take() {
            let route = this.route.as_ref().map(MatchedPath::as_str);
            // axum names a nested router's internal fallback route `…__private__…`.
            let route = route.filter(|p| !p.contains("__private__")).unwrap_or("unmatched");
            let seconds = this.start.elapsed().as_secs_f64();
            metrics.http(this.method, route, response.status().as_u16(), seconds);
        }
        Poll::Ready(Ok(response))
    }
}

/// A method as a metric label: the standard ones, else `OTHER` (clients choose methods).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// 401 unless the request carries a token the head knows or a work credential; 403 when its
/// role (or a work credential) may not do this. Puts the [`Caller`] in the request's
/// extensions for the handlers.
#[derive(Clone)]
pub(crate) struct TokenLayer {
    keyring: Keyring,
    work_keys: Arc<WorkKeys>,
    dry_runs: Arc<DryRunRates>,
}

impl TokenLayer {
    pub(crate) fn new(keyring: Keyring, work_keys: Arc<WorkKeys>) -> TokenLayer {
        TokenLayer { keyring, work_keys, dry_runs: Arc::default() }
    }
}

impl<S> Layer<S> for TokenLayer {
    type Service = TokenCheck<S>;

    fn layer(&self, inner: S) -> TokenCheck<S> {
        TokenCheck {
            inner,
            keyring: self.keyring.clone(),
            work_keys: self.work_keys.clone(),
            dry_runs: self.dry_runs.clone(),
        }
    }
}

/// [`TokenLayer`]'s service.
#[derive(Clone)]
pub(crate) struct TokenCheck<S> {
    inner: S,
    keyring: Keyring,
    work_keys: Arc<WorkKeys>,
    dry_runs: Arc<DryRunRates>,
}

impl<S> Service<Request> for TokenCheck<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        match refusal(&self.keyring, &self.work_keys, &self.dry_runs, &mut req) {
            None => Either::Left(self.inner.call(req)),
            Some(answer) => Either::Right(futures::future::ready(Ok(answer))),
        }
    }
}

/// The answer to a request its token does not allow, if it does not; else the request's
/// [`Caller`] goes into its extensions.
fn refusal(
    keyring: &Keyring,
    work_keys: &WorkKeys,
    dry_runs: &DryRunRates,
    req: &mut Request,
) -> Option<Response> {
    // An actor's process registers with its work key, which the handler checks.
    if req.method() == Method::PUT && is_endpoint_path(req.uri().path()) {
        return None;
    }
    let presented = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Some((work_id, key)) = presented.and_then(bearer).and_then(caller::work_credential) {
        if !work_keys.verify(work_id, key) {
            return Some(unauthorized("this work credential's key is not its work's key"));
        }
        if let Some(message) = caller::work_forbidden(req.method(), req.uri().path()) {
            let body = ApiError { error: ErrorKind::Forbidden, field: None, message };
            return Some((StatusCode::FORBIDDEN, Json(body)).into_response());
        }
        let caller = Caller::Work(Arc::from(work_id));
        req.extensions_mut().insert(caller);
        return None;
    }
    let refused = match keyring.check(presented) {
        Ok(Role::Read) if is_dry_run(req.method(), req.uri().path()) => {
            let wait = dry_runs.take(presented.unwrap_or_default())?;
            let seconds = wait.as_secs_f64();
            let body = ApiError {
                error: ErrorKind::TooManyRequests,
                field: None,
                message: format!(
                    "a read token may run {DRY_RUNS_PER_SECOND} dry runs a second ({DRY_RUN_BURST} \
                     at once); try again in {seconds:.1} s, or use an admin token"
                ),
            };
            let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
            let after = HeaderValue::from(wait.as_secs_f64().ceil().max(1.0) as u64);
            response.headers_mut().insert(header::RETRY_AFTER, after);
            return Some(response);
        }
        Ok(role) => {
            let Some(message) = forbidden(role, req.method(), req.uri().path()) else {
                req.extensions_mut().insert(Caller::Token(role));
                return None;
            };
            let body = ApiError { error: ErrorKind::Forbidden, field: None, message };
            return Some((StatusCode::FORBIDDEN, Json(body)).into_response());
        }
        Err(Refusal::Missing) => "no token given",
        Err(Refusal::Unknown) => "the head does not know this token (wrong, or revoked)",
    };
    Some(unauthorized(refused))
}

/// The secret of an `Authorization` header's value (`Bearer <secret>`).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, secret) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| secret.trim())
}

/// 401, saying why and how to authenticate.
fn unauthorized(refused: &str) -> Response {
    let body = ApiError {
        error: ErrorKind::Unauthorized,
        field: None,
        message: format!(
            "{refused}: send the header `Authorization: Bearer <token>`; the admin token is in \
             DATA_DIR/token (default ~/.berth/token, or $BERTH_TOKEN)"
        ),
    };
    let mut response = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// A read token's dry runs a second, on average.
pub(crate) const DRY_RUNS_PER_SECOND: u32 = 10;
/// How many it may run at once before the rate applies.
pub(crate) const DRY_RUN_BURST: u32 = 20;

/// A dry run (`POST /api/v1/explain`, `/api/v1/autoscaler/plan`): it costs the owner what a
/// creation does, and a read token may run it, so its rate is bounded per token.
fn is_dry_run(method: &Method, path: &str) -> bool {
    *method == Method::POST && matches!(path, "/api/v1/explain" | "/api/v1/autoscaler/plan")
}

/// Per read token, a bucket of [`DRY_RUN_BURST`] dry runs refilled at
/// [`DRY_RUNS_PER_SECOND`]. Keyed by a digest of the token (never the secret itself); only
/// tokens the keyring knows get a bucket, so the map is as small as the keyring.
#[derive(Debug, Default)]
pub(crate) struct DryRunRates {
    buckets: std::sync::Mutex<std::collections::HashMap<[u8; 32], (f64, std::time::Instant)>>,
}

impl DryRunRates {
    /// Takes one dry run from `presented`'s bucket; `Some(wait)` when it is empty.
    fn take(&self, presented: &str) -> Option<std::time::Duration> {
        self.take_at(presented, std::time::Instant::now())
    }

    fn take_at(&self, presented: &str, now: std::time::Instant) -> Option<std::time::Duration> {
        use sha2::Digest;
        let key: [u8; 32] = sha2::Sha256::digest(presented.as_bytes()).into();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, at) = buckets.entry(key).or_insert((f64::from(DRY_RUN_BURST), now));
        let rate = f64::from(DRY_RUNS_PER_SECOND);
        *tokens =
            (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(f64::from(DRY_RUN_BURST));
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return None;
        }
        Some(std::time::Duration::from_secs_f64((1.0 - *tokens) / rate))
    }
}

/// `/api/v1/actors/{id}/endpoint`.
fn is_endpoint_path(path: &str) -> bool {
    path.strip_prefix("/api/v1/actors/")
        .and_then(|rest| rest.strip_suffix("/endpoint"))
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// What `role` may not do with `method` on `path`, if anything: agent tokens are for the agent
/// protocol only; read tokens may read (GET, and dry runs, which change nothing) but neither
/// change anything nor see the tokens.
pub(crate) fn forbidden(role: Role, method: &Method, path: &str) -> Option<String> {
    match role {
        Role::Admin => None,
        Role::Agent => Some(
            "an agent token is for the agent protocol only: use an admin or read token (the \
             CLI's is DATA_DIR/token)"
                .to_string(),
        ),
        Role::Read if path.starts_with("/api/v1/tokens") => {
            Some("a read-only token cannot see or change tokens: it needs an admin token".into())
        }
        Role::Read if path.starts_with("/api/v1/actors/") && path.ends_with("/endpoint") => {
            Some("a read-only token cannot see an actor's work key: it needs an admin token".into())
        }
        Role::Read if *method == Method::GET || *method == Method::HEAD => None,
        Role::Read if *method == Method::POST && path == "/api/v1/tasks:wait" => None,
        Role::Read if *method == Method::POST && path == "/api/v1/explain" => None,
        Role::Read if *method == Method::POST && path == "/api/v1/autoscaler/plan" => None,
        Role::Read => {
            Some(format!("a read-only token cannot {method} {path}: it needs an admin token"))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_read_tokens_dry_runs_are_bounded_per_token() {
        let rates = DryRunRates::default();
        let start = Instant::now();
        for _ in 0..DRY_RUN_BURST {
            assert_eq!(rates.take_at("a", start), None);
        }
        let wait = rates.take_at("a", start).expect("the burst is spent");
        assert_eq!(wait, Duration::from_millis(100), "one more in 1/10 s");
        assert_eq!(rates.take_at("b", start), None, "another token has its own bucket");
        assert_eq!(rates.take_at("a", start + Duration::from_millis(100)), None, "refilled");
        assert!(rates.take_at("a", start + Duration::from_millis(100)).is_some());
    }
}
