//! `Host` and `Origin` checks: the host named by an authority.

use http::HeaderMap;

use crate::protocol::McpError;

/// DNS-rebinding protection: `Host` and `Origin` must name one of `allowed` (any, when it is
/// empty). Both are parsed strictly ([`authority_host`], [`origin_host`]); anything that is
/// not a plain `host[:port]` (userinfo, a non-numeric port, stray characters) is refused.
pub(super) fn check_host(allowed: &[String], headers: &HeaderMap) -> Result<(), McpError> {
    if allowed.is_empty() {
        return Ok(());
    }
    let ok = |name: Option<&str>| {
        name.is_some_and(|n| allowed.iter().any(|a| a.eq_ignore_ascii_case(n)))
    };
    if let Some(host) = headers.get(http::header::HOST)
        && !ok(host.to_str().ok().and_then(authority_host))
    {
        return Err(McpError::invalid_request("Host not allowed").with_status(403));
    }
    if let Some(origin) = headers.get(http::header::ORIGIN)
        && !ok(origin.to_str().ok().and_then(origin_host))
    {
        return Err(McpError::invalid_request("Origin not allowed").with_status(403));
    }
    Ok(())
}

/// The host of a `host[:port]` authority (a `Host` header, or an `Origin`'s): a name or IPv4
/// address of letters, digits, `-`, `.`, `_` and `~`, or an IPv6 literal in brackets (kept);
/// the port, if any, 1 to 5 digits. `None` for anything else — userinfo (`localhost:1@evil`),
/// a port that is not a number (`localhost:evil.example`), an empty host, spaces, a path.
pub(super) fn authority_host(authority: &str) -> Option<&str> {
    let end = if authority.starts_with('[') {
        let close = authority.find(']')?;
        let inner = &authority[1..close];
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return None;
        }
        close + 1
    } else {
        let end = authority.find(':').unwrap_or(authority.len());
        let name = &authority[..end];
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
        {
            return None;
        }
        end
    };
    let (host, rest) = authority.split_at(end);
    match rest.strip_prefix(':') {
        None if rest.is_empty() => Some(host),
        Some(port) if (1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit()) => {
            Some(host)
        }
        _ => None,
    }
}

/// The host of an `Origin` value, which is `scheme://host[:port]` and nothing more (RFC 6454):
/// no path, no userinfo; `null` and anything malformed give `None`.
pub(super) fn origin_host(origin: &str) -> Option<&str> {
    let (scheme, authority) = origin.split_once("://")?;
    let mut b = scheme.bytes();
    let scheme_ok = b.next().is_some_and(|c| c.is_ascii_alphabetic())
        && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return None;
    }
    authority_host(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(authority_host("localhost:8787"), Some("localhost"));
        assert_eq!(authority_host("[::1]:80"), Some("[::1]"));
        assert_eq!(authority_host("[::1]"), Some("[::1]"));
        assert_eq!(authority_host("127.0.0.1"), Some("127.0.0.1"));
        assert_eq!(authority_host("mcp.test"), Some("mcp.test"));
    }

    #[test]
    fn malformed_authorities_name_no_host() {
        for bad in [
            "",
            ":80",
            "localhost:",
            "localhost:evil.example",
            "localhost:1@evil.example",
            "user@localhost",
            "localhost:80:80",
            "localhost:123456",
            "localhost:8o",
            "local host",
            "localhost/x",
            "[::1",
            "[]:80",
            "[::1]x",
            "[::1]:evil",
            "[::1@evil]",
        ] {
            assert_eq!(authority_host(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn origins_are_parsed_whole() {
        assert_eq!(origin_host("http://localhost:8787"), Some("localhost"));
        assert_eq!(origin_host("https://127.0.0.1"), Some("127.0.0.1"));
        assert_eq!(origin_host("http://[::1]:3000"), Some("[::1]"));
        assert_eq!(origin_host("vscode-webview://abc"), Some("abc"));
        for bad in [
            "null",
            "localhost",
            "http://localhost:evil.example",
            "http://localhost:1@evil.example",
            "http://user@localhost",
            "http://localhost/path",
            "http://localhost:80/",
            "http://",
            "://localhost",
            "1http://localhost",
            "ht tp://localhost",
        ] {
            assert_eq!(origin_host(bad), None, "{bad:?}");
        }
    }
}
