//! Issue 20, item 3: mutual TLS. A receiver on 127.0.0.1 (rustls) that REQUIRES a client
//! certificate issued by its own certificate authority (made here with rcgen); the
//! endpoint's certificate and key live in Secrets Manager (moto), referenced by ARN; the
//! sender handler reads it and offers it.
//!
//! - With the certificate: delivered, the receiver saw that certificate, the signature
//!   verifies with the reference verifier.
//! - Without one, or with a certificate from another authority: the attempt fails with the
//!   `tls` error class (the receiver's refusal), retried on the schedule.
//! - The secret store failing (a secret that does not exist) is our failure: no attempt
//!   (the log's row for it says "not sent" and why), the message left for SQS to retry.
//! - The PEM (certificate and key) never appears in a log line at TRACE.
//! - The API's test send (and so the portal's) offers the certificate as the sender does;
//!   a certificate that cannot be read or used is a `client-certificate-unusable` problem,
//!   nothing sent, and the store's own text is not in it.
//! - Issue 27: a tenant can never present another tenant's certificate. The API refuses a
//!   secret outside the caller's own `tern/mtls/<tenant id>/` with the same answer whether it
//!   exists or not, and an endpoint stored naming one (written before the rule, or around
//!   the API) is refused by the sender and the test send before the secret is read.
//! - Issue 29: a warm sender reads a certificate's secret once an hour, and again early
//!   (at most every 5 minutes) after a receiver refused a handshake with it, so a
//!   certificate rotated in Secrets Manager reaches a receiver that already expects it
//!   (the test's clock moves; nothing sleeps).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tern_core::client_certificate::ClientCertificate;
use tern_core::ports::EndpointStore as _;
use tern_core::{DeliveryMessage, Endpoint, EndpointId, ErrorClass, Secret, TenantId};
use tern_handlers::metrics::{Metrics, MetricsSink};
use tern_handlers::sender::{MessageOutcome, SenderDeps};
use tern_http::{ClientOptions, DestinationPolicy, StaticLookup};
use tern_local::LocalOptions;
use tern_local::receiver::Captured;
use tern_tests::api::ApiClient;
use tern_tests::*;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

const HOST: &str = "mtls.test";

/// A certificate authority made for this test.
fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
}

/// A client certificate issued by `ca`, as the PEM text a Secrets Manager secret holds:
/// the chain (leaf, then the CA), then the PKCS #8 key.
fn client_pem(
    ca: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
) -> (String, CertificateDer<'static>) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, ca).expect("client certificate");
    let pem = format!("{}{}{}", cert.pem(), ca.pem(), key.serialize_pem());
    (pem, cert.der().clone())
}

/// What the receiver saw: each request, with the client certificate of its connection.
#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<(Captured, Option<CertificateDer<'static>>)>>,
    handshakes_refused: std::sync::atomic::AtomicUsize,
}

/// An HTTPS receiver on 127.0.0.1 for [`HOST`] that requires a client certificate issued
/// by `client_ca`; answers 200 to every request.
async fn mtls_receiver(
    server_ca: &CertifiedIssuer<'static, KeyPair>,
    client_ca: &CertifiedIssuer<'static, KeyPair>,
) -> (u16, Arc<Seen>) {
    let leaf_key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec![HOST.to_owned()])
        .expect("params")
        .signed_by(&leaf_key, server_ca)
        .expect("server certificate");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut client_roots = rustls::RootCertStore::empty();
    client_roots
        .add(client_ca.der().clone())
        .expect("client CA");
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(client_roots),
        provider.clone(),
    )
    .build()
    .expect("verifier that requires a client certificate");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Seen::default());
    let state = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = state.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    seen.handshakes_refused
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return;
                };
                let peer = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first().cloned())
                    .map(CertificateDer::into_owned);
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let seen = seen.clone();
                        let peer = peer.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let captured = Captured {
                                method: parts.method.to_string(),
                                path: parts.uri.path().to_owned(),
                                headers: parts
                                    .headers
                                    .iter()
                                    .map(|(n, v)| {
                                        (
                                            n.as_str().to_owned(),
                                            v.to_str().unwrap_or_default().to_owned(),
                                        )
                                    })
                                    .collect(),
                                body,
                                at: chrono::Utc::now(),
                                answered: 200,
                            };
                            seen.requests.lock().expect("lock").push((captured, peer));
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(Bytes::from_static(b"ok")),
                            ))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, seen)
}

/// The deployment's sender with [`client`].
fn sender(
    local: &tern_local::LocalTern,
    server_ca: &CertifiedIssuer<'static, KeyPair>,
) -> SenderDeps {
    SenderDeps {
        client: client(local, server_ca),
        ..(*local.sender).clone()
    }
}

/// A delivery client trusting the test authority, resolving [`HOST`] to 127.0.0.1,
/// reading client certificates from moto's Secrets Manager.
fn client(
    local: &tern_local::LocalTern,
    server_ca: &CertifiedIssuer<'static, KeyPair>,
) -> tern_http::DeliveryClient {
    bare_client(server_ca).with_certificate_secrets(Arc::new(
        tern_aws::certificates::SecretsManagerCertificates::new(
            aws_sdk_secretsmanager::Client::new(&local.aws),
        ),
    ))
}

/// [`client`] without a secret store.
fn bare_client(server_ca: &CertifiedIssuer<'static, KeyPair>) -> tern_http::DeliveryClient {
    tern_http::test_support::client_trusting(
        ClientOptions {
            policy: DestinationPolicy {
                https_only: true,
                allow: vec!["127.0.0.1/32".parse().expect("net")],
                nat64: false,
            },
            lookup: Arc::new(StaticLookup {
                hosts: vec![(HOST.to_owned(), vec!["127.0.0.1".parse().expect("ip")])],
            }),
            ..ClientOptions::default()
        },
        vec![server_ca.der().clone()],
    )
    .expect("client")
}

async fn put_secret(local: &tern_local::LocalTern, name: &str, pem: &str) -> String {
    aws_sdk_secretsmanager::Client::new(&local.aws)
        .create_secret()
        .name(name)
        .secret_string(pem)
        .send()
        .await
        .expect("create secret")
        .arn
        .expect("arn")
}

/// The tenant of this file's endpoints.
const TENANT: &str = "tnt_mtls";

/// The name of a secret of [`TENANT`]'s: under its own prefix.
fn own(name: &str) -> String {
    format!("tern/mtls/{TENANT}/{name}")
}

async fn endpoint(local: &tern_local::LocalTern, port: u16, certificate: Option<&str>) -> Endpoint {
    let tenant = TenantId::new(TENANT).expect("tenant");
    let mut e = unchecked_endpoint(port, &tenant);
    e.client_certificate =
        certificate.map(|arn| ClientCertificate::new(arn, &tenant).expect("valid ARN"));
    e.validate().expect("valid endpoint");
    local.endpoint_table().put(&e).await.expect("put");
    e
}

/// An endpoint of `tenant` to the receiver on `port`, not yet stored.
fn unchecked_endpoint(port: u16, tenant: &TenantId) -> Endpoint {
    let mut e = Endpoint::new(
        EndpointId::generate(),
        tenant.clone(),
        format!("https://{HOST}:{port}/hook"),
        vec!["*".into()],
        Secret::generate(),
        chrono::Utc::now(),
    );
    e.max_attempts = Some(3);
    e
}

/// One delivery of a new event to `endpoint` through the sender handler.
async fn deliver(
    deps: &SenderDeps,
    endpoint: &Endpoint,
) -> (tern_core::EventId, Result<MessageOutcome, String>) {
    let event = tern_outbox::OutboxWriter::new("unused")
        .prepare(
            "order.paid",
            endpoint.tenant_id.as_str(),
            r#"{"n":1}"#.to_owned(),
        )
        .expect("event")
        .event;
    let id = event.id.clone();
    let body = DeliveryMessage::first(event, endpoint.id.clone()).to_body();
    let metrics = Metrics::new("Tern", MetricsSink::Discard);
    let (_, mut results) = tern_handlers::sender::handle(deps, sqs_event(&[body]), &metrics).await;
    (id, results.remove(0).1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_requires_a_client_certificate_gets_it_and_refuses_others() {
    let logs = capture_logs();
    let local = deployment_without_pollers("mtls", LocalOptions::default()).await;
    let (server_ca, client_ca, stranger_ca) = (
        authority("receiver CA"),
        authority("receiver's client CA"),
        authority("someone else's CA"),
    );
    let (port, seen) = mtls_receiver(&server_ca, &client_ca).await;
    let (pem, leaf) = client_pem(&client_ca, "tern-client");
    let (stranger_pem, _) = client_pem(&stranger_ca, "tern-client");
    let good_arn = put_secret(&local, &own("acme"), &pem).await;
    let stranger_arn = put_secret(&local, &own("stranger"), &stranger_pem).await;
    let deps = sender(&local, &server_ca);

    // With its certificate: delivered; the receiver saw that certificate.
    let ep = endpoint(&local, port, Some(&good_arn)).await;
    assert_eq!(
        deliver(&deps, &ep).await.1,
        Ok(MessageOutcome::Delivered { attempt: 1 })
    );
    let requests = seen.requests.lock().expect("lock").clone();
    assert_eq!(requests.len(), 1);
    let (request, peer) = &requests[0];
    assert_eq!(
        peer.as_ref(),
        Some(&leaf),
        "the endpoint's certificate was offered"
    );
    verify_reference(&ep.secrets[0].secret, request).expect("the signature verifies");

    // Without a certificate, and with one the receiver does not trust: refused in the TLS
    // handshake, a `tls` failure of the attempt, retried on the schedule.
    for (what, certificate) in [
        ("none", None),
        ("a stranger's", Some(stranger_arn.as_str())),
    ] {
        let ep = endpoint(&local, port, certificate).await;
        let (event, outcome) = deliver(&deps, &ep).await;
        assert!(
            matches!(outcome, Ok(MessageOutcome::Retrying { attempt: 1, .. })),
            "{what}: {outcome:?}"
        );
        let history = attempts_of(&local, &event, &ep).await;
        assert_eq!(history.len(), 1, "{what}: {history:?}");
        assert_eq!(
            history[0].error_class,
            Some(ErrorClass::Tls),
            "{what}: the receiver's refusal is a TLS failure: {:?}",
            history[0].error
        );
    }
    assert_eq!(
        seen.requests.lock().expect("lock").len(),
        1,
        "nothing got past the handshake"
    );
    assert!(
        seen.handshakes_refused
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2,
        "the receiver refused the handshakes"
    );

    // The PEM never reaches a log line (the key's base64 body, the certificate's).
    let text = logs.text();
    for line in pem
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 40)
    {
        assert!(
            !text.contains(line),
            "a line of the client certificate secret is in the logs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_secret_store_is_our_failure_not_the_receivers() {
    let local = deployment_without_pollers("mtls-missing", LocalOptions::default()).await;
    let (server_ca, client_ca) = (authority("receiver CA"), authority("client CA"));
    let (port, seen) = mtls_receiver(&server_ca, &client_ca).await;
    let deps = sender(&local, &server_ca);
    // A valid ARN under the prefix whose secret does not exist.
    let ep = endpoint(
        &local,
        port,
        Some("arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_mtls/missing-AbCdEf"),
    )
    .await;
    let (event, outcome) = deliver(&deps, &ep).await;
    // Not a batch failure left to SQS's visibility timeout (360 s): the same attempt goes
    // back on the queue on our own short schedule, no attempt spent.
    assert!(
        matches!(outcome, Ok(MessageOutcome::Requeued { attempt: 1, .. })),
        "{outcome:?}"
    );
    assert!(seen.requests.lock().expect("lock").is_empty());
    assert_eq!(
        seen.handshakes_refused
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no connection"
    );
    // No attempt was made: the log says so, and why, in the attempt's one row.
    let history = attempts_of(&local, &event, &ep).await;
    assert_eq!(history.len(), 1, "{history:?}");
    let row = &history[0];
    assert_eq!(row.outcome, tern_core::ports::OUTCOME_ABANDONED);
    assert_eq!((row.status, row.error_class), (None, None), "{row:?}");
    let said = row.error.as_deref().unwrap_or_default();
    assert!(
        said.starts_with("not sent, our failure") && said.contains("client certificate"),
        "{said}"
    );
    // A fixed text: the customer portal shows this row, and the store's error names the
    // secret's ARN (the account) and, when refused, the role.
    assert!(
        !said.contains("arn:") && !said.contains("123456789012"),
        "{said}"
    );
    let health = tern_aws::DynamoHealthStore::new(local.dynamodb(), &local.resources.health_table);
    let record = tern_core::health::HealthStore::get(&health, &ep.tenant_id, &ep.id)
        .await
        .expect("health read");
    assert!(
        record.is_none_or(|h| h.consecutive_failures == 0 && h.last_failure.is_none()),
        "the receiver's health is not charged"
    );
}

fn test_path(endpoint: &Endpoint) -> String {
    format!(
        "/v1/tenants/{}/endpoints/{}/test",
        endpoint.tenant_id, endpoint.id
    )
}

/// The API's test send (the portal's "Send test event" calls the same route) offers the
/// endpoint's client certificate: a receiver that requires one gets it, verifies the
/// signature, and an endpoint without it is refused in the handshake (a `tls` result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_send_offers_the_client_certificate() {
    let local = deployment_without_pollers("mtls-test-send", LocalOptions::default()).await;
    let (server_ca, client_ca) = (authority("receiver CA"), authority("client CA"));
    let (port, seen) = mtls_receiver(&server_ca, &client_ca).await;
    let (pem, leaf) = client_pem(&client_ca, "tern-client");
    let arn = put_secret(&local, &own("test-send"), &pem).await;
    let mut deps = tern_local::api::deps(&local).expect("deps");
    // The deployment's wiring, with a client that trusts the test authority and finds
    // mtls.test on 127.0.0.1.
    deps.client = client(&local, &server_ca);
    let (api, _server) = ApiClient::serve(deps);

    let ep = endpoint(&local, port, Some(&arn)).await;
    let answer = api.post(&test_path(&ep), &serde_json::json!({})).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["delivered"], true, "{}", answer.text);
    let requests = seen.requests.lock().expect("lock").clone();
    assert_eq!(requests.len(), 1);
    let (request, peer) = &requests[0];
    assert_eq!(peer.as_ref(), Some(&leaf), "the certificate was offered");
    verify_reference(&ep.secrets[0].secret, request).expect("the signature verifies");

    let bare = endpoint(&local, port, None).await;
    let answer = api.post(&test_path(&bare), &serde_json::json!({})).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json["delivered"], false, "{}", answer.text);
    assert_eq!(answer.json["error_class"], "tls", "{}", answer.text);
    assert_eq!(seen.requests.lock().expect("lock").len(), 1);
}

/// Through the deployment's own wiring (`tern_api::aws::api_deps`): a certificate secret
/// that does not exist, or that holds no certificate, is a 409
/// `client-certificate-unusable` with a fixed text (not the store's, which can name the
/// role and account), and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_send_with_an_unusable_certificate_is_a_clear_problem() {
    let local = deployment_without_pollers("mtls-test-unusable", LocalOptions::default()).await;
    let (server_ca, client_ca) = (authority("receiver CA"), authority("client CA"));
    let (port, seen) = mtls_receiver(&server_ca, &client_ca).await;
    let not_pem = put_secret(&local, &own("not-pem"), "hunter2, not a certificate").await;
    let (api, _server) = ApiClient::serve(tern_local::api::deps(&local).expect("deps"));
    for (what, arn) in [
        (
            "a missing secret",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_mtls/missing-AbCdEf",
        ),
        ("a secret that is not PEM", not_pem.as_str()),
    ] {
        let ep = endpoint(&local, port, Some(arn)).await;
        let answer = api.post(&test_path(&ep), &serde_json::json!({})).await;
        assert_eq!(answer.status, 409, "{what}: {}", answer.text);
        assert_eq!(answer.problem(), "client-certificate-unusable", "{what}");
        for leak in ["ResourceNotFound", "hunter2", "123456789012"] {
            assert!(
                !answer.text.contains(leak),
                "{what}: {leak} in {}",
                answer.text
            );
        }
    }
    assert!(seen.requests.lock().expect("lock").is_empty());
    assert_eq!(
        seen.handshakes_refused
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no connection"
    );
}

/// Issue 27, attack 1: tenant `tnt_mtls` (the attacker) names tenant `tnt_victim`'s client
/// certificate secret for an endpoint pointed at its own receiver, which asks for a client
/// certificate from the victim's authority. Before the fix, the API created it (201) and
/// the test send and every delivery presented the victim's certificate, proving its key to
/// the attacker; a missing secret answered 409 where an existing one answered 201.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_client_certificate_is_never_presented() {
    let local = deployment_without_pollers("mtls-foreign", LocalOptions::default()).await;
    let (server_ca, victim_ca) = (authority("receiver CA"), authority("victim's client CA"));
    // The attacker's receiver trusts the victim's authority: it would see the certificate.
    let (port, seen) = mtls_receiver(&server_ca, &victim_ca).await;
    let (victim_pem, _) = client_pem(&victim_ca, "victim-client");
    let victim_arn = put_secret(&local, "tern/mtls/tnt_victim/client", &victim_pem).await;
    let missing_arn =
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_victim/nothing-AbCdEf";
    let mut deps = tern_local::api::deps(&local).expect("deps");
    deps.client = client(&local, &server_ca);
    let (api, _server) = ApiClient::serve(deps);

    // Through the API: refused, the same answer for the existing and the missing secret
    // (the detail repeats the name given, nothing else differs).
    let create = async |arn: &str| {
        let answer = api
            .post(
                &format!("/v1/tenants/{TENANT}/endpoints"),
                &serde_json::json!({
                    "url": format!("https://{HOST}:{port}/hook"),
                    "client_certificate_arn": arn,
                }),
            )
            .await;
        // The detail repeats the secret's name given: blank it to compare the rest.
        let name = arn.rsplit_once(":secret:").map_or(arn, |(_, n)| n);
        (
            answer.status,
            answer.field().to_owned(),
            answer.text.replace(arn, "<arn>").replace(name, "<name>"),
        )
    };
    let existing = create(&victim_arn).await;
    let missing = create(missing_arn).await;
    assert_eq!(
        (existing.0, existing.1.as_str()),
        (400, "client_certificate_arn"),
        "another tenant's secret is refused: {}",
        existing.2
    );
    assert!(existing.2.contains("tern/mtls/tnt_mtls/"), "{}", existing.2);
    assert_eq!(
        existing, missing,
        "existing and missing get the same answer"
    );
    let mine = api.get(&format!("/v1/tenants/{TENANT}/endpoints")).await;
    assert_eq!(mine.status, 200, "{}", mine.text);
    assert_eq!(
        mine.json["items"].as_array().map(Vec::len),
        Some(0),
        "{}",
        mine.text
    );

    // Stored naming the victim's secret (before the rule, or around the API): the sender
    // and the test send refuse it before reading the secret, as they refuse a missing
    // one; nothing reaches the receiver.
    let tenant = TenantId::new(TENANT).expect("tenant");
    let mut stored = unchecked_endpoint(port, &tenant);
    stored.client_certificate = Some(ClientCertificate {
        secret_arn: victim_arn.clone(),
    });
    local.endpoint_table().put(&stored).await.expect("put");
    let (event, outcome) = deliver(&sender(&local, &server_ca), &stored).await;
    assert!(
        matches!(outcome, Ok(MessageOutcome::Requeued { attempt: 1, .. })),
        "not sent, our failure: {outcome:?}"
    );
    let history = attempts_of(&local, &event, &stored).await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].outcome, tern_core::ports::OUTCOME_ABANDONED);
    let foreign = api.post(&test_path(&stored), &serde_json::json!({})).await;
    let mut own_missing = unchecked_endpoint(port, &tenant);
    own_missing.client_certificate = Some(
        ClientCertificate::new(
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/tnt_mtls/nothing-AbCdEf",
            &tenant,
        )
        .expect("own prefix"),
    );
    local.endpoint_table().put(&own_missing).await.expect("put");
    let missing = api
        .post(&test_path(&own_missing), &serde_json::json!({}))
        .await;
    assert_eq!(foreign.status, 409, "{}", foreign.text);
    assert_eq!(foreign.problem(), "client-certificate-unusable");
    assert_eq!(
        (foreign.status, foreign.text.clone()),
        (missing.status, missing.text.clone()),
        "a foreign secret and a missing one get the same test-send answer"
    );
    assert!(
        seen.requests.lock().expect("lock").is_empty(),
        "the victim's certificate reached the attacker's receiver"
    );
    assert_eq!(
        seen.handshakes_refused
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no connection at all"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_is_read_once_an_hour_and_again_after_a_refused_handshake() {
    let proxy = moto_proxy().await;
    let local =
        deployment_through_without_pollers(&proxy, "mtls-cache", LocalOptions::default()).await;
    let (server_ca, old_ca, new_ca) = (
        authority("receiver CA"),
        authority("old client CA"),
        authority("new client CA"),
    );
    // One receiver trusts the old authority, the other the new one.
    let (old_port, old_seen) = mtls_receiver(&server_ca, &old_ca).await;
    let (new_port, new_seen) = mtls_receiver(&server_ca, &new_ca).await;
    let (old_pem, old_leaf) = client_pem(&old_ca, "tern-client");
    let (new_pem, new_leaf) = client_pem(&new_ca, "tern-client");
    let arn = put_secret(&local, &own("rotating"), &old_pem).await;
    let clock = Arc::new(tern_core::clock::ManualClock::default());
    let deps = SenderDeps {
        client: bare_client(&server_ca).with_certificate_secrets_and_clock(
            Arc::new(tern_aws::certificates::SecretsManagerCertificates::new(
                aws_sdk_secretsmanager::Client::new(&local.aws),
            )),
            clock.clone(),
        ),
        ..(*local.sender).clone()
    };
    let to_old = endpoint(&local, old_port, Some(&arn)).await;
    let to_new = endpoint(&local, new_port, Some(&arn)).await;
    // Reads of the certificate's secret on the wire, from here on (the deployment's
    // creation reads the portal's key ring).
    let secrets = tern_tests::fault_proxy::Service::Other("secretsmanager".into());
    let before = proxy.count(&secrets, "GetSecretValue");
    let reads = || proxy.count(&secrets, "GetSecretValue") - before;
    let delivered = Ok(MessageOutcome::Delivered { attempt: 1 });
    let minutes = |n: u64| std::time::Duration::from_secs(n * 60);

    // Read once and kept for the hour.
    assert_eq!(deliver(&deps, &to_old).await.1, delivered);
    assert_eq!(reads(), 1);
    clock.advance(minutes(59));
    assert_eq!(deliver(&deps, &to_old).await.1, delivered);
    assert_eq!(reads(), 1, "59 minutes later, no second read");
    clock.advance(minutes(2));
    assert_eq!(deliver(&deps, &to_old).await.1, delivered);
    assert_eq!(reads(), 2, "read again after the hour");

    // The certificate is rotated in Secrets Manager. A receiver that expects the new one
    // refuses the one in memory (a TLS failure of the attempt); the next use reads the
    // secret again, well before the hour is out.
    aws_sdk_secretsmanager::Client::new(&local.aws)
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(&new_pem)
        .send()
        .await
        .expect("rotate the secret");
    clock.advance(minutes(10));
    let (event, outcome) = deliver(&deps, &to_new).await;
    assert!(
        matches!(outcome, Ok(MessageOutcome::Retrying { attempt: 1, .. })),
        "{outcome:?}"
    );
    let history = attempts_of(&local, &event, &to_new).await;
    assert_eq!(history[0].error_class, Some(ErrorClass::Tls), "{history:?}");
    assert_eq!(reads(), 2, "the refusal alone reads nothing");
    assert_eq!(deliver(&deps, &to_new).await.1, delivered);
    assert_eq!(reads(), 3, "read again after the refused handshake");
    let seen = new_seen.requests.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].1.as_ref(), Some(&new_leaf), "the new certificate");
    assert!(
        old_seen
            .requests
            .lock()
            .expect("lock")
            .iter()
            .all(|(_, peer)| peer.as_ref() == Some(&old_leaf)),
        "the old receiver saw the old certificate only"
    );

    // A receiver that refuses every handshake (the old one, now offered the new
    // certificate) costs at most one read per 5 minutes.
    for _ in 0..3 {
        let (_, outcome) = deliver(&deps, &to_old).await;
        assert!(
            matches!(outcome, Ok(MessageOutcome::Retrying { .. })),
            "{outcome:?}"
        );
    }
    assert_eq!(reads(), 3, "read less than 5 minutes ago: kept");
    clock.advance(minutes(5));
    let (_, outcome) = deliver(&deps, &to_old).await;
    assert!(
        matches!(outcome, Ok(MessageOutcome::Retrying { .. })),
        "{outcome:?}"
    );
    assert_eq!(reads(), 4, "5 minutes on, read once more");
}
