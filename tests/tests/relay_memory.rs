//! The relay's memory stays bounded whatever the fan-out (issue 15 item 5): one event of
//! 256 KiB to 500 endpoints is 125 MiB of delivery message bodies, and the relay must
//! never hold them all. Measured with an allocation counter (this binary's global
//! allocator): the most bytes alive at once while the handler runs, over what was alive
//! before it started. Not a timing: the count is the same on any machine.
//!
//! One test in this file: the counter is process-wide, a second test running beside it
//! would add its own allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use serde_json::json;
use tern_core::ports::{EndpointStore as _, MessageQueue, PortError, QueueEntry};
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::relay::RelayDeps;
use tern_tests::fakes::{MemEndpoints, MemQueue};

/// Counts the bytes alive and their peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// only arithmetic beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now =
                LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let now = LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            ) + new_size as isize
                - layout.size() as isize;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A delivery queue whose calls take 1 ms and keep nothing.
struct NullQueue;

#[async_trait]
impl MessageQueue for NullQueue {
    async fn send_batch(
        &self,
        entries: &[QueueEntry],
    ) -> Result<Vec<Result<(), PortError>>, PortError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(vec![Ok(()); entries.len()])
    }
    async fn send(&self, _entry: &QueueEntry) -> Result<(), PortError> {
        Ok(())
    }
}

const ENDPOINTS: usize = 500;
const PAYLOAD: usize = 256 * 1024;
const MIB: f64 = 1024.0 * 1024.0;

/// The most bytes the relay may hold above its input: 32 MiB, a quarter of the bodies'
/// 125 MiB. Its bound is [`tern_handlers::relay::MAX_CONCURRENT_SENDS`] calls of at most
/// 1 MiB of entries each (the SQS batch limit), a few copies of the one event, and the
/// fakes' bookkeeping.
const BOUND: usize = 32 << 20;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn one_event_to_500_endpoints_never_holds_every_body() {
    let store = Arc::new(MemEndpoints::default());
    for i in 0..ENDPOINTS {
        store
            .put(&Endpoint::new(
                EndpointId::new(format!("ep_{i:04}")).unwrap(),
                TenantId::new("tnt_a").unwrap(),
                "https://receiver.test/hook",
                vec!["*".into()],
                Secret::generate(),
                Utc::now(),
            ))
            .await
            .unwrap();
    }
    let deps = RelayDeps {
        endpoints: store,
        delivery_queue: Arc::new(NullQueue),
        failure_queue: Arc::new(MemQueue::default()),
        max_payload_bytes: PAYLOAD,
        checkpoints: None,
    };
    // A JSON payload of exactly 256 KiB, the default limit.
    let payload = format!("{{\"d\":\"{}\"}}", "x".repeat(PAYLOAD - 8));
    assert_eq!(payload.len(), PAYLOAD);
    let event = json!({"Records": [{
        "eventID": "ev1", "eventName": "INSERT", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {
            "Keys": {"event_id": {"S": "evt_big"}},
            "SequenceNumber": "000000000000000001000",
            "StreamViewType": "NEW_IMAGE",
            "NewImage": {
                "event_id": {"S": "evt_big"},
                "tern_record": {"S": "outbox_event"},
                "schema_version": {"N": "1"},
                "event_type": {"S": "order.paid"},
                "tenant_id": {"S": "tnt_a"},
                "created_at": {"S": "2026-01-01T00:00:00.000Z"},
                "payload": {"S": payload},
                "expires_at": {"N": "1767830400"}
            }
        }
    }]});
    drop(payload);
    let metrics = Metrics::new("Tern", MetricsSink::Discard);

    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let (response, outcomes) = tern_handlers::relay::handle_value(&deps, event, &metrics).await;
    let held = (PEAK.load(Ordering::SeqCst) - before).max(0) as usize;

    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(
        outcomes,
        vec![tern_handlers::relay::RecordOutcome::Relayed {
            deliveries: ENDPOINTS,
            parked: 0
        }]
    );
    let bodies = ENDPOINTS * PAYLOAD;
    eprintln!(
        "peak held by the relay: {:.1} MiB for {:.0} MiB of bodies (bound {:.0} MiB)",
        held as f64 / MIB,
        bodies as f64 / MIB,
        BOUND as f64 / MIB
    );
    assert!(
        held <= BOUND,
        "the relay held {:.1} MiB at once for {:.0} MiB of bodies: more than {:.0} MiB",
        held as f64 / MIB,
        bodies as f64 / MIB,
        BOUND as f64 / MIB
    );
}
