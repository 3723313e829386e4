//! Local mode's AWS (moto through `tools/moto_server.py`) behaving as AWS does where Tern
//! depends on it: stream records after a cancelled transaction, SQS's character rule, and
//! the stream poller saying so when its reads go stale.

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use tern_core::EventId;
use tern_local::LocalOptions;
use tern_local::local::LocalTern;
use tern_local::moto::MotoServer;
use tern_outbox::OutboxWriter;
use tern_tests::*;

/// Text of the poller's warning about a stale shard iterator.
const STALE_WARNING: &str = "shard iterator returned no records while the stream holds newer";

/// Writes event `id` with its order row in one transaction, as an application does.
async fn publish_with_id(
    local: &LocalTern,
    id: &EventId,
    payload: &str,
) -> Result<(), SdkError<TransactWriteItemsError>> {
    let writer = OutboxWriter::new(&local.resources.outbox_table);
    let prepared = writer
        .prepare_with_id(id.clone(), "order.paid", "tnt_acme", payload)
        .expect("valid event");
    let order = Put::builder()
        .table_name(&local.resources.outbox_table)
        .item("event_id", AttributeValue::S(format!("order#{id}")))
        .item("kind", AttributeValue::S("order".into()))
        .build()
        .expect("put");
    local
        .dynamodb()
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(order).build())
        .transact_items(prepared.transact_item().expect("outbox put"))
        .send()
        .await
        .map(|_| ())
}

/// Writes A and waits for its delivery, writes A again (cancelled by the outbox's
/// condition), then B and C; returns the webhook ids the receiver got once three arrived
/// (or what arrived within 30 s) and the ids of A, B and C, both sorted.
async fn duplicate_then_more(local: &LocalTern) -> (Vec<String>, [EventId; 3]) {
    let receiver = Receiver::start().await.expect("receiver");
    add_endpoint(local, "tnt_acme", &receiver.url("/hook"), &["*"], None).await;
    let [a, b, c] = [
        EventId::generate(),
        EventId::generate(),
        EventId::generate(),
    ];
    publish_with_id(local, &a, r#"{"n":"a"}"#)
        .await
        .expect("first write of A");
    // The poller is reading the stream (it holds an iterator) before the duplicate.
    let first = receiver.wait_for("/hook", 1, Duration::from_secs(30)).await;
    assert_eq!(first.len(), 1, "A delivered");
    let again = publish_with_id(local, &a, r#"{"n":"a again"}"#)
        .await
        .expect_err("second write of A is cancelled");
    assert!(
        tern_outbox::failed_condition_at(&again, 1),
        "cancelled by the outbox put's condition: {again:?}"
    );
    publish_with_id(local, &b, r#"{"n":"b"}"#).await.expect("B");
    publish_with_id(local, &c, r#"{"n":"c"}"#).await.expect("C");
    let got = receiver.wait_for("/hook", 3, Duration::from_secs(30)).await;
    // B and C travel as separate queue messages: either may arrive first.
    let mut ids: Vec<String> = got
        .iter()
        .filter_map(|r| r.header("webhook-id").map(str::to_owned))
        .collect();
    ids.sort();
    let mut all = [a, b, c];
    all.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    (ids, all)
}

/// Issue 11 item 10: after an application wrote an event id twice, every later event was
/// never relayed (moto rolled the table back to a copy with a new stream shard; the
/// poller's iterator kept reading the old one). As on AWS, B and C are delivered, and
/// without the poller having to recover from a stale iterator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_after_a_rejected_duplicate_are_relayed() {
    let logs = capture_logs();
    let (local, _rx) = deployment("after_duplicate", LocalOptions::default()).await;
    let (ids, [a, b, c]) = duplicate_then_more(&local).await;
    assert_eq!(ids, [a.as_str(), b.as_str(), c.as_str()]);
    let stale: Vec<String> = logs
        .text()
        .lines()
        .filter(|l| l.contains(STALE_WARNING) && l.contains(&local.resources.outbox_stream_arn))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        stale,
        Vec::<String>::new(),
        "the stream itself must not go stale"
    );
}

/// Issue 11 item 10: a stream poller whose reads stay empty while the stream holds newer
/// records says so in its log and reads on. Run against moto's own rollback of a cancelled
/// transaction, without the launcher's fixes of it (`stream-rollback`, and
/// `dynamodb-transaction-undo`, which no longer puts a table copy in place at all), which
/// makes exactly that happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_poller_warns_about_a_stale_iterator_and_reads_on() {
    let logs = capture_logs();
    let moto = MotoServer::start_with_env(&[(
        "TERN_MOTO_STOCK",
        "stream-rollback,dynamodb-transaction-undo",
    )])
    .await
    .expect("moto without the rollback fix");
    let options = LocalOptions {
        prefix: prefix("stale_iterator"),
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(moto.sdk_config().await, &options)
        .await
        .expect("local deployment");
    let _rx = local.start_pollers(&options);
    let (ids, [a, b, c]) = duplicate_then_more(&local).await;
    assert_eq!(ids, [a.as_str(), b.as_str(), c.as_str()]);
    let warned = logs
        .text()
        .lines()
        .any(|l| l.contains(STALE_WARNING) && l.contains(&local.resources.outbox_stream_arn));
    assert!(
        warned,
        "no stale-iterator warning for this stream in the log"
    );
    drop(local);
    moto.stop().await;
}

/// Issue 11 item 4: SQS refuses a message whose body or string attribute value holds a
/// character outside `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`
/// (SendMessage: `InvalidMessageContents`; SendMessageBatch: that entry in `Failed`), and
/// local mode's moto does too, so such text fails in tests as it would on AWS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_refuses_characters_outside_its_allowed_set() {
    let aws = tern_local::moto::sdk_config_for(&moto_url()).await;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let queue = sqs
        .create_queue()
        .queue_name(format!("{}chars", prefix("sqs_chars")))
        .send()
        .await
        .expect("queue")
        .queue_url
        .expect("queue url");

    for bad in [
        "a\u{FFFF}b",
        "\u{FFFE}",
        "bell\u{7}",
        "nul\u{0}",
        "esc\u{1B}",
    ] {
        let err = sqs
            .send_message()
            .queue_url(&queue)
            .message_body(bad)
            .send()
            .await
            .expect_err("refused body");
        assert_eq!(
            err.code(),
            Some("InvalidMessageContents"),
            "{bad:?}: {err:?}"
        );
        let err = sqs
            .send_message()
            .queue_url(&queue)
            .message_body("fine")
            .message_attributes(
                "note",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(bad)
                    .build()
                    .expect("attribute"),
            )
            .send()
            .await
            .expect_err("refused attribute value");
        assert_eq!(
            err.code(),
            Some("InvalidMessageContents"),
            "{bad:?}: {err:?}"
        );
    }

    let good = [
        "replacement \u{FFFD}",
        "emoji \u{1F980}",
        "tab\tline\ncr\r",
        "\u{D7FF}\u{E000}\u{10FFFF}",
    ];
    for body in good {
        sqs.send_message()
            .queue_url(&queue)
            .message_body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{body:?} accepted: {e:?}"));
    }

    let entry = |id: &str, body: &str| {
        SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body(body)
            .build()
            .expect("entry")
    };
    let batch = sqs
        .send_message_batch()
        .queue_url(&queue)
        .entries(entry("ok", "batch \u{1F980}"))
        .entries(entry("bad", "batch \u{FFFF}"))
        .send()
        .await
        .expect("batch answered");
    let ok: Vec<&str> = batch.successful().iter().map(|s| s.id()).collect();
    assert_eq!(ok, ["ok"]);
    let failed: Vec<(&str, Option<&str>, bool)> = batch
        .failed()
        .iter()
        .map(|f| (f.id(), f.code().into(), f.sender_fault()))
        .collect();
    assert_eq!(failed, [("bad", Some("InvalidMessageContents"), true)]);

    // Accepted text comes back unchanged.
    let mut bodies = Vec::new();
    for _ in 0..10 {
        let got = sqs
            .receive_message()
            .queue_url(&queue)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("receive");
        bodies.extend(
            got.messages()
                .iter()
                .filter_map(|m| m.body().map(str::to_owned)),
        );
        if bodies.len() > good.len() {
            break;
        }
    }
    bodies.sort();
    let mut expected: Vec<String> = good.iter().map(|s| (*s).to_owned()).collect();
    expected.push("batch \u{1F980}".to_owned());
    expected.sort();
    assert_eq!(bodies, expected);
}
