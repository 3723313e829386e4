//! A model of an SQS **standard** queue, in memory, on a clock the caller passes in (so a
//! test moves time without sleeping). What it models, from the SQS Developer Guide and
//! API reference:
//!
//! - `DelaySeconds` 0 to 900 per message ([`crate::retry::MAX_QUEUE_DELAY_SECONDS`]): a
//!   delayed message is neither visible nor in flight until its delay ends.
//! - Receives of 1 to 10 messages ([`MAX_RECEIVE_MESSAGES`]) with a visibility timeout
//!   (0 to 12 h): a received message is in flight, hidden from other receives, until it is
//!   deleted or its visibility timeout ends; then it is visible again with its receive
//!   count kept. Each receive gives a new receipt handle; only the latest deletes.
//! - Redrive: a message received `maxReceiveCount` times is moved to the dead-letter queue
//!   instead of being received again (lazily, inside a receive, as SQS and moto do).
//! - Batches: `SendMessageBatch` of up to 10 entries with distinct ids, 1 MiB in all
//!   ([`crate::event::SQS_MESSAGE_LIMIT_BYTES`], also each message's limit).
//! - The in-flight limit of a standard queue (about 120,000, [`IN_FLIGHT_LIMIT`]): past it
//!   a receive returns nothing.
//! - **Fair queues** (messages with a `MessageGroupId` on a standard queue; "How Amazon
//!   SQS fair queues work"): a tenant (group) is *noisy* while it holds more than 10 % of
//!   the in-flight messages and at least 30 of its own, or more than 10 % of the recent
//!   processing time (receive to delete, or to the end of the visibility timeout); while
//!   any is, receives hand out the quiet tenants' messages first, then the noisy tenants',
//!   the one with the fewest in flight first. A noisy tenant stays noisy while it has a
//!   visible backlog and sent a message in the last 5 minutes. A message without a group is
//!   a tenant of its own (never noisy).
//!
//! What it does not model: the approximate, distributed nature of SQS (a short poll that
//! samples a subset of servers and misses messages, duplicates of a message delivered
//! twice, ordering looser than "first visible, first received"); retention periods (14
//! days, longer than any run); FIFO queues; server-side encryption; message attributes'
//! types; the queue's default delay and its `ReceiveMessageWaitTimeSeconds` (long polls
//! belong to the caller, which can wait for [`SqsModel::next_visible_at`]). The
//! processing-time share counts the last [`PROCESSING_TIME_WINDOW`] (SQS says "recent"
//! without a figure), and the thresholds are AWS's approximate ones, applied exactly.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::ports::{QueueEntry, group_id_is_valid};

/// Most messages one receive returns, and most entries one `SendMessageBatch` takes: 10
/// (SQS API reference, ReceiveMessage `MaxNumberOfMessages`; SendMessageBatch).
pub const MAX_RECEIVE_MESSAGES: usize = 10;

/// Longest visibility timeout, in seconds: 12 hours (SQS API reference,
/// ChangeMessageVisibility).
pub const MAX_VISIBILITY_TIMEOUT_SECONDS: u64 = 43_200;

/// In-flight messages a standard queue holds at most: about 120,000 (SQS Developer Guide,
/// "Amazon SQS message quotas").
pub const IN_FLIGHT_LIMIT: usize = 120_000;

/// A tenant holding more than this share of the in-flight messages (and at least
/// [`NOISY_MIN_IN_FLIGHT`] of its own) is noisy: 10 % ("How Amazon SQS fair queues work").
pub const NOISY_IN_FLIGHT_SHARE: f64 = 0.10;

/// In-flight messages a tenant needs of its own before its share makes it noisy: 30.
pub const NOISY_MIN_IN_FLIGHT: usize = 30;

/// A tenant taking more than this share of the recent processing time is noisy: 10 %.
pub const NOISY_PROCESSING_SHARE: f64 = 0.10;

/// A noisy tenant that sent nothing for this long is quiet again: 5 minutes.
pub const QUIET_AFTER_IDLE: Duration = Duration::from_secs(300);

/// How far back the processing-time share looks, in seconds: 60. An assumption of this
/// model: SQS documents "recent" processing time without a figure.
pub const PROCESSING_TIME_WINDOW: Duration = Duration::from_secs(60);

/// How a queue behaves (its attributes, and the redrive policy).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSettings {
    /// Visibility timeout of a receive that names none (the queue's
    /// `VisibilityTimeout`; SQS's default is 30 s).
    pub visibility_timeout: Duration,
    /// `maxReceiveCount` of the redrive policy: a message received this many times goes to
    /// the dead-letter queue instead of being received again. `None`: no redrive.
    pub max_receive_count: Option<u32>,
    /// Whether the fair-queue ordering applies (it does on AWS for every standard queue
    /// whose messages carry a `MessageGroupId`); `false` for the plain ordering, to see
    /// what fairness changes.
    pub fair: bool,
    /// In-flight messages at most ([`IN_FLIGHT_LIMIT`]).
    pub in_flight_limit: usize,
}

impl Default for QueueSettings {
    /// SQS's defaults: 30 s visibility, no redrive, fair ordering, the in-flight limit.
    fn default() -> Self {
        Self {
            visibility_timeout: Duration::from_secs(30),
            max_receive_count: None,
            fair: true,
            in_flight_limit: IN_FLIGHT_LIMIT,
        }
    }
}

impl QueueSettings {
    /// Tern's delivery queue (`infra/settings.json` `queues.delivery`): visibility
    /// timeout 360 s, `maxReceiveCount` 5.
    pub fn delivery_queue() -> Self {
        Self {
            visibility_timeout: Duration::from_secs(360),
            max_receive_count: Some(5),
            ..Self::default()
        }
    }
}

/// A request SQS would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqsError {
    /// `DelaySeconds` above 900.
    #[error("DelaySeconds {0} is outside 0-900")]
    DelayOutOfRange(u32),
    /// A message body over 1 MiB, or a batch whose bodies together are.
    #[error("{0} bytes is over the 1 MiB message limit")]
    TooLarge(usize),
    /// A `SendMessageBatch` with no entry or more than 10.
    #[error("a batch holds 1 to 10 entries, not {0}")]
    BatchSize(usize),
    /// Two entries of one batch with the same id.
    #[error("batch entry id {0} is used twice")]
    DuplicateEntryId(String),
    /// A `MessageGroupId` SQS does not accept.
    #[error("MessageGroupId {0:?} is not 1-128 printable ASCII characters")]
    InvalidGroupId(String),
    /// `MaxNumberOfMessages` outside 1-10.
    #[error("MaxNumberOfMessages {0} is outside 1-10")]
    MaxMessagesOutOfRange(usize),
    /// A visibility timeout over 12 hours.
    #[error("visibility timeout of {0} s is over 12 hours")]
    VisibilityOutOfRange(u64),
    /// A receipt handle this queue never gave out.
    #[error("receipt handle {0:?} is not valid")]
    InvalidReceiptHandle(String),
    /// `ChangeMessageVisibility` of a message that is not in flight.
    #[error("the message is not in flight")]
    NotInFlight,
}

/// A message as a receive returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    /// Message id (kept across receives and into the dead-letter queue).
    pub message_id: String,
    /// This receive's handle: only the latest receive's deletes the message.
    pub receipt_handle: String,
    /// Body.
    pub body: String,
    /// String message attributes.
    pub attributes: Vec<(String, String)>,
    /// `MessageGroupId`.
    pub group_id: Option<String>,
    /// Receives so far, this one included (`ApproximateReceiveCount`).
    pub receive_count: u32,
    /// When it was sent (on the queue's clock).
    pub sent_at: Instant,
}

/// Messages in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Visible: waiting for a receive (`ApproximateNumberOfMessages`).
    pub visible: usize,
    /// Received, not deleted, visibility timeout running (`...NotVisible`).
    pub in_flight: usize,
    /// Sent with a delay that has not ended (`...Delayed`).
    pub delayed: usize,
}

/// Who a message belongs to for fairness: its group, or (`None`) no group.
type Tenant = Option<String>;

#[derive(Debug, Clone)]
struct Stored {
    message_id: String,
    body: String,
    attributes: Vec<(String, String)>,
    group_id: Tenant,
    sent_at: Instant,
    /// When it is (or was, or will be) visible; its key in `hidden` or `visible`.
    visible_at: Instant,
    receive_count: u32,
    /// The latest receive's handle.
    receipt: Option<String>,
    /// Set while in flight: when it was received.
    received_at: Option<Instant>,
}

/// An SQS standard queue, in memory (see the module doc for what is modelled). Every
/// call takes the time `now` on the caller's monotonic clock.
#[derive(Debug)]
pub struct SqsModel {
    settings: QueueSettings,
    next_seq: u64,
    messages: HashMap<u64, Stored>,
    /// Delayed and in-flight messages, by when they become visible.
    hidden: BTreeSet<(Instant, u64)>,
    /// Visible messages per tenant, in the order they became visible.
    visible: HashMap<Tenant, BTreeSet<(Instant, u64)>>,
    in_flight: usize,
    /// Per group: messages in flight, and the sum of their receive times (since `epoch`),
    /// so the time they have taken so far is one subtraction, not a scan.
    in_flight_by_group: HashMap<String, (usize, Duration)>,
    epoch: Instant,
    /// Processing times that ended within [`PROCESSING_TIME_WINDOW`]: (end, group, how long).
    processing: VecDeque<(Instant, String, Duration)>,
    /// The same summed per group, kept as entries come and go, so a receive reads the
    /// shares in the number of groups, not of recent deletes (about 12,000 a minute at
    /// 200 a second, hashed on every receive before).
    processing_by_group: HashMap<String, Duration>,
    noisy: HashSet<String>,
    last_sent: HashMap<String, Instant>,
}

impl SqsModel {
    /// An empty queue.
    pub fn new(settings: QueueSettings) -> Self {
        Self {
            settings,
            next_seq: 0,
            messages: HashMap::new(),
            hidden: BTreeSet::new(),
            visible: HashMap::new(),
            in_flight: 0,
            in_flight_by_group: HashMap::new(),
            // Before any time a caller passes (their clocks started before this queue).
            epoch: Instant::now()
                .checked_sub(Duration::from_secs(365 * 86_400))
                .unwrap_or_else(Instant::now),
            processing: VecDeque::new(),
            processing_by_group: HashMap::new(),
            noisy: HashSet::new(),
            last_sent: HashMap::new(),
        }
    }

    /// The queue's settings.
    pub fn settings(&self) -> &QueueSettings {
        &self.settings
    }

    /// Checks one entry against SQS's limits.
    ///
    /// # Errors
    /// [`SqsError::DelayOutOfRange`], [`SqsError::TooLarge`], [`SqsError::InvalidGroupId`].
    pub fn check(entry: &QueueEntry) -> Result<(), SqsError> {
        if entry.delay_seconds > crate::retry::MAX_QUEUE_DELAY_SECONDS {
            return Err(SqsError::DelayOutOfRange(entry.delay_seconds));
        }
        let size = entry_bytes(entry);
        if size > crate::event::SQS_MESSAGE_LIMIT_BYTES {
            return Err(SqsError::TooLarge(size));
        }
        if let Some(group) = &entry.group_id
            && !group_id_is_valid(group)
        {
            return Err(SqsError::InvalidGroupId(group.clone()));
        }
        Ok(())
    }

    /// Checks a `SendMessageBatch` call as a whole: 1 to 10 entries, distinct ids, 1 MiB.
    ///
    /// # Errors
    /// [`SqsError::BatchSize`], [`SqsError::DuplicateEntryId`], [`SqsError::TooLarge`].
    pub fn check_batch(entries: &[QueueEntry]) -> Result<(), SqsError> {
        if entries.is_empty() || entries.len() > MAX_RECEIVE_MESSAGES {
            return Err(SqsError::BatchSize(entries.len()));
        }
        let mut ids = HashSet::new();
        for e in entries {
            if !ids.insert(e.id.as_str()) {
                return Err(SqsError::DuplicateEntryId(e.id.clone()));
            }
        }
        let total: usize = entries.iter().map(entry_bytes).sum();
        if total > crate::event::SQS_MESSAGE_LIMIT_BYTES {
            return Err(SqsError::TooLarge(total));
        }
        Ok(())
    }

    /// Sends one message at `now`; returns its message id.
    ///
    /// # Errors
    /// What [`Self::check`] refuses.
    pub fn send(&mut self, entry: &QueueEntry, now: Instant) -> Result<String, SqsError> {
        Self::check(entry)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let message_id = format!("m{seq:012}");
        let visible_at = now + Duration::from_secs(u64::from(entry.delay_seconds));
        if let Some(group) = &entry.group_id {
            self.last_sent.insert(group.clone(), now);
        }
        self.messages.insert(
            seq,
            Stored {
                message_id: message_id.clone(),
                body: entry.body.clone(),
                attributes: entry.attributes.clone(),
                group_id: entry.group_id.clone(),
                sent_at: now,
                visible_at,
                receive_count: 0,
                receipt: None,
                received_at: None,
            },
        );
        if entry.delay_seconds == 0 {
            self.visible
                .entry(entry.group_id.clone())
                .or_default()
                .insert((visible_at, seq));
        } else {
            self.hidden.insert((visible_at, seq));
        }
        Ok(message_id)
    }

    /// Puts a message moved from another queue (a redrive) on this one at `now`, as it
    /// was: its id, body, attributes and group; visible at once, not yet received here.
    pub fn put_redriven(&mut self, message: &QueueMessage, now: Instant) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.messages.insert(
            seq,
            Stored {
                message_id: message.message_id.clone(),
                body: message.body.clone(),
                attributes: message.attributes.clone(),
                group_id: message.group_id.clone(),
                sent_at: message.sent_at,
                visible_at: now,
                receive_count: 0,
                receipt: None,
                received_at: None,
            },
        );
        self.visible
            .entry(message.group_id.clone())
            .or_default()
            .insert((now, seq));
    }

    /// Makes visible what is due at `now`: delays that ended, visibility timeouts that ran
    /// out (the end of a receive's processing time).
    fn promote(&mut self, now: Instant) {
        while let Some(&(at, seq)) = self.hidden.first() {
            if at > now {
                break;
            }
            self.hidden.pop_first();
            let Some(m) = self.messages.get_mut(&seq) else {
                continue;
            };
            if let Some(received_at) = m.received_at.take() {
                self.in_flight -= 1;
                if let Some(g) = &m.group_id {
                    leave(&mut self.in_flight_by_group, g, received_at, self.epoch);
                    let took = at.saturating_duration_since(received_at);
                    processing_ended(
                        &mut self.processing,
                        &mut self.processing_by_group,
                        at,
                        g,
                        took,
                    );
                }
            }
            self.visible
                .entry(m.group_id.clone())
                .or_default()
                .insert((at, seq));
        }
        while self
            .processing
            .front()
            .is_some_and(|(end, _, _)| now.saturating_duration_since(*end) > PROCESSING_TIME_WINDOW)
        {
            if let Some((_, g, took)) = self.processing.pop_front()
                && let Some(sum) = self.processing_by_group.get_mut(&g)
            {
                *sum = sum.saturating_sub(took);
                if sum.is_zero() {
                    self.processing_by_group.remove(&g);
                }
            }
        }
    }

    /// Which tenants are noisy at `now` (see the module doc).
    fn update_noisy(&mut self, now: Instant) {
        if !self.settings.fair {
            self.noisy.clear();
            return;
        }
        let mut time: HashMap<&str, Duration> = self
            .processing_by_group
            .iter()
            .map(|(g, d)| (g.as_str(), *d))
            .collect();
        // Messages in flight count the time they have taken so far.
        let since_epoch = now.saturating_duration_since(self.epoch);
        for (g, (n, received)) in &self.in_flight_by_group {
            let n = u32::try_from(*n).unwrap_or(u32::MAX);
            *time.entry(g.as_str()).or_default() += (since_epoch * n).saturating_sub(*received);
        }
        let total_time: Duration = time.values().sum();
        let groups: HashSet<String> = self
            .in_flight_by_group
            .keys()
            .chain(self.noisy.iter())
            .cloned()
            .chain(time.keys().map(|g| (*g).to_owned()))
            .collect();
        let mut noisy = HashSet::new();
        for g in groups {
            let in_flight = self.in_flight_by_group.get(&g).map_or(0, |(n, _)| *n);
            let by_concurrency = in_flight >= NOISY_MIN_IN_FLIGHT
                && in_flight as f64 > NOISY_IN_FLIGHT_SHARE * self.in_flight as f64;
            let by_time = !total_time.is_zero()
                && time
                    .get(g.as_str())
                    .copied()
                    .unwrap_or_default()
                    .as_secs_f64()
                    > NOISY_PROCESSING_SHARE * total_time.as_secs_f64();
            let backlog = self
                .visible
                .get(&Some(g.clone()))
                .is_some_and(|v| !v.is_empty());
            let sending = self
                .last_sent
                .get(&g)
                .is_some_and(|t| now.saturating_duration_since(*t) < QUIET_AFTER_IDLE);
            let stays = self.noisy.contains(&g) && backlog && sending;
            if by_concurrency || by_time || stays {
                noisy.insert(g);
            }
        }
        self.noisy = noisy;
    }

    /// The tenant whose visible message goes next: the quiet tenants' oldest first; then
    /// the noisy tenant with the fewest in flight.
    fn next_tenant(&self) -> Option<Tenant> {
        let heads = self
            .visible
            .iter()
            .filter_map(|(t, v)| v.first().map(|h| (t, *h)));
        let is_noisy = |t: &Tenant| t.as_ref().is_some_and(|g| self.noisy.contains(g));
        let mut quiet: Option<(&Tenant, (Instant, u64))> = None;
        let mut noisy: Option<(usize, (Instant, u64), &Tenant)> = None;
        for (t, head) in heads {
            if is_noisy(t) {
                let n = t
                    .as_ref()
                    .and_then(|g| self.in_flight_by_group.get(g))
                    .map_or(0, |(n, _)| *n);
                if noisy.is_none_or(|(m, h, _)| (n, head) < (m, h)) {
                    noisy = Some((n, head, t));
                }
            } else if quiet.is_none_or(|(_, h)| head < h) {
                quiet = Some((t, head));
            }
        }
        quiet
            .map(|(t, _)| t.clone())
            .or_else(|| noisy.map(|(_, _, t)| t.clone()))
    }

    /// Receives up to `max` (1 to 10) visible messages at `now`, hiding each for
    /// `visibility` (the queue's when `None`). Returns them, and the messages moved to the
    /// dead-letter queue instead (received `maxReceiveCount` times already), which the
    /// caller puts there. Empty past the in-flight limit.
    ///
    /// # Errors
    /// [`SqsError::MaxMessagesOutOfRange`], [`SqsError::VisibilityOutOfRange`].
    pub fn receive(
        &mut self,
        max: usize,
        visibility: Option<Duration>,
        now: Instant,
    ) -> Result<(Vec<QueueMessage>, Vec<QueueMessage>), SqsError> {
        if !(1..=MAX_RECEIVE_MESSAGES).contains(&max) {
            return Err(SqsError::MaxMessagesOutOfRange(max));
        }
        let visibility = visibility.unwrap_or(self.settings.visibility_timeout);
        if visibility.as_secs() > MAX_VISIBILITY_TIMEOUT_SECONDS {
            return Err(SqsError::VisibilityOutOfRange(visibility.as_secs()));
        }
        self.promote(now);
        self.update_noisy(now);
        let (mut received, mut redriven) = (Vec::new(), Vec::new());
        while received.len() < max && self.in_flight < self.settings.in_flight_limit {
            let Some(tenant) = self.next_tenant() else {
                break;
            };
            let Some(set) = self.visible.get_mut(&tenant) else {
                break;
            };
            let Some((_, seq)) = set.pop_first() else {
                break;
            };
            if set.is_empty() {
                // Its backlog drained: a noisy tenant is quiet again.
                self.visible.remove(&tenant);
                if let Some(g) = &tenant {
                    self.noisy.remove(g);
                }
            }
            let Some(m) = self.messages.get_mut(&seq) else {
                continue;
            };
            if self
                .settings
                .max_receive_count
                .is_some_and(|most| m.receive_count >= most)
            {
                if let Some(m) = self.messages.remove(&seq) {
                    redriven.push(as_received(&m, String::new()));
                }
                continue;
            }
            m.receive_count += 1;
            let handle = format!("{seq}:{}", m.receive_count);
            m.receipt = Some(handle.clone());
            m.received_at = Some(now);
            m.visible_at = now + visibility;
            self.hidden.insert((m.visible_at, seq));
            self.in_flight += 1;
            if let Some(g) = &m.group_id {
                let (n, received) = self.in_flight_by_group.entry(g.clone()).or_default();
                *n += 1;
                *received += now.saturating_duration_since(self.epoch);
            }
            received.push(as_received(m, handle));
        }
        Ok((received, redriven))
    }

    /// Deletes the message `receipt_handle` was given for, when it is that message's
    /// latest receipt (`Ok(true)`); an older receipt deletes nothing (`Ok(false)`), as on
    /// SQS, where the call succeeds but the message may stay.
    ///
    /// # Errors
    /// [`SqsError::InvalidReceiptHandle`] for a handle this queue never gave out.
    pub fn delete(&mut self, receipt_handle: &str, now: Instant) -> Result<bool, SqsError> {
        let seq = parse_handle(receipt_handle)?;
        let Some(m) = self.messages.get(&seq) else {
            return Ok(false);
        };
        if m.receipt.as_deref() != Some(receipt_handle) {
            return Ok(false);
        }
        let Some(m) = self.messages.remove(&seq) else {
            return Ok(false);
        };
        if let Some(received_at) = m.received_at {
            self.hidden.remove(&(m.visible_at, seq));
            self.in_flight -= 1;
            if let Some(g) = &m.group_id {
                leave(&mut self.in_flight_by_group, g, received_at, self.epoch);
                let took = now.saturating_duration_since(received_at);
                processing_ended(
                    &mut self.processing,
                    &mut self.processing_by_group,
                    now,
                    g,
                    took,
                );
            }
        } else if let Some(set) = self.visible.get_mut(&m.group_id) {
            // Visible again after its timeout: deleted from the visible set.
            set.remove(&(m.visible_at, seq));
            if set.is_empty() {
                self.visible.remove(&m.group_id);
                if let Some(g) = &m.group_id {
                    self.noisy.remove(g);
                }
            }
        }
        Ok(true)
    }

    /// Sets a message's remaining visibility timeout to `timeout` from `now`
    /// (`ChangeMessageVisibility`); zero makes it visible at once.
    ///
    /// # Errors
    /// [`SqsError::InvalidReceiptHandle`], [`SqsError::NotInFlight`] (not in flight, or
    /// not its latest receipt), [`SqsError::VisibilityOutOfRange`].
    pub fn change_visibility(
        &mut self,
        receipt_handle: &str,
        timeout: Duration,
        now: Instant,
    ) -> Result<(), SqsError> {
        if timeout.as_secs() > MAX_VISIBILITY_TIMEOUT_SECONDS {
            return Err(SqsError::VisibilityOutOfRange(timeout.as_secs()));
        }
        let seq = parse_handle(receipt_handle)?;
        let m = self
            .messages
            .get_mut(&seq)
            .filter(|m| m.receipt.as_deref() == Some(receipt_handle) && m.received_at.is_some())
            .ok_or(SqsError::NotInFlight)?;
        self.hidden.remove(&(m.visible_at, seq));
        m.visible_at = now + timeout;
        self.hidden.insert((m.visible_at, seq));
        self.promote(now);
        Ok(())
    }

    /// Messages in each state at `now`.
    pub fn counts(&mut self, now: Instant) -> QueueCounts {
        self.promote(now);
        QueueCounts {
            visible: self.visible.values().map(BTreeSet::len).sum(),
            in_flight: self.in_flight,
            delayed: self.hidden.len() - self.in_flight,
        }
    }

    /// Visible, in-flight and delayed messages of one group at `now`.
    pub fn group_counts(&mut self, group: &str, now: Instant) -> QueueCounts {
        self.promote(now);
        let tenant = Some(group.to_owned());
        let in_flight = self.in_flight_by_group.get(group).map_or(0, |(n, _)| *n);
        let hidden = self
            .hidden
            .iter()
            .filter(|(_, seq)| self.messages.get(seq).is_some_and(|m| m.group_id == tenant))
            .count();
        QueueCounts {
            visible: self.visible.get(&tenant).map_or(0, BTreeSet::len),
            in_flight,
            delayed: hidden - in_flight,
        }
    }

    /// When the next hidden message (delayed or in flight) becomes visible, if any: how
    /// long a long poll may wait before something changes without a send.
    pub fn next_visible_at(&self) -> Option<Instant> {
        self.hidden.first().map(|(at, _)| *at)
    }

    /// The tenants that were noisy at the last receive.
    pub fn noisy_groups(&self) -> Vec<String> {
        let mut v: Vec<String> = self.noisy.iter().cloned().collect();
        v.sort();
        v
    }
}

/// Records a processing time of `group` that ended at `at`, in the window and in the
/// group's sum.
fn processing_ended(
    window: &mut VecDeque<(Instant, String, Duration)>,
    by_group: &mut HashMap<String, Duration>,
    at: Instant,
    group: &str,
    took: Duration,
) {
    window.push_back((at, group.to_owned(), took));
    *by_group.entry(group.to_owned()).or_default() += took;
}

fn entry_bytes(entry: &QueueEntry) -> usize {
    entry.body.len()
        + entry
            .attributes
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

/// One message of `group`, received at `received_at`, is no longer in flight.
fn leave(
    counts: &mut HashMap<String, (usize, Duration)>,
    group: &str,
    received_at: Instant,
    epoch: Instant,
) {
    if let Some((n, received)) = counts.get_mut(group) {
        *n -= 1;
        *received = received.saturating_sub(received_at.saturating_duration_since(epoch));
        if *n == 0 {
            counts.remove(group);
        }
    }
}

fn parse_handle(handle: &str) -> Result<u64, SqsError> {
    handle
        .split_once(':')
        .and_then(|(seq, _)| seq.parse().ok())
        .ok_or_else(|| SqsError::InvalidReceiptHandle(handle.to_owned()))
}

fn as_received(m: &Stored, receipt_handle: String) -> QueueMessage {
    QueueMessage {
        message_id: m.message_id.clone(),
        receipt_handle,
        body: m.body.clone(),
        attributes: m.attributes.clone(),
        group_id: m.group_id.clone(),
        receive_count: m.receive_count,
        sent_at: m.sent_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str, delay: u32, group: Option<&str>) -> QueueEntry {
        QueueEntry {
            id: "e".into(),
            body: body.into(),
            delay_seconds: delay,
            attributes: vec![],
            group_id: group.map(str::to_owned),
        }
    }

    fn bodies(messages: &[QueueMessage]) -> Vec<&str> {
        messages.iter().map(|m| m.body.as_str()).collect()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_received_message_is_hidden_for_its_visibility_timeout_then_comes_back() {
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings::default());
        q.send(&entry("a", 0, None), t0).unwrap();
        let (got, _) = q.receive(10, Some(secs(30)), t0).unwrap();
        assert_eq!(bodies(&got), ["a"]);
        assert_eq!(got[0].receive_count, 1);
        assert_eq!(
            q.counts(t0),
            QueueCounts {
                visible: 0,
                in_flight: 1,
                delayed: 0
            }
        );
        // Hidden until the timeout ends, not a moment before.
        assert!(q.receive(10, None, t0 + secs(29)).unwrap().0.is_empty());
        let (again, _) = q.receive(10, None, t0 + secs(30)).unwrap();
        assert_eq!(bodies(&again), ["a"]);
        assert_eq!(again[0].receive_count, 2);
        assert_eq!(again[0].message_id, got[0].message_id);
        // The first receipt is stale: it deletes nothing; the latest deletes.
        assert!(!q.delete(&got[0].receipt_handle, t0 + secs(31)).unwrap());
        assert!(q.delete(&again[0].receipt_handle, t0 + secs(31)).unwrap());
        assert_eq!(q.counts(t0 + secs(400)), QueueCounts::default());
        assert!(matches!(
            q.delete("nonsense", t0),
            Err(SqsError::InvalidReceiptHandle(_))
        ));
    }

    #[test]
    fn a_delayed_message_is_neither_visible_nor_in_flight_until_its_delay_ends() {
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings::default());
        q.send(&entry("late", 900, None), t0).unwrap();
        q.send(&entry("now", 0, None), t0).unwrap();
        assert_eq!(
            q.counts(t0),
            QueueCounts {
                visible: 1,
                in_flight: 0,
                delayed: 1
            }
        );
        assert_eq!(q.next_visible_at(), Some(t0 + secs(900)));
        let now = q.receive(10, None, t0).unwrap().0;
        assert_eq!(bodies(&now), ["now"]);
        q.delete(&now[0].receipt_handle, t0).unwrap();
        assert!(q.receive(10, None, t0 + secs(899)).unwrap().0.is_empty());
        assert_eq!(
            bodies(&q.receive(10, None, t0 + secs(900)).unwrap().0),
            ["late"]
        );
        assert_eq!(
            SqsModel::check(&entry("x", 901, None)),
            Err(SqsError::DelayOutOfRange(901))
        );
        assert!(q.send(&entry("x", 901, None), t0).is_err());
    }

    #[test]
    fn receives_take_at_most_ten_oldest_first_and_batches_keep_the_limits() {
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings::default());
        for i in 0..25 {
            q.send(
                &entry(&i.to_string(), 0, None),
                t0 + Duration::from_millis(i),
            )
            .unwrap();
        }
        let now = t0 + secs(1);
        let first = q.receive(10, None, now).unwrap().0;
        assert_eq!(
            bodies(&first),
            ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
        );
        assert_eq!(q.receive(10, None, now).unwrap().0.len(), 10);
        assert_eq!(q.receive(10, None, now).unwrap().0.len(), 5);
        assert_eq!(
            q.receive(11, None, now),
            Err(SqsError::MaxMessagesOutOfRange(11))
        );
        assert_eq!(
            q.receive(0, None, now),
            Err(SqsError::MaxMessagesOutOfRange(0))
        );
        let eleven: Vec<QueueEntry> = (0..11)
            .map(|i| QueueEntry {
                id: format!("e{i}"),
                ..entry("b", 0, None)
            })
            .collect();
        assert_eq!(SqsModel::check_batch(&eleven), Err(SqsError::BatchSize(11)));
        assert_eq!(
            SqsModel::check_batch(&[entry("a", 0, None), entry("b", 0, None)]),
            Err(SqsError::DuplicateEntryId("e".into()))
        );
        let big = "x".repeat(crate::event::SQS_MESSAGE_LIMIT_BYTES + 1);
        assert!(matches!(
            SqsModel::check(&entry(&big, 0, None)),
            Err(SqsError::TooLarge(_))
        ));
    }

    #[test]
    fn after_max_receive_count_receives_a_message_moves_to_the_dlq() {
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings {
            max_receive_count: Some(2),
            ..QueueSettings::default()
        });
        q.send(&entry("poison", 0, Some("tnt_a")), t0).unwrap();
        let v = Some(secs(10));
        assert_eq!(q.receive(1, v, t0).unwrap().0.len(), 1);
        assert_eq!(q.receive(1, v, t0 + secs(10)).unwrap().0.len(), 1);
        // The third receive finds it received twice: it goes to the DLQ, not to the caller.
        let (got, redriven) = q.receive(1, v, t0 + secs(20)).unwrap();
        assert!(got.is_empty());
        assert_eq!(bodies(&redriven), ["poison"]);
        assert_eq!(redriven[0].receive_count, 2);
        assert_eq!(redriven[0].group_id.as_deref(), Some("tnt_a"));
        assert_eq!(q.counts(t0 + secs(20)), QueueCounts::default());
        // The DLQ keeps its id and body; received there from count 1.
        let mut dlq = SqsModel::new(QueueSettings::default());
        dlq.put_redriven(&redriven[0], t0 + secs(20));
        let (there, _) = dlq.receive(1, None, t0 + secs(20)).unwrap();
        assert_eq!(there[0].message_id, redriven[0].message_id);
        assert_eq!(there[0].receive_count, 1);
    }

    #[test]
    fn changing_visibility_to_zero_makes_a_message_visible_at_once() {
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings::default());
        q.send(&entry("a", 0, None), t0).unwrap();
        let got = q.receive(1, Some(secs(300)), t0).unwrap().0;
        q.change_visibility(&got[0].receipt_handle, Duration::ZERO, t0 + secs(1))
            .unwrap();
        let again = q.receive(1, None, t0 + secs(1)).unwrap().0;
        assert_eq!(bodies(&again), ["a"]);
        // The first receipt no longer names the message's latest receive.
        assert_eq!(
            q.change_visibility(&got[0].receipt_handle, secs(5), t0 + secs(1)),
            Err(SqsError::NotInFlight)
        );
    }

    #[test]
    fn a_noisy_tenant_with_many_in_flight_waits_behind_the_quiet_ones() {
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings::default());
        // B: 40 in flight (of 40: over 10 % and at least 30), and a backlog of 20.
        for i in 0..60 {
            q.send(&entry(&format!("b{i}"), 0, Some("tnt_b")), t0)
                .unwrap();
        }
        for _ in 0..4 {
            q.receive(10, Some(secs(300)), t0).unwrap();
        }
        // A's message comes after B's backlog, but is received first.
        q.send(&entry("a", 0, Some("tnt_a")), t0 + secs(1)).unwrap();
        let got = q.receive(10, Some(secs(300)), t0 + secs(1)).unwrap().0;
        assert_eq!(got[0].body, "a");
        assert_eq!(got.len(), 10);
        assert_eq!(q.noisy_groups(), ["tnt_b"]);

        // The same on a queue without fairness: first visible, first received.
        let mut plain = SqsModel::new(QueueSettings {
            fair: false,
            ..QueueSettings::default()
        });
        for i in 0..60 {
            plain
                .send(&entry(&format!("b{i}"), 0, Some("tnt_b")), t0)
                .unwrap();
        }
        for _ in 0..4 {
            plain.receive(10, Some(secs(300)), t0).unwrap();
        }
        plain
            .send(&entry("a", 0, Some("tnt_a")), t0 + secs(1))
            .unwrap();
        let got = plain.receive(10, Some(secs(300)), t0 + secs(1)).unwrap().0;
        assert!(got.iter().all(|m| m.body != "a"));
    }

    #[test]
    fn the_processing_sums_follow_the_window() {
        // The per-group sums a receive reads are the window's, as entries come (deletes,
        // timeouts) and go (older than the window), for any mix of groups.
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings::default());
        let recomputed = |q: &SqsModel| {
            let mut by: HashMap<String, Duration> = HashMap::new();
            for (_, g, d) in &q.processing {
                *by.entry(g.clone()).or_default() += *d;
            }
            by.retain(|_, d| !d.is_zero());
            by
        };
        for step in 0..400u64 {
            let now = t0 + Duration::from_millis(step * 500);
            let group = ["tnt_a", "tnt_b", "tnt_c"][(step % 3) as usize];
            q.send(&entry(&format!("m{step}"), 0, Some(group)), now)
                .unwrap();
            let got = q.receive(2, Some(secs(3)), now).unwrap().0;
            // Every other message is deleted at once, the rest time out (3 s).
            for m in got.iter().step_by(2) {
                q.delete(&m.receipt_handle, now + Duration::from_millis(step % 7))
                    .unwrap();
            }
            let mut sums = q.processing_by_group.clone();
            sums.retain(|_, d| !d.is_zero());
            assert_eq!(sums, recomputed(&q), "step {step}");
        }
        // Nothing within the window any more: the sums are gone with it.
        q.counts(t0 + secs(400));
        assert!(q.processing.is_empty());
        assert!(q.processing_by_group.is_empty());
    }

    #[test]
    fn a_tenant_taking_most_processing_time_is_noisy_even_with_few_in_flight() {
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings::default());
        // B's messages take 10 s each to process, A's 10 ms: B has most of the time.
        for i in 0..5 {
            q.send(&entry(&format!("b{i}"), 0, Some("tnt_b")), t0)
                .unwrap();
            q.send(&entry(&format!("a{i}"), 0, Some("tnt_a")), t0)
                .unwrap();
        }
        let got = q.receive(10, Some(secs(30)), t0).unwrap().0;
        for m in &got {
            let took = if m.body.starts_with('b') {
                secs(10)
            } else {
                Duration::from_millis(10)
            };
            q.delete(&m.receipt_handle, t0 + took).unwrap();
        }
        q.send(&entry("b-late", 0, Some("tnt_b")), t0 + secs(11))
            .unwrap();
        q.send(&entry("a-late", 0, Some("tnt_a")), t0 + secs(12))
            .unwrap();
        let got = q.receive(1, None, t0 + secs(12)).unwrap().0;
        assert_eq!(bodies(&got), ["a-late"]);
        assert_eq!(q.noisy_groups(), ["tnt_b"]);
        q.delete(&got[0].receipt_handle, t0 + secs(12)).unwrap();
        // A minute on, B's processing time has left the window, but B stays noisy while
        // its backlog lasts.
        q.send(&entry("a-last", 0, Some("tnt_a")), t0 + secs(80))
            .unwrap();
        let got = q.receive(2, None, t0 + secs(80)).unwrap().0;
        assert_eq!(bodies(&got), ["a-last", "b-late"]);
        for m in &got {
            q.delete(&m.receipt_handle, t0 + secs(80)).unwrap();
        }
        // Its backlog drained: quiet again, first visible first received.
        q.send(&entry("b-again", 0, Some("tnt_b")), t0 + secs(81))
            .unwrap();
        q.send(&entry("a-again", 0, Some("tnt_a")), t0 + secs(82))
            .unwrap();
        let got = q.receive(2, None, t0 + secs(82)).unwrap().0;
        assert_eq!(bodies(&got), ["b-again", "a-again"]);
        assert!(q.noisy_groups().is_empty());
    }

    #[test]
    fn past_the_in_flight_limit_a_receive_returns_nothing() {
        let t0 = Instant::now();
        let mut q = SqsModel::new(QueueSettings {
            in_flight_limit: 3,
            ..QueueSettings::default()
        });
        for i in 0..5 {
            q.send(&entry(&i.to_string(), 0, None), t0).unwrap();
        }
        assert_eq!(q.receive(10, None, t0).unwrap().0.len(), 3);
        assert!(q.receive(10, None, t0).unwrap().0.is_empty());
        assert_eq!(q.counts(t0).visible, 2);
    }
}
