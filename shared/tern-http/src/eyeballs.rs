//! Happy Eyeballs (RFC 8305): connecting to a host with several addresses so that a dead
//! one costs a fraction of a second, not the attempt.
//!
//! The addresses (every one already passed by the SSRF guard) are interleaved by family
//! (§4); attempts start one [`CONNECTION_ATTEMPT_DELAY`] apart, or at once when the
//! previous one fails (§5); each has its own timeout ([`ADDRESS_CONNECT_TIMEOUT`], and
//! never past the attempt's deadline); the first to connect wins and the others are
//! dropped (their sockets closed).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::transport::{ConnectError, is_local_resource};

/// Time between the start of one connection attempt and the next while the first has
/// neither connected nor failed: 250 ms, the value RFC 8305 §5 recommends (its bounds:
/// 100 ms to 2 s).
pub const CONNECTION_ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// Longest one address may take to accept a TCP connection: 10 s. Long enough for a
/// Linux client's SYN retransmissions at 1, 3 and 7 s (`tcp_syn_retries`, exponential
/// back-off from a 1 s initial RTO, RFC 6298 §2), short enough that a black-holed address
/// fails inside the default 15 s attempt. The attempt's own deadline bounds it too.
pub const ADDRESS_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Orders addresses for connection attempts: alternating families, starting with the
/// family of the first address, each family keeping its own order (RFC 8305 §4, with a
/// "First Address Family Count" of 1).
pub fn interleave(addrs: &[IpAddr]) -> Vec<IpAddr> {
    let Some(first) = addrs.first() else {
        return Vec::new();
    };
    let (mut preferred, mut other): (Vec<IpAddr>, Vec<IpAddr>) =
        addrs.iter().partition(|a| a.is_ipv6() == first.is_ipv6());
    preferred.reverse();
    other.reverse();
    let mut out = Vec::with_capacity(addrs.len());
    while !preferred.is_empty() || !other.is_empty() {
        out.extend(preferred.pop());
        out.extend(other.pop());
    }
    out
}

/// Connects to one address within its own timeout (and the attempt's deadline).
async fn connect_one(
    addr: SocketAddr,
    deadline: Option<Instant>,
) -> Result<TcpStream, ConnectError> {
    let started = Instant::now();
    let own = started + ADDRESS_CONNECT_TIMEOUT;
    let until = deadline.map_or(own, |d| d.min(own));
    match tokio::time::timeout_at(until, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(source)) if is_local_resource(&source) => {
            Err(ConnectError::LocalResource { addr, source })
        }
        Ok(Err(source)) => Err(ConnectError::Connect { addr, source }),
        Err(_) => Err(ConnectError::Connect {
            addr,
            source: io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "not accepted within {} ms",
                    until.saturating_duration_since(started).as_millis()
                ),
            ),
        }),
    }
}

/// Connects to `ips` on `port` the Happy Eyeballs way (see the module docs). `connect`
/// makes one attempt: [`connect_one`] in production; tests may translate the address.
///
/// # Errors
/// When no address connects: a [`ConnectError::LocalResource`] if any attempt failed for
/// lack of a local resource (the receiver was then not really tried), else the last
/// failure.
pub(crate) async fn connect(
    ips: &[IpAddr],
    port: u16,
    deadline: Option<Instant>,
    translate: fn(SocketAddr) -> SocketAddr,
) -> Result<TcpStream, ConnectError> {
    let mut pending = interleave(ips)
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port));
    let mut running = JoinSet::new();
    let mut last: Option<ConnectError> = None;
    let mut local: Option<ConnectError> = None;
    // Which address each attempt is for, to name it if its task ends abnormally.
    let started: Mutex<HashMap<tokio::task::Id, SocketAddr>> = Mutex::default();
    let started_addr = |id| {
        started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .copied()
            .unwrap_or_else(|| SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port))
    };
    let mut start_next = |running: &mut JoinSet<_>| match pending.next() {
        Some(addr) => {
            let task = running.spawn(connect_one(translate(addr), deadline));
            started
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(task.id(), addr);
            true
        }
        None => false,
    };
    if !start_next(&mut running) {
        return Err(ConnectError::BadUri("no address to connect to".into()));
    }
    let mut next_at = Some(Instant::now() + CONNECTION_ATTEMPT_DELAY);
    loop {
        let timer = async {
            match next_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            joined = running.join_next() => {
                let failure = match joined {
                    // Dropping `running` aborts the other attempts and closes their sockets.
                    Some(Ok(Ok(stream))) => return Ok(stream),
                    Some(Ok(Err(e))) => e,
                    Some(Err(join)) => ConnectError::Connect {
                        addr: started_addr(join.id()),
                        source: io::Error::other(format!("connection attempt ended: {join}")),
                    },
                    None => {
                        // Nothing running: start the next now, or report.
                        if start_next(&mut running) {
                            next_at = Some(Instant::now() + CONNECTION_ATTEMPT_DELAY);
                            continue;
                        }
                        return Err(local.or(last).unwrap_or_else(|| {
                            ConnectError::BadUri("no address to connect to".into())
                        }));
                    }
                };
                if matches!(failure, ConnectError::LocalResource { .. }) {
                    local = Some(failure);
                } else {
                    last = Some(failure);
                }
                // A failure starts the next attempt at once (RFC 8305 §5).
                if start_next(&mut running) {
                    next_at = Some(Instant::now() + CONNECTION_ATTEMPT_DELAY);
                } else if running.is_empty() {
                    return Err(local.or(last).unwrap_or_else(|| {
                        ConnectError::BadUri("no address to connect to".into())
                    }));
                }
            }
            () = timer => {
                next_at = start_next(&mut running).then(|| Instant::now() + CONNECTION_ATTEMPT_DELAY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn families_alternate_starting_with_the_first_answer() {
        assert_eq!(
            interleave(&ips(&[
                "2001:db8::1",
                "2001:db8::2",
                "2001:db8::3",
                "192.0.2.1",
                "192.0.2.2"
            ])),
            ips(&[
                "2001:db8::1",
                "192.0.2.1",
                "2001:db8::2",
                "192.0.2.2",
                "2001:db8::3"
            ])
        );
        assert_eq!(
            interleave(&ips(&["192.0.2.1", "192.0.2.2", "2001:db8::1"])),
            ips(&["192.0.2.1", "2001:db8::1", "192.0.2.2"])
        );
        assert_eq!(
            interleave(&ips(&["192.0.2.1", "192.0.2.2"])),
            ips(&["192.0.2.1", "192.0.2.2"])
        );
        assert!(interleave(&[]).is_empty());
    }

    /// A refused address (nothing listens) fails at once, and the next starts then, not
    /// a Connection Attempt Delay later: the live one is reached on the first round.
    #[tokio::test]
    async fn a_refused_address_hands_over_to_the_next_at_once() {
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = live.local_addr().unwrap().port();
        // 127.0.0.3 on the same port: nothing listens there (bound to 127.0.0.1 only).
        let stream = connect(&ips(&["127.0.0.3", "127.0.0.1"]), port, None, |a| a)
            .await
            .expect("connected to the live address");
        assert_eq!(
            stream.peer_addr().unwrap().ip(),
            "127.0.0.1".parse::<IpAddr>().unwrap()
        );
    }

    #[tokio::test]
    async fn every_address_refused_reports_the_last_failure() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        match connect(&ips(&["127.0.0.1", "127.0.0.4"]), port, None, |a| a).await {
            Err(ConnectError::Connect { addr, .. }) => assert_eq!(addr.port(), port),
            other => panic!("expected a connect error, got {:?}", other.map(|_| ())),
        }
    }
}
