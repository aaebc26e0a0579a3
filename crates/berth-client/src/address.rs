//! What a head's address and API paths look like: [`normalize_address`], [`is_https`],
//! [`api_path`].

use berth_api::local::DEFAULT_PORT;
use berth_api::rest::API_PREFIX;

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

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn paths_are_encoded() {
        assert_eq!(api_path(&["actors", "actor-12"]), "/api/v1/actors/actor-12");
        assert_eq!(api_path(&["nodes", "fe80::1", "taints"]), "/api/v1/nodes/fe80%3A%3A1/taints");
        assert_eq!(api_path(&["nodes", "a b/c"]), "/api/v1/nodes/a%20b%2Fc");
    }
}
