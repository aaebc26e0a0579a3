//! `/api/v1/tokens`: list, create, revoke (admin tokens only; see `keyring.rs`). The secrets
//! stay in the head's data directory; the hashes also go to the store, through the owner, so a
//! standby that takes over knows them.

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use berth_api::rest::{ApiError, List, TokenCreate, TokenCreated, TokenInfo};

use super::extract::{created, Failure, JsonBody, PathId};
use super::Api;
use crate::clock::now_ms;
use crate::error::HeadError;
use crate::keyring::KeyringError;

impl From<KeyringError> for Failure {
    fn from(err: KeyringError) -> Failure {
        match err {
            KeyringError::Name(rule) => Failure::invalid(Some("name".into()), rule),
            KeyringError::NotFound(id) => HeadError::NotFound { what: "token", id }.into(),
            KeyringError::Bootstrap(..) => HeadError::Conflict(err.to_string()).into(),
            KeyringError::Write { .. } => HeadError::Unavailable(err.to_string()).into(),
        }
    }
}

/// List the tokens: ID, name, role, creation time; never a secret.
#[utoipa::path(
    get, path = "/api/v1/tokens", tag = "tokens", operation_id = "list_tokens",
    responses(
        (status = 200, description = "Every token", body = List<TokenInfo>),
        (status = 403, description = "Not an admin token", body = ApiError),
    )
)]
pub(crate) async fn list_tokens(State(api): State<Api>) -> Json<List<TokenInfo>> {
    let items = api.keyring.list();
    Json(List { total: items.len(), items, next_cursor: None, forgotten: None })
}

/// Create a token with a role; its secret is in this answer and nowhere else.
#[utoipa::path(
    post, path = "/api/v1/tokens", tag = "tokens", operation_id = "create_token",
    request_body(content = TokenCreate, description = "Its role and a name"),
    responses(
        (status = 201, description = "The token and its secret (shown once)", body = TokenCreated),
        (status = 400, description = "A bad field; `field` names it", body = ApiError),
        (status = 403, description = "Not an admin token", body = ApiError),
        (status = 503, description = "The token file could not be written", body = ApiError),
    )
)]
pub(crate) async fn create_token(
    State(api): State<Api>,
    JsonBody(body): JsonBody<TokenCreate>,
) -> Result<Response, Failure> {
    let (token, secret) = api.keyring.create(body.role, &body.name, now_ms())?;
    api.handle.store_keyring(api.keyring.stored()).await?;
    tracing::info!(token_id = %token.id, role = ?token.role, "token created");
    Ok(created(format!("/api/v1/tokens/{}", token.id), &TokenCreated { token, secret }))
}

/// Revoke a token: every later call with it is refused.
#[utoipa::path(
    delete, path = "/api/v1/tokens/{id}", tag = "tokens", operation_id = "revoke_token",
    params(("id" = String, Path, description = "The token's ID (`tok-3f2a9c1e`)")),
    responses(
        (status = 200, description = "The revoked token", body = TokenInfo),
        (status = 403, description = "Not an admin token", body = ApiError),
        (status = 404, description = "No such token", body = ApiError),
        (status = 409, description = "A first-start token (rotate its file instead)", body = ApiError),
    )
)]
pub(crate) async fn revoke_token(
    State(api): State<Api>,
    PathId(id): PathId,
) -> Result<Json<TokenInfo>, Failure> {
    let token = api.keyring.revoke(&id)?;
    api.handle.store_keyring(api.keyring.stored()).await?;
    tracing::info!(token_id = %token.id, "token revoked");
    Ok(Json(token))
}
