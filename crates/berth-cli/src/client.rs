//! The commands that talk to a running head over its REST API, and the small typed client they
//! share.
//!
//! Layout: this module finds the head ([`Endpoint::resolve`]: address, token, data directory)
//! and talks to it ([`Client`]: `get`, `post`, `delete`, each decoding the answer into a
//! `berth_api::rest` type, or the head's [`ApiError`] into a [`ClientError`]). Each command
//! group has its own module: [`status`], [`list`], [`get`], [`explain`] (the live modes of
//! `berth explain`), [`taint`], [`actor`], [`task`], [`pg`] and [`kill`]. Flag parsing shared
//! by them is in `flags`, printing in `view`.
//!
//! Where the head is, in order (the first that gives an answer wins):
//! - data directory: `--data-dir`, `$BERTH_DATA_DIR`, `$HOME/.berth`, `./.berth` (as
//!   [`berth_api::local::default_data_dir`]);
//! - address: `--address`, `$BERTH_ADDRESS`, the `head-address` file the running head wrote in
//!   the data directory, `127.0.0.1:8780`;
//! - token: `$BERTH_TOKEN`, the data directory's `token` file, or none (only `GET /healthz`
//!   answers without one).
//!
//! The process environment is read once, into an [`Environment`], so the resolution order is
//! tested with explicit values instead of a mutated process environment.
//!
//! Exit statuses: bad command-line input caught here ([`BadInput`], or an unreadable `--file`)
//! is 2; a head that cannot be reached or answers an error ([`ClientError`]) is 1.

pub mod actor;
pub mod autoscaler;
pub mod drain;
pub mod explain;
mod flags;
pub mod get;
pub mod kill;
pub mod label;
pub mod list;
pub mod logs;
pub mod node;
pub mod pg;
pub mod status;
pub mod taint;
pub mod task;
pub mod token;
mod view;
pub mod watch;

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use berth_api::local::{
    ADDRESS_ENV, ADDRESS_FILE, DATA_DIR_ENV, DEFAULT_PORT, TOKEN_ENV, TOKEN_FILE,
};
use berth_api::rest::{ApiError, ErrorKind, API_PREFIX};
use clap::{Args, ValueEnum};
use reqwest::blocking::{Client as HttpClient, RequestBuilder, Response};
use reqwest::header::AUTHORIZATION;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

/// How long to wait for a connection to the head.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for an answer (calls that wait on purpose add their own wait to it).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Flags every command that talks to a head has.

/// Where the head is: `--address` and `--data-dir`.
#[derive(Clone, Debug, Default, Args)]
pub struct HeadArgs {
    /// The head's address, HOST:PORT, or https://HOST:PORT for a head serving TLS (then
    /// --ca is needed). Several, comma-separated, for a head with standbys: the first whose
    /// head is active is used.
    ///
    /// Default: $BERTH_ADDRESS, else the address the running head wrote in
    /// DATA_DIR/head-address, else 127.0.0.1:8780. A port-less HOST gets port 8780.
    #[arg(long, value_name = "HOST:PORT", global = true)]
    pub address: Option<String>,

    /// The CA certificate (PEM) that signed the head's certificate, for an https:// head: the
    /// CLI trusts that CA and no other [default: $BERTH_CA].
    #[arg(long, value_name = "FILE", global = true, env = "BERTH_CA")]
    pub ca: Option<PathBuf>,

    /// The data directory, where the cluster token (`token`) and the running head's address
    /// (`head-address`) are read.
    ///
    /// Default: $BERTH_DATA_DIR, else ~/.berth. $BERTH_TOKEN, when set, wins over the token
    /// file.
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
}

/// Output formats of the commands that talk to a head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Tables and short lines for people.
    #[default]
    Table,
    /// The head's answer as JSON (pretty-printed), for scripts.
    Json,
}

/// `--output`, for the commands that have no other flag of that name.
#[derive(Clone, Debug, Default, Args)]
pub struct OutputArgs {
    /// Output format: `table` for people, `json` (the head's answer as it is) for scripts.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

// ---------------------------------------------------------------------------------------------
// Errors.

/// Bad command-line input, caught before anything is sent: exit status 2.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct BadInput(pub String);

impl BadInput {
    /// A `BadInput` with `message`.
    pub fn new(message: impl Into<String>) -> BadInput {
        BadInput(message.into())
    }
}

/// The head could not be reached, or answered with an error: exit status 1.
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

// ---------------------------------------------------------------------------------------------
// Finding the head.

/// The environment variables the resolution reads, captured once.
#[derive(Clone, Debug, Default)]
pub struct Environment {
    /// `$BERTH_DATA_DIR`.
    pub data_dir: Option<OsString>,
    /// `$HOME`.
    pub home: Option<OsString>,
    /// `$BERTH_ADDRESS`.
    pub address: Option<String>,
    /// `$BERTH_TOKEN`.
    pub token: Option<String>,
}

impl Environment {
    /// The process environment. Empty values count as unset.
    pub fn from_process() -> Environment {
        let os = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let text = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Environment {
            data_dir: os(DATA_DIR_ENV),
            home: os("HOME"),
            address: text(ADDRESS_ENV),
            token: text(TOKEN_ENV),
        }
    }

    /// The default data directory: `$BERTH_DATA_DIR`, else `$HOME/.berth`, else `./.berth`
    /// (the rule of [`berth_api::local::default_data_dir`], on these values).
    pub fn default_data_dir(&self) -> PathBuf {
        if let Some(dir) = self.data_dir.as_ref().filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        match self.home.as_ref().filter(|h| !h.is_empty()) {
            Some(home) => Path::new(home).join(".berth"),
            None => PathBuf::from(".berth"),
        }
    }
}

/// Where the address came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddressSource {
    /// `--address`.
    Flag,
    /// `$BERTH_ADDRESS`.
    Env,
    /// The `head-address` file the running head wrote.
    File(PathBuf),
    /// None of those: the default.
    Default,
}

impl fmt::Display for AddressSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressSource::Flag => f.write_str("address from --address"),
            AddressSource::Env => write!(f, "address from ${ADDRESS_ENV}"),
            AddressSource::File(path) => write!(f, "address from {}", path.display()),
            AddressSource::Default => write!(
                f,
                "the default address: no --address, no ${ADDRESS_ENV}, no head-address file in \
                 the data directory"
            ),
        }
    }
}

/// Where the token came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// `$BERTH_TOKEN`.
    Env,
    /// A token file.
    File(PathBuf),
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::Env => write!(f, "${TOKEN_ENV}"),
            TokenSource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The cluster token and where it was read.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The token text.
    pub secret: String,
    /// Where it was read.
    pub source: TokenSource,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret, not even in a debug dump.
        f.debug_struct("Token").field("secret", &"…").field("source", &self.source).finish()
    }
}

/// Everything needed to talk to the head, resolved from the flags and the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `HOST:PORT`.
    pub address: String,
    /// Every address given (`a:8780,b:8780`: a head and its standbys), `address` first.
    pub addresses: Vec<String>,
    /// Where it came from.
    pub address_source: AddressSource,
    /// The token, when one was found.
    pub token: Option<Token>,
    /// The data directory in use.
    pub data_dir: PathBuf,
    /// The CA to verify the head with, for an https:// address.
    pub ca: Option<PathBuf>,
}

impl Endpoint {
    /// Resolves the address, token and data directory, in the order of the module docs.
    pub fn resolve(args: &HeadArgs, env: &Environment) -> Result<Endpoint, BadInput> {
        let data_dir = args.data_dir.clone().unwrap_or_else(|| env.default_data_dir());
        let (text, address_source) = if let Some(flag) = &args.address {
            (flag.clone(), AddressSource::Flag)
        } else if let Some(address) = &env.address {
            (address.clone(), AddressSource::Env)
        } else {
            let file = data_dir.join(ADDRESS_FILE);
            match read_trimmed(&file)? {
                Some(address) => (address, AddressSource::File(file)),
                None => (format!("127.0.0.1:{DEFAULT_PORT}"), AddressSource::Default),
            }
        };
        let mut addresses = Vec::new();
        for item in text.split(',').map(str::trim) {
            let address = normalize_address(item).map_err(|rule| {
                BadInput::new(format!("address {item:?} ({address_source}): {rule}"))
            })?;
            if is_https(item) != is_https(text.trim()) {
                return Err(BadInput::new(format!(
                    "addresses {text:?} ({address_source}): give all with https:// or none"
                )));
            }
            if !addresses.contains(&address) {
                addresses.push(address);
            }
        }
        let address = addresses[0].clone();
        let ca = match (is_https(text.trim()), &args.ca) {
            (true, None) => {
                return Err(BadInput::new(format!(
                    "address {text:?} ({address_source}) is https://: give --ca FILE (or \
                     $BERTH_CA), the CA that signed the head's certificate"
                )))
            }
            (false, Some(_)) => {
                return Err(BadInput::new(format!(
                    "--ca is given, but the head address {text:?} ({address_source}) is not \
                     https://; a head serving TLS is reached at https://HOST:PORT"
                )))
            }
            (_, ca) => ca.clone(),
        };
        let token = match &env.token {
            Some(secret) => {
                Some(Token { secret: secret.trim().to_string(), source: TokenSource::Env })
            }
            None => {
                let file = data_dir.join(TOKEN_FILE);
                read_trimmed(&file)?.map(|secret| Token { secret, source: TokenSource::File(file) })
            }
        };
        Ok(Endpoint { address, addresses, address_source, token, data_dir, ca })
    }

    /// From the flags and the process environment.
    pub fn from_args(args: &HeadArgs) -> Result<Endpoint, BadInput> {
        Endpoint::resolve(args, &Environment::from_process())
    }

    /// A client for this endpoint: with several addresses, for the first whose head is
    /// active (its `/healthz` says `ok`, not `standby`), else for the first.
    pub fn client(&self) -> Result<Client, BadInput> {
        if self.addresses.len() > 1 {
            for address in &self.addresses {
                let client = self.client_for(address)?;
                let health: Result<berth_api::rest::Health, _> = client.get("/healthz");
                if health.is_ok_and(|h| h.status == "ok") {
                    return Ok(client);
                }
            }
        }
        self.client_for(&self.address)
    }

    fn client_for(&self, address: &str) -> Result<Client, BadInput> {
        let mut client = match &self.ca {
            None => Client::new(address, self.token.clone())?,
            Some(ca) => {
                let pem = std::fs::read(ca).map_err(|err| {
                    BadInput::new(format!("--ca: cannot read {}: {err}", ca.display()))
                })?;
                Client::new_tls(address, self.token.clone(), &pem)
                    .map_err(|err| BadInput::new(format!("--ca {}: {}", ca.display(), err.0)))?
            }
        };
        client.address_source = Some(self.address_source.clone());
        client.token_file = Some(self.data_dir.join(TOKEN_FILE));
        Ok(client)
    }
}

/// The trimmed content of `path`; `None` when it does not exist or holds only whitespace.
fn read_trimmed(path: &Path) -> Result<Option<String>, BadInput> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty())),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(BadInput::new(format!("cannot read {}: {err}", path.display()))),
    }
}

/// An HTTP client's settings: the connect timeout, no proxy (the head is on this machine or
/// the cluster's network), and `tls` for an https:// head.
pub(crate) fn http_builder(tls: Option<&rustls::ClientConfig>) -> reqwest::blocking::ClientBuilder {
    berth_head::tls::install_crypto_provider();
    let builder = HttpClient::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .no_proxy()
        .user_agent(concat!("berth-cli/", env!("CARGO_PKG_VERSION")));
    match tls {
        Some(tls) => builder.tls_backend_preconfigured(tls.clone()),
        None => builder,
    }
}

/// The crypto of the CLI's TLS: ring (pure Rust and C, nothing to install).
fn ring_provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}

/// True when `text` names a head serving TLS (`https://…`).
pub fn is_https(text: &str) -> bool {
    text.trim().get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

/// `HOST:PORT` from what a user (or a head-address file) wrote: the scheme is dropped, a
/// port-less host gets the default port, and an unspecified host (`0.0.0.0`, `[::]`, where a
/// head listens on every interface) becomes the loopback address.
pub fn normalize_address(text: &str) -> Result<String, String> {
    let mut rest = text.trim();
    if is_https(rest) {
        rest = &rest[8..];
    } else if rest.get(..7).is_some_and(|s| s.eq_ignore_ascii_case("http://")) {
        rest = &rest[7..];
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Err("expected HOST:PORT".into());
    }
    if rest.contains(['/', '?', '#', '@']) || rest.chars().any(char::is_whitespace) {
        return Err("expected HOST:PORT, without a path".into());
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (inner, after) =
            v6.split_once(']').ok_or("a '[' without ']' around the IPv6 address")?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or("expected :PORT after ']'")?),
        };
        (format!("[{inner}]"), port)
    } else if rest.matches(':').count() > 1 {
        // A bare IPv6 address: it has no port (write [::1]:8780 for one).
        (format!("[{rest}]"), None)
    } else {
        match rest.split_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (rest.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err("expected HOST:PORT, and the host is empty".into());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("port {port:?} is not a port (1 to 65535)")),
            Ok(port) => port,
        },
    };
    let host = match host.as_str() {
        "0.0.0.0" => "127.0.0.1".to_string(),
        "[::]" | "[0:0:0:0:0:0:0:0]" => "[::1]".to_string(),
        _ => host,
    };
    Ok(format!("{host}:{port}"))
}

// ---------------------------------------------------------------------------------------------
// The client.

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
    /// For messages only: where the address came from, when an [`Endpoint`] knows.
    address_source: Option<AddressSource>,
    /// For messages only: where a token would have been read.
    token_file: Option<PathBuf>,
}

impl Client {
    /// A client of the head at `address` (`HOST:PORT`; see [`normalize_address`]), presenting
    /// `token` on every call.
    pub fn new(address: &str, token: Option<Token>) -> Result<Client, BadInput> {
        Client::build(address, token, None)
    }

    /// A client of a head serving TLS at `address`, trusting only the CA certificate(s) in
    /// `ca_pem` (PEM).
    pub fn new_tls(address: &str, token: Option<Token>, ca_pem: &[u8]) -> Result<Client, BadInput> {
        use rustls_pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| BadInput::new(format!("not a PEM certificate: {e}")))?;
            roots.add(cert).map_err(|e| BadInput::new(format!("not a CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(BadInput::new("holds no certificate"));
        }
        let tls = rustls::ClientConfig::builder_with_provider(ring_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| BadInput::new(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Client::build(address, token, Some(tls))
    }

    fn build(
        address: &str,
        token: Option<Token>,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Client, BadInput> {
        let address = normalize_address(address)
            .map_err(|rule| BadInput::new(format!("address {address:?}: {rule}")))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let http = http_builder(tls.as_ref())
            .timeout(ANSWER_TIMEOUT)
            .build()
            .map_err(|err| BadInput::new(format!("cannot set up the {scheme} client: {err}")))?;
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

    /// `GET path` (a path from the server's root: `/api/v1/nodes`; see [`api_path`]).
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.read(|| self.call(Method::GET, path, NO_BODY, NO_QUERY, ANSWER_TIMEOUT, None))
    }

    /// Runs a read (a GET, safe to send again) and sends it again when the connection broke
    /// before its answer or the head answered 503 (a head at its connection cap closes a
    /// connection it has no room for; one between two states answers 503), with the waits of
    /// [`Client::create`]. A read that timed out is not sent again: its wait was spent.
    fn read<T>(&self, send: impl Fn() -> Result<T, ClientError>) -> Result<T, ClientError> {
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            match send() {
                Err(err)
                    if attempt < CREATE_ATTEMPTS
                        && err.may_retry()
                        && !matches!(err, ClientError::TimedOut { .. }) =>
                {
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(2));
                    attempt += 1;
                }
                other => return other,
            }
        }
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
    pub fn create<B, T>(&self, path: &str, body: &B) -> Result<T, ClientError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let key = new_idempotency_key();
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            let answer =
                self.call(Method::POST, path, Some(body), NO_QUERY, ANSWER_TIMEOUT, Some(&key));
            match answer {
                // A head that went away after the first attempt may be restarting.
                Err(err)
                    if attempt < CREATE_ATTEMPTS
                        && (err.may_retry()
                            || (attempt > 1 && matches!(err, ClientError::Unreachable { .. }))) =>
                {
                    eprintln!("berth: {err}; sending it again ({attempt}/{CREATE_ATTEMPTS}, same idempotency key)");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(2));
                    attempt += 1;
                }
                other => return other,
            }
        }
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

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("address", &self.address)
            .field("token", &self.token)
            .finish()
    }
}

/// The innermost cause of `err`, which is what says "Connection refused".
/// `err` and its sources; an `io::Error`'s inner error counts as its source (std skips it).
fn chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| match e.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
        None => e.source(),
    })
}

/// What rustls reported, when TLS is why `err` happened.
fn tls_cause(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    chain(err).find_map(|e| e.downcast_ref::<rustls::Error>()).map(ToString::to_string)
}

fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// `/api/v1/<segments joined by />`, each segment percent-encoded (an ID or an IP goes in as
/// it is, whatever characters it holds).
pub fn api_path(segments: &[&str]) -> String {
    let mut path = String::from(API_PREFIX);
    for segment in segments {
        path.push('/');
        for byte in segment.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                path.push(char::from(byte));
            } else {
                path.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    path
}

// ---------------------------------------------------------------------------------------------
// Helpers of the commands.

/// Writes `text` to `out` and flushes.
fn write_out(out: &mut dyn Write, text: &str) -> anyhow::Result<()> {
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write the output")
}

/// `value` as pretty JSON, with a final newline.
fn json_text<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value).context("cannot print the answer")?;
    text.push('\n');
    Ok(text)
}

pub use berth_api::ObjectKind;

/// The kind of object `id` names, by its prefix, or a message saying what IDs look like.
pub fn object_kind(id: &str) -> Result<ObjectKind, BadInput> {
    ObjectKind::of_prefix(id).ok_or_else(|| {
        BadInput::new(format!(
            "{id:?} is not an actor, task or placement group ID (actor-12, task-3, pg-7); \
             for a node, use `berth get node ID`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Environment {
        let get = |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        Environment {
            data_dir: get(DATA_DIR_ENV).map(OsString::from),
            home: get("HOME").map(OsString::from),
            address: get(ADDRESS_ENV),
            token: get(TOKEN_ENV),
        }
    }

    fn args(address: Option<&str>, data_dir: Option<&Path>) -> HeadArgs {
        HeadArgs {
            address: address.map(str::to_string),
            data_dir: data_dir.map(Path::to_path_buf),
            ca: None,
        }
    }

    #[test]
    fn data_dir_order() {
        let both = env(&[(DATA_DIR_ENV, "/d"), ("HOME", "/h")]);
        assert_eq!(both.default_data_dir(), PathBuf::from("/d"));
        assert_eq!(env(&[("HOME", "/h")]).default_data_dir(), PathBuf::from("/h/.berth"));
        assert_eq!(env(&[]).default_data_dir(), PathBuf::from(".berth"));
        // --data-dir wins over both.
        let flag = Path::new("/flag");
        let endpoint = Endpoint::resolve(&args(Some("h:1"), Some(flag)), &both).unwrap();
        assert_eq!(endpoint.data_dir, flag);
    }

    #[test]
    fn data_dir_rule_is_the_api_crates() {
        // The process environment, read both ways, gives the same directory.
        assert_eq!(
            Environment::from_process().default_data_dir(),
            berth_api::local::default_data_dir()
        );
    }

    #[test]
    fn address_order() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let with_env = env(&[(ADDRESS_ENV, "10.0.0.9:9000")]);

        // Nothing anywhere: the default.
        let e = Endpoint::resolve(&args(None, Some(data)), &env(&[])).unwrap();
        assert_eq!(
            (e.address.as_str(), e.address_source),
            ("127.0.0.1:8780", AddressSource::Default)
        );

        // The head-address file.
        std::fs::write(data.join(ADDRESS_FILE), "127.0.0.1:41234\n").unwrap();
        let e = Endpoint::resolve(&args(None, Some(data)), &env(&[])).unwrap();
        assert_eq!(e.address, "127.0.0.1:41234");
        assert_eq!(e.address_source, AddressSource::File(data.join(ADDRESS_FILE)));

        // $BERTH_ADDRESS wins over the file.
        let e = Endpoint::resolve(&args(None, Some(data)), &with_env).unwrap();
        assert_eq!((e.address.as_str(), e.address_source), ("10.0.0.9:9000", AddressSource::Env));

        // --address wins over everything.
        let e = Endpoint::resolve(&args(Some("head:7000"), Some(data)), &with_env).unwrap();
        assert_eq!((e.address.as_str(), e.address_source), ("head:7000", AddressSource::Flag));

        // The file is found through $BERTH_DATA_DIR too.
        let by_env = env(&[(DATA_DIR_ENV, data.to_str().unwrap())]);
        let e = Endpoint::resolve(&args(None, None), &by_env).unwrap();
        assert_eq!(e.address, "127.0.0.1:41234");

        // A blank file is no file.
        std::fs::write(data.join(ADDRESS_FILE), "  \n").unwrap();
        let e = Endpoint::resolve(&args(None, Some(data)), &env(&[])).unwrap();
        assert_eq!(e.address_source, AddressSource::Default);
    }

    #[test]
    fn token_order() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let flag = args(Some("h:1"), Some(data));

        let e = Endpoint::resolve(&flag, &env(&[])).unwrap();
        assert_eq!(e.token, None);

        std::fs::write(data.join(TOKEN_FILE), "abc123\n").unwrap();
        let e = Endpoint::resolve(&flag, &env(&[])).unwrap();
        let token = e.token.unwrap();
        assert_eq!(token.secret, "abc123");
        assert_eq!(token.source, TokenSource::File(data.join(TOKEN_FILE)));

        let e = Endpoint::resolve(&flag, &env(&[(TOKEN_ENV, "from-env")])).unwrap();
        let token = e.token.unwrap();
        assert_eq!((token.secret.as_str(), token.source), ("from-env", TokenSource::Env));

        // The secret never shows in a debug dump.
        let e = Endpoint::resolve(&flag, &env(&[])).unwrap();
        assert!(!format!("{e:?}").contains("abc123"));
    }

    #[test]
    fn an_https_head_needs_a_ca_and_a_plain_one_takes_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut https = args(Some("https://head.example:9000"), Some(dir.path()));
        let err = Endpoint::resolve(&https, &env(&[])).unwrap_err();
        assert!(err.0.contains("--ca") && err.0.contains("https://"), "{err}");
        https.ca = Some(dir.path().join("ca.pem"));
        let e = Endpoint::resolve(&https, &env(&[])).unwrap();
        assert_eq!(
            (e.address.as_str(), e.ca.as_deref()),
            ("head.example:9000", https.ca.as_deref())
        );
        // The CA file is read when the client is made: a missing one is named.
        let err = e.client().expect_err("no such CA file").0;
        assert!(err.contains("--ca") && err.contains("ca.pem"), "{err}");
        std::fs::write(dir.path().join("ca.pem"), "not a certificate").unwrap();
        let err = e.client().expect_err("not a PEM file").0;
        assert!(err.contains("holds no certificate"), "{err}");

        let mut plain = args(Some("head.example:9000"), Some(dir.path()));
        plain.ca = https.ca.clone();
        let err = Endpoint::resolve(&plain, &env(&[])).unwrap_err();
        assert!(err.0.contains("--ca") && err.0.contains("not https://"), "{err}");
    }

    #[test]
    fn unreadable_files_are_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the token file should be cannot be read as one.
        std::fs::create_dir(dir.path().join(TOKEN_FILE)).unwrap();
        let err = Endpoint::resolve(&args(Some("h:1"), Some(dir.path())), &env(&[])).unwrap_err();
        assert!(err.0.contains("cannot read"), "{err}");
    }

    #[test]
    fn addresses() {
        let ok = [
            ("127.0.0.1:8780", "127.0.0.1:8780"),
            ("localhost", "localhost:8780"),
            ("http://head.example:9000/", "head.example:9000"),
            ("HTTP://h:1", "h:1"),
            ("https://head.example:9000", "head.example:9000"),
            (" 10.1.2.3:80 \n", "10.1.2.3:80"),
            ("0.0.0.0:8780", "127.0.0.1:8780"),
            ("[::]:8780", "[::1]:8780"),
            ("[::1]:9000", "[::1]:9000"),
            ("[fe80::1]", "[fe80::1]:8780"),
            ("::1", "[::1]:8780"),
        ];
        for (text, want) in ok {
            assert_eq!(normalize_address(text).as_deref(), Ok(want), "{text}");
        }
        let bad = [
            ("", "expected HOST:PORT"),
            ("h:0", "not a port"),
            ("h:http", "not a port"),
            ("h:70000", "not a port"),
            (":8780", "host is empty"),
            ("h:1/api", "without a path"),
            ("[::1", "without ']'"),
            ("[::1]x", "expected :PORT"),
        ];
        for (text, want) in bad {
            let err = normalize_address(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        let err = Endpoint::resolve(&args(Some("h:x"), Some(Path::new("/nonexistent"))), &env(&[]))
            .unwrap_err();
        assert!(err.0.contains("--address") && err.0.contains("\"h:x\""), "{err}");
    }

    #[test]
    fn paths_are_encoded() {
        assert_eq!(api_path(&["actors", "actor-12"]), "/api/v1/actors/actor-12");
        assert_eq!(api_path(&["nodes", "fe80::1", "taints"]), "/api/v1/nodes/fe80%3A%3A1/taints");
        assert_eq!(api_path(&["nodes", "a b/c"]), "/api/v1/nodes/a%20b%2Fc");
    }

    #[test]
    fn an_id_that_names_no_object_says_what_ids_look_like() {
        assert_eq!(object_kind("pg-7").unwrap(), ObjectKind::Group);
        assert!(object_kind("gpu-1").unwrap_err().0.contains("berth get node"));
    }

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
