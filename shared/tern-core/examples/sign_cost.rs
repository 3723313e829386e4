//! Benchmark (`make bench-reach`, release build): the CPU time to build one attempt's
//! signed headers ([`tern_core::request::attempt_headers`]) with `v1` (HMAC-SHA256),
//! `v1a` (Ed25519), both, and both during a rotation (two secrets and two keys), for a
//! 1 KiB and a 64 KiB body. Prints a Markdown table, in microseconds per delivery (the
//! median of 9 rounds of `--iterations` deliveries each, default 2,000).
//!
//! Run: `cargo run --release -p tern-core --example sign_cost [-- --iterations N]`.

use std::hint::black_box;
use std::time::Instant;

use chrono::{TimeZone, Utc};
use tern_core::event::{Event, EventType, Payload};
use tern_core::ids::{EndpointId, EventId, TenantId};
use tern_core::request::attempt_headers;
use tern_core::signing_key::{Signatures, SigningKey};
use tern_core::{Endpoint, Secret};

/// Rounds per case; the median is reported, so one noisy round on a shared machine
/// does not move the figure.
const ROUNDS: usize = 9;

fn endpoint(signatures: Signatures, rotating: bool) -> Endpoint {
    let now = Utc.timestamp_opt(1_772_366_400, 0).single().expect("time");
    let mut e = Endpoint::new(
        EndpointId::new("ep_bench").expect("id"),
        TenantId::new("tnt_bench").expect("tenant"),
        "https://example.com/hook",
        vec!["*".into()],
        Secret::generate(),
        now,
    );
    let overlap = chrono::Duration::hours(24);
    e.rotate_signing_key(SigningKey::generate(), now, overlap)
        .expect("key");
    if rotating {
        e.rotate_secret(Secret::generate(), now, overlap)
            .expect("secret");
        e.rotate_signing_key(SigningKey::generate(), now, overlap)
            .expect("key");
    }
    e.signatures = signatures;
    e
}

fn micros_per_delivery(endpoint: &Endpoint, event: &Event, body: &[u8], n: usize) -> f64 {
    let now = endpoint.created_at;
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..n {
                let headers =
                    attempt_headers(endpoint, event, now.timestamp(), black_box(body), now)
                        .expect("signed");
                black_box(headers);
            }
            started.elapsed().as_secs_f64() * 1e6 / n as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut n = 2_000_usize;
    while let Some(a) = args.next() {
        if a == "--iterations" {
            n = args
                .next()
                .and_then(|v| v.parse().ok())
                .expect("--iterations N");
        }
    }
    println!(
        "Signed headers of one attempt, microseconds per delivery (median of {ROUNDS} rounds of {n}; \
         `rotation`: two `whsec_` secrets and two `whsk_` keys sign)\n"
    );
    println!("| body | v1 | v1a | both | both, rotation |\n| ---: | ---: | ---: | ---: | ---: |");
    for size in [1024_usize, 64 * 1024] {
        let text = format!("{{\"pad\":\"{}\"}}", "x".repeat(size - 10));
        let event = Event {
            id: EventId::new("evt_bench").expect("id"),
            event_type: EventType::new("order.paid").expect("type"),
            tenant_id: TenantId::new("tnt_bench").expect("tenant"),
            created_at: Utc::now(),
            payload: Payload::parse(text, 1 << 20).expect("payload"),
            trace: None,
        };
        let body = event.payload.as_str().as_bytes().to_vec();
        let cells: Vec<String> = [
            (Signatures::V1, false),
            (Signatures::V1a, false),
            (Signatures::Both, false),
            (Signatures::Both, true),
        ]
        .into_iter()
        .map(|(s, rotating)| {
            let e = endpoint(s, rotating);
            format!("{:.1}", micros_per_delivery(&e, &event, &body, n))
        })
        .collect();
        println!("| {} KiB | {} |", size / 1024, cells.join(" | "));
    }
}
