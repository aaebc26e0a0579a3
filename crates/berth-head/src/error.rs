//! The head's one error type for callers (REST, CLI through REST, gRPC).

use berth_api::rest::{ApiError, ErrorKind};
use berth_api::spec::InputError;

/// Why a command was refused. Each maps to one HTTP status and one [`ApiError`] body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// 400: input breaks a rule; nothing changed.
    #[error("{field}: {message}")]
    Invalid {
        /// The field path (empty for the body as a whole).
        field: String,
        /// The rule.
        message: String,
    },
    /// 401: the credential is missing or wrong.
    #[error("{0}")]
    Unauthorized(String),
    /// 404: no such object.
    #[error("{what} {id} not found")]
    NotFound {
        /// `node`, `actor`, `task`, `placement_group`.
        what: &'static str,
        /// The ID asked for.
        id: String,
    },
    /// 409: conflicts with the state.
    #[error("{0}")]
    Conflict(String),
    /// 408: waited as long as asked.
    #[error("{0}")]
    Timeout(String),
    /// 503: the store failed or the head is shutting down; nothing was acknowledged.
    #[error("{0}")]
    Unavailable(String),
}

impl From<InputError> for HeadError {
    /// A request document's or body's error, at its field path.
    fn from(err: InputError) -> HeadError {
        match err {
            InputError::Invalid(invalid) => HeadError::invalid(invalid.field, invalid.message),
            InputError::Read { source, .. } => HeadError::invalid("", source.to_string()),
        }
    }
}

impl HeadError {
    /// An input error at `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> HeadError {
        HeadError::Invalid { field: field.into(), message: message.into() }
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            HeadError::Invalid { .. } => 400,
            HeadError::Unauthorized(_) => 401,
            HeadError::NotFound { .. } => 404,
            HeadError::Conflict(_) => 409,
            HeadError::Timeout(_) => 408,
            HeadError::Unavailable(_) => 503,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> ApiError {
        let (error, field) = match self {
            HeadError::Invalid { field, .. } => (ErrorKind::Invalid, Some(field.clone())),
            HeadError::NotFound { .. } => (ErrorKind::NotFound, None),
            HeadError::Unauthorized(_) => (ErrorKind::Unauthorized, None),
            HeadError::Conflict(_) => (ErrorKind::Conflict, None),
            HeadError::Timeout(_) => (ErrorKind::Timeout, None),
            HeadError::Unavailable(_) => (ErrorKind::Unavailable, None),
        };
        let message = match self {
            HeadError::Invalid { message, .. } => message.clone(),
            other => other.to_string(),
        };
        ApiError { error, field: field.filter(|f| !f.is_empty()), message }
    }
}
