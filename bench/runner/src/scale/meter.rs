//! The recording proxy: an HTTP/1.1 proxy on 127.0.0.1 in front of the local AWS (moto)
//! that records every request. Each listener has a label naming its caller (`relay`,
//! `sender-0`, `sender-1`, ..., `esm` for the event source mappings, `app` for the
//! application's outbox writes), so each sender process is one warm instance.
//!
//! For each request it records the service and operation (the `X-Amz-Target` header of the
//! JSON protocols, or the `Action` of the query protocol with the service from the SigV4
//! credential scope), the table or queue, the ids of the scenario the body names (see
//! [`super::keys`]), and:
//! - DynamoDB: the capacity units per partition key of the table and of each global
//!   secondary index, from the item facts the local AWS reports when asked with
//!   `x-tern-meter: 1` (`tools/moto_server.py` fix 9; the header is removed from the answer
//!   before the caller sees it) and DynamoDB's billing rules ([`super::units`]);
//! - SQS: the messages a request carries (batch entries) or received;
//! - fetches a warm process may cache (`GetItem` and `BatchGetItem` keys, a `Query`'s
//!   first page, KMS `Decrypt`, Secrets Manager `GetSecretValue`): what was fetched, so the
//!   analysis can tell a cache from a per-delivery read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Response, StatusCode};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::keys::{Ids, Mentions};
use super::units::{Charge, Facts, charges};

/// The request header that asks the local AWS for its billing facts, and the answer
/// header that carries them.
pub const METER_HEADER: &str = "x-tern-meter";

/// A fetch a warm process may serve from memory the next time.
#[derive(Debug, Clone)]
pub struct Fetch {
    /// What kind of fetch: `dynamodb:GetItem <table>`, `kms:Decrypt`, ...
    pub class: String,
    /// What was fetched (a key, a wrapped data key, a secret name).
    pub item: String,
    /// The scenario ids the fetched item names.
    pub mentions: Mentions,
}

/// One request as recorded.
#[derive(Debug, Clone)]
pub struct Record {
    /// Seconds since the proxy started.
    pub at: f64,
    /// The caller's label.
    pub caller: String,
    /// `service:Operation`.
    pub op: String,
    /// HTTP status of the answer.
    pub status: u16,
    /// The error an answer of 400 or more named (`ConditionalCheckFailedException`).
    pub error: Option<String>,
    /// Table, queue, secret or key named by the request.
    pub resource: Option<String>,
    /// DynamoDB capacity units charged, per partition key.
    pub charges: Vec<Charge>,
    /// SQS messages sent, deleted or received by the request.
    pub messages: u32,
    /// Cacheable fetches.
    pub fetches: Vec<Fetch>,
    /// The scenario ids the request body names.
    pub mentions: Mentions,
}

#[derive(Clone)]
struct Shared {
    upstream: String,
    http: reqwest::Client,
    records: Arc<Mutex<Vec<Record>>>,
    ids: Arc<RwLock<Ids>>,
    started: Instant,
}

/// A running recording proxy with one listener per label. Stops when dropped.
pub struct Meter {
    urls: BTreeMap<String, String>,
    records: Arc<Mutex<Vec<Record>>>,
    ids: Arc<RwLock<Ids>>,
    started: Instant,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Meter {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The service and operation of a request (`dynamodb:GetItem`, `sns:Publish`).
pub fn operation(headers: &HeaderMap, body: &[u8]) -> String {
    if let Some(target) = headers.get("x-amz-target").and_then(|v| v.to_str().ok())
        && let Some((service, op)) = target.split_once('.')
    {
        let service = match service {
            s if s.starts_with("DynamoDBStreams") => "streams",
            s if s.starts_with("DynamoDB") => "dynamodb",
            "AmazonSQS" => "sqs",
            "AWSStepFunctions" => "states",
            "TrentService" => "kms",
            "secretsmanager" => "secretsmanager",
            other => other,
        };
        return format!("{service}:{op}");
    }
    // The query protocol (SNS): the service is the SigV4 scope's
    // (`Credential=<key>/<date>/<region>/<service>/aws4_request`).
    let service = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1))
        .and_then(|c| c.split('/').nth(3))
        .unwrap_or("unknown")
        .to_owned();
    let text = String::from_utf8_lossy(body);
    let action = text
        .split('&')
        .find_map(|kv| kv.strip_prefix("Action="))
        .unwrap_or("unknown");
    format!("{service}:{action}")
}

/// The last path segment of an SQS queue URL: its name.
fn queue_name(url: &str) -> String {
    url.rsplit('/').next().unwrap_or(url).to_owned()
}

/// Table, queue or secret named by a JSON request body.
fn resource(op: &str, body: &Value) -> Option<String> {
    if let Some(t) = body.get("TableName").and_then(Value::as_str) {
        return Some(t.to_owned());
    }
    if let Some(q) = body.get("QueueUrl").and_then(Value::as_str) {
        return Some(queue_name(q));
    }
    if op.starts_with("secretsmanager:") {
        return body
            .get("SecretId")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    if let Some(items) = body
        .get("RequestItems")
        .and_then(Value::as_object)
        .filter(|m| m.len() == 1)
    {
        return items.keys().next().cloned();
    }
    None
}

/// SQS messages a request carries, or its answer received.
fn messages(op: &str, body: &Value, answer: &Value) -> u32 {
    let len = |v: Option<&Value>| v.and_then(Value::as_array).map_or(0, |a| a.len() as u32);
    match op {
        "sqs:SendMessage" | "sqs:DeleteMessage" | "sqs:ChangeMessageVisibility" => 1,
        "sqs:SendMessageBatch" | "sqs:DeleteMessageBatch" | "sqs:ChangeMessageVisibilityBatch" => {
            len(body.get("Entries"))
        }
        "sqs:ReceiveMessage" => len(answer.get("Messages")),
        _ => 0,
    }
}

/// The family of a partition key that is not a tenant's: `#keyring`, `#subscriptions`
/// (Tern's own partitions in a tenant-keyed table start with `#`, which no tenant id
/// holds). Their items are fetched for reasons of their own (once per process per hour,
/// once per batch), so a fetch of one is a class apart from the table's tenant items:
/// otherwise the cache model would charge them the projected reads of every endpoint.
pub fn key_family(partition_key: &str) -> Option<&str> {
    let rest = partition_key.strip_prefix('#')?;
    let end = rest.find('#').map_or(partition_key.len(), |i| i + 1);
    Some(&partition_key[..end])
}

/// The family (see [`key_family`]) of the first string value in `values` that has one.
fn family_in(values: Option<&Value>) -> Option<String> {
    values?
        .as_object()?
        .values()
        .filter_map(|v| v.get("S").and_then(Value::as_str))
        .find_map(key_family)
        .map(str::to_owned)
}

/// `class` with the family of the keys it names, if any.
fn with_family(class: String, family: Option<String>) -> String {
    match family {
        Some(f) => format!("{class} {f}"),
        None => class,
    }
}

/// The cacheable fetches of a request.
fn fetches(op: &str, body: &Value, ids: &Ids) -> Vec<Fetch> {
    let table = || {
        body.get("TableName")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    let one = |class: String, item: String| {
        let mentions = ids.mentions(&item);
        vec![Fetch {
            class,
            item,
            mentions,
        }]
    };
    match op {
        "dynamodb:GetItem" => one(
            with_family(format!("{op} {}", table()), family_in(body.get("Key"))),
            body.get("Key").map(Value::to_string).unwrap_or_default(),
        ),
        "dynamodb:BatchGetItem" => body
            .get("RequestItems")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .flat_map(|(t, spec)| {
                spec.get("Keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(move |k| (t.clone(), k.to_string()))
            })
            .map(|(t, item)| Fetch {
                class: with_family(
                    format!("{op} {t}"),
                    serde_json::from_str::<Value>(&item)
                        .ok()
                        .and_then(|k| family_in(Some(&k))),
                ),
                mentions: ids.mentions(&item),
                item,
            })
            .collect(),
        // Later pages of a query are part of the same fetch.
        "dynamodb:Query" if body.get("ExclusiveStartKey").is_none() => {
            let index = body
                .get("IndexName")
                .and_then(Value::as_str)
                .map_or_else(String::new, |i| format!("/{i}"));
            let item = format!(
                "{} {}",
                body.get("KeyConditionExpression")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                body.get("ExpressionAttributeValues")
                    .map(Value::to_string)
                    .unwrap_or_default()
            );
            one(
                with_family(
                    format!("{op} {}{index}", table()),
                    family_in(body.get("ExpressionAttributeValues")).filter(|_| index.is_empty()),
                ),
                item,
            )
        }
        "kms:Decrypt" => one(
            op.to_owned(),
            format!(
                "{} {}",
                body.get("CiphertextBlob")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                body.get("EncryptionContext")
                    .map(Value::to_string)
                    .unwrap_or_default()
            ),
        ),
        "secretsmanager:GetSecretValue" => one(
            op.to_owned(),
            body.get("SecretId")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        ),
        _ => Vec::new(),
    }
}

async fn forward(State((shared, label)): State<(Shared, String)>, req: Request) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body: Bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(_) => return status(StatusCode::BAD_REQUEST),
    };
    let op = operation(&parts.headers, &body);
    let metered = op.starts_with("dynamodb:");
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut out = shared
        .http
        .request(parts.method.clone(), format!("{}{path}", shared.upstream));
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            out = out.header(name, value);
        }
    }
    if metered {
        out = out.header(METER_HEADER, "1");
    }
    let answer = match out.body(body.clone()).send().await {
        Ok(a) => a,
        Err(_) => return status(StatusCode::BAD_GATEWAY),
    };
    let code = answer.status();
    let mut response = Response::builder().status(code);
    let mut facts = Facts::default();
    for (name, value) in answer.headers() {
        if name.as_str() == METER_HEADER {
            facts = serde_json::from_slice(value.as_bytes()).unwrap_or_default();
        } else if !hop_by_hop(name) {
            response = response.header(name, value);
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answer_json: Value = if op == "sqs:ReceiveMessage" || code.as_u16() >= 400 {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let record = {
        let ids = shared.ids.read().unwrap_or_else(PoisonError::into_inner);
        Record {
            at: shared.started.elapsed().as_secs_f64(),
            caller: label,
            status: code.as_u16(),
            error: (code.as_u16() >= 400).then(|| error_name(&answer_json)),
            resource: resource(&op, &request),
            charges: charges(&facts),
            messages: messages(&op, &request, &answer_json),
            fetches: if code.is_success() {
                fetches(&op, &request, &ids)
            } else {
                Vec::new()
            },
            mentions: ids.mentions(&String::from_utf8_lossy(&body)),
            op,
        }
    };
    lock(&shared.records).push(record);
    response
        .body(Body::from(bytes))
        .unwrap_or_else(|_| status(StatusCode::BAD_GATEWAY))
}

/// The error type of an AWS JSON error answer (`__type`, after its namespace), or
/// `HTTP error` when it has none.
fn error_name(answer: &Value) -> String {
    answer
        .get("__type")
        .and_then(Value::as_str)
        .map_or("HTTP error", |t| t.rsplit(['#', '.']).next().unwrap_or(t))
        .to_owned()
}

fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host" | "connection" | "content-length" | "transfer-encoding" | "keep-alive"
    )
}

fn status(code: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = code;
    r
}

impl Meter {
    /// Starts one listener on 127.0.0.1 per label, all forwarding to `upstream`
    /// (`http://127.0.0.1:<moto port>`).
    ///
    /// # Errors
    /// When a listener cannot bind or the HTTP client cannot be built.
    pub async fn start(upstream: &str, labels: &[String]) -> Result<Self, crate::BoxError> {
        let shared = Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            // moto answers in milliseconds; a stuck answer fails the call (the SDK's own
            // deadline is shorter) instead of hanging the benchmark.
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()?,
            records: Arc::default(),
            ids: Arc::default(),
            started: Instant::now(),
        };
        let mut urls = BTreeMap::new();
        let mut tasks = Vec::new();
        for label in labels {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
            urls.insert(label.clone(), format!("http://{}", listener.local_addr()?));
            let app = Router::new()
                .fallback(forward)
                .with_state((shared.clone(), label.clone()));
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        Ok(Self {
            urls,
            records: shared.records,
            ids: shared.ids,
            started: shared.started,
            tasks,
        })
    }

    /// URL of the listener for `label`.
    pub fn url(&self, label: &str) -> String {
        self.urls.get(label).cloned().unwrap_or_default()
    }

    /// Seconds since the proxy started (the clock of [`Record::at`]).
    pub fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The ids requests are searched for from now on.
    pub fn set_ids(&self, ids: Ids) {
        *self.ids.write().unwrap_or_else(PoisonError::into_inner) = ids;
    }

    /// Takes the records so far (the proxy keeps recording).
    pub fn take(&self) -> Vec<Record> {
        std::mem::take(&mut *lock(&self.records))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operations_are_named_by_target_or_by_action_and_scope() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-amz-target",
            "DynamoDB_20120810.UpdateItem".parse().unwrap(),
        );
        assert_eq!(operation(&h, b""), "dynamodb:UpdateItem");
        h.insert("x-amz-target", "TrentService.Decrypt".parse().unwrap());
        assert_eq!(operation(&h, b""), "kms:Decrypt");
        h.insert(
            "x-amz-target",
            "secretsmanager.GetSecretValue".parse().unwrap(),
        );
        assert_eq!(operation(&h, b""), "secretsmanager:GetSecretValue");
        let mut q = HeaderMap::new();
        q.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=testing/20261203/us-east-1/sns/aws4_request, SignedHeaders=host"
                .parse()
                .unwrap(),
        );
        assert_eq!(
            operation(&q, b"Action=Publish&Version=2010-03-31"),
            "sns:Publish"
        );
    }

    #[test]
    fn sqs_messages_and_cacheable_fetches_are_read_from_the_bodies() {
        let batch = json!({"QueueUrl": "http://x/123/p-delivery", "Entries": [{}, {}, {}]});
        assert_eq!(messages("sqs:SendMessageBatch", &batch, &Value::Null), 3);
        assert_eq!(
            resource("sqs:SendMessageBatch", &batch).as_deref(),
            Some("p-delivery")
        );
        let received = json!({"Messages": [{}, {}]});
        assert_eq!(messages("sqs:ReceiveMessage", &json!({}), &received), 2);

        let mut ids = Ids::default();
        ids.add(super::super::keys::IdKind::Endpoint, "ep_1");
        let get = json!({"TableName": "p-endpoints", "Key": {"tenant_id": {"S": "t"}, "endpoint_id": {"S": "ep_1"}}});
        let f = fetches("dynamodb:GetItem", &get, &ids);
        assert_eq!(f[0].class, "dynamodb:GetItem p-endpoints");
        assert!(f[0].mentions.endpoints.contains("ep_1"));
        let page2 = json!({"TableName": "t", "ExclusiveStartKey": {}});
        assert!(fetches("dynamodb:Query", &page2, &ids).is_empty());
        let decrypt = json!({"CiphertextBlob": "AAA", "EncryptionContext": {"endpoint": "ep_1"}});
        let f = fetches("kms:Decrypt", &decrypt, &ids);
        assert_eq!(
            (f[0].class.as_str(), f[0].mentions.endpoints.len()),
            ("kms:Decrypt", 1)
        );
        assert!(fetches("dynamodb:UpdateItem", &get, &ids).is_empty());
    }

    #[test]
    fn our_own_partitions_are_classes_apart_from_the_tenants_items() {
        assert_eq!(key_family("#keyring"), Some("#keyring"));
        assert_eq!(key_family("#subscriptions#tnt_f"), Some("#subscriptions"));
        assert_eq!(key_family("tnt_f"), None);
        let ids = Ids::default();
        let keyring = json!({"TableName": "p-endpoints", "Key": {"tenant_id": {"S": "#keyring"}, "endpoint_id": {"S": "epoch#0000000001"}}});
        assert_eq!(
            fetches("dynamodb:GetItem", &keyring, &ids)[0].class,
            "dynamodb:GetItem p-endpoints #keyring"
        );
        let version = json!({"TableName": "p-endpoints", "Key": {"tenant_id": {"S": "#subscriptions#tnt_f"}, "endpoint_id": {"S": "version"}}});
        assert_eq!(
            fetches("dynamodb:GetItem", &version, &ids)[0].class,
            "dynamodb:GetItem p-endpoints #subscriptions"
        );
        let newest = json!({"TableName": "p-endpoints", "KeyConditionExpression": "tenant_id = :k", "ExpressionAttributeValues": {":k": {"S": "#keyring"}, ":p": {"S": "epoch#"}}});
        assert_eq!(
            fetches("dynamodb:Query", &newest, &ids)[0].class,
            "dynamodb:Query p-endpoints #keyring"
        );
        let by_index = json!({"TableName": "p-health", "IndexName": "tenant", "KeyConditionExpression": "t = :k", "ExpressionAttributeValues": {":k": {"S": "#x"}}});
        assert_eq!(
            fetches("dynamodb:Query", &by_index, &ids)[0].class,
            "dynamodb:Query p-health/tenant"
        );
    }
}
