//! What can go wrong: [`SetupError`] before anything is sent, [`ClientError`] when talking to
//! the head.

use berth_api::rest::{ApiError, ErrorKind};
use thiserror::Error;

/// What was given cannot be used, and nothing was sent: an address that is not `HOST:PORT`, an
/// address or token file that cannot be read, a CA file that cannot be read or holds no
/// certificate. The `berth` CLI exits with status 2 for it, as for any bad input.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct SetupError(pub String);

impl SetupError {
    /// A `SetupError` with `message`.
    pub fn new(message: impl Into<String>) -> SetupError {
        SetupError(message.into())
    }
}

/// The head could not be reached, or answered with an error. The `berth` CLI exits with
/// status 1 for it.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Nothing listens at the address (connection refused, unknown host, no route).
    #[error(
        "no head at {address}: is it running? start one with `berth up` or `berth start --head`\n  \
         ({origin}; {reason})"
    )]
    Unreachable {
        /// The address tried.
        address: String,
        /// Where the address came from, in words.
        origin: String,
        /// What the operating system said, shortly.
        reason: String,
    },
    /// The server at the address could not prove it is the head: its certificate does not
    /// chain to the CA given (or TLS failed otherwise).
    #[error(
        "the server at {address} could not prove it is the head: {reason}\n  (is --ca the \
         CA that signed the head's --tls-cert, and the address one of the certificate's names?)"
    )]
    Untrusted {
        /// The address.
        address: String,
        /// What TLS reported.
        reason: String,
    },
    /// The head took the connection but did not answer in time.
    #[error("the head at {address} did not answer {call} within {seconds} s")]
    TimedOut {
        /// The address.
        address: String,
        /// `GET /api/v1/...`.
        call: String,
        /// The wait.
        seconds: u64,
    },
    /// 401: no token, or not the head's.
    #[error("{0}")]
    Unauthorized(String),
    /// Any other error answer (400, 404, 408, 409, 503).
    #[error("{}", api_error_text(*.status, .error))]
    Api {
        /// `POST /api/v1/actors`.
        call: String,
        /// The HTTP status.
        status: u16,
        /// The head's error body.
        error: ApiError,
    },
    /// An answer that is not what a Berth head sends (another server on that port?).
    #[error(
        "unexpected answer from {address} to {call} ({status}): {detail}; is it a Berth head?"
    )]
    BadAnswer {
        /// The address.
        address: String,
        /// The call.
        call: String,
        /// The HTTP status.
        status: u16,
        /// What was wrong with it.
        detail: String,
    },
    /// Anything else the HTTP client reports (the connection broke mid-answer, ...).
    #[error("cannot talk to the head at {address} ({call}){hint}")]
    Transport {
        /// The address.
        address: String,
        /// The call.
        call: String,
        /// What the user may try, or empty.
        hint: String,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
}

impl ClientError {
    /// Whether a request may have been cut off, or met a head between two states (its store
    /// away, its lease moving), so that sending it again may succeed: no answer, a broken
    /// connection, or 503.
    pub fn may_retry(&self) -> bool {
        match self {
            ClientError::TimedOut { .. } | ClientError::Transport { .. } => true,
            ClientError::Api { status, .. } => *status == 503,
            _ => false,
        }
    }
}

/// `the head answered 400 (invalid): resources.GPU: 2.5 is not allowed …`.
fn api_error_text(status: u16, error: &ApiError) -> String {
    let kind = match error.error {
        ErrorKind::Invalid => "invalid",
        ErrorKind::Unauthorized => "unauthorized",
        ErrorKind::Forbidden => "forbidden",
        ErrorKind::NotFound => "not found",
        ErrorKind::Conflict => "conflict",
        ErrorKind::Timeout => "timed out",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::Expired => "expired",
        ErrorKind::TooManyRequests => "too many requests",
    };
    match &error.field {
        Some(field) if !field.is_empty() => {
            format!("the head answered {status} ({kind}): {field}: {}", error.message)
        }
        _ => format!("the head answered {status} ({kind}): {}", error.message),
    }
}

/// `err` and its sources; an `io::Error`'s inner error counts as its source (std skips it).
pub(crate) fn chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| match e.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
        None => e.source(),
    })
}

/// What rustls reported, when TLS is why `err` happened.
pub(crate) fn tls_cause(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    chain(err).find_map(|e| e.downcast_ref::<rustls::Error>()).map(ToString::to_string)
}

/// The innermost cause of `err`, which is what says "Connection refused".
pub(crate) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AddressSource;
    use berth_api::rest::{ApiError, ErrorKind};

    #[test]
    fn error_texts() {
        let invalid = ApiError {
            error: ErrorKind::Invalid,
            field: Some("resources.GPU".into()),
            message: "2.5 is not allowed".into(),
        };
        let err =
            ClientError::Api { call: "POST /api/v1/actors".into(), status: 400, error: invalid };
        assert_eq!(
            err.to_string(),
            "the head answered 400 (invalid): resources.GPU: 2.5 is not allowed"
        );
        let missing = ApiError {
            error: ErrorKind::NotFound,
            field: None,
            message: "no actor actor-9".into(),
        };
        let err = ClientError::Api { call: "GET x".into(), status: 404, error: missing };
        assert_eq!(err.to_string(), "the head answered 404 (not found): no actor actor-9");

        let unreachable = ClientError::Unreachable {
            address: "127.0.0.1:8780".into(),
            origin: AddressSource::Default.to_string(),
            reason: "Connection refused (os error 111)".into(),
        };
        let text = unreachable.to_string();
        assert!(
            text.starts_with(
                "no head at 127.0.0.1:8780: is it running? start one with `berth up` or `berth \
                 start --head`"
            ),
            "{text}"
        );
    }
}
