//! `tern audit`: "is anything lost?" For the outbox events created in a time window (of one
//! tenant, or one endpoint, when asked), every (event, subscribed endpoint) pair is
//! accounted: delivered, waiting (with its next due time when known), in flight,
//! dead-lettered (with its reason), parked in the relay-failure queue, or **unaccounted**,
//! listed with what is known of it (its state item, its attempt rows, its age).
//!
//! What it reads, in this order:
//! 1. the endpoints table (every endpoint, or the tenant's) and the health table;
//! 2. the outbox table: the items created in the window ([`OutboxReader`]: a Scan, the
//!    table has no index on `created_at`);
//! 3. the attempts table: one Query per event, its whole partition (the pairs' state
//!    items and the attempt rows), [`AuditRequest::concurrency`] in flight;
//! 4. the DLQ and the relay-failure queue, read whole ([`queues::read_whole`]): after the
//!    ledger, so a pair dead-lettered meanwhile is found in the DLQ, not missed;
//! 5. after [`AuditRequest::recheck_after`], the partitions of the events with an
//!    unaccounted pair once more: a pair a replay was moving, or a sender was finishing,
//!    while it was read the first time is not reported;
//! 6. the delivery queue's counts (one `GetQueueAttributes`, no message read): a backlog
//!    older than the grace period holds pairs with no trace yet, which the report then
//!    says next to the unaccounted ones.
//!
//! Which endpoints an event had: the relay fans out to the endpoints that subscribe at
//! relay time, and the audit can only read the endpoints table as it is now. The pairs
//! are (a) every endpoint the ledger holds a state item or an attempt row of, for the
//! event: the endpoints it was really fanned out to, as far as a sender got, deleted ones
//! included; and (b) every endpoint that exists now, subscribes to the event's type and
//! was created before the event. An endpoint created after the event counts only when the
//! ledger has it; one deleted since counts only when the ledger has it (an untraced pair
//! of a deleted endpoint cannot be seen); one whose event types changed after the event
//! is expected by its types now, and an unaccounted pair says when the endpoint was last
//! updated, so an operator can tell a new subscription from a loss.

pub mod classify;
pub mod print;
pub mod queues;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use serde::Serialize;
use tern_core::health::{EndpointHealth, HealthStore};
use tern_core::ports::{AttemptRecord, DeliveryLedger, DrainableQueue, EndpointStore, PortError};
use tern_core::trace::{
    EventTrace, OutboxEntry, OutboxReader, PairState, QueueCounter, QueueCounts,
};
use tern_core::{Endpoint, EndpointId, TenantId};

use crate::OpsError;
use crate::attempts::AttemptView;
pub use classify::{Finding, PairStatus, Rules};
use classify::{PairFacts, classify};
use queues::ParkedIndex;

/// What a delivery may take to show progress once it is back on the queue, in seconds: a
/// crashed sender's message comes back after the delivery queue's visibility timeout
/// (360 s, `infra/settings.json` `queues.delivery.visibilityTimeoutSeconds`); a deferral
/// by an open circuit (one probe interval, 60 s) and a put-back of our failure (at most
/// 60 s, [`tern_core::put_back::put_back_delay_seconds`]) are shorter.
pub const PROGRESS_MARGIN_SECONDS: u64 = 360;

/// Default grace period: 21 minutes, the longest a held-back delivery stays away (the
/// held-back ceiling: the queue's 900 s `DelaySeconds` maximum,
/// [`tern_core::retry::MAX_QUEUE_DELAY_SECONDS`], as
/// [`tern_core::put_back::held_back_cap`] keeps it) plus [`PROGRESS_MARGIN_SECONDS`]. A
/// delivery held back just before its endpoint's circuit closed (or its receiver's pause
/// ended) is back and claimed within it, so a healthy deployment shows no unaccounted pair
/// (issue 29 item 3: the 15 minutes before this were the ceiling alone, with nothing for
/// the return's own processing).
pub const DEFAULT_GRACE: Duration =
    Duration::from_secs(tern_core::retry::MAX_QUEUE_DELAY_SECONDS as u64 + PROGRESS_MARGIN_SECONDS);

/// Default wait before the second look at unaccounted pairs: 10 s.
pub const DEFAULT_RECHECK_AFTER: Duration = Duration::from_secs(10);

/// Default ledger Queries in flight: 16.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// Default most messages read of each queue: 10,000.
pub const DEFAULT_QUEUE_MAX: usize = 10_000;

/// Default most not-delivered pairs listed (the totals count them all): 1,000.
pub const DEFAULT_MAX_LISTED: usize = 1_000;

/// The rules the sender of this deployment works by, read from the variables it reads
/// (`TERN_RETRY_SCHEDULE`, `TERN_TIME_SCALE`, `TERN_HEALTH_*`; their defaults where unset),
/// with `grace` (real time).
///
/// # Errors
/// [`OpsError::Invalid`] naming a variable that is set but out of range.
pub fn rules_from_env(
    env: &tern_handlers::config::Env<'_>,
    grace: Duration,
) -> Result<Rules, OpsError> {
    let invalid = |e: &dyn std::fmt::Display| OpsError::Invalid(e.to_string());
    let policy = tern_handlers::config::SenderPolicy::from_env(env).map_err(|e| invalid(&e))?;
    Ok(Rules {
        grace: chrono::Duration::from_std(grace).map_err(|e| invalid(&e))?,
        time_scale: policy.time_scale,
        default_schedule: policy.schedule,
        health: tern_handlers::config::health_policy(env).map_err(|e| invalid(&e))?,
    })
}

/// What to audit.
#[derive(Debug, Clone)]
pub struct AuditRequest {
    /// Events created at or after this time.
    pub since: DateTime<Utc>,
    /// Events created before this time.
    pub until: DateTime<Utc>,
    /// Only this tenant's events.
    pub tenant: Option<TenantId>,
    /// Only this endpoint's pairs.
    pub endpoint: Option<EndpointId>,
    /// Most messages read of the DLQ and of the relay-failure queue, each.
    pub queue_max: usize,
    /// How long reading one queue may take.
    pub queue_budget: Duration,
    /// Ledger Queries in flight.
    pub concurrency: usize,
    /// Wait before the second look at unaccounted pairs (zero: none).
    pub recheck_after: Duration,
    /// Most not-delivered pairs listed in the report.
    pub max_listed: usize,
}

impl AuditRequest {
    /// The window `since`..`until` with the defaults.
    pub fn new(since: DateTime<Utc>, until: DateTime<Utc>) -> Self {
        Self {
            since,
            until,
            tenant: None,
            endpoint: None,
            queue_max: DEFAULT_QUEUE_MAX,
            queue_budget: queues::QUEUE_READ_BUDGET,
            concurrency: DEFAULT_CONCURRENCY,
            recheck_after: DEFAULT_RECHECK_AFTER,
            max_listed: DEFAULT_MAX_LISTED,
        }
    }
}

/// Where the audit reads.
#[derive(Clone, Copy)]
pub struct AuditStores<'a> {
    /// The outbox table.
    pub outbox: &'a dyn OutboxReader,
    /// The attempts table.
    pub ledger: &'a dyn DeliveryLedger,
    /// The endpoints table.
    pub endpoints: &'a dyn EndpointStore,
    /// The health table (`None`: no circuit is taken to hold anything back).
    pub health: Option<&'a dyn HealthStore>,
    /// The DLQ.
    pub dlq: &'a dyn DrainableQueue,
    /// The relay-failure queue.
    pub relay_failures: &'a dyn DrainableQueue,
    /// The delivery queue, only counted (never read): a backlog there holds pairs that
    /// have no trace yet.
    pub delivery_queue: Option<&'a dyn QueueCounter>,
}

/// Pairs per status. `--json` names are stable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Delivered.
    pub delivered: usize,
    /// Waiting for their next attempt.
    pub waiting: usize,
    /// Too recent to judge.
    pub in_flight: usize,
    /// In the DLQ.
    pub dead_lettered: usize,
    /// In the relay-failure queue.
    pub parked: usize,
    /// None of those.
    pub unaccounted: usize,
    /// Of the delivered, pairs a DLQ message also names (counted once in `delivered`,
    /// not in [`Self::pairs`]): a replay of that message is dropped as a duplicate, never
    /// POSTed. A dead letter can no longer overwrite a delivered pair (issue 26), so this
    /// stays 0 unless a DLQ message was sent just as a slow earlier holder delivered.
    pub delivered_in_dlq: usize,
}

impl Totals {
    fn add(&mut self, status: PairStatus) {
        *match status {
            PairStatus::Delivered => &mut self.delivered,
            PairStatus::Waiting => &mut self.waiting,
            PairStatus::InFlight => &mut self.in_flight,
            PairStatus::DeadLettered => &mut self.dead_lettered,
            PairStatus::Parked => &mut self.parked,
            PairStatus::Unaccounted => &mut self.unaccounted,
        } += 1;
    }

    /// Every pair.
    pub fn pairs(&self) -> usize {
        self.delivered
            + self.waiting
            + self.in_flight
            + self.dead_lettered
            + self.parked
            + self.unaccounted
    }

    /// The count of `status`.
    pub fn of(&self, status: PairStatus) -> usize {
        match status {
            PairStatus::Delivered => self.delivered,
            PairStatus::Waiting => self.waiting,
            PairStatus::InFlight => self.in_flight,
            PairStatus::DeadLettered => self.dead_lettered,
            PairStatus::Parked => self.parked,
            PairStatus::Unaccounted => self.unaccounted,
        }
    }
}

/// One endpoint's pairs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointTotals {
    /// Tenant.
    pub tenant_id: String,
    /// Endpoint.
    pub endpoint_id: String,
    /// `enabled`, `disabled` or `deleted` (now).
    pub endpoint_state: &'static str,
    /// Its pairs per status.
    #[serde(flatten)]
    pub totals: Totals,
}

/// A pair that is not delivered, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PairRow {
    /// Event.
    pub event_id: String,
    /// Its type.
    pub event_type: String,
    /// Its tenant.
    pub tenant_id: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Endpoint.
    pub endpoint_id: String,
    /// Where it stands, and why.
    #[serde(flatten)]
    pub finding: Finding,
}

/// An unaccounted pair with what is known of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnaccountedPair {
    /// The pair, and why it is unaccounted (`detail`).
    #[serde(flatten)]
    pub pair: PairRow,
    /// Seconds since the event was created.
    pub age_seconds: i64,
    /// The endpoint now: `enabled`, `disabled: <reason>` or `deleted`, and when it was
    /// last updated when that was after the event (its subscriptions may have changed).
    pub endpoint_now: String,
    /// The pair's state item in the ledger (`null`: none, no sender claimed it).
    pub state_item: Option<PairState>,
    /// Its attempt rows, oldest first.
    pub attempts: Vec<AttemptView>,
}

/// A delivered pair a DLQ message also names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveredInDlq {
    /// The event's tenant.
    pub tenant_id: String,
    /// The event.
    pub event_id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// The DLQ message's dead-letter reason (`sqs_redrive` when SQS moved it itself).
    pub reason: String,
    /// The budget (replay count) the DLQ message ended, when it says.
    pub replay_count: Option<u32>,
}

/// What the audit read, and what it cost where the stores said.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Reads {
    /// Outbox items the Scan read (the whole table).
    pub outbox_items_scanned: u64,
    /// Read units the Scan consumed, when reported.
    pub outbox_read_units: Option<f64>,
    /// Ledger Queries: one per event, one per event of the second look, and the retries
    /// of reads that failed.
    pub ledger_queries: usize,
    /// Read units they consumed, when reported.
    pub ledger_read_units: Option<f64>,
    /// DLQ messages read.
    pub dlq_messages: usize,
    /// True when the DLQ was read to its end.
    pub dlq_complete: bool,
    /// Relay-failure queue messages read.
    pub relay_failure_messages: usize,
    /// True when the relay-failure queue was read to its end.
    pub relay_failures_complete: bool,
    /// Endpoints read.
    pub endpoints: usize,
    /// Health records read.
    pub health_records: usize,
    /// The delivery queue's messages when the audit ended (`null`: not asked).
    pub delivery_queue: Option<QueueCounts>,
}

/// `tern audit`'s answer. `--json` prints it; the field names are stable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditReport {
    /// Events created at or after this time.
    pub since: DateTime<Utc>,
    /// Events created before this time.
    pub until: DateTime<Utc>,
    /// Only this tenant, when asked.
    pub tenant_id: Option<String>,
    /// Only this endpoint, when asked.
    pub endpoint_id: Option<String>,
    /// When the pairs were judged.
    pub checked_at: DateTime<Utc>,
    /// The grace period, seconds.
    pub grace_seconds: u64,
    /// Outbox events in the window.
    pub events: usize,
    /// Of those, events no endpoint subscribes to (no pair).
    pub events_without_pairs: usize,
    /// Pairs per status.
    pub totals: Totals,
    /// Pairs per endpoint.
    pub endpoints: Vec<EndpointTotals>,
    /// Every unaccounted pair, with what is known of it.
    pub unaccounted: Vec<UnaccountedPair>,
    /// Pairs waiting, in flight, dead-lettered or parked, up to the listing limit.
    pub not_delivered: Vec<PairRow>,
    /// True when more pairs are not delivered than listed.
    pub not_delivered_truncated: bool,
    /// The delivered pairs a DLQ message also names ([`Totals::delivered_in_dlq`]), up to
    /// the listing limit: event, endpoint, and the DLQ message's reason.
    pub delivered_in_dlq: Vec<DeliveredInDlq>,
    /// Outbox items of the window that are not readable events (the relay parks them).
    pub unreadable_outbox_items: Vec<String>,
    /// What was read.
    pub reads: Reads,
    /// What the audit could not see, in words.
    pub notes: Vec<String>,
}

impl AuditReport {
    /// True when every pair is accounted for.
    pub fn all_accounted(&self) -> bool {
        self.totals.unaccounted == 0
    }
}

/// One pair that is not (yet) delivered, with what the ledger held for it.
struct Open {
    event: usize,
    endpoint: EndpointId,
    state: Option<PairState>,
    attempts: Vec<AttemptRecord>,
    /// Why the ledger could not be read for it, when it could not.
    unread: Option<String>,
}

/// Everything the stores said, indexed for the rule.
struct Known {
    events: Vec<OutboxEntry>,
    endpoints: HashMap<(TenantId, EndpointId), Endpoint>,
    by_tenant: HashMap<TenantId, Vec<Endpoint>>,
    /// Each existing endpoint's tenant: the ledger's partition of an event id holds every
    /// tenant's pairs of an event with that id (ids are per tenant).
    owner: HashMap<EndpointId, TenantId>,
    health: HashMap<(TenantId, EndpointId), EndpointHealth>,
    dlq: HashMap<(String, String), classify::DlqHit>,
    parked: ParkedIndex,
    dlq_complete: bool,
}

/// The endpoints an event has pairs with: those the ledger holds, and those that exist
/// now, subscribe to it and were created before it.
fn pair_endpoints(
    event: &OutboxEntry,
    trace: Option<&EventTrace>,
    known: &Known,
    only: Option<&EndpointId>,
) -> Vec<EndpointId> {
    let mut ids: Vec<EndpointId> = Vec::new();
    if let Some(t) = trace {
        ids.extend(t.pairs.iter().map(|p| p.endpoint_id.clone()));
        ids.extend(t.attempts.iter().map(|a| a.endpoint_id.clone()));
    }
    if let Some(list) = known.by_tenant.get(&event.tenant_id) {
        ids.extend(
            list.iter()
                .filter(|e| {
                    e.created_at <= event.created_at
                        && e.subscribes_to(&event.tenant_id, &event.event_type)
                })
                .map(|e| e.id.clone()),
        );
    }
    ids.sort();
    ids.dedup();
    // Another tenant's event with the same id shares the ledger's partition: its
    // endpoints' pairs are that event's, not this one's.
    ids.retain(|id| {
        only.is_none_or(|o| o == id) && known.owner.get(id).is_none_or(|t| *t == event.tenant_id)
    });
    ids
}

fn endpoint_now(e: Option<&Endpoint>, event: &OutboxEntry) -> String {
    let Some(e) = e else {
        return "deleted".into();
    };
    let mut text = if e.enabled {
        "enabled".to_owned()
    } else {
        format!("disabled: {}", e.disabled_reason.as_deref().unwrap_or("-"))
    };
    if let Some(u) = e.updated_at.filter(|u| *u > event.created_at) {
        text.push_str(&format!(
            " (its settings were updated at {}, after the event: if its event types changed, the pair may never have been due)",
            crate::attempts::utc(u)
        ));
    }
    text
}

/// Runs the audit.
///
/// # Errors
/// [`OpsError::Invalid`] for a window that ends before it starts or an unknown
/// `--endpoint`; a store error when the endpoints, the outbox or a queue cannot be read.
/// A ledger that cannot be read for one event makes that event's pairs unaccounted (with
/// the error) instead of failing the audit.
pub async fn audit(
    stores: AuditStores<'_>,
    request: &AuditRequest,
    rules: &Rules,
) -> Result<AuditReport, OpsError> {
    if request.since >= request.until {
        return Err(OpsError::Invalid(format!(
            "--since ({}) must be before --until ({})",
            request.since.to_rfc3339(),
            request.until.to_rfc3339()
        )));
    }
    let mut reads = Reads::default();
    let mut notes = Vec::new();

    // 1. Endpoints and health.
    let list = match &request.tenant {
        Some(t) => stores.endpoints.list_for_tenant(t).await?,
        None => stores.endpoints.list_all().await?,
    };
    if let Some(only) = &request.endpoint
        && !list.iter().any(|e| &e.id == only)
    {
        return Err(OpsError::NotFound {
            id: only.to_string(),
            tenant: request.tenant.as_ref().map(ToString::to_string),
        });
    }
    reads.endpoints = list.len();
    let health = match stores.health {
        Some(h) => h.list(request.tenant.as_ref()).await?,
        None => {
            notes.push("health table not read: no circuit is taken to hold deliveries back".into());
            Vec::new()
        }
    };
    reads.health_records = health.len();
    let mut known = Known {
        events: Vec::new(),
        endpoints: HashMap::new(),
        by_tenant: HashMap::new(),
        owner: HashMap::new(),
        health: health
            .into_iter()
            .map(|h| ((h.tenant_id.clone(), h.endpoint_id.clone()), h))
            .collect(),
        dlq: HashMap::new(),
        parked: ParkedIndex::default(),
        dlq_complete: false,
    };
    for e in list {
        known.owner.insert(e.id.clone(), e.tenant_id.clone());
        known
            .by_tenant
            .entry(e.tenant_id.clone())
            .or_default()
            .push(e.clone());
        known
            .endpoints
            .insert((e.tenant_id.clone(), e.id.clone()), e);
    }

    // 2. The outbox.
    let scan = stores
        .outbox
        .created_between(request.since, request.until, request.tenant.as_ref())
        .await?;
    reads.outbox_items_scanned = scan.items_scanned;
    reads.outbox_read_units = scan.read_units;
    known.events = scan.events;
    known.events.sort_by(|a, b| {
        (a.created_at, a.event_id.as_str()).cmp(&(b.created_at, b.event_id.as_str()))
    });

    // 3. The ledger: delivered pairs are counted at once; the others are kept with
    // their traces until the queues have been read.
    let mut by_endpoint: BTreeMap<(String, String), Totals> = BTreeMap::new();
    let mut totals = Totals::default();
    // The delivered pairs (event, endpoint), to find the ones a DLQ message also names
    // once the DLQ has been read.
    let mut delivered: HashMap<(String, String), String> = HashMap::new();
    let mut open: Vec<Open> = Vec::new();
    let mut events_without_pairs = 0;
    let only = request.endpoint.as_ref();
    // Indexes and owned ids, not `&OutboxEntry`: a closure over a borrowed item makes the
    // future not `Send` for every lifetime, which a server's handler (the console's
    // widget in local mode, axum) requires.
    let traces = futures::stream::iter(0..known.events.len())
        .map(|i| {
            let (tenant, id) = (
                known.events[i].tenant_id.clone(),
                known.events[i].event_id.clone(),
            );
            async move { (i, read_trace(stores.ledger, &tenant, &id).await) }
        })
        .buffer_unordered(request.concurrency.max(1));
    let mut traces = std::pin::pin!(traces);
    while let Some((i, (trace, tries))) = traces.next().await {
        reads.count(&trace, tries);
        let pairs = pairs_of(i, trace, &known, only);
        if pairs.is_empty() && only.is_none() {
            events_without_pairs += 1;
        }
        for o in pairs {
            if o.delivered() {
                delivered.insert(
                    (
                        known.events[o.event].event_id.to_string(),
                        o.endpoint.to_string(),
                    ),
                    known.events[o.event].tenant_id.to_string(),
                );
                count(
                    &mut totals,
                    &mut by_endpoint,
                    &known,
                    &o,
                    PairStatus::Delivered,
                );
            } else {
                open.push(o);
            }
        }
    }

    // 4. The queues, after the ledger.
    let dlq = queues::read_whole(stores.dlq, request.queue_max, request.queue_budget).await?;
    reads.dlq_messages = dlq.messages.len();
    reads.dlq_complete = dlq.complete;
    known.dlq_complete = dlq.complete;
    let (dlq_index, unreadable_dlq) = queues::dlq_index(&dlq.messages);
    known.dlq = dlq_index;
    if unreadable_dlq > 0 {
        notes.push(format!(
            "{unreadable_dlq} DLQ message(s) are not delivery messages (`tern dlq --list` shows them): they cannot be matched to a pair"
        ));
    }
    if !dlq.complete {
        notes.push(format!(
            "the DLQ was not read to its end ({} messages read, --queue-max {}): dead letters are taken from the attempt log, and a pair only the DLQ could explain is unaccounted",
            dlq.messages.len(),
            request.queue_max
        ));
    }
    let parked = queues::read_whole(
        stores.relay_failures,
        request.queue_max,
        request.queue_budget,
    )
    .await?;
    reads.relay_failure_messages = parked.messages.len();
    reads.relay_failures_complete = parked.complete;
    known.parked = ParkedIndex::of(&parked.messages);
    if known.parked.unmatched > 0 {
        notes.push(format!(
            "{} relay-failure message(s) name no event and no time window: pairs they hold cannot be matched (`tern relay-failures`)",
            known.parked.unmatched
        ));
    }
    if !parked.complete {
        notes.push("the relay-failure queue was not read to its end".into());
    }

    // Judge the open pairs; look again at the unaccounted ones.
    let mut judged: Vec<(Open, Finding)> = open
        .into_iter()
        .map(|o| {
            let f = judge(&o, &known, rules, Utc::now());
            (o, f)
        })
        .collect();
    let mut suspects: Vec<usize> = judged
        .iter()
        .filter(|(_, f)| f.status == PairStatus::Unaccounted)
        .map(|(o, _)| o.event)
        .collect();
    suspects.sort_unstable();
    suspects.dedup();
    if !suspects.is_empty() && !request.recheck_after.is_zero() {
        tokio::time::sleep(request.recheck_after).await;
        let reads_again = futures::stream::iter(suspects)
            .map(|i| {
                let (tenant, id) = (
                    known.events[i].tenant_id.clone(),
                    known.events[i].event_id.clone(),
                );
                async move { (i, read_trace(stores.ledger, &tenant, &id).await) }
            })
            .buffer_unordered(request.concurrency.max(1));
        let mut reads_again = std::pin::pin!(reads_again);
        while let Some((i, (trace, tries))) = reads_again.next().await {
            reads.count(&trace, tries);
            if trace.is_err() {
                continue;
            }
            // The event's pairs afresh (an event first unread gets its traced endpoints
            // too): the ones still open are judged again, the delivered ones counted.
            judged.retain(|(o, _)| o.event != i);
            for o in pairs_of(i, trace, &known, only) {
                if o.delivered() {
                    delivered.insert(
                        (
                            known.events[o.event].event_id.to_string(),
                            o.endpoint.to_string(),
                        ),
                        known.events[o.event].tenant_id.to_string(),
                    );
                    count(
                        &mut totals,
                        &mut by_endpoint,
                        &known,
                        &o,
                        PairStatus::Delivered,
                    );
                } else {
                    let f = judge(&o, &known, rules, Utc::now());
                    judged.push((o, f));
                }
            }
        }
    }

    // A backlog in the delivery queue: pairs without a trace may be in it.
    if let Some(q) = stores.delivery_queue {
        let counts = q.counts().await?;
        reads.delivery_queue = Some(counts);
        let unaccounted = judged
            .iter()
            .filter(|(_, f)| f.status == PairStatus::Unaccounted)
            .count();
        if unaccounted > 0 && counts.total() > 0 {
            notes.push(format!(
                "the delivery queue holds {} message(s) ({} visible, {} in flight, {} delayed): an \
                 unaccounted pair with no trace, or an overdue attempt, may be waiting in that \
                 backlog; audit again once it has drained, or with a longer --grace",
                counts.total(),
                counts.visible,
                counts.in_flight,
                counts.delayed
            ));
        }
    }

    // The report.
    let checked_at = Utc::now();
    let mut unaccounted = Vec::new();
    let mut not_delivered = Vec::new();
    let mut listed_all = true;
    for (o, finding) in judged {
        let event = &known.events[o.event];
        count(&mut totals, &mut by_endpoint, &known, &o, finding.status);
        let row = PairRow {
            event_id: event.event_id.to_string(),
            event_type: event.event_type.clone(),
            tenant_id: event.tenant_id.to_string(),
            created_at: event.created_at,
            endpoint_id: o.endpoint.to_string(),
            finding,
        };
        if row.finding.status == PairStatus::Unaccounted {
            let report = crate::attempts::report(event.event_id.as_str(), None, &o.attempts);
            unaccounted.push(UnaccountedPair {
                age_seconds: (checked_at - event.created_at).num_seconds(),
                endpoint_now: endpoint_now(
                    known
                        .endpoints
                        .get(&(event.tenant_id.clone(), o.endpoint.clone())),
                    event,
                ),
                state_item: o.state,
                attempts: report.attempts,
                pair: row,
            });
        } else if not_delivered.len() < request.max_listed {
            not_delivered.push(row);
        } else {
            listed_all = false;
        }
    }
    let sort_key = |r: &PairRow| (r.created_at, r.event_id.clone(), r.endpoint_id.clone());
    not_delivered.sort_by_key(sort_key);
    unaccounted.sort_by_key(|u| sort_key(&u.pair));
    let endpoints = by_endpoint
        .into_iter()
        .map(|((tenant, endpoint), totals)| {
            let state = match known
                .endpoints
                .iter()
                .find(|((t, e), _)| t.as_str() == tenant && e.as_str() == endpoint)
            {
                None => "deleted",
                Some((_, e)) if e.enabled => "enabled",
                Some(_) => "disabled",
            };
            EndpointTotals {
                tenant_id: tenant,
                endpoint_id: endpoint,
                endpoint_state: state,
                totals,
            }
        })
        .collect();
    notes.push(
        "not seen: pairs of endpoints deleted before any sender claimed a delivery for them, \
         and pairs of endpoints whose event types no longer include the event; events past \
         the outbox TTL (7 days) are gone from the outbox"
            .into(),
    );
    let mut delivered_in_dlq: Vec<DeliveredInDlq> = delivered
        .iter()
        .filter_map(|(pair, tenant)| {
            known.dlq.get(pair).map(|hit| DeliveredInDlq {
                tenant_id: tenant.clone(),
                event_id: pair.0.clone(),
                endpoint_id: pair.1.clone(),
                reason: hit.reason.clone(),
                replay_count: hit.replay_count,
            })
        })
        .collect();
    totals.delivered_in_dlq = delivered_in_dlq.len();
    delivered_in_dlq
        .sort_by(|a, b| (&a.event_id, &a.endpoint_id).cmp(&(&b.event_id, &b.endpoint_id)));
    delivered_in_dlq.truncate(request.max_listed);
    Ok(AuditReport {
        since: request.since,
        until: request.until,
        tenant_id: request.tenant.as_ref().map(ToString::to_string),
        endpoint_id: request.endpoint.as_ref().map(ToString::to_string),
        checked_at,
        grace_seconds: u64::try_from(rules.grace.num_seconds()).unwrap_or(0),
        events: known.events.len(),
        events_without_pairs,
        totals,
        endpoints,
        unaccounted,
        not_delivered,
        not_delivered_truncated: !listed_all,
        delivered_in_dlq,
        unreadable_outbox_items: scan.unreadable,
        reads,
        notes,
    })
}

/// Tries of one event's ledger read before the audit gives up on it: 3, waiting 1 s, then
/// 2 s, after a read that failed transiently (each read already has the SDK's own bounded
/// retries within its deadline, `tern_aws::budget`). A busy table or a slow network must
/// not make pairs unaccounted; a read that still fails makes them unaccounted with why.
pub const TRACE_TRIES: u32 = 3;

/// One event's ledger partitions, tried up to [`TRACE_TRIES`] times; the result and the
/// tries made.
async fn read_trace(
    ledger: &dyn DeliveryLedger,
    tenant: &tern_core::TenantId,
    event: &tern_core::EventId,
) -> (Result<EventTrace, PortError>, u32) {
    let mut wait = Duration::from_secs(1);
    let mut tries = 0;
    loop {
        tries += 1;
        match ledger.trace(tenant, event).await {
            Err(PortError::Unavailable(_)) if tries < TRACE_TRIES => {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            other => return (other, tries),
        }
    }
}

impl Reads {
    fn count(&mut self, trace: &Result<EventTrace, PortError>, tries: u32) {
        self.ledger_queries += tries as usize;
        if let Ok(t) = trace
            && let Some(u) = t.read_units
        {
            *self.ledger_read_units.get_or_insert(0.0) += u;
        }
    }
}

impl Open {
    fn delivered(&self) -> bool {
        self.unread.is_none()
            && (self
                .state
                .as_ref()
                .is_some_and(|s| s.delivered_at.is_some())
                || self.attempts.iter().any(|a| a.outcome == "delivered"))
    }
}

/// The pairs of event `i`, each with what its ledger read holds for it.
fn pairs_of(
    i: usize,
    trace: Result<EventTrace, PortError>,
    known: &Known,
    only: Option<&EndpointId>,
) -> Vec<Open> {
    let event = &known.events[i];
    let (trace, unread) = match trace {
        Ok(t) => (Some(t), None),
        Err(e) => (None, Some(e.to_string())),
    };
    pair_endpoints(event, trace.as_ref(), known, only)
        .into_iter()
        .map(|endpoint| Open {
            event: i,
            state: trace
                .as_ref()
                .and_then(|t| t.pairs.iter().find(|p| p.endpoint_id == endpoint))
                .cloned(),
            attempts: trace
                .as_ref()
                .map(|t| {
                    t.attempts
                        .iter()
                        .filter(|a| a.endpoint_id == endpoint)
                        .cloned()
                        .collect()
                })
                .unwrap_or_default(),
            unread: unread.clone(),
            endpoint,
        })
        .collect()
}

/// Counts one pair's status in the totals and its endpoint's.
fn count(
    totals: &mut Totals,
    by_endpoint: &mut BTreeMap<(String, String), Totals>,
    known: &Known,
    o: &Open,
    status: PairStatus,
) {
    totals.add(status);
    by_endpoint
        .entry((
            known.events[o.event].tenant_id.to_string(),
            o.endpoint.to_string(),
        ))
        .or_default()
        .add(status);
}

/// The rule for one open pair, with what the stores said.
fn judge(o: &Open, known: &Known, rules: &Rules, now: DateTime<Utc>) -> Finding {
    let event = &known.events[o.event];
    if let Some(why) = &o.unread {
        return Finding {
            status: PairStatus::Unaccounted,
            detail: format!("the ledger could not be read for this event: {why}"),
            due_at: None,
            reason: None,
            at: None,
            message_id: None,
        };
    }
    let key = (event.tenant_id.clone(), o.endpoint.clone());
    let attempts: Vec<&AttemptRecord> = o.attempts.iter().collect();
    let dlq = known
        .dlq
        .get(&(event.event_id.to_string(), o.endpoint.to_string()));
    let parked = known.parked.find(
        event.event_id.as_str(),
        o.endpoint.as_str(),
        event.created_at,
    );
    classify(
        &PairFacts {
            event,
            endpoint_id: &o.endpoint,
            endpoint: known.endpoints.get(&key),
            health: known.health.get(&key),
            state: o.state.as_ref(),
            attempts: &attempts,
            dlq,
            parked,
            dlq_complete: known.dlq_complete,
        },
        rules,
        now,
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use tern_core::ports::{Claim, DeliveryState, ReceivedMessage};
    use tern_core::trace::OutboxScan;
    use tern_core::{DeliveryMessage, EventId, RetrySchedule, Secret};

    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    struct Outbox(Vec<OutboxEntry>);

    #[async_trait]
    impl OutboxReader for Outbox {
        async fn created_between(
            &self,
            _: DateTime<Utc>,
            _: DateTime<Utc>,
            _: Option<&TenantId>,
        ) -> Result<OutboxScan, PortError> {
            Ok(OutboxScan {
                events: self.0.clone(),
                items_scanned: self.0.len() as u64,
                ..OutboxScan::default()
            })
        }
    }

    /// Every pair delivered; the trace of `flaky` fails `failures` times first.
    struct Ledger {
        flaky: EventId,
        failures: Mutex<u32>,
        endpoint: EndpointId,
    }

    #[async_trait]
    impl DeliveryLedger for Ledger {
        async fn claim(&self, _: &DeliveryMessage, _: DateTime<Utc>) -> Result<Claim, PortError> {
            Ok(Claim::Granted)
        }
        async fn finish(&self, _: &DeliveryMessage, _: DeliveryState) -> Result<(), PortError> {
            Ok(())
        }
        async fn record_attempt(
            &self,
            _: &tern_core::DeliveryMessage,
            _: &AttemptRecord,
        ) -> Result<(), PortError> {
            Ok(())
        }
        async fn history(
            &self,
            _: &tern_core::TenantId,
            _: &tern_core::EventId,
        ) -> Result<Vec<AttemptRecord>, PortError> {
            Ok(vec![])
        }
        async fn trace(
            &self,
            _: &tern_core::TenantId,
            event: &tern_core::EventId,
        ) -> Result<EventTrace, PortError> {
            if event == &self.flaky {
                let mut left = self.failures.lock().unwrap();
                if *left > 0 {
                    *left -= 1;
                    return Err(PortError::Unavailable("operation timeout".into()));
                }
            }
            Ok(EventTrace {
                pairs: vec![PairState {
                    endpoint_id: self.endpoint.clone(),
                    claim_key: Some(1),
                    claim_done: true,
                    state: Some(DeliveryState::Delivered),
                    lease_until: None,
                    claimed_at: None,
                    delivered_at: Some(at("2026-12-01T10:00:01Z")),
                    updated_at: None,
                    waiting_attempt: None,
                    waiting_due: None,
                }],
                attempts: vec![],
                read_units: None,
            })
        }
    }

    struct Endpoints(Vec<Endpoint>);

    #[async_trait]
    impl EndpointStore for Endpoints {
        async fn get(&self, t: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
            Ok(self
                .0
                .iter()
                .find(|e| &e.tenant_id == t && &e.id == id)
                .cloned())
        }
        async fn list_for_tenant(&self, t: &TenantId) -> Result<Vec<Endpoint>, PortError> {
            Ok(self
                .0
                .iter()
                .filter(|e| &e.tenant_id == t)
                .cloned()
                .collect())
        }
        async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
            Ok(self.0.clone())
        }
        async fn put(&self, _: &Endpoint) -> Result<(), PortError> {
            Ok(())
        }
        async fn disable(&self, _: &TenantId, _: &EndpointId, _: &str) -> Result<(), PortError> {
            Ok(())
        }
        async fn set_secrets(
            &self,
            _: &TenantId,
            _: &EndpointId,
            _: &[tern_core::EndpointSecret],
        ) -> Result<(), PortError> {
            Ok(())
        }
    }

    struct Empty;

    #[async_trait]
    impl DrainableQueue for Empty {
        async fn receive(&self, _: i32, _: i32, _: i32) -> Result<Vec<ReceivedMessage>, PortError> {
            Ok(vec![])
        }
        async fn delete(&self, _: &str) -> Result<(), PortError> {
            Ok(())
        }
        async fn release(&self, _: &str) -> Result<(), PortError> {
            Ok(())
        }
    }

    /// A DLQ holding `messages`, each received once.
    struct Dlq(Mutex<Vec<ReceivedMessage>>);

    #[async_trait]
    impl DrainableQueue for Dlq {
        async fn receive(
            &self,
            max: i32,
            _: i32,
            _: i32,
        ) -> Result<Vec<ReceivedMessage>, PortError> {
            let mut left = self.0.lock().unwrap();
            let n = left.len().min(usize::try_from(max).unwrap_or(10));
            Ok(left.drain(..n).collect())
        }
        async fn delete(&self, _: &str) -> Result<(), PortError> {
            Ok(())
        }
        async fn release(&self, _: &str) -> Result<(), PortError> {
            Ok(())
        }
    }

    async fn run(failures: u32) -> AuditReport {
        run_with_dlq(failures, &Empty).await
    }

    async fn run_with_dlq(failures: u32, dlq: &dyn DrainableQueue) -> AuditReport {
        let tenant = TenantId::new("tnt_a").unwrap();
        let endpoint = Endpoint::new(
            EndpointId::new("ep_1").unwrap(),
            tenant.clone(),
            "https://example.com/hook",
            vec!["*".into()],
            Secret::generate(),
            at("2026-11-01T00:00:00Z"),
        );
        let events: Vec<OutboxEntry> = ["evt_1", "evt_2"]
            .iter()
            .map(|id| OutboxEntry {
                event_id: EventId::new(*id).unwrap(),
                event_type: "order.paid".into(),
                tenant_id: tenant.clone(),
                created_at: at("2026-12-01T10:00:00Z"),
            })
            .collect();
        let ledger = Ledger {
            flaky: EventId::new("evt_2").unwrap(),
            failures: Mutex::new(failures),
            endpoint: endpoint.id.clone(),
        };
        let mut request = AuditRequest::new(at("2026-12-01T00:00:00Z"), at("2026-12-02T00:00:00Z"));
        request.recheck_after = Duration::from_millis(10);
        audit(
            AuditStores {
                outbox: &Outbox(events),
                ledger: &ledger,
                endpoints: &Endpoints(vec![endpoint]),
                health: None,
                dlq,
                relay_failures: &Empty,
                delivery_queue: None,
            },
            &request,
            &Rules {
                grace: chrono::Duration::minutes(15),
                time_scale: 1.0,
                default_schedule: RetrySchedule::standard(),
                health: tern_core::health::HealthPolicy::default(),
            },
        )
        .await
        .unwrap()
    }

    /// A delivered pair that a DLQ message also names is delivered (counted once), and
    /// the report says how many there are: the soak's goal for issue 26 is 0.
    #[tokio::test]
    async fn a_delivered_pair_with_a_dlq_message_is_delivered_and_counted_apart() {
        let event = tern_core::Event {
            id: EventId::new("evt_1").unwrap(),
            event_type: tern_core::EventType::new("order.paid").unwrap(),
            tenant_id: TenantId::new("tnt_a").unwrap(),
            created_at: at("2026-12-01T10:00:00Z"),
            payload: tern_core::Payload::parse("{}", 1024).unwrap(),
            trace: None,
        };
        let dead = DeliveryMessage::first(event, EndpointId::new("ep_1").unwrap()).dead_lettered(
            tern_core::DeadLetter {
                reason: tern_core::DeadLetterReason::Exhausted,
                last_status: Some(429),
                last_error: None,
                attempts: 1,
                at: at("2026-12-01T11:00:00Z"),
            },
        );
        let dlq = Dlq(Mutex::new(vec![ReceivedMessage {
            message_id: "m1".into(),
            receipt_handle: "r1".into(),
            body: dead.to_body(),
            attributes: vec![],
        }]));
        let r = run_with_dlq(0, &dlq).await;
        assert_eq!((r.totals.delivered, r.totals.dead_lettered), (2, 0));
        assert_eq!(r.totals.delivered_in_dlq, 1);
        assert_eq!(r.totals.pairs(), 2);
        let r = run(0).await;
        assert_eq!(r.totals.delivered_in_dlq, 0);
    }

    /// Found by `make soak`: under load a ledger Query ran past its deadline and every
    /// pair of the event was reported unaccounted, although all were delivered.
    #[tokio::test]
    async fn a_ledger_read_that_fails_for_a_moment_is_tried_again() {
        let r = run(2).await;
        assert_eq!(r.totals.delivered, 2, "{:?}", r.unaccounted);
        assert_eq!(r.totals.unaccounted, 0);
        assert_eq!(
            r.reads.ledger_queries, 4,
            "one, and three tries of the flaky one"
        );
    }

    #[tokio::test]
    async fn a_ledger_that_stays_unreadable_gets_a_second_look_then_is_unaccounted() {
        // Three tries fail; the second look's first try succeeds.
        let r = run(3).await;
        assert_eq!(r.totals.delivered, 2, "{:?}", r.unaccounted);
        // Six tries fail: unaccounted, saying why.
        let r = run(6).await;
        assert_eq!(r.totals.unaccounted, 1);
        assert!(
            r.unaccounted[0]
                .pair
                .finding
                .detail
                .contains("could not be read"),
            "{}",
            r.unaccounted[0].pair.finding.detail
        );
    }
}
