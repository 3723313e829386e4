//! The SSRF guard: decides whether Tern may connect to an address, and a resolver that
//! applies the decision to every address it returns, so the HTTP client connects only to
//! an address that was checked (one lookup; no second resolution between check and use).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::dns::DnsError;

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
    /// A NAT64 address (judged by its embedded IPv4, [`DestinationPolicy::nat64`]) whose
    /// IPv4 is in a denied range.
    #[error("destination {addr} is NAT64 for {ipv4}, which is in a denied range ({range})")]
    DeniedNat64 {
        /// The NAT64 address.
        addr: IpAddr,
        /// The IPv4 address it embeds.
        ipv4: Ipv4Addr,
        /// Which range the IPv4 is in.
        range: &'static str,
    },
    /// The URL is `http://` and the deployment requires https.
    #[error("destination must use https (https-only is on)")]
    NotHttps,
}

/// The destination policy: https-only, an allow-list that overrides the deny list (for
/// local mode and tests: `127.0.0.1/32`), and whether NAT64 addresses are judged by the
/// IPv4 they embed.
#[derive(Debug, Clone, Default)]
pub struct DestinationPolicy {
    /// Refuse `http://` URLs.
    pub https_only: bool,
    /// Networks allowed even when denied by default.
    pub allow: Vec<IpNet>,
    /// Judge an address in the NAT64 well-known prefix `64:ff9b::/96` (RFC 6052 §2.1) by
    /// the IPv4 address in its last 32 bits (RFC 6052 §2.2) instead of refusing it: for a
    /// sender in an IPv6-only or DNS64 network (RFC 6147), where every IPv4-only receiver
    /// resolves to that form. A private, loopback or metadata IPv4 stays denied in that
    /// form too. Off by default (`TERN_NAT64`): without a NAT64 gateway such an address
    /// cannot be a receiver. The local-use prefix `64:ff9b:1::/48` (RFC 8215) stays denied
    /// whatever this says: where its IPv4 sits depends on a prefix length only the
    /// network's operator knows.
    pub nat64: bool,
}

/// The NAT64 well-known prefix, `64:ff9b::/96` (RFC 6052 §2.1): its first 96 bits.
const NAT64_WELL_KNOWN_PREFIX: [u16; 6] = [0x64, 0xff9b, 0, 0, 0, 0];

/// The IPv4 address a NAT64 well-known-prefix address embeds (RFC 6052 §2.2, /96: the
/// last 32 bits), or `None` for any other address.
pub fn nat64_embedded_ipv4(addr: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = addr else {
        return None;
    };
    let s = v6.segments();
    if s[..6] != NAT64_WELL_KNOWN_PREFIX {
        return None;
    }
    let [.., a, b, c, d] = v6.octets();
    Some(Ipv4Addr::new(a, b, c, d))
}

impl DestinationPolicy {
    /// Checks one address: allowed when on the allow-list, or outside every denied range.
    /// With [`DestinationPolicy::nat64`] on, a `64:ff9b::/96` address is judged as the
    /// IPv4 it embeds (the allow-list included).
    ///
    /// # Errors
    /// [`BlockedError::DeniedAddress`] naming the range, or [`BlockedError::DeniedNat64`]
    /// for a NAT64 address whose IPv4 is denied.
    pub fn check_ip(&self, addr: IpAddr) -> Result<(), BlockedError> {
        let allowed = |a: IpAddr| self.allow.iter().any(|net| net.contains(&a));
        if allowed(addr) {
            return Ok(());
        }
        if self.nat64
            && let Some(ipv4) = nat64_embedded_ipv4(addr)
        {
            if allowed(IpAddr::V4(ipv4)) {
                return Ok(());
            }
            return match denied_v4(ipv4) {
                Some(range) => Err(BlockedError::DeniedNat64 { addr, ipv4, range }),
                None => Ok(()),
            };
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
/// 2001::/32), which are denied outright because the embedded IPv4 can reach anything
/// (NAT64 well-known-prefix addresses can instead be judged by their IPv4:
/// [`DestinationPolicy::nat64`]).
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

/// What to change when `url` was refused with `error` ([`check_endpoint_url`]), when the
/// refusal has a likely cause the text alone does not show: a host name that resolved to a
/// denied address while the deployment allows some addresses (local mode allows
/// 127.0.0.1/32, and `localhost` resolves to `::1` first on many machines, which is
/// denied). Names the allowed networks and, for a single allowed address, the URL with it.
/// `None` when there is nothing to add.
pub fn refusal_hint(
    url: &str,
    error: &EndpointCheckError,
    policy: &DestinationPolicy,
) -> Option<String> {
    let EndpointCheckError::Blocked(BlockedError::DeniedAddress { .. }) = error else {
        return None;
    };
    let parsed = url::Url::parse(url).ok()?;
    let Some(url::Host::Domain(name)) = parsed.host() else {
        return None;
    };
    let first = policy.allow.first()?;
    let allowed = policy
        .allow
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let mut suggested = parsed.clone();
    if first.prefix_len() == first.max_prefix_len() && suggested.set_ip_host(first.addr()).is_ok() {
        Some(format!(
            "{name} resolves to that address; this deployment allows {allowed}: use {suggested}"
        ))
    } else {
        Some(format!(
            "{name} resolves to that address; this deployment allows {allowed}: use an address in it"
        ))
    }
}

/// Checks every address of one answer: the first denied one refuses the whole answer.
fn check_all(policy: &DestinationPolicy, addrs: &[IpAddr]) -> Result<(), BlockedError> {
    addrs.iter().try_for_each(|a| policy.check_ip(*a))
}

/// Looks up a host name (the port). The production lookup is [`crate::DnsResolver`];
/// tests use a fixed table ([`StaticLookup`]) or a resolver that fails on purpose, so no
/// test ever queries real DNS.
pub trait HostLookup: Send + Sync + 'static {
    /// Addresses for `host` (port 0), or an error when it does not resolve. Return a
    /// [`DnsError`] to say whose failure it was (the receiver's name, or our resolver);
    /// any other error counts as the receiver's ([`DnsError::failure_of`]).
    fn lookup(&self, host: String) -> Resolving;
}

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
        return Err(ResolveError::Dns(Box::new(DnsError::not_found(format!(
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
                None => Err(Box::new(DnsError::not_found(format!(
                    "{host}: not in the test host table"
                ))) as _),
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
            nat64: false,
        };
        assert!(p.check_ip("127.0.0.1".parse().unwrap()).is_ok());
        assert!(p.check_ip("127.0.0.2".parse().unwrap()).is_err());
    }

    #[test]
    fn nat64_addresses_are_judged_by_their_ipv4_only_when_the_setting_is_on() {
        let on = DestinationPolicy {
            nat64: true,
            ..DestinationPolicy::default()
        };
        let off = DestinationPolicy::default();
        let check = |p: &DestinationPolicy, a: &str| p.check_ip(a.parse().unwrap());
        // Public IPv4s in NAT64 form (RFC 6052 §2.4's example 192.0.2.33 is documentation,
        // so real public ones): refused with the setting off, allowed with it on.
        for public in ["64:ff9b::808:808", "64:ff9b::1.1.1.1", "64:ff9b::5db8:d822"] {
            assert!(
                matches!(
                    check(&off, public),
                    Err(BlockedError::DeniedAddress { range, .. }) if range.starts_with("NAT64")
                ),
                "{public} with the setting off"
            );
            assert_eq!(check(&on, public), Ok(()), "{public} with the setting on");
        }
        // Private, loopback, metadata, CGNAT, reserved IPv4s stay refused in NAT64 form.
        for (denied, v4) in [
            ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
            ("64:ff9b::127.0.0.1", "127.0.0.1"),
            ("64:ff9b::10.0.0.1", "10.0.0.1"),
            ("64:ff9b::172.16.5.4", "172.16.5.4"),
            ("64:ff9b::192.168.1.1", "192.168.1.1"),
            ("64:ff9b::100.64.0.1", "100.64.0.1"),
            ("64:ff9b::0.0.0.0", "0.0.0.0"),
            ("64:ff9b::255.255.255.255", "255.255.255.255"),
        ] {
            match check(&on, denied) {
                Err(BlockedError::DeniedNat64 { ipv4, .. }) => {
                    assert_eq!(ipv4.to_string(), v4, "{denied}");
                }
                other => panic!("{denied} should be refused as NAT64 of {v4}: {other:?}"),
            }
        }
        // Only the /96 well-known prefix: the local-use prefix and other forms that carry
        // an IPv4 stay refused.
        for other in [
            "64:ff9b:1::808:808",
            "64:ff9b:1:ab::808:808",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
        ] {
            assert!(check(&on, other).is_err(), "{other}");
        }
        // The allow-list applies to the embedded IPv4 too (local mode's 127.0.0.1/32).
        let local = DestinationPolicy {
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            nat64: true,
            ..DestinationPolicy::default()
        };
        assert_eq!(check(&local, "64:ff9b::127.0.0.1"), Ok(()));
        assert!(check(&local, "64:ff9b::127.0.0.2").is_err());
        assert_eq!(
            nat64_embedded_ipv4("64:ff9b::c000:221".parse().unwrap()),
            Some(std::net::Ipv4Addr::new(192, 0, 2, 33))
        );
        assert_eq!(nat64_embedded_ipv4("8.8.8.8".parse().unwrap()), None);
    }
}
