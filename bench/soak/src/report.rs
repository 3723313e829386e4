//! The soak's result: what the audit found, what the receivers saw, what was injected,
//! and whether the goals were met (0 unaccounted, receiver-side duplicates <= 1 % of the
//! pairs, every signature valid, no pair Tern calls delivered that its receiver never
//! accepted). Printed, and written as JSON.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use tern_core::{EndpointId, TenantId};
use tern_ops::audit::{AuditReport, PairStatus, Totals};

use crate::Args;
use crate::faults::{Dice, PortFaults, WireFaults};
use crate::receivers::{EndpointReceiver, Tally};

/// Most receiver-side duplicates, percent of the pairs (the goal).
pub const MAX_DUPLICATE_PERCENT: f64 = 1.0;

/// A pair a receiver accepted more than once, and why, from its attempt log.
#[derive(Debug, Clone, Serialize)]
pub struct Duplicate {
    /// Event.
    pub event_id: String,
    /// Endpoint kind.
    pub endpoint: String,
    /// Times accepted.
    pub accepted: u64,
    /// `takeover after a sender stopped after its POST` when the log shows an abandoned
    /// try or a takeover (the redelivery could not know the POST had been answered), else
    /// `unexplained` (a finding).
    pub cause: String,
    /// The pair's attempt outcomes, oldest first (`outcome` or `outcome takeover n`).
    pub attempts: Vec<String>,
}

/// One run, as written to `<out>/soak-<seed>.json`.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// The seed.
    pub seed: u64,
    /// Events written by the application.
    pub events_written: usize,
    /// Events the audit found in the outbox.
    pub events_audited: usize,
    /// (event, endpoint) pairs.
    pub pairs: usize,
    /// The final audit's counts.
    pub totals: Totals,
    /// The counts before the replay (after the faults stopped and the pairs settled).
    pub totals_before_replay: Totals,
    /// Receiver-side duplicates: accepted requests whose webhook id the same receiver had
    /// accepted before.
    pub duplicates: u64,
    /// `duplicates` / `pairs`, percent.
    pub duplicate_percent: f64,
    /// Requests that failed signature verification.
    pub bad_signatures: u64,
    /// Pairs the audit calls delivered whose receiver never accepted the event (must be 0).
    pub delivered_not_received: usize,
    /// Pairs a receiver accepted that the audit does not call delivered.
    pub received_not_delivered: usize,
    /// Each duplicated pair with what its attempt log says caused it.
    pub duplicated_pairs: Vec<Duplicate>,
    /// What each kind of receiver saw, over every tenant.
    pub receivers: BTreeMap<String, Tally>,
    /// Port faults' chances.
    pub port_faults: PortFaults,
    /// Wire faults' chances.
    pub wire_faults: WireFaults,
    /// Panics injected before the POST.
    pub panics_before_post: u64,
    /// Panics injected after the POST.
    pub panics_after_post: u64,
    /// Delivery messages sent twice.
    pub duplicate_messages: u64,
    /// Wire faults fired, per rule.
    pub wire_faults_fired: BTreeMap<String, usize>,
    /// Poller restarts.
    pub poller_restarts: u32,
    /// Endpoints enabled after the faults.
    pub endpoints_enabled: usize,
    /// Dead letters replayed.
    pub replayed: u32,
    /// Time scale.
    pub time_scale: f64,
    /// Wall time of the run, seconds.
    pub duration_seconds: f64,
    /// Goals met.
    pub passed: bool,
}

impl Summary {
    /// Builds the summary.
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        seed: u64,
        args: &Args,
        report: &AuditReport,
        before: &AuditReport,
        receivers: &[(TenantId, EndpointId, EndpointReceiver)],
        written: &[(String, TenantId)],
        dice: &Dice,
        duplicated_pairs: Vec<Duplicate>,
        fired: Vec<(String, usize)>,
        restarts: u32,
        enabled: usize,
        replayed: u32,
        elapsed: Duration,
    ) -> Self {
        let not_delivered: HashSet<(String, String)> = report
            .not_delivered
            .iter()
            .map(|p| (p.event_id.clone(), p.endpoint_id.clone()))
            .chain(
                report
                    .unaccounted
                    .iter()
                    .map(|u| (u.pair.event_id.clone(), u.pair.endpoint_id.clone())),
            )
            .collect();
        let mut delivered_not_received = 0;
        let mut received_not_delivered = 0;
        let mut by_kind: BTreeMap<String, Tally> = BTreeMap::new();
        for (tenant, endpoint, r) in receivers {
            let accepted = r.accepted();
            for (event, t) in written {
                if t != tenant {
                    continue;
                }
                let delivered = !not_delivered.contains(&(event.clone(), endpoint.to_string()));
                let received = accepted.contains_key(event);
                if delivered && !received {
                    delivered_not_received += 1;
                }
                if received && !delivered {
                    received_not_delivered += 1;
                }
            }
            let t = r.tally();
            let k = by_kind.entry(r.name.clone()).or_default();
            k.requests += t.requests;
            k.accepted += t.accepted;
            k.distinct_accepted += t.distinct_accepted;
            k.duplicates += t.duplicates;
            k.bad_signatures += t.bad_signatures;
        }
        let duplicates: u64 = by_kind.values().map(|t| t.duplicates).sum();
        let bad_signatures: u64 = by_kind.values().map(|t| t.bad_signatures).sum();
        let pairs = report.totals.pairs();
        let duplicate_percent = if pairs == 0 {
            0.0
        } else {
            duplicates as f64 * 100.0 / pairs as f64
        };
        // Issue 26: no pair both delivered and dead-lettered, before or after the replay.
        let passed = report.totals.unaccounted == 0
            && report.totals.delivered_in_dlq == 0
            && before.totals.delivered_in_dlq == 0
            && duplicate_percent <= MAX_DUPLICATE_PERCENT
            && bad_signatures == 0
            && delivered_not_received == 0
            && pairs == written.len() * crate::KINDS.len();
        Self {
            seed,
            events_written: written.len(),
            events_audited: report.events,
            pairs,
            totals: report.totals,
            totals_before_replay: before.totals,
            duplicates,
            duplicate_percent,
            bad_signatures,
            delivered_not_received,
            received_not_delivered,
            duplicated_pairs,
            receivers: by_kind,
            port_faults: dice.faults,
            wire_faults: crate::WIRE_FAULTS,
            panics_before_post: dice.injected.panics_before_post.load(Ordering::SeqCst),
            panics_after_post: dice.injected.panics_after_post.load(Ordering::SeqCst),
            duplicate_messages: dice.injected.duplicate_messages.load(Ordering::SeqCst),
            wire_faults_fired: fired.into_iter().collect(),
            poller_restarts: restarts,
            endpoints_enabled: enabled,
            replayed,
            time_scale: args.time_scale,
            duration_seconds: elapsed.as_secs_f64(),
            passed,
        }
    }

    /// Goals met.
    pub fn passed(&self) -> bool {
        self.passed
    }

    /// Prints the result, and each unaccounted pair with its trace.
    pub fn print(&self, report: &AuditReport) {
        println!();
        println!("=== soak seed {} ===", self.seed);
        let counts = |t: &Totals| {
            PairStatus::ALL
                .iter()
                .map(|s| format!("{} {}", s.as_str(), t.of(*s)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "events {} (audited {}), pairs {}",
            self.events_written, self.events_audited, self.pairs
        );
        println!("before the replay: {}", counts(&self.totals_before_replay));
        println!("after the replay:  {}", counts(&self.totals));
        println!(
            "delivered and also in the DLQ: {} before the replay, {} after (goal 0)",
            self.totals_before_replay.delivered_in_dlq, self.totals.delivered_in_dlq
        );
        println!(
            "receivers: duplicates {} ({:.2} % of pairs, goal <= {MAX_DUPLICATE_PERCENT} %), bad signatures {}, delivered but never received {}, received but not delivered {}",
            self.duplicates,
            self.duplicate_percent,
            self.bad_signatures,
            self.delivered_not_received,
            self.received_not_delivered
        );
        for d in &self.duplicated_pairs {
            println!(
                "  duplicate: {} at {} accepted {} times: {} [{}]",
                d.event_id,
                d.endpoint,
                d.accepted,
                d.cause,
                d.attempts.join(", ")
            );
        }
        for (kind, t) in &self.receivers {
            println!(
                "  {kind:<13} requests {:>5}  accepted {:>5}  distinct {:>5}  duplicates {:>3}",
                t.requests, t.accepted, t.distinct_accepted, t.duplicates
            );
        }
        println!(
            "injected: {} panics before the POST, {} after, {} duplicate messages, {} poller restarts, {} wire faults",
            self.panics_before_post,
            self.panics_after_post,
            self.duplicate_messages,
            self.poller_restarts,
            self.wire_faults_fired.values().sum::<usize>()
        );
        println!(
            "recovery: {} endpoint(s) enabled, {} dead letter(s) replayed; {:.0} s in all",
            self.endpoints_enabled, self.replayed, self.duration_seconds
        );
        if !report.unaccounted.is_empty() {
            let mut only = report.clone();
            only.not_delivered.clear();
            let mut out = Vec::new();
            let _ = tern_ops::audit::print::print_report(&mut out, &only);
            println!("{}", String::from_utf8_lossy(&out));
        }
        println!(
            "{}",
            if self.passed {
                "PASSED: 0 unaccounted, 0 delivered and dead-lettered, duplicates within 1 %"
            } else {
                "FAILED: see above"
            }
        );
    }
}

/// Every pair a receiver accepted more than once, with its cause read from the ledger.
pub async fn duplicates(
    ledger: &dyn tern_core::ports::DeliveryLedger,
    receivers: &[(TenantId, EndpointId, EndpointReceiver)],
) -> Vec<Duplicate> {
    let mut out = Vec::new();
    for (tenant, endpoint, r) in receivers {
        for (event, n) in r.accepted() {
            if n < 2 {
                continue;
            }
            let rows = match tern_core::EventId::new(event.clone()) {
                Ok(id) => ledger.history(tenant, &id).await.unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            let rows: Vec<_> = rows.iter().filter(|a| &a.endpoint_id == endpoint).collect();
            let took_over = rows
                .iter()
                .any(|a| a.takeover > 0 || a.outcome == tern_core::ports::OUTCOME_ABANDONED);
            out.push(Duplicate {
                event_id: event,
                endpoint: r.name.clone(),
                accepted: n,
                cause: if took_over {
                    "takeover after a sender stopped after its POST".into()
                } else {
                    "unexplained".into()
                },
                attempts: rows
                    .iter()
                    .map(|a| {
                        if a.takeover > 0 {
                            format!(
                                "{}.{} {} takeover {}",
                                a.replay_count, a.attempt, a.outcome, a.takeover
                            )
                        } else {
                            format!("{}.{} {}", a.replay_count, a.attempt, a.outcome)
                        }
                    })
                    .collect(),
            });
        }
    }
    out
}
