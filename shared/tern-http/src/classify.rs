//! What a failed send was: its error class (whose failure, for the endpoint's health),
//! and whether HTTP/2 guarantees the receiver never processed it.

use std::error::Error as StdError;

use tern_core::outcome::ErrorClass;

use crate::dns::{DnsError, DnsFailure};
use crate::guard::BlockedError;
use crate::transport::{ConnectError, is_local_resource};

/// The innermost error's text.
pub(crate) fn error_detail(e: &(dyn StdError + 'static)) -> String {
    let mut detail = e.to_string();
    let mut source = e.source();
    while let Some(err) = source {
        detail = err.to_string();
        source = err.source();
    }
    detail
}

/// The class of a failed lookup, by whose failure it was.
fn dns_class(err: &(dyn StdError + 'static)) -> ErrorClass {
    match DnsError::failure_of(err) {
        DnsFailure::NotFound => ErrorClass::Dns,
        DnsFailure::Temporary => ErrorClass::DnsTemporary,
        DnsFailure::LocalResource => ErrorClass::LocalResource,
    }
}

/// The class of a failed TLS handshake: ours ([`ErrorClass::TlsConfig`]) when rustls
/// failed on our side of it (our clock, our random source, our crypto, a client
/// configuration it refuses), else the receiver's ([`ErrorClass::Tls`]): its certificate,
/// its messages, its alerts, protocols it does not support.
fn tls_class(err: &rustls::Error) -> ErrorClass {
    match err {
        rustls::Error::FailedToGetCurrentTime
        | rustls::Error::FailedToGetRandomBytes
        | rustls::Error::EncryptError
        | rustls::Error::BadMaxFragmentSize
        | rustls::Error::InconsistentKeys(_)
        | rustls::Error::UnsupportedNameType
        | rustls::Error::General(_) => ErrorClass::TlsConfig,
        _ => ErrorClass::Tls,
    }
}

/// Maps a client error to an error class by walking its source chain.
pub(crate) fn classify_error(e: &hyper_util::client::legacy::Error) -> (ErrorClass, String) {
    let mut source: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(c) = err.downcast_ref::<ConnectError>() {
            return match c {
                ConnectError::Blocked(b) => (ErrorClass::Blocked, b.to_string()),
                ConnectError::Dns(d) => (dns_class(d.as_ref()), d.to_string()),
                ConnectError::Connect { .. } => (ErrorClass::Connect, c.to_string()),
                ConnectError::LocalResource { .. } => (ErrorClass::LocalResource, c.to_string()),
                ConnectError::Tls(io) => match rustls_error(io) {
                    Some(t) => (tls_class(t), t.to_string()),
                    None => (ErrorClass::Tls, c.to_string()),
                },
                ConnectError::BadUri(_) => (ErrorClass::Blocked, c.to_string()),
            };
        }
        if let Some(b) = err.downcast_ref::<BlockedError>() {
            return (ErrorClass::Blocked, b.to_string());
        }
        if let Some(d) = err.downcast_ref::<DnsError>() {
            return (dns_class(d), d.to_string());
        }
        if let Some(t) = rustls_error(err) {
            return (tls_class(t), t.to_string());
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && is_local_resource(io)
        {
            return (ErrorClass::LocalResource, io.to_string());
        }
        source = err.source();
    }
    let class = if e.is_connect() {
        ErrorClass::Connect
    } else {
        ErrorClass::Protocol
    };
    (class, error_detail(e))
}

/// [`classify_error`] of a send that failed on connection `conn`: when the connection's
/// read had failed in TLS (a receiver refusing our client certificate in TLS 1.3, whose
/// alert comes after the handshake) and the client reports only that the connection
/// closed, the TLS error is what happened.
pub(crate) fn classify_failure(
    e: &hyper_util::client::legacy::Error,
    conn: Option<&crate::transport::ConnState>,
) -> (ErrorClass, String) {
    let (class, detail) = classify_error(e);
    match conn.and_then(crate::transport::ConnState::tls_failure) {
        Some(t) if class == ErrorClass::Protocol => (tls_class(&t), t.to_string()),
        _ => (class, detail),
    }
}

/// The rustls error inside `err`, if any. `io::Error::source()` skips the error it wraps
/// (it returns the wrapped error's own source), and the TLS stack nests io errors, so
/// each `io::Error` is unwrapped through `get_ref` until something else appears.
pub(crate) fn rustls_error<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut current = err;
    loop {
        if let Some(t) = current.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        let io = current.downcast_ref::<std::io::Error>()?;
        current = io.get_ref()?;
    }
}

/// How HTTP/2 said a request was not processed (RFC 9113 §8.7), so that sending it again
/// cannot deliver it twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unprocessed {
    /// The receiver reset the stream with `REFUSED_STREAM` (RFC 9113 §8.7: "the stream
    /// was closed prior to any processing"). A fresh stream may go on the same connection.
    Refused,
    /// The receiver sent a graceful `GOAWAY` (`NO_ERROR`) whose last-stream-id is below
    /// this request's stream (RFC 9113 §6.8), or the connection had already received one
    /// when the request would have opened its stream. Needs a new connection.
    GoAway,
}

/// Whether `e` is a request the receiver provably did not process.
///
/// A `GOAWAY` with an error code is not counted: the h2 library then fails every open
/// stream with it, processed or not, so it proves nothing about this one; with `NO_ERROR`
/// it fails only the streams above the last-stream-id (and refuses new ones), while those
/// below finish or fail with another error.
pub(crate) fn unprocessed(e: &(dyn StdError + 'static)) -> Option<Unprocessed> {
    let mut source = Some(e);
    while let Some(err) = source {
        if let Some(h2) = err.downcast_ref::<h2::Error>() {
            if !h2.is_remote() {
                return None;
            }
            return match h2.reason() {
                Some(h2::Reason::REFUSED_STREAM) if h2.is_reset() => Some(Unprocessed::Refused),
                Some(h2::Reason::NO_ERROR) if h2.is_go_away() => Some(Unprocessed::GoAway),
                _ => None,
            };
        }
        source = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_rustls_errors_inside_nested_io_errors() {
        let tls = || rustls::Error::General("bad handshake".into());
        let direct = tls();
        assert!(rustls_error(&direct).is_some());
        let nested =
            std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, tls()));
        assert_eq!(
            rustls_error(&nested).map(ToString::to_string),
            Some(tls().to_string())
        );
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(rustls_error(&plain).is_none());
    }

    #[test]
    fn tls_failures_on_our_side_are_ours() {
        for ours in [
            rustls::Error::FailedToGetCurrentTime,
            rustls::Error::FailedToGetRandomBytes,
            rustls::Error::EncryptError,
            rustls::Error::General("crypto provider failed".into()),
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch),
        ] {
            assert_eq!(tls_class(&ours), ErrorClass::TlsConfig, "{ours}");
        }
        for theirs in [
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
            rustls::Error::InvalidCertificate(rustls::CertificateError::Expired),
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName),
            rustls::Error::NoCertificatesPresented,
            rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure),
            rustls::Error::PeerIncompatible(rustls::PeerIncompatible::Tls12NotOfferedOrEnabled),
            rustls::Error::DecryptError,
        ] {
            assert_eq!(tls_class(&theirs), ErrorClass::Tls, "{theirs}");
        }
    }

    #[test]
    fn only_refused_streams_and_graceful_goaways_from_the_receiver_are_unprocessed() {
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "closed");
        assert_eq!(unprocessed(&io), None);
        let local: h2::Error = h2::Reason::REFUSED_STREAM.into();
        assert_eq!(
            unprocessed(&local),
            None,
            "a reason we produced is not the receiver's"
        );
    }
}
