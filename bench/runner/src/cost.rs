//! The cost model (explained in `docs/cost.md`): dollars per million deliveries, computed
//! from the request counts, log bytes and invocation time measured in the same run.
//!
//! Prices: AWS us-east-1 public list prices as known on 2025-06-01 (no network here to
//! re-check; see docs/cost.md). Free tiers are ignored.

use std::collections::BTreeMap;

use serde::Serialize;

/// DynamoDB on-demand, $ per write request unit (1 KB), since the Nov 2024 price cut.
pub const DDB_WRU: f64 = 0.625 / 1e6;
/// DynamoDB on-demand, $ per read request unit (one strongly consistent read of 4 KB).
pub const DDB_RRU: f64 = 0.125 / 1e6;
/// DynamoDB provisioned, $ per WCU-hour.
pub const DDB_WCU_HOUR: f64 = 0.00065;
/// DynamoDB provisioned, $ per RCU-hour.
pub const DDB_RCU_HOUR: f64 = 0.00013;
/// Utilisation assumed for provisioned capacity (the auto scaling target, 70 %).
pub const PROVISIONED_UTILISATION: f64 = 0.7;
/// SQS standard, $ per request (each 64 KB chunk of a payload is one request).
pub const SQS_REQUEST: f64 = 0.40 / 1e6;
/// Lambda, $ per request.
pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
/// Lambda arm64, $ per GB-second.
pub const LAMBDA_ARM_GB_S: f64 = 0.000_013_333_4;
/// CloudWatch Logs ingestion (standard class), $ per GB (taken as 10^9 bytes).
pub const LOGS_GB: f64 = 0.50;
/// EventBridge custom events (PutEvents), $ per event (64 KB chunks).
pub const EVENTBRIDGE_EVENT: f64 = 1.00 / 1e6;
/// API Gateway HTTP API, $ per request (the first 300 million a month; each 512 KB of a
/// request is metered as one).
pub const API_GATEWAY_HTTP_REQUEST: f64 = 1.00 / 1e6;
/// EventBridge API destinations, $ per invocation.
pub const API_DESTINATION_INVOCATION: f64 = 0.20 / 1e6;
/// Step Functions Standard, $ per state transition.
pub const SFN_TRANSITION: f64 = 0.025 / 1e3;

/// Memory of each function, GB (256 MB, `infra/settings.json`).
pub const MEMORY_GB: f64 = 0.25;
/// Sender batch size (`eventSources.sender.batchSize`).
pub const SENDER_BATCH: f64 = 10.0;
/// Relay batch size (`eventSources.relay.batchSize`), assumed full.
pub const RELAY_BATCH: f64 = 100.0;
/// Bytes of the platform's own START, END and REPORT lines per invocation (typical
/// lengths of those three lines).
pub const PLATFORM_LOG_BYTES: f64 = 330.0;
/// Write units of the outbox item (about 1.3 KB with a 1 KiB payload: 2 WRU) in the
/// application's transaction (transactions bill twice).
pub const OUTBOX_WRITE_UNITS: f64 = 4.0;
/// State transitions of one Step Functions wait (Wait + SendMessage task).
pub const SFN_TRANSITIONS_PER_WAIT: f64 = 2.0;

/// What the model takes from the run.
#[derive(Debug, Clone, Serialize)]
pub struct Inputs {
    /// Function calls per delivery on the happy path, by operation.
    pub happy: BTreeMap<String, f64>,
    /// Per delivery that needed one retry (two attempts).
    pub retry: BTreeMap<String, f64>,
    /// Per delivery that was dead-lettered after its one allowed attempt.
    pub dead_letter: BTreeMap<String, f64>,
    /// Sender log bytes per delivery at info.
    pub log_bytes_per_delivery: f64,
    /// Wall time of one sender invocation (batch of 10, moto, loopback receiver), ms.
    pub sender_invocation_ms: f64,
}

/// One line of the cost table, $ per million deliveries.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    /// Share of deliveries retried once, percent.
    pub retried_percent: f64,
    /// `on-demand` or `provisioned`.
    pub dynamodb_mode: String,
    /// DynamoDB (Tern's tables).
    pub dynamodb: f64,
    /// The outbox write in the application's transaction.
    pub outbox_write: f64,
    /// SQS (functions and event source mapping).
    pub sqs: f64,
    /// Lambda requests and duration.
    pub lambda: f64,
    /// CloudWatch Logs ingestion.
    pub logs: f64,
    /// Total.
    pub total: f64,
    /// EventBridge PutEvents + API destinations for the same deliveries.
    pub eventbridge: f64,
}

struct PerDelivery {
    reads: f64,
    writes: f64,
    sqs: f64,
    sfn: f64,
    /// Messages the sender receives per delivery (first attempt + retries).
    messages: f64,
}

fn sum(m: &BTreeMap<String, f64>, f: impl Fn(&str) -> bool) -> f64 {
    m.iter().filter(|(k, _)| f(k)).map(|(_, v)| v).sum()
}

fn per_delivery(m: &BTreeMap<String, f64>, messages: f64) -> PerDelivery {
    PerDelivery {
        reads: sum(m, |k| {
            k.starts_with("dynamodb:")
                && (k.ends_with("GetItem") || k.ends_with("Query") || k.ends_with("Scan"))
        }),
        writes: sum(m, |k| {
            matches!(
                k,
                "dynamodb:PutItem" | "dynamodb:UpdateItem" | "dynamodb:DeleteItem"
            )
        }) + 2.0 * sum(m, |k| k == "dynamodb:TransactWriteItems"),
        sqs: sum(m, |k| k.starts_with("sqs:")),
        sfn: sum(m, |k| k == "states:StartExecution"),
        messages,
    }
}

fn dollars(p: &PerDelivery, inputs: &Inputs, provisioned: bool) -> (f64, f64, f64, f64) {
    let dynamodb = if provisioned {
        let per_write = DDB_WCU_HOUR / (3600.0 * PROVISIONED_UTILISATION);
        let per_read = DDB_RCU_HOUR / (3600.0 * PROVISIONED_UTILISATION);
        p.writes * per_write + p.reads * per_read
    } else {
        p.writes * DDB_WRU + p.reads * DDB_RRU
    };
    // The event source mapping: one ReceiveMessage per batch and one DeleteMessageBatch
    // per batch of handled messages (idle long polls are a fixed cost, see docs/cost.md).
    let esm = 2.0 * p.messages / SENDER_BATCH;
    let sqs = (p.sqs + esm) * SQS_REQUEST;
    let sender_invocations = p.messages / SENDER_BATCH;
    let relay_invocations = 1.0 / RELAY_BATCH;
    let seconds = inputs.sender_invocation_ms / 1e3;
    let lambda = (sender_invocations + relay_invocations) * LAMBDA_REQUEST
        + (sender_invocations + relay_invocations) * seconds * MEMORY_GB * LAMBDA_ARM_GB_S
        + p.sfn * SFN_TRANSITIONS_PER_WAIT * SFN_TRANSITION;
    let logs = (inputs.log_bytes_per_delivery * p.messages
        + PLATFORM_LOG_BYTES * (sender_invocations + relay_invocations))
        / 1e9
        * LOGS_GB;
    (dynamodb, sqs, lambda, logs)
}

/// The table: 0 %, 1 %, 10 % retried once, on-demand and provisioned DynamoDB.
pub fn table(inputs: &Inputs) -> Vec<CostRow> {
    let happy = per_delivery(&inputs.happy, 1.0);
    let retry = per_delivery(&inputs.retry, 2.0);
    let mut rows = Vec::new();
    for provisioned in [false, true] {
        for pct in [0.0, 1.0, 10.0] {
            let r = pct / 100.0;
            let (d0, s0, l0, g0) = dollars(&happy, inputs, provisioned);
            let (d1, s1, l1, g1) = dollars(&retry, inputs, provisioned);
            let mix = |a: f64, b: f64| ((1.0 - r) * a + r * b) * 1e6;
            let outbox = OUTBOX_WRITE_UNITS
                * if provisioned {
                    DDB_WCU_HOUR / (3600.0 * PROVISIONED_UTILISATION)
                } else {
                    DDB_WRU
                }
                * 1e6;
            let (dynamodb, sqs, lambda, logs) =
                (mix(d0, d1), mix(s0, s1), mix(l0, l1), mix(g0, g1));
            rows.push(CostRow {
                retried_percent: pct,
                dynamodb_mode: if provisioned {
                    "provisioned"
                } else {
                    "on-demand"
                }
                .into(),
                dynamodb,
                outbox_write: outbox,
                sqs,
                lambda,
                logs,
                total: dynamodb + outbox + sqs + lambda + logs,
                eventbridge: (EVENTBRIDGE_EVENT + (1.0 + r) * API_DESTINATION_INVOCATION) * 1e6,
            });
        }
    }
    rows
}

/// The table as markdown.
pub fn markdown(rows: &[CostRow]) -> String {
    let mut s = String::from(
        "| retried once | DynamoDB mode | DynamoDB (Tern) | outbox write | SQS | Lambda | Logs | **Tern total** | EventBridge API destinations |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {:.0} % | {} | ${:.2} | ${:.2} | ${:.2} | ${:.2} | ${:.2} | **${:.2}** | ${:.2} |\n",
            r.retried_percent,
            r.dynamodb_mode,
            r.dynamodb,
            r.outbox_write,
            r.sqs,
            r.lambda,
            r.logs,
            r.total,
            r.eventbridge
        ));
    }
    s
}
