//! Local mode answers only requests addressed to this machine by its loopback name.
//!
//! The local API, portal and console listen on 127.0.0.1 only, but a web page the
//! operator opens can still reach them through DNS rebinding: `evil.example` resolves to
//! the attacker's server first, then to 127.0.0.1, and the page's script talks to the
//! local server as `evil.example:8791` with the published local keys (`testing`) or reads
//! the console's pages. The browser always sends the name it used as `Host`, so a server
//! that answers only a loopback `Host` (RFC 9110 §7.2) closes it: `127.0.0.1`,
//! `localhost` and `[::1]`, each with or without a port. Everything else gets a 403
//! before any route runs.

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The answer's text to a request with any other `Host`.
pub const REFUSED: &str = "this local server answers only requests to a loopback host (127.0.0.1, localhost or [::1], with its port)";

/// True when `host` (a `Host` header's value) names this machine's loopback interface:
/// `127.0.0.1`, `localhost` (any case) or `[::1]`, optionally followed by `:<port>` (1 to
/// 5 digits). A name that merely resolves to 127.0.0.1 (the rebinding attack) is not.
pub fn is_loopback_host(host: &str) -> bool {
    let (name, port) = match host.strip_prefix("[::1]") {
        Some(rest) => ("[::1]", rest),
        None => host.find(':').map_or((host, ""), |i| host.split_at(i)),
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok && (name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost") || name == "[::1]")
}

/// Middleware (`axum::middleware::from_fn`): passes a request whose `Host` is loopback
/// ([`is_loopback_host`]), answers 403 [`REFUSED`] to any other, and to one without a
/// `Host` (an HTTP/1.1 request must have one, RFC 9112 §3.2). Without a `Host`, the URI's
/// authority is checked instead (HTTP/2's `:authority`, should the server ever speak it:
/// today `axum::serve` here serves HTTP/1.1 only).
pub async fn only_loopback_host(request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(ToString::to_string));
    let loopback = host.as_deref().is_some_and(is_loopback_host);
    if loopback {
        next.run(request).await
    } else {
        (StatusCode::FORBIDDEN, REFUSED).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_pass() {
        for good in [
            "127.0.0.1",
            "127.0.0.1:8791",
            "localhost",
            "LocalHost:8790",
            "[::1]",
            "[::1]:8791",
        ] {
            assert!(is_loopback_host(good), "{good}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:8791",
            "127.0.0.1.nip.io:8791",
            "localhost.evil.example",
            "127.0.0.2:8791",
            "0.0.0.0:8791",
            "[::1]x",
            "[::1]:",
            "127.0.0.1:",
            "127.0.0.1:123456",
            "127.0.0.1:80:80",
            "127.0.0.1:8a",
            "[::ffff:127.0.0.1]:8791",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
