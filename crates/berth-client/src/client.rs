//! The typed client of one head: [`Client`], its calls and their retries.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use berth_api::local::{TOKEN_ENV, TOKEN_FILE};
use berth_api::rest::ApiError;
use reqwest::blocking::{Client as HttpClient, RequestBuilder, Response};
use reqwest::header::AUTHORIZATION;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::address::normalize_address;
use crate::error::{chain, root_cause, tls_cause};
use crate::tls::{http_builder, tls_config};
use crate::{AddressSource, ClientError, SetupError, Token};

/// How long to wait for an answer (calls that wait on purpose add their own wait to it).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// How many times [`Client::create`] sends a creation at most.
pub const CREATE_ATTEMPTS: u32 = 6;

/// A fresh idempotency key: `berth-cli-` and 128 random bits.
fn new_idempotency_key() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("berth-cli-{hex}")
}

/// No body: `client.post(&path, NO_BODY)`.
pub const NO_BODY: Option<&()> = None;
/// No query string.
const NO_QUERY: Option<&()> = None;

/// A blocking client of one head's REST API. Every call decodes a 2xx answer into `T`, and
/// anything else into a [`ClientError`].
pub struct Client {
    http: HttpClient,
    /// The TLS settings of an https:// head, for the clients made beside `http`.
    tls: Option<rustls::ClientConfig>,
    /// `http://HOST:PORT` or `https://HOST:PORT`.
    base: String,
    address: String,
    token: Option<Token>,
    /// For messages only: where the address came from, when an [`Endpoint`](crate::Endpoint) knows.
    pub(crate) address_source: Option<AddressSource>,
    /// For messages only: where a token would have been read.
    pub(crate) token_file: Option<PathBuf>,
}

impl Client {
    /// A client of the head at `address` (`HOST:PORT`; see [`normalize_address`]), presenting
    /// `token` on every call.
    pub fn new(address: &str, token: Option<Token>) -> Result<Client, SetupError> {
        Client::build(address, token, None)
    }

    /// A client of a head serving TLS at `address`, trusting only the CA certificate(s) in
    /// `ca_pem` (PEM).
    pub fn new_tls(
        address: &str,
        token: Option<Token>,
        ca_pem: &[u8],
    ) -> Result<Client, SetupError> {
        let tls = tls_config(ca_pem)?;
        Client::build(address, token, Some(tls))
    }

    fn build(
        address: &str,
        token: Option<Token>,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Client, SetupError> {
        let address = normalize_address(address)
            .map_err(|rule| SetupError::new(format!("address {address:?}: {rule}")))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let http = http_builder(tls.as_ref())
            .timeout(ANSWER_TIMEOUT)
            .build()
            .map_err(|err| SetupError::new(format!("cannot set up the {scheme} client: {err}")))?;
        Ok(Client {
            http,
            tls,
            base: format!("{scheme}://{address}"),
            address,
            token,
            address_source: None,
            token_file: None,
        })
    }

    /// The head's address, `HOST:PORT`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// `GET path` (from the server's root: `/api/v1/nodes`; see [`api_path`](crate::api_path)).
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.read(|| self.call(Method::GET, path, NO_BODY, NO_QUERY, ANSWER_TIMEOUT, None))
    }

    /// Runs a read (a GET, safe to send again) and sends it again when the connection broke
    /// before its answer or the head answered 503 (a head at its connection cap closes a
    /// connection it has no room for; one between two states answers 503), with the waits of
    /// [`Client::create`]. A read that timed out is not sent again: its wait was spent.
    fn read<T>(&self, send: impl Fn() -> Result<T, ClientError>) -> Result<T, ClientError> {
        with_retries(send, |err, _| err.may_retry() && !matches!(err, ClientError::TimedOut { .. }))
    }

    /// `GET path?query`, the query serialized from `query` (`None` fields are left out).
    pub fn get_query<Q, T>(&self, path: &str, query: &Q) -> Result<T, ClientError>
    where
        Q: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        self.read(|| self.call(Method::GET, path, NO_BODY, Some(query), ANSWER_TIMEOUT, None))
    }

    /// `GET path?query` for a call that waits on purpose up to `wait` before answering.
    pub fn get_waiting<Q, T>(&self, path: &str, query: &Q, wait: Duration) -> Result<T, ClientError>
    where
        Q: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        self.call(Method::GET, path, NO_BODY, Some(query), ANSWER_TIMEOUT + wait, None)
    }

    /// `POST path` with `body` as JSON (or no body).
    pub fn post<B, T>(&self, path: &str, body: Option<&B>) -> Result<T, ClientError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        self.call(Method::POST, path, body, NO_QUERY, ANSWER_TIMEOUT, None)
    }

    /// `POST path` of a creation (an actor, a task, a placement group): sent with a fresh
    /// `Idempotency-Key`, and sent again with the same key when it was cut off before its
    /// answer (the connection lost, no answer in time, or the head answered 503 while its
    /// store or its lease moved), up to [`CREATE_ATTEMPTS`] times over about 5 s (waits of
    /// 0.2, 0.4, 0.8, 1.6 and 2 s). The head creates the object once whatever reached it.
    /// Each sending again is told on stderr, with the error that caused it.
    pub fn create<B, T>(&self, path: &str, body: &B) -> Result<T, ClientError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let key = new_idempotency_key();
        let send =
            || self.call(Method::POST, path, Some(body), NO_QUERY, ANSWER_TIMEOUT, Some(&key));
        with_retries(send, |err, attempt| {
            // A head that went away after the first attempt may be restarting.
            let again =
                err.may_retry() || (attempt > 1 && matches!(err, ClientError::Unreachable { .. }));
            if again {
                eprintln!("berth: {err}; sending it again ({attempt}/{CREATE_ATTEMPTS}, same idempotency key)");
            }
            again
        })
    }

    /// `PUT path` with `body` as JSON.
    pub fn put<B, T>(&self, path: &str, body: &B) -> Result<T, ClientError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        self.call(Method::PUT, path, Some(body), NO_QUERY, ANSWER_TIMEOUT, None)
    }

    /// `DELETE path` with `body` as JSON (or no body).
    pub fn delete<B, T>(&self, path: &str, body: Option<&B>) -> Result<T, ClientError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        self.call(Method::DELETE, path, body, NO_QUERY, ANSWER_TIMEOUT, None)
    }

    fn call<B, Q, T>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        query: Option<&Q>,
        timeout: Duration,
        idempotency_key: Option<&str>,
    ) -> Result<T, ClientError>
    where
        B: Serialize + ?Sized,
        Q: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let call = format!("{method} {path}");
        let mut request: RequestBuilder =
            self.http.request(method, format!("{}{path}", self.base)).timeout(timeout);
        if let Some(query) = query {
            request = request.query(query);
        }
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {}", token.secret));
        }
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().map_err(|err| self.send_error(&call, timeout, err))?;
        self.decode(&call, timeout, response)
    }

    /// `GET /api/v1/watch?query`: hands each server-sent event (its `event` name and `data`)
    /// to `on_event` until the stream ends or `on_event` says stop (`false`).
    pub fn watch(
        &self,
        query: &berth_api::rest::WatchQuery,
        on_event: &mut dyn FnMut(&str, &str) -> bool,
    ) -> Result<(), ClientError> {
        use std::io::BufRead;
        let call = "GET /api/v1/watch".to_string();
        // A stream has no answer time; a year stands for "until it ends".
        let timeout = Duration::from_secs(365 * 24 * 3600);
        let mut request =
            self.http.get(format!("{}/api/v1/watch", self.base)).query(query).timeout(timeout);
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {}", token.secret));
        }
        let response = request.send().map_err(|err| self.send_error(&call, timeout, err))?;
        if !response.status().is_success() {
            return self.decode::<serde_json::Value>(&call, timeout, response).map(|_| ());
        }
        let (mut event, mut data) = (String::from("message"), String::new());
        for line in std::io::BufReader::new(response).lines() {
            let Ok(line) = line else { break };
            if line.is_empty() {
                if !data.is_empty() && !on_event(&event, &data) {
                    return Ok(());
                }
                (event, data) = (String::from("message"), String::new());
            } else if let Some(name) = line.strip_prefix("event:") {
                event = name.trim().to_string();
            } else if let Some(text) = line.strip_prefix("data:") {
                data.push_str(text.strip_prefix(' ').unwrap_or(text));
            }
        }
        Ok(())
    }

    /// `GET path?query` whose answer is a stream of bytes: the response once the head answered
    /// 2xx, its body not read yet; an error answer as for every call. With `endless`, nothing
    /// times out once connected (a followed log may be silent for hours); otherwise each read
    /// waits at most the usual answer time, however long the whole answer takes.
    pub fn get_streamed<Q: Serialize + ?Sized>(
        &self,
        path: &str,
        query: &Q,
        endless: bool,
    ) -> Result<Response, ClientError> {
        let call = format!("GET {path}");
        let http = if endless {
            http_builder(self.tls.as_ref()).timeout(None).build().map_err(|source| {
                ClientError::Transport {
                    address: self.address.clone(),
                    call: call.clone(),
                    hint: String::new(),
                    source,
                }
            })?
        } else {
            self.http.clone()
        };
        let mut request = http.get(format!("{}{path}", self.base)).query(query);
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {}", token.secret));
        }
        let response = request.send().map_err(|err| self.send_error(&call, ANSWER_TIMEOUT, err))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        match self.decode::<serde_json::Value>(&call, ANSWER_TIMEOUT, response) {
            Err(err) => Err(err),
            Ok(_) => Err(ClientError::BadAnswer {
                address: self.address.clone(),
                call,
                status,
                detail: "an error status with a success body".into(),
            }),
        }
    }

    fn send_error(&self, call: &str, timeout: Duration, err: reqwest::Error) -> ClientError {
        if let Some(tls) = tls_cause(&err) {
            return ClientError::Untrusted { address: self.address.clone(), reason: tls };
        }
        if err.is_connect() {
            return ClientError::Unreachable {
                address: self.address.clone(),
                origin: self
                    .address_source
                    .as_ref()
                    .map_or_else(|| "the address given".to_string(), ToString::to_string),
                reason: root_cause(&err),
            };
        }
        if err.is_timeout() {
            return ClientError::TimedOut {
                address: self.address.clone(),
                call: call.to_string(),
                seconds: timeout.as_secs(),
            };
        }
        // Plain HTTP sent to a TLS port gets bytes back that do not parse as HTTP.
        let garbled = self.base.starts_with("http://")
            && chain(&err).any(|e| e.downcast_ref::<hyper::Error>().is_some_and(|h| h.is_parse()));
        let hint = if garbled {
            format!(
                "; the answer was not HTTP: if the head serves TLS, reach it at https://{} \
                 with --ca",
                self.address
            )
        } else {
            String::new()
        };
        ClientError::Transport {
            address: self.address.clone(),
            call: call.to_string(),
            hint,
            source: err,
        }
    }

    fn decode<T: DeserializeOwned>(
        &self,
        call: &str,
        timeout: Duration,
        response: Response,
    ) -> Result<T, ClientError> {
        let status = response.status();
        let bytes = response.bytes().map_err(|err| self.send_error(call, timeout, err))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|err| ClientError::BadAnswer {
                address: self.address.clone(),
                call: call.to_string(),
                status: status.as_u16(),
                detail: format!("the body is not the expected JSON ({err})"),
            });
        }
        let Ok(error) = serde_json::from_slice::<ApiError>(&bytes) else {
            let text = String::from_utf8_lossy(&bytes);
            let text: String = text.trim().chars().take(200).collect();
            return Err(ClientError::BadAnswer {
                address: self.address.clone(),
                call: call.to_string(),
                status: status.as_u16(),
                detail: if text.is_empty() { "an empty body".into() } else { text },
            });
        };
        if status == StatusCode::UNAUTHORIZED {
            return Err(ClientError::Unauthorized(self.unauthorized_text(&error)));
        }
        Err(ClientError::Api { call: call.to_string(), status: status.as_u16(), error })
    }

    /// Why a 401 happened, and what to do about it.
    fn unauthorized_text(&self, error: &ApiError) -> String {
        let fix = format!(
            "use the token of the head at {} (its data directory's `{TOKEN_FILE}` file: pass \
             --data-dir, or set ${TOKEN_ENV})",
            self.address
        );
        match (&self.token, &self.token_file) {
            (Some(token), _) => format!(
                "the head at {} refused the token read from {}: is it this head's token? (the \
                 head said: {})",
                self.address, token.source, error.message
            ),
            (None, Some(file)) => format!(
                "the head at {} wants a token and none was sent: ${TOKEN_ENV} is not set and {} \
                 does not exist; {fix}",
                self.address,
                file.display()
            ),
            (None, None) => {
                format!("the head at {} wants a token and none was sent; {fix}", self.address)
            }
        }
    }
}

/// Runs `send` until it succeeds, fails for good, or was sent [`CREATE_ATTEMPTS`] times:
/// `again(err, attempt)` says whether the error of attempt `attempt` (from 1) is worth sending
/// again, after waits of 0.2, 0.4, 0.8, 1.6 and 2 s.
fn with_retries<T>(
    send: impl Fn() -> Result<T, ClientError>,
    again: impl Fn(&ClientError, u32) -> bool,
) -> Result<T, ClientError> {
    let mut delay = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match send() {
            Err(err) if attempt < CREATE_ATTEMPTS && again(&err, attempt) => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(2));
                attempt += 1;
            }
            other => return other,
        }
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("address", &self.address)
            .field("token", &self.token)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TokenSource;
    use berth_api::rest::ErrorKind;

    #[test]
    fn unauthorized_says_where_the_token_came_from() {
        let error =
            ApiError { error: ErrorKind::Unauthorized, field: None, message: "wrong token".into() };
        let token = Token { secret: "s".into(), source: TokenSource::File("/d/token".into()) };
        let client = Client::new("h:1", Some(token)).unwrap();
        let text = client.unauthorized_text(&error);
        assert!(text.contains("refused the token read from /d/token"), "{text}");

        let mut client = Client::new("h:1", None).unwrap();
        client.token_file = Some("/d/token".into());
        let text = client.unauthorized_text(&error);
        assert!(text.contains("$BERTH_TOKEN is not set and /d/token does not exist"), "{text}");
    }

    #[test]
    fn connection_refused_says_no_head() {
        // A port that was just free: nothing listens there.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let client = Client::new(&format!("127.0.0.1:{port}"), None).unwrap();
        let err = client.get::<serde_json::Value>("/healthz").unwrap_err();
        assert!(matches!(err, ClientError::Unreachable { .. }), "{err:?}");
        assert!(err
            .to_string()
            .starts_with(&format!("no head at 127.0.0.1:{port}: is it running?")));
    }
}
