//! Operational events on moto (issue 10): the SNS topic with a `tenant_id` filter policy
//! per owner, and the outbox path that delivers `tern.endpoint.*` events to the tenant's
//! own endpoints through the relay, signed like any webhook, once.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use chrono::{SubsecRound, Utc};
use tern_core::operational::{OperationalEvent, OperationalEventKind, redact_url};
use tern_core::{EndpointId, TenantId};
use tern_local::LocalOptions;
use tern_tests::*;

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        ..LocalOptions::default()
    }
}

/// An `endpoint.disabled` event with every field of the issue's list set.
fn disabled_event(tenant: &str) -> OperationalEvent {
    let now = Utc::now();
    OperationalEvent {
        kind: OperationalEventKind::Disabled,
        tenant_id: TenantId::new(tenant).expect("tenant"),
        endpoint_id: EndpointId::generate(),
        url: redact_url("https://hooks.example.com/in?token=s3cret"),
        reason: "auto_disabled: 12 % success over 1 h, last status 503".into(),
        last_status: Some(503),
        last_error: Some("http_status: 503 Service Unavailable".into()),
        last_success_at: Some(now - chrono::Duration::minutes(47)),
        success_rate: Some(0.12),
        attempts: 25,
        window_seconds: 3600,
        at: now.trunc_subsecs(3),
    }
}

/// A queue subscribed to the deployment's operational topic with a filter policy on
/// `tenant_id`, as an endpoint owner would set it up. Returns the queue URL.
async fn owner_queue(local: &tern_local::local::LocalTern, name: &str, tenant: &str) -> String {
    let sqs = local.sqs();
    let url = sqs
        .create_queue()
        .queue_name(format!(
            "{}{name}",
            local.resources.outbox_table.trim_end_matches("outbox")
        ))
        .send()
        .await
        .expect("create queue")
        .queue_url
        .expect("queue url");
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue attributes")
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("queue arn");
    aws_sdk_sns::Client::new(&local.aws)
        .subscribe()
        .topic_arn(&local.resources.operational_topic_arn)
        .protocol("sqs")
        .endpoint(arn)
        .attributes("FilterPolicy", format!(r#"{{"tenant_id": ["{tenant}"]}}"#))
        .send()
        .await
        .expect("subscribe");
    url
}

/// Every message in `url` (SNS envelopes), received and deleted.
async fn drain(local: &tern_local::local::LocalTern, url: &str) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    loop {
        let got = local
            .sqs()
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            out.push(serde_json::from_str(m.body().unwrap_or("")).expect("SNS envelope is JSON"));
            local
                .sqs()
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_subscribed_with_a_tenant_filter_gets_its_tenants_events_with_every_field() {
    let local = deployment_without_pollers("ops-sns", fast()).await;
    let acme_queue = owner_queue(&local, "owner-acme", "tnt_acme").await;
    let other_queue = owner_queue(&local, "owner-other", "tnt_other").await;

    let acme = disabled_event("tnt_acme");
    let other = disabled_event("tnt_other");
    // Through the deployment's wiring (topic and outbox), as the sender will publish.
    local
        .operational
        .publish(&acme)
        .await
        .expect("publish acme");
    local
        .operational
        .publish(&other)
        .await
        .expect("publish other");

    let got = drain(&local, &acme_queue).await;
    assert_eq!(got.len(), 1, "exactly the acme event: {got:?}");
    let envelope = &got[0];
    let message: serde_json::Value =
        serde_json::from_str(envelope["Message"].as_str().expect("Message")).expect("event JSON");
    // Every field of the issue's list, with the values published.
    assert_eq!(message["type"], "endpoint.disabled");
    assert_eq!(message["tenant_id"], "tnt_acme");
    assert_eq!(message["endpoint_id"], acme.endpoint_id.as_str());
    assert_eq!(message["url"], "https://hooks.example.com/in?…");
    assert!(!envelope["Message"].as_str().unwrap().contains("s3cret"));
    assert_eq!(
        message["reason"],
        "auto_disabled: 12 % success over 1 h, last status 503"
    );
    assert_eq!(message["last_status"], 503);
    assert_eq!(
        message["last_success_at"],
        serde_json::to_value(acme.last_success_at).unwrap()
    );
    assert_eq!(message["success_rate"], 0.12);
    assert_eq!(message["window_seconds"], 3600);
    assert_eq!(message["attempts"], 25);
    // And nothing lost or altered on the way: the message is the event.
    let parsed: OperationalEvent = serde_json::from_value(message.clone()).expect("event");
    assert_eq!(parsed, acme);
    // The attributes owners filter and route on.
    let attrs: HashMap<&str, &str> = ["tenant_id", "event_type", "endpoint_id"]
        .iter()
        .map(|k| {
            (
                *k,
                envelope["MessageAttributes"][k]["Value"]
                    .as_str()
                    .unwrap_or_else(|| panic!("attribute {k}: {envelope}")),
            )
        })
        .collect();
    assert_eq!(attrs["tenant_id"], "tnt_acme");
    assert_eq!(attrs["event_type"], "endpoint.disabled");
    assert_eq!(attrs["endpoint_id"], acme.endpoint_id.as_str());

    // The other owner got theirs, and only theirs.
    let got_other = drain(&local, &other_queue).await;
    assert_eq!(got_other.len(), 1, "{got_other:?}");
    let m: OperationalEvent =
        serde_json::from_str(got_other[0]["Message"].as_str().unwrap()).expect("event");
    assert_eq!(m, other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_event_reaches_the_tenants_subscribed_endpoint_signed_and_once() {
    let (local, _rx) = deployment("ops-outbox", fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let ops = add_endpoint(
        &local,
        "tnt_acme",
        &receiver.url("/ops"),
        &["tern.endpoint.disabled"],
        None,
    )
    .await;
    // `*` covers the tenant's own types, not Tern's operational ones.
    add_endpoint(&local, "tnt_acme", &receiver.url("/all"), &["*"], None).await;
    // Another tenant's endpoint subscribed to the same type gets nothing of acme's.
    add_endpoint(
        &local,
        "tnt_other",
        &receiver.url("/other"),
        &["tern.endpoint.disabled"],
        None,
    )
    .await;

    let event = disabled_event("tnt_acme");
    // The same change published twice (a retried call): both succeed, one delivery.
    local
        .operational
        .publish(&event)
        .await
        .expect("first publish");
    local
        .operational
        .publish(&event)
        .await
        .expect("a repeated publish is not an error");

    let got = receiver.wait_for("/ops", 1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1);
    let req = &got[0];
    assert_eq!(&req.body[..], event.to_json().as_bytes());
    assert_eq!(
        req.header("webhook-id"),
        Some(event.event_id_text().as_str())
    );
    verify_reference(&ops.secrets[0].secret, req).expect("signed like any webhook");

    // The second put wrote nothing: one outbox item under the event's id.
    let item = local
        .dynamodb()
        .get_item()
        .table_name(&local.resources.outbox_table)
        .key(
            "event_id",
            // Keyed by tenant and id (outbox schema version 2).
            aws_sdk_dynamodb::types::AttributeValue::S(format!(
                "tnt_acme#{}",
                event.event_id_text()
            )),
        )
        .send()
        .await
        .expect("get item")
        .item
        .expect("the outbox item");
    assert_eq!(item["event_type"].as_s().unwrap(), "tern.endpoint.disabled");
    assert_eq!(item["tenant_id"].as_s().unwrap(), "tnt_acme");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.requests("/ops").len(), 1, "delivered once");
    assert!(
        receiver.requests("/all").is_empty(),
        "`*` must not match tern.*"
    );
    assert!(
        receiver.requests("/other").is_empty(),
        "no cross-tenant delivery"
    );
}

/// The whole path, as it happens in production: the sender's own health write finds the
/// endpoint below the thresholds and reports it, once, on SNS (to its owner's filtered
/// subscription) and as `tern.endpoint.*` webhooks to the tenant's other endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_senders_auto_disable_reaches_sns_and_the_tenants_own_endpoint_once() {
    let (local, _rx) = deployment(
        "ops-e2e",
        LocalOptions {
            time_scale: 0.001,
            lookup: Some(no_dns()),
            health: Some(tern_core::health::HealthPolicy {
                failure_threshold: 1000,
                min_attempts: 6,
                ..tern_core::health::HealthPolicy::default()
            }),
            ..LocalOptions::default()
        },
    )
    .await;
    let owner = owner_queue(&local, "owner-e2e", "tnt_e2e").await;
    let receiver = tern_local::Receiver::start().await.unwrap();
    receiver.set(
        "/down",
        tern_local::Behavior::Always(tern_local::Reply::status(503)),
    );
    let down = add_endpoint(
        &local,
        "tnt_e2e",
        &receiver.url("/down?key=k"),
        &["order.paid"],
        Some(1),
    )
    .await;
    let ops = add_endpoint(
        &local,
        "tnt_e2e",
        &receiver.url("/ops"),
        &["tern.endpoint.degraded", "tern.endpoint.disabled"],
        None,
    )
    .await;
    // One failed attempt per event (budget 1) until the endpoint is disabled: at 0 % with
    // the minimum of 6 attempts it falls below at once, and is disabled once it has stayed
    // below for the window (1 h at 0.001: 3.6 s).
    let mut published = 0;
    let disabled = eventually(Duration::from_secs(60), async || {
        publish(
            &local,
            "order.paid",
            "tnt_e2e",
            &format!(r#"{{"i":{published}}}"#),
        )
        .await;
        published += 1;
        receiver
            .requests("/ops")
            .iter()
            .any(|r| String::from_utf8_lossy(&r.body).contains("\"endpoint.disabled\""))
    })
    .await;
    assert!(
        disabled,
        "no endpoint.disabled webhook reached the tenant's ops endpoint"
    );
    // Let stragglers arrive, then count: each kind once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let webhooks: Vec<serde_json::Value> = receiver
        .requests("/ops")
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let kinds: Vec<&str> = webhooks.iter().filter_map(|w| w["type"].as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "endpoint.disabled").count(),
        1,
        "{kinds:?}"
    );
    // Semantics changed on purpose (issue 16, item 8): the owner is told it is degraded
    // when it falls below, once, and disabled a window later: never both at once.
    let at = |kind: &str| {
        webhooks
            .iter()
            .filter(|w| w["type"] == kind)
            .map(|w| w["at"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let (degraded, disabled_at) = (at("endpoint.degraded"), at("endpoint.disabled"));
    assert_eq!(degraded.len(), 1, "{kinds:?}");
    assert!(degraded[0] < disabled_at[0], "{kinds:?}");
    let sns = drain(&local, &owner).await;
    let messages: Vec<serde_json::Value> = sns
        .iter()
        .map(|e| serde_json::from_str(e["Message"].as_str().unwrap()).unwrap())
        .collect();
    let disabled: Vec<&serde_json::Value> = messages
        .iter()
        .filter(|m| m["type"] == "endpoint.disabled")
        .collect();
    assert_eq!(disabled.len(), 1, "{messages:?}");
    assert_eq!(
        messages
            .iter()
            .filter(|m| m["type"] == "endpoint.degraded")
            .count(),
        1,
        "{messages:?}"
    );
    let d = disabled[0];
    assert_eq!(d["tenant_id"], "tnt_e2e");
    assert_eq!(d["endpoint_id"], down.id.as_str());
    assert_eq!(d["url"], format!("{}?…", receiver.url("/down")));
    assert_eq!(d["last_status"], 503);
    assert_eq!(d["window_seconds"], 3600);
    assert_eq!(d["success_rate"], 0.0);
    assert!(
        d["reason"]
            .as_str()
            .unwrap()
            .starts_with("auto_disabled: 0 % success over 1 h, last status 503")
    );
    assert!(d["attempts"].as_u64().unwrap() >= 6);
    // The endpoint is disabled with that reason; the ops endpoint kept working.
    let stored = tern_core::ports::EndpointStore::get(
        local.sender.endpoints.as_ref(),
        &down.tenant_id,
        &down.id,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!stored.enabled);
    let ops_now = tern_core::ports::EndpointStore::get(
        local.sender.endpoints.as_ref(),
        &ops.tenant_id,
        &ops.id,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        ops_now.enabled,
        "the tenant's ops endpoint must not be disabled"
    );
}

/// Issue 15, item 7: SNS fails when the endpoint is disabled. The change is recorded with
/// its event pending on the health record, and tried again on its own short schedule
/// (issue 26): once SNS is back, the sender's next batch publishes it, even a batch for
/// another endpoint (before, only a batch that touched the disabled endpoint did, one
/// probe interval later): the owner gets exactly one `endpoint.disabled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sns_outage_delays_endpoint_disabled_and_the_owner_gets_it_once_sns_is_back() {
    // A one-minute window at 0.05: 3 s; after a failed publish, the next try waits one
    // probe interval (2 s at 0.05: 100 ms).
    let scale = 0.05;
    let policy = tern_core::health::HealthPolicy {
        failure_threshold: 1000,
        window_seconds: 60,
        min_attempts: 4,
        probe_interval_seconds: 2,
        ..tern_core::health::HealthPolicy::default()
    };
    let local = deployment_without_pollers(
        "ops-outage",
        LocalOptions {
            time_scale: scale,
            lookup: Some(no_dns()),
            health: Some(policy.clone()),
            ..LocalOptions::default()
        },
    )
    .await;
    let receiver = tern_local::Receiver::start().await.unwrap();
    receiver.set(
        "/down",
        tern_local::Behavior::Always(tern_local::Reply::status(503)),
    );
    let down = add_endpoint(&local, "tnt_out", &receiver.url("/down"), &["*"], None).await;
    receiver.set(
        "/up",
        tern_local::Behavior::Always(tern_local::Reply::status(200)),
    );
    let up = add_endpoint(&local, "tnt_out", &receiver.url("/up"), &["*"], None).await;
    let sns = aws_sdk_sns::Client::new(&local.aws);
    let topic = local.resources.operational_topic_arn.clone();
    let topic_name = topic.rsplit(':').next().unwrap().to_owned();

    // SNS is out: publishing to the topic fails.
    sns.delete_topic()
        .topic_arn(&topic)
        .send()
        .await
        .expect("delete topic");
    let batch_to = |to: tern_core::EndpointId, n: usize| {
        let bodies: Vec<String> = (0..n)
            .map(|i| {
                let event = tern_outbox::OutboxWriter::new(&local.resources.outbox_table)
                    .prepare("order.paid", "tnt_out", format!(r#"{{"n":{i}}}"#))
                    .unwrap()
                    .event;
                tern_core::DeliveryMessage::first(event, to.clone()).to_body()
            })
            .collect();
        let local = &local;
        async move {
            let metrics = tern_handlers::metrics::Metrics::new(
                "Tern",
                tern_handlers::metrics::MetricsSink::Discard,
            );
            let (response, results) =
                tern_handlers::sender::handle(&local.sender, sqs_event(&bodies), &metrics).await;
            assert!(response.batch_item_failures.is_empty(), "{results:?}");
            metrics.snapshot()
        }
    };
    let batch = |n: usize| batch_to(down.id.clone(), n);
    // Below 50 % (0 of 4), then still below a window later: disabled, told to no one yet.
    batch(4).await;
    tokio::time::sleep(policy.timings(scale).window() + Duration::from_millis(300)).await;
    let counts = batch(2).await;
    let stored = tern_core::ports::EndpointStore::get(
        local.sender.endpoints.as_ref(),
        &down.tenant_id,
        &down.id,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!stored.enabled, "not disabled");
    assert_eq!(counts.endpoints_auto_disabled, 1);
    // At least once: the batch's later message tries the publish again when the scaled
    // retry wait (1 s at the time scale) has passed, which a loaded machine reaches.
    assert!(counts.operational_events_unpublished >= 1, "{counts:?}");
    let store = tern_aws::DynamoHealthStore::new(
        aws_sdk_dynamodb::Client::new(&local.aws),
        &local.resources.health_table,
    );
    let pending = tern_core::health::HealthStore::get(&store, &down.tenant_id, &down.id)
        .await
        .unwrap()
        .unwrap()
        .pending_report
        .expect("the unpublished event is kept");
    assert!(
        pending.event.contains("\"endpoint.disabled\""),
        "{pending:?}"
    );

    // SNS is back (the topic again, under the same ARN, and the owner's subscription).
    let again = sns
        .create_topic()
        .name(&topic_name)
        .send()
        .await
        .expect("create topic");
    assert_eq!(again.topic_arn(), Some(topic.as_str()));
    let owner = owner_queue(&local, "owner-outage", "tnt_out").await;

    // The sender's next batch, for the tenant's other endpoint, publishes the kept event.
    // Later batches, the disabled endpoint's included, publish nothing more.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = batch_to(up.id.clone(), 1).await;
    assert_eq!(counts.operational_events, 1, "{counts:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = batch(3).await;
    assert_eq!(counts.operational_events, 0, "{counts:?}");
    let got = drain(&local, &owner).await;
    let kinds: Vec<String> = got
        .iter()
        .map(|e| {
            let m: serde_json::Value =
                serde_json::from_str(e["Message"].as_str().unwrap()).unwrap();
            m["type"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(kinds, vec!["endpoint.disabled"], "{got:?}");
    let h = tern_core::health::HealthStore::get(&store, &down.tenant_id, &down.id)
        .await
        .unwrap()
        .unwrap();
    assert!(h.pending_report.is_none(), "{h:?}");
}
