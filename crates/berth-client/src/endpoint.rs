//! Finding the head: the data directory, the address and the token, from what the caller
//! gives ([`Overrides`]), the environment ([`Environment`]) and the files a local head writes
//! in its data directory (`berth_api::local`).

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use berth_api::local::{
    ADDRESS_ENV, ADDRESS_FILE, DATA_DIR_ENV, DEFAULT_PORT, TOKEN_ENV, TOKEN_FILE,
};

use crate::address::{is_https, normalize_address};
use crate::{Client, SetupError};

/// What the caller gives explicitly, winning over the environment and the data directory's
/// files: the `berth` CLI's `--address`, `--ca` and `--data-dir` (its messages name those
/// flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The head's address: `HOST:PORT`, `https://HOST:PORT`, or several comma-separated (a
    /// head and its standbys).
    pub address: Option<String>,
    /// The CA certificate (PEM) that signed the head's certificate, for an https:// head.
    pub ca: Option<PathBuf>,
    /// The data directory, where the token and the running head's address are read.
    pub data_dir: Option<PathBuf>,
}

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
    /// Resolves the address, token and data directory, in the order of the crate's docs.
    pub fn resolve(given: &Overrides, env: &Environment) -> Result<Endpoint, SetupError> {
        let data_dir = given.data_dir.clone().unwrap_or_else(|| env.default_data_dir());
        let (text, address_source) = if let Some(flag) = &given.address {
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
                SetupError::new(format!("address {item:?} ({address_source}): {rule}"))
            })?;
            if is_https(item) != is_https(text.trim()) {
                return Err(SetupError::new(format!(
                    "addresses {text:?} ({address_source}): give all with https:// or none"
                )));
            }
            if !addresses.contains(&address) {
                addresses.push(address);
            }
        }
        let address = addresses[0].clone();
        let ca = match (is_https(text.trim()), &given.ca) {
            (true, None) => {
                return Err(SetupError::new(format!(
                    "address {text:?} ({address_source}) is https://: give --ca FILE (or \
                     $BERTH_CA), the CA that signed the head's certificate"
                )))
            }
            (false, Some(_)) => {
                return Err(SetupError::new(format!(
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

    /// From `given` and the process environment.
    pub fn from_process(given: &Overrides) -> Result<Endpoint, SetupError> {
        Endpoint::resolve(given, &Environment::from_process())
    }

    /// A client for this endpoint: with several addresses, for the first whose head is
    /// active (its `/healthz` says `ok`, not `standby`), else for the first.
    pub fn client(&self) -> Result<Client, SetupError> {
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

    fn client_for(&self, address: &str) -> Result<Client, SetupError> {
        let mut client = match &self.ca {
            None => Client::new(address, self.token.clone())?,
            Some(ca) => {
                let pem = std::fs::read(ca).map_err(|err| {
                    SetupError::new(format!("--ca: cannot read {}: {err}", ca.display()))
                })?;
                Client::new_tls(address, self.token.clone(), &pem)
                    .map_err(|err| SetupError::new(format!("--ca {}: {}", ca.display(), err.0)))?
            }
        };
        client.address_source = Some(self.address_source.clone());
        client.token_file = Some(self.data_dir.join(TOKEN_FILE));
        Ok(client)
    }
}

/// The trimmed content of `path`; `None` when it does not exist or holds only whitespace.
fn read_trimmed(path: &Path) -> Result<Option<String>, SetupError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty())),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(SetupError::new(format!("cannot read {}: {err}", path.display()))),
    }
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

    fn args(address: Option<&str>, data_dir: Option<&Path>) -> Overrides {
        Overrides {
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
    fn unreadable_files_are_setup_errors() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the token file should be cannot be read as one.
        std::fs::create_dir(dir.path().join(TOKEN_FILE)).unwrap();
        let err = Endpoint::resolve(&args(Some("h:1"), Some(dir.path())), &env(&[])).unwrap_err();
        assert!(err.0.contains("cannot read"), "{err}");
    }

    #[test]
    fn an_address_that_is_not_one_says_where_it_came_from() {
        let err = Endpoint::resolve(&args(Some("h:x"), Some(Path::new("/nonexistent"))), &env(&[]))
            .unwrap_err();
        assert!(err.0.contains("--address") && err.0.contains("\"h:x\""), "{err}");
    }
}
