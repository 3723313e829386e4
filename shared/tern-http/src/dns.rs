//! Name resolution for deliveries: the production [`HostLookup`], and the error every
//! lookup reports, which says whose failure it was.
//!
//! Why not getaddrinfo: through `std`/tokio it reports a failing resolver (`EAI_AGAIN`: a
//! throttled VPC resolver, SERVFAIL, a timeout) and a name that does not exist
//! (`EAI_NONAME`) as the same opaque `io::Error`, so a sender could not tell its own fault
//! from the receiver's; and it never sees a record's TTL, so nothing could cache an answer
//! for exactly as long as it is valid. [`DnsResolver`] uses Hickory DNS's stub resolver
//! with the same inputs as the system's (`/etc/resolv.conf`, `/etc/hosts`, `localhost`
//! answered locally per RFC 6761 §6.3) and its TTL-bounded cache (RFC 2181 §8 for
//! answers, RFC 2308 §5 for negative answers).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError as HickoryDnsError, NetError};
use reqwest::dns::{Addrs, Resolving};

use crate::guard::HostLookup;

/// Whose failure a lookup was, which decides its error class (`tern_core::ErrorClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnsFailure {
    /// The name does not exist (NXDOMAIN) or has no address (NODATA): the receiver's
    /// DNS, class `dns`.
    NotFound,
    /// Our resolver failed: SERVFAIL, REFUSED, no answer in time, an unreadable
    /// `/etc/resolv.conf`; what getaddrinfo reports as `EAI_AGAIN`. Class `dns_temporary`:
    /// retried and never charged to the endpoint.
    Temporary,
    /// This host ran out of a resource the lookup needed (a socket: file descriptors,
    /// buffers, memory). Class `local_resource`, never charged to the endpoint.
    LocalResource,
}

/// A host name did not resolve, and whose failure that was.
#[derive(Debug, Clone, thiserror::Error)]
#[error("name did not resolve: {detail}")]
pub struct DnsError {
    /// Whose failure it was.
    pub failure: DnsFailure,
    /// What the resolver said, for the attempt log.
    pub detail: String,
}

impl DnsError {
    /// The name does not exist or has no address (the receiver's).
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self {
            failure: DnsFailure::NotFound,
            detail: detail.into(),
        }
    }

    /// Our resolver failed (ours).
    pub fn temporary(detail: impl Into<String>) -> Self {
        Self {
            failure: DnsFailure::Temporary,
            detail: detail.into(),
        }
    }

    /// Whose failure a lookup error was. A [`DnsError`] says so itself; an `io::Error` is
    /// [`DnsFailure::LocalResource`] when it is one of [`crate::transport::is_local_resource`]'s
    /// codes and [`DnsFailure::Temporary`] when the resolver timed out; anything else a
    /// custom [`HostLookup`] returns counts as the receiver's ([`DnsFailure::NotFound`]),
    /// as before these classes existed.
    pub fn failure_of(err: &(dyn std::error::Error + 'static)) -> DnsFailure {
        if let Some(d) = err.downcast_ref::<DnsError>() {
            return d.failure;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if crate::transport::is_local_resource(io) {
                return DnsFailure::LocalResource;
            }
            if io.kind() == std::io::ErrorKind::TimedOut {
                return DnsFailure::Temporary;
            }
        }
        DnsFailure::NotFound
    }
}

/// Whose failure a Hickory lookup error was: only "no such name" and "no address of
/// this type" (both carried as `NoRecordsFound`) are the receiver's; a response code
/// such as SERVFAIL or REFUSED, a timeout, or no usable name server is our resolver's.
fn classify(err: &NetError) -> DnsFailure {
    match err {
        NetError::Dns(HickoryDnsError::NoRecordsFound(_)) => DnsFailure::NotFound,
        NetError::Io(io) if crate::transport::is_local_resource(io) => DnsFailure::LocalResource,
        _ => DnsFailure::Temporary,
    }
}

/// The production [`HostLookup`]: Hickory DNS's stub resolver, configured like the
/// system's (`/etc/resolv.conf`, `/etc/hosts`), asking for AAAA and A together (the
/// client interleaves the families, RFC 8305 §4), and caching every answer for its TTL
/// within the process, so a warm sender asks once per TTL per name. Build one per
/// process and share it (the cache lives in it).
///
/// The configuration is read on the first lookup, not at start (nothing to read on a
/// cold start that delivers to IP literals); if it cannot be read, every lookup fails
/// as [`DnsFailure::Temporary`] (our set-up, not the receiver's).
#[derive(Clone, Default)]
pub struct DnsResolver {
    inner: Arc<OnceLock<Result<TokioResolver, String>>>,
    /// Name servers to use instead of `/etc/resolv.conf`'s.
    name_servers: Option<Arc<[SocketAddr]>>,
}

impl std::fmt::Debug for DnsResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsResolver")
            .field("name_servers", &self.name_servers)
            .finish_non_exhaustive()
    }
}

impl DnsResolver {
    /// The system's configuration: `/etc/resolv.conf` and `/etc/hosts`.
    pub fn system() -> Self {
        Self::default()
    }

    /// Asks these name servers (UDP, then TCP for a truncated answer) instead of
    /// `/etc/resolv.conf`'s, with the same options, cache and `/etc/hosts`. For a
    /// deployment with its own resolver, and for tests with a DNS server on loopback.
    pub fn with_name_servers(servers: &[SocketAddr]) -> Self {
        Self {
            inner: Arc::default(),
            name_servers: Some(servers.into()),
        }
    }

    fn build(&self) -> Result<TokioResolver, String> {
        let mut builder = match &self.name_servers {
            None => TokioResolver::builder_tokio().map_err(|e| format!("/etc/resolv.conf: {e}"))?,
            Some(servers) => {
                let mut config = ResolverConfig::from_name_servers(Vec::new());
                for server in servers.iter() {
                    let mut ns = NameServerConfig::udp_and_tcp(server.ip());
                    for c in &mut ns.connections {
                        c.port = server.port();
                    }
                    config.add_name_server(ns);
                }
                TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            }
        };
        // AAAA and A in parallel, AAAA first: the connection attempts interleave the two
        // families (RFC 8305 §3 and §4).
        builder.options_mut().ip_strategy = hickory_resolver::config::LookupIpStrategy::Ipv6AndIpv4;
        builder.build().map_err(|e| e.to_string())
    }

    fn resolver(&self) -> Result<&TokioResolver, DnsError> {
        self.inner
            .get_or_init(|| self.build())
            .as_ref()
            .map_err(|e| DnsError::temporary(format!("resolver not configured: {e}")))
    }

    /// The addresses of `host` (port 0).
    ///
    /// # Errors
    /// [`DnsError`] saying whose failure it was ([`DnsFailure`]).
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, DnsError> {
        let resolver = self.resolver()?;
        // A fully qualified name: the search list is for short names typed by people, and
        // a receiver's URL names a host on the internet.
        let fqdn = if host.ends_with('.') {
            host.to_owned()
        } else {
            format!("{host}.")
        };
        match resolver.lookup_ip(fqdn.as_str()).await {
            Ok(found) => {
                let ips: Vec<IpAddr> = found.iter().collect();
                if ips.is_empty() {
                    return Err(DnsError::not_found(format!("{host}: no addresses")));
                }
                Ok(ips)
            }
            Err(e) => Err(DnsError {
                failure: classify(&e),
                detail: format!("{host}: {e}"),
            }),
        }
    }
}

impl HostLookup for DnsResolver {
    fn lookup(&self, host: String) -> Resolving {
        let this = self.clone();
        Box::pin(async move {
            // Boxed as the trait object itself (not a `Box<DnsError>` inside one), so the
            // classification can downcast it.
            let ips = this
                .resolve(&host)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            let addrs: Addrs = Box::new(
                ips.into_iter()
                    .map(|ip| SocketAddr::new(ip, 0))
                    .collect::<Vec<_>>()
                    .into_iter(),
            );
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whose_failure_a_lookup_error_was() {
        let boxed = |e: DnsError| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) };
        assert_eq!(
            DnsError::failure_of(boxed(DnsError::temporary("x")).as_ref()),
            DnsFailure::Temporary
        );
        assert_eq!(
            DnsError::failure_of(boxed(DnsError::not_found("x")).as_ref()),
            DnsFailure::NotFound
        );
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert_eq!(DnsError::failure_of(&emfile), DnsFailure::LocalResource);
        let timed_out = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow");
        assert_eq!(DnsError::failure_of(&timed_out), DnsFailure::Temporary);
        let other = std::io::Error::other("failed to lookup address information");
        assert_eq!(DnsError::failure_of(&other), DnsFailure::NotFound);
    }

    #[test]
    fn hickory_errors_by_whose_failure_they_are() {
        assert_eq!(classify(&NetError::Timeout), DnsFailure::Temporary);
        assert_eq!(
            classify(&NetError::Dns(HickoryDnsError::ResponseCode(
                hickory_resolver::proto::op::ResponseCode::ServFail
            ))),
            DnsFailure::Temporary
        );
        assert_eq!(classify(&NetError::NoConnections), DnsFailure::Temporary);
        assert_eq!(
            classify(&NetError::Io(Arc::new(std::io::Error::from_raw_os_error(
                libc::ENFILE
            )))),
            DnsFailure::LocalResource
        );
    }
}
