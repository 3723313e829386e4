//! Test-only seams of the delivery client (the `test-support` feature, enabled by the
//! `tern-tests` crate's dev-dependency alone). Nothing in a function crate calls these and
//! no setting reaches them: the production client is [`DeliveryClient::new`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use rustls::pki_types::CertificateDer;

use crate::client::{ClientBuildError, ClientOptions, DeliveryClient, Hooks};
use crate::guard::nat64_embedded_ipv4;

/// A client that also trusts `roots` (a test certificate authority's certificates, DER),
/// besides Mozilla's.
///
/// # Errors
/// [`ClientBuildError`] when a root is not a usable CA certificate.
pub fn client_trusting(
    options: ClientOptions,
    roots: Vec<CertificateDer<'static>>,
) -> Result<DeliveryClient, ClientBuildError> {
    DeliveryClient::build(
        options,
        Hooks {
            extra_roots: roots,
            ..Hooks::default()
        },
    )
}

/// Stands in for a NAT64 gateway on this machine: a connection to `64:ff9b::a.b.c.d`
/// (after the SSRF guard passed that address) goes to `127.0.0.1` on the same port, as
/// a gateway would carry it to `a.b.c.d`; any other address is connected to as it is.
fn loopback_nat64_gateway(addr: SocketAddr) -> SocketAddr {
    match nat64_embedded_ipv4(addr.ip()) {
        Some(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port()),
        None => addr,
    }
}

/// A client whose connections to NAT64 addresses reach `127.0.0.1` instead (see
/// [`loopback_nat64_gateway`]): the guard judges the NAT64 address, and no packet leaves
/// the machine.
///
/// # Errors
/// [`ClientBuildError`] as [`DeliveryClient::new`].
pub fn client_behind_loopback_nat64(
    options: ClientOptions,
) -> Result<DeliveryClient, ClientBuildError> {
    DeliveryClient::build(
        options,
        Hooks {
            translate: loopback_nat64_gateway,
            ..Hooks::default()
        },
    )
}
