//! The agent's configuration: which head to reach, with which token, and what this machine is.
//!
//! Everything here comes from outside (command-line flags, a config file), so
//! [`AgentConfig::validate`] checks it at the edge with the rules the head applies (quantities
//! and label syntax come from `berth-core`) and names the field that is wrong. The head checks
//! again; checking here means `berth start` fails at once with a clear message instead of
//! retrying a registration the head will never accept.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use berth_api::agent::{RegisterRequest, RunningWork, Taint};
use berth_core::labels::{self, BERTH_PREFIX, NODE_ID};
use berth_core::resource::ResourceRegistry;
use berth_core::Quantity;
use thiserror::Error;
use tonic::metadata::{Ascii, MetadataValue};

/// The fact keys the protocol knows; the head turns them into `berth.io/...` default labels.
pub use berth_core::labels::FACT_KEYS;

/// The address reported when none is configured.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1";

/// The wait between losing the head and registering again, when none is configured.
pub const DEFAULT_RECONNECT_BACKOFF: Duration = Duration::from_secs(1);

/// How one agent reaches the head and describes its machine.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// The head's gRPC address: `HOST:PORT`, `http://HOST:PORT`, or `https://HOST:PORT` for a
    /// head serving TLS (then `ca` is needed). Several, comma-separated, for a head with
    /// standbys (`a:8780,b:8780`): the agent moves to the next whenever it loses its session.
    pub head: String,
    /// The PEM certificate(s) of the CA that signed the head's certificate (`--ca FILE`): the
    /// agent verifies the head with it, and only with it.
    pub ca: Option<String>,
    /// The cluster token, sent as `authorization: Bearer <token>` on every call.
    pub token: String,
    /// The node's ID; `None` lets the head choose one. After the first registration the agent
    /// keeps the ID the head gave, whatever this says.
    pub node_id: Option<String>,
    /// This machine's IP address, as other machines reach it.
    pub address: String,
    /// Resource name to quantity text (`"CPU" → "8"`, `"memory" → "32Gi"`).
    pub resources: BTreeMap<String, String>,
    /// User labels (`--labels`); they win over the file's.
    pub labels: BTreeMap<String, String>,
    /// The contents of `--labels-file` (a YAML map), parsed by the head.
    pub labels_file: Option<String>,
    /// Taints, key to value.
    pub taints: BTreeMap<String, String>,
    /// Machine facts, keyed by one of [`FACT_KEYS`].
    pub facts: BTreeMap<String, String>,
    /// The wait before registering again after the head was lost.
    pub reconnect_backoff: Duration,
}

// The token is a secret: never print it.
impl fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentConfig")
            .field("head", &self.head)
            .field("token", &"<redacted>")
            .field("node_id", &self.node_id)
            .field("address", &self.address)
            .field("resources", &self.resources)
            .field("labels", &self.labels)
            .field("labels_file", &self.labels_file.as_ref().map(|_| "<contents>"))
            .field("taints", &self.taints)
            .field("facts", &self.facts)
            .field("reconnect_backoff", &self.reconnect_backoff)
            .finish()
    }
}

/// A configuration field that breaks a rule.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The field, with the map key where there is one (`resources.GPU`, `labels.team`).
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

impl ConfigError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError { field: field.into(), message: message.into() }
    }
}

impl AgentConfig {
    /// A configuration for the head at `head` with `token`, and defaults for everything else:
    /// no node ID (the head picks), address [`DEFAULT_ADDRESS`], no resources, labels, taints
    /// or facts, and [`DEFAULT_RECONNECT_BACKOFF`].
    pub fn new(head: impl Into<String>, token: impl Into<String>) -> AgentConfig {
        AgentConfig {
            head: head.into(),
            ca: None,
            token: token.into(),
            node_id: None,
            address: DEFAULT_ADDRESS.to_string(),
            resources: BTreeMap::new(),
            labels: BTreeMap::new(),
            labels_file: None,
            taints: BTreeMap::new(),
            facts: BTreeMap::new(),
            reconnect_backoff: DEFAULT_RECONNECT_BACKOFF,
        }
    }

    /// Checks every field; the first one that is wrong is named in the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let urls = self.head_urls()?;
        let https = urls[0].starts_with("https://");
        if urls.iter().any(|u| u.starts_with("https://") != https) {
            return Err(ConfigError::new("head", "give every head address with https:// or none"));
        }
        match (https, &self.ca) {
            (true, None) => {
                return Err(ConfigError::new(
                    "ca",
                    "is needed for an https:// head: give the CA that signed its certificate \
                     (--ca FILE)",
                ))
            }
            (false, Some(_)) => {
                return Err(ConfigError::new(
                    "ca",
                    "is given, but the head address is not https://; a head serving TLS is \
                     reached at https://HOST:PORT",
                ))
            }
            _ => {}
        }
        self.authorization()?;
        if let Some(node_id) = &self.node_id {
            if !labels::is_valid_name(node_id) {
                return Err(ConfigError::new(
                    "node_id",
                    format!(
                        "{node_id:?} is not a node ID: use 1 to 63 letters, digits, '-', '_' \
                         and '.', beginning and ending with a letter or digit (or leave it \
                         unset to let the head choose)"
                    ),
                ));
            }
        }
        if self.address.parse::<IpAddr>().is_err() {
            return Err(ConfigError::new(
                "address",
                format!("{:?} is not an IP address (this machine's, e.g. 10.0.0.5)", self.address),
            ));
        }
        let mut registry = ResourceRegistry::default();
        for (name, amount) in &self.resources {
            let field = || format!("resources.{name}");
            registry.intern(name).map_err(|e| ConfigError::new(field(), e.to_string()))?;
            Quantity::parse(amount).map_err(|e| ConfigError::new(field(), e.to_string()))?;
        }
        for (key, value) in &self.labels {
            let field = || format!("labels.{key}");
            if key == NODE_ID {
                return Err(ConfigError::new(
                    field(),
                    "berth.io/node-id is set by Berth to the node's ID and cannot be given",
                ));
            }
            labels::validate_key(key).map_err(|e| ConfigError::new(field(), e.to_string()))?;
            labels::validate_value(key, value)
                .map_err(|e| ConfigError::new(field(), e.to_string()))?;
        }
        for (key, value) in &self.taints {
            let field = || format!("taints.{key}");
            if key.starts_with(BERTH_PREFIX) {
                return Err(ConfigError::new(
                    field(),
                    "taint keys under berth.io/ are set by Berth and cannot be given",
                ));
            }
            labels::validate_key(key).map_err(|e| ConfigError::new(field(), e.to_string()))?;
            labels::validate_value(key, value)
                .map_err(|e| ConfigError::new(field(), e.to_string()))?;
        }
        for (key, value) in &self.facts {
            let field = || format!("facts.{key}");
            if !FACT_KEYS.contains(&key.as_str()) {
                return Err(ConfigError::new(
                    field(),
                    format!("unknown fact; the known facts are {}", FACT_KEYS.join(", ")),
                ));
            }
            // Facts become label values.
            labels::validate_value(key, value)
                .map_err(|e| ConfigError::new(field(), e.to_string()))?;
        }
        if self.reconnect_backoff.is_zero() {
            return Err(ConfigError::new(
                "reconnect_backoff",
                "must be greater than zero (an agent that lost the head would retry in a busy loop)",
            ));
        }
        Ok(())
    }

    /// The head's address as a URL the gRPC channel accepts: `http://HOST:PORT`.
    pub fn head_url(&self) -> Result<String, ConfigError> {
        Ok(self.head_urls()?.remove(0))
    }

    /// Every head address of [`AgentConfig::head`], as URLs, in order.
    pub fn head_urls(&self) -> Result<Vec<String>, ConfigError> {
        let mut urls = Vec::new();
        for head in self.head.split(',').map(str::trim) {
            let url = parse_head(head).map_err(|rule| {
                ConfigError::new("head", format!("{head:?} is not a head address: {rule}"))
            })?;
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
        Ok(urls)
    }

    /// The `authorization` metadata value: `Bearer <token>`.
    pub fn authorization(&self) -> Result<MetadataValue<Ascii>, ConfigError> {
        if self.token.is_empty() {
            return Err(ConfigError::new("token", "is empty; give the cluster's token"));
        }
        if !self.token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::new(
                "token",
                "may only hold visible ASCII characters (no spaces or control characters)",
            ));
        }
        MetadataValue::try_from(format!("Bearer {}", self.token))
            .map_err(|_| ConfigError::new("token", "is not valid in gRPC metadata"))
    }

    /// The registration message for node `node_id` (empty: the head chooses) running `running`.
    pub fn register_request(&self, node_id: &str, running: Vec<RunningWork>) -> RegisterRequest {
        let map =
            |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        RegisterRequest {
            node_id: node_id.to_string(),
            address: self.address.clone(),
            resources: map(&self.resources),
            labels: map(&self.labels),
            labels_file: self.labels_file.clone().unwrap_or_default(),
            taints: self
                .taints
                .iter()
                .map(|(key, value)| Taint { key: key.clone(), value: value.clone() })
                .collect(),
            facts: map(&self.facts),
            running,
        }
    }
}

/// `HOST:PORT` or `http://HOST:PORT` (an optional trailing `/`) to `http://HOST:PORT`, or the
/// rule broken.
fn parse_head(text: &str) -> Result<String, &'static str> {
    const FORM: &str = "expected HOST:PORT or http://HOST:PORT, e.g. 10.0.0.1:7070";
    if text.is_empty() {
        return Err("it is empty; expected HOST:PORT or http://HOST:PORT, e.g. 10.0.0.1:7070");
    }
    let (scheme, rest) = match text.strip_prefix("https://") {
        Some(rest) => ("https", rest),
        None => ("http", text.strip_prefix("http://").unwrap_or(text)),
    };
    if rest.contains("://") {
        return Err(
            "only http:// and https:// are supported; expected HOST:PORT or http://HOST:PORT",
        );
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') || rest.contains('?') || rest.contains('#') {
        return Err("a head address has no path; expected HOST:PORT or http://HOST:PORT");
    }
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (v6, after) = bracketed.split_once(']').ok_or(FORM)?;
        if v6.parse::<Ipv6Addr>().is_err() {
            return Err("the part in [...] is not an IPv6 address");
        }
        let port = after.strip_prefix(':').ok_or("the port is missing (HOST:PORT)")?;
        (None, port)
    } else {
        let (host, port) = rest.rsplit_once(':').ok_or("the port is missing (HOST:PORT)")?;
        if host.contains(':') {
            return Err("write an IPv6 address in brackets: [::1]:7070");
        }
        (Some(host), port)
    };
    if let Some(host) = host {
        let valid = !host.is_empty()
            && host.split('.').all(|part| {
                !part.is_empty()
                    && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !valid {
            return Err("the host is not a host name or IPv4 address");
        }
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => {}
        _ => return Err("the port is not a number from 1 to 65535"),
    }
    Ok(format!("{scheme}://{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AgentConfig {
        AgentConfig::new("10.0.0.1:7070", "s3cret")
    }

    #[test]
    fn head_forms() {
        for (given, url) in [
            ("10.0.0.1:7070", "http://10.0.0.1:7070"),
            ("http://10.0.0.1:7070", "http://10.0.0.1:7070"),
            ("http://head.example.com:7070/", "http://head.example.com:7070"),
            ("localhost:1", "http://localhost:1"),
            ("[::1]:7070", "http://[::1]:7070"),
            ("http://[fe80::1]:80", "http://[fe80::1]:80"),
        ] {
            let mut c = config();
            c.head = given.into();
            assert_eq!(c.head_url().unwrap(), url, "{given}");
            c.validate().unwrap();
        }
    }

    #[test]
    fn several_heads_are_tried_in_order_and_each_is_checked() {
        let mut c = config();
        c.head = "10.0.0.1:8780, http://10.0.0.2:8780,10.0.0.1:8780".into();
        assert_eq!(c.head_urls().unwrap(), ["http://10.0.0.1:8780", "http://10.0.0.2:8780"]);
        c.validate().unwrap();
        c.head = "10.0.0.1:8780,10.0.0.2".into();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("\"10.0.0.2\"") && err.contains("port"), "{err}");
    }

    #[test]
    fn an_https_head_needs_a_ca_and_only_it_takes_one() {
        let mut c = config();
        c.head = "https://head.example.com:8780".into();
        assert_eq!(c.head_url().unwrap(), "https://head.example.com:8780");
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("ca") && err.contains("https://"), "{err}");
        c.ca = Some("-----BEGIN CERTIFICATE-----".into());
        c.validate().unwrap();
        c.head = "head.example.com:8780".into();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("ca") && err.contains("not https://"), "{err}");
    }

    #[test]
    fn bad_heads_name_the_field_and_rule() {
        for (given, words) in [
            ("", "empty"),
            ("10.0.0.1", "port is missing"),
            ("10.0.0.1:", "port is not a number"),
            ("10.0.0.1:0", "port is not a number"),
            ("10.0.0.1:70000", "port is not a number"),
            ("10.0.0.1:+70", "port is not a number"),
            ("grpc://h:1", "only http:// and https://"),
            ("h:1/api", "no path"),
            (":7070", "not a host name"),
            ("bad host:1", "not a host name"),
            ("::1:7070", "brackets"),
            ("[zz]:1", "not an IPv6"),
            ("[::1]", "port is missing"),
        ] {
            let mut c = config();
            c.head = given.into();
            let err = c.validate().unwrap_err();
            assert_eq!(err.field, "head", "{given}");
            let text = err.to_string();
            assert!(text.starts_with("head: "), "{text}");
            assert!(text.contains(words), "{given}: {text}");
        }
    }

    #[test]
    fn token_rules() {
        let mut c = config();
        assert_eq!(c.authorization().unwrap(), "Bearer s3cret");
        c.token = String::new();
        assert_eq!(c.validate().unwrap_err().field, "token");
        c.token = "has space".into();
        assert_eq!(c.validate().unwrap_err().field, "token");
        c.token = "héllo".into();
        assert_eq!(c.validate().unwrap_err().field, "token");
    }

    #[test]
    fn the_token_is_never_printed() {
        assert!(!format!("{:?}", config()).contains("s3cret"));
    }

    #[test]
    fn fields_are_named_with_their_keys() {
        type Change = fn(&mut AgentConfig);
        let cases: Vec<(Change, &str)> = vec![
            (|c| c.node_id = Some(String::new()), "node_id"),
            (|c| c.node_id = Some("bad id".into()), "node_id"),
            (|c| c.address = "my-host".into(), "address"),
            (|c| drop(c.resources.insert("GPU".into(), "-1".into())), "resources.GPU"),
            (|c| drop(c.resources.insert("GPU".into(), "0.00001".into())), "resources.GPU"),
            (|c| drop(c.resources.insert("bad name".into(), "1".into())), "resources.bad name"),
            (|c| drop(c.labels.insert("team".into(), "not ok".into())), "labels.team"),
            (|c| drop(c.labels.insert("-x".into(), "a".into())), "labels.-x"),
            (|c| drop(c.labels.insert(NODE_ID.into(), "a".into())), "labels.berth.io/node-id"),
            (|c| drop(c.taints.insert("berth.io/gpu".into(), "a".into())), "taints.berth.io/gpu"),
            (|c| drop(c.taints.insert("dedicated".into(), "a b".into())), "taints.dedicated"),
            (|c| drop(c.facts.insert("colour".into(), "red".into())), "facts.colour"),
            (|c| drop(c.facts.insert("region".into(), "us west".into())), "facts.region"),
            (|c| c.reconnect_backoff = Duration::ZERO, "reconnect_backoff"),
        ];
        for (change, field) in cases {
            let mut c = config();
            change(&mut c);
            let err = c.validate().unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn a_full_config_is_valid_and_maps_to_the_request() {
        let mut c = config();
        c.node_id = Some("gpu-1".into());
        c.address = "10.0.0.7".into();
        c.resources.insert("CPU".into(), "8".into());
        c.resources.insert("GPU".into(), "2".into());
        c.resources.insert("memory".into(), "32Gi".into());
        c.labels.insert("team".into(), "ml".into());
        c.labels_file = Some("tier: gold\n".into());
        c.taints.insert("dedicated".into(), "ml".into());
        c.facts.insert("accelerator-type".into(), "nvidia-a100".into());
        c.facts.insert("availability-zone".into(), "us-west1-a".into());
        c.validate().unwrap();
        let running = vec![RunningWork { work_id: "w".into(), attempt: 2 }];
        let r = c.register_request("gpu-1", running.clone());
        assert_eq!(r.node_id, "gpu-1");
        assert_eq!(r.address, "10.0.0.7");
        assert_eq!(r.resources.len(), 3);
        assert_eq!(r.resources["memory"], "32Gi");
        assert_eq!(r.labels["team"], "ml");
        assert_eq!(r.labels_file, "tier: gold\n");
        assert_eq!(r.taints, vec![Taint { key: "dedicated".into(), value: "ml".into() }]);
        assert_eq!(r.facts["accelerator-type"], "nvidia-a100");
        assert_eq!(r.running, running);
    }
}
