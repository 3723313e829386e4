//! The connections attempts travel on: a connector that resolves through the SSRF guard,
//! connects over TCP and, for `https`, verifies TLS; and a tap around every connection
//! that lets the client tell what the receiver actually sent when hyper reports an error.
//!
//! Why a tap: hyper reports a connection as one error, but the receiver's answer may
//! already be there. Three cases matter (issue 11):
//! - a response head hyper refuses to parse (too many or malformed headers) still began
//!   with a status line; the tap keeps the first [`HEAD_CAPTURE_BYTES`] of each response so
//!   the status can be recovered;
//! - a receiver that answers early (410 before reading a large body) and closes makes the
//!   rest of the body write fail with a reset, although its answer sits in the socket's
//!   receive buffer; the tap swallows writes after a reset so hyper goes on to read it;
//! - a pooled keep-alive connection the receiver closed as the next request arrived
//!   fails with no response byte; the tap tells whether the connection had completed a
//!   response before (reused) and whether any byte of this response arrived.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::dns::DnsError;
use crate::guard::{BlockedError, DestinationPolicy, HostLookup, ResolveError, resolve_checked};

/// Bytes of each response head kept by the tap to recover the status line (and
/// `Retry-After` / `Location` when they are in it) when hyper cannot parse the head: 8 KiB.
/// Ample for a status line; the bound keeps memory flat per connection.
pub const HEAD_CAPTURE_BYTES: usize = 8 * 1024;

/// True when a socket call failed because this host ran out of something, not because of
/// the peer: `EMFILE` / `ENFILE` (file descriptors, per process / system), `EADDRNOTAVAIL`
/// (no free ephemeral port or local address), `ENOBUFS` (socket buffers), `ENOMEM`
/// (kernel memory) (connect(2), socket(2)).
pub fn is_local_resource(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::EADDRNOTAVAIL | libc::ENOBUFS | libc::ENOMEM)
    )
}

tokio::task_local! {
    /// The deadline of the attempt whose request is being sent, for the connector (which
    /// hyper calls with the URI alone): it bounds the lookup and each address's connect.
    pub(crate) static ATTEMPT_DEADLINE: Instant;
}

/// Time before the attempt's deadline at which a lookup still unanswered is given up
/// as our resolver's failure (`dns_temporary`) rather than left to end as the attempt's
/// `timeout`: 50 ms, ample for the error to reach the client.
pub const LOOKUP_MARGIN: Duration = Duration::from_millis(50);

/// Why a connection could not be made. Each variant is one error class of the attempt log.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL cannot be connected to (no host, or a scheme other than http/https).
    #[error("cannot connect to this URL: {0}")]
    BadUri(String),
    /// The destination is refused by the SSRF guard.
    #[error(transparent)]
    Blocked(#[from] BlockedError),
    /// The host name did not resolve ([`DnsError::failure_of`] says whose failure).
    #[error("{0}")]
    Dns(Box<dyn std::error::Error + Send + Sync>),
    /// No address accepted a TCP connection.
    #[error("tcp connect to {addr}: {source}")]
    Connect {
        /// The last address tried.
        addr: SocketAddr,
        /// The socket error.
        source: io::Error,
    },
    /// This host lacked a resource to open the connection ([`is_local_resource`]): ours,
    /// not the receiver's.
    #[error("tcp connect to {addr}: out of a local resource: {source}")]
    LocalResource {
        /// The address being connected to.
        addr: SocketAddr,
        /// The socket error.
        source: io::Error,
    },
    /// The TLS handshake failed (certificate, protocol, or the peer hung up during it).
    #[error("tls handshake: {0}")]
    Tls(#[source] io::Error),
}

impl From<ResolveError> for ConnectError {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::Dns(d) => ConnectError::Dns(d),
            ResolveError::Blocked(b) => ConnectError::Blocked(b),
        }
    }
}

/// What the tap knows about one connection, shared between the connection's IO and the
/// client (through [`Connected::extra`]).
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    inner: Mutex<TapState>,
}

#[derive(Debug)]
struct TapState {
    /// No request has been written since the last response completed (or ever).
    idle: bool,
    /// Response bytes read since the current request began.
    read_since_request: u64,
    /// The first bytes of the current response.
    head: Vec<u8>,
    /// Responses read to their end on this connection.
    responses_completed: u32,
    /// A write failed with a reset; later writes are swallowed.
    write_failed: bool,
    /// A read failed in TLS after the handshake: in TLS 1.3 a server that refuses the
    /// client's certificate (or wanted one) says so with an alert after the client has
    /// finished its side of the handshake, so the refusal reaches the connection's first
    /// read, and the request then fails as "connection was not ready" with the alert lost
    /// (RFC 8446 §4.4.2.4).
    tls_failure: Option<rustls::Error>,
}

impl Default for TapState {
    fn default() -> Self {
        Self {
            idle: true,
            read_since_request: 0,
            head: Vec::new(),
            responses_completed: 0,
            write_failed: false,
            tls_failure: None,
        }
    }
}

impl ConnState {
    fn lock(&self) -> MutexGuard<'_, TapState> {
        // A panic while holding this lock leaves plain counters behind: keep using them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn on_write(&self) {
        let mut s = self.lock();
        if s.idle {
            s.idle = false;
            s.read_since_request = 0;
            s.head.clear();
        }
    }

    fn on_read(&self, bytes: &[u8]) {
        let mut s = self.lock();
        s.read_since_request = s.read_since_request.saturating_add(bytes.len() as u64);
        let room = HEAD_CAPTURE_BYTES.saturating_sub(s.head.len());
        s.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The client read a response to its end: the connection may carry another request.
    pub(crate) fn response_completed(&self) {
        let mut s = self.lock();
        s.responses_completed = s.responses_completed.saturating_add(1);
        s.idle = true;
        s.read_since_request = 0;
        s.head.clear();
    }

    /// The TLS error a read on this connection failed with, when one did.
    pub(crate) fn tls_failure(&self) -> Option<rustls::Error> {
        self.lock().tls_failure.clone()
    }

    /// True when the request that just failed went on a connection that had completed a
    /// response before (a pooled keep-alive connection) and not one byte of its own
    /// response arrived: the receiver closed a stale connection, and sending the request
    /// again on a fresh connection cannot duplicate an answered request.
    pub(crate) fn failed_stale(&self) -> bool {
        let s = self.lock();
        s.responses_completed > 0 && s.read_since_request == 0
    }

    /// The status line (and `Retry-After`, `Location`) of the current response, when its
    /// first bytes hold one: the receiver's answer even when hyper could not parse the head.
    pub(crate) fn captured_head(&self) -> Option<CapturedHead> {
        CapturedHead::parse(&self.lock().head)
    }
}

/// What can be read from the first bytes of a response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CapturedHead {
    pub status: u16,
    pub retry_after: Option<String>,
    pub location: Option<String>,
}

impl CapturedHead {
    /// Parses `HTTP/1.x NNN ...` and the header lines after it that fit in `bytes`. Only a
    /// final status (200-599) counts; an interim 1xx is not an answer.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        let mut lines = bytes.split(|b| *b == b'\n');
        let first = lines.next()?;
        let rest = first
            .strip_prefix(b"HTTP/1.1 ")
            .or_else(|| first.strip_prefix(b"HTTP/1.0 "))?;
        let code = rest.get(..3)?;
        if !code.iter().all(u8::is_ascii_digit) {
            return None;
        }
        if !matches!(rest.get(3), None | Some(b' ' | b'\r')) {
            return None;
        }
        let status: u16 = std::str::from_utf8(code).ok()?.parse().ok()?;
        if !(200..=599).contains(&status) {
            return None;
        }
        let mut head = Self {
            status,
            retry_after: None,
            location: None,
        };
        for line in lines {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                break;
            }
            let Some(colon) = line.iter().position(|b| *b == b':') else {
                continue;
            };
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            let value = || Some(crate::client::bounded_text(value.trim_ascii()));
            if name.eq_ignore_ascii_case(b"retry-after") && head.retry_after.is_none() {
                head.retry_after = value();
            } else if name.eq_ignore_ascii_case(b"location") && head.location.is_none() {
                head.location = value();
            }
        }
        Some(head)
    }
}

/// Hands the client's copy of a connection's [`ConnState`] around in [`Connected`]
/// extras (which must be `Clone`).
#[derive(Clone, Debug)]
pub(crate) struct ConnTag(pub Arc<ConnState>);

/// Any byte stream a connection runs on (plain TCP or TLS over TCP).
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A connection's IO with the tap around it (see the module docs).
pub struct Tapped {
    io: Box<dyn Io>,
    state: Arc<ConnState>,
    /// TLS negotiated HTTP/2 (ALPN `h2`).
    h2: bool,
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

impl Tapped {
    /// Maps a write result: after a reset the request cannot reach the receiver any more,
    /// but its answer may already be in the receive buffer, so the write is reported done
    /// and hyper goes on to read. The read then yields the answer, or the reset.
    fn written<T>(&self, r: Poll<io::Result<T>>, done: T) -> Poll<io::Result<T>> {
        match r {
            Poll::Ready(Err(e)) if is_reset(&e) => {
                tracing::debug!(error = %e, "write failed with a reset; reading the answer");
                self.state.lock().write_failed = true;
                Poll::Ready(Ok(done))
            }
            other => other,
        }
    }

    fn write_failed(&self) -> bool {
        self.state.lock().write_failed
    }
}

impl AsyncRead for Tapped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        match &r {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                if !new.is_empty() {
                    self.state.on_read(new);
                }
            }
            Poll::Ready(Err(e)) => {
                if let Some(t) = crate::classify::rustls_error(e) {
                    self.state.lock().tls_failure = Some(t.clone());
                }
            }
            Poll::Pending => {}
        }
        r
    }
}

impl AsyncWrite for Tapped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.state.on_write();
        if self.write_failed() {
            return Poll::Ready(Ok(buf.len()));
        }
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.written(r, buf.len())
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if len == 0 {
            return Poll::Ready(Ok(0));
        }
        self.state.on_write();
        if self.write_failed() {
            return Poll::Ready(Ok(len));
        }
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.written(r, len)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write_failed() {
            return Poll::Ready(Ok(()));
        }
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.written(r, ())
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write_failed() {
            return Poll::Ready(Ok(()));
        }
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.written(r, ())
    }
}

impl Connection for Tapped {
    fn connected(&self) -> Connected {
        let connected = Connected::new().extra(ConnTag(self.state.clone()));
        if self.h2 {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

/// The connector of the delivery client: SSRF guard on every address, TCP (Happy
/// Eyeballs, [`crate::eyeballs`]), TLS.
#[derive(Clone)]
pub(crate) struct Connector {
    pub lookup: Arc<dyn HostLookup>,
    pub policy: Arc<DestinationPolicy>,
    pub tls: TlsConnector,
    /// Maps a checked address to the one actually connected to: the identity, except
    /// for tests that stand in for a NAT64 gateway (`test-support` feature).
    pub translate: fn(SocketAddr) -> SocketAddr,
}

impl Connector {
    async fn connect(
        self,
        uri: http::Uri,
        deadline: Option<Instant>,
    ) -> Result<TokioIo<Tapped>, ConnectError> {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => {
                return Err(ConnectError::BadUri(format!(
                    "scheme {}",
                    other.unwrap_or("(none)")
                )));
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| ConnectError::BadUri("no host".into()))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => {
                self.policy.check_ip(ip)?;
                vec![ip]
            }
            Err(_) => self.resolve(host, deadline).await?,
        };
        let tcp = crate::eyeballs::connect(&ips, port, deadline, self.translate).await?;
        // Small writes (the head) should not wait for an ACK.
        let _ = tcp.set_nodelay(true);
        let state = Arc::new(ConnState::default());
        let mut h2 = false;
        let io: Box<dyn Io> = if https {
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|e| ConnectError::BadUri(format!("host {host}: {e}")))?;
            let tls = self
                .tls
                .connect(name, tcp)
                .await
                .map_err(ConnectError::Tls)?;
            if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                h2 = true;
            }
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        Ok(TokioIo::new(Tapped { io, state, h2 }))
    }

    /// Resolves `host` through the guard; every address returned passed it. A lookup
    /// still unanswered [`LOOKUP_MARGIN`] before the attempt's deadline is our
    /// resolver's failure.
    async fn resolve(
        &self,
        host: &str,
        deadline: Option<Instant>,
    ) -> Result<Vec<IpAddr>, ConnectError> {
        let lookup = resolve_checked(self.lookup.as_ref(), &self.policy, host);
        let addrs = match deadline {
            None => lookup.await?,
            Some(deadline) => {
                let started = Instant::now();
                let give_up = deadline.checked_sub(LOOKUP_MARGIN).unwrap_or(deadline);
                match tokio::time::timeout_at(give_up, lookup).await {
                    Ok(found) => found?,
                    Err(_) => {
                        return Err(ConnectError::Dns(Box::new(DnsError::temporary(format!(
                            "{host}: our resolver did not answer within {} ms",
                            give_up.saturating_duration_since(started).as_millis()
                        )))));
                    }
                }
            }
        };
        Ok(addrs.into_iter().map(|a| a.ip()).collect())
    }
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = TokioIo<Tapped>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        // hyper calls the connector from the request's own task, inside the client's
        // `ATTEMPT_DEADLINE` scope; a connection made for the pool in the background
        // (none today) would have no deadline but the per-address timeouts.
        let deadline = ATTEMPT_DEADLINE.try_with(|d| *d).ok();
        Box::pin(self.clone().connect(uri, deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream whose reads fail with `error` and whose writes succeed.
    struct FailingReads(fn() -> io::Error);

    impl AsyncRead for FailingReads {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Err((self.0)()))
        }
    }

    impl AsyncWrite for FailingReads {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            b: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn certificate_required() -> rustls::Error {
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired)
    }

    /// A read that fails in TLS (the alert a receiver sends after the handshake when it
    /// refuses our client certificate, as tokio-rustls reports it) is kept on the
    /// connection's state; a reset is not a TLS failure.
    #[tokio::test]
    async fn a_tls_failure_on_read_is_kept_on_the_connection() {
        use tokio::io::AsyncReadExt as _;
        for (make, expected) in [
            (
                (|| io::Error::new(io::ErrorKind::InvalidData, certificate_required()))
                    as fn() -> io::Error,
                Some(certificate_required()),
            ),
            (|| io::Error::from(io::ErrorKind::ConnectionReset), None),
        ] {
            let state = Arc::new(ConnState::default());
            let mut tapped = Tapped {
                io: Box::new(FailingReads(make)),
                state: state.clone(),
                h2: false,
            };
            let mut buf = [0u8; 16];
            assert!(tapped.read(&mut buf).await.is_err());
            assert_eq!(state.tls_failure(), expected);
        }
    }

    /// A send that fails only as "the connection closed" on a connection whose read
    /// failed in TLS is that TLS failure (class `tls`, the alert named); without one it
    /// stays `protocol`. The client's error here is real: a listener on 127.0.0.1 that
    /// closes every connection it accepts.
    #[tokio::test]
    async fn a_closed_connection_after_a_tls_alert_is_classified_tls() {
        use crate::client::{ClientOptions, DeliveryClient, Sent};
        use crate::guard::DestinationPolicy;
        use tern_core::outcome::ErrorClass;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                drop(tcp);
            }
        });
        let client = DeliveryClient::new(ClientOptions {
            policy: DestinationPolicy {
                https_only: false,
                allow: vec!["127.0.0.1/32".parse().unwrap()],
                nat64: false,
            },
            ..ClientOptions::default()
        })
        .unwrap();
        let request = http::Request::post(format!("http://127.0.0.1:{port}/hook"))
            .body(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")))
            .unwrap();
        let e = match client.send(request).await {
            Sent::Failed(e, _) => e,
            Sent::Response(r, _) => panic!("an answer: {}", r.status()),
            Sent::Head(h) => panic!("a head: {}", h.status),
        };
        // The state of the connection the failure happened on (hyper-util hands it back
        // with the error: `Error::connect_info`).
        let conn = ConnState::default();
        let (class, _) = crate::classify::classify_failure(&e, Some(&conn));
        assert_eq!(class, ErrorClass::Protocol);
        conn.lock().tls_failure = Some(certificate_required());
        let (class, detail) = crate::classify::classify_failure(&e, Some(&conn));
        assert_eq!(class, ErrorClass::Tls);
        assert!(detail.contains("CertificateRequired"), "{detail}");
    }

    #[test]
    fn a_status_line_is_recovered_from_the_first_bytes() {
        let h = CapturedHead::parse(
            b"HTTP/1.1 503 Busy\r\nx-a: 1\r\nRetry-After: 7\r\nlocation: /x\r\n\r\nbody",
        )
        .unwrap();
        assert_eq!(
            h,
            CapturedHead {
                status: 503,
                retry_after: Some("7".into()),
                location: Some("/x".into())
            }
        );
        // Cut mid-head: the status alone.
        let h = CapturedHead::parse(b"HTTP/1.0 200\r\nx-a: 1\r\nx-").unwrap();
        assert_eq!((h.status, h.retry_after), (200, None));
        for junk in [
            &b""[..],
            b"HTTP/1.1 20",
            b"HTTP/1.1 2000 X\r\n",
            b"HTTP/2 200\r\n",
            b"hello, this is not http\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n",
        ] {
            assert_eq!(CapturedHead::parse(junk), None, "{junk:?}");
        }
    }

    // Fuzzing of the response head a receiver sends, read here when hyper cannot (issue
    // 28): any bytes, and bytes shaped like a head, never panic; what is read is a final
    // status and header values of at most MAX_HEADER_VALUE_CHARS characters.
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2_000, ..Default::default() })]

        #[test]
        fn any_bytes_as_a_response_head(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            if let Some(h) = CapturedHead::parse(&bytes) {
                proptest::prop_assert!((200..=599).contains(&h.status));
            }
        }

        #[test]
        fn heads_shaped_like_real_ones(
            version in proptest::prop_oneof![proptest::strategy::Just("HTTP/1.1 "), proptest::strategy::Just("HTTP/1.0 ")],
            status in "[0-9]{0,5}",
            lines in proptest::collection::vec(
                ("(?i:retry-after|location|x-[a-z]{1,8}|)", "[^\r\n]{0,3000}"),
                0..6,
            ),
            rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let mut head = format!("{version}{status} Reason\r\n").into_bytes();
            for (name, value) in &lines {
                head.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
            }
            head.extend_from_slice(&rest);
            if let Some(h) = CapturedHead::parse(&head) {
                proptest::prop_assert!((200..=599).contains(&h.status));
                for v in [&h.retry_after, &h.location].into_iter().flatten() {
                    proptest::prop_assert!(v.chars().count() <= crate::client::MAX_HEADER_VALUE_CHARS);
                }
            }
        }
    }

    #[test]
    fn a_connection_is_stale_only_after_a_completed_response_and_before_any_answer_byte() {
        let s = ConnState::default();
        s.on_write();
        assert!(!s.failed_stale(), "first request on a fresh connection");
        s.on_read(b"HTTP/1.1 200 OK\r\n\r\n");
        s.response_completed();
        s.on_write();
        assert!(s.failed_stale(), "reused, nothing answered");
        s.on_read(b"H");
        assert!(!s.failed_stale(), "an answer began");
        assert_eq!(s.captured_head(), None);
    }
}
