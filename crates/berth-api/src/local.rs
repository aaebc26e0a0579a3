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

/// Creates `dir` and its missing parents private to its owner (mode 0700): a data directory
/// holds the store, tokens, logs and the work's environment, none of it for other users of the
/// machine. An existing `dir` is tightened too (its existing parents are left alone).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    set_mode(dir, 0o700)
}

/// Makes an existing file private to its owner (mode 0600).
pub fn private_file(path: &Path) -> std::io::Result<()> {
    set_mode(path, 0o600)
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> std::io::Result<()> {
    Ok(())
}

/// Opens `path` for writing, created with mode 0600 (an existing file is tightened to it):
/// `append` adds to its end, else it is truncated.
pub fn open_private(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true);
    if append {
        options.append(true);
    } else {
        options.write(true).truncate(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(path)?;
    private_file(path)?;
    Ok(file)
}

/// Writes `bytes` to `path` readable by its owner only, replacing it whole: written to
/// `PATH.new`, synced, then renamed over `path`, so a crash leaves the old file or the new.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let staging = path.with_extension("new");
    let mut file = open_private(&staging, false)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&staging, path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn private_files_and_directories_are_their_owners_alone() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data/inner");
        private_dir(&dir).unwrap();
        assert_eq!((mode(&root.path().join("data")), mode(&dir)), (0o700, 0o700));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let file = dir.join("secret");
        write_private(&file, b"one").unwrap();
        assert_eq!((mode(&file), std::fs::read(&file).unwrap()), (0o600, b"one".to_vec()));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        use std::io::Write;
        open_private(&file, true).unwrap().write_all(b" two").unwrap();
        assert_eq!((mode(&file), std::fs::read(&file).unwrap()), (0o600, b"one two".to_vec()));
    }
}
