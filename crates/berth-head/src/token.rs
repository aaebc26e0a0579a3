//! A token's secret, as the head reports it to whoever started it (`berth up` prints the admin
//! one; local agents use the agent one). Who may do what with which token is `keyring.rs`.

/// A token's secret. Its `Debug` hides it.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// The secret as given.
    pub fn new(text: impl Into<String>) -> Token {
        Token(text.into())
    }

    /// The secret.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}
