//! Ports: what the handlers need from the outside world, as traits. The AWS adapters
//! (`tern-aws`) implement them with DynamoDB, SQS and Step Functions; nothing here names
//! an AWS type.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::delivery_log::{EndpointLogPage, EndpointLogQuery, PairState};
use crate::endpoint::Endpoint;
use crate::ids::{EndpointId, EventId, TenantId};
use crate::message::DeliveryMessage;
use crate::outcome::ErrorClass;

/// A failure of an outside service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// Transient: throttling, a 5xx, a network error. Retrying later may succeed; the
    /// handler reports the item as a batch failure so the event source retries it.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// Permanent for this input (too large, invalid). Retrying will not help.
    #[error("rejected: {0}")]
    Rejected(String),
}

/// One message to put on a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// Id unique within a batch (`[A-Za-z0-9_-]`, at most 80 characters: SQS batch entry ids).
    pub id: String,
    /// Message body.
    pub body: String,
    /// `DelaySeconds`, 0..=900 (SQS limit).
    pub delay_seconds: u32,
    /// String message attributes, for filtering and display in the console.
    pub attributes: Vec<(String, String)>,
    /// SQS `MessageGroupId`, or `None` to send without one. On the standard delivery
    /// queue it names the tenant a message belongs to, which makes the queue an SQS fair
    /// queue: a tenant with a backlog (or slow endpoints) gets the longer dwell time, the
    /// quiet tenants do not. Every message Tern puts on the delivery queue carries
    /// [`DeliveryMessage::group_id`]. SQS accepts 1 to [`MAX_GROUP_ID_LEN`] characters of
    /// `a-zA-Z0-9` and the punctuation ``!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~``
    /// (API reference, SendMessage `MessageGroupId`); [`group_id_is_valid`] checks it.
    pub group_id: Option<String>,
}

/// Longest SQS `MessageGroupId`, in characters: 128 (API reference, SendMessage).
pub const MAX_GROUP_ID_LEN: usize = 128;

/// Whether `id` is a `MessageGroupId` SQS accepts: 1 to [`MAX_GROUP_ID_LEN`] characters,
/// each an ASCII letter or digit or one of ``!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~`` (API
/// reference, SendMessage `MessageGroupId`). That is every printable ASCII character but
/// the space. A tenant id (`[A-Za-z0-9_-]`, 1 to 128 bytes) always is one.
pub fn group_id_is_valid(id: &str) -> bool {
    (1..=MAX_GROUP_ID_LEN).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A queue Tern writes to: the delivery queue, the DLQ, the relay's failure destination.
#[async_trait]
pub trait MessageQueue: Send + Sync {
    /// Sends up to 10 entries (SQS `SendMessageBatch` limit). Returns one result per entry,
    /// in order; the outer error means the whole call failed.
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError>;

    /// Sends one entry.
    async fn send(&self, entry: &QueueEntry) -> Result<(), PortError>;

    /// Sets how long each of up to 10 received messages stays invisible from now (SQS
    /// `ChangeMessageVisibility`, `ChangeMessageVisibilityBatch` for several; 10 entries
    /// a call is the SQS limit). Returns one result per entry, in order; the outer error
    /// means the whole call failed. The sender uses it for a message whose put-back SQS
    /// did not take ([`crate::put_back`]): the original comes back after the same short
    /// delay instead of the queue's visibility timeout.
    ///
    /// The default refuses every entry: a queue that cannot change a received message's
    /// visibility (a test double) leaves the message to the visibility timeout, as if
    /// SQS had refused.
    async fn change_visibility(
        &self,
        entries: &[VisibilityChange],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        Ok(entries
            .iter()
            .map(|_| {
                Err(PortError::Rejected(
                    "this queue cannot change a received message's visibility".to_owned(),
                ))
            })
            .collect())
    }
}

/// One received message whose visibility timeout is to change
/// ([`MessageQueue::change_visibility`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibilityChange {
    /// Id unique within a batch (`[A-Za-z0-9_-]`, at most 80 characters: SQS batch entry ids).
    pub id: String,
    /// The receipt handle of the message's latest receive.
    pub receipt_handle: String,
    /// Seconds from now until the message is visible again: 0 to 43,200 (12 hours,
    /// [`crate::in_memory::sqs::MAX_VISIBILITY_TIMEOUT_SECONDS`], the SQS limit).
    pub visibility_seconds: u32,
}

/// Carries out waits longer than a queue delay allows (Step Functions Standard in AWS).
#[async_trait]
pub trait DelayScheduler: Send + Sync {
    /// After `wait_seconds`, put `message` on the delivery queue.
    async fn schedule(&self, message: &DeliveryMessage, wait_seconds: u64)
    -> Result<(), PortError>;
}

/// Endpoint registry.
#[async_trait]
pub trait EndpointStore: Send + Sync {
    /// One endpoint, or `None` when it does not exist.
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError>;
    /// One endpoint as the registry holds it now, past any cache in front of it: what
    /// the sender asks before it dead-letters a delivery on a "disabled" it may have
    /// read from a cache, so an endpoint enabled elsewhere a moment ago is not refused.
    /// The default is [`Self::get`], for stores that cache nothing.
    async fn get_current(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
    ) -> Result<Option<Endpoint>, PortError> {
        self.get(tenant, id).await
    }
    /// Every endpoint of a tenant, enabled or not.
    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError>;
    /// [`Self::list_for_tenant`] read so that every write acknowledged before the call is in
    /// it (DynamoDB: a strongly consistent `Query`, twice the read units). The default is
    /// [`Self::list_for_tenant`], for stores that read their own writes.
    async fn list_for_tenant_current(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.list_for_tenant(tenant).await
    }
    /// The tenant's subscriptions version: a number that every write which can change
    /// which endpoints the tenant has or what they subscribe to (create, put, update,
    /// delete) changes atomically with it, read so that a change acknowledged before the
    /// call is seen. While it is unchanged, a list read after it with
    /// [`Self::list_for_tenant_current`] still says who subscribes to what (the relay's
    /// cache, `tern_handlers::subscription_cache`). `None` (the default) for a store that
    /// keeps none: nothing may then be cached.
    async fn subscriptions_version(&self, tenant: &TenantId) -> Result<Option<u64>, PortError> {
        let _ = tenant;
        Ok(None)
    }
    /// Every endpoint.
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError>;
    /// One page of a tenant's endpoints in id order: those after `after`, at most `limit`,
    /// only enabled (`Some(true)`) or disabled (`Some(false)`) ones when `enabled` is set.
    /// [`EndpointPage::next`] is set when more may follow. The default pages over
    /// [`Self::list_for_tenant`]; the DynamoDB store reads only the page.
    async fn list_page(
        &self,
        tenant: &TenantId,
        after: Option<&EndpointId>,
        limit: usize,
        enabled: Option<bool>,
    ) -> Result<EndpointPage, PortError> {
        let mut all = self.list_for_tenant(tenant).await?;
        all.sort_by(|a, b| a.id.cmp(&b.id));
        let mut rest = all
            .into_iter()
            .filter(|e| after.is_none_or(|a| e.id > *a))
            .filter(|e| enabled.is_none_or(|on| e.enabled == on));
        let endpoints: Vec<Endpoint> = rest.by_ref().take(limit).collect();
        let next = if rest.next().is_some() {
            endpoints.last().map(|e| e.id.clone())
        } else {
            None
        };
        Ok(EndpointPage { endpoints, next })
    }
    /// Creates or replaces an endpoint.
    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError>;

    /// Creates `endpoint` unless its tenant has one with its id: `None` when it was
    /// written, `Some(existing)` (as stored) when not. Creates under an `Idempotency-Key`
    /// use it, their id being derived from the key, so concurrent retries write one.
    /// The default reads, then puts (not atomic: for stores no two writers share); the
    /// DynamoDB store makes it one conditional `PutItem`.
    ///
    /// # Errors
    /// [`PortError`] when the store cannot answer.
    async fn create(&self, endpoint: &Endpoint) -> Result<Option<Endpoint>, PortError> {
        if let Some(existing) = self.get(&endpoint.tenant_id, &endpoint.id).await? {
            return Ok(Some(existing));
        }
        self.put(endpoint).await?;
        Ok(None)
    }
    /// Disables an endpoint, recording why (replacing an earlier reason) and, the first
    /// time, when. [`PortError::Rejected`] when it does not exist.
    async fn disable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError>;
    /// Disables an endpoint, recording `reason` only when it holds no disabled reason yet:
    /// a second disable without a reason of its own keeps the first one (an operator's
    /// repeat must not hide the 410 that disabled it). [`PortError::Rejected`] when it does
    /// not exist.
    ///
    /// The default reads, then disables only an enabled endpoint: not atomic; the
    /// DynamoDB store does it in one conditional write.
    async fn disable_keeping_reason(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        reason: &str,
    ) -> Result<(), PortError> {
        match self.get(tenant, id).await? {
            None => Err(PortError::Rejected(format!(
                "endpoint {id} of tenant {tenant} does not exist"
            ))),
            Some(e) if !e.enabled && e.disabled_reason.is_some() => Ok(()),
            Some(_) => self.disable(tenant, id, reason).await,
        }
    }
    /// Enables an endpoint (disabled by a 410 or an operator): clears its disabled reason
    /// and time, keeping them as `last_disabled_reason` / `last_disabled_at`. Touches no
    /// other field. [`PortError::Rejected`] when it does not exist, or when the store
    /// cannot do it (the default).
    async fn enable(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        let _ = (tenant, id);
        Err(PortError::Rejected(
            "this endpoint store cannot enable endpoints".into(),
        ))
    }
    /// Deletes an endpoint; queued deliveries to it dead-letter as `endpoint_deleted`.
    /// [`PortError::Rejected`] when it does not exist, or when the store cannot do it
    /// (the default).
    async fn delete(&self, tenant: &TenantId, id: &EndpointId) -> Result<(), PortError> {
        let _ = (tenant, id);
        Err(PortError::Rejected(
            "this endpoint store cannot delete endpoints".into(),
        ))
    }
    /// Writes only the fields `update` sets (and `updated_at`), leaving every other field
    /// as it is now, so a concurrent disable or rotation is never undone. The caller
    /// validates first ([`crate::endpoint::EndpointUpdate::apply`]).
    /// [`PortError::Rejected`] when it does not exist, or when the store cannot do it
    /// (the default).
    async fn update(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        update: &crate::endpoint::EndpointUpdate,
    ) -> Result<(), PortError> {
        let _ = (tenant, id, update);
        Err(PortError::Rejected(
            "this endpoint store cannot update endpoints".into(),
        ))
    }
    /// Replaces only an endpoint's secrets (a rotation), leaving every other field as it is
    /// now, so a concurrent disable is never undone. [`PortError::Rejected`] when the
    /// endpoint does not exist.
    async fn set_secrets(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        secrets: &[crate::endpoint::EndpointSecret],
    ) -> Result<(), PortError>;
    /// Replaces only an endpoint's Ed25519 signing keys (a `v1a` key added or rotated),
    /// leaving every other field as it is now, like [`Self::set_secrets`].
    /// [`PortError::Rejected`] when the endpoint does not exist, or when the store cannot
    /// do it (the default).
    async fn set_signing_keys(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        keys: &[crate::signing_key::EndpointSigningKey],
    ) -> Result<(), PortError> {
        let _ = (tenant, id, keys);
        Err(PortError::Rejected(
            "this endpoint store cannot set signing keys".into(),
        ))
    }
}

/// One page of a tenant's endpoints ([`EndpointStore::list_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointPage {
    /// Endpoints, in id order.
    pub endpoints: Vec<Endpoint>,
    /// The last id of this page when more may follow (pass it as `after`), else `None`.
    pub next: Option<EndpointId>,
}

/// Result of trying to claim an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This caller owns the attempt and must make it.
    Granted,
    /// The (event, endpoint) pair was already delivered: do not POST.
    AlreadyDelivered,
    /// This attempt, or a later one, is owned by another message: do not POST.
    AlreadyClaimed,
    /// This caller owns the attempt and must make it, taking it over from a holder whose
    /// lease ran out before it finished (it crashed, or stopped after the POST and before
    /// recording it). `takeover` counts the takeovers of this attempt (1 for the first);
    /// it goes into the [`AttemptRecord`] so this attempt gets its own row.
    TakenOver {
        /// 1-based takeover number of this attempt.
        takeover: u32,
    },
}

impl Claim {
    /// The takeover number when this caller must make the attempt (0 for a plain grant),
    /// `None` when it must not POST.
    pub fn granted_takeover(self) -> Option<u32> {
        match self {
            Claim::Granted => Some(0),
            Claim::TakenOver { takeover } => Some(takeover),
            Claim::AlreadyDelivered | Claim::AlreadyClaimed => None,
        }
    }
}

/// `outcome` of the row a takeover writes for the attempt it took over, when that
/// attempt's holder stopped before recording it: the result is unknown (the receiver may
/// have got the request).
pub const OUTCOME_ABANDONED: &str = "abandoned";

/// `outcome` of a successful attempt's row.
pub const OUTCOME_DELIVERED: &str = "delivered";

/// `outcome` of a failed attempt whose next attempt is queued or scheduled.
pub const OUTCOME_RETRY: &str = "retry";

/// `outcome` of a try that did not count (the receiver pushed back, or the failure was
/// ours): the same attempt went back on the queue, no attempt spent
/// ([`crate::decision::Next::Again`]). Its `next_wait_seconds` is the wait, logical.
pub const OUTCOME_REQUEUED: &str = "requeued";

/// `outcome` of the row that says copies of a message found their pair delivered and
/// were dropped without a POST ([`DeliveryLedger::record_duplicate`]).
pub const OUTCOME_DUPLICATE: &str = "duplicate";

/// How a claimed attempt ended, for the delivery's state record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Delivered (2xx).
    Delivered,
    /// Failed; the next attempt is queued or scheduled.
    Retrying,
    /// Dead-lettered.
    DeadLettered,
}

/// One attempt, as recorded in the attempt log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Event.
    pub event_id: EventId,
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// Replay count of the budget this attempt belongs to.
    pub replay_count: u32,
    /// 1-based attempt number within the budget.
    pub attempt: u32,
    /// 0 for the first try of this attempt; n for the n-th takeover of it after a holder's
    /// lease ran out ([`Claim::TakenOver`]). Each try has its own row.
    #[serde(default)]
    pub takeover: u32,
    /// When the attempt started.
    pub started_at: DateTime<Utc>,
    /// Time from start to the end of the response (or the error), in milliseconds.
    pub latency_ms: u64,
    /// HTTP status, when there was an answer.
    pub status: Option<u16>,
    /// Error class, when there was no usable answer.
    pub error_class: Option<ErrorClass>,
    /// Error text or redirect note.
    pub error: Option<String>,
    /// The `Location` header of a 3xx answer, as received (at most 512 characters).
    /// Recorded so an operator sees where the receiver pointed; never followed.
    #[serde(default)]
    pub location: Option<String>,
    /// First bytes of the response body (lossy UTF-8).
    pub response_excerpt: Option<String>,
    /// True when the body was longer than the excerpt, or could not be read whole.
    pub excerpt_truncated: bool,
    /// What followed: `delivered`, `retry`, `dead_letter:<reason>`, or
    /// [`OUTCOME_ABANDONED`] (the holder stopped before recording the result).
    pub outcome: String,
    /// Wait before the next attempt, in seconds, when one was scheduled.
    pub next_wait_seconds: Option<u64>,
}

/// The delivery ledger: claims that stop double POSTs, and the attempt log.
#[async_trait]
pub trait DeliveryLedger: Send + Sync {
    /// Atomically claims attempt `message.attempt_key()` of the delivery, with a lease
    /// until `lease_until`. Granted only when the pair is not delivered and no other
    /// message holds this or a later attempt; a manual resend (a message with `resend` set)
    /// is granted over a delivered pair too, when no message holds this or a later
    /// attempt. Each call is one processing of a message:
    /// a store that retries the write must recognise its own earlier try (granted, or
    /// taken over with that takeover's number), never count it another holder. An expired, unfinished lease on the same
    /// attempt can be taken over (its holder crashed): that is [`Claim::TakenOver`], and
    /// the ledger records the abandoned try in the attempt log (outcome
    /// [`OUTCOME_ABANDONED`]) unless its holder recorded it. So can, at once, an
    /// unfinished claim of the same attempt whose lease is exactly the message's
    /// [`DeliveryMessage::held_lease_ms`]: the message was put back by a processing that
    /// failed on our side after asking for that claim ([`crate::put_back`]), and that
    /// processing does nothing more; a claim with another lease is another copy's. A
    /// store that keeps no leases (the in-memory ones of tests) may ignore it. One
    /// conditional write in the common case; a takeover costs two more.
    async fn claim(
        &self,
        message: &DeliveryMessage,
        lease_until: DateTime<Utc>,
    ) -> Result<Claim, PortError>;

    /// Marks the claimed attempt finished with `state`. Safe to call again (a retried
    /// call changes nothing). A delivered pair stays delivered: finishing it with another
    /// state only ends the claim (a takeover that failed while its slow first holder
    /// delivered), and [`DeliveryState::Delivered`] marks the pair delivered even when a
    /// later attempt holds its claim (the receiver got it; that holder's own end then
    /// leaves it delivered). [`PortError::Rejected`] when the pair holds no claim of
    /// this attempt (a later attempt claimed it, or it was never claimed) for any other
    /// state: there is nothing to mark, and trying again will not change that.
    async fn finish(
        &self,
        message: &DeliveryMessage,
        state: DeliveryState,
    ) -> Result<(), PortError>;

    /// Marks the claimed attempt finished as [`DeliveryState::Retrying`] and lists the
    /// delivery as waiting ([`crate::waiting`]) for attempt `next_attempt`, due at `due_at`
    /// (real time), in the same write. Safe to call again, refused like [`Self::finish`].
    /// The default only finishes (a store that keeps no waiting list).
    async fn finish_retrying(
        &self,
        message: &DeliveryMessage,
        next_attempt: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let _ = (next_attempt, due_at);
        self.finish(message, DeliveryState::Retrying).await
    }

    /// Lists a delivery that an open circuit or a pause holds back before this attempt
    /// was ever claimed (a first attempt, or a replayed one) as waiting for
    /// `message.attempt`, due at `due_at`. Never over a claim of this or a later attempt,
    /// nor over a delivered pair. The default lists nothing.
    async fn list_waiting(
        &self,
        message: &DeliveryMessage,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let _ = (message, due_at);
        Ok(())
    }

    /// Takes a delivery off the waiting list when it ends without a claim of its attempt
    /// (dead-lettered while held back). A claim takes it off by itself. The default does
    /// nothing.
    async fn unlist_waiting(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        let _ = message;
        Ok(())
    }

    /// Gives up the claim of attempt `message.attempt_key()` that this holder took as try
    /// `takeover`, unsent or not counted: its lease ends now, so the message put back on
    /// the queue takes the attempt over when it returns (no attempt spent) instead of SQS
    /// redelivering it after the visibility timeout (which outlasts the lease). The same
    /// write lists the delivery as waiting for this attempt, due at `due_at` (real time).
    /// [`PortError::Rejected`] when the claim is no longer that try's (finished, or taken
    /// over): nothing changed. Safe to call again. A ledger that cannot release says so:
    /// the default is [`PortError::Unavailable`], and the caller then leaves the message
    /// to SQS.
    async fn release(
        &self,
        message: &DeliveryMessage,
        takeover: u32,
        due_at: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let _ = (message, takeover, due_at);
        Err(PortError::Unavailable(
            "this ledger does not release claims".into(),
        ))
    }

    /// Records that a copy of `message` was dropped without a POST because its pair is
    /// delivered ([`Claim::AlreadyDelivered`]): one row per attempt (outcome
    /// [`OUTCOME_DUPLICATE`]) that counts the copies, so the attempt log says why a copy
    /// that was seen went nowhere. For people: the caller logs a failure. The default keeps
    /// no such row.
    async fn record_duplicate(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        let _ = message;
        Ok(())
    }

    /// Appends an attempt of `message`'s pair to the log (where its ledger layout keeps
    /// the pair, [`DeliveryMessage::ledger_layout`]), one row per (endpoint, replay,
    /// attempt, takeover). Never overwrites a recorded attempt (only an
    /// [`OUTCOME_ABANDONED`] placeholder, by the real result of the same try); a second
    /// write of the same try is [`PortError::Rejected`].
    async fn record_attempt(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError>;

    /// Records a successful attempt and marks the claim finished as
    /// [`DeliveryState::Delivered`]: what [`Self::record_attempt`] then [`Self::finish`] do
    /// (the default), in one conditional write where the store can (the DynamoDB ledger
    /// keeps the success on the delivery's state item, so a delivery costs two writes:
    /// claim and this). `record` must be the attempt this caller claimed, with outcome
    /// `delivered`; [`Self::history`] returns it like any other row. It never overwrites
    /// a recorded success: when this caller's claim was taken over meanwhile, the attempt
    /// gets its own row, as [`Self::record_attempt`] would write it. Recording the same try
    /// again (a retried call) changes nothing and is not an error.
    async fn record_delivered(
        &self,
        message: &DeliveryMessage,
        record: &AttemptRecord,
    ) -> Result<(), PortError> {
        // Rejected = this try's row is already there (a retried call).
        let logged = match self.record_attempt(message, record).await {
            Err(PortError::Rejected(_)) => Ok(()),
            other => other,
        };
        let finished = self.finish(message, DeliveryState::Delivered).await;
        logged.and(finished)
    }

    /// Every recorded attempt of `tenant`'s event, oldest first, in both ledger layouts
    /// ([`crate::spread::LedgerLayout`]). Rows of the unsharded layout are keyed by the
    /// event id alone and may belong to another tenant's event with the same id: a caller
    /// that shows them to a tenant keeps those of the tenant's endpoints.
    async fn history(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError>;

    /// Everything the ledger holds for `tenant`'s event: each pair's state item (its
    /// claim and how it ended) and the attempt log, for `tern audit`, from both layouts as
    /// [`Self::history`]. The default knows no state items (a store that keeps none): only
    /// [`Self::history`].
    async fn trace(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<crate::trace::EventTrace, PortError> {
        Ok(crate::trace::EventTrace {
            pairs: Vec::new(),
            attempts: self.history(tenant, event).await?,
            read_units: None,
        })
    }

    /// The state of each (event, endpoint) pair of `tenant`'s `event` the ledger holds (a
    /// pair appears once its first attempt was claimed), read consistently, from both
    /// layouts (unsharded items may be another tenant's, as [`Self::history`] says; a pair
    /// found in both is the [`PairState::prevailing`] one). The default: this ledger
    /// cannot ([`PortError::Rejected`]).
    async fn pair_states(
        &self,
        tenant: &TenantId,
        event: &EventId,
    ) -> Result<Vec<PairState>, PortError> {
        let _ = (tenant, event);
        Err(PortError::Rejected(
            "this ledger does not keep pair states".into(),
        ))
    }

    /// The state of one pair, read consistently; `None` when no attempt of it was ever
    /// claimed. The default reads [`Self::pair_states`]; the DynamoDB ledger reads the
    /// pair's two possible items (one per layout) instead of the event's every partition.
    async fn pair_state(
        &self,
        tenant: &TenantId,
        event: &EventId,
        endpoint: &EndpointId,
    ) -> Result<Option<PairState>, PortError> {
        Ok(self
            .pair_states(tenant, event)
            .await?
            .into_iter()
            .find(|s| s.endpoint_id == *endpoint))
    }

    /// Adds the attempts a sender batch recorded to their endpoints' logs: one write per
    /// endpoint (per [`crate::delivery_log::SPREAD_LOG_ITEM_SPAN_MS`] of attempt starts). For
    /// people, like the attempt rows: a failure loses those lines from the endpoint's log,
    /// never from the event's history. The default keeps no endpoint log.
    async fn append_endpoint_log(&self, records: &[AttemptRecord]) -> Result<(), PortError> {
        let _ = records;
        Ok(())
    }

    /// Enters a dead-lettered `message` (one carrying its dead-letter record) in the
    /// tenant's dead-letter record ([`crate::dead_letters`]), replacing the pair's earlier
    /// entry. Called before the message goes to the DLQ, so the record holds whatever the
    /// sender dead-letters. Safe to call again. The default keeps no record.
    async fn record_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        let _ = message;
        Ok(())
    }

    /// Takes the entry of dead letter `message` (as it was in the DLQ) out of the record
    /// after a replay moved it; an entry of a later budget (it bounced back already) stays.
    /// Safe to call again. The default keeps no record.
    async fn remove_dead_letter(&self, message: &DeliveryMessage) -> Result<(), PortError> {
        let _ = message;
        Ok(())
    }

    /// A tenant's dead letters from the record, without touching the DLQ: the pairs still
    /// dead-lettered (a pair delivered or replayed since is dropped). The default: this
    /// ledger keeps no record ([`PortError::Rejected`]).
    async fn dead_letters(
        &self,
        query: &crate::dead_letters::DeadLetterQuery,
    ) -> Result<crate::dead_letters::DeadLetterRead, PortError> {
        let _ = query;
        Err(PortError::Rejected(
            "this ledger does not keep a dead-letter record".into(),
        ))
    }

    /// One page of an endpoint's log, newest first ([`crate::delivery_log::LogPager`]).
    /// The default: this ledger keeps none ([`PortError::Rejected`]).
    async fn endpoint_log(&self, query: &EndpointLogQuery) -> Result<EndpointLogPage, PortError> {
        let _ = query;
        Err(PortError::Rejected(
            "this ledger does not keep endpoint logs".into(),
        ))
    }
}

/// A message read from a queue, for the replay function's drain of the DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// Queue message id.
    pub message_id: String,
    /// Handle to delete it or change its visibility.
    pub receipt_handle: String,
    /// Body.
    pub body: String,
    /// String message attributes.
    pub attributes: Vec<(String, String)>,
}

/// A queue Tern drains (the DLQ, by the replay function).
#[async_trait]
pub trait DrainableQueue: Send + Sync {
    /// Receives up to `max` (1..=10, SQS limit) visible messages, hiding them for
    /// `visibility_seconds`. `wait_seconds` (0..=20, SQS limit) > 0 is a long poll: it asks
    /// every server of the queue and waits up to that long for a message. With 0 (a short
    /// poll) SQS samples a subset of its servers and may answer empty while messages exist,
    /// so a drain that stops on an empty answer must long-poll.
    async fn receive(
        &self,
        max: i32,
        visibility_seconds: i32,
        wait_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, PortError>;
    /// Deletes a received message.
    async fn delete(&self, receipt_handle: &str) -> Result<(), PortError>;
    /// Makes a received message visible again at once.
    async fn release(&self, receipt_handle: &str) -> Result<(), PortError>;
}
