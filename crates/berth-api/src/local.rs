//! Where a local head keeps what the CLI needs to find it: the data directory, the token and
//! the address files.

use std::path::{Path, PathBuf};

/// The head's default port (REST, dashboard, `/metrics` and the agent protocol share it).
pub const DEFAULT_PORT: u16 = 8780;

/// The environment variable naming the data directory.
pub const DATA_DIR_ENV: &str = "BERTH_DATA_DIR";
/// The environment variable holding the cluster token (wins over the token file).
pub const TOKEN_ENV: &str = "BERTH_TOKEN";
/// The environment variable holding the head's address (`HOST:PORT`).
pub const ADDRESS_ENV: &str = "BERTH_ADDRESS";

/// The token file inside the data directory (mode 0600).
pub const TOKEN_FILE: &str = "token";
/// The file in the data directory holding the agent token (machines join with it).
pub const AGENT_TOKEN_FILE: &str = "agent-token";
/// The environment variable an agent reads its token from.
pub const AGENT_TOKEN_ENV: &str = "BERTH_AGENT_TOKEN";
/// The file in which a running head writes the address it serves on (`127.0.0.1:8780`).
pub const ADDRESS_FILE: &str = "head-address";

/// The data directory: `$BERTH_DATA_DIR`, else `$HOME/.berth`, else `./.berth`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(DATA_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Path::new(&home).join(".berth"),
        None => PathBuf::from(".berth"),
    }
}
