//! Standing by: a head started on a store whose lease another head holds waits instead of
//! failing. Meanwhile it serves `GET /healthz` (`"status": "standby"`, naming the active head
//! while that head's lease is live, by the lease holder's name: machine and a digest, no
//! paths) and answers everything else 503 (gRPC: UNAVAILABLE), so agents and clients given
//! several head addresses move on to the next. It keeps the store mark up to date with what it
//! watches, so it refuses a store that loses writes meanwhile.
//!
//! It tries the lease every fifth of its ttl (at most every second), or when the store said it
//! runs out if that is sooner; once the active head has gone a ttl without renewing it, this
//! head takes it, stops the standby server and starts as the active head on the same socket:
//! connections that arrive in between wait in the socket's backlog rather than being refused.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use berth_api::rest::{ApiError, ErrorKind, Health};
use berth_store::{AnyStore, Lease, Store, StoreError};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::StartError;

/// The header of a standby's answers: who holds the lease.
pub const ACTIVE_HEAD_HEADER: &str = "x-berth-active-head";

/// Takes the store's lease, standing by for as long as another head holds it. Returns the
/// lease and the listener to serve on.
pub(crate) async fn acquire(
    store: &AnyStore,
    holder: &str,
    ttl: Duration,
    listener: TcpListener,
    (tls, settings): (Option<tokio_rustls::TlsAcceptor>, crate::connections::Settings),
    data_dir: &std::path::Path,
) -> Result<(Lease, TcpListener), StartError> {
    let active = match store.acquire_lease(holder, ttl).await {
        Ok(lease) => return Ok((lease, listener)),
        Err(StoreError::LeaseHeld { holder, .. }) => holder,
        Err(err) => return Err(err.into()),
    };
    tracing::warn!(
        active = %active,
        store = %store.location(),
        "standing by: another head holds the store's lease; this one takes over if it stops \
         renewing it"
    );
    let address = listener.local_addr().unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
    let bind_error = |source| StartError::Bind { address, source };
    let std = listener.into_std().map_err(bind_error)?;
    let twin = std.try_clone().map_err(bind_error)?;
    let listener =
        TcpListener::from_std(std).map_err(|source| StartError::Bind { address, source })?;
    let served =
        TcpListener::from_std(twin).map_err(|source| StartError::Bind { address, source })?;
    let (active_tx, active_rx) = watch::channel(active);
    let (stop_tx, stop_rx) = watch::channel(false);
    let server = tokio::spawn(crate::connections::serve(
        served,
        router(active_rx),
        tls,
        settings,
        (None, None),
        stop_rx,
    ));
    let poll = (ttl / 5).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut marked = None;
    // The first wait: the lease was held a moment ago. Later ones end when the store said it
    // runs out (if sooner than a poll), so a takeover does not wait a poll beyond the expiry.
    let mut wait = poll;
    loop {
        tokio::time::sleep(wait).await;
        wait = poll;
        match store.acquire_lease(holder, ttl).await {
            Ok(lease) => {
                tracing::warn!(epoch = %lease.epoch(), "took the store's lease over: starting as the active head");
                stop_tx.send_replace(true);
                if tokio::time::timeout(crate::SHUTDOWN_GRACE, server).await.is_err() {
                    tracing::debug!("the standby server did not stop in time");
                }
                return Ok((lease, listener));
            }
            Err(StoreError::LeaseHeld { holder, remaining, .. }) => {
                wait =
                    (remaining + Duration::from_millis(5)).clamp(Duration::from_millis(20), poll);
                active_tx.send_if_modified(|a| {
                    let changed = *a != holder;
                    *a = holder;
                    changed
                });
                if let Some(generation) = store.generation() {
                    if marked.as_ref() != Some(&generation) {
                        let ids = crate::store_mark::Ids::default();
                        crate::store_mark::write(data_dir, store.location(), &generation, ids);
                        marked = Some(generation);
                    }
                }
            }
            Err(err) if err.is_behind() => {
                stop_tx.send_replace(true);
                return Err(err.into());
            }
            // The store itself may be failing over: keep waiting, naming no active head (its
            // lease may be gone with the store).
            Err(err) => {
                active_tx.send_if_modified(|a| {
                    let changed = !a.is_empty();
                    a.clear();
                    changed
                });
                tracing::warn!(error = %err, "standing by: the store answered an error");
            }
        }
    }
}

/// `/healthz` says "standby"; everything else is 503 naming the active head.
fn router(active: watch::Receiver<String>) -> Router {
    let health = active.clone();
    Router::new()
        .route(
            "/healthz",
            get(move || {
                let active = health.borrow().clone();
                async move {
                    Json(Health {
                        status: "standby".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        active: Some(active).filter(|a| !a.is_empty()),
                    })
                }
            }),
        )
        .fallback(move |request: axum::extract::Request| {
            let active = active.borrow().clone();
            async move { refuse(&request, &active) }
        })
}

fn refuse(request: &axum::extract::Request, active: &str) -> Response {
    let message = if active.is_empty() {
        "this head is a standby, and the store does not answer: no head is known to be active \
         (try the next address)"
            .to_string()
    } else {
        format!("this head is a standby; the active head is {active}: ask it (or the next address)")
    };
    let value = HeaderValue::from_str(active)
        .ok()
        .filter(|_| !active.is_empty())
        .unwrap_or(HeaderValue::from_static("unknown"));
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        // A trailers-only gRPC answer: UNAVAILABLE, so an agent tries its next head.
        let status = tonic::Status::unavailable(message);
        let mut response = status.into_http::<axum::body::Body>();
        response.headers_mut().insert(ACTIVE_HEAD_HEADER, value);
        return response.into_response();
    }
    let body = ApiError { error: ErrorKind::Unavailable, field: None, message };
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    response.headers_mut().insert(ACTIVE_HEAD_HEADER, value);
    response
}
