//! A typed client of a Berth head's REST API: finding the head, TLS, tokens, the calls and
//! their retries. The `berth` CLI's commands and benches talk to a head through it; it knows
//! nothing of command lines (no clap) or of printing.
//!
//! ## Layout
//!
//! - `endpoint.rs`: finding the head. [`Endpoint::resolve`] turns what the caller gives
//!   ([`Overrides`]: the CLI's `--address`, `--ca`, `--data-dir`) and the environment
//!   ([`Environment`], read once) into an address, a token and a data directory, each with
//!   where it came from ([`AddressSource`], [`TokenSource`]) for the messages.
//!   [`Endpoint::client`] picks the active head among several addresses.
//! - `client.rs`: [`Client`], a blocking client of one head: `get`, `post`, `put`, `delete`,
//!   `create`, `watch`, `get_streamed`, each decoding a 2xx answer into a `berth_api::rest`
//!   type and anything else into a [`ClientError`].
//! - `address.rs`: [`normalize_address`] (`HOST:PORT` from what a user or a head-address file
//!   wrote), [`is_https`], [`api_path`] (percent-encoded segments under `/api/v1`).
//! - `tls.rs`: the HTTP clients' settings ([`http_builder`], [`async_http_builder`]: connect
//!   timeout, no proxy) and TLS with rustls on ring, trusting only the CA given.
//! - `error.rs`: [`SetupError`] (nothing was sent) and [`ClientError`] (the head could not be
//!   reached, or answered an error), with the words the CLI prints.
//!
//! ## Where the head is
//!
//! In order (the first that gives an answer wins):
//! - data directory: [`Overrides::data_dir`], `$BERTH_DATA_DIR`, `$HOME/.berth`, `./.berth`
//!   (as [`berth_api::local::default_data_dir`]);
//! - address: [`Overrides::address`], `$BERTH_ADDRESS`, the `head-address` file the running
//!   head wrote in the data directory, `127.0.0.1:8780`;
//! - token: `$BERTH_TOKEN`, the data directory's `token` file, or none (only `GET /healthz`
//!   answers without one).
//!
//! The process environment is read once, into an [`Environment`], so the resolution order is
//! tested with explicit values instead of a mutated process environment.
//!
//! ## Key decisions
//!
//! - **Blocking.** The CLI runs one call after another; reqwest's blocking client runs its own
//!   runtime, so callers need none. Code already on a tokio runtime (the benches) builds an
//!   async client with the same settings from [`async_http_builder`].
//! - **Retries are the client's.** A read (GET) is sent again when the connection broke before
//!   its answer or the head answered 503, a creation ([`Client::create`]) with the same
//!   `Idempotency-Key` also when it timed out or, after its first attempt, found no head
//!   (a head restarting): at most [`CREATE_ATTEMPTS`] times over about 5 s. A creation sent
//!   again says so on stderr (`berth: …; sending it again`), so that a command that takes
//!   seconds says why.
//! - **Two errors, two exit statuses.** [`SetupError`] is bad input (the CLI's status 2),
//!   [`ClientError`] a head that cannot be reached or answers an error (status 1). Their texts
//!   name the CLI's flags (`--address`, `--ca`, `--data-dir`) and commands: the CLI is this
//!   crate's main user, and the SDKs follow the same rules under the same names.
//! - **The secret stays secret**: [`Token`]'s `Debug` never prints it.
//!
//! ## What is not here
//!
//! The CLI's flags (its clap `HeadArgs` converts into [`Overrides`]), output formats and
//! rendering stay in `crates/berth-cli`. So does `berth bench api`, in a module tree of its
//! own (`crates/berth-cli/src/bench/api/`) rather than a crate: it runs a head in its own
//! process, re-runs the `berth` binary for its child processes (the simulated agents and its
//! last phase, through the hidden `--case` flag) and measures that binary as shipped (its
//! allocator included), so its entry points belong to the binary, and its load goes through
//! lean HTTP/1.1 connections of its own (`bench/api/conn.rs`): this client's per-request work
//! would be charged to the head it measures. Where a bench talks to a head outside the load it
//! measures (reading `/metrics`, `bench failover`'s token and polls), it uses this crate's
//! endpoint rules and HTTP settings.

#![warn(missing_docs)]

mod address;
mod client;
mod endpoint;
mod error;
mod tls;

pub use address::{api_path, is_https, normalize_address};
pub use client::{Client, CREATE_ATTEMPTS, NO_BODY};
pub use endpoint::{AddressSource, Endpoint, Environment, Overrides, Token, TokenSource};
pub use error::{ClientError, SetupError};
pub use tls::{async_http_builder, http_builder, install_crypto_provider};
