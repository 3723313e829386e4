//! `tern audit` as a table: the totals, one line per endpoint, the pairs not delivered,
//! then every unaccounted pair with what is known of it. Times are UTC.

use std::io::Write;

use super::{AuditReport, PairStatus};
use crate::attempts::utc;

fn count_line(t: &super::Totals) -> String {
    PairStatus::ALL
        .iter()
        .map(|s| format!("{} {}", s.as_str().replace('_', " "), t.of(*s)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Prints the report.
///
/// # Errors
/// A write error.
pub fn print_report(out: &mut dyn Write, r: &AuditReport) -> std::io::Result<()> {
    writeln!(
        out,
        "Audit of the events created {} .. {}{}{}; grace {} s; checked at {}",
        utc(r.since),
        utc(r.until),
        r.tenant_id
            .as_deref()
            .map(|t| format!(", tenant {t}"))
            .unwrap_or_default(),
        r.endpoint_id
            .as_deref()
            .map(|e| format!(", endpoint {e}"))
            .unwrap_or_default(),
        r.grace_seconds,
        utc(r.checked_at)
    )?;
    writeln!(
        out,
        "events {} ({} without subscribers), pairs {}: {}",
        r.events,
        r.events_without_pairs,
        r.totals.pairs(),
        count_line(&r.totals)
    )?;
    if r.totals.delivered_in_dlq > 0 {
        writeln!(
            out,
            "{} delivered pair(s) also have a DLQ message: a replay drops it as a duplicate",
            r.totals.delivered_in_dlq
        )?;
    }
    if !r.endpoints.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{:<16} {:<38} {:<9} {:>6} {:>9} {:>7} {:>9} {:>5} {:>6} {:>11}",
            "TENANT",
            "ENDPOINT",
            "NOW",
            "PAIRS",
            "DELIVERED",
            "WAITING",
            "IN FLIGHT",
            "DLQ",
            "PARKED",
            "UNACCOUNTED"
        )?;
        for e in &r.endpoints {
            let t = &e.totals;
            writeln!(
                out,
                "{:<16} {:<38} {:<9} {:>6} {:>9} {:>7} {:>9} {:>5} {:>6} {:>11}",
                e.tenant_id,
                e.endpoint_id,
                e.endpoint_state,
                t.pairs(),
                t.delivered,
                t.waiting,
                t.in_flight,
                t.dead_lettered,
                t.parked,
                t.unaccounted
            )?;
        }
    }
    if !r.not_delivered.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "Not delivered yet{}:",
            if r.not_delivered_truncated {
                format!(" (first {} listed)", r.not_delivered.len())
            } else {
                String::new()
            }
        )?;
        writeln!(
            out,
            "{:<38} {:<38} {:<13} {:<25} DETAIL",
            "EVENT", "ENDPOINT", "STATE", "DUE (UTC)"
        )?;
        for p in &r.not_delivered {
            writeln!(
                out,
                "{:<38} {:<38} {:<13} {:<25} {}",
                p.event_id,
                p.endpoint_id,
                p.finding.status.as_str(),
                p.finding.due_at.map_or_else(|| "-".into(), utc),
                p.finding.detail
            )?;
        }
    }
    writeln!(out)?;
    if r.unaccounted.is_empty() {
        writeln!(out, "Unaccounted: none. Every pair is accounted for.")?;
    } else {
        writeln!(out, "UNACCOUNTED ({}):", r.unaccounted.len())?;
        for u in &r.unaccounted {
            let p = &u.pair;
            writeln!(
                out,
                "  {} -> {}  (tenant {}, {}, created {}, {} s ago)",
                p.event_id,
                p.endpoint_id,
                p.tenant_id,
                p.event_type,
                utc(p.created_at),
                u.age_seconds
            )?;
            writeln!(out, "    why: {}", p.finding.detail)?;
            writeln!(out, "    endpoint now: {}", u.endpoint_now)?;
            match &u.state_item {
                None => writeln!(out, "    state item: none (no sender claimed it)")?,
                Some(s) => writeln!(
                    out,
                    "    state item: claimed replay {} attempt {}{}, finished: {}, state: {}, lease until {}",
                    s.claim_replay()
                        .map_or_else(|| "-".into(), |v| v.to_string()),
                    s.claim_attempt()
                        .map_or_else(|| "-".into(), |v| v.to_string()),
                    s.claimed_at
                        .map(|c| format!(" at {}", utc(c)))
                        .unwrap_or_default(),
                    if s.claim_done { "yes" } else { "no" },
                    s.state.map_or_else(
                        || "-".into(),
                        |st| serde_json::to_value(st)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    ),
                    s.lease_until.map_or_else(|| "-".into(), utc)
                )?,
            }
            if u.attempts.is_empty() {
                writeln!(out, "    attempts: none")?;
            }
            for a in &u.attempts {
                writeln!(
                    out,
                    "    replay {} attempt {}{}  {}  status {}  {}{}",
                    a.replay_count,
                    a.attempt,
                    if a.takeover > 0 {
                        format!(" takeover {}", a.takeover)
                    } else {
                        String::new()
                    },
                    utc(a.started_at),
                    a.status.map_or_else(|| "-".into(), |s| s.to_string()),
                    a.outcome,
                    a.error
                        .as_deref()
                        .map(|e| format!("  ({})", e.replace(['\n', '\r'], " ")))
                        .unwrap_or_default()
                )?;
            }
            writeln!(
                out,
                "    `tern attempts {} --tenant {}` for the whole log",
                p.event_id, p.tenant_id
            )?;
        }
    }
    let x = &r.reads;
    let units = |u: Option<f64>| u.map_or_else(String::new, |u| format!(", {u:.1} read units"));
    writeln!(out)?;
    writeln!(
        out,
        "Read: outbox Scan {} item(s){}; ledger {} Query(s){}; DLQ {} message(s) ({}); relay-failure queue {} message(s) ({}); {} endpoint(s), {} health record(s).",
        x.outbox_items_scanned,
        units(x.outbox_read_units),
        x.ledger_queries,
        units(x.ledger_read_units),
        x.dlq_messages,
        if x.dlq_complete { "whole" } else { "NOT whole" },
        x.relay_failure_messages,
        if x.relay_failures_complete {
            "whole"
        } else {
            "NOT whole"
        },
        x.endpoints,
        x.health_records
    )?;
    if let Some(q) = &x.delivery_queue {
        writeln!(
            out,
            "Delivery queue: {} visible, {} in flight, {} delayed.",
            q.visible, q.in_flight, q.delayed
        )?;
    }
    for item in &r.unreadable_outbox_items {
        writeln!(out, "note: unreadable outbox item: {item}")?;
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}
