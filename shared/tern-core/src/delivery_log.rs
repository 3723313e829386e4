//! The delivery log read by endpoint, and the state of each (event, endpoint) pair.
//!
//! The attempt log is keyed by event: one Query returns an event's history. To answer "what
//! happened to this endpoint between 10:00 and 11:00" without an index write per delivery,
//! the sender also writes, once per endpoint per batch, one **endpoint log item** holding a
//! compact line per attempt it recorded in that batch ([`EndpointLogEntry`]). Items are
//! keyed by endpoint and by the latest attempt start they hold, and hold attempts that
//! started at most [`LOG_ITEM_SPAN_MS`] apart, so a reader that walks the items newest
//! first knows when every attempt after a time has been seen ([`LogPager`]): pages come out
//! newest first across overlapping batches, each attempt exactly once.
//!
//! Pure types and the paging rule; the DynamoDB adapter (`tern-aws`) reads and writes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{EndpointId, EventId};
use crate::outcome::ErrorClass;
use crate::ports::{AttemptRecord, DeliveryState};

/// Longest time between the first and the last attempt start held by one endpoint log
/// item written before the log was spread over shards, in milliseconds: 60,000 (the
/// sender function's timeout, `infra/settings.json`, bounds a batch). A reader asking for
/// attempts before `t` reads those items whose latest start is before `t` + this.
pub const LOG_ITEM_SPAN_MS: i64 = 60_000;

/// The same for items written into the log's shards (`crate::spread::LOG_SHARDS`), in
/// milliseconds: 5,000. A batch's attempts start within about two seconds of each other
/// (all at once, but for rate-limit slots, waited for at most
/// [`crate::rate_limit::SEND_HORIZON_MS`]); a writer splits a batch whose starts spread
/// further, one item per 5 s of them. The short span is what bounds a page's read of a
/// busy endpoint: a page re-reads the items up to this far above its cursor (an item
/// holds attempts up to this much older than its key), about 4,500 items for an endpoint
/// taking 2,000 deliveries a second, where 60 s would be 54,000.
pub const SPREAD_LOG_ITEM_SPAN_MS: i64 = 5_000;

/// Most attempts one page of the endpoint log returns: 100.
pub const MAX_LOG_PAGE: usize = 100;

/// How an attempt ended, as a filter of the endpoint log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeFilter {
    /// `delivered`.
    Delivered,
    /// Anything but `delivered`: a retry, a dead letter, an abandoned try, a push-back or
    /// our failure made again (`requeued`).
    Failed,
    /// `retry`: failed, the next attempt scheduled.
    Retry,
    /// `dead_letter:<reason>`.
    DeadLetter,
}

impl OutcomeFilter {
    /// Every filter, for parsers and documentation.
    pub const ALL: [Self; 4] = [Self::Delivered, Self::Failed, Self::Retry, Self::DeadLetter];

    /// Whether an attempt `outcome` (`delivered`, `retry`, `requeued`,
    /// `dead_letter:<reason>`, `abandoned`, `duplicate`) passes.
    pub fn matches(self, outcome: &str) -> bool {
        match self {
            Self::Delivered => outcome == "delivered",
            Self::Failed => outcome != "delivered",
            Self::Retry => outcome == "retry",
            Self::DeadLetter => outcome.starts_with("dead_letter:"),
        }
    }
}

/// One attempt as the endpoint log keeps it: no error text and no response excerpt (the
/// event's history has them), so a batch's line per attempt keeps the item small.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointLogEntry {
    /// Event (the `webhook-id`).
    pub event_id: EventId,
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// Replay count of the budget.
    pub replay_count: u32,
    /// 1-based attempt number within the budget.
    pub attempt: u32,
    /// 0, or the n-th takeover of the attempt.
    pub takeover: u32,
    /// When the attempt started.
    pub started_at: DateTime<Utc>,
    /// Start to end of the response (or the error), milliseconds.
    pub latency_ms: u64,
    /// HTTP status, when the receiver answered.
    pub status: Option<u16>,
    /// Error class, when there was no usable answer.
    pub error_class: Option<ErrorClass>,
    /// `delivered`, `retry`, `requeued` (the same attempt again: a push-back or our
    /// failure), `dead_letter:<reason>`, `abandoned` or `duplicate`.
    pub outcome: String,
    /// The start of what the receiver answered, for an attempt that was not delivered: at
    /// most [`LOG_EXCERPT_BYTES`], on one line (tabs and line breaks as spaces), SQS-safe.
    pub response_excerpt: Option<String>,
}

/// Bytes of a failed attempt's answer its endpoint log line keeps: 100, as the health
/// record's last failure ([`crate::health::LAST_EXCERPT_BYTES`]); the event's attempt log
/// keeps more. A batch of ten failed deliveries to one endpoint stays one item of about
/// 1.7 KB (two write units); a delivered attempt's line holds none.
pub const LOG_EXCERPT_BYTES: usize = crate::health::LAST_EXCERPT_BYTES;

/// `text` as a log line's last field: one line, bounded, SQS-safe; `None` when empty.
fn log_excerpt(text: &str) -> Option<String> {
    // Only the first bytes can be kept: bound before the rewrite (4 bytes per character).
    let head: String = text
        .chars()
        .take(LOG_EXCERPT_BYTES + 1)
        .map(|c| {
            if matches!(c, '\t' | '\n' | '\r') {
                ' '
            } else {
                c
            }
        })
        .collect();
    let kept = crate::sqs_text::clean(head.trim(), LOG_EXCERPT_BYTES).into_owned();
    (!kept.is_empty()).then_some(kept)
}

impl EndpointLogEntry {
    /// The entry of a recorded attempt.
    pub fn of(record: &AttemptRecord) -> Self {
        Self {
            event_id: record.event_id.clone(),
            endpoint_id: record.endpoint_id.clone(),
            replay_count: record.replay_count,
            attempt: record.attempt,
            takeover: record.takeover,
            started_at: record.started_at,
            latency_ms: record.latency_ms,
            status: record.status,
            error_class: record.error_class,
            outcome: record.outcome.clone(),
            response_excerpt: record
                .response_excerpt
                .as_deref()
                .filter(|_| record.outcome != "delivered")
                .and_then(log_excerpt),
        }
    }

    /// Its place in the log: newest first by start time, then by event and attempt.
    pub fn position(&self) -> LogPosition {
        LogPosition {
            started_ms: self.started_at.timestamp_millis(),
            event_id: self.event_id.as_str().to_owned(),
            replay_count: self.replay_count,
            attempt: self.attempt,
            takeover: self.takeover,
        }
    }

    /// The entry as one line of an endpoint log item: tab-separated, no endpoint (the
    /// item's key holds it). Event ids, outcomes and error classes never hold a tab or a
    /// line break; the response excerpt, last and only when there is one, has them
    /// replaced.
    pub fn to_line(&self) -> String {
        let class = self
            .error_class
            .and_then(|c| serde_json::to_value(c).ok())
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "-".into());
        let mut line = format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.event_id,
            self.replay_count,
            self.attempt,
            self.takeover,
            self.started_at.timestamp_millis(),
            self.latency_ms,
            self.status.map_or_else(|| "-".into(), |s| s.to_string()),
            self.outcome,
            class
        );
        if let Some(excerpt) = self.response_excerpt.as_deref().and_then(log_excerpt) {
            line.push('\t');
            line.push_str(&excerpt);
        }
        line
    }

    /// Reads a line written by [`Self::to_line`]; `None` when it is not one.
    pub fn from_line(endpoint_id: &EndpointId, line: &str) -> Option<Self> {
        // Nine fields, and a tenth (the excerpt) when there is one; lines written before
        // it existed have nine.
        let f: Vec<&str> = line.splitn(10, '\t').collect();
        let (
            [
                event,
                replay,
                attempt,
                takeover,
                started,
                latency,
                status,
                outcome,
                class,
            ],
            excerpt,
        ) = (f.get(..9)?, f.get(9))
        else {
            return None;
        };
        Some(Self {
            event_id: EventId::new(*event).ok()?,
            endpoint_id: endpoint_id.clone(),
            replay_count: replay.parse().ok()?,
            attempt: attempt.parse().ok()?,
            takeover: takeover.parse().ok()?,
            started_at: DateTime::from_timestamp_millis(started.parse().ok()?)?,
            latency_ms: latency.parse().ok()?,
            status: match *status {
                "-" => None,
                s => Some(s.parse().ok()?),
            },
            outcome: (*outcome).to_owned(),
            error_class: match *class {
                "-" => None,
                c => Some(serde_json::from_value(serde_json::Value::String(c.to_owned())).ok()?),
            },
            response_excerpt: excerpt.map(|x| (*x).to_owned()),
        })
    }
}

/// A place in the endpoint log, newest first: an entry's start (Unix milliseconds), then
/// its event id, replay, attempt and takeover (all descending). A page's cursor is the
/// position of its last entry; the next page starts below it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPosition {
    /// Start of the attempt, Unix milliseconds.
    pub started_ms: i64,
    /// Event id.
    pub event_id: String,
    /// Replay count.
    pub replay_count: u32,
    /// Attempt.
    pub attempt: u32,
    /// Takeover.
    pub takeover: u32,
}

impl LogPosition {
    /// Above every entry that started at `started_ms`: a cursor meaning "that millisecond
    /// and everything older".
    pub fn top_of(started_ms: i64) -> Self {
        Self {
            started_ms,
            // Above any id: ids are `[A-Za-z0-9_-]`, all below `~`.
            event_id: "~".into(),
            replay_count: u32::MAX,
            attempt: u32::MAX,
            takeover: u32::MAX,
        }
    }

    /// The cursor text: `<ms>.<replay>.<attempt>.<takeover>.<event id>` (an event id never
    /// holds a `.`).
    pub fn to_text(&self) -> String {
        format!(
            "{}.{}.{}.{}.{}",
            self.started_ms, self.replay_count, self.attempt, self.takeover, self.event_id
        )
    }

    /// Reads [`Self::to_text`]; `None` for anything else.
    pub fn from_text(text: &str) -> Option<Self> {
        let mut parts = text.splitn(5, '.');
        let started_ms = parts.next()?.parse().ok()?;
        let replay_count = parts.next()?.parse().ok()?;
        let attempt = parts.next()?.parse().ok()?;
        let takeover = parts.next()?.parse().ok()?;
        let event_id = parts.next()?;
        if event_id != "~" {
            EventId::new(event_id).ok()?;
        }
        Some(Self {
            started_ms,
            event_id: event_id.to_owned(),
            replay_count,
            attempt,
            takeover,
        })
    }
}

/// What to read from one endpoint's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointLogQuery {
    /// The endpoint. The caller has checked that the asking tenant owns it: the log is
    /// keyed by endpoint id alone (ids are generated, `ep_` and a UUIDv7, never reused).
    pub endpoint_id: EndpointId,
    /// Attempts that started at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Attempts that started before this time (exclusive).
    pub until: Option<DateTime<Utc>>,
    /// Only attempts with this kind of outcome.
    pub outcome: Option<OutcomeFilter>,
    /// Most entries returned, 1..=[`MAX_LOG_PAGE`].
    pub limit: usize,
    /// Only entries below this position (the previous page's cursor).
    pub before: Option<LogPosition>,
}

impl EndpointLogQuery {
    /// Latest log item key (Unix milliseconds, inclusive) that can hold an entry of this
    /// query among items of [`LOG_ITEM_SPAN_MS`], `None` for no bound.
    pub fn newest_item_ms(&self) -> Option<i64> {
        self.newest_item_ms_within(LOG_ITEM_SPAN_MS)
    }

    /// The same among items whose attempts start at most `span_ms` apart
    /// ([`SPREAD_LOG_ITEM_SPAN_MS`] for the log's shards).
    pub fn newest_item_ms_within(&self, span_ms: i64) -> Option<i64> {
        let until = self.until.map(|t| t.timestamp_millis() - 1);
        let before = self.before.as_ref().map(|p| p.started_ms);
        let bound = match (until, before) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        bound.map(|b| b.saturating_add(span_ms))
    }

    /// Oldest log item key (Unix milliseconds, inclusive) that can hold an entry of this
    /// query: an item's key is its latest start, never before any of its entries.
    pub fn oldest_item_ms(&self) -> Option<i64> {
        self.since.map(|t| t.timestamp_millis())
    }

    fn admits(&self, e: &EndpointLogEntry) -> bool {
        self.since.is_none_or(|t| e.started_at >= t)
            && self.until.is_none_or(|t| e.started_at < t)
            && self.outcome.is_none_or(|o| o.matches(&e.outcome))
            && self.before.as_ref().is_none_or(|b| e.position() < *b)
    }
}

/// One page of an endpoint's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointLogPage {
    /// Entries, newest first.
    pub entries: Vec<EndpointLogEntry>,
    /// Where the next page starts, `None` when this was the last.
    pub next: Option<LogPosition>,
}

/// Turns endpoint log items, read newest first (by their key, the latest start they hold),
/// into one page of entries, newest first. An entry is final once an item older than it
/// has been read: every item that can hold a newer entry has been seen then.
#[derive(Debug)]
pub struct LogPager {
    query: EndpointLogQuery,
    waiting: Vec<EndpointLogEntry>,
    out: Vec<EndpointLogEntry>,
    last_item_ms: Option<i64>,
}

impl LogPager {
    /// A pager for `query` (its limit clamped to 1..=[`MAX_LOG_PAGE`]).
    pub fn new(mut query: EndpointLogQuery) -> Self {
        query.limit = query.limit.clamp(1, MAX_LOG_PAGE);
        Self {
            query,
            waiting: Vec::new(),
            out: Vec::new(),
            last_item_ms: None,
        }
    }

    /// Adds the next item (key `item_ms`, no newer than the previous one). Returns true
    /// when the page is full: read no more.
    pub fn push(&mut self, item_ms: i64, entries: Vec<EndpointLogEntry>) -> bool {
        self.last_item_ms = Some(item_ms);
        let query = &self.query;
        self.waiting
            .extend(entries.into_iter().filter(|e| query.admits(e)));
        // Newer than this item's key: no later item can hold one as new.
        self.release(|e| e.started_at.timestamp_millis() > item_ms);
        self.out.len() >= self.query.limit
    }

    fn release(&mut self, is_final: impl Fn(&EndpointLogEntry) -> bool) {
        let (mut ready, rest): (Vec<_>, Vec<_>) = self.waiting.drain(..).partition(is_final);
        self.waiting = rest;
        ready.sort_by_key(|e| std::cmp::Reverse(e.position()));
        let room = self.query.limit - self.out.len().min(self.query.limit);
        let mut ready = ready.into_iter();
        self.out.extend(ready.by_ref().take(room));
        // Final but no room: they come again on the next page (below the cursor).
        self.waiting.extend(ready);
    }

    /// The page. `exhausted`: every item the query can need was pushed; otherwise the
    /// reader stopped early (page full, or its read budget spent) and the page ends where
    /// everything above is final.
    pub fn finish(mut self, exhausted: bool) -> EndpointLogPage {
        if exhausted {
            self.release(|_| true);
            let more = !self.waiting.is_empty();
            let next = more
                .then(|| self.out.last().map(EndpointLogEntry::position))
                .flatten();
            return EndpointLogPage {
                entries: self.out,
                next,
            };
        }
        let next = if self.out.len() >= self.query.limit {
            self.out.last().map(EndpointLogEntry::position)
        } else {
            // The read budget ran out: every entry above the last item read's key is out;
            // the next page starts with that millisecond, never above this page's own
            // start (entries there were on earlier pages: a reader that spent its budget
            // among the items above its cursor, which hold older entries too, must not
            // send them again).
            let top = self.last_item_ms.map(LogPosition::top_of);
            match (top, self.query.before.clone()) {
                (Some(t), Some(b)) => Some(t.min(b)),
                (t, b) => t.or(b),
            }
        };
        EndpointLogPage {
            entries: self.out,
            next,
        }
    }
}

/// An (event, endpoint) pair as the ledger holds it: its claim and, once finished, how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairState {
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// How the latest claimed attempt ended; `None` while it is being made (claimed, not
    /// finished).
    pub state: Option<DeliveryState>,
    /// Replay count of the latest claimed attempt.
    pub replay_count: u32,
    /// Its attempt number.
    pub attempt: u32,
    /// When the pair was delivered, if it was (by any budget).
    pub delivered_at: Option<DateTime<Utc>>,
    /// Where the ledger keeps the pair's items: a new message of the pair (a manual
    /// resend) is written in the same layout, so its claim meets the pair's earlier ones.
    #[serde(default)]
    pub ledger: crate::spread::LedgerLayout,
}

impl PairState {
    /// The replay count a manual resend of this pair takes: one above the latest claim's,
    /// so its claim outranks every earlier message of the pair.
    pub fn next_replay_count(&self) -> u32 {
        self.replay_count.saturating_add(1)
    }

    /// Of two state items of one pair (one in each ledger layout: only a relay retried
    /// across the upgrade makes both), the one that speaks for the pair: a delivered one
    /// (delivered wins), else the later claim.
    pub fn prevailing(self, other: Self) -> Self {
        let rank = |s: &Self| {
            (
                s.delivered_at.is_some(),
                (u64::from(s.replay_count) << 32) | u64::from(s.attempt),
            )
        };
        if rank(&other) > rank(&self) {
            other
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(event: &str, ms: i64, outcome: &str) -> EndpointLogEntry {
        EndpointLogEntry {
            event_id: EventId::new(event).unwrap(),
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            replay_count: 0,
            attempt: 1,
            takeover: 0,
            started_at: DateTime::from_timestamp_millis(ms).unwrap(),
            latency_ms: 12,
            status: (outcome == "delivered").then_some(200),
            error_class: (outcome != "delivered").then_some(ErrorClass::Timeout),
            outcome: outcome.into(),
            response_excerpt: None,
        }
    }

    fn query(limit: usize) -> EndpointLogQuery {
        EndpointLogQuery {
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            since: None,
            until: None,
            outcome: None,
            limit,
            before: None,
        }
    }

    #[test]
    fn lines_round_trip() {
        for e in [
            entry("evt_a", 1_733_000_000_123, "delivered"),
            entry("evt_b", 5, "dead_letter:gone"),
        ] {
            let back = EndpointLogEntry::from_line(&e.endpoint_id, &e.to_line()).unwrap();
            assert_eq!(back, e);
        }
        assert!(EndpointLogEntry::from_line(&EndpointId::new("ep_1").unwrap(), "x\ty").is_none());
        let p = entry("evt_a", 7, "retry").position();
        assert_eq!(LogPosition::from_text(&p.to_text()), Some(p));
        assert!(LogPosition::from_text("1.2.3").is_none());
        assert!(LogPosition::from_text("1.2.3.4.evt a").is_none());
    }

    /// Overlapping batches (items keyed by their latest start) come out newest first, each
    /// entry once, across pages.
    #[test]
    fn overlapping_items_page_newest_first_each_entry_once() {
        // Newest item first. Item keys are their entries' latest start.
        let items = vec![
            (
                1000,
                vec![
                    entry("evt_5", 1000, "delivered"),
                    entry("evt_2", 400, "retry"),
                ],
            ),
            (
                900,
                vec![
                    entry("evt_4", 900, "delivered"),
                    entry("evt_3", 500, "delivered"),
                ],
            ),
            (300, vec![entry("evt_1", 300, "delivered")]),
        ];
        let mut seen = Vec::new();
        let mut before = None;
        for _ in 0..10 {
            let mut pager = LogPager::new(EndpointLogQuery {
                before: before.clone(),
                ..query(2)
            });
            let mut full = false;
            for (ms, es) in &items {
                if pager.push(*ms, es.clone()) {
                    full = true;
                    break;
                }
            }
            let page = pager.finish(!full);
            seen.extend(page.entries.iter().map(|e| e.event_id.to_string()));
            match page.next {
                Some(n) => before = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, ["evt_5", "evt_4", "evt_3", "evt_2", "evt_1"]);
    }

    #[test]
    fn filters_and_window() {
        let mut pager = LogPager::new(EndpointLogQuery {
            outcome: Some(OutcomeFilter::Failed),
            since: DateTime::from_timestamp_millis(200),
            until: DateTime::from_timestamp_millis(900),
            ..query(10)
        });
        pager.push(
            1000,
            vec![
                entry("evt_a", 950, "retry"),
                entry("evt_b", 800, "dead_letter:exhausted"),
                entry("evt_c", 700, "delivered"),
                entry("evt_d", 100, "retry"),
                entry("evt_e", 200, "abandoned"),
            ],
        );
        let page = pager.finish(true);
        let ids: Vec<_> = page.entries.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(ids, ["evt_b", "evt_e"]);
        assert_eq!(page.next, None);
        assert!(OutcomeFilter::DeadLetter.matches("dead_letter:gone"));
        assert!(!OutcomeFilter::Retry.matches("delivered"));
    }

    /// A reader that stops before the end (its read budget) ends the page where everything
    /// above is final; the next page starts at that millisecond and loses nothing.
    #[test]
    fn a_budget_stop_loses_nothing() {
        let mut pager = LogPager::new(query(10));
        pager.push(
            2000,
            vec![
                entry("evt_c", 2000, "delivered"),
                entry("evt_b", 1500, "delivered"),
            ],
        );
        pager.push(1000, vec![entry("evt_a", 1000, "delivered")]);
        let page = pager.finish(false);
        let ids: Vec<_> = page.entries.iter().map(|e| e.event_id.as_str()).collect();
        // evt_a started at the last item's key: an unread item may share that key.
        assert_eq!(ids, ["evt_c", "evt_b"]);
        let next = page.next.unwrap();
        assert_eq!(next, LogPosition::top_of(1000));
        let q = EndpointLogQuery {
            before: Some(next),
            ..query(10)
        };
        assert_eq!(q.newest_item_ms(), Some(1000 + LOG_ITEM_SPAN_MS));
        let mut pager = LogPager::new(q);
        pager.push(
            2000,
            vec![
                entry("evt_c", 2000, "delivered"),
                entry("evt_b", 1500, "delivered"),
            ],
        );
        pager.push(1000, vec![entry("evt_a", 1000, "delivered")]);
        pager.push(1000, vec![entry("evt_0", 1000, "retry")]);
        let page = pager.finish(true);
        let ids: Vec<_> = page.entries.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(ids, ["evt_a", "evt_0"]);
        assert_eq!(page.next, None);
    }

    #[test]
    fn a_budget_spent_above_the_cursor_never_moves_the_cursor_back_up() {
        // Items just above the cursor hold older attempts: a reader that stops among them
        // resumes at its own cursor, never above it (its entries were on earlier pages).
        let before = LogPosition::top_of(10_000);
        let mut pager = LogPager::new(EndpointLogQuery {
            before: Some(before.clone()),
            ..query(5)
        });
        pager.push(12_000, vec![entry("evt_x", 11_000, "delivered")]);
        let page = pager.finish(false);
        assert!(page.entries.is_empty());
        assert_eq!(page.next, Some(before));
        // Below the cursor it moves on.
        let mut pager = LogPager::new(EndpointLogQuery {
            before: Some(LogPosition::top_of(10_000)),
            ..query(5)
        });
        pager.push(9_000, vec![entry("evt_y", 9_000, "delivered")]);
        assert_eq!(pager.finish(false).next, Some(LogPosition::top_of(9_000)));
        let q = query(5);
        assert_eq!(
            EndpointLogQuery {
                until: DateTime::from_timestamp_millis(20_001),
                ..q
            }
            .newest_item_ms_within(SPREAD_LOG_ITEM_SPAN_MS),
            Some(25_000)
        );
    }

    #[test]
    fn item_key_bounds() {
        let q = EndpointLogQuery {
            since: DateTime::from_timestamp_millis(5_000),
            until: DateTime::from_timestamp_millis(9_000),
            ..query(5)
        };
        assert_eq!(q.oldest_item_ms(), Some(5_000));
        assert_eq!(q.newest_item_ms(), Some(8_999 + LOG_ITEM_SPAN_MS));
        assert_eq!(query(5).newest_item_ms(), None);
    }

    #[test]
    fn a_resend_outranks_the_pair() {
        let s = PairState {
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            state: Some(DeliveryState::Delivered),
            replay_count: 2,
            attempt: 1,
            delivered_at: None,
            ledger: crate::spread::LedgerLayout::Sharded { shards: 1 },
        };
        assert_eq!(s.next_replay_count(), 3);
    }

    #[test]
    fn of_two_layouts_delivered_wins_then_the_later_claim() {
        let s = |replay, attempt, delivered: bool, ledger| PairState {
            endpoint_id: EndpointId::new("ep_1").unwrap(),
            state: None,
            replay_count: replay,
            attempt,
            delivered_at: delivered.then(Utc::now),
            ledger,
        };
        use crate::spread::LedgerLayout::{Sharded, Unsharded};
        let old_delivered = s(0, 1, true, Unsharded);
        let new_claim = s(0, 3, false, Sharded { shards: 1 });
        assert_eq!(
            old_delivered.clone().prevailing(new_claim.clone()),
            old_delivered
        );
        assert_eq!(
            new_claim.clone().prevailing(old_delivered.clone()),
            old_delivered
        );
        let later = s(1, 1, false, Unsharded);
        assert_eq!(new_claim.clone().prevailing(later.clone()), later);
    }

    #[test]
    fn a_failed_attempts_line_keeps_the_start_of_the_answer_on_one_line() {
        let ep = EndpointId::new("ep_1").unwrap();
        let mut record = AttemptRecord {
            event_id: EventId::new("evt_1").unwrap(),
            endpoint_id: ep.clone(),
            replay_count: 0,
            attempt: 2,
            takeover: 0,
            started_at: DateTime::from_timestamp_millis(1_764_547_200_000).unwrap(),
            latency_ms: 40,
            status: Some(503),
            error_class: None,
            error: Some("http status 503".into()),
            location: None,
            response_excerpt: Some(format!("line one\tcol\r\nline two {}", "é".repeat(400))),
            excerpt_truncated: true,
            outcome: "retry".into(),
            next_wait_seconds: Some(300),
        };
        let entry = EndpointLogEntry::of(&record);
        let excerpt = entry.response_excerpt.clone().expect("an excerpt");
        assert!(excerpt.starts_with("line one col  line two é"), "{excerpt}");
        assert!(excerpt.len() <= LOG_EXCERPT_BYTES, "{}", excerpt.len());
        let line = entry.to_line();
        assert_eq!(line.lines().count(), 1);
        assert_eq!(EndpointLogEntry::from_line(&ep, &line), Some(entry.clone()));
        // A line written before the excerpt existed (nine fields) still reads.
        let old = line.rsplit_once('\t').unwrap().0;
        let read = EndpointLogEntry::from_line(&ep, old).expect("an old line");
        assert_eq!(read.response_excerpt, None);
        assert_eq!(read.outcome, "retry");
        // A delivered attempt keeps no excerpt, nor does an empty answer.
        record.outcome = "delivered".into();
        assert_eq!(EndpointLogEntry::of(&record).response_excerpt, None);
        record.outcome = "retry".into();
        record.response_excerpt = Some(" \n ".into());
        assert_eq!(EndpointLogEntry::of(&record).response_excerpt, None);
    }
}
