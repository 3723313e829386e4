//! The per-pair rule of `tern audit`: from what the stores hold about one (event,
//! endpoint) pair, which of delivered, waiting, in flight, dead-lettered, parked or
//! unaccounted it is, and why. Pure: the caller reads the stores.
//!
//! The order of the checks is the order of the evidence's strength:
//! 1. **delivered**: the state item's delivered mark, or a `delivered` attempt row;
//! 2. **dead-lettered**: a DLQ message for the pair's latest budget (the reason from its
//!    dead-letter record, `sqs_redrive` when SQS moved it after `maxReceiveCount`);
//! 3. the latest budget's claim, when it is ahead of its attempt rows: **in flight** while
//!    its lease lasts, **waiting** for SQS to deliver it again for one grace period after
//!    that, then unaccounted;
//! 4. the latest budget's last attempt row: `dead_letter:<reason>` is **dead-lettered**
//!    (checked against the DLQ when the DLQ was read whole); `retry` is **waiting** until
//!    its next attempt is due plus the grace period, longer while the endpoint's circuit
//!    is open or its receiver's pause lasts (up to the end of the delivery's retry window);
//! 5. no trace in the ledger: **parked** when the relay-failure queue names the event,
//!    **in flight** while the event is younger than the grace period, **waiting** while
//!    the endpoint's circuit holds new deliveries back, else unaccounted.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use tern_core::decision::retry_window_end;
use tern_core::health::{EndpointHealth, HealthPolicy, HealthState, chrono_duration};
use tern_core::ports::{
    AttemptRecord, DeliveryState, OUTCOME_ABANDONED, OUTCOME_DUPLICATE, OUTCOME_REQUEUED,
};
use tern_core::put_back::held_back_cap;
use tern_core::trace::{OutboxEntry, PairState};
use tern_core::{Endpoint, EndpointId, RetrySchedule};

use crate::attempts::DEAD_LETTER_OUTCOME_PREFIX;

/// Where a pair stands. The `--json` names are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairStatus {
    /// The receiver answered 2xx.
    Delivered,
    /// The next attempt is scheduled (a queue delay, a Step Functions wait, a message SQS
    /// delivers again), or held back by the endpoint's open circuit or pause.
    Waiting,
    /// Too recent to judge: an attempt is being made, or the event is younger than the
    /// grace period.
    InFlight,
    /// In the DLQ, with its reason: `tern replay` brings it back.
    DeadLettered,
    /// In the relay-failure queue: `tern relay-failures --retry` relays it again.
    Parked,
    /// None of the above: lost, or in a place the audit cannot see. Exit 1.
    Unaccounted,
}

impl PairStatus {
    /// Every status, in report order.
    pub const ALL: [PairStatus; 6] = [
        PairStatus::Delivered,
        PairStatus::Waiting,
        PairStatus::InFlight,
        PairStatus::DeadLettered,
        PairStatus::Parked,
        PairStatus::Unaccounted,
    ];

    /// The `--json` name (`in_flight`, `dead_lettered`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            PairStatus::Delivered => "delivered",
            PairStatus::Waiting => "waiting",
            PairStatus::InFlight => "in_flight",
            PairStatus::DeadLettered => "dead_lettered",
            PairStatus::Parked => "parked",
            PairStatus::Unaccounted => "unaccounted",
        }
    }
}

impl std::fmt::Display for PairStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The settings the rule needs, from the same variables the sender reads.
#[derive(Debug, Clone)]
pub struct Rules {
    /// How long a pair may show no progress before it counts as unaccounted: a young
    /// event with no attempt, a due attempt not made yet, a crashed sender's message not
    /// delivered again yet. Real time (not scaled).
    pub grace: Duration,
    /// `TERN_TIME_SCALE`: the attempt log's waits are logical seconds, multiplied by this
    /// to get real ones (1.0 in AWS).
    pub time_scale: f64,
    /// The deployment's retry schedule (`TERN_RETRY_SCHEDULE`), for endpoints without
    /// their own.
    pub default_schedule: RetrySchedule,
    /// The endpoint-health thresholds (`TERN_HEALTH_*`): whether a circuit holds
    /// deliveries back, and its probe interval.
    pub health: HealthPolicy,
}

impl Rules {
    fn scaled(&self, logical_seconds: u64) -> Duration {
        let real_ms = logical_seconds as f64 * 1000.0 * self.time_scale;
        Duration::milliseconds(real_ms.min(i64::MAX as f64 / 2.0) as i64)
    }

    fn probe_interval(&self) -> std::time::Duration {
        self.health.timings(self.time_scale).probe_interval()
    }
}

/// A DLQ message of the pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DlqHit {
    /// SQS message id (`tern dlq --show`).
    pub message_id: String,
    /// Dead-letter reason, or `sqs_redrive` for a message SQS moved itself.
    pub reason: String,
    /// When it was dead-lettered (not known for `sqs_redrive`).
    pub at: Option<DateTime<Utc>>,
    /// The budget that ended there.
    pub replay_count: Option<u32>,
}

/// How a relay-failure queue message names the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkedMatch {
    /// It names the event and this endpoint (a delivery message SQS refused).
    Endpoint,
    /// It names the event (an unreadable or misconfigured record): every pair.
    Event,
    /// A stream batch the stream mapping gave up on, whose arrival window holds the
    /// event's creation time (Lambda's record names no event).
    Window,
}

/// A relay-failure queue message that covers the pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParkedHit {
    /// SQS message id (`tern relay-failures --retry`).
    pub message_id: String,
    /// Why it was parked.
    pub reason: String,
    /// How it names the pair.
    pub matched: ParkedMatch,
}

/// What is known of one pair.
#[derive(Debug, Clone, Copy)]
pub struct PairFacts<'a> {
    /// The event.
    pub event: &'a OutboxEntry,
    /// The endpoint.
    pub endpoint_id: &'a EndpointId,
    /// The endpoint as the registry holds it now (`None`: deleted).
    pub endpoint: Option<&'a Endpoint>,
    /// Its health record (`None`: never attempted, or reset by `enable`).
    pub health: Option<&'a EndpointHealth>,
    /// The pair's state item (`None`: no sender claimed it).
    pub state: Option<&'a PairState>,
    /// The pair's attempt rows, any order.
    pub attempts: &'a [&'a AttemptRecord],
    /// The pair's DLQ message, the latest budget's if several.
    pub dlq: Option<&'a DlqHit>,
    /// A relay-failure queue message that covers it.
    pub parked: Option<&'a ParkedHit>,
    /// True when the whole DLQ was read: a dead letter the attempt log records and the
    /// DLQ does not hold is then missing, not unread.
    pub dlq_complete: bool,
}

/// The rule's answer for one pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Where it stands.
    pub status: PairStatus,
    /// Why, in words.
    pub detail: String,
    /// When the next attempt is due (waiting), when known.
    pub due_at: Option<DateTime<Utc>>,
    /// Dead-letter or parking reason.
    pub reason: Option<String>,
    /// When it was delivered or dead-lettered.
    pub at: Option<DateTime<Utc>>,
    /// The DLQ or relay-failure queue message, when one holds it.
    pub message_id: Option<String>,
}

impl Finding {
    fn new(status: PairStatus, detail: impl Into<String>) -> Self {
        Self {
            status,
            detail: detail.into(),
            due_at: None,
            reason: None,
            at: None,
            message_id: None,
        }
    }

    fn due(mut self, at: Option<DateTime<Utc>>) -> Self {
        self.due_at = at;
        self
    }
}

/// A time as the details print it: UTC to the millisecond.
fn t(at: DateTime<Utc>) -> String {
    crate::attempts::utc(at)
}

fn ended_at(r: &AttemptRecord) -> DateTime<Utc> {
    r.started_at + Duration::milliseconds(i64::try_from(r.latency_ms).unwrap_or(0))
}

fn key(replay: u32, attempt: u32) -> u64 {
    (u64::from(replay) << 32) | u64::from(attempt)
}

/// When the endpoint holds deliveries back now (its circuit is open, or its receiver
/// asked for a pause): until when, and in words.
fn held_back(
    f: &PairFacts<'_>,
    rules: &Rules,
    now: DateTime<Utc>,
) -> Option<(DateTime<Utc>, String)> {
    let endpoint = f.endpoint?;
    let h = f.health?;
    match h.state(endpoint.enabled, &rules.health, now) {
        HealthState::Open => {
            let next = h.next_probe_at.unwrap_or(now);
            Some((
                next,
                format!(
                    "its endpoint's circuit is open; the next probe may go at {}",
                    t(next)
                ),
            ))
        }
        HealthState::Paused => {
            let until = h.paused_until.unwrap_or(now);
            Some((
                until,
                format!(
                    "its endpoint's receiver asked for a pause until {}",
                    t(until)
                ),
            ))
        }
        _ => None,
    }
}

/// When the endpoint last stopped holding deliveries back, if it did by `now`: its
/// circuit's close, or the end of its receiver's last pause, whichever is later, and in
/// words. A delivery held back before then comes back up to the held-back ceiling (900 s,
/// [`tern_core::put_back::held_back_cap`]) after its last hold, and that hold may have come
/// just before the release; the pair's listed due time is its first hold's (a later hold
/// writes nothing), so only this tells the audit it may still be on its way.
fn released(f: &PairFacts<'_>, now: DateTime<Utc>) -> Option<(DateTime<Utc>, String)> {
    let h = f.health?;
    let closed = h
        .closed_at
        .filter(|c| *c <= now)
        .map(|c| (c, format!("its endpoint's circuit closed at {}", t(c))));
    let resumed = h.paused_until.filter(|p| *p <= now).map(|p| {
        (
            p,
            format!("its endpoint's receiver's pause ended at {}", t(p)),
        )
    });
    closed.into_iter().chain(resumed).max_by_key(|(at, _)| *at)
}

/// The end of the delivery's retry window: past it the sender dead-letters a held-back
/// delivery `exhausted`, so nothing may wait longer.
fn window_end(f: &PairFacts<'_>, first: DateTime<Utc>, rules: &Rules) -> DateTime<Utc> {
    let schedule = f.endpoint.map_or_else(
        || rules.default_schedule.clone(),
        |e| e.retry_policy(&rules.default_schedule).0,
    );
    retry_window_end(first, &schedule, rules.time_scale, rules.probe_interval())
}

/// Classifies one pair at `now`.
pub fn classify(f: &PairFacts<'_>, rules: &Rules, now: DateTime<Utc>) -> Finding {
    let grace = rules.grace;
    // 1. Delivered.
    let delivered_row = f.attempts.iter().find(|r| r.outcome == "delivered");
    if let Some(at) = f
        .state
        .and_then(|s| s.delivered_at)
        .or(delivered_row.map(|r| ended_at(r)))
    {
        let mut d = Finding::new(PairStatus::Delivered, "delivered");
        d.at = Some(at);
        return d;
    }
    let latest_replay = f
        .attempts
        .iter()
        .map(|r| r.replay_count)
        .chain(f.state.and_then(PairState::claim_replay))
        .max();
    // 2. In the DLQ, for the latest budget (an older budget's copy cannot be replayed
    // past the claims of a later one).
    if let Some(d) = f.dlq
        && d.replay_count.unwrap_or(u32::MAX) >= latest_replay.unwrap_or(0)
    {
        let mut found = Finding::new(
            PairStatus::DeadLettered,
            format!("in the DLQ ({}); `tern replay` once fixed", d.reason),
        );
        found.reason = Some(d.reason.clone());
        found.at = d.at;
        found.message_id = Some(d.message_id.clone());
        return found;
    }
    let mut budget: Vec<&AttemptRecord> = f
        .attempts
        .iter()
        .copied()
        .filter(|r| {
            Some(r.replay_count) == latest_replay
                && r.outcome != OUTCOME_ABANDONED
                && r.outcome != OUTCOME_DUPLICATE
        })
        .collect();
    budget.sort_by_key(|r| (r.attempt, r.takeover, r.started_at));
    let last = budget.last().copied();
    let first_try = budget.first().map(|r| r.started_at);
    let last_key = last.map(|r| key(r.replay_count, r.attempt));

    let held = held_back(f, rules, now);
    let released = released(f, now);
    let cap = chrono_duration(held_back_cap(rules.time_scale));
    // Held back until lately: waiting for one grace after the release (the default grace
    // covers the held-back ceiling, `super::DEFAULT_GRACE`).
    let released_lately = |what: &str| {
        let (at, why) = released.as_ref()?;
        (now < *at + grace).then(|| {
            Finding::new(
                PairStatus::Waiting,
                format!(
                    "{what}; {why}, and a delivery held back until then comes back up to {} after                      its last hold",
                    humantime::format_duration(cap.to_std().unwrap_or_default())
                ),
            )
            .due(Some(*at + cap))
        })
    };
    let waiting_or_lost = |due: DateTime<Utc>, first: DateTime<Utc>, what: String| {
        if now < due + grace {
            return Finding::new(PairStatus::Waiting, what).due(Some(due));
        }
        if let Some((until, why)) = &held
            && now < window_end(f, first, rules) + grace
        {
            return Finding::new(PairStatus::Waiting, format!("{what}; held back: {why}"))
                .due(Some(*until));
        }
        if let Some(waiting) = released_lately(&what) {
            return waiting;
        }
        Finding::new(
            PairStatus::Unaccounted,
            format!(
                "{what}, and it has not been made {} later; not held back by its endpoint, not in \
                 the DLQ",
                humantime::format_duration(std::time::Duration::from_secs(
                    u64::try_from((now - due).num_seconds()).unwrap_or(0)
                ))
            ),
        )
        .due(Some(due))
    };
    // 3. A claim ahead of the rows: an attempt under way, or its sender stopped, or (a
    // claim given up, its lease ended at 0) a try put back on the queue unsent, waiting
    // for the time its release listed.
    if let Some(s) = f.state
        && !s.claim_done
        && s.claim_key.is_some_and(|k| last_key.is_none_or(|l| k > l))
    {
        let attempt = s.claim_attempt().unwrap_or(0);
        if s.lease_until.is_some_and(|l| l.timestamp_millis() == 0)
            && let Some(due) = s.waiting_due
        {
            let first = first_try.unwrap_or(f.event.created_at);
            return waiting_or_lost(
                due,
                first,
                format!(
                    "attempt {attempt} was put back unsent; due again at {}",
                    t(due)
                ),
            );
        }
        let lease = s.lease_until.unwrap_or(now);
        if lease > now {
            return Finding::new(
                PairStatus::InFlight,
                format!("attempt {attempt} is being made (lease until {})", t(lease)),
            );
        }
        if now < lease + grace {
            return Finding::new(
                PairStatus::Waiting,
                format!(
                    "attempt {attempt}'s sender stopped before finishing (its lease ran out at {}); \
                     SQS delivers the message again after its visibility timeout",
                    t(lease)
                ),
            );
        }
        return Finding::new(
            PairStatus::Unaccounted,
            format!(
                "attempt {attempt} was claimed{} and never finished; its lease ran out at {} and \
                 no sender took it over, and it is not in the DLQ",
                s.claimed_at
                    .map(|c| format!(" at {}", t(c)))
                    .unwrap_or_default(),
                t(lease)
            ),
        );
    }

    // 4. The latest budget's last attempt.
    // The waiting list on the state item (a retry's finish, a first hold-back, a try put
    // back without counting): the due time the sender computed, in real time. Stale when
    // a later row exists.
    if let Some(s) = f.state
        && let (Some(attempt), Some(due)) = (s.waiting_attempt, s.waiting_due)
        && last.is_none_or(|r| {
            (r.attempt < attempt && !r.outcome.starts_with(DEAD_LETTER_OUTCOME_PREFIX))
                || (r.attempt == attempt && r.outcome == OUTCOME_REQUEUED)
        })
    {
        let first = first_try.unwrap_or(f.event.created_at);
        return waiting_or_lost(due, first, format!("attempt {attempt} due at {}", t(due)));
    }
    if let Some(r) = last {
        if let Some(reason) = r.outcome.strip_prefix(DEAD_LETTER_OUTCOME_PREFIX) {
            let at = ended_at(r);
            if f.dlq_complete {
                let mut lost = Finding::new(
                    PairStatus::Unaccounted,
                    format!(
                        "dead-lettered ({reason}) at {}, but not in the DLQ: removed by hand, \
                         past the DLQ's retention, or replayed and lost",
                        t(at)
                    ),
                );
                lost.reason = Some(reason.to_owned());
                lost.at = Some(at);
                return lost;
            }
            let mut dead = Finding::new(
                PairStatus::DeadLettered,
                format!("dead-lettered ({reason}) per the attempt log; the DLQ was not read whole"),
            );
            dead.reason = Some(reason.to_owned());
            dead.at = Some(at);
            return dead;
        }
        let due = ended_at(r) + rules.scaled(r.next_wait_seconds.unwrap_or(0));
        let what = if r.outcome == OUTCOME_REQUEUED {
            format!(
                "attempt {} did not count at {} (pushed back, or our failure); made again at {}",
                r.attempt,
                t(ended_at(r)),
                t(due)
            )
        } else {
            format!(
                "attempt {} failed at {}; attempt {} due at {}",
                r.attempt,
                t(ended_at(r)),
                r.attempt + 1,
                t(due)
            )
        };
        return waiting_or_lost(due, first_try.unwrap_or(r.started_at), what);
    }

    // A finished claim without its row (the row is written for people and may be lost).
    if let Some(s) = f.state
        && s.claim_done
    {
        let attempt = s.claim_attempt().unwrap_or(0);
        let since = s.updated_at.or(s.claimed_at).unwrap_or(f.event.created_at);
        if s.state == Some(DeliveryState::DeadLettered) {
            return Finding::new(
                PairStatus::Unaccounted,
                format!(
                    "the ledger says attempt {attempt} was dead-lettered at {} (no attempt row), \
                     and it is not in the DLQ",
                    t(since)
                ),
            );
        }
        // The wait is unknown: the longest the delivery may wait is its retry window.
        let end = window_end(f, since, rules);
        return waiting_or_lost(
            end,
            since,
            format!(
                "attempt {attempt} finished at {} ({}; its attempt row is missing), next attempt \
                 due by {}",
                t(since),
                s.state.map_or("state not recorded", |st| match st {
                    DeliveryState::Retrying => "retry queued",
                    DeliveryState::Delivered => "delivered",
                    DeliveryState::DeadLettered => "dead-lettered",
                }),
                t(end)
            ),
        );
    }

    // 5. No trace in the ledger.
    if let Some(p) = f.parked {
        let mut parked = Finding::new(
            PairStatus::Parked,
            format!(
                "in the relay-failure queue ({}); `tern relay-failures --retry {}` once fixed",
                p.reason, p.message_id
            ),
        );
        parked.reason = Some(p.reason.clone());
        parked.message_id = Some(p.message_id.clone());
        return parked;
    }
    let created = f.event.created_at;
    if now < created + grace {
        return Finding::new(
            PairStatus::InFlight,
            format!("created at {}: no attempt yet", t(created)),
        );
    }
    if let Some((until, why)) = &held
        && now < window_end(f, created, rules) + grace
    {
        return Finding::new(
            PairStatus::Waiting,
            format!("no attempt yet; held back: {why}"),
        )
        .due(Some(*until));
    }
    if let Some(waiting) = released_lately("no attempt yet") {
        return waiting;
    }
    Finding::new(
        PairStatus::Unaccounted,
        "no trace: no claim and no attempt in the ledger, not in the DLQ, not in the \
         relay-failure queue",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::{EventId, Secret, TenantId};

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn rules() -> Rules {
        Rules {
            grace: Duration::minutes(15),
            time_scale: 1.0,
            default_schedule: RetrySchedule::standard(),
            health: HealthPolicy::default(),
        }
    }

    fn event() -> OutboxEntry {
        OutboxEntry {
            event_id: EventId::new("evt_1").unwrap(),
            event_type: "order.paid".into(),
            tenant_id: TenantId::new("tnt_a").unwrap(),
            created_at: at("2026-12-01T10:00:00Z"),
        }
    }

    fn endpoint() -> Endpoint {
        Endpoint::new(
            EndpointId::new("ep_1").unwrap(),
            TenantId::new("tnt_a").unwrap(),
            "https://example.com/hook",
            vec!["*".into()],
            Secret::generate(),
            at("2026-11-01T00:00:00Z"),
        )
    }

    fn row(attempt: u32, started: &str, outcome: &str, wait: Option<u64>) -> AttemptRecord {
        AttemptRecord {
            event_id: EventId::new("evt_1").unwrap(),
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            replay_count: 0,
            attempt,
            takeover: 0,
            started_at: at(started),
            latency_ms: 1000,
            status: Some(503),
            error_class: None,
            error: None,
            location: None,
            response_excerpt: None,
            excerpt_truncated: false,
            outcome: outcome.into(),
            next_wait_seconds: wait,
        }
    }

    fn state(attempt: u32, done: bool, lease: &str) -> PairState {
        PairState {
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            claim_key: Some(u64::from(attempt)),
            claim_done: done,
            state: done.then_some(DeliveryState::Retrying),
            lease_until: Some(at(lease)),
            claimed_at: Some(at("2026-12-01T10:00:01Z")),
            delivered_at: None,
            updated_at: None,
            waiting_attempt: None,
            waiting_due: None,
        }
    }

    struct Case {
        event: OutboxEntry,
        endpoint: Endpoint,
        health: Option<EndpointHealth>,
        state: Option<PairState>,
        rows: Vec<AttemptRecord>,
        dlq: Option<DlqHit>,
        parked: Option<ParkedHit>,
        dlq_complete: bool,
        grace: Duration,
    }

    impl Case {
        fn new() -> Self {
            Self {
                event: event(),
                endpoint: endpoint(),
                health: None,
                state: None,
                rows: vec![],
                dlq: None,
                parked: None,
                dlq_complete: true,
                grace: rules().grace,
            }
        }

        fn at(&self, now: &str) -> Finding {
            let rows: Vec<&AttemptRecord> = self.rows.iter().collect();
            classify(
                &PairFacts {
                    event: &self.event,
                    endpoint_id: &self.endpoint.id,
                    endpoint: Some(&self.endpoint),
                    health: self.health.as_ref(),
                    state: self.state.as_ref(),
                    attempts: &rows,
                    dlq: self.dlq.as_ref(),
                    parked: self.parked.as_ref(),
                    dlq_complete: self.dlq_complete,
                },
                &Rules {
                    grace: self.grace,
                    ..rules()
                },
                at(now),
            )
        }
    }

    #[test]
    fn no_trace_is_in_flight_within_the_grace_then_unaccounted() {
        let c = Case::new();
        assert_eq!(c.at("2026-12-01T10:14:00Z").status, PairStatus::InFlight);
        let lost = c.at("2026-12-01T10:16:00Z");
        assert_eq!(lost.status, PairStatus::Unaccounted);
        assert!(lost.detail.starts_with("no trace"), "{}", lost.detail);
        let mut parked = Case::new();
        parked.parked = Some(ParkedHit {
            message_id: "m1".into(),
            reason: "delivery queue refused the message: too big".into(),
            matched: ParkedMatch::Endpoint,
        });
        let p = parked.at("2026-12-01T11:00:00Z");
        assert_eq!(p.status, PairStatus::Parked);
        assert_eq!(p.message_id.as_deref(), Some("m1"));
    }

    #[test]
    fn a_retry_waits_until_due_plus_grace() {
        let mut c = Case::new();
        c.rows = vec![row(1, "2026-12-01T10:00:01Z", "retry", Some(1800))];
        c.state = Some(state(1, true, "2026-12-01T10:01:01Z"));
        let w = c.at("2026-12-01T10:20:00Z");
        assert_eq!(w.status, PairStatus::Waiting);
        assert_eq!(w.due_at, Some(at("2026-12-01T10:30:02Z")));
        assert_eq!(c.at("2026-12-01T10:45:01Z").status, PairStatus::Waiting);
        let lost = c.at("2026-12-01T10:45:03Z");
        assert_eq!(lost.status, PairStatus::Unaccounted, "{}", lost.detail);
        assert!(lost.detail.contains("attempt 2 due at"), "{}", lost.detail);
    }

    #[test]
    fn an_open_circuit_holds_an_overdue_delivery_until_its_window_ends() {
        let mut c = Case::new();
        c.rows = vec![row(1, "2026-12-01T10:00:01Z", "retry", Some(60))];
        let mut h = EndpointHealth::empty(c.endpoint.tenant_id.clone(), c.endpoint.id.clone(), 300);
        h.opened_at = Some(at("2026-12-01T10:00:30Z"));
        h.next_probe_at = Some(at("2026-12-01T12:00:00Z"));
        c.health = Some(h);
        let w = c.at("2026-12-01T11:00:00Z");
        assert_eq!(w.status, PairStatus::Waiting, "{}", w.detail);
        assert!(w.detail.contains("circuit is open"), "{}", w.detail);
        // The default schedule's window is about 37 h (+10 % jitter); after it, nothing waits.
        assert_eq!(c.at("2026-12-03T12:00:00Z").status, PairStatus::Unaccounted);
    }

    #[test]
    fn a_claim_ahead_of_the_rows_is_in_flight_then_waits_for_sqs_then_is_lost() {
        let mut c = Case::new();
        c.rows = vec![row(1, "2026-12-01T10:00:01Z", "retry", Some(60))];
        c.state = Some(state(2, false, "2026-12-01T10:02:30Z"));
        assert_eq!(c.at("2026-12-01T10:02:00Z").status, PairStatus::InFlight);
        assert_eq!(c.at("2026-12-01T10:10:00Z").status, PairStatus::Waiting);
        let lost = c.at("2026-12-01T10:20:00Z");
        assert_eq!(lost.status, PairStatus::Unaccounted);
        assert!(
            lost.detail.contains("attempt 2 was claimed"),
            "{}",
            lost.detail
        );
        // Unless SQS moved it to the DLQ after maxReceiveCount.
        c.dlq = Some(DlqHit {
            message_id: "d1".into(),
            reason: "sqs_redrive".into(),
            at: None,
            replay_count: Some(0),
        });
        assert_eq!(
            c.at("2026-12-01T10:20:00Z").status,
            PairStatus::DeadLettered
        );
    }

    #[test]
    fn a_dead_letter_row_must_be_in_the_dlq_when_the_dlq_was_read_whole() {
        let mut c = Case::new();
        c.rows = vec![row(1, "2026-12-01T10:00:01Z", "dead_letter:gone", None)];
        let lost = c.at("2026-12-01T11:00:00Z");
        assert_eq!(lost.status, PairStatus::Unaccounted);
        assert!(lost.detail.contains("not in the DLQ"), "{}", lost.detail);
        c.dlq_complete = false;
        let d = c.at("2026-12-01T11:00:00Z");
        assert_eq!(d.status, PairStatus::DeadLettered);
        assert_eq!(d.reason.as_deref(), Some("gone"));
        // An older budget's copy in the DLQ does not account for a later budget.
        c.dlq_complete = true;
        let mut replayed = row(1, "2026-12-01T10:30:00Z", "retry", Some(60));
        replayed.replay_count = 1;
        c.rows.push(replayed);
        c.dlq = Some(DlqHit {
            message_id: "d1".into(),
            reason: "gone".into(),
            at: None,
            replay_count: Some(0),
        });
        let w = c.at("2026-12-01T10:35:00Z");
        assert_eq!(w.status, PairStatus::Waiting, "{}", w.detail);
    }

    #[test]
    fn the_waiting_list_gives_the_due_time_even_without_a_claim() {
        // A first attempt held back by an open circuit: listed, never claimed.
        let mut c = Case::new();
        let mut s = state(1, false, "2026-12-01T10:00:00Z");
        s.claim_key = None;
        s.waiting_attempt = Some(1);
        s.waiting_due = Some(at("2026-12-01T10:00:05Z"));
        c.state = Some(s);
        let w = c.at("2026-12-01T10:10:00Z");
        assert_eq!(w.status, PairStatus::Waiting, "{}", w.detail);
        assert_eq!(w.due_at, Some(at("2026-12-01T10:00:05Z")));
        assert_eq!(c.at("2026-12-01T10:16:00Z").status, PairStatus::Unaccounted);
        // A later row makes the listing stale.
        c.rows = vec![row(1, "2026-12-01T10:00:06Z", "retry", Some(60))];
        let w = c.at("2026-12-01T10:05:00Z");
        assert!(w.detail.starts_with("attempt 1 failed"), "{}", w.detail);
    }

    /// Issue 29 item 3: behind an open circuit a delivery is held back again and again,
    /// each hold longer, up to 900 s; only its first hold lists its due time. Its last
    /// hold may come a moment before the circuit closes, so it may be back only 900 s
    /// after the close, and its batch may crash and SQS give it back 360 s later still.
    #[test]
    fn a_delivery_held_back_until_its_circuit_closed_waits_one_grace_after_the_close() {
        let mut c = Case::new();
        let mut s = state(1, false, "2026-12-01T10:00:00Z");
        s.claim_key = None;
        s.waiting_attempt = Some(1);
        s.waiting_due = Some(at("2026-12-01T10:01:00Z"));
        c.state = Some(s);
        let mut h = EndpointHealth::empty(c.endpoint.tenant_id.clone(), c.endpoint.id.clone(), 300);
        h.closed_at = Some(at("2026-12-01T12:00:00Z"));
        h.last_success_at = h.closed_at;
        c.health = Some(h);
        // Its due time is two hours old and the circuit is closed, yet it is on its way.
        let w = c.at("2026-12-01T12:05:00Z");
        assert_eq!(w.status, PairStatus::Waiting, "{}", w.detail);
        assert!(w.detail.contains("circuit closed at"), "{}", w.detail);
        assert_eq!(
            w.due_at,
            Some(at("2026-12-01T12:15:00Z")),
            "the close + 900 s"
        );
        // The grace counts from the close: 15 min in these tests, then lost.
        assert_eq!(c.at("2026-12-01T12:14:59Z").status, PairStatus::Waiting);
        assert_eq!(c.at("2026-12-01T12:15:01Z").status, PairStatus::Unaccounted);
        // The default grace covers the ceiling and a crashed return: held back at
        // 11:59:59 for 900 s, back at 12:14:59, its batch crashed, back again 360 s later.
        c.grace = Duration::from_std(crate::audit::DEFAULT_GRACE).unwrap();
        let crashed_return = at("2026-12-01T11:59:59Z")
            + Duration::seconds(i64::from(tern_core::retry::MAX_QUEUE_DELAY_SECONDS))
            + Duration::seconds(360);
        assert_eq!(crashed_return, at("2026-12-01T12:20:59Z"));
        assert_eq!(c.at("2026-12-01T12:20:59Z").status, PairStatus::Waiting);
        assert_eq!(c.at("2026-12-01T12:21:01Z").status, PairStatus::Unaccounted);
        // The end of a receiver's pause releases held-back deliveries the same way.
        let mut h = EndpointHealth::empty(c.endpoint.tenant_id.clone(), c.endpoint.id.clone(), 300);
        h.paused_until = Some(at("2026-12-01T12:00:00Z"));
        c.health = Some(h);
        let w = c.at("2026-12-01T12:05:00Z");
        assert_eq!(w.status, PairStatus::Waiting, "{}", w.detail);
        assert!(w.detail.contains("pause ended at"), "{}", w.detail);
    }

    #[test]
    fn delivered_wins() {
        let mut c = Case::new();
        c.rows = vec![
            row(1, "2026-12-01T10:00:01Z", "retry", Some(60)),
            row(2, "2026-12-01T10:01:05Z", "delivered", None),
        ];
        let d = c.at("2026-12-02T10:00:00Z");
        assert_eq!(d.status, PairStatus::Delivered);
        assert_eq!(d.at, Some(at("2026-12-01T10:01:06Z")));
    }
}
