//! A delivered pair stays delivered (issue 26): every write that ends an (event,
//! endpoint) pair is conditional on the pair not having ended already, delivered winning
//! over everything, and a copy that finds its pair delivered is dropped as a duplicate
//! with a row that says so. On moto, through the real ledger (`tern_aws::DynamoLedger`).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use proptest::prelude::*;
use tern_core::DeliveryMessage;
use tern_core::health::{HealthChange, HealthPolicy, HealthStore};
use tern_core::ports::{Claim, DeliveryState, OUTCOME_DUPLICATE};
use tern_handlers::health::CircuitBreaker;
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_local::LocalOptions;
use tern_tests::*;

/// A copy of a delivery that was held back (deferred by its endpoint's pause) comes back
/// after its pair was delivered, and past its retry window: it is dropped as a duplicate,
/// nothing reaches the DLQ, and the pair stays delivered. Before: it went down the
/// dead-letter path unclaimed, its finish overwrote `delivered` with `dead_lettered`, and
/// a DLQ message invited a replay to POST the event again (78 pairs in the soak).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_copy_past_its_window_leaves_a_delivered_pair_delivered() {
    let options = LocalOptions {
        lookup: Some(no_dns()),
        ..LocalOptions::default()
    };
    let local = deployment_without_pollers("terminal-held", options).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/held", Behavior::Always(Reply::status(200)));
    let ep = add_endpoint(&local, "tnt_held", &receiver.url("/held"), &["*"], None).await;
    let mut event = tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", "tnt_held", r#"{"h":1}"#)
        .unwrap()
        .event;
    // Created three days ago: the default retry window (about 1.5 days) is over.
    event.created_at = Utc::now() - chrono::Duration::days(3);
    let message = DeliveryMessage::first(event.clone(), ep.id.clone());

    // The first copy is delivered.
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let (_, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[message.to_body()]), &metrics)
            .await;
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::Delivered { attempt: 1 }),
        "{results:?}"
    );

    // The receiver then pushed back (on another delivery): the endpoint is paused, and
    // the copy that was held back earlier returns to a gate that holds it again.
    let health = Arc::new(tern_aws::DynamoHealthStore::new(
        local.dynamodb(),
        &local.resources.health_table,
    ));
    let pause = HealthChange::Pause {
        until: Utc::now() + chrono::Duration::minutes(10),
        pauses: 1,
    };
    assert!(
        health
            .apply(&ep.tenant_id, &ep.id, &pause, Utc::now())
            .await
            .unwrap()
    );
    let s = &local.sender;
    let fresh = SenderDeps {
        endpoints: s.endpoints.clone(),
        ledger: s.ledger.clone(),
        delivery_queue: s.delivery_queue.clone(),
        dlq: s.dlq.clone(),
        scheduler: s.scheduler.clone(),
        client: s.client.clone(),
        policy: s.policy.clone(),
        breaker: Some(Arc::new(CircuitBreaker::new(
            health,
            Arc::new(tern_core::operational::FanOut(Vec::new())),
            HealthPolicy::default(),
            1.0,
            Duration::from_secs(5),
        ))),
    };
    let held = DeliveryMessage {
        not_before: Some(Utc::now() - chrono::Duration::seconds(1)),
        listed_waiting: true,
        ..message.clone()
    };
    let (response, results) =
        tern_handlers::sender::handle(&fresh, sqs_event(&[held.to_body()]), &metrics).await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::Duplicate(Claim::AlreadyDelivered)),
        "{results:?}"
    );

    assert!(
        dead_letters(&local).await.is_empty(),
        "nothing dead-lettered"
    );
    let pairs = local
        .sender
        .ledger
        .pair_states(&event.tenant_id, &event.id)
        .await
        .unwrap();
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    assert_eq!(pairs[0].state, Some(DeliveryState::Delivered), "{pairs:?}");
    assert!(pairs[0].delivered_at.is_some(), "{pairs:?}");
    assert_eq!(receiver.requests("/held").len(), 1, "POSTed once");
    let rows = attempts_of(&local, &event.id, &ep).await;
    assert!(
        rows.iter()
            .any(|r| r.outcome == OUTCOME_DUPLICATE && r.status.is_none()),
        "the attempt log says a copy was dropped: {rows:?}"
    );
}

/// A sender that dead-lettered a delivery past its retry window and stopped before its
/// finish leaves a DLQ message and a claim that lapses; the message's redelivery takes the
/// claim over. Past the window, the takeover repeats the dead letter and POSTs nothing, so
/// the pair is not delivered while the DLQ holds it. Before: it was POSTed and delivered
/// (2 pairs in a soak of 2,940, a sender restarted between the DLQ message and the finish).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_past_its_window_repeats_the_dead_letter_and_posts_nothing() {
    let options = LocalOptions {
        lookup: Some(no_dns()),
        ..LocalOptions::default()
    };
    let local = deployment_without_pollers("terminal-takeover", options).await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/late", Behavior::Always(Reply::status(200)));
    let ep = add_endpoint(&local, "tnt_late", &receiver.url("/late"), &["*"], None).await;
    let mut event = tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", "tnt_late", r#"{"l":1}"#)
        .unwrap()
        .event;
    // Three days old: past the default retry window (about 1.5 days).
    event.created_at = Utc::now() - chrono::Duration::days(3);
    let message = DeliveryMessage::first(event.clone(), ep.id.clone());
    // The stopped sender's claim, its lease run out.
    let claim = local
        .sender
        .ledger
        .claim(&message, Utc::now() - chrono::Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(claim, Claim::Granted);

    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let (response, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[message.to_body()]), &metrics)
            .await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert!(
        matches!(
            results[0].1,
            Ok(MessageOutcome::DeadLettered {
                reason: tern_core::DeadLetterReason::Exhausted,
                ..
            })
        ),
        "{results:?}"
    );
    assert!(receiver.requests("/late").is_empty(), "nothing POSTed");
    assert_eq!(dead_letters(&local).await.len(), 1);
    let pairs = local
        .sender
        .ledger
        .pair_states(&event.tenant_id, &event.id)
        .await
        .unwrap();
    assert_eq!(
        pairs[0].state,
        Some(DeliveryState::DeadLettered),
        "{pairs:?}"
    );
    assert!(pairs[0].delivered_at.is_none(), "{pairs:?}");
}

/// A dead letter ends its budget: once an attempt of a pair was dead-lettered, a later
/// attempt of the same budget (a retry its crashed holder had queued before the takeover
/// dead-lettered it) is refused, so nothing delivers a pair the DLQ holds; a replay (the
/// next budget) claims it. Before: the later attempt was granted, POSTed and delivered
/// (4 pairs in a soak of 2,940, attempt 2 delivered after attempt 1's dead letter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_ends_its_budget_and_only_a_replay_claims_the_pair_again() {
    let local = deployment_without_pollers("terminal-budget", LocalOptions::default()).await;
    let ledger = local.sender.ledger.clone();
    let event = tern_outbox::OutboxWriter::new("unused")
        .prepare("order.paid", "tnt_budget", r#"{"b":1}"#)
        .unwrap()
        .event;
    let first = DeliveryMessage::first(event.clone(), tern_core::EndpointId::generate());
    let lease = Utc::now() + chrono::Duration::minutes(5);
    assert_eq!(ledger.claim(&first, lease).await.unwrap(), Claim::Granted);
    ledger
        .finish(&first, DeliveryState::DeadLettered)
        .await
        .unwrap();
    let retry = DeliveryMessage {
        attempt: 2,
        ..first.clone()
    };
    assert_eq!(
        ledger.claim(&retry, lease).await.unwrap(),
        Claim::AlreadyClaimed,
        "the dead-lettered budget's next attempt"
    );
    let pairs = ledger
        .pair_states(&event.tenant_id, &event.id)
        .await
        .unwrap();
    assert_eq!(
        pairs[0].state,
        Some(DeliveryState::DeadLettered),
        "{pairs:?}"
    );
    assert_eq!(
        ledger.claim(&first.replayed(), lease).await.unwrap(),
        Claim::Granted,
        "a replay starts the next budget"
    );
}

/// One step a copy of a pair's message can take against the ledger, in any order another
/// copy's steps interleave with it: claimed (with a lease that runs on, or one that has
/// already run out, as a crashed holder leaves it), finished with a state, or released
/// unsent (held back, pushed back, our failure).
#[derive(Debug, Clone, Copy)]
enum Step {
    Claim { copy: usize, lease_over: bool },
    Finish { copy: usize, state: DeliveryState },
    Release { copy: usize },
}

/// The copies of one pair's messages: attempt 1, attempt 2 (a retry), and attempt 1 of a
/// replayed budget.
fn copies(first: &DeliveryMessage) -> [DeliveryMessage; 3] {
    let retry = DeliveryMessage {
        attempt: 2,
        ..first.clone()
    };
    [first.clone(), retry, first.replayed()]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let state = prop_oneof![
        Just(DeliveryState::Delivered),
        Just(DeliveryState::Retrying),
        Just(DeliveryState::DeadLettered),
    ];
    let step = prop_oneof![
        (0usize..3, any::<bool>()).prop_map(|(copy, lease_over)| Step::Claim { copy, lease_over }),
        (0usize..3, state).prop_map(|(copy, state)| Step::Finish { copy, state }),
        (0usize..3).prop_map(|copy| Step::Release { copy }),
    ];
    proptest::collection::vec(step, 1..12)
}

/// Over interleavings of copies (held back and released, retried, replayed, taken over
/// after a lease ran out), once a pair is delivered it never leaves `delivered`: its state
/// and delivery time stay, and every later claim of any copy is refused as already
/// delivered (so nothing is POSTed again). Each case is a new event on the real ledger.
#[test]
fn no_interleaving_of_copies_takes_a_pair_out_of_delivered() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let local = rt.block_on(deployment_without_pollers(
        "terminal-prop",
        LocalOptions::default(),
    ));
    let ledger = local.sender.ledger.clone();
    let endpoint = tern_core::EndpointId::generate();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    });
    runner
        .run(&steps(), |steps| {
            let event = tern_outbox::OutboxWriter::new("unused")
                .prepare("order.paid", "tnt_prop", r#"{"p":1}"#)
                .unwrap()
                .event;
            let copies = copies(&DeliveryMessage::first(event.clone(), endpoint.clone()));
            // The takeover each copy's latest granted claim holds.
            let mut held: [Option<u32>; 3] = [None; 3];
            let mut delivered: Option<chrono::DateTime<Utc>> = None;
            for step in &steps {
                rt.block_on(async {
                    match *step {
                        Step::Claim { copy, lease_over } => {
                            let lease = if lease_over {
                                Utc::now() - chrono::Duration::seconds(1)
                            } else {
                                Utc::now() + chrono::Duration::minutes(5)
                            };
                            let claim = ledger.claim(&copies[copy], lease).await.unwrap();
                            if delivered.is_some() {
                                assert_eq!(claim, Claim::AlreadyDelivered, "{steps:?}");
                            }
                            if let Some(t) = claim.granted_takeover() {
                                held[copy] = Some(t);
                            }
                        }
                        Step::Finish { copy, state } => {
                            // Rejected when the copy holds no claim: nothing to mark.
                            let _ = ledger.finish(&copies[copy], state).await;
                        }
                        Step::Release { copy } => {
                            // Rejected when the claim is no longer that try's.
                            let _ = ledger
                                .release(&copies[copy], held[copy].unwrap_or(0), Utc::now())
                                .await;
                        }
                    }
                });
                let pairs = rt
                    .block_on(ledger.pair_states(&event.tenant_id, &event.id))
                    .unwrap();
                let pair = pairs.first();
                match (delivered, pair.and_then(|p| p.delivered_at)) {
                    (Some(at), now) => {
                        prop_assert_eq!(now, Some(at), "delivered_at changed: {:?}", steps);
                        prop_assert_eq!(
                            pair.and_then(|p| p.state),
                            Some(DeliveryState::Delivered),
                            "left delivered after {:?}",
                            steps
                        );
                    }
                    (None, Some(at)) => delivered = Some(at),
                    (None, None) => {}
                }
            }
            Ok(())
        })
        .unwrap();
    // The property saw deliveries: not a test that cannot fail for want of one.
    let some = rt.block_on(async {
        let event = tern_outbox::OutboxWriter::new("unused")
            .prepare("order.paid", "tnt_prop", r#"{"p":2}"#)
            .unwrap()
            .event;
        let [first, retry, _] = copies(&DeliveryMessage::first(event.clone(), endpoint.clone()));
        ledger
            .claim(&first, Utc::now() + chrono::Duration::minutes(5))
            .await
            .unwrap();
        ledger
            .finish(&first, DeliveryState::Delivered)
            .await
            .unwrap();
        // A retry's copy, claimed after: refused; its dead letter: changes nothing.
        let claim = ledger
            .claim(&retry, Utc::now() + chrono::Duration::minutes(5))
            .await
            .unwrap();
        let _ = ledger.finish(&retry, DeliveryState::DeadLettered).await;
        (
            claim,
            ledger
                .pair_states(&event.tenant_id, &event.id)
                .await
                .unwrap(),
        )
    });
    assert_eq!(some.0, Claim::AlreadyDelivered);
    assert_eq!(
        some.1[0].state,
        Some(DeliveryState::Delivered),
        "{:?}",
        some.1
    );
}
