//! The SSRF guard: decides whether Tern may connect to an address, and a resolver that
//! applies the decision to every address it returns, so the HTTP client connects only to
//! an address that was checked (one lookup; no second resolution between check and use).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Why a destination is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockedError {
    /// The address is in a denied range.
    #[error("destination {addr} is in a denied range ({range})")]
    DeniedAddress {
        /// The address.
        addr: IpAddr,
        /// Which range (`loopback`, `private`, `link-local`, ...).
        range: &'static str,
    },
    /// The URL is `http://` and the deployment requires https.
    #[error("destination must use https (https-only is on)")]
    NotHttps,
}

/// The destination policy: https-only and an allow-list that overrides the deny list
/// (for local mode and tests: `127.0.0.1/32`).
#[derive(Debug, Clone, Default)]
pub struct DestinationPolicy {
    /// Refuse `http://` URLs.
    pub https_only: bool,
    /// Networks allowed even when denied by default.
    pub allow: Vec<IpNet>,
}

impl DestinationPolicy {
    /// Checks one address: allowed when on the allow-list, or outside every denied range.
    ///
    /// # Errors
    /// [`BlockedError::DeniedAddress`] naming the range.
    pub fn check_ip(&self, addr: IpAddr) -> Result<(), BlockedError> {
        if self.allow.iter().any(|net| net.contains(&addr)) {
            return Ok(());
        }
        match denied_range(addr) {
            Some(range) => Err(BlockedError::DeniedAddress { addr, range }),
            None => Ok(()),
        }
    }

    /// Checks a URL's scheme against https-only.
    ///
    /// # Errors
    /// [`BlockedError::NotHttps`].
    pub fn check_scheme(&self, url: &url::Url) -> Result<(), BlockedError> {
        if self.https_only && url.scheme() != "https" {
            return Err(BlockedError::NotHttps);
        }
        Ok(())
    }
}

/// The denied range `addr` falls in, or `None` for a public unicast address.
///
/// Denied: unspecified, loopback, RFC 1918 private, link-local (including the cloud
/// metadata address 169.254.169.254), carrier-grade NAT (100.64.0.0/10), multicast,
/// broadcast and reserved (240.0.0.0/4), IETF protocol assignments (192.0.0.0/24),
/// documentation and benchmarking ranges; IPv6 unspecified, loopback, unique-local
/// (fc00::/7), link-local (fe80::/10), multicast, documentation (2001:db8::/32), discard
/// (100::/64); and IPv6 forms that carry an IPv4 address (IPv4-mapped ::ffff:0:0/96,
/// IPv4-compatible ::/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16, Teredo
/// 2001::/32), which are denied outright because the embedded IPv4 can reach anything.
pub fn denied_range(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(v4) => denied_v4(v4),
        IpAddr::V6(v6) => denied_v6(v6),
    }
}

fn denied_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    Some(match o {
        [0, ..] => "unspecified (0.0.0.0/8)",
        [127, ..] => "loopback",
        [10, ..] => "private (10.0.0.0/8)",
        [172, b, ..] if (16..=31).contains(&b) => "private (172.16.0.0/12)",
        [192, 168, ..] => "private (192.168.0.0/16)",
        [169, 254, ..] => "link-local / cloud metadata (169.254.0.0/16)",
        [100, b, ..] if (64..=127).contains(&b) => "carrier-grade NAT (100.64.0.0/10)",
        [192, 0, 0, _] => "IETF protocol assignments (192.0.0.0/24)",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "documentation",
        [198, 18 | 19, ..] => "benchmarking (198.18.0.0/15)",
        [224..=239, ..] => "multicast",
        [240..=255, ..] => "reserved / broadcast (240.0.0.0/4)",
        _ => return None,
    })
}

fn denied_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    Some(match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified (::)",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback (::1)",
        [0, 0, 0, 0, 0, 0xffff, ..] => "IPv4-mapped (::ffff:0:0/96)",
        [0, 0, 0, 0, 0, 0, ..] => "IPv4-compatible (::/96)",
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => "NAT64 (64:ff9b::/96)",
        [0x64, 0xff9b, 1, ..] => "local-use NAT64 (64:ff9b:1::/48)",
        [0x100, 0, 0, 0, ..] => "discard (100::/64)",
        [0x2001, 0xdb8, ..] => "documentation (2001:db8::/32)",
        [0x2001, 0, ..] => "Teredo (2001::/32)",
        [0x2002, ..] => "6to4 (2002::/16)",
        [a, ..] if a & 0xfe00 == 0xfc00 => "unique-local (fc00::/7)",
        [a, ..] if a & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        [a, ..] if a & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        _ => return None,
    })
}

/// Why an endpoint URL is refused when the endpoint is created or its URL changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointCheckError {
    /// The URL is malformed, not `http`/`https`, has no host, or holds credentials.
    #[error(transparent)]
    Invalid(#[from] tern_core::endpoint::EndpointError),
    /// The scheme is not allowed (https-only), or the host is, or resolves to, a denied
    /// address.
    #[error(transparent)]
    Blocked(#[from] BlockedError),
    /// The host name did not resolve, or resolved to no address.
    #[error("host {host} does not resolve: {detail}")]
    Unresolvable {
        /// The host name.
        host: String,
        /// The resolver's error.
        detail: String,
    },
}

/// Checks an endpoint URL when the endpoint is created (the same rules every attempt is
/// held to, so an endpoint that could never be delivered to is refused up front): the
/// URL is valid ([`tern_core::endpoint::validate_url`]), the scheme passes https-only, and
/// the host, an IP literal or a name resolved once through `lookup`, is allowed; a name
/// is refused when any of its addresses is denied.
///
/// Returns the addresses that were checked (the literal, or every resolved address).
/// Attempts are still checked again at connect time: DNS answers change.
///
/// # Errors
/// [`EndpointCheckError`] saying which rule refused the URL.
pub async fn check_endpoint_url(
    url: &str,
    policy: &DestinationPolicy,
    lookup: &dyn HostLookup,
) -> Result<Vec<IpAddr>, EndpointCheckError> {
    let parsed = tern_core::endpoint::validate_url(url)?;
    policy.check_scheme(&parsed)?;
    let host = match parsed.host() {
        Some(url::Host::Ipv4(v4)) => {
            policy.check_ip(IpAddr::V4(v4))?;
            return Ok(vec![IpAddr::V4(v4)]);
        }
        Some(url::Host::Ipv6(v6)) => {
            policy.check_ip(IpAddr::V6(v6))?;
            return Ok(vec![IpAddr::V6(v6)]);
        }
        Some(url::Host::Domain(d)) => d.to_owned(),
        // validate_url refuses URLs without a host.
        None => return Err(tern_core::endpoint::EndpointError::BadUrl("no host".into()).into()),
    };
    let unresolvable = |detail: String| EndpointCheckError::Unresolvable {
        host: host.clone(),
        detail,
    };
    let addrs: Vec<IpAddr> = lookup
        .lookup(host.clone())
        .await
        .map_err(|e| unresolvable(e.to_string()))?
        .map(|a| a.ip())
        .collect();
    if addrs.is_empty() {
        return Err(unresolvable("no addresses".into()));
    }
    check_all(policy, &addrs)?;
    Ok(addrs)
}

/// Checks every address of one answer: the first denied one refuses the whole answer.
fn check_all(policy: &DestinationPolicy, addrs: &[IpAddr]) -> Result<(), BlockedError> {
    addrs.iter().try_for_each(|a| policy.check_ip(*a))
}

/// Looks up a host name. The production lookup is the system resolver; tests use a
/// fixed table so no test ever queries real DNS.
pub trait HostLookup: Send + Sync + 'static {
    /// Addresses for `host` (port 0), or an error when it does not resolve.
    fn lookup(&self, host: String) -> Resolving;
}

/// The system resolver (getaddrinfo through tokio).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemLookup;

impl HostLookup for SystemLookup {
    fn lookup(&self, host: String) -> Resolving {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| {
                    Box::new(DnsError(format!("{host}: {e}")))
                        as Box<dyn std::error::Error + Send + Sync>
                })?;
            let addrs: Addrs = Box::new(addrs.collect::<Vec<_>>().into_iter());
            Ok(addrs)
        })
    }
}

/// A host name did not resolve.
#[derive(Debug, Clone, thiserror::Error)]
#[error("name did not resolve: {0}")]
pub struct DnsError(pub String);

/// A resolver for reqwest that looks a name up once and refuses the whole answer when
/// any address is denied (a name that resolves to a mix of public and private addresses
/// is treated as hostile). The addresses it returns are the ones the client connects to.
#[derive(Clone)]
pub struct GuardedResolver {
    lookup: Arc<dyn HostLookup>,
    policy: Arc<DestinationPolicy>,
}

impl GuardedResolver {
    /// Guards `lookup` with `policy`.
    pub fn new(lookup: Arc<dyn HostLookup>, policy: Arc<DestinationPolicy>) -> Self {
        Self { lookup, policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let lookup = self.lookup.clone();
        let policy = self.policy.clone();
        Box::pin(async move {
            let addrs = resolve_checked(lookup.as_ref(), &policy, name.as_str())
                .await
                .map_err(|e| match e {
                    ResolveError::Dns(d) => d,
                    ResolveError::Blocked(b) => Box::new(b) as _,
                })?;
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// Why [`resolve_checked`] gave no addresses.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveError {
    /// The lookup failed or returned nothing.
    #[error("{0}")]
    Dns(Box<dyn std::error::Error + Send + Sync>),
    /// An address of the answer is denied.
    #[error(transparent)]
    Blocked(#[from] BlockedError),
}

/// Looks `host` up once and refuses the whole answer when any address is denied; the
/// addresses returned (port 0) are the only ones a connection may use.
pub(crate) async fn resolve_checked(
    lookup: &dyn HostLookup,
    policy: &DestinationPolicy,
    host: &str,
) -> Result<Vec<SocketAddr>, ResolveError> {
    let addrs: Vec<SocketAddr> = lookup
        .lookup(host.to_owned())
        .await
        .map_err(ResolveError::Dns)?
        .collect();
    if addrs.is_empty() {
        return Err(ResolveError::Dns(Box::new(DnsError(format!(
            "{host}: no addresses"
        )))));
    }
    let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
    check_all(policy, &ips)?;
    Ok(addrs)
}

/// A fixed host table for tests: names map to addresses; any other name fails to
/// resolve. It never touches the network.
#[derive(Debug, Clone, Default)]
pub struct StaticLookup {
    /// `(host, addresses)` pairs.
    pub hosts: Vec<(String, Vec<IpAddr>)>,
}

impl HostLookup for StaticLookup {
    fn lookup(&self, host: String) -> Resolving {
        let found = self
            .hosts
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(&host))
            .map(|(_, a)| a.clone());
        Box::pin(async move {
            match found {
                Some(addrs) => {
                    let addrs: Addrs = Box::new(
                        addrs
                            .into_iter()
                            .map(|ip| SocketAddr::new(ip, 0))
                            .collect::<Vec<_>>()
                            .into_iter(),
                    );
                    Ok(addrs)
                }
                None => Err(Box::new(DnsError(format!("{host}: not in the test host table"))) as _),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(s: &str) -> bool {
        DestinationPolicy::default()
            .check_ip(s.parse().unwrap())
            .is_err()
    }

    #[test]
    fn deny_list() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
            "2001::1",
            "2001:db8::1",
            "192.0.0.8",
        ] {
            assert!(blocked(a), "{a} should be blocked");
        }
        for a in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            assert!(!blocked(a), "{a} should be allowed");
        }
    }

    #[test]
    fn allow_list_overrides() {
        let p = DestinationPolicy {
            https_only: false,
            allow: vec!["127.0.0.1/32".parse().unwrap()],
        };
        assert!(p.check_ip("127.0.0.1".parse().unwrap()).is_ok());
        assert!(p.check_ip("127.0.0.2".parse().unwrap()).is_err());
    }
}
