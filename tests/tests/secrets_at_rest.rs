//! Issue 20, item 5: endpoint secrets at rest, sealed with the deployment's KMS key
//! (envelope encryption: AES-256-GCM under KMS data keys bound to tenant and endpoint),
//! end to end on moto (its KMS runs GenerateDataKey and Decrypt with an encryption
//! context) with receivers on 127.0.0.1.
//!
//! - The endpoints table read alone (a raw Scan) holds none of the secrets, in any
//!   encoding, after a create, a rotation and header/authentication changes; deliveries
//!   still verify (`v1` with the reference verifier, `v1a` present), and bearer arrives.
//! - A sealed value copied to another endpoint's item does not open: a typed error, no
//!   request reaches the receiver, the endpoint's health is not charged, the delivery is
//!   retried and ends in the DLQ through the queue's redrive.
//! - KMS failing at the sender is our failure: no attempt, no health charge; delivered once
//!   KMS answers again.
//! - Items written before sealing (plain text) and values sealed the first way (`tern1`, a
//!   data key per write) are read, and `seal_stored` (`tern endpoints encrypt-secrets`)
//!   seals them under the keyring's current epoch.
//! - Issue 29: KMS requests do not grow with endpoints. 200 endpoints written by four
//!   writers cost one `GenerateDataKey` (the keyring's first epoch), and a warm sender
//!   delivering to all of them one `Decrypt`. A rotation (a new epoch) keeps every value
//!   readable, and `encrypt-secrets` moves them all to it.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine as _;
use chrono::Utc;
use tern_core::custom_headers::{CustomHeader, FieldValue};
use tern_core::endpoint::EndpointUpdate;
use tern_core::health::HealthStore as _;
use tern_core::ports::{EndpointStore, PortError};
use tern_core::receiver_auth::ReceiverAuth;
use tern_core::sealed::{DataKeys as _, SealContext, Sealed};
use tern_core::{Endpoint, EndpointId, Secret, SecretValue, Signatures, SigningKey, TenantId};
use tern_local::LocalOptions;
use tern_local::ops as tern_ops;
use tern_tests::fault_proxy::{Fault, Rule, Service};
use tern_tests::*;

fn fast() -> LocalOptions {
    LocalOptions {
        time_scale: 0.001,
        ..LocalOptions::default()
    }
}

/// Fast, and a failed message is received again after 1 s (the queue's visibility
/// timeout is 360 s), so retries by SQS play out within the test.
fn fast_redelivery() -> LocalOptions {
    LocalOptions {
        visibility_timeout_seconds: Some(1),
        ..fast()
    }
}

/// Waits until the sender reports a message failed on our side with an error containing
/// `text` (put back on the queue with a short delay, issue 29 item 3; or left on the
/// queue for SQS to retry when that is refused); returns that error.
async fn batch_failure(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<tern_local::pollers::LocalEvent>,
    text: &str,
) -> String {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = rx.recv().await {
            if let tern_local::pollers::LocalEvent::Sent(results) = event {
                for (_, result) in results {
                    let error = match result {
                        Err(e) => e,
                        Ok(tern_handlers::sender::MessageOutcome::PutBack { error, .. }) => error,
                        Ok(_) => continue,
                    };
                    if error.contains(text) {
                        return Some(error);
                    }
                }
            }
        }
        None
    })
    .await;
    found
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no batch failure with {text:?} within 30 s"))
}

/// Every item of the endpoints table, as DynamoDB returns them to anyone with
/// `dynamodb:Scan`: the text of all their attributes.
async fn raw_table_text(local: &tern_local::LocalTern) -> String {
    let out = local
        .dynamodb()
        .scan()
        .table_name(&local.resources.endpoints_table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan");
    format!("{:?}", out.items.unwrap_or_default())
}

/// The forms a secret could take in the table: as written, base64 of its text, and for
/// `whsec_`/`whsk_` values the key bytes in hex and base64 without the prefix.
fn encodings(secret: &str) -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut forms = vec![secret.to_owned(), b64.encode(secret)];
    for prefix in ["whsec_", "whsk_"] {
        if let Some(rest) = secret.strip_prefix(prefix)
            && let Ok(bytes) = b64.decode(rest)
        {
            forms.push(hex::encode(&bytes));
            forms.push(rest.to_owned());
        }
    }
    forms
}

fn assert_absent(text: &str, secrets: &[&str]) {
    for secret in secrets {
        for form in encodings(secret) {
            assert!(
                !text.contains(&form),
                "a secret ({form}) is readable in the endpoints table"
            );
        }
    }
}

fn sealed_endpoint(tenant: &str, url: &str) -> Endpoint {
    Endpoint::new(
        EndpointId::generate(),
        TenantId::new(tenant).expect("tenant"),
        url,
        vec!["*".into()],
        Secret::generate(),
        Utc::now(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoints_table_read_alone_yields_no_secret_and_deliveries_still_verify() {
    let logs = capture_logs();
    let (local, _rx) = deployment("sealed-scan", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    let store = local.sender.endpoints.as_ref();
    let key = SigningKey::generate();
    let mut ep = sealed_endpoint("tnt_s", &receiver.url("/s"));
    ep.signatures = Signatures::Both;
    ep.rotate_signing_key(key.clone(), Utc::now(), chrono::Duration::zero())
        .expect("key");
    ep.headers = vec![
        CustomHeader::new(
            "X-Api-Key",
            FieldValue::Secret(SecretValue::new("hdr-Qp47-secret-value")),
        )
        .expect("header"),
        CustomHeader::new("X-Tenant", FieldValue::Plain("acme".into())).expect("header"),
    ];
    ep.auth = ReceiverAuth::Bearer {
        token: SecretValue::new("bearer-Jd83-secret-value"),
    };
    ep.validate().expect("valid");
    store.put(&ep).await.expect("put");
    let first = ep.secrets[0].secret.clone();

    // A rotation (set_secrets) and a change of headers and authentication (update): each
    // write seals what it writes.
    let second = tern_ops::rotate_secret(store, &ep.tenant_id, &ep.id, 24)
        .await
        .expect("rotate");
    let basic = ReceiverAuth::Basic {
        username: "tern".into(),
        password: SecretValue::new("pw-Lm29-secret-value"),
    };
    let mut oauth_ep = sealed_endpoint("tnt_s", &receiver.url("/unused"));
    oauth_ep.auth =
        ReceiverAuth::Oauth2ClientCredentials(tern_core::receiver_auth::OAuth2ClientCredentials {
            token_url: receiver.url("/token"),
            client_id: "tern-client".into(),
            client_secret: SecretValue::new("client-Hs61-secret-value"),
            scope: None,
            audience: None,
            client_auth: Default::default(),
        });
    oauth_ep.enabled = false;
    store.put(&oauth_ep).await.expect("put oauth endpoint");

    let secrets = [
        first.expose(),
        second.expose(),
        &key.expose(),
        "hdr-Qp47-secret-value",
        "bearer-Jd83-secret-value",
        "client-Hs61-secret-value",
        "pw-Lm29-secret-value",
        oauth_ep.secrets[0].secret.expose(),
    ];
    let table = raw_table_text(&local).await;
    assert!(
        table.contains("tern2.1."),
        "sealed values are stored, under the keyring's first epoch: {table}"
    );
    assert!(!table.contains("tern1."), "no data key per write: {table}");
    assert!(table.contains("acme"), "plain header values stay readable");
    assert_absent(&table, &secrets[..3]);
    assert_absent(&table, &secrets[3..6]);

    // Header and authentication change: one more data key, sealed too.
    store
        .update(
            &ep.tenant_id,
            &ep.id,
            &EndpointUpdate {
                auth: Some(basic),
                ..Default::default()
            },
        )
        .await
        .expect("update");
    assert_absent(&raw_table_text(&local).await, &secrets);

    // The sender opens them: both secrets sign v1 (the reference verifier accepts each),
    // v1a is there, and the basic password arrives.
    publish(&local, "order.paid", "tnt_s", r#"{"n":1}"#).await;
    let got = receiver.wait_for("/s", 1, Duration::from_secs(30)).await;
    let req = &got[0];
    verify_reference(&first, req).expect("the old secret verifies");
    verify_reference(&second, req).expect("the new secret verifies");
    let signature = req.header("webhook-signature").expect("signature");
    assert_eq!(
        signature
            .split(' ')
            .filter(|e| e.starts_with("v1a,"))
            .count(),
        1,
        "{signature}"
    );
    let expected_basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("tern:pw-Lm29-secret-value")
    );
    assert_eq!(req.header("authorization"), Some(expected_basic.as_str()));
    assert_eq!(req.header("x-api-key"), Some("hdr-Qp47-secret-value"));

    // No secret, and no key, in any log line at TRACE: the epoch key, as the test (with
    // the KMS key) unwraps it from the keyring's item.
    let item = local
        .dynamodb()
        .get_item()
        .table_name(&local.resources.endpoints_table)
        .key(
            "tenant_id",
            AttributeValue::S(tern_aws::keyring::KEYRING_PARTITION.into()),
        )
        .key(
            "endpoint_id",
            AttributeValue::S(tern_aws::keyring::epoch_sort_key(
                tern_core::sealed::Epoch::FIRST,
            )),
        )
        .send()
        .await
        .expect("get")
        .item
        .expect("the keyring holds epoch 1");
    let Some(AttributeValue::B(wrapped)) = item.get("wrapped_key") else {
        panic!("a wrapped key: {item:?}")
    };
    let plain_key = aws_sdk_kms::Client::new(&local.aws)
        .decrypt()
        .ciphertext_blob(wrapped.clone())
        .encryption_context("tern:keyring", "endpoint-secrets")
        .encryption_context("tern:epoch", "1")
        .send()
        .await
        .expect("the test, with the key, unwraps it")
        .plaintext
        .expect("plaintext");
    let text = logs.text();
    for form in [
        base64::engine::general_purpose::STANDARD.encode(plain_key.as_ref()),
        hex::encode(plain_key.as_ref()),
    ] {
        assert!(!text.contains(&form), "the epoch key is in the logs");
    }
    assert_absent(&text, &secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_moved_to_another_endpoint_does_not_open_and_nothing_is_sent() {
    let options = LocalOptions {
        max_receive_count: Some(2),
        ..fast_redelivery()
    };
    let (local, mut rx) = deployment("sealed-moved", options).await;
    let receiver = Receiver::start().await.expect("receiver");
    let a = add_endpoint(&local, "tnt_m", &receiver.url("/a"), &["order.a"], None).await;
    let b = add_endpoint(&local, "tnt_m", &receiver.url("/b"), &["order.b"], None).await;
    // The same endpoint id under another tenant: the tenant is bound too.
    let c = add_endpoint_with(
        &local,
        a.id.clone(),
        "tnt_other",
        &receiver.url("/c"),
        &["order.c"],
        None,
        None,
    )
    .await;
    // Someone with write access to the table copies A's sealed secret into B.
    let ddb = local.dynamodb();
    let table = &local.resources.endpoints_table;
    let key = |e: &Endpoint| {
        std::collections::HashMap::from([
            (
                "tenant_id".to_owned(),
                AttributeValue::S(e.tenant_id.to_string()),
            ),
            (
                "endpoint_id".to_owned(),
                AttributeValue::S(e.id.to_string()),
            ),
        ])
    };
    let item_a = ddb
        .get_item()
        .table_name(table)
        .set_key(Some(key(&a)))
        .send()
        .await
        .expect("get")
        .item
        .expect("item");
    for to in [&b, &c] {
        ddb.update_item()
            .table_name(table)
            .set_key(Some(key(to)))
            .update_expression("SET secrets = :s")
            .expression_attribute_values(":s", item_a["secrets"].clone())
            .send()
            .await
            .expect("copy");
    }

    // A fresh reader (no cache) gets the typed refusal; A itself still opens.
    let fresh = tern_aws::DynamoEndpointStore::new(ddb.clone(), table).with_secrets(
        tern_aws::kms::secrets_at_rest(
            &local.aws,
            Some(&local.resources.secrets_key_arn),
            Duration::ZERO,
        ),
    );
    match fresh.get(&b.tenant_id, &b.id).await {
        Err(PortError::Rejected(text)) => {
            assert!(
                text.contains("sealed for another one") && text.contains(b.id.as_str()),
                "{text}"
            );
        }
        other => panic!("a moved secret must not open: {other:?}"),
    }
    match fresh.get(&c.tenant_id, &c.id).await {
        Err(PortError::Rejected(text)) => {
            assert!(text.contains("sealed for another one"), "{text}");
        }
        other => panic!("a secret moved to another tenant must not open: {other:?}"),
    }
    assert!(fresh.get(&a.tenant_id, &a.id).await.expect("A").is_some());
    // The Plain store (no key) refuses sealed items with its own error.
    let keyless = tern_aws::DynamoEndpointStore::new(ddb.clone(), table);
    assert!(matches!(
        keyless.get(&a.tenant_id, &a.id).await,
        Err(PortError::Rejected(t)) if t.contains("no key")
    ));

    // A delivery to B: never sent, never charged to B; retried, then in the DLQ through
    // the queue's redrive (max receive count 2). A delivery to A goes through meanwhile.
    publish(&local, "order.b", "tnt_m", r#"{"to":"b"}"#).await;
    publish(&local, "order.a", "tnt_m", r#"{"to":"a"}"#).await;
    let error = batch_failure(&mut rx, "sealed for another one").await;
    assert!(error.contains(b.id.as_str()), "{error}");
    receiver.wait_for("/a", 1, Duration::from_secs(30)).await;
    let dead = eventually(Duration::from_secs(60), async || {
        !peek_queue(&local, &local.resources.dlq_url)
            .await
            .is_empty()
    })
    .await;
    assert!(dead, "the delivery to B ends in the DLQ");
    assert!(receiver.requests("/b").is_empty(), "nothing reached B");
    let health = tern_aws::DynamoHealthStore::new(ddb, &local.resources.health_table);
    let record = health.get(&b.tenant_id, &b.id).await.expect("health read");
    assert!(
        record.is_none_or(|h| h.consecutive_failures == 0 && h.last_failure.is_none()),
        "B's health is not charged for our failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kms_failing_at_the_sender_is_our_failure_and_the_delivery_goes_when_it_answers() {
    let proxy = moto_proxy().await;
    let (local, mut rx) = deployment_through(&proxy, "sealed-kms-down", fast_redelivery()).await;
    let receiver = Receiver::start().await.expect("receiver");
    // Written by another process (as the API does), so the sender has no key in memory
    // and must unwrap the keyring's epoch key.
    let ep = sealed_endpoint("tnt_k", &receiver.url("/k"));
    local.endpoint_table().put(&ep).await.expect("put");
    let kms = Service::Other("kms".into());
    let rule = proxy.add(Rule::on(kms.clone(), "Decrypt", Fault::ServerError));
    let event = publish(&local, "order.paid", "tnt_k", r#"{"n":1}"#).await;
    // The message fails as ours: left for SQS to retry, with the key service named.
    let error = batch_failure(&mut rx, "key service unavailable").await;
    assert!(error.contains(ep.id.as_str()), "{error}");
    assert!(proxy.fired(rule) >= 3, "each KMS call is retried (3 tries)");
    assert!(
        receiver.requests("/k").is_empty(),
        "no POST without secrets"
    );
    let health = tern_aws::DynamoHealthStore::new(local.dynamodb(), &local.resources.health_table);
    let record = health.get(&ep.tenant_id, &ep.id).await.expect("health");
    assert!(
        record.is_none_or(|h| h.consecutive_failures == 0 && h.last_failure.is_none()),
        "a KMS outage is not the receiver's failure"
    );
    proxy.remove(rule);
    let got = receiver.wait_for("/k", 1, Duration::from_secs(60)).await;
    verify_reference(&ep.secrets[0].secret, &got[0]).expect("verifies");
    assert_eq!(
        got[0].header("webhook-id").map(str::to_owned),
        Some(event.to_string()),
        "the event's delivery"
    );
    // The outage spent no attempt: it was delivered at attempt 1, and no row records a
    // failed attempt. When the failed receive had claimed the attempt before its endpoint
    // read failed (the read and the claim run together), the redelivery took that claim
    // over, and the row of that try says it was not sent and why, never "stopped before
    // recording" (tests/tests/mtls.rs makes that case every time).
    // The sender records the delivered row after the receiver answered: wait for it.
    let mut history = Vec::new();
    assert!(
        eventually(Duration::from_secs(30), async || {
            history = attempts_of(&local, &event, &ep).await;
            history.iter().any(|r| r.outcome == "delivered")
        })
        .await,
        "the delivered row: {history:?}"
    );
    for row in history
        .iter()
        .filter(|r| r.outcome == tern_core::ports::OUTCOME_ABANDONED)
    {
        let said = row.error.as_deref().unwrap_or_default();
        assert!(
            said.starts_with("not sent, our failure")
                && said.contains("could not be read")
                && !said.contains("arn:"),
            "{said}"
        );
    }
    assert!(
        history
            .iter()
            .any(|r| r.outcome == "delivered" && r.attempt == 1),
        "{history:?}"
    );
    assert!(
        history.iter().all(|r| r.attempt == 1
            && r.error_class.is_none()
            && r.status.is_none_or(|s| s == 200)),
        "{history:?}"
    );
}

/// A value sealed the first way (`tern1`): a KMS data key of its own under the endpoint's
/// encryption context, carried in the value, as every write made them before the keyring.
async fn sealed_the_old_way(local: &tern_local::LocalTern, ep: &Endpoint, plain: &str) -> String {
    let kms = tern_aws::KmsDataKeys::new(
        aws_sdk_kms::Client::new(&local.aws),
        &local.resources.secrets_key_arn,
        Duration::ZERO,
    );
    let context = SealContext::new(&ep.tenant_id, &ep.id);
    let key = kms.generate(&context).await.expect("data key");
    Sealed::seal(&key, &context, plain).expect("seal").to_text()
}

/// Replaces the stored `secrets[0].secret` of `ep` with `sealed`, as the first format
/// stored it.
async fn store_first_secret(local: &tern_local::LocalTern, ep: &Endpoint, sealed: &str) {
    local
        .dynamodb()
        .update_item()
        .table_name(&local.resources.endpoints_table)
        .key("tenant_id", AttributeValue::S(ep.tenant_id.to_string()))
        .key("endpoint_id", AttributeValue::S(ep.id.to_string()))
        .update_expression("SET secrets[0].secret = :v")
        .expression_attribute_values(
            ":v",
            AttributeValue::M(std::collections::HashMap::from([(
                "sealed".to_owned(),
                AttributeValue::S(sealed.to_owned()),
            )])),
        )
        .send()
        .await
        .expect("store the old format");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_and_first_format_items_are_read_and_encrypt_secrets_seals_them() {
    let (local, _rx) = deployment("sealed-upgrade", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    // Written as a deployment before sealing did: plain text.
    let before =
        tern_aws::DynamoEndpointStore::new(local.dynamodb(), &local.resources.endpoints_table);
    let mut ep = sealed_endpoint("tnt_u", &receiver.url("/u"));
    ep.auth = ReceiverAuth::Bearer {
        token: SecretValue::new("bearer-Up55-secret-value"),
    };
    before.put(&ep).await.expect("plain put");
    // And one sealed as a deployment before the keyring did (tern1).
    let old = sealed_endpoint("tnt_u", &receiver.url("/old"));
    before.put(&old).await.expect("put");
    store_first_secret(
        &local,
        &old,
        &sealed_the_old_way(&local, &old, old.secrets[0].secret.expose()).await,
    )
    .await;
    let secrets = [
        ep.secrets[0].secret.expose(),
        "bearer-Up55-secret-value",
        old.secrets[0].secret.expose(),
    ];
    let table = raw_table_text(&local).await;
    assert!(table.contains("bearer-Up55-secret-value"), "plain before");
    assert!(table.contains("tern1."), "the first format before");
    assert_absent(&table, &secrets[2..]);

    // The sealing sender reads both as they are.
    publish(&local, "order.paid", "tnt_u", r#"{"n":1}"#).await;
    let got = receiver.wait_for("/u", 1, Duration::from_secs(30)).await;
    verify_reference(&ep.secrets[0].secret, &got[0]).expect("verifies");
    let got = receiver.wait_for("/old", 1, Duration::from_secs(30)).await;
    verify_reference(&old.secrets[0].secret, &got[0]).expect("the tern1 secret verifies");

    // One run seals both under the keyring's epoch; a second finds nothing to do.
    let sealing = local.endpoint_table();
    let report = sealing.seal_stored().await.expect("seal");
    assert_eq!(
        (
            report.epoch,
            report.scanned,
            report.sealed,
            report.unreadable
        ),
        (1, 2, 2, 0),
        "{report:?}"
    );
    let again = sealing.seal_stored().await.expect("seal again");
    assert_eq!((again.sealed, again.already_sealed), (0, 2), "{again:?}");
    let table = raw_table_text(&local).await;
    assert_absent(&table, &secrets);
    assert!(!table.contains("tern1."), "re-sealed: {table}");
    for expected in [&ep, &old] {
        let back = sealing
            .get(&expected.tenant_id, &expected.id)
            .await
            .expect("read")
            .expect("there");
        assert_eq!(&back, expected, "sealing changed nothing else");
    }

    publish(&local, "order.paid", "tnt_u", r#"{"n":2}"#).await;
    let got = receiver.wait_for("/u", 2, Duration::from_secs(30)).await;
    verify_reference(&ep.secrets[0].secret, &got[1]).expect("verifies after sealing");
    assert_eq!(
        got[1].header("authorization"),
        Some("Bearer bearer-Up55-secret-value")
    );
    let got = receiver.wait_for("/old", 2, Duration::from_secs(30)).await;
    verify_reference(&old.secrets[0].secret, &got[1]).expect("verifies after re-sealing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_keeps_every_secret_readable_and_encrypt_secrets_moves_them_to_it() {
    let (local, _rx) = deployment("sealed-rotation", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    let tenant = "tnt_r";
    // Two writers (two API instances): both seal under epoch 1.
    let (writer, other_writer) = (local.endpoint_table(), local.endpoint_table());
    let mut first = sealed_endpoint(tenant, &receiver.url("/r1"));
    first.auth = ReceiverAuth::Bearer {
        token: SecretValue::new("bearer-Rt71-secret-value"),
    };
    writer.put(&first).await.expect("put");
    let second = sealed_endpoint(tenant, &receiver.url("/r2"));
    other_writer.put(&second).await.expect("put");
    let plain = sealed_endpoint(tenant, &receiver.url("/r3"));
    tern_aws::DynamoEndpointStore::new(local.dynamodb(), &local.resources.endpoints_table)
        .put(&plain)
        .await
        .expect("plain put");

    // The operator rotates: epoch 2. The rotating writer seals under it at once; the
    // other keeps epoch 1 until it looks again (5 minutes): both stay readable.
    let epoch = writer
        .keyring()
        .expect("a sealing store")
        .rotate()
        .await
        .expect("rotate");
    assert_eq!(epoch.get(), 2);
    let after = sealed_endpoint(tenant, &receiver.url("/r4"));
    writer.put(&after).await.expect("put");
    let rotated = tern_ops::rotate_secret(&other_writer, &second.tenant_id, &second.id, 24)
        .await
        .expect("rotate the second endpoint's secret");
    let table = raw_table_text(&local).await;
    assert!(
        table.contains("tern2.1.") && table.contains("tern2.2."),
        "both epochs in use: {table}"
    );
    let secrets = [
        first.secrets[0].secret.expose(),
        "bearer-Rt71-secret-value",
        second.secrets[0].secret.expose(),
        rotated.expose(),
        after.secrets[0].secret.expose(),
    ];
    assert_absent(&table, &secrets);

    // Every endpoint gets the event, signed with its own secrets.
    let deliver = async |n: usize| {
        publish(&local, "order.paid", tenant, &format!(r#"{{"n":{n}}}"#)).await;
        for (path, ep) in [
            ("/r1", &first),
            ("/r2", &second),
            ("/r3", &plain),
            ("/r4", &after),
        ] {
            let got = receiver.wait_for(path, n, Duration::from_secs(60)).await;
            verify_reference(&ep.secrets[0].secret, &got[n - 1])
                .unwrap_or_else(|e| panic!("{path}: {e:?}"));
        }
        let got = receiver.requests("/r2");
        verify_reference(&rotated, &got[n - 1]).expect("the rotated secret signs too");
        assert_eq!(
            receiver.requests("/r1")[n - 1].header("authorization"),
            Some("Bearer bearer-Rt71-secret-value")
        );
    };
    deliver(1).await;

    // encrypt-secrets moves everything to epoch 2; nothing plain, nothing of epoch 1.
    let report = local.endpoint_table().seal_stored().await.expect("seal");
    assert_eq!(
        (
            report.epoch,
            report.scanned,
            report.sealed,
            report.already_sealed
        ),
        (2, 4, 3, 1),
        "{report:?}"
    );
    let table = raw_table_text(&local).await;
    assert!(!table.contains("tern2.1."), "{table}");
    assert_absent(&table, &secrets);
    assert_absent(&table, &[plain.secrets[0].secret.expose()]);
    deliver(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_sender_unwraps_one_key_for_two_hundred_endpoints() {
    // Scaled time: the endpoint cache keeps an endpoint 30 ms, so the sender reads every
    // endpoint from the table; the epoch key stays (1 hour, unscaled).
    let proxy = moto_proxy().await;
    let (local, _rx) = deployment_through(&proxy, "sealed-kms-count", fast()).await;
    let receiver = Receiver::start().await.expect("receiver");
    let kms = Service::Other("kms".into());
    // Four writers (API instances, `tern`), 50 endpoints each, in four tenants.
    let (tenants, per_tenant) = (4, 50);
    let mut endpoints = Vec::new();
    for t in 0..tenants {
        let writer = local.endpoint_table();
        for _ in 0..per_tenant {
            let mut ep = sealed_endpoint(&format!("tnt_c{t}"), "https://unset.invalid/");
            ep.url = receiver.url(&format!("/c/{}", ep.id));
            writer.put(&ep).await.expect("put");
            endpoints.push(ep);
        }
    }
    let generated = proxy.count(&kms, "GenerateDataKey");
    assert_eq!(
        generated,
        1,
        "one key (the keyring's first epoch) for {} endpoints, not one per write",
        endpoints.len()
    );
    let decrypts_before = proxy.count(&kms, "Decrypt");
    let reads_before = proxy.count(&Service::DynamoDb, "GetItem");
    for t in 0..tenants {
        publish(&local, "order.paid", &format!("tnt_c{t}"), r#"{"n":1}"#).await;
    }
    let all = eventually(Duration::from_secs(180), async || {
        receiver.all_requests().len() >= endpoints.len()
    })
    .await;
    assert!(
        all,
        "{} of {} delivered",
        receiver.all_requests().len(),
        endpoints.len()
    );
    for ep in &endpoints {
        let got = receiver.requests(&format!("/c/{}", ep.id));
        assert_eq!(got.len(), 1, "{}", ep.id);
        verify_reference(&ep.secrets[0].secret, &got[0]).expect("verifies");
    }
    let decrypts = proxy.count(&kms, "Decrypt") - decrypts_before;
    let reads = proxy.count(&Service::DynamoDb, "GetItem") - reads_before;
    println!(
        "KMS: {generated} GenerateDataKey to write {} endpoints, {decrypts} Decrypt to deliver \
         to them ({reads} GetItem meanwhile)",
        endpoints.len()
    );
    assert!(
        reads >= endpoints.len(),
        "the sender read every endpoint from the table ({reads} GetItem)"
    );
    assert_eq!(
        decrypts,
        1,
        "one Decrypt (the epoch key) for {} endpoints, not one per endpoint",
        endpoints.len()
    );
}
