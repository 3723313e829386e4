//! Operator-facing behaviour (issue 11, items 12 and 13): the attempt log keeps every try
//! of an attempt, including one whose sender crashed and whose claim was taken over; and
//! the endpoint commands `show`, `update`, `enable`, `delete` and a repeated `disable`,
//! through the ops functions the `tern` CLI calls, on moto. (The CLI's exit codes are
//! tested on the binary itself in `shared/tern-local/tests/cli.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tern_core::endpoint::{EndpointSecret, EndpointUpdate};
use tern_core::ports::{
    AttemptRecord, Claim, DeliveryLedger, DeliveryState, EndpointStore, PortError,
};
use tern_core::{
    DeliveryMessage, Endpoint, EndpointId, EventId, PayloadFormat, RetrySchedule, TenantId,
};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_http::DestinationPolicy;
use tern_local::LocalOptions;
use tern_local::ops::{self, OpsError};
use tern_tests::*;

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        ..LocalOptions::default()
    }
}

fn metrics() -> Metrics {
    Metrics::new("Tern", MetricsSink::Discard)
}

fn loopback_policy() -> DestinationPolicy {
    DestinationPolicy {
        https_only: false,
        allow: vec!["127.0.0.1/32".parse().unwrap()],
        nat64: false,
    }
}

// ---------------------------------------------------------------------------------------
// Item 12: a takeover writes its own attempt row.
// ---------------------------------------------------------------------------------------

/// Where the crashed sender stops.
#[derive(Clone, Copy, Debug)]
enum CrashAt {
    /// After the POST was answered, before its attempt row was written.
    BeforeRecord,
    /// After the attempt row, before the claim was marked finished.
    BeforeFinish,
}

/// The real ledger, for a sender that dies at `crash`: its claim's lease is already over
/// (as it is once the visibility timeout brings the message back), and the process
/// "dies" (panics) at the chosen step.
struct CrashingLedger {
    inner: Arc<dyn DeliveryLedger>,
    crash: CrashAt,
}

#[async_trait]
impl DeliveryLedger for CrashingLedger {
    async fn claim(&self, m: &DeliveryMessage, _: DateTime<Utc>) -> Result<Claim, PortError> {
        self.inner
            .claim(m, Utc::now() - chrono::Duration::seconds(1))
            .await
    }
    async fn finish(&self, m: &DeliveryMessage, s: DeliveryState) -> Result<(), PortError> {
        if matches!(self.crash, CrashAt::BeforeFinish) {
            panic!("sender crashed before marking the claim finished");
        }
        self.inner.finish(m, s).await
    }
    async fn record_attempt(
        &self,
        message: &tern_core::DeliveryMessage,
        r: &AttemptRecord,
    ) -> Result<(), PortError> {
        if matches!(self.crash, CrashAt::BeforeRecord) {
            panic!("sender crashed after the 200, before recording it");
        }
        self.inner.record_attempt(message, r).await
    }
    async fn history(
        &self,
        tenant: &tern_core::TenantId,
        e: &EventId,
    ) -> Result<Vec<AttemptRecord>, PortError> {
        self.inner.history(tenant, e).await
    }
}

/// One crash at `crash`, then the redelivered message handled by a healthy sender.
/// Returns the event's history and `tern attempts`' output.
async fn crash_then_redeliver(name: &str, crash: CrashAt) -> (Vec<AttemptRecord>, String) {
    let local = deployment_without_pollers(name, fast()).await;
    let receiver = Receiver::start().await.unwrap();
    let ep = add_endpoint(&local, "tnt_crash", &receiver.url("/c"), &["*"], None).await;
    let event = tern_outbox::OutboxWriter::new(&local.resources.outbox_table)
        .prepare("order.paid", "tnt_crash", r#"{"c":1}"#)
        .unwrap()
        .event;
    let message = DeliveryMessage::first(event.clone(), ep.id.clone());
    let s = &local.sender;
    let crashing = SenderDeps {
        endpoints: s.endpoints.clone(),
        ledger: Arc::new(CrashingLedger {
            inner: s.ledger.clone(),
            crash,
        }),
        delivery_queue: s.delivery_queue.clone(),
        dlq: s.dlq.clone(),
        scheduler: s.scheduler.clone(),
        client: s.client.clone(),
        policy: s.policy.clone(),
        breaker: s.breaker.clone(),
    };
    let (response, results) =
        tern_handlers::sender::handle(&crashing, sqs_event(&[message.to_body()]), &metrics()).await;
    assert_eq!(response.batch_item_failures.len(), 1, "{results:?}");
    assert_eq!(
        receiver.requests("/c").len(),
        1,
        "the crashed try was POSTed"
    );

    // SQS brings the message back after the visibility timeout; the lease is over.
    let (response, results) =
        tern_handlers::sender::handle(&local.sender, sqs_event(&[message.to_body()]), &metrics())
            .await;
    assert!(response.batch_item_failures.is_empty(), "{results:?}");
    assert_eq!(
        results[0].1,
        Ok(MessageOutcome::Delivered { attempt: 1 }),
        "the redelivery takes the claim over"
    );
    let requests = receiver.requests("/c");
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].header("webhook-id"),
        requests[1].header("webhook-id")
    );

    let history = local
        .sender
        .ledger
        .history(&event.tenant_id, &event.id)
        .await
        .unwrap();
    let mut printed = Vec::new();
    ops::print_history(
        &mut printed,
        local.sender.ledger.as_ref(),
        &event.tenant_id,
        &event.id,
    )
    .await
    .unwrap();
    (history, String::from_utf8(printed).unwrap())
}

/// Data lines of `tern attempts` output (without the header).
fn rows(printed: &str) -> Vec<&str> {
    printed.lines().skip(1).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_200_before_recording_it_leaves_both_tries_in_the_log() {
    let (history, printed) = crash_then_redeliver("crash-rec", CrashAt::BeforeRecord).await;
    let outcomes: Vec<(&str, Option<u16>)> = history
        .iter()
        .map(|r| (r.outcome.as_str(), r.status))
        .collect();
    assert_eq!(
        outcomes,
        [("abandoned", None), ("delivered", Some(200))],
        "{history:#?}"
    );
    assert!(
        history
            .iter()
            .all(|r| r.attempt == 1 && r.replay_count == 0)
    );
    let rows = rows(&printed);
    assert_eq!(rows.len(), 2, "{printed}");
    assert!(rows[0].contains("abandoned"), "{printed}");
    assert!(rows[1].contains("1 takeover 1"), "{printed}");
    assert!(rows[1].contains("delivered"), "{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_recording_the_200_keeps_that_row_when_the_redelivery_records_its_own() {
    let (history, printed) = crash_then_redeliver("crash-fin", CrashAt::BeforeFinish).await;
    let outcomes: Vec<(&str, Option<u16>)> = history
        .iter()
        .map(|r| (r.outcome.as_str(), r.status))
        .collect();
    assert_eq!(
        outcomes,
        [("delivered", Some(200)), ("delivered", Some(200))],
        "the re-run's row overwrote the first 200: {history:#?}"
    );
    assert!(history[0].started_at <= history[1].started_at);
    let rows = rows(&printed);
    assert_eq!(rows.len(), 2, "{printed}");
    assert!(!rows[0].contains("takeover"), "{printed}");
    assert!(rows[1].contains("1 takeover 1"), "{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_attempt_row_is_never_overwritten() {
    let local = deployment_without_pollers("no-overwrite", fast()).await;
    let ep = EndpointId::generate();
    let event = EventId::generate();
    let record = |status: u16| AttemptRecord {
        event_id: event.clone(),
        endpoint_id: ep.clone(),
        replay_count: 0,
        attempt: 1,
        takeover: 0,
        started_at: Utc::now(),
        latency_ms: 5,
        status: Some(status),
        error_class: None,
        error: None,
        location: None,
        response_excerpt: None,
        excerpt_truncated: false,
        outcome: "delivered".into(),
        next_wait_seconds: None,
    };
    let message = DeliveryMessage::first(
        serde_json::from_value(serde_json::json!({
            "id": event.as_str(), "type": "order.paid", "tenant_id": "tnt_a",
            "created_at": "2026-12-01T00:00:00Z", "payload": {},
        }))
        .unwrap(),
        ep.clone(),
    );
    local
        .sender
        .ledger
        .record_attempt(&message, &record(200))
        .await
        .unwrap();
    let second = local
        .sender
        .ledger
        .record_attempt(&message, &record(201))
        .await;
    assert!(matches!(second, Err(PortError::Rejected(_))), "{second:?}");
    let history = local
        .sender
        .ledger
        .history(&message.event.tenant_id, &event)
        .await
        .unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].status, Some(200));
}

// ---------------------------------------------------------------------------------------
// Item 13: endpoint commands.
// ---------------------------------------------------------------------------------------

async fn stored(local: &tern_local::local::LocalTern, ep: &Endpoint) -> Endpoint {
    local
        .sender
        .endpoints
        .get(&ep.tenant_id, &ep.id)
        .await
        .unwrap()
        .expect("endpoint exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_turns_a_410_disabled_endpoint_back_on_and_keeps_the_last_reason() {
    let local = deployment_without_pollers("enable", fast()).await;
    let store = local.sender.endpoints.as_ref();
    let ep = add_endpoint(&local, "tnt_en", "http://127.0.0.1:9/hook", &["*"], None).await;
    let why = "gone: receiver answered 410 Gone at 2025-01-01T00:00:00Z";
    store.disable(&ep.tenant_id, &ep.id, why).await.unwrap();
    let disabled = stored(&local, &ep).await;
    assert!(!disabled.enabled);
    assert!(disabled.disabled_at.is_some());

    // Without --tenant: found by the id.
    let enabled = ops::enable_endpoint(store, None, None, &ep.id)
        .await
        .unwrap();
    assert!(enabled.enabled);
    assert_eq!(enabled.disabled_reason, None);
    assert_eq!(enabled.disabled_at, None);
    assert_eq!(enabled.last_disabled_reason.as_deref(), Some(why));
    assert_eq!(enabled.last_disabled_at, disabled.disabled_at);
    assert_eq!(enabled.secrets, ep.secrets, "nothing else changed");
    assert_eq!(stored(&local, &ep).await, enabled);

    // A delivery goes through again.
    let receiver = Receiver::start().await.unwrap();
    ops::update_endpoint(
        store,
        Some(&ep.tenant_id),
        &ep.id,
        &EndpointUpdate {
            url: Some(receiver.url("/back")),
            ..EndpointUpdate::default()
        },
        &loopback_policy(),
        no_dns().as_ref(),
    )
    .await
    .unwrap();
    let event = tern_outbox::OutboxWriter::new(&local.resources.outbox_table)
        .prepare("order.paid", "tnt_en", r#"{"e":1}"#)
        .unwrap()
        .event;
    let (_, results) = tern_handlers::sender::handle(
        &local.sender,
        sqs_event(&[DeliveryMessage::first(event, ep.id.clone()).to_body()]),
        &metrics(),
    )
    .await;
    assert_eq!(results[0].1, Ok(MessageOutcome::Delivered { attempt: 1 }));
    assert_eq!(receiver.requests("/back").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_disable_without_a_reason_keeps_the_first_reason() {
    let local = deployment_without_pollers("disable2", fast()).await;
    let store = local.sender.endpoints.as_ref();
    let ep = add_endpoint(&local, "tnt_dis", "http://127.0.0.1:9/hook", &["*"], None).await;
    let gone = "gone: receiver answered 410 Gone";
    store.disable(&ep.tenant_id, &ep.id, gone).await.unwrap();
    let first = stored(&local, &ep).await;

    let again = ops::disable_endpoint(store, Some(&ep.tenant_id), &ep.id, None)
        .await
        .unwrap();
    assert!(!again.enabled);
    assert_eq!(again.disabled_reason.as_deref(), Some(gone));
    assert_eq!(again.disabled_at, first.disabled_at);

    // With --reason the operator's reason replaces it; the disabled time stays the first.
    let replaced = ops::disable_endpoint(store, None, &ep.id, Some("maintenance"))
        .await
        .unwrap();
    assert_eq!(replaced.disabled_reason.as_deref(), Some("maintenance"));
    assert_eq!(replaced.disabled_at, first.disabled_at);

    // An enabled endpoint disabled without a reason gets the default one.
    let fresh = add_endpoint(&local, "tnt_dis", "http://127.0.0.1:9/b", &["*"], None).await;
    let d = ops::disable_endpoint(store, None, &fresh.id, None)
        .await
        .unwrap();
    assert_eq!(
        d.disabled_reason.as_deref(),
        Some(ops::DEFAULT_DISABLE_REASON)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_the_endpoint_and_its_queued_deliveries_dead_letter() {
    let local = deployment_without_pollers("delete", fast()).await;
    let store = local.sender.endpoints.as_ref();
    let ep = add_endpoint(&local, "tnt_del", "http://127.0.0.1:9/hook", &["*"], None).await;
    let deleted = ops::delete_endpoint(store, None, &ep.id).await.unwrap();
    assert_eq!(deleted.id, ep.id);
    assert_eq!(store.get(&ep.tenant_id, &ep.id).await.unwrap(), None);
    assert!(matches!(
        ops::delete_endpoint(store, Some(&ep.tenant_id), &ep.id).await,
        Err(OpsError::NotFound { .. })
    ));
    let event = tern_outbox::OutboxWriter::new(&local.resources.outbox_table)
        .prepare("order.paid", "tnt_del", r#"{"d":1}"#)
        .unwrap()
        .event;
    let (_, results) = tern_handlers::sender::handle(
        &local.sender,
        sqs_event(&[DeliveryMessage::first(event, ep.id.clone()).to_body()]),
        &metrics(),
    )
    .await;
    assert!(matches!(
        results[0].1,
        Ok(MessageOutcome::DeadLettered {
            reason: tern_core::DeadLetterReason::EndpointDeleted,
            ..
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_prints_every_field_and_never_a_secret() {
    let local = deployment_without_pollers("show", fast()).await;
    let store = local.sender.endpoints.as_ref();
    let ep = add_endpoint_with(
        &local,
        EndpointId::generate(),
        "tnt_show",
        "http://127.0.0.1:9/hook",
        &["order.paid", "order.shipped"],
        Some(3),
        Some(RetrySchedule::short()),
    )
    .await;
    let first_secret = ep.secrets[0].secret.clone();
    let new_secret = ops::rotate_secret(store, &ep.tenant_id, &ep.id, 24)
        .await
        .unwrap();
    ops::update_endpoint(
        store,
        None,
        &ep.id,
        &EndpointUpdate {
            description: Some(Some("billing receiver".into())),
            timeout_ms: Some(Some(5_000)),
            payload_format: Some(PayloadFormat::StandardWebhooks),
            headers: Some(vec![
                tern_core::custom_headers::CustomHeader::new(
                    "X-Tenant",
                    tern_core::custom_headers::FieldValue::Plain("acme".into()),
                )
                .unwrap(),
                tern_core::custom_headers::CustomHeader::new(
                    "X-Api-Key",
                    tern_core::custom_headers::FieldValue::Secret(tern_core::SecretValue::new(
                        "show-header-secret-77",
                    )),
                )
                .unwrap(),
            ]),
            auth: Some(tern_core::receiver_auth::ReceiverAuth::Bearer {
                token: tern_core::SecretValue::new("show-bearer-secret-88"),
            }),
            ..EndpointUpdate::default()
        },
        &loopback_policy(),
        no_dns().as_ref(),
    )
    .await
    .unwrap();
    store
        .disable(&ep.tenant_id, &ep.id, "maintenance")
        .await
        .unwrap();
    let shown = ops::find_endpoint(store, None, &ep.id).await.unwrap();

    let mut text = Vec::new();
    ops::print_endpoint(&mut text, &shown, false).unwrap();
    let text = String::from_utf8(text).unwrap();
    for expected in [
        ep.id.as_str(),
        "tnt_show",
        "http://127.0.0.1:9/hook",
        "billing receiver",
        "order.paid,order.shipped",
        "60,300,600,600,1800,3600",
        "max attempts:         3",
        "timeout (ms):         5000",
        "payload format:       standard_webhooks",
        "rate limit:           none",
        "x-tenant: acme",
        "x-api-key: (secret, set)",
        "auth:                 bearer token=(secret, set)",
        "signatures:           v1",
        "maintenance",
        "current",
        "previous",
        &tern_core::endpoint::secret_fingerprint(&new_secret),
        &ep.created_at.to_rfc3339(),
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }

    let mut json = Vec::new();
    ops::print_endpoint(&mut json, &shown, true).unwrap();
    let json = String::from_utf8(json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut expected = [
        "id",
        "tenant_id",
        "url",
        "description",
        "event_types",
        "enabled",
        "disabled_reason",
        "disabled_at",
        "last_disabled_reason",
        "last_disabled_at",
        "schedule_seconds",
        "max_attempts",
        "timeout_ms",
        "payload_format",
        "max_per_second",
        "headers",
        "auth",
        "signatures",
        "signing_keys",
        "secrets",
        "client_certificate_arn",
        "created_at",
        "updated_at",
    ];
    expected.sort_unstable();
    assert_eq!(keys, expected, "stable field names");
    assert_eq!(v["tenant_id"], "tnt_show");
    assert_eq!(v["enabled"], false);
    assert_eq!(v["disabled_reason"], "maintenance");
    assert!(v["disabled_at"].is_string());
    assert_eq!(v["max_attempts"], 3);
    assert_eq!(v["timeout_ms"], 5000);
    assert_eq!(v["payload_format"], "standard_webhooks");
    assert!(v["max_per_second"].is_null(), "no limit: null");
    assert_eq!(
        v["schedule_seconds"],
        serde_json::json!([60, 300, 600, 600, 1800, 3600])
    );
    let secrets = v["secrets"].as_array().unwrap();
    assert_eq!(secrets.len(), 2);
    assert_eq!(secrets[0]["state"], "current");
    assert!(secrets[0]["expires_at"].is_null());
    assert_eq!(secrets[1]["state"], "previous");
    assert!(secrets[1]["expires_at"].is_string());
    assert_eq!(
        secrets[1]["fingerprint"],
        tern_core::endpoint::secret_fingerprint(&first_secret)
    );
    assert_eq!(v["headers"][0]["value"], "acme");
    assert_eq!(v["headers"][1]["name"], "x-api-key");
    assert_eq!(v["headers"][1]["secret"], true);
    assert!(v["headers"][1]["value"].is_null());
    assert_eq!(v["auth"]["type"], "bearer");
    for out in [&text, &json] {
        for secret in ["show-header-secret-77", "show-bearer-secret-88"] {
            assert!(!out.contains(secret), "{secret} was printed:\n{out}");
        }
    }
    for secret in [&first_secret, &new_secret] {
        let raw = secret.expose();
        let key = raw.trim_start_matches("whsec_");
        for out in [&text, &json] {
            assert!(!out.contains(key), "a secret was printed:\n{out}");
        }
    }
}

/// A store that lands a 410's disable and a rotation right after the operator's read:
/// the update must keep both.
struct ChangesDuringRead {
    inner: Arc<dyn EndpointStore>,
    fired: AtomicBool,
    rotated: std::sync::Mutex<Vec<EndpointSecret>>,
}

#[async_trait]
impl EndpointStore for ChangesDuringRead {
    async fn get(&self, tenant: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
        let read = self.inner.get(tenant, id).await;
        if !self.fired.swap(true, Ordering::SeqCst) {
            self.inner
                .disable(tenant, id, "gone: receiver answered 410 Gone")
                .await?;
            let mut e = self.inner.get(tenant, id).await?.expect("exists");
            e.rotate_secret(
                tern_core::Secret::generate(),
                Utc::now(),
                chrono::Duration::hours(1),
            )
            .unwrap();
            self.inner.set_secrets(tenant, id, &e.secrets).await?;
            *self.rotated.lock().unwrap() = e.secrets;
        }
        read
    }
    async fn list_for_tenant(&self, tenant: &TenantId) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_for_tenant(tenant).await
    }
    async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
        self.inner.list_all().await
    }
    async fn put(&self, endpoint: &Endpoint) -> Result<(), PortError> {
        self.inner.put(endpoint).await
    }
    async fn disable(&self, t: &TenantId, id: &EndpointId, r: &str) -> Result<(), PortError> {
        self.inner.disable(t, id, r).await
    }
    async fn set_secrets(
        &self,
        t: &TenantId,
        id: &EndpointId,
        secrets: &[EndpointSecret],
    ) -> Result<(), PortError> {
        self.inner.set_secrets(t, id, secrets).await
    }
    async fn update(
        &self,
        t: &TenantId,
        id: &EndpointId,
        update: &EndpointUpdate,
    ) -> Result<(), PortError> {
        self.inner.update(t, id, update).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_changes_only_the_named_fields_and_keeps_a_concurrent_disable_and_rotation() {
    let local = deployment_without_pollers("update", fast()).await;
    let ep = add_endpoint(&local, "tnt_up", "http://127.0.0.1:9/a", &["*"], Some(4)).await;
    let store = ChangesDuringRead {
        inner: local.sender.endpoints.clone(),
        fired: AtomicBool::new(false),
        rotated: std::sync::Mutex::default(),
    };
    let update = EndpointUpdate {
        url: Some("http://127.0.0.1:9/b".into()),
        event_types: Some(vec!["order.paid".into()]),
        description: Some(Some("moved".into())),
        timeout_ms: Some(Some(2_500)),
        schedule: Some(Some(RetrySchedule::parse("10,20").unwrap())),
        max_attempts: Some(None),
        payload_format: Some(PayloadFormat::StandardWebhooks),
        max_per_second: Some(Some(7)),
        headers: Some(vec![
            tern_core::custom_headers::CustomHeader::new(
                "X-Tenant",
                tern_core::custom_headers::FieldValue::Plain("acme".into()),
            )
            .unwrap(),
        ]),
        auth: Some(tern_core::receiver_auth::ReceiverAuth::Basic {
            username: "tern".into(),
            password: tern_core::SecretValue::new("pw"),
        }),
        signatures: Some(tern_core::Signatures::V1),
        client_certificate: None,
    };
    let after = ops::update_endpoint(
        &store,
        Some(&ep.tenant_id),
        &ep.id,
        &update,
        &loopback_policy(),
        no_dns().as_ref(),
    )
    .await
    .unwrap();
    assert_eq!(after.url, "http://127.0.0.1:9/b");
    assert_eq!(after.event_types, ["order.paid"]);
    assert_eq!(after.description.as_deref(), Some("moved"));
    assert_eq!(after.timeout_ms, Some(2_500));
    assert_eq!(
        after.schedule.as_ref().map(|s| s.delays().to_vec()),
        Some(vec![10, 20])
    );
    assert_eq!(after.max_attempts, None, "back to the schedule's budget");
    assert_eq!(after.payload_format, PayloadFormat::StandardWebhooks);
    assert_eq!(after.max_per_second, Some(7));
    assert_eq!(Some(&after.headers), update.headers.as_ref());
    assert_eq!(Some(&after.auth), update.auth.as_ref());
    assert!(after.updated_at.is_some());
    assert!(
        !after.enabled,
        "the update undid a concurrent disable: {:?}",
        after.disabled_reason
    );
    assert_eq!(
        after.disabled_reason.as_deref(),
        Some("gone: receiver answered 410 Gone")
    );
    assert_eq!(
        after.secrets,
        *store.rotated.lock().unwrap(),
        "rotation kept"
    );
    assert_eq!(after.secrets.len(), 2);
    assert_eq!(after.created_at, ep.created_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_checks_the_new_url_like_add_and_refuses_bad_settings_without_writing() {
    let local = deployment_without_pollers("update-bad", fast()).await;
    let store = local.sender.endpoints.as_ref();
    let ep = add_endpoint(&local, "tnt_ub", "http://127.0.0.1:9/a", &["*"], None).await;
    let bad = [
        // The SSRF guard, exactly as for `add`: private, metadata, odd spellings, scheme.
        ("http://10.0.0.5/hook", "denied"),
        ("http://169.254.169.254/latest", "denied"),
        ("http://167772161/", "denied"),
        ("http://u:p@127.0.0.1:9/", "credentials"),
        ("ftp://127.0.0.1/", "scheme"),
    ];
    for (url, why) in bad {
        let err = ops::update_endpoint(
            store,
            None,
            &ep.id,
            &EndpointUpdate {
                url: Some(url.into()),
                ..EndpointUpdate::default()
            },
            &loopback_policy(),
            no_dns().as_ref(),
        )
        .await
        .expect_err(url);
        assert!(
            matches!(&err, OpsError::Invalid(m) if m.contains(why)),
            "{url}: {err}"
        );
    }
    // https-only refuses http:// on update as on add.
    let https_only = DestinationPolicy {
        https_only: true,
        allow: vec!["127.0.0.1/32".parse().unwrap()],
        nat64: false,
    };
    let err = ops::update_endpoint(
        store,
        None,
        &ep.id,
        &EndpointUpdate {
            url: Some("http://127.0.0.1:9/c".into()),
            ..EndpointUpdate::default()
        },
        &https_only,
        no_dns().as_ref(),
    )
    .await;
    assert!(matches!(err, Err(OpsError::Invalid(_))), "{err:?}");
    for update in [
        EndpointUpdate {
            timeout_ms: Some(Some(31_000)),
            ..EndpointUpdate::default()
        },
        EndpointUpdate {
            event_types: Some(vec!["bad type!".into()]),
            ..EndpointUpdate::default()
        },
        EndpointUpdate::default(),
    ] {
        let err = ops::update_endpoint(
            store,
            None,
            &ep.id,
            &update,
            &loopback_policy(),
            no_dns().as_ref(),
        )
        .await;
        assert!(
            matches!(err, Err(OpsError::Invalid(_))),
            "{update:?}: {err:?}"
        );
    }
    assert_eq!(stored(&local, &ep).await, ep, "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_command_answers_an_unknown_id_with_not_found() {
    let local = deployment_without_pollers("unknown", fast()).await;
    let store = local.sender.endpoints.as_ref();
    let ep = add_endpoint(&local, "tnt_known", "http://127.0.0.1:9/a", &["*"], None).await;
    let missing = EndpointId::new("ep_missing").unwrap();
    let tenant = TenantId::new("tnt_known").unwrap();
    let other = TenantId::new("tnt_other").unwrap();
    let policy = loopback_policy();
    let lookup = no_dns();
    let change = EndpointUpdate {
        description: Some(Some("x".into())),
        ..EndpointUpdate::default()
    };
    // (tenant, id): an id nobody has, with and without a tenant; a real id under the
    // wrong tenant.
    for (t, id) in [
        (None, &missing),
        (Some(&tenant), &missing),
        (Some(&other), &ep.id),
    ] {
        let results = [
            ops::find_endpoint(store, t, id).await.map(|_| ()),
            ops::enable_endpoint(store, None, t, id).await.map(|_| ()),
            ops::disable_endpoint(store, t, id, None).await.map(|_| ()),
            ops::delete_endpoint(store, t, id).await.map(|_| ()),
            ops::update_endpoint(store, t, id, &change, &policy, lookup.as_ref())
                .await
                .map(|_| ()),
        ];
        for r in results {
            match r {
                Err(e @ OpsError::NotFound { .. }) => {
                    assert!(e.to_string().contains(id.as_str()), "{e}");
                }
                other => panic!("{t:?} {id}: {other:?}"),
            }
        }
    }
    assert!(matches!(
        ops::rotate_secret(store, &other, &ep.id, 24).await,
        Err(OpsError::NotFound { .. })
    ));
    assert_eq!(
        stored(&local, &ep).await,
        ep,
        "the real endpoint is untouched"
    );
}
