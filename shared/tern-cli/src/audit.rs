//! `tern audit`: wires the stores of the deployment (or local mode) to
//! [`tern_ops::audit`], prints the report, and fails (exit 1) when a pair is unaccounted.

use std::io::Write;

use tern_aws::{DynamoLedger, DynamoOutboxReader, SqsQueue};
use tern_handlers::config::Env;
use tern_ops::OpsError;
use tern_ops::audit::{AuditRequest, AuditStores};

use crate::{Ctx, print_json, write_err};

/// Runs the audit of `request` and prints it (`--json`: the report object). Exit 1 (an
/// error naming the count) when a pair is unaccounted; the report is printed first.
///
/// # Errors
/// [`OpsError`]: a store that cannot be read, a bad setting, or unaccounted pairs.
pub async fn audit(
    ctx: &Ctx,
    request: &AuditRequest,
    grace: std::time::Duration,
    scan_segments: u32,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    // The sender's own settings: its schedule and time scale say when a retry is due, its
    // health thresholds whether a circuit holds deliveries back.
    let rules = tern_ops::audit::rules_from_env(&Env::process(), grace)?;
    let dynamodb = ctx.dynamodb();
    let outbox = DynamoOutboxReader::new(dynamodb.clone(), ctx.names.get("TERN_OUTBOX_TABLE")?)
        .with_segments(scan_segments);
    let ledger = DynamoLedger::new(dynamodb, ctx.names.get("TERN_ATTEMPTS_TABLE")?, 30);
    let endpoints = ctx.endpoints()?;
    let health = ctx.health()?;
    let dlq = SqsQueue::new(ctx.sqs(), ctx.names.get("TERN_DLQ_URL")?);
    let relay_failures = SqsQueue::new(ctx.sqs(), ctx.names.get("TERN_RELAY_FAILURE_QUEUE_URL")?);
    let delivery_queue = SqsQueue::new(ctx.sqs(), ctx.names.get("TERN_DELIVERY_QUEUE_URL")?);
    let report = tern_ops::audit::audit(
        AuditStores {
            outbox: &outbox,
            ledger: &ledger,
            endpoints: &endpoints,
            health: Some(&health),
            dlq: &dlq,
            relay_failures: &relay_failures,
            delivery_queue: Some(&delivery_queue),
        },
        request,
        &rules,
    )
    .await?;
    if ctx.json {
        print_json(out, &report)?;
    } else {
        tern_ops::audit::print::print_report(out, &report).map_err(write_err)?;
    }
    if report.all_accounted() {
        return Ok(());
    }
    let first = &report.unaccounted[0].pair;
    Err(OpsError::Invalid(format!(
        "{} pair(s) unaccounted (first: event {} endpoint {}); see the report above",
        report.totals.unaccounted, first.event_id, first.endpoint_id
    )))
}
