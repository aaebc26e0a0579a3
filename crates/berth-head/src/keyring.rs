//! Who may do what: tokens by role ([`Role`]), checked on every REST call, dashboard fragment
//! and agent call.
//!
//! On its first start the head makes two tokens and writes their secrets, mode 0600, where
//! the CLI and agents on its machine find them: `DATA_DIR/token` (admin: the CLI's) and
//! `DATA_DIR/agent-token` (agent: machines join with it). More are made and revoked through
//! `berth token` (`/api/v1/tokens`); those are kept in `DATA_DIR/tokens.json` as SHA-256
//! hashes only, so reading that file gives no one a token. A secret is 32 random bytes, so a
//! plain hash is enough (no password stretching: there is nothing to guess). Comparisons of
//! hashes take the same time wherever they differ.
//!
//! The hashes of every token are also kept in the store (`Meta` key `keyring`), so a standby
//! head that takes over on another machine knows the tokens of the head it replaces: the
//! agents and CLIs keep working. A head merges the stored list at start (another head's
//! first-start tokens become tokens it may revoke, named `admin-<hash prefix>`) and writes the
//! list back with every change; the secrets stay in the data directories.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use berth_api::local::write_private;
use berth_api::rest::{Role, TokenInfo};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::token::Token;

/// The file of tokens made through the API (hashes only).
pub const TOKENS_FILE: &str = "tokens.json";
pub use berth_api::local::AGENT_TOKEN_FILE;
/// The IDs of the two first-start tokens.
const ADMIN_ID: &str = "admin";
const AGENT_ID: &str = "agent";
/// The longest name a token may have.
pub const MAX_NAME_LEN: usize = 128;

/// A token as kept: its hash, never its secret.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    id: String,
    name: String,
    role: Role,
    created_at_ms: u64,
    /// SHA-256 of the secret, hex.
    sha256: String,
}

impl Entry {
    fn info(&self) -> TokenInfo {
        TokenInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            role: self.role,
            created_at_ms: self.created_at_ms,
        }
    }
}

fn hash(secret: &str) -> String {
    lower_hex(&Sha256::digest(secret.as_bytes()))
}

/// `bytes` as lowercase hex digits (one allocation: this runs for every request's token and
/// every work key).
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

/// Equal in time independent of where the strings differ.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    // ThreadRng is a CSPRNG seeded from the OS.
    rand::rng().fill_bytes(&mut bytes);
    lower_hex(&bytes)
}

/// Why a call was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A token the head does not know (never made, or revoked).
    Unknown,
}

/// Why a token could not be made or revoked.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    /// A bad name (too long, control characters).
    #[error("name: {0}")]
    Name(String),
    /// No token with this ID.
    #[error("no token {0}")]
    NotFound(String),
    /// A first-start token: rotate it by deleting its file and restarting the head.
    #[error(
        "{0} is the head's first-start token; to replace it, delete DATA_DIR/{1} and restart \
         the head"
    )]
    Bootstrap(String, &'static str),
    /// `tokens.json` could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// The head's tokens; cheap to clone (shared by REST, the dashboard and the agent protocol).
#[derive(Clone, Debug)]
pub struct Keyring {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Debug)]
struct Inner {
    /// The first-start tokens, from their files or the configuration.
    bootstrap: Vec<Entry>,
    /// Tokens made through the API.
    made: Vec<Entry>,
    /// Where `made` is kept; `None` when the head was given its tokens (tests).
    path: Option<PathBuf>,
}

/// The keyring and the two first-start secrets a head reports.
pub struct Loaded {
    /// The keyring.
    pub keyring: Keyring,
    /// The admin secret.
    pub admin: Token,
    /// The agent secret.
    pub agent: Token,
    /// True when the admin token file was created now.
    pub created: bool,
}

/// The entries of the two first-start tokens.
fn bootstrap(admin: &str, agent: &str) -> Vec<Entry> {
    let entry = |id: &str, role, secret: &str| Entry {
        id: id.to_string(),
        name: String::new(),
        role,
        created_at_ms: 0,
        sha256: hash(secret),
    };
    vec![entry(ADMIN_ID, Role::Admin, admin), entry(AGENT_ID, Role::Agent, agent)]
}

/// Reads `dir/name`, or creates it with a new secret (mode 0600); returns it and whether it
/// was created.
fn load_or_create_secret(dir: &Path, name: &str) -> std::io::Result<(String, bool)> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let text = text.trim().to_string();
            if text.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} is empty; delete it to have a new token made", path.display()),
                ));
            }
            Ok((text, false))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
            let secret = random_secret();
            write_private(&path, format!("{secret}\n").as_bytes())?;
            Ok((secret, true))
        }
        Err(err) => Err(err),
    }
}

impl Keyring {
    /// The head's tokens: the admin secret is `admin` when given, else `DATA_DIR/token`
    /// (created on the first start); the agent secret likewise from `agent` or
    /// `DATA_DIR/agent-token`; made tokens from `DATA_DIR/tokens.json`.
    pub fn load(dir: &Path, admin: Option<&str>, agent: Option<&str>) -> std::io::Result<Loaded> {
        // A head given its admin token (tests, embedding) writes no secret file.
        let (admin, agent, created) = match admin {
            Some(admin) => {
                (admin.to_string(), agent.map_or_else(random_secret, str::to_string), false)
            }
            None => {
                let (admin, created) = load_or_create_secret(dir, berth_api::local::TOKEN_FILE)?;
                let agent = match agent {
                    Some(agent) => agent.to_string(),
                    None => load_or_create_secret(dir, AGENT_TOKEN_FILE)?.0,
                };
                (admin, agent, created)
            }
        };
        if same(&hash(&admin), &hash(&agent)) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the admin and agent tokens must differ",
            ));
        }
        let path = dir.join(TOKENS_FILE);
        let made: Vec<Entry> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} is not a token list: {e}", path.display()),
                )
            })?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(err) => return Err(err),
        };
        let inner = Inner { bootstrap: bootstrap(&admin, &agent), made, path: Some(path) };
        Ok(Loaded {
            keyring: Keyring { inner: Arc::new(RwLock::new(inner)) },
            admin: Token::new(admin),
            agent: Token::new(agent),
            created,
        })
    }

    /// A keyring of the two first-start secrets only, kept in memory (made tokens are not
    /// saved): for tests and embedding.
    pub fn in_memory(admin: &str, agent: &str) -> Keyring {
        let inner = Inner { bootstrap: bootstrap(admin, agent), made: Vec::new(), path: None };
        Keyring { inner: Arc::new(RwLock::new(inner)) }
    }

    /// The role of the token an `Authorization` header carries.
    pub fn check(&self, header: Option<&str>) -> Result<Role, Refusal> {
        let header = header.ok_or(Refusal::Missing)?;
        let mut parts = header.splitn(2, ' ');
        let secret = match (parts.next(), parts.next()) {
            (Some(scheme), Some(secret)) if scheme.eq_ignore_ascii_case("bearer") => secret.trim(),
            _ => return Err(Refusal::Unknown),
        };
        let presented = hash(secret);
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        // Every entry is compared, so the time taken does not tell which one matched.
        let mut role = None;
        for entry in inner.bootstrap.iter().chain(&inner.made) {
            if same(&entry.sha256, &presented) {
                role = Some(entry.role);
            }
        }
        role.ok_or(Refusal::Unknown)
    }

    /// Every token, first-start ones first, then by creation.
    pub fn list(&self) -> Vec<TokenInfo> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.bootstrap.iter().chain(&inner.made).map(Entry::info).collect()
    }

    /// Makes a token; returns it and its secret (shown once, never stored).
    pub fn create(
        &self,
        role: Role,
        name: &str,
        now_ms: u64,
    ) -> Result<(TokenInfo, String), KeyringError> {
        if name.chars().count() > MAX_NAME_LEN {
            return Err(KeyringError::Name(format!("at most {MAX_NAME_LEN} characters")));
        }
        if let Some(c) = berth_api::text::hidden_character(name) {
            return Err(KeyringError::Name(berth_api::text::hidden_character_rule(c)));
        }
        let secret = random_secret();
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let id = loop {
            let candidate = format!("tok-{}", &random_secret()[..8]);
            if !inner.made.iter().any(|e| e.id == candidate) {
                break candidate;
            }
        };
        let entry = Entry {
            id,
            name: name.to_string(),
            role,
            created_at_ms: now_ms,
            sha256: hash(&secret),
        };
        inner.made.push(entry.clone());
        if let Err(err) = save(&inner) {
            inner.made.pop();
            return Err(err);
        }
        Ok((entry.info(), secret))
    }

    /// Every token's hash, for the store: this head's first-start tokens, then the others.
    pub fn stored(&self) -> StoredKeyring {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        StoredKeyring(inner.bootstrap.iter().chain(&inner.made).cloned().collect())
    }

    /// Takes in the tokens the store lists (those of the heads before this one): every token
    /// this head does not know becomes one of its made tokens, under an ID of its own when the
    /// stored one is taken. The store's list is the cluster's: a token made on this head and
    /// not in it (made on a head whose store was another) is kept.
    pub fn merge(&self, stored: &StoredKeyring) -> Result<(), KeyringError> {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let own: Vec<String> = inner.bootstrap.iter().map(|e| e.sha256.clone()).collect();
        let mut made: Vec<Entry> = Vec::new();
        for entry in stored.0.iter().chain(&inner.made) {
            if own.contains(&entry.sha256) || made.iter().any(|e| e.sha256 == entry.sha256) {
                continue;
            }
            let mut entry = entry.clone();
            let taken = |id: &str, made: &[Entry]| {
                id == ADMIN_ID || id == AGENT_ID || made.iter().any(|e| e.id == id)
            };
            if taken(&entry.id, &made) {
                entry.id = format!("{}-{}", entry.id, &entry.sha256[..8]);
            }
            made.push(entry);
        }
        inner.made = made;
        save(&inner)
    }

    /// Revokes token `id`: from now on every call with it is refused (an agent stream open
    /// already runs until it reconnects).
    pub fn revoke(&self, id: &str) -> Result<TokenInfo, KeyringError> {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = inner.bootstrap.iter().find(|e| e.id == id) {
            let file = if entry.role == Role::Agent {
                AGENT_TOKEN_FILE
            } else {
                berth_api::local::TOKEN_FILE
            };
            return Err(KeyringError::Bootstrap(id.to_string(), file));
        }
        let position = inner
            .made
            .iter()
            .position(|e| e.id == id)
            .ok_or_else(|| KeyringError::NotFound(id.to_string()))?;
        let removed = inner.made.remove(position);
        if let Err(err) = save(&inner) {
            inner.made.insert(position, removed);
            return Err(err);
        }
        Ok(removed.info())
    }
}

/// Writes the made tokens (hashes) to `tokens.json`.
/// The token hashes as the store keeps them (`Meta` key [`KEYRING_KEY`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StoredKeyring(Vec<Entry>);

/// The `Meta` key of the stored keyring.
pub const KEYRING_KEY: &str = "keyring";

fn save(inner: &Inner) -> Result<(), KeyringError> {
    let Some(path) = &inner.path else { return Ok(()) };
    let bytes = serde_json::to_vec_pretty(&inner.made).expect("entries serialize");
    write_private(path, &bytes)
        .map_err(|source| KeyringError::Write { path: path.display().to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(secret: &str) -> String {
        format!("Bearer {secret}")
    }

    #[test]
    fn a_head_that_merges_the_stored_list_knows_the_tokens_of_the_head_before() {
        let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = Keyring::load(dir_a.path(), None, None).unwrap();
        let (_, read_secret) = a.keyring.create(Role::Read, "grafana", 7).unwrap();
        let b = Keyring::load(dir_b.path(), None, None).unwrap();
        assert_eq!(b.keyring.check(Some(&bearer(a.agent.as_str()))), Err(Refusal::Unknown));
        b.keyring.merge(&a.keyring.stored()).unwrap();
        assert_eq!(b.keyring.check(Some(&bearer(a.agent.as_str()))), Ok(Role::Agent));
        assert_eq!(b.keyring.check(Some(&bearer(a.admin.as_str()))), Ok(Role::Admin));
        assert_eq!(b.keyring.check(Some(&bearer(&read_secret))), Ok(Role::Read));
        assert_eq!(b.keyring.check(Some(&bearer(b.admin.as_str()))), Ok(Role::Admin));
        // The other head's first-start tokens get IDs of their own here, and may be revoked.
        let ids: Vec<String> = b.keyring.list().into_iter().map(|t| t.id).collect();
        assert_eq!(ids.len(), 5, "{ids:?}");
        let other_admin = ids.iter().find(|i| i.starts_with("admin-")).unwrap().clone();
        b.keyring.revoke(&other_admin).unwrap();
        assert_eq!(b.keyring.check(Some(&bearer(a.admin.as_str()))), Err(Refusal::Unknown));
        // Back on the first head: its own stay its own; the list round-trips.
        a.keyring.merge(&b.keyring.stored()).unwrap();
        assert_eq!(a.keyring.check(Some(&bearer(a.admin.as_str()))), Ok(Role::Admin));
        assert_eq!(a.keyring.check(Some(&bearer(b.agent.as_str()))), Ok(Role::Agent));
        let ids: Vec<String> = a.keyring.list().into_iter().map(|t| t.id).collect();
        assert!(ids.contains(&"admin".to_string()) && ids.len() == 5, "{ids:?}");
    }

    #[test]
    fn first_start_writes_both_secrets_private_and_roles_follow_them() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = Keyring::load(dir.path(), None, None).unwrap();
        assert!(loaded.created);
        for file in [berth_api::local::TOKEN_FILE, AGENT_TOKEN_FILE] {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(dir.path().join(file)).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{file}");
            }
        }
        let k = &loaded.keyring;
        assert_eq!(k.check(Some(&bearer(loaded.admin.as_str()))), Ok(Role::Admin));
        assert_eq!(k.check(Some(&bearer(loaded.agent.as_str()))), Ok(Role::Agent));
        assert_eq!(k.check(Some("Bearer nope")), Err(Refusal::Unknown));
        assert_eq!(k.check(Some(loaded.admin.as_str())), Err(Refusal::Unknown), "no scheme");
        assert_eq!(k.check(None), Err(Refusal::Missing));
        // A restart reads the same secrets.
        let again = Keyring::load(dir.path(), None, None).unwrap();
        assert!(!again.created);
        assert_eq!(again.admin.as_str(), loaded.admin.as_str());
        assert_eq!(again.agent.as_str(), loaded.agent.as_str());
    }

    #[test]
    fn made_tokens_are_stored_hashed_listed_without_secrets_and_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = Keyring::load(dir.path(), None, None).unwrap();
        let (info, secret) = loaded.keyring.create(Role::Read, "grafana", 7).unwrap();
        assert_eq!(loaded.keyring.check(Some(&bearer(&secret))), Ok(Role::Read));
        let stored = std::fs::read_to_string(dir.path().join(TOKENS_FILE)).unwrap();
        assert!(!stored.contains(&secret), "the secret is not stored");
        assert!(stored.contains(&hash(&secret)));
        // Another head start on the directory knows it.
        let again = Keyring::load(dir.path(), None, None).unwrap();
        assert_eq!(again.keyring.check(Some(&bearer(&secret))), Ok(Role::Read));
        let ids: Vec<String> = again.keyring.list().into_iter().map(|t| t.id).collect();
        assert_eq!(ids, ["admin", "agent", info.id.as_str()]);
        assert_eq!(again.keyring.revoke(&info.id).unwrap().name, "grafana");
        assert_eq!(again.keyring.check(Some(&bearer(&secret))), Err(Refusal::Unknown));
        assert!(matches!(again.keyring.revoke(&info.id), Err(KeyringError::NotFound(_))));
        assert!(matches!(again.keyring.revoke("admin"), Err(KeyringError::Bootstrap(..))));
        assert!(matches!(
            again.keyring.create(Role::Admin, &"x".repeat(129), 0),
            Err(KeyringError::Name(_))
        ));
    }
}
