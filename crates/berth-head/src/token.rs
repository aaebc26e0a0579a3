//! The cluster token: created on first start in `DATA_DIR/token` (mode 0600), presented by
//! agents and by every REST call except `GET /healthz`.

use std::io::Write;
use std::path::Path;

use rand::RngCore;

/// Bytes of randomness in a token (printed as hex: 64 characters).
const TOKEN_BYTES: usize = 32;

/// A cluster token.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// The token as given (for tests and for `berth up`'s printout).
    pub fn new(text: impl Into<String>) -> Token {
        Token(text.into())
    }

    /// The token text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when `presented` is this token. Compares in time independent of where they
    /// differ, so the answer's timing does not leak a prefix.
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// True when an `Authorization` header value carries this token (`Bearer <token>`).
    pub fn matches_header(&self, header: &str) -> bool {
        let mut parts = header.splitn(2, ' ');
        match (parts.next(), parts.next()) {
            (Some(scheme), Some(token)) if scheme.eq_ignore_ascii_case("bearer") => {
                self.matches(token.trim())
            }
            _ => false,
        }
    }

    /// Reads `dir/token`, or creates it (random, mode 0600) when missing. Returns the token and
    /// whether it was created now.
    pub fn load_or_create(dir: &Path) -> std::io::Result<(Token, bool)> {
        let path = dir.join(berth_api::local::TOKEN_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let text = text.trim().to_string();
                if text.is_empty() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{} is empty; delete it to have a new token made", path.display()),
                    ));
                }
                Ok((Token(text), false))
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)?;
                let mut bytes = [0u8; TOKEN_BYTES];
                // ThreadRng is a CSPRNG seeded from the OS.
                rand::rng().fill_bytes(&mut bytes);
                let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    options.mode(0o600);
                }
                let mut file = options.open(&path)?;
                file.write_all(text.as_bytes())?;
                file.write_all(b"\n")?;
                file.sync_all()?;
                Ok((Token(text), true))
            }
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_with_mode_0600_and_reread() {
        let dir = tempfile::tempdir().unwrap();
        let (first, created) = Token::load_or_create(dir.path()).unwrap();
        assert!(created);
        assert_eq!(first.as_str().len(), 64);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("token")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (again, created) = Token::load_or_create(dir.path()).unwrap();
        assert!(!created);
        assert_eq!(again.as_str(), first.as_str());
    }

    #[test]
    fn header_must_be_bearer_and_exact() {
        let token = Token::new("abc");
        assert!(token.matches_header("Bearer abc"));
        assert!(token.matches_header("bearer abc"));
        assert!(!token.matches_header("Bearer abd"));
        assert!(!token.matches_header("Bearer ab"));
        assert!(!token.matches_header("Basic abc"));
        assert!(!token.matches_header("abc"));
    }
}
