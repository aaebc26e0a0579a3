//! Which store to open: the `--store` / `--data-dir` value of the head.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::StoreError;
use crate::etcd_store::EtcdStore;
use crate::redb_store::RedbStore;
use crate::redis_store::RedisStore;
use crate::store::AnyStore;

/// The namespace of a Redis store when the URL gives no `prefix`.
pub const DEFAULT_REDIS_PREFIX: &str = "default";

/// The longest Redis namespace, in characters.
pub const MAX_PREFIX_CHARS: usize = 64;

/// Which store to open, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// The embedded redb store in a data directory (created if missing).
    Redb {
        /// The data directory; the database is `data_dir/berth.redb`.
        data_dir: PathBuf,
    },
    /// A Redis server.
    Redis {
        /// `redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]`, without the query.
        url: String,
        /// The namespace of the store's keys (`berth:{prefix}:…`), so several clusters or
        /// test runs can share one server.
        prefix: String,
    },
    /// An etcd cluster.
    Etcd {
        /// Its members' client URLs, `http://HOST:PORT`, in the order given.
        endpoints: Vec<String>,
        /// The namespace of the store's keys (`berth/{prefix}/…`).
        prefix: String,
    },
}

impl StoreConfig {
    /// Reads a store location: `redis://HOST:PORT[/DB][?prefix=NAME]` for Redis, anything
    /// without a `scheme://` for a redb data directory.
    ///
    /// Rules: the value is not empty; `rediss://` (TLS) and other schemes are refused, naming
    /// what is accepted; the only query option is `prefix`, 1 to 64 characters of ASCII
    /// letters, digits, `-`, `_` and `.` (default [`DEFAULT_REDIS_PREFIX`]); the rest of the URL
    /// must be one the Redis client accepts (host, port, numeric database).
    pub fn parse(input: &str) -> Result<Self, StoreError> {
        let fail = |reason: String| StoreError::Config { input: redact_url(input), reason };
        if input.trim().is_empty() {
            return Err(fail(format!("is empty; {ACCEPTED}")));
        }
        let Some((scheme, _)) = input.split_once("://") else {
            return Ok(StoreConfig::Redb { data_dir: PathBuf::from(input) });
        };
        match scheme {
            "etcd" => return parse_etcd(input).map_err(fail),
            "redis" => {}
            "rediss" => {
                return Err(fail(
                    "TLS (rediss://) is not supported by this build; use redis://".to_owned(),
                ))
            }
            _ => return Err(fail(format!("unknown scheme {scheme:?}; {ACCEPTED}"))),
        }
        let (url, query) = match input.split_once('?') {
            Some((url, query)) => (url, Some(query)),
            None => (input, None),
        };
        let prefix = parse_query(query).map_err(fail)?;
        redis::Client::open(url).map_err(|e| fail(format!("is not a valid Redis URL: {e}")))?;
        Ok(StoreConfig::Redis { url: url.to_owned(), prefix })
    }

    /// The embedded store in `data_dir`.
    pub fn redb(data_dir: impl Into<PathBuf>) -> Self {
        StoreConfig::Redb { data_dir: data_dir.into() }
    }

    /// Opens the store: creates the data directory and database, or connects to Redis.
    pub async fn open(&self) -> Result<AnyStore, StoreError> {
        match self {
            StoreConfig::Redb { data_dir } => {
                RedbStore::open(data_dir.clone()).await.map(AnyStore::Redb)
            }
            StoreConfig::Redis { url, prefix } => {
                RedisStore::connect(url, prefix).await.map(AnyStore::Redis)
            }
            StoreConfig::Etcd { endpoints, prefix } => {
                EtcdStore::connect(endpoints, prefix).await.map(AnyStore::Etcd)
            }
        }
    }
}

/// `etcd://HOST:PORT[,HOST:PORT…][?prefix=NAME]`: the members' client addresses.
fn parse_etcd(input: &str) -> Result<StoreConfig, String> {
    let rest = &input["etcd://".len()..];
    let (hosts, query) = match rest.split_once('?') {
        Some((hosts, query)) => (hosts, Some(query)),
        None => (rest, None),
    };
    let mut endpoints = Vec::new();
    for host in hosts.split(',').map(str::trim) {
        let (name, port) = host.rsplit_once(':').ok_or_else(|| {
            format!("etcd member {host:?} has no port (HOST:PORT, e.g. 10.0.0.1:2379)")
        })?;
        let valid_name = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if !valid_name || port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("etcd member {host:?} is not HOST:PORT (e.g. 10.0.0.1:2379)"));
        }
        let url = format!("http://{host}");
        if !endpoints.contains(&url) {
            endpoints.push(url);
        }
    }
    let prefix = parse_query(query)?;
    Ok(StoreConfig::Etcd { endpoints, prefix })
}

impl FromStr for StoreConfig {
    type Err = StoreError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        StoreConfig::parse(input)
    }
}

impl fmt::Display for StoreConfig {
    /// The value [`StoreConfig::parse`] reads back, with any password hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreConfig::Redb { data_dir } => write!(f, "{}", data_dir.display()),
            StoreConfig::Redis { url, prefix } => write!(f, "{}?prefix={prefix}", redact_url(url)),
            StoreConfig::Etcd { endpoints, prefix } => {
                let hosts: Vec<&str> =
                    endpoints.iter().map(|e| e.trim_start_matches("http://")).collect();
                write!(f, "etcd://{}?prefix={prefix}", hosts.join(","))
            }
        }
    }
}

const ACCEPTED: &str = "give a data directory path, redis://HOST:PORT[/DB][?prefix=NAME] or \
                        etcd://HOST:PORT[,HOST:PORT…][?prefix=NAME]";

/// Reads the query of a Redis URL: only `prefix=NAME`, at most once.
fn parse_query(query: Option<&str>) -> Result<String, String> {
    let mut prefix = None;
    for pair in query.unwrap_or("").split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "prefix" {
            return Err(format!("unknown option {name:?}; the only option is prefix=NAME"));
        }
        if prefix.is_some() {
            return Err("prefix is given twice".to_owned());
        }
        check_prefix(value)?;
        prefix = Some(value.to_owned());
    }
    Ok(prefix.unwrap_or_else(|| DEFAULT_REDIS_PREFIX.to_owned()))
}

/// Checks a Redis namespace: 1 to [`MAX_PREFIX_CHARS`] of ASCII letters, digits, `-`, `_`, `.`
/// (no `{`, `}` or `:`, which would break the key layout).
pub(crate) fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err("prefix is empty; give 1 to 64 letters, digits, '-', '_' or '.'".to_owned());
    }
    if prefix.len() > MAX_PREFIX_CHARS {
        return Err(format!("prefix {prefix:?} is longer than {MAX_PREFIX_CHARS} characters"));
    }
    if let Some(bad) =
        prefix.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "prefix {prefix:?} has {bad:?}; use only letters, digits, '-', '_' and '.'"
        ));
    }
    Ok(())
}

/// The URL with its password, if any, replaced by `***`, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(url: &str, prefix: &str) -> StoreConfig {
        StoreConfig::Redis { url: url.to_owned(), prefix: prefix.to_owned() }
    }

    #[test]
    fn parses_paths_and_redis_urls() {
        let cases: [(&str, StoreConfig); 6] = [
            ("/var/lib/berth", StoreConfig::redb("/var/lib/berth")),
            ("data", StoreConfig::redb("data")),
            ("redis://127.0.0.1:6379/0?prefix=x", redis("redis://127.0.0.1:6379/0", "x")),
            ("redis://127.0.0.1:6379", redis("redis://127.0.0.1:6379", DEFAULT_REDIS_PREFIX)),
            ("redis://h:1/2?prefix=ci-1.a_b", redis("redis://h:1/2", "ci-1.a_b")),
            ("redis://:pw@h:1/0?prefix=p", redis("redis://:pw@h:1/0", "p")),
        ];
        for (input, expected) in cases {
            assert_eq!(StoreConfig::parse(input).expect(input), expected, "{input}");
        }
    }

    #[test]
    fn refuses_bad_values_naming_the_rule() {
        let cases: [(&str, &str); 10] = [
            ("", "is empty; give a data directory path, redis://"),
            ("  ", "is empty"),
            ("ftp://h/x", "unknown scheme \"ftp\""),
            ("rediss://h:6379", "TLS (rediss://) is not supported"),
            ("redis://h:6379?db=1", "unknown option \"db\""),
            ("redis://h:6379?prefix=a&prefix=b", "prefix is given twice"),
            ("redis://h:6379?prefix=", "prefix is empty"),
            ("redis://h:6379?prefix=a:b", "prefix \"a:b\" has ':'"),
            ("redis://h:6379?prefix={x}", "has '{'"),
            ("redis://h:6379/notanumber", "is not a valid Redis URL"),
        ];
        for (input, expected) in cases {
            let message = StoreConfig::parse(input).expect_err(input).to_string();
            assert!(message.contains(expected), "{input}: {message}");
        }
        let long = format!("redis://h:1?prefix={}", "p".repeat(MAX_PREFIX_CHARS + 1));
        assert!(StoreConfig::parse(&long).is_err());
    }

    #[test]
    fn messages_hide_passwords() {
        let message =
            StoreConfig::parse("redis://u:secret@h:1?bad=1").expect_err("bad option").to_string();
        assert!(!message.contains("secret"), "{message}");
        assert!(message.contains("redis://u:***@h:1"), "{message}");
    }

    #[test]
    fn redact_url_hides_only_the_password() {
        let cases: [(&str, &str); 5] = [
            ("redis://h:1/0", "redis://h:1/0"),
            ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
            ("redis://user:pw@h:1", "redis://user:***@h:1"),
            ("redis://user@h:1", "redis://user@h:1"),
            ("/data/dir", "/data/dir"),
        ];
        for (url, expected) in cases {
            assert_eq!(redact_url(url), expected);
        }
    }

    #[test]
    fn etcd_urls_name_every_member_and_refuse_what_is_not_host_port() {
        assert_eq!(
            StoreConfig::parse("etcd://10.0.0.1:2379, etcd-2.local:2379?prefix=prod").unwrap(),
            StoreConfig::Etcd {
                endpoints: vec!["http://10.0.0.1:2379".into(), "http://etcd-2.local:2379".into()],
                prefix: "prod".into()
            }
        );
        for (input, rule) in [
            ("etcd://10.0.0.1", "has no port"),
            ("etcd://10.0.0.1:0", "is not HOST:PORT"),
            ("etcd://a b:1", "is not HOST:PORT"),
            ("etcd://h:1?prefix=a:b", "prefix"),
            ("etcd://h:1?x=1", "unknown option"),
        ] {
            let err = StoreConfig::parse(input).expect_err(input).to_string();
            assert!(err.contains(rule), "{input}: {err}");
        }
    }

    #[test]
    fn display_reads_back() {
        for input in ["/var/lib/berth", "redis://h:1/0?prefix=p", "etcd://h:1,g:2?prefix=p"] {
            let config = StoreConfig::parse(input).expect(input);
            assert_eq!(StoreConfig::parse(&config.to_string()).expect("display"), config);
        }
    }
}
