//! [`InMemoryHealthStore`]: endpoint health records in memory, with the semantics of the
//! DynamoDB store (`tern_aws::DynamoHealthStore`): a batch's counts are added atomically
//! (so concurrent batches lose none), and every [`HealthChange`] is applied only when the
//! condition the DynamoDB write carries holds, so of concurrent senders exactly one opens
//! a circuit, claims a probe or reports a change. Times are kept as DynamoDB keeps them
//! (Unix milliseconds; the rate-limit schedule in microseconds), so a probe claim
//! compares what a sender read exactly as the conditional write does. One record per
//! endpoint, keyed as the table is (`<tenant id>#<endpoint id>`, `tern_aws::health`); a
//! tenant's listing is the tenant index's.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::health::{
    Bucket, EndpointHealth, HealthChange, HealthDelta, HealthStore, LONG_BUCKET_SECONDS,
    RECENT_SECONDS, bucket_start,
};
use crate::ids::{EndpointId, TenantId};
use crate::ports::PortError;
use crate::rate_limit::{SlotAnswer, SlotRequest};

type Key = (TenantId, EndpointId);

/// Health records in memory (see the module doc).
#[derive(Debug, Default)]
pub struct InMemoryHealthStore {
    records: Mutex<HashMap<Key, EndpointHealth>>,
    writes: Mutex<u64>,
}

fn ms(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

fn same_ms(a: Option<DateTime<Utc>>, b: DateTime<Utc>) -> bool {
    a.is_some_and(|a| a.timestamp_millis() == b.timestamp_millis())
}

fn add_to(buckets: &mut Vec<Bucket>, start: i64, attempts: u64, successes: u64) {
    match buckets.iter_mut().find(|b| b.start == start) {
        Some(b) => {
            b.attempts += attempts;
            b.successes += successes;
        }
        None => buckets.push(Bucket {
            start,
            attempts,
            successes,
        }),
    }
}

impl InMemoryHealthStore {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, EndpointHealth>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count_write(&self) {
        *self.writes.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    /// Writes made so far (batch records, applied and refused changes, slot requests):
    /// what the DynamoDB store would bill as write requests.
    pub fn writes(&self) -> u64 {
        *self.writes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl HealthStore for InMemoryHealthStore {
    async fn get(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
    ) -> Result<Option<EndpointHealth>, PortError> {
        Ok(self
            .lock()
            .get(&(tenant.clone(), endpoint.clone()))
            .cloned())
    }

    async fn list(&self, tenant: Option<&TenantId>) -> Result<Vec<EndpointHealth>, PortError> {
        Ok(self
            .lock()
            .values()
            .filter(|h| tenant.is_none_or(|t| &h.tenant_id == t))
            .cloned()
            .collect())
    }

    async fn record(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        delta: &HealthDelta,
        bucket_seconds: u64,
        previous: Option<&EndpointHealth>,
    ) -> Result<EndpointHealth, PortError> {
        self.count_write();
        let mut records = self.lock();
        let h = records
            .entry((tenant.clone(), endpoint.clone()))
            .or_insert_with(|| {
                EndpointHealth::empty(tenant.clone(), endpoint.clone(), bucket_seconds)
            });
        let window = bucket_start(delta.at, bucket_seconds);
        let long = bucket_start(delta.at, LONG_BUCKET_SECONDS);
        // The buckets the writer last saw leave the window: removed (not the ones
        // written now), as the DynamoDB write's REMOVE clause does.
        if let Some(p) = previous {
            let (old, old_long) = p.expired(delta.at);
            h.buckets
                .retain(|b| b.start == window || !old.contains(&b.start));
            h.hourly
                .retain(|b| b.start == long || !old_long.contains(&b.start));
            let stale = p.expired_seconds(delta.at);
            h.recent_successes.retain(|(s, _)| {
                !stale.contains(s) || delta.success_seconds.iter().any(|(d, _)| d == s)
            });
        }
        add_to(&mut h.buckets, window, delta.attempts, delta.successes);
        add_to(&mut h.hourly, long, delta.attempts, delta.successes);
        let oldest = delta.at.timestamp() - RECENT_SECONDS + 1;
        for (second, n) in delta.success_seconds.iter().filter(|(s, _)| *s >= oldest) {
            match h.recent_successes.iter_mut().find(|(s, _)| s == second) {
                Some((_, c)) => *c += n,
                None => h.recent_successes.push((*second, *n)),
            }
        }
        h.bucket_seconds = bucket_seconds;
        if delta.any_success() {
            h.consecutive_failures = delta.trailing_failures;
        } else {
            h.consecutive_failures += delta.trailing_failures;
        }
        if let Some(t) = delta.last_success_at {
            h.last_success_at = Some(ms(t));
        }
        match (delta.any_success(), delta.failing_since) {
            (true, since) => h.failing_since = since.map(ms),
            (false, Some(t)) => {
                h.failing_since.get_or_insert(ms(t));
            }
            (false, None) => {}
        }
        if let Some(f) = &delta.last_failure {
            let mut f = f.clone();
            f.at = ms(f.at);
            h.last_failure = Some(f);
        }
        Ok(h.clone())
    }

    async fn apply(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        change: &HealthChange,
        now: DateTime<Utc>,
    ) -> Result<bool, PortError> {
        self.count_write();
        let now = ms(now);
        let mut records = self.lock();
        let key = (tenant.clone(), endpoint.clone());
        if let HealthChange::Pause { until, pauses } = change {
            // The only change that may create the record (its condition does not ask for
            // one, so the DynamoDB write creates the item).
            let h = records
                .entry(key)
                .or_insert_with(|| EndpointHealth::empty(tenant.clone(), endpoint.clone(), 600));
            if h.paused_until.is_some_and(|p| p >= ms(*until)) {
                return Ok(false);
            }
            h.paused_until = Some(ms(*until));
            h.pauses = *pauses;
            return Ok(true);
        }
        let Some(h) = records.get_mut(&key) else {
            return Ok(false);
        };
        let applied = match change {
            HealthChange::Pause { .. } => false,
            HealthChange::Open { next_probe_at } => {
                let ok = h.opened_at.is_none();
                if ok {
                    h.opened_at = Some(now);
                    h.next_probe_at = Some(ms(*next_probe_at));
                }
                ok
            }
            HealthChange::ClaimProbe {
                seen,
                next_probe_at,
            } => {
                let ok = h.opened_at.is_some()
                    && match seen {
                        Some(t) => same_ms(h.next_probe_at, *t),
                        None => h.next_probe_at.is_none(),
                    };
                if ok {
                    h.next_probe_at = Some(ms(*next_probe_at));
                }
                ok
            }
            HealthChange::Close { report } => {
                let ok = h.opened_at.is_some() && h.disabled_at.is_none();
                if ok {
                    h.opened_at = None;
                    h.next_probe_at = None;
                    h.closed_at = Some(now);
                    h.consecutive_failures = 0;
                    h.pending_report = Some(report.clone());
                }
                ok
            }
            HealthChange::Degrade { not_since, report } => {
                let ok =
                    h.disabled_at.is_none() && h.degraded_at.is_none_or(|d| d < ms(*not_since));
                if ok {
                    h.degraded_at = Some(now);
                    h.pending_report = Some(report.clone());
                }
                ok
            }
            HealthChange::Recover { report } => {
                let ok = h.degraded_at.is_some() && h.disabled_at.is_none();
                if ok {
                    h.degraded_at = None;
                    h.pending_report = Some(report.clone());
                }
                ok
            }
            HealthChange::Disable { report } => {
                let ok = h.disabled_at.is_none();
                if ok {
                    h.disabled_at = Some(now);
                    h.pending_report = Some(report.clone());
                }
                ok
            }
            HealthChange::SetPace {
                change,
                seen,
                restart_at,
            } => {
                let ok = match seen {
                    Some(t) => same_ms(h.pace.map(|p| p.changed_at), *t),
                    None => h.pace.is_none(),
                };
                if ok {
                    h.pace = match change {
                        crate::pacing::PaceChange::Set {
                            per_second,
                            slow_start,
                        } => Some(crate::pacing::Pace {
                            per_second: *per_second,
                            changed_at: now,
                            slow_start: *slow_start,
                        }),
                        crate::pacing::PaceChange::Forget => None,
                    };
                    h.rate_tat = Some(micros(*restart_at));
                }
                ok
            }
            HealthChange::MarkBelow => {
                let ok = h.below_since.is_none();
                if ok {
                    h.below_since = Some(now);
                }
                ok
            }
            HealthChange::ClearBelow => h.below_since.take().is_some(),
            HealthChange::DeferReport {
                event,
                seen,
                retry_at,
            } => match h.pending_report.as_mut() {
                Some(r)
                    if r.event == *event && seen.is_none_or(|t| same_ms(Some(r.retry_at), t)) =>
                {
                    r.retry_at = ms(*retry_at);
                    true
                }
                _ => false,
            },
            HealthChange::Reported { event } => {
                let ok = h.pending_report.as_ref().is_some_and(|r| r.event == *event);
                if ok {
                    h.pending_report = None;
                }
                ok
            }
        };
        Ok(applied)
    }

    async fn reserve_slots(
        &self,
        tenant: &TenantId,
        endpoint: &EndpointId,
        request: &SlotRequest,
    ) -> Result<SlotAnswer, PortError> {
        self.count_write();
        let mut records = self.lock();
        let key = (tenant.clone(), endpoint.clone());
        let tat = records.get(&key).and_then(|h| h.rate_tat);
        let (written, answer) = request.apply_to(tat);
        if let Some(t) = written {
            records
                .entry(key)
                .or_insert_with(|| EndpointHealth::empty(tenant.clone(), endpoint.clone(), 600))
                .rate_tat = Some(micros(t));
        }
        Ok(answer)
    }

    async fn reset(&self, tenant: &TenantId, endpoint: &EndpointId) -> Result<(), PortError> {
        self.count_write();
        let mut records = self.lock();
        let key = (tenant.clone(), endpoint.clone());
        let Some(old) = records.remove(&key) else {
            return Ok(());
        };
        // The history stays; everything that decides goes (as the DynamoDB store's reset).
        let mut kept = EndpointHealth::empty(tenant.clone(), endpoint.clone(), old.bucket_seconds);
        kept.hourly = old.hourly;
        kept.last_success_at = old.last_success_at;
        kept.last_failure = old.last_failure;
        kept.pending_report = old.pending_report;
        kept.rate_tat = old.rate_tat.filter(|t| *t > Utc::now());
        records.insert(key, kept);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{HealthSignal, LastFailure};

    fn key() -> (TenantId, EndpointId) {
        (
            TenantId::new("tnt_b").unwrap(),
            EndpointId::new("ep_b").unwrap(),
        )
    }

    fn failures(n: usize, at: DateTime<Utc>) -> HealthDelta {
        let mut d = HealthDelta::new(at);
        for _ in 0..n {
            d.add(HealthSignal::Failure(LastFailure {
                at,
                status: Some(503),
                error_class: None,
                error: None,
                excerpt: None,
            }));
        }
        d
    }

    #[tokio::test]
    async fn counts_add_up_across_batches_and_a_success_resets_the_run() {
        let store = InMemoryHealthStore::default();
        let (t, e) = key();
        let now = Utc::now();
        store
            .record(&t, &e, &failures(3, now), 600, None)
            .await
            .unwrap();
        let after = store
            .record(&t, &e, &failures(2, now), 600, None)
            .await
            .unwrap();
        assert_eq!(after.consecutive_failures, 5);
        assert_eq!(after.window_rate(now).attempts, 5);
        let mut ok = HealthDelta::new(now);
        ok.add(HealthSignal::Success { at: now });
        let after = store.record(&t, &e, &ok, 600, Some(&after)).await.unwrap();
        assert_eq!(after.consecutive_failures, 0);
        assert_eq!(after.window_rate(now).successes, 1);
        assert_eq!(after.failing_since, None);
    }

    #[tokio::test]
    async fn of_concurrent_senders_one_opens_the_circuit_and_one_claims_each_probe() {
        let store = InMemoryHealthStore::default();
        let (t, e) = key();
        let now = Utc::now();
        // No record yet: nothing to open.
        let open = HealthChange::Open {
            next_probe_at: now + chrono::Duration::seconds(60),
        };
        assert_eq!(store.apply(&t, &e, &open, now).await, Ok(false));
        store
            .record(&t, &e, &failures(5, now), 600, None)
            .await
            .unwrap();
        assert_eq!(store.apply(&t, &e, &open, now).await, Ok(true));
        assert_eq!(store.apply(&t, &e, &open, now).await, Ok(false));
        let seen = store.get(&t, &e).await.unwrap().unwrap().next_probe_at;
        let claim = HealthChange::ClaimProbe {
            seen,
            next_probe_at: now + chrono::Duration::seconds(120),
        };
        assert_eq!(store.apply(&t, &e, &claim, now).await, Ok(true));
        // The second sender read the same probe time: refused.
        assert_eq!(store.apply(&t, &e, &claim, now).await, Ok(false));
        // A time read from the sender's own copy (sub-millisecond) matches the stored one.
        let next = now + chrono::Duration::seconds(120);
        let claim = HealthChange::ClaimProbe {
            seen: Some(next),
            next_probe_at: now + chrono::Duration::seconds(180),
        };
        assert_eq!(store.apply(&t, &e, &claim, now).await, Ok(true));
        assert_eq!(store.writes(), 7);
    }
}
