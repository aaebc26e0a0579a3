//! The REST API's extractors and its one error answer.
//!
//! axum's own extractors answer bad input with plain text; these answer with an [`ApiError`]
//! naming the field (the body's field path, the query parameter or the path parameter).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_api::limits::Limits;
use berth_api::rest::{ApiError, ErrorKind};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::{body_scan, Api};
use crate::error::HeadError;
use crate::view::QueryError;

/// The most bytes a request body may have.
pub(crate) const MAX_BODY_BYTES: usize = 1 << 20;
/// The most bytes a batch's body (`…:batch`) may have.
pub(crate) const MAX_BATCH_BODY_BYTES: usize = 16 << 20;

/// An error answer: a status and an [`ApiError`] body.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: StatusCode,
    pub(crate) body: ApiError,
}

impl Failure {
    /// 400 at `field` (none for the body as a whole).
    pub(crate) fn invalid(field: Option<String>, message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::BAD_REQUEST,
            body: ApiError {
                error: ErrorKind::Invalid,
                field: field.filter(|f| !f.is_empty()),
                message: message.into(),
            },
        }
    }

    /// 403: the caller may not do this.
    pub(crate) fn forbidden(message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::FORBIDDEN,
            body: ApiError { error: ErrorKind::Forbidden, field: None, message: message.into() },
        }
    }

    /// 404 for a route that does not exist.
    pub(crate) fn no_route(method: &str, path: &str) -> Failure {
        Failure {
            status: StatusCode::NOT_FOUND,
            body: ApiError {
                error: ErrorKind::NotFound,
                field: None,
                message: format!(
                    "no route {method} {}; the API is described at GET /api/v1/openapi.json",
                    clip(path)
                ),
            },
        }
    }
}

impl From<HeadError> for Failure {
    fn from(err: HeadError) -> Failure {
        Failure {
            status: StatusCode::from_u16(err.status()).unwrap_or(StatusCode::BAD_REQUEST),
            body: err.body(),
        }
    }
}

impl From<QueryError> for Failure {
    fn from(err: QueryError) -> Failure {
        Failure::invalid(Some(err.field.to_string()), err.message)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

/// At most 200 characters of `text`, for echoing user input in messages.
pub(crate) fn clip(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The field a serde error is about: the path to where it happened, plus the field named in
/// the message for `unknown field`, `missing field` and `duplicate field`.
fn serde_field(path: &serde_path_to_error::Path, message: &str) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut field = String::new();
    for segment in path {
        let name = match segment {
            Segment::Seq { index } => {
                field.push_str(&format!("[{index}]"));
                continue;
            }
            Segment::Map { key } => key.as_str(),
            Segment::Enum { variant } => variant.as_str(),
            // Where serde could not tell (an error before the first key): stop here.
            Segment::Unknown => break,
        };
        if !field.is_empty() {
            field.push('.');
        }
        field.push_str(name);
    }
    for prefix in ["unknown field `", "missing field `", "duplicate field `"] {
        if let Some(rest) = message.strip_prefix(prefix) {
            if let Some((name, _)) = rest.split_once('`') {
                // serde_path_to_error puts an unknown key in the path already.
                if field == name || field.ends_with(&format!(".{name}")) {
                    break;
                }
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(name);
            }
            break;
        }
    }
    (!field.is_empty()).then_some(field)
}

/// The body's bytes, at most [`MAX_BODY_BYTES`] (413 beyond).
async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, Failure> {
    let bytes = any_body_bytes(req, state).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Failure::invalid(None, "the body is empty; send a JSON object"));
    }
    Ok(bytes)
}

/// The body's bytes, empty or not, within the route's limit.
async fn any_body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, Failure> {
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Failure {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                body: ApiError {
                    error: ErrorKind::Invalid,
                    field: None,
                    message: format!(
                        "the body is larger than the most this route accepts ({MAX_BODY_BYTES} \
                         bytes, 1 MiB; {MAX_BATCH_BODY_BYTES} bytes, 16 MiB, for a batch)"
                    ),
                },
            }
        } else {
            Failure::invalid(None, format!("could not read the body: {}", rejection.body_text()))
        }
    })
}

/// Reads one batch item (kept as its JSON text) as `T`, naming the field at fault. The batch's
/// scan ([`parse_json`]) has checked its keys and counts already.
pub(crate) fn parse_item<T: DeserializeOwned>(item: &RawValue) -> Result<T, Failure> {
    parse_text(item.get().as_bytes(), "not valid")
}

/// Parses `bytes` as one JSON value of type `T`, naming the field at fault; first refuses a
/// key given twice or more of something than `limits` allow (see [`body_scan`]).
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8], limits: &Limits) -> Result<T, Failure> {
    let what = "the body is not valid";
    if let Some(refusal) = body_scan::scan(bytes, limits) {
        return Err(Failure::invalid(Some(refusal.path), format!("{what}: {}", refusal.message)));
    }
    parse_text(bytes, what)
}

/// Parses `bytes` as one `T`; an error is `{what}: {serde's message}` at the field at fault.
fn parse_text<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, Failure> {
    // Tracking the path costs about as much as the parse itself, and almost every body is
    // good: parsed without it first, and only a body that fails is parsed again to name the
    // field at fault (the same parser, so it fails the same way).
    if let Ok(value) = serde_json::from_slice::<T>(bytes) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let inner = err.inner().to_string();
        let field = serde_field(err.path(), &inner);
        Failure::invalid(field, format!("{what}: {inner}"))
    })?;
    de.end().map_err(|err| Failure::invalid(None, format!("{what}: {err}")))?;
    Ok(value)
}

/// A JSON body of type `T`. The content type is not checked: any body is parsed as JSON.
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<Api> for JsonBody<T> {
    type Rejection = Failure;

    async fn from_request(req: Request, state: &Api) -> Result<Self, Failure> {
        let bytes = body_bytes(req, state).await?;
        parse_json(&bytes, &state.handle.limits).map(JsonBody)
    }
}

/// A JSON body that may be left out (an empty body is `None`).
pub(crate) struct OptionalJsonBody<T>(pub(crate) Option<T>);

impl<T: DeserializeOwned> FromRequest<Api> for OptionalJsonBody<T> {
    type Rejection = Failure;

    async fn from_request(req: Request, state: &Api) -> Result<Self, Failure> {
        let bytes = any_body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(None));
        }
        parse_json(&bytes, &state.handle.limits).map(|body| OptionalJsonBody(Some(body)))
    }
}

/// A body that must be one JSON object, kept as its text.
pub(crate) struct JsonObjectText(pub(crate) String);

impl FromRequest<Api> for JsonObjectText {
    type Rejection = Failure;

    async fn from_request(req: Request, state: &Api) -> Result<Self, Failure> {
        let bytes = body_bytes(req, state).await?;
        let value: serde_json::Value = parse_json(&bytes, &state.handle.limits)?;
        if !value.is_object() {
            return Err(Failure::invalid(
                None,
                "the body must be a JSON object (a request document: {\"resources\": {...}, ...})",
            ));
        }
        // Valid JSON is valid UTF-8.
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| Failure::invalid(None, "the body is not UTF-8"))?;
        Ok(JsonObjectText(text))
    }
}

/// Query parameters of type `T` (`?state=ALIVE&limit=10`), naming the parameter at fault.
/// Named `Query` so utoipa's axum support documents `T`'s fields as query parameters.
pub(crate) struct Query<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Failure> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de).map(Query).map_err(|err| {
            let inner = err.inner().to_string();
            let field = serde_field(err.path(), &inner);
            Failure::invalid(field, format!("bad query parameter: {inner}"))
        })
    }
}

/// The one path parameter of a route (`{id}`, `{node}`).
pub(crate) struct PathId(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Failure> {
        match axum::extract::Path::<String>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(id)) => Ok(PathId(id)),
            Err(rejection) => Err(Failure::invalid(
                Some("id".into()),
                format!("bad path parameter: {}", rejection.body_text()),
            )),
        }
    }
}

/// 201 with a `Location` header and the object.
pub(crate) fn created<T: serde::Serialize>(location: String, body: &T) -> Response {
    let mut response = json_answer(StatusCode::CREATED, body, ANSWER_BYTES);
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// Room for one created object's JSON (an actor or task is about 700 bytes).
pub(crate) const ANSWER_BYTES: usize = 1024;

/// `body` as a JSON answer, written into a buffer of `capacity` bytes to begin with. axum's
/// `Json` starts from 128 bytes and doubles: three copies for one actor, a dozen for a batch's
/// answer.
pub(crate) fn json_answer<T: serde::Serialize>(
    status: StatusCode,
    body: &T,
    capacity: usize,
) -> Response {
    let mut buf = Vec::with_capacity(capacity);
    match serde_json::to_writer(&mut buf, body) {
        Ok(()) => {
            let json = HeaderValue::from_static("application/json");
            (status, [(header::CONTENT_TYPE, json)], Bytes::from(buf)).into_response()
        }
        // As axum's `Json` answers: our types always serialize, but never panic on it.
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
}

/// The `Idempotency-Key` header of a creation, if given (see `ActorCreate::idempotency_key`).
pub(crate) struct IdempotencyKey(pub(crate) Option<String>);

/// The header's name.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Failure> {
        match parts.headers.get(IDEMPOTENCY_KEY) {
            None => Ok(IdempotencyKey(None)),
            Some(value) => match value.to_str() {
                Ok(text) => Ok(IdempotencyKey(Some(text.to_string()))),
                Err(_) => Err(Failure::invalid(
                    Some("Idempotency-Key".into()),
                    "the header is not visible ASCII",
                )),
            },
        }
    }
}

impl IdempotencyKey {
    /// Puts the header's key into the body's `idempotency_key`; both given must agree.
    pub(crate) fn into_body(
        self,
        field: &mut Option<berth_api::rest::ThinStr>,
    ) -> Result<(), Failure> {
        let Some(header) = self.0 else { return Ok(()) };
        match field {
            Some(body) if body.as_str() != header => Err(Failure::invalid(
                Some("idempotency_key".into()),
                format!(
                    "{body:?} differs from the Idempotency-Key header {header:?}; give one, or \
                     the same in both"
                ),
            )),
            _ => {
                *field = Some(header.as_str().into());
                Ok(())
            }
        }
    }

    /// A batch takes keys per item only.
    pub(crate) fn refuse_for_batch(self) -> Result<(), Failure> {
        match self.0 {
            None => Ok(()),
            Some(_) => Err(Failure::invalid(
                Some("Idempotency-Key".into()),
                "a batch takes no Idempotency-Key header: give each item its own \
                 idempotency_key",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_serde_field_names_unknown_and_missing_fields() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            a: u32,
        }
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Outer {
            inner: Vec<Inner>,
        }
        let field = |text: &str| {
            parse_json::<Outer>(text.as_bytes(), &Limits::default()).unwrap_err().body.field
        };
        assert_eq!(field(r#"{"inner": [{"a": "x"}]}"#).as_deref(), Some("inner[0].a"));
        assert_eq!(field(r#"{"inner": [{"b": 1}]}"#).as_deref(), Some("inner[0].b"));
        assert_eq!(field(r#"{"inner": [{}]}"#).as_deref(), Some("inner[0].a"));
        assert_eq!(field(r#"{}"#).as_deref(), Some("inner"));
        assert_eq!(field(r#"{"inner": []} x"#), None);
        assert_eq!(field(r#"{"inner": [{"a": 1}]} x"#), None);
    }

    #[test]
    fn http_clip_cuts_on_a_char_boundary() {
        let long = "é".repeat(300);
        assert_eq!(clip(&long).chars().count(), 201);
        assert_eq!(clip("short"), "short");
    }
}
