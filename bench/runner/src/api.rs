//! The Tern API in local mode (`make bench-api`, part of `make bench`): each route's latency,
//! p50 and p95, through the router as a client calls it (HTTP on 127.0.0.1, SigV4 signed and
//! verified, JSON both ways) against the same port calls made directly in process (what the
//! route does minus the API), on moto; and what one publish through the API costs on AWS
//! against the application's transactional outbox write, per million events.

use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde_json::{Value, json};
use tern_api::ApiDeps;
use tern_api::sigv4::{LocalCredential, sign_request};
use tern_core::delivery_log::EndpointLogQuery;
use tern_core::{EndpointId, EventId, TenantId};
use tern_local::local::{LocalOptions, LocalTern};
use tern_local::moto::MotoServer;

use crate::BoxError;
use crate::cost;
use crate::stats::Sample;

/// Requests per route (and direct calls), alternated: 40.
pub const CALLS: usize = 40;

/// Requests of the routes that read the DLQ (each waits for two empty 1 s long polls): 4.
pub const DLQ_CALLS: usize = 4;

/// One route's figures, milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct RouteRow {
    /// Operation id and what it does.
    pub route: String,
    /// Through the API.
    pub api: Sample,
    /// The same port calls, in process.
    pub direct: Sample,
}

/// What a publish costs, dollars per million events.
#[derive(Debug, Clone, Serialize)]
pub struct PublishCost {
    /// Through the API: API Gateway, Lambda (requests, duration at 256 MB, platform log
    /// lines) and the outbox item's plain `PutItem`.
    pub api: f64,
    /// Of which API Gateway.
    pub api_gateway: f64,
    /// Of which Lambda.
    pub lambda: f64,
    /// Of which DynamoDB.
    pub dynamodb: f64,
    /// The application's transactional outbox write of the same item.
    pub transactional_write: f64,
    /// The duration billed per publish, milliseconds (the route's median here, on moto).
    pub billed_ms: f64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct ApiReport {
    /// Per route.
    pub routes: Vec<RouteRow>,
    /// Publish cost.
    pub publish: PublishCost,
}

/// The p-th percentile (nearest rank) of a sample, NaN when empty.
pub fn percentile(s: &Sample, p: f64) -> f64 {
    let mut v = s.values.clone();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// A client of the local API signing with SigV4, as an application signs.
pub(crate) struct Client {
    pub(crate) base: String,
    pub(crate) host: String,
    pub(crate) credential: LocalCredential,
    pub(crate) http: reqwest::Client,
}

impl Client {
    /// Calls `method path` with an optional JSON body: the status and the JSON answer.
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), BoxError> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let mut headers = vec![("host", self.host.as_str())];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        let signed = sign_request(
            &self.credential,
            tern_local::api::LOCAL_REGION,
            method,
            path,
            &headers,
            &bytes,
            SystemTime::now(),
        )?;
        let mut request = self
            .http
            .request(method.parse()?, format!("{}{path}", self.base))
            .body(bytes);
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        for (k, v) in signed {
            request = request.header(k, v);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Measures `api` and `direct` alternately, `n` times each.
async fn measure<A, D>(
    route: &str,
    n: usize,
    mut api: A,
    mut direct: D,
) -> Result<RouteRow, BoxError>
where
    A: AsyncFnMut(usize) -> Result<(), BoxError>,
    D: AsyncFnMut(usize) -> Result<(), BoxError>,
{
    let mut row = RouteRow {
        route: route.to_owned(),
        api: Sample::default(),
        direct: Sample::default(),
    };
    // One of each first, unmeasured: connections, caches.
    api(usize::MAX).await?;
    direct(usize::MAX).await?;
    for i in 0..n {
        let t = Instant::now();
        api(i).await?;
        row.api.push(ms(t));
        let t = Instant::now();
        direct(i).await?;
        row.direct.push(ms(t));
    }
    Ok(row)
}

fn ok(status: u16, want: u16, what: &str, body: &Value) -> Result<(), BoxError> {
    if status == want {
        Ok(())
    } else {
        Err(format!("{what}: {status} {body}").into())
    }
}

/// Runs the benchmark on a moto of its own.
///
/// # Errors
/// A setup or call that failed.
pub async fn run() -> Result<ApiReport, BoxError> {
    let moto = MotoServer::start().await?;
    let options = LocalOptions {
        prefix: "bench-api-".into(),
        console_port: None,
        ..LocalOptions::default()
    };
    let mut local = LocalTern::create(moto.sdk_config().await, &options).await?;
    let _events = local.start_pollers(&options);
    let addr = local
        .start_api(0, tern_local::api::local_credentials())
        .ok_or("the local API did not start")?;
    let deps: ApiDeps = tern_local::api::deps(&local)?;
    let base = tern_local::api::url(addr);
    let client = Client {
        host: base.trim_start_matches("http://").to_owned(),
        base,
        credential: tern_local::api::local_credentials().remove(0),
        http: reqwest::Client::new(),
    };
    let receiver = crate::ChildReceiver::start(0).await?;
    let tenant = TenantId::new("tnt_bench")?;
    let t = tenant.as_str();

    // Twenty endpoints; the first receives, and gets a delivered event and some attempts.
    let mut ids = Vec::new();
    for _ in 0..20 {
        let (status, body) = client
            .call(
                "POST",
                &format!("/v1/tenants/{t}/endpoints"),
                Some(&json!({"url": receiver.url()})),
            )
            .await?;
        ok(status, 201, "create", &body)?;
        ids.push(body["endpoint"]["id"].as_str().ok_or("id")?.to_owned());
    }
    let ep = EndpointId::new(ids[0].clone())?;
    for i in 0..5 {
        let (status, body) = client
            .call(
                "POST",
                &format!("/v1/tenants/{t}/events"),
                Some(&json!({"id": format!("evt_bench_seed_{i}"), "type": "order.paid", "payload": {"i": i}})),
            )
            .await?;
        ok(status, 202, "publish", &body)?;
    }
    let seed = EventId::new("evt_bench_seed_0")?;
    // Delivered to the twenty endpoints before anything is measured.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let states = deps.ledger.pair_states(&tenant, &seed).await?;
        if states.iter().filter(|s| s.delivered_at.is_some()).count() == 20 {
            break;
        }
        if Instant::now() > deadline {
            return Err("the seed event was not delivered within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let ep_path = format!("/v1/tenants/{t}/endpoints/{ep}");
    let mut routes = Vec::new();
    let c = &client;
    let d = &deps;
    let (tn, epr) = (&tenant, &ep);

    routes.push(
        measure(
            "getEndpoint",
            CALLS,
            async |_| {
                let (s, b) = c.call("GET", &ep_path, None).await?;
                ok(s, 200, "get", &b)
            },
            async |_| {
                d.endpoints.get(tn, epr).await?.ok_or("missing")?;
                Ok(())
            },
        )
        .await?,
    );
    routes.push(
        measure(
            "listEndpoints (20 of them)",
            CALLS,
            async |_| {
                let (s, b) = c
                    .call("GET", &format!("/v1/tenants/{t}/endpoints"), None)
                    .await?;
                ok(s, 200, "list", &b)
            },
            async |_| {
                d.endpoints.list_page(tn, None, 50, None).await?;
                Ok(())
            },
        )
        .await?,
    );
    routes.push(
        measure(
            "createEndpoint",
            CALLS,
            async |_| {
                let (s, b) = c
                    .call(
                        "POST",
                        &format!("/v1/tenants/{t}/endpoints"),
                        Some(&json!({"url": receiver.url()})),
                    )
                    .await?;
                ok(s, 201, "create", &b)
            },
            async |_| {
                tern_ops::add_endpoint(
                    d.endpoints.as_ref(),
                    tern_ops::NewEndpoint {
                        tenant: "tnt_bench_direct".into(),
                        url: receiver.url(),
                        event_types: vec![],
                        max_attempts: None,
                        timeout_ms: None,
                        schedule: None,
                        description: None,
                        payload_format: tern_core::PayloadFormat::Raw,
                        max_per_second: None,
                        secret: None,
                        headers: Vec::new(),
                        auth: Default::default(),
                        signatures: Default::default(),
                        client_certificate: None,
                    },
                    &d.settings.destinations,
                    d.lookup.as_ref(),
                )
                .await?;
                Ok(())
            },
        )
        .await?,
    );
    routes.push(
        measure(
            "updateEndpoint (description)",
            CALLS,
            async |i| {
                let (s, b) = c
                    .call(
                        "PATCH",
                        &ep_path,
                        Some(&json!({"description": format!("api {i}")})),
                    )
                    .await?;
                ok(s, 200, "patch", &b)
            },
            async |i| {
                let update = tern_core::endpoint::EndpointUpdate {
                    description: Some(Some(format!("direct {i}"))),
                    ..Default::default()
                };
                tern_ops::update_endpoint(
                    d.endpoints.as_ref(),
                    Some(tn),
                    epr,
                    &update,
                    &d.settings.destinations,
                    d.lookup.as_ref(),
                )
                .await?;
                Ok(())
            },
        )
        .await?,
    );
    routes.push(
        measure(
            "getEndpointHealth",
            CALLS,
            async |_| {
                let (s, b) = c.call("GET", &format!("{ep_path}/health"), None).await?;
                ok(s, 200, "health", &b)
            },
            async |_| {
                d.endpoints.get(tn, epr).await?;
                d.health.get(tn, epr).await?;
                Ok(())
            },
        )
        .await?,
    );
    let publish = measure(
        "publishEvent (1 KiB)",
        CALLS,
        async |i| {
            let (s, b) = c
                .call(
                    "POST",
                    &format!("/v1/tenants/{t}/events"),
                    Some(&json!({"id": format!("evt_bench_api_{i}"), "type": "bench.only", "payload": {"data": "x".repeat(1000)}})),
                )
                .await?;
            ok(s, 202, "publish", &b)
        },
        async |i| {
            tern_ops::publish::publish(
                d.events.as_ref(),
                tn,
                Some(EventId::new(format!("evt_bench_direct_{i}"))?),
                "bench.only",
                &json!({"data": "x".repeat(1000)}).to_string(),
                d.settings.max_payload_bytes,
            )
            .await?;
            Ok(())
        },
    )
    .await?;
    routes.push(publish.clone());
    routes.push(
        measure(
            "getEvent (20 deliveries)",
            CALLS,
            async |_| {
                let (s, b) = c
                    .call("GET", &format!("/v1/tenants/{t}/events/{seed}"), None)
                    .await?;
                ok(s, 200, "event", &b)
            },
            async |_| {
                d.events.get(tn, &seed).await?;
                d.endpoints.list_for_tenant(tn).await?;
                d.ledger.pair_states(tn, &seed).await?;
                Ok(())
            },
        )
        .await?,
    );
    routes.push(
        measure(
            "listEventAttempts (20)",
            CALLS,
            async |_| {
                let (s, b) = c
                    .call(
                        "GET",
                        &format!("/v1/tenants/{t}/events/{seed}/attempts"),
                        None,
                    )
                    .await?;
                ok(s, 200, "attempts", &b)
            },
            async |_| {
                d.endpoints.list_for_tenant(tn).await?;
                d.ledger.history(tn, &seed).await?;
                Ok(())
            },
        )
        .await?,
    );
    routes.push(
        measure(
            "listEndpointAttempts",
            CALLS,
            async |_| {
                let (s, b) = c.call("GET", &format!("{ep_path}/attempts"), None).await?;
                ok(s, 200, "endpoint attempts", &b)
            },
            async |_| {
                d.endpoints.get(tn, epr).await?;
                d.ledger
                    .endpoint_log(&EndpointLogQuery {
                        endpoint_id: epr.clone(),
                        since: None,
                        until: None,
                        outcome: None,
                        limit: 50,
                        before: None,
                    })
                    .await?;
                Ok(())
            },
        )
        .await?,
    );
    let resend_deps = tern_ops::resend::ResendDeps {
        events: d.events.as_ref(),
        ledger: d.ledger.as_ref(),
        endpoints: d.endpoints.as_ref(),
        delivery_queue: d.queues.delivery_queue.as_ref(),
    };
    let rd = &resend_deps;
    routes.push(
        measure(
            "resendEvent",
            CALLS,
            async |_| {
                let (s, b) = c
                    .call(
                        "POST",
                        &format!("/v1/tenants/{t}/events/{seed}/endpoints/{ep}/resend"),
                        None,
                    )
                    .await?;
                ok(s, 202, "resend", &b)
            },
            async |_| {
                tern_ops::resend::resend(rd, tn, &seed, epr).await?;
                Ok(())
            },
        )
        .await?,
    );
    let endpoint = d.endpoints.get(tn, epr).await?.ok_or("missing")?;
    let e = &endpoint;
    routes.push(
        measure(
            "sendTestEvent (receiver answers at once)",
            CALLS,
            async |_| {
                let (s, b) = c.call("POST", &format!("{ep_path}/test"), None).await?;
                ok(s, 200, "test", &b)
            },
            async |_| {
                tern_ops::test_send::send_test(&d.client, e, d.settings.attempt_timeout).await?;
                Ok(())
            },
        )
        .await?,
    );
    routes.push(
        measure(
            "listDeadLetters (empty DLQ: two 1 s long polls)",
            DLQ_CALLS,
            async |_| {
                let (s, b) = c
                    .call("GET", &format!("/v1/tenants/{t}/dead-letters"), None)
                    .await?;
                ok(s, 200, "dead letters", &b)
            },
            async |_| {
                tern_ops::peek(d.queues.dlq.as_ref(), 100).await?;
                Ok(())
            },
        )
        .await?,
    );
    drop(local);
    drop(moto);
    Ok(ApiReport {
        routes,
        publish: publish_cost(publish.api.median()),
    })
}

/// The cost model of one publish, per million, at `billed_ms` of Lambda duration.
pub fn publish_cost(billed_ms: f64) -> PublishCost {
    let api_gateway = cost::API_GATEWAY_HTTP_REQUEST * 1e6;
    let lambda = (cost::LAMBDA_REQUEST
        + (billed_ms.ceil() / 1e3) * cost::MEMORY_GB * cost::LAMBDA_ARM_GB_S
        + cost::PLATFORM_LOG_BYTES / 1e9 * cost::LOGS_GB)
        * 1e6;
    // The same 1.3 KB outbox item: 2 write units as a plain put, twice that in a transaction.
    let dynamodb = cost::OUTBOX_WRITE_UNITS / 2.0 * cost::DDB_WRU * 1e6;
    PublishCost {
        api: api_gateway + lambda + dynamodb,
        api_gateway,
        lambda,
        dynamodb,
        transactional_write: cost::OUTBOX_WRITE_UNITS * cost::DDB_WRU * 1e6,
        billed_ms: billed_ms.ceil(),
    }
}

impl ApiReport {
    /// The tables.
    pub fn markdown(&self) -> String {
        let f = |v: f64| {
            if v.is_nan() {
                "-".to_owned()
            } else if v >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        };
        let mut s = String::from(
            "\n## The Tern API in local mode (moto; milliseconds)\n\n| route | API p50 | API p95 | direct p50 | direct p95 | API - direct (p50) | calls |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for r in &self.routes {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.route,
                f(r.api.median()),
                f(percentile(&r.api, 95.0)),
                f(r.direct.median()),
                f(percentile(&r.direct, 95.0)),
                f(r.api.median() - r.direct.median()),
                r.api.values.len()
            ));
        }
        let p = &self.publish;
        s.push_str(&format!(
            "\nOne publish per million events: through the API ${:.2} (API Gateway ${:.2}, Lambda ${:.2} at {} ms and 256 MB, DynamoDB ${:.2}: one PutItem of 2 write units) against the application's transactional outbox write ${:.2} (4 write units).\n",
            p.api, p.api_gateway, p.lambda, p.billed_ms, p.dynamodb, p.transactional_write
        ));
        s
    }
}
