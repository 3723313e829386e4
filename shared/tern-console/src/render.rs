//! The widgets' HTML. Pure functions of what was read: no I/O here, so every escaping rule
//! and empty state is unit-tested. `maud` escapes every `(value)` it interpolates (text and
//! attribute values alike); the only unescaped HTML is the widget HTML that
//! [`local_page`] wraps, which these functions made.

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use tern_core::health::HealthState;
use tern_core::{DeadLetterReason, Endpoint, EndpointId, EventId, PayloadFormat, TenantId};
use tern_ops::attempts::{AttemptView, AttemptsReport, DeadLetterRow};
use tern_ops::audit::{AuditReport, PairStatus};
use tern_ops::dlq::DeadLetterGroup;
use tern_ops::health::HealthRow;
use tern_ops::waiting::WaitingReport;

use crate::{Action, ActionOutcome, ConsoleError, Target, Widget};
use tern_ops::text::cut;

/// Characters of an error text or response excerpt shown in a table cell: 300. The sample
/// payload keeps `tern_ops::dlq::SAMPLE_CHARS` (500).
pub const CELL_CHARS: usize = 300;

/// The documentation the dashboard shows for the widget (`describe`).
pub const DESCRIBE: &str = "## Tern console\n\
Params: `{\"widget\": \"dead_letters\"}`, `{\"widget\": \"endpoints\"}`, `{\"widget\": \"waiting\"}` or \
`{\"widget\": \"event_lookup\", \"tenant_id\": \"tnt_...\", \"event_id\": \"evt_...\"}`.\n\n\
- **dead_letters**: the DLQ grouped by endpoint and reason, with Replay and Replay (dry run) \
buttons that invoke the replay function with the group's filters.\n\
- **endpoints**: endpoints that are not healthy (disabled, open, paused, degraded) or have \
dead letters or waiting deliveries, with their health and an Enable button.\n\
- **waiting**: per endpoint, the deliveries scheduled for a later attempt, with attempt number \
and due time, and the totals.\n\
- **event_lookup**: the attempt history of one event id (type it in the widget's field).\n\
- **audit** (`{\"widget\": \"audit\", \"since\": \"1h\"}`): is anything lost? Every (event, subscribed \
endpoint) pair of the events created since then (at most 24 h) delivered, waiting, in flight, \
dead-lettered, parked or unaccounted, as `tern audit` judges them.";

fn time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

fn opt(text: Option<&str>) -> String {
    text.map_or_else(|| "-".to_owned(), |t| cut(t, CELL_CHARS))
}

/// JSON to put inside an element as text: `<`, `>` and `&` become JSON's `\u003c`,
/// `\u003e`, `\u0026` (they occur only inside strings), so the text holds no markup and
/// reads the same whether the dashboard takes the element's `textContent` or its
/// `innerHTML`, and it parses back to the same value.
pub fn json_for_html(value: &serde_json::Value) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// A button that runs `action` behind a confirmation: a `<cwdb-action action="call">`
/// on a dashboard, a posting form in local mode. Its data attributes name the action and
/// its parameters, for tests and for the operator's browser tools.
pub fn button(
    target: &Target,
    widget: Widget,
    action: &Action,
    label: &str,
    confirmation: &str,
) -> Markup {
    let params = action.params(widget);
    let json = params.to_string();
    let field = |name: &str| {
        params
            .get(name)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let dry_run = matches!(action, Action::Replay { dry_run: true, .. });
    let kind = field("action");
    let class = if dry_run { "btn" } else { "btn btn-primary" };
    match target {
        Target::CloudWatch { function_arn } => html! {
            a class=(class) data-action=(kind) data-endpoint=(field("endpoint_id"))
                data-reason=(field("reason")) data-dry-run=(dry_run) { (label) }
            cwdb-action action="call" endpoint=(function_arn) confirmation=(confirmation)
                display="widget" { (PreEscaped(json_for_html(&params))) }
        },
        Target::Local { action_path } => html! {
            form class="action" method="post" action=(action_path) data-confirm=(confirmation)
                onsubmit="return confirm(this.dataset.confirm)" {
                input type="hidden" name="params" value=(json);
                button type="submit" class=(class) data-action=(kind)
                    data-endpoint=(field("endpoint_id")) data-reason=(field("reason"))
                    data-dry-run=(dry_run) { (label) }
            }
        },
    }
}

fn outcome_banner(outcome: Option<&ActionOutcome>) -> Markup {
    match outcome {
        None => html! {},
        Some(ActionOutcome::Replayed {
            action,
            summary,
            remaining,
        }) => {
            let (endpoint, reason) = match action {
                Action::Replay {
                    endpoint_id,
                    reason,
                    ..
                } => (endpoint_id.as_str(), reason.as_str()),
                Action::Enable { .. } => ("", ""),
            };
            html! {
                div class="outcome" id="outcome" data-replayed=(summary.replayed)
                    data-matched=(summary.matched) data-skipped=(summary.skipped)
                    data-remaining=(remaining) data-dry-run=(summary.dry_run) {
                    @if summary.dry_run {
                        strong { "Dry run" } " for " code { (endpoint) } " / " code { (reason) } ": "
                        (summary.matched) " would be replayed, "
                    } @else {
                        strong { "Replayed " (summary.replayed) } " of " code { (endpoint) } " / "
                        code { (reason) } ", "
                    }
                    (summary.skipped) " skipped (other groups), "
                    (remaining) " remaining in this group."
                    @if summary.unreadable > 0 { " " (summary.unreadable) " unreadable left in place." }
                    @if summary.already_replayed > 0 {
                        " " (summary.already_replayed) " came back to the DLQ during the run and stay (one replay per delivery per run)."
                    }
                }
            }
        }
        Some(ActionOutcome::Enabled { endpoint_id }) => html! {
            div class="outcome" id="outcome" data-enabled=(endpoint_id.as_str()) {
                "Enabled " code { (endpoint_id.as_str()) } ". " (tern_ops::ENABLED_RESUME_NOTE)
                " Its dead letters stay in the DLQ: replay them from Dead letters to resend them."
            }
        },
        Some(ActionOutcome::Failed { error }) => html! {
            div class="outcome error" id="outcome" data-failed="true" {
                strong { "Failed: " } (cut(error, CELL_CHARS)) " Nothing was lost: dead letters not moved stay in the DLQ."
            }
        },
    }
}

/// The Dead letters widget. `capped`: the read stopped at
/// [`crate::MAX_DEAD_LETTERS_READ`], so counts are lower bounds.
pub fn dead_letters(
    groups: &[DeadLetterGroup],
    capped: bool,
    outcome: Option<&ActionOutcome>,
    target: &Target,
) -> Markup {
    let total: usize = groups.iter().map(|g| g.count).sum();
    html! {
        div class="tern-widget" id="dead-letters" data-groups=(groups.len()) data-total=(total) {
            (outcome_banner(outcome))
            p class="help" {
                "Dead letters grouped by endpoint and reason. Inspect the sample payload, fix the receiver, then "
                "Replay the group (a dry run only counts). Replayed deliveries keep their event id and get a fresh attempt budget."
                @if capped { " Only the first " (crate::MAX_DEAD_LETTERS_READ) " messages were read: counts are lower bounds." }
            }
            @if groups.is_empty() {
                p class="empty" id="dlq-empty" { "The DLQ is empty: nothing to replay." }
            } @else {
                table {
                    thead { tr {
                        th { "Endpoint" } th { "Tenant" } th { "Reason" } th { "Count" }
                        th { "Oldest" } th { "Newest" } th { "Last status" } th { "Last error" }
                        th { "Sample payload" } th { "Actions" }
                    } }
                    tbody {
                        @for g in groups {
                            (group_row(g, target))
                        }
                    }
                }
            }
        }
    }
}

fn group_row(g: &DeadLetterGroup, target: &Target) -> Markup {
    let replayable = g
        .endpoint_id
        .as_deref()
        .and_then(|e| EndpointId::new(e).ok())
        .zip(g.reason.parse::<DeadLetterReason>().ok());
    let sample = &g.sample;
    html! {
        tr class="group" data-endpoint=(g.endpoint_id.as_deref().unwrap_or("")) data-reason=(g.reason) data-count=(g.count) {
            td { code { (opt(g.endpoint_id.as_deref())) } }
            td { (opt(g.tenant_id.as_deref())) }
            td { (g.reason) }
            td class="count" { (g.count) }
            td { (time(g.oldest)) }
            td { (time(g.newest)) }
            td { (g.last_status.map_or_else(|| "-".to_owned(), |s| s.to_string())) }
            td class="error-text" { (opt(g.last_error.as_deref())) }
            td {
                div class="meta" { (opt(sample.event_type.as_deref())) " " code { (opt(sample.event_id.as_deref())) } }
                pre class="sample" { (sample.payload_sample) @if sample.payload_truncated { "…" } }
            }
            td class="actions" {
                @if let Some((endpoint_id, reason)) = replayable {
                    (button(target, Widget::DeadLetters, &Action::Replay { endpoint_id: endpoint_id.clone(), reason, dry_run: false },
                        "Replay", &format!("Replay the {} dead letters of {endpoint_id} ({reason}) to the delivery queue?", g.count)))
                    " "
                    (button(target, Widget::DeadLetters, &Action::Replay { endpoint_id: endpoint_id.clone(), reason, dry_run: true },
                        "Replay (dry run)", &format!("Count the dead letters of {endpoint_id} ({reason}) that would be replayed? Nothing moves.")))
                } @else if g.reason == tern_ops::dlq::REASON_SQS_REDRIVE {
                    span class="note" { "Moved by SQS after repeated receives (a crash): replay with the replay function filtered by endpoint only." }
                } @else {
                    span class="note" { "Not a delivery message: cannot be replayed. Inspect it in the SQS console." }
                }
            }
        }
    }
}

/// One row of the Endpoints widget: an endpoint that is not healthy (disabled, open,
/// paused, degraded), or has dead letters or waiting deliveries. Holds no secret: built
/// field by field from the endpoint and its health row.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRow {
    /// Its health, as `tern endpoints health` shows it (state, since when it fails, the
    /// circuit, the pause, last success and failure, waiting deliveries).
    pub health: HealthRow,
    /// Its request body format: a receiver answering 400 after a format change shows here.
    pub payload_format: PayloadFormat,
    /// Its rate limit, requests per second (`None`: no limit): why its deliveries wait.
    pub max_per_second: Option<u32>,
    /// How it authenticates to its receiver (`none`, `basic`, `bearer`,
    /// `oauth2_client_credentials`): a receiver answering 401, or `auth_token` failures,
    /// show next to it. No credential is read into the row.
    pub auth: &'static str,
    /// Its signature schemes (`v1`, `v1a`, `both`).
    pub signatures: tern_core::Signatures,
    /// The names of its custom headers, a secret one marked `(secret)`; never a value.
    pub header_names: Vec<String>,
    /// The name of the Secrets Manager secret holding its client certificate (mutual
    /// TLS; `None`: none): `tls` failures show next to it. Read-only here.
    pub client_certificate: Option<String>,
    /// Why it is listed, in words: the disabled reason, and its dead letters' reasons.
    pub reason: String,
    /// Its dead letters in the DLQ.
    pub dead_letters: usize,
    /// The newest of them (its dead-letter time).
    pub newest_dead_letter: Option<DateTime<Utc>>,
}

impl EndpointRow {
    /// True when it is disabled (it gets an Enable button).
    pub fn disabled(&self) -> bool {
        self.health.state == HealthState::Disabled
    }
}

/// The endpoints worth an operator's look, worst first (as `tern endpoints health`:
/// disabled, open, paused, degraded, then healthy ones with dead letters or waiting
/// deliveries), then by dead letters (most first). `health` holds every endpoint's row.
pub fn failing_endpoints(
    endpoints: &[Endpoint],
    health: &[HealthRow],
    groups: &[DeadLetterGroup],
) -> Vec<EndpointRow> {
    let mut rows: Vec<EndpointRow> = health
        .iter()
        .filter_map(|h| {
            let e = endpoints
                .iter()
                .find(|e| e.id == h.endpoint_id && e.tenant_id == h.tenant_id)?;
            let mine: Vec<&DeadLetterGroup> = groups
                .iter()
                .filter(|g| {
                    g.endpoint_id.as_deref() == Some(e.id.as_str())
                        && g.tenant_id.as_deref() == Some(e.tenant_id.as_str())
                })
                .collect();
            let dead_letters: usize = mine.iter().map(|g| g.count).sum();
            if h.state == HealthState::Healthy && dead_letters == 0 && h.waiting.unwrap_or(0) == 0 {
                return None;
            }
            let reasons = mine
                .iter()
                .map(|g| format!("{} {}", g.count, g.reason))
                .collect::<Vec<_>>()
                .join(", ");
            let reason = match (&h.disabled_reason, reasons.is_empty()) {
                (Some(r), true) => r.clone(),
                (Some(r), false) => format!("{r}; dead letters: {reasons}"),
                (None, false) => format!("dead letters: {reasons}"),
                (None, true) => "-".to_owned(),
            };
            Some(EndpointRow {
                health: h.clone(),
                payload_format: e.payload_format,
                max_per_second: e.max_per_second,
                auth: e.auth.kind(),
                signatures: e.signatures,
                header_names: e
                    .headers
                    .iter()
                    .map(|h| {
                        if h.value.is_secret() {
                            format!("{} (secret)", h.name)
                        } else {
                            h.name.clone()
                        }
                    })
                    .collect(),
                client_certificate: e.client_certificate.as_ref().map(|c| {
                    // The secret's name: the ARN after `:secret:` (not a secret itself).
                    c.secret_arn
                        .split_once(":secret:")
                        .map_or(c.secret_arn.as_str(), |(_, name)| name)
                        .to_owned()
                }),
                reason,
                dead_letters,
                newest_dead_letter: mine.iter().filter_map(|g| g.newest).max(),
            })
        })
        .collect();
    let rank = |s: HealthState| match s {
        HealthState::Disabled => 0,
        HealthState::Open => 1,
        HealthState::Paused => 2,
        HealthState::Degraded => 3,
        HealthState::Healthy => 4,
    };
    rows.sort_by(|a, b| {
        rank(a.health.state)
            .cmp(&rank(b.health.state))
            .then(b.dead_letters.cmp(&a.dead_letters))
            .then_with(|| a.health.endpoint_id.cmp(&b.health.endpoint_id))
    });
    rows
}

fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{:.1} %", r * 100.0))
}

/// The Endpoints widget. `waiting_complete` false: the waiting counts are lower bounds.
pub fn endpoints(
    rows: &[EndpointRow],
    waiting_complete: bool,
    outcome: Option<&ActionOutcome>,
    target: &Target,
) -> Markup {
    html! {
        div class="tern-widget" id="endpoints" data-rows=(rows.len()) {
            (outcome_banner(outcome))
            p class="help" {
                "Endpoints that are disabled, open (one probe per interval), paused (the receiver asked to wait) or degraded, "
                "and any with dead letters or deliveries waiting for a later attempt, worst first. "
                "Failing since: the first failed attempt after the last success. Waiting: retries scheduled and deliveries held back (see Waiting). "
                "Enable turns a disabled endpoint back on; it does not resend its dead letters (replay them from Dead letters)."
                @if !waiting_complete { " The waiting list was read in part: counts are lower bounds." }
            }
            @if rows.is_empty() {
                p class="empty" id="endpoints-empty" { "Every endpoint is healthy, enabled, with no dead letters and nothing waiting." }
            } @else {
                table {
                    thead { tr {
                        th { "Endpoint" } th { "Tenant" } th { "URL" } th { "Payload format" } th { "Rate limit" } th { "Auth" } th { "Signatures" } th { "Headers" } th { "Client certificate" } th { "State" } th { "Reason" }
                        th { "Success 1 h" } th { "Failing since" } th { "Circuit opened" } th { "Next probe / paused until" }
                        th { "Last success" } th { "Last failure" } th { "Waiting" } th { "Next due" }
                        th { "Dead letters" } th { "Actions" }
                    } }
                    tbody {
                        @for r in rows {
                            @let h = &r.health;
                            tr class="endpoint" data-endpoint=(h.endpoint_id.as_str()) data-state=(h.state.to_string())
                                data-waiting=(h.waiting.unwrap_or(0)) data-dead-letters=(r.dead_letters) {
                                td { code { (h.endpoint_id.as_str()) } }
                                td { (h.tenant_id.as_str()) }
                                td class="url" { (cut(&h.url, CELL_CHARS)) }
                                td class="payload-format" { code { (r.payload_format.as_str()) } }
                                td class="rate-limit" { (r.max_per_second.map_or_else(|| "-".to_owned(), |n| format!("{n}/s"))) }
                                td class="auth" { code { (r.auth) } }
                                td class="signatures" { code { (r.signatures.as_str()) } }
                                td class="headers" {
                                    @if r.header_names.is_empty() { "-" } @else { (cut(&r.header_names.join(", "), CELL_CHARS)) }
                                }
                                td class="client-certificate" {
                                    @if let Some(name) = &r.client_certificate { code { (cut(name, CELL_CHARS)) } } @else { "-" }
                                }
                                td class=(format!("state {}", h.state)) { (h.state.to_string()) }
                                td class="error-text" { (cut(&r.reason, CELL_CHARS)) }
                                td { (rate(h.success_rate_window)) " (" (h.attempts_window) ")" }
                                td class="failing-since" { (time(h.failing_since)) }
                                td { (time(h.circuit_opened_at)) }
                                td class="next-probe" { (time(h.paused_until.or(h.next_probe_at))) }
                                td { (time(h.last_success_at)) }
                                td class="last-failure" {
                                    @if let Some(f) = &h.last_failure {
                                        (time(Some(f.at))) br;
                                        span class="error-text" { (tern_ops::health::failure_text(f, CELL_CHARS)) }
                                    } @else { "-" }
                                }
                                td class="count waiting" { (h.waiting.map_or_else(|| "-".to_owned(), |n| n.to_string())) }
                                td class="next-due" { (time(h.next_due_at)) }
                                td class="count" { (r.dead_letters) }
                                td class="actions" {
                                    @if r.disabled() {
                                        (button(target, Widget::Endpoints,
                                            &Action::Enable { tenant_id: h.tenant_id.clone(), endpoint_id: h.endpoint_id.clone() },
                                            "Enable", &format!("Enable {} of tenant {}? Deliveries to it resume.", h.endpoint_id, h.tenant_id)))
                                    } @else {
                                        span class="note" { "enabled" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The Waiting widget: per endpoint (soonest due first) its state, how many deliveries
/// wait, the next due time and what holds them; then its soonest deliveries (due time,
/// attempt, event); the totals.
pub fn waiting(report: &WaitingReport, target: &Target) -> Markup {
    let lookup = |tenant: &TenantId, event: &EventId| match target {
        Target::Local { .. } => html! {
            a href=(format!("/widgets/event_lookup?tenant_id={}&event_id={}", tenant.as_str(), event.as_str())) { code { (event.as_str()) } }
        },
        Target::CloudWatch { .. } => html! { code { (event.as_str()) } },
    };
    html! {
        div class="tern-widget" id="waiting" data-total=(report.total) data-endpoints=(report.endpoints.len())
            data-complete=(report.complete) {
            p class="help" {
                "Deliveries scheduled for a later attempt (queue delays and Step Functions waits alike), and those an open circuit, "
                "a receiver's pause or a rate limit holds back, per endpoint, soonest due first. Due times are UTC; while an endpoint is held, "
                "nothing goes before the time shown beside it. Read from the ledger's waiting index, not from SQS or Step Functions."
            }
            p class="totals" id="waiting-total" {
                strong { @if !report.complete { "at least " } (report.total) " waiting" }
                " for " (report.endpoints.len()) " endpoint" @if report.endpoints.len() != 1 { "s" } "."
                @if !report.complete { " The list was read in part: counts are lower bounds." }
            }
            @if report.endpoints.is_empty() {
                p class="empty" id="waiting-empty" { "Nothing is waiting: no delivery is scheduled for a later attempt." }
            } @else {
                table {
                    thead { tr {
                        th { "Endpoint" } th { "Tenant" } th { "State" } th { "Waiting" } th { "Next due" } th { "Held until" }
                        th { "Due" } th { "Attempt" } th { "Event" }
                    } }
                    tbody {
                        @for e in &report.endpoints {
                            @let state = e.state.map_or_else(|| "deleted".to_owned(), |s| s.to_string());
                            tr class="waiting-endpoint" data-endpoint=(e.endpoint_id.as_str()) data-waiting=(e.waiting) data-state=(state) {
                                td { code { (e.endpoint_id.as_str()) } }
                                td { (e.tenant_id.as_str()) }
                                td class=(format!("state {state}")) { (state) }
                                td class="count" { (e.waiting) }
                                td { (time(e.next_due_at)) }
                                td { (time(e.held_until)) @if let Some(by) = e.held_by { br; span class="note" { (by) } } }
                                td colspan="3" {
                                    @if let Some(url) = &e.url { span class="url" { (cut(url, CELL_CHARS)) } }
                                }
                            }
                            @for d in &e.deliveries {
                                tr class="waiting-delivery" data-endpoint=(e.endpoint_id.as_str()) data-event=(d.event_id.as_str()) data-attempt=(d.attempt) {
                                    td colspan="6" {}
                                    td { (time(Some(d.due_at))) }
                                    td class="count" { (d.attempt) }
                                    td { (lookup(&e.tenant_id, &d.event_id)) }
                                }
                            }
                            @if (e.deliveries.len() as u64) < e.waiting {
                                tr class="waiting-more" { td colspan="6" {} td colspan="3" class="note" {
                                    (e.waiting - e.deliveries.len() as u64) " more (tern waiting --endpoint " (e.endpoint_id.as_str()) " --max N lists them)"
                                } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What the event lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// No event id given yet.
    NotAsked {
        /// The tenant typed, if any.
        tenant: String,
    },
    /// The text is not an event id, or the tenant typed not a tenant id.
    Invalid {
        /// The tenant typed.
        tenant: String,
        /// The event id typed.
        input: String,
        /// What is wrong.
        error: String,
    },
    /// The attempt log of the event (empty when none was recorded).
    Found {
        /// The event's tenant.
        tenant: TenantId,
        /// The event.
        id: EventId,
        /// Its attempts, oldest first, with due times and its dead letters
        /// (`tern_ops::attempts`, as `tern attempts` shows them).
        report: AttemptsReport,
    },
}

/// The Event lookup widget: every try (when the next was due, what the receiver answered)
/// and a row for each budget that ended in the DLQ, in time order, as `tern attempts`.
pub fn event_lookup(lookup: &Lookup, target: &Target) -> Markup {
    let (tenant, current) = match lookup {
        Lookup::NotAsked { tenant } => (tenant.clone(), String::new()),
        Lookup::Invalid { tenant, input, .. } => (tenant.clone(), input.clone()),
        Lookup::Found { tenant, id, .. } => (tenant.to_string(), id.to_string()),
    };
    html! {
        div class="tern-widget" id="event-lookup" {
            @match target {
                Target::CloudWatch { function_arn } => {
                    div class="lookup" {
                        input name="tenant_id" placeholder="tenant" value=(tenant);
                        " "
                        input name="event_id" placeholder="evt_…" value=(current);
                        " "
                        a class="btn btn-primary" { "Look up" }
                        cwdb-action action="call" endpoint=(function_arn) display="widget" {
                            (PreEscaped(json_for_html(&serde_json::json!({ "widget": Widget::EventLookup.as_str() }))))
                        }
                    }
                }
                Target::Local { .. } => {
                    form class="lookup" method="get" action="/widgets/event_lookup" {
                        input name="tenant_id" placeholder="tenant" value=(tenant);
                        " "
                        input name="event_id" placeholder="evt_…" value=(current);
                        " "
                        button type="submit" class="btn btn-primary" { "Look up" }
                    }
                }
            }
            @match lookup {
                Lookup::NotAsked { .. } => p class="empty" { "Type a tenant and an event id (the webhook-id) to see every attempt to deliver it." },
                Lookup::Invalid { error, .. } => p class="outcome error" id="lookup-invalid" { "Cannot look it up: " (error) },
                Lookup::Found { id, report, .. } if report.attempts.is_empty() && report.dead_letters.is_empty() => {
                    p class="empty" id="lookup-empty" { "No attempts recorded for " code { (id.as_str()) } "." }
                }
                Lookup::Found { id, report, .. } => {
                    @if let Target::Local { .. } = target {
                        p { a id="trace-link" href=(format!("/trace?event_id={}", id.as_str())) { "Trace of this event (waterfall)" } }
                    }
                    table id="history" data-rows=(report.attempts.len()) data-dead-letters=(report.dead_letters.len()) {
                        thead { tr {
                            th { "Started" } th { "Endpoint" } th { "Replay" } th { "Attempt" } th { "Status" }
                            th { "Latency (ms)" } th { "Outcome" } th { "Next due" } th { "Error / response" }
                        } }
                        tbody {
                            @for row in history_rows(report) {
                                @match row {
                                    HistoryRow::Try(r) => {
                                        tr class="attempt" data-outcome=(r.outcome) {
                                            td { (time(Some(r.started_at))) }
                                            td { code { (r.endpoint_id) } }
                                            td { (r.replay_count) }
                                            td { (r.attempt) @if r.takeover > 0 { " takeover " (r.takeover) } }
                                            td { (r.status.map_or_else(|| "-".to_owned(), |s| s.to_string())) }
                                            td { (r.latency_ms) }
                                            td { (r.outcome) }
                                            td class="next-due" { (time(r.next_attempt_due_at)) }
                                            td class="error-text" {
                                                pre class="sample" { (tern_ops::attempts::detail(r, CELL_CHARS)) }
                                            }
                                        }
                                    }
                                    HistoryRow::Dead(d) => {
                                        tr class="dead-letter" data-reason=(d.reason) {
                                            td { (time(Some(d.dead_lettered_at))) }
                                            td { code { (d.endpoint_id) } }
                                            td { (d.replay_count) }
                                            td { "-" } td { "-" } td { "-" }
                                            td { strong { "in DLQ: " (d.reason) } }
                                            td class="next-due" { "-" }
                                            td class="note" {
                                                @if d.replayed_since { "dead-lettered; replayed since" }
                                                @else { "dead-lettered; replay it from Dead letters once fixed" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A row of the history table.
enum HistoryRow<'a> {
    Try(&'a AttemptView),
    Dead(&'a DeadLetterRow),
}

/// The tries and the dead letters in time order (a dead letter after the try that ended
/// its budget).
fn history_rows(report: &AttemptsReport) -> Vec<HistoryRow<'_>> {
    let mut rows: Vec<(DateTime<Utc>, u8, HistoryRow)> = report
        .attempts
        .iter()
        .map(|a| (a.started_at, 0, HistoryRow::Try(a)))
        .chain(
            report
                .dead_letters
                .iter()
                .map(|d| (d.dead_lettered_at, 1, HistoryRow::Dead(d))),
        )
        .collect();
    rows.sort_by_key(|(t, order, _)| (*t, *order));
    rows.into_iter().map(|(_, _, r)| r).collect()
}

/// Pairs listed in the "Is anything lost?" widget's table of pairs not delivered (the
/// counts cover them all; `tern audit` lists up to 1,000): 50.
pub const AUDIT_ROWS_SHOWN: usize = 50;

/// What the "Is anything lost?" widget shows.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditView {
    /// The audit ran.
    Done {
        /// The window's start as typed (`1h`, an RFC 3339 time).
        since: String,
        /// Its answer.
        report: Box<AuditReport>,
    },
    /// The audit could not run or finish: a bad window, a store that cannot be read, or
    /// more to read than one render allows.
    Failed {
        /// The window's start as typed.
        since: String,
        /// Why, in words.
        error: String,
    },
}

/// The "Is anything lost?" widget: `tern audit`'s answer for the window typed (default the
/// last hour): the verdict first (every pair accounted for, or how many are not), the
/// counts per status and per endpoint, the pairs not delivered yet, and each unaccounted
/// pair with what is known of it.
pub fn audit(view: &AuditView, target: &Target) -> Markup {
    let since = match view {
        AuditView::Done { since, .. } | AuditView::Failed { since, .. } => since.as_str(),
    };
    let lookup = |tenant: &str, event: &str| match target {
        Target::Local { .. } => html! {
            a href=(format!("/widgets/event_lookup?tenant_id={tenant}&event_id={event}")) { code { (event) } }
        },
        Target::CloudWatch { .. } => html! { code { (event) } },
    };
    html! {
        div class="tern-widget" id="audit" {
            @match target {
                Target::CloudWatch { function_arn } => {
                    div class="lookup" {
                        "Events created since " input name="since" value=(since);
                        " "
                        a class="btn btn-primary" { "Check" }
                        cwdb-action action="call" endpoint=(function_arn) display="widget" {
                            (PreEscaped(json_for_html(&serde_json::json!({ "widget": Widget::Audit.as_str() }))))
                        }
                    }
                }
                Target::Local { .. } => {
                    form class="lookup" method="get" action="/widgets/audit" {
                        "Events created since " input name="since" value=(since);
                        " "
                        button type="submit" class="btn btn-primary" { "Check" }
                    }
                }
            }
            p class="help" {
                "A duration ago (30m, 1h, 24h at most) or an RFC 3339 time. Every (event, subscribed endpoint) pair of the events "
                "created since then, judged as " code { "tern audit" } " judges it: from the outbox, the ledger, the DLQ and the "
                "relay-failure queue."
            }
            @match view {
                AuditView::Failed { error, .. } => {
                    p class="outcome error" id="audit-failed" { "Not audited: " (cut(error, CELL_CHARS * 2)) }
                }
                AuditView::Done { report, .. } => (audit_report(report, &lookup)),
            }
        }
    }
}

fn audit_report(r: &AuditReport, lookup: &dyn Fn(&str, &str) -> Markup) -> Markup {
    let t = &r.totals;
    html! {
        @if r.all_accounted() {
            p class="outcome" id="audit-verdict" data-unaccounted="0" data-pairs=(t.pairs()) {
                strong { "Nothing is lost: " } "every one of " (t.pairs()) " pairs is accounted for."
            }
        } @else {
            p class="outcome error" id="audit-verdict" data-unaccounted=(t.unaccounted) data-pairs=(t.pairs()) {
                strong { (t.unaccounted) " of " (t.pairs()) " pairs unaccounted." }
                " Each is listed below with what is known of it."
            }
        }
        p class="totals" id="audit-totals" {
            (r.events) " events created " (time(Some(r.since))) " .. " (time(Some(r.until)))
            " (" (r.events_without_pairs) " without subscribers). "
            @for (i, s) in PairStatus::ALL.iter().enumerate() {
                @if i > 0 { ", " }
                span class=(format!("status {}", s.as_str())) data-status=(s.as_str()) data-count=(t.of(*s)) {
                    (s.as_str().replace('_', " ")) " " (t.of(*s))
                }
            }
            "."
        }
        @if !r.endpoints.is_empty() {
            table id="audit-endpoints" {
                thead { tr {
                    th { "Endpoint" } th { "Tenant" } th { "Now" } th { "Pairs" } th { "Delivered" } th { "Waiting" }
                    th { "In flight" } th { "DLQ" } th { "Parked" } th { "Unaccounted" }
                } }
                tbody {
                    @for e in &r.endpoints {
                        @let x = &e.totals;
                        tr class="audit-endpoint" data-endpoint=(e.endpoint_id) data-unaccounted=(x.unaccounted) {
                            td { code { (e.endpoint_id) } }
                            td { (e.tenant_id) }
                            td class=(format!("state {}", e.endpoint_state)) { (e.endpoint_state) }
                            td class="count" { (x.pairs()) }
                            td class="count" { (x.delivered) }
                            td class="count" { (x.waiting) }
                            td class="count" { (x.in_flight) }
                            td class="count" { (x.dead_lettered) }
                            td class="count" { (x.parked) }
                            td class=(if x.unaccounted > 0 { "count state disabled" } else { "count" }) { (x.unaccounted) }
                        }
                    }
                }
            }
        }
        @if !r.unaccounted.is_empty() {
            h4 { "Unaccounted" }
            table id="audit-unaccounted" {
                thead { tr { th { "Event" } th { "Endpoint" } th { "Created" } th { "Why" } th { "Endpoint now" } th { "Ledger" } } }
                tbody {
                    @for u in &r.unaccounted {
                        @let p = &u.pair;
                        tr class="audit-unaccounted" data-event=(p.event_id) data-endpoint=(p.endpoint_id) {
                            td { (lookup(&p.tenant_id, &p.event_id)) br; span class="note" { (cut(&p.event_type, 80)) } }
                            td { code { (p.endpoint_id) } }
                            td { (time(Some(p.created_at))) br; span class="note" { (u.age_seconds) " s ago" } }
                            td { (cut(&p.finding.detail, CELL_CHARS)) }
                            td { (cut(&u.endpoint_now, CELL_CHARS)) }
                            td class="note" {
                                @match &u.state_item {
                                    None => "no state item (no sender claimed it)",
                                    Some(s) => {
                                        "claimed attempt " (s.claim_attempt().map_or_else(|| "-".to_owned(), |a| a.to_string()))
                                        @if s.claim_done { ", finished" } @else { ", not finished" }
                                    }
                                }
                                "; " (u.attempts.len()) " attempt row" @if u.attempts.len() != 1 { "s" }
                            }
                        }
                    }
                }
            }
        }
        @if !r.not_delivered.is_empty() {
            h4 { "Not delivered yet" @if r.not_delivered_truncated { " (first " (r.not_delivered.len()) " listed)" } }
            table id="audit-pairs" data-rows=(r.not_delivered.len()) {
                thead { tr { th { "Event" } th { "Endpoint" } th { "State" } th { "Due" } th { "Detail" } } }
                tbody {
                    @for p in &r.not_delivered {
                        tr class="audit-pair" data-event=(p.event_id) data-endpoint=(p.endpoint_id) data-status=(p.finding.status.as_str()) {
                            td { (lookup(&p.tenant_id, &p.event_id)) }
                            td { code { (p.endpoint_id) } }
                            td { (p.finding.status.as_str().replace('_', " ")) @if let Some(reason) = &p.finding.reason { br; span class="note" { (cut(reason, 80)) } } }
                            td { (time(p.finding.due_at)) }
                            td { (cut(&p.finding.detail, CELL_CHARS)) }
                        }
                    }
                }
            }
        }
        p class="note" id="audit-reads" {
            "Read: the outbox (" (r.reads.outbox_items_scanned) " items scanned), " (r.reads.ledger_queries) " ledger queries, "
            (r.reads.dlq_messages) " dead letters" @if !r.reads.dlq_complete { " (not the whole DLQ)" } ", "
            (r.reads.relay_failure_messages) " parked items" @if !r.reads.relay_failures_complete { " (not the whole queue)" } "."
            @for n in &r.notes { br; (cut(n, CELL_CHARS)) }
        }
    }
}

/// What the trace page shows (local mode: spans from the span file `tern trace` reads).
#[derive(Debug, Clone, PartialEq)]
pub enum TraceView<'a> {
    /// No event asked for yet.
    NotAsked,
    /// The span file could not be read.
    NoFile {
        /// The file.
        path: String,
        /// Why, in words.
        error: String,
    },
    /// The file holds no span of the event.
    NoSpans {
        /// The event id as typed.
        event_id: String,
    },
    /// The event's trace.
    Found {
        /// The event id.
        event_id: String,
        /// Its spans on one time axis ([`tern_handlers::span_log::waterfall_rows`]).
        chart: tern_handlers::span_log::Waterfall<'a>,
    },
}

/// Narrowest bar drawn, percent of the axis: 0.4, so a span of a few microseconds in a
/// trace of seconds still shows.
pub const MIN_BAR_PERCENT: f64 = 0.4;

/// The trace of one event as a waterfall: every span (the writer's, the fan-out, each
/// attempt, wait, dead letter, replay or resend, a receiver's) as a bar on one time axis,
/// indented under its parent, with its start and duration in milliseconds and what it
/// did. The same rows `tern trace` prints. Every name and attribute is text from the span
/// file, which other programs write through local mode's collector: maud escapes each.
pub fn trace(view: &TraceView) -> Markup {
    let current = match view {
        TraceView::NoSpans { event_id } | TraceView::Found { event_id, .. } => event_id.as_str(),
        _ => "",
    };
    html! {
        div class="tern-widget" id="trace-view" {
            form class="lookup" method="get" action="/trace" {
                input name="event_id" placeholder="evt_…" value=(current);
                " "
                button type="submit" class="btn btn-primary" { "Show trace" }
            }
            @match view {
                TraceView::NotAsked => p class="empty" { "Type an event id (the webhook-id) to see its trace: every attempt, wait, dead letter and replay on one time axis. Local mode keeps the spans in .tern/spans.jsonl (docs/tracing.md)." },
                TraceView::NoFile { path, error } => p class="outcome error" id="trace-no-file" { "Cannot read the span file " code { (path) } ": " (cut(error, CELL_CHARS)) " (is tracing on? docs/tracing.md)" },
                TraceView::NoSpans { event_id } => p class="empty" id="trace-empty" { "No spans of " code { (cut(event_id, CELL_CHARS)) } " in the span file." },
                TraceView::Found { chart, .. } => {
                    p class="note" { "trace " code { (chart.trace_id) } ", " (chart.rows.len()) " spans over " (format!("{:.1}", chart.total_ms)) " ms" }
                    table id="waterfall" data-trace-id=(chart.trace_id) data-spans=(chart.rows.len()) data-total-ms=(format!("{:.3}", chart.total_ms)) {
                        thead { tr {
                            th { "Start (ms)" } th { "Took (ms)" } th class="axis" { "0 ms" span class="axis-end" { (format!("{:.1} ms", chart.total_ms)) } }
                            th { "Span" } th { "What" }
                        } }
                        tbody {
                            @for row in &chart.rows {
                                // At least MIN_BAR_PERCENT wide; a bar that would pass the axis' end ends there.
                                @let width = ((row.to - row.from) * 100.0).clamp(MIN_BAR_PERCENT, 100.0);
                                @let left = (row.from * 100.0).min(100.0 - width);
                                tr class="span" data-name=(row.span.name) data-span-id=(row.span.span_id)
                                    data-parent-id=(row.span.parent_span_id) data-depth=(row.depth)
                                    data-error=(row.span.error) data-start-ms=(format!("{:.3}", row.start_ms)) {
                                    td class="num" { (format!("{:.1}", row.start_ms)) }
                                    td class="num" { (format!("{:.1}", row.took_ms)) }
                                    td class="axis" {
                                        div class="track" {
                                            div class=(if row.span.error { "bar error" } else { "bar" })
                                                style=(format!("left:{left:.3}%;width:{width:.3}%")) {}
                                        }
                                    }
                                    td class="span-name" style=(format!("padding-left:{}px", 8 + 16 * row.depth)) { (cut(&row.span.name, CELL_CHARS)) }
                                    td class="what" { (cut(&row.what.join(" "), CELL_CHARS)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A widget-sized error message.
pub fn error(e: &ConsoleError) -> Markup {
    html! { div class="tern-widget outcome error" id="widget-error" { (cut(&e.to_string(), CELL_CHARS)) } }
}

const STYLE: &str = "body{font-family:Arial,Helvetica,sans-serif;font-size:14px;margin:16px;color:#16191f}\
nav a{margin-right:16px}table{border-collapse:collapse;margin-top:8px}\
th,td{border-bottom:1px solid #d5dbdb;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#fafafa}pre.sample{max-width:360px;white-space:pre-wrap;word-break:break-all;margin:0;font-size:12px}\
.btn{display:inline-block;padding:4px 10px;border:1px solid #545b64;border-radius:2px;background:#fff;cursor:pointer;font-size:13px}\
.btn-primary{background:#ec7211;border-color:#ec7211;color:#fff}form.action{display:inline}\
.outcome{padding:8px;margin-bottom:8px;background:#f2f8f0;border:1px solid #1d8102}\
.outcome.error{background:#fdf3f1;border-color:#d13212}.help,.note{color:#545b64;font-size:12px}\
input[name=event_id]{width:380px;padding:3px}input[name=since]{width:200px;padding:3px}.state.disabled{color:#d13212;font-weight:bold}.state.open{color:#d13212;font-weight:bold}\
.state.paused,.state.degraded{color:#ec7211;font-weight:bold}tr.waiting-endpoint td{border-top:2px solid #d5dbdb}\
#waterfall td.num{text-align:right;font-variant-numeric:tabular-nums}#waterfall .axis{width:520px;position:relative}\
#waterfall .axis-end{position:absolute;right:8px}#waterfall .track{position:relative;height:14px;background:#f2f3f3}\
#waterfall .bar{position:absolute;top:0;height:14px;background:#0073bb}#waterfall .bar.error{background:#d13212}\
#waterfall td.what{color:#545b64;font-size:12px}";

/// A local-mode page around one widget's HTML (made by the functions above), with links
/// to the other widgets.
pub fn local_page(widget: Widget, widget_html: &str) -> Markup {
    local_page_titled(widget.title(), widget_html)
}

/// Title of local mode's trace page ([`trace`]), at `/trace`.
pub const TRACE_TITLE: &str = "Trace of an event";

/// A local-mode page titled `title` around HTML made by the functions above, with links to
/// every widget and to the trace page.
pub fn local_page_titled(title: &str, widget_html: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Tern console: " (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                nav {
                    strong { "Tern console (local)" } " "
                    @for w in Widget::ALL {
                        a href=(format!("/widgets/{}", w.as_str())) { (w.title()) }
                    }
                    a href="/trace" { (TRACE_TITLE) }
                }
                h2 { (title) }
                (PreEscaped(widget_html))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::health::{EndpointHealth, HealthPolicy, LastFailure};
    use tern_core::ports::{AttemptRecord, ReceivedMessage};
    use tern_core::{DeadLetter, DeliveryMessage, Event, Secret, TenantId};
    use tern_handlers::replay::ReplaySummary;
    use tern_ops::dlq::{group, view};

    const XSS: &str = "</table><img src=x onerror=alert(1)>";

    fn cw() -> Target {
        Target::CloudWatch {
            function_arn: "arn:aws:lambda:eu-west-1:123456789012:function:tern-console".into(),
        }
    }

    fn local() -> Target {
        Target::Local {
            action_path: "/action".into(),
        }
    }

    fn message(
        payload: &str,
        endpoint: &str,
        reason: DeadLetterReason,
        error: &str,
    ) -> ReceivedMessage {
        let event: Event = serde_json::from_value(serde_json::json!({
            "id": EventId::generate().as_str(), "type": "order.paid", "tenant_id": "tnt_a",
            "created_at": "2026-11-30T00:00:00Z", "payload": {"note": payload},
        }))
        .unwrap();
        let m = DeliveryMessage::first(event, EndpointId::new(endpoint).unwrap()).dead_lettered(
            DeadLetter {
                reason,
                last_status: Some(500),
                last_error: Some(error.into()),
                attempts: 7,
                at: "2026-11-30T10:00:00Z".parse().unwrap(),
            },
        );
        ReceivedMessage {
            message_id: "m".into(),
            receipt_handle: "r".into(),
            body: m.to_body(),
            attributes: vec![],
        }
    }

    fn groups_of(messages: &[ReceivedMessage]) -> Vec<DeadLetterGroup> {
        group(&messages.iter().map(view).collect::<Vec<_>>())
    }

    #[test]
    fn payload_and_error_from_a_receiver_render_as_text() {
        let groups = groups_of(&[message(XSS, "ep_a", DeadLetterReason::Exhausted, XSS)]);
        for target in [cw(), local()] {
            let html = dead_letters(&groups, false, None, &target).into_string();
            assert!(!html.contains("<img"), "{html}");
            assert!(!html.contains("</table><img"), "{html}");
            assert!(
                html.contains("&lt;/table&gt;&lt;img src=x onerror=alert(1)&gt;"),
                "{html}"
            );
        }
    }

    #[test]
    fn unreadable_body_renders_as_text_without_buttons() {
        let junk = ReceivedMessage {
            message_id: "m".into(),
            receipt_handle: "r".into(),
            body: XSS.into(),
            attributes: vec![],
        };
        let html = dead_letters(&groups_of(&[junk]), false, None, &cw()).into_string();
        assert!(!html.contains("<img"));
        assert!(html.contains("&lt;img src=x"));
        assert!(
            !html.contains("cwdb-action"),
            "an unreadable message cannot be replayed"
        );
    }

    #[test]
    fn empty_dlq_says_so() {
        let html = dead_letters(&[], false, None, &cw()).into_string();
        assert!(html.contains("id=\"dlq-empty\""));
        assert!(!html.contains("<table"));
        let html = endpoints(&[], true, None, &cw()).into_string();
        assert!(html.contains("id=\"endpoints-empty\""));
    }

    #[test]
    fn replay_buttons_carry_the_groups_filters() {
        let groups = groups_of(&[
            message("a", "ep_a", DeadLetterReason::Exhausted, "e"),
            message("b", "ep_b", DeadLetterReason::Gone, "e"),
        ]);
        let html = dead_letters(&groups, false, None, &cw()).into_string();
        assert_eq!(
            html.matches("<cwdb-action").count(),
            4,
            "two buttons per group"
        );
        assert!(
            html.contains(
                "endpoint=\"arn:aws:lambda:eu-west-1:123456789012:function:tern-console\""
            )
        );
        assert!(html.contains("confirmation=\"Replay the 1 dead letters of ep_b (gone)"));
        // The JSON inside <cwdb-action> is the params as they are (no markup characters).
        let expected = serde_json::json!({"widget":"dead_letters","action":"replay","endpoint_id":"ep_b","reason":"gone","dry_run":true}).to_string();
        assert!(
            html.contains(&format!("display=\"widget\">{expected}</cwdb-action>")),
            "{html}"
        );
        let local_html = dead_letters(&groups, false, None, &local()).into_string();
        assert!(local_html.contains("action=\"/action\""));
        assert!(local_html.contains(&format!("value=\"{}\"", expected.replace('"', "&quot;"))));
    }

    #[test]
    fn json_in_an_element_holds_no_markup_and_parses_back() {
        let v = serde_json::json!({"x": "</cwdb-action><script>alert(1)</script>&amp;"});
        let text = json_for_html(&v);
        assert!(
            !text.contains('<') && !text.contains('>') && !text.contains('&'),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), v);
    }

    #[test]
    fn replay_request_of_a_button() {
        let a = Action::Replay {
            endpoint_id: EndpointId::new("ep_a").unwrap(),
            reason: DeadLetterReason::Exhausted,
            dry_run: true,
        };
        let r = a.replay_request().unwrap();
        assert!(r.dry_run);
        assert_eq!(r.filters.endpoint_id.unwrap().as_str(), "ep_a");
        assert_eq!(r.filters.reason, Some(DeadLetterReason::Exhausted));
        assert_eq!(r.max_seconds, Some(crate::CONSOLE_REPLAY_SECONDS));
        // The params round-trip through the event parser into the same action.
        let event: crate::WidgetEvent =
            serde_json::from_value(a.params(Widget::DeadLetters)).unwrap();
        assert_eq!(event.request().unwrap().action, Some(a));
    }

    #[test]
    fn replay_outcome_shows_replayed_skipped_remaining() {
        let outcome = ActionOutcome::Replayed {
            action: Action::Replay {
                endpoint_id: EndpointId::new("ep_a").unwrap(),
                reason: DeadLetterReason::Exhausted,
                dry_run: false,
            },
            summary: ReplaySummary {
                replayed: 3,
                skipped: 2,
                matched: 3,
                examined: 5,
                ..ReplaySummary::default()
            },
            remaining: 0,
        };
        let html = dead_letters(&[], false, Some(&outcome), &cw()).into_string();
        assert!(html.contains("data-replayed=\"3\""));
        assert!(html.contains("Replayed 3"));
        assert!(html.contains("2 skipped (other groups), 0 remaining in this group."));
    }

    fn endpoint(enabled: bool) -> Endpoint {
        let mut e = Endpoint::new(
            EndpointId::new("ep_off").unwrap(),
            TenantId::new("tnt_a").unwrap(),
            "https://example.com/hook?<script>alert(1)</script>",
            vec!["*".into()],
            Secret::parse("whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTIzNDU2").unwrap(),
            Utc::now(),
        );
        if !enabled {
            e.enabled = false;
            e.disabled_reason = Some("410 Gone <b>bye</b>".into());
            e.disabled_at = Some("2026-11-30T09:00:00Z".parse().unwrap());
        }
        e
    }

    fn endpoint_with_id(id: &str) -> Endpoint {
        let mut e = endpoint(true);
        e.id = EndpointId::new(id).unwrap();
        e
    }

    /// Every endpoint's health row, as the widget reads them, from records (`None`: never
    /// attempted).
    fn rows_of(endpoints: &[Endpoint], records: &[Option<EndpointHealth>]) -> Vec<HealthRow> {
        let now: DateTime<Utc> = "2026-11-30T10:30:00Z".parse().unwrap();
        endpoints
            .iter()
            .zip(records)
            .map(|(e, r)| HealthRow::of(e, r.as_ref(), &HealthPolicy::default(), now))
            .collect()
    }

    /// A record of an endpoint whose circuit is open: it failed since 10:00, the receiver
    /// answered 503 with `body`.
    fn open_record(e: &Endpoint, body: &str) -> EndpointHealth {
        let mut h = EndpointHealth::empty(e.tenant_id.clone(), e.id.clone(), 600);
        h.failing_since = Some("2026-11-30T10:00:00Z".parse().unwrap());
        h.opened_at = Some("2026-11-30T10:00:05Z".parse().unwrap());
        h.next_probe_at = Some("2026-11-30T10:31:00Z".parse().unwrap());
        h.last_failure = Some(LastFailure {
            at: "2026-11-30T10:29:00Z".parse().unwrap(),
            status: Some(503),
            error_class: None,
            error: Some("http status 503".into()),
            excerpt: Some(body.into()),
        });
        h
    }

    #[test]
    fn disabled_endpoint_row_has_enable_and_no_secret() {
        let e = endpoint(false);
        let secret = e.secrets[0].secret.expose().to_owned();
        let all = [e, endpoint_with_id("ep_ok")];
        let rows = failing_endpoints(&all, &rows_of(&all, &[None, None]), &[]);
        assert_eq!(
            rows.len(),
            1,
            "healthy endpoints without dead letters or waiting deliveries are not listed"
        );
        let html = endpoints(&rows, true, None, &cw()).into_string();
        assert!(!html.contains(&secret));
        assert!(!html.contains("whsec_"));
        assert!(!html.contains("<script>") && !html.contains("<b>"));
        assert!(html.contains("&lt;b&gt;bye&lt;/b&gt;"));
        assert!(html.contains("data-state=\"disabled\""));
        let expected = serde_json::json!({"widget":"endpoints","action":"enable","tenant_id":"tnt_a","endpoint_id":"ep_off"}).to_string();
        assert!(
            html.contains(&format!(">{expected}</cwdb-action>")),
            "{html}"
        );
    }

    /// Issue 17: the widget showed no health, left out an endpoint whose circuit is open
    /// when it had no dead letters, and said health tracking was a later issue.
    #[test]
    fn an_open_circuit_without_dead_letters_is_listed_with_its_health() {
        let open = endpoint_with_id("ep_open");
        let record = open_record(&open, "<img src=x onerror=alert(1)> maintenance");
        let all = [open, endpoint_with_id("ep_ok")];
        let mut health = rows_of(&all, &[Some(record), None]);
        tern_ops::health::add_waiting(
            &mut health,
            &tern_core::waiting::WaitingRead {
                entries: vec![tern_core::waiting::WaitingDelivery {
                    tenant_id: TenantId::new("tnt_a").unwrap(),
                    endpoint_id: EndpointId::new("ep_open").unwrap(),
                    event_id: EventId::new("evt_1").unwrap(),
                    attempt: 3,
                    due_at: "2026-11-30T10:35:00Z".parse().unwrap(),
                }],
                complete: true,
            },
        );
        let rows = failing_endpoints(&all, &health, &[]);
        assert_eq!(rows.len(), 1, "{rows:#?}");
        let html = endpoints(&rows, true, None, &local()).into_string();
        assert!(
            html.contains("data-endpoint=\"ep_open\" data-state=\"open\" data-waiting=\"1\""),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"failing-since\">2026-11-30 10:00:00 UTC</td>"),
            "{html}"
        );
        assert!(html.contains("<td class=\"next-due\">2026-11-30 10:35:00 UTC</td>"));
        assert!(html.contains("<td class=\"next-probe\">2026-11-30 10:31:00 UTC</td>"));
        // What the receiver answered, as text.
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("status 503: &quot;&lt;img src=x onerror=alert(1)&gt; maintenance&quot;")
        );
        assert!(!html.contains("not tracked yet") && !html.contains("later issue"));
    }

    #[test]
    fn endpoint_with_dead_letters_is_listed_without_enable() {
        let groups = groups_of(&[message("a", "ep_ok", DeadLetterReason::Exhausted, "e")]);
        let all = [endpoint_with_id("ep_ok")];
        let rows = failing_endpoints(&all, &rows_of(&all, &[None]), &groups);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].health.state, HealthState::Healthy);
        assert_eq!(rows[0].reason, "dead letters: 1 exhausted");
        assert_eq!(
            rows[0].newest_dead_letter.unwrap().to_rfc3339(),
            "2026-11-30T10:00:00+00:00"
        );
        let html = endpoints(&rows, true, None, &cw()).into_string();
        assert!(!html.contains("cwdb-action"));
    }

    #[test]
    fn endpoint_rows_show_the_auth_type_and_header_names_never_secret_values() {
        use tern_core::custom_headers::{CustomHeader, FieldValue};
        let mut e = endpoint(false);
        e.headers = vec![
            CustomHeader::new("X-Tenant", FieldValue::Plain("plain-tenant-value".into())).unwrap(),
            CustomHeader::new(
                "x-api-key",
                FieldValue::Secret(tern_core::SecretValue::new("header-secret-123")),
            )
            .unwrap(),
        ];
        e.auth = tern_core::receiver_auth::ReceiverAuth::Basic {
            username: "tern".into(),
            password: tern_core::SecretValue::new("basic-password-456"),
        };
        e.client_certificate = Some(
            tern_core::client_certificate::ClientCertificate::new(
                format!(
                    "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/{}/c-AbCdEf",
                    e.tenant_id
                ),
                &e.tenant_id,
            )
            .unwrap(),
        );
        let mut without = endpoint(false);
        without.id = EndpointId::new("ep_plain").unwrap();
        let all = [e, without];
        let rows = failing_endpoints(&all, &rows_of(&all, &[None, None]), &[]);
        let html = endpoints(&rows, true, None, &cw()).into_string();
        assert!(
            html.contains(&format!(
                "<td class=\"client-certificate\"><code>tern/mtls/{}/c-AbCdEf</code></td>",
                all[0].tenant_id
            )),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"client-certificate\">-</td>"),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"auth\"><code>basic</code></td>"),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"signatures\"><code>v1</code></td>"),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"headers\">x-tenant, x-api-key (secret)</td>"),
            "{html}"
        );
        for secret in [
            "header-secret-123",
            "basic-password-456",
            "plain-tenant-value",
        ] {
            assert!(!html.contains(secret), "{secret} in {html}");
        }
    }

    #[test]
    fn endpoint_rows_show_the_payload_format() {
        let mut wrapped = endpoint(false);
        wrapped.payload_format = PayloadFormat::StandardWebhooks;
        let mut raw = endpoint_with_id("ep_raw");
        raw.enabled = false;
        let all = [wrapped, raw];
        let rows = failing_endpoints(&all, &rows_of(&all, &[None, None]), &[]);
        let html = endpoints(&rows, true, None, &cw()).into_string();
        assert!(html.contains("<th>Payload format</th>"), "{html}");
        for (id, format) in [("ep_off", "standard_webhooks"), ("ep_raw", "raw")] {
            let row = html
                .split("<tr class=\"endpoint\"")
                .find(|r| r.contains(&format!("data-endpoint=\"{id}\"")))
                .unwrap_or_else(|| panic!("no row for {id}: {html}"));
            assert!(
                row.contains(&format!(
                    "<td class=\"payload-format\"><code>{format}</code></td>"
                )),
                "{row}"
            );
        }
    }

    #[test]
    fn endpoint_rows_show_the_rate_limit() {
        let mut limited = endpoint(false);
        limited.max_per_second = Some(10);
        let mut unlimited = endpoint_with_id("ep_free");
        unlimited.enabled = false;
        let all = [limited, unlimited];
        let rows = failing_endpoints(&all, &rows_of(&all, &[None, None]), &[]);
        let html = endpoints(&rows, true, None, &cw()).into_string();
        assert!(html.contains("<th>Rate limit</th>"), "{html}");
        for (id, limit) in [("ep_off", "10/s"), ("ep_free", "-")] {
            let row = html
                .split("<tr class=\"endpoint\"")
                .find(|r| r.contains(&format!("data-endpoint=\"{id}\"")))
                .unwrap_or_else(|| panic!("no row for {id}: {html}"));
            assert!(
                row.contains(&format!("<td class=\"rate-limit\">{limit}</td>")),
                "{row}"
            );
        }
    }

    #[test]
    fn waiting_lists_each_endpoints_deliveries_as_text() {
        let report = WaitingReport {
            endpoints: vec![tern_ops::waiting::WaitingEndpoint {
                tenant_id: TenantId::new("tnt_a").unwrap(),
                endpoint_id: EndpointId::new("ep_open").unwrap(),
                url: Some("https://h.example/<script>?…".into()),
                state: Some(HealthState::Open),
                waiting: 3,
                next_due_at: Some("2026-11-30T10:35:00Z".parse().unwrap()),
                held_until: Some("2026-11-30T10:36:00Z".parse().unwrap()),
                held_by: Some("open circuit"),
                deliveries: vec![tern_ops::waiting::WaitingView {
                    event_id: EventId::new("evt_1").unwrap(),
                    attempt: 3,
                    due_at: "2026-11-30T10:35:00Z".parse().unwrap(),
                }],
            }],
            total: 3,
            complete: true,
            queue: None,
            read_at: Utc::now(),
        };
        let html = waiting(&report, &local()).into_string();
        assert!(html.contains("data-total=\"3\""), "{html}");
        assert!(
            html.contains("data-endpoint=\"ep_open\" data-event=\"evt_1\" data-attempt=\"3\""),
            "{html}"
        );
        assert!(html.contains("href=\"/widgets/event_lookup?tenant_id=tnt_a&amp;event_id=evt_1\""));
        assert!(html.contains("2 more"), "{html}");
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"));
        let empty = WaitingReport {
            endpoints: vec![],
            total: 0,
            ..report
        };
        assert!(
            waiting(&empty, &cw())
                .into_string()
                .contains("id=\"waiting-empty\"")
        );
    }

    #[test]
    fn event_lookup_states() {
        let html = event_lookup(
            &Lookup::NotAsked {
                tenant: String::new(),
            },
            &cw(),
        )
        .into_string();
        assert!(html.contains("name=\"event_id\""));
        assert!(html.contains("name=\"tenant_id\""));
        assert!(html.contains("<cwdb-action"));
        let html = event_lookup(
            &Lookup::Invalid {
                tenant: "<b>".into(),
                input: "\"><script>".into(),
                error: "bad".into(),
            },
            &local(),
        )
        .into_string();
        assert!(!html.contains("<script>"));
        assert!(html.contains("value=\"&quot;&gt;&lt;script&gt;\""));
        assert!(html.contains("value=\"&lt;b&gt;\""));
        let id = EventId::generate();
        let found = |rows: &[AttemptRecord]| Lookup::Found {
            tenant: TenantId::new("tnt_a").unwrap(),
            id: id.clone(),
            report: tern_ops::attempts::report_scaled(id.as_str(), None, rows, 0.01),
        };
        let html = event_lookup(&found(&[]), &local()).into_string();
        assert!(html.contains("id=\"lookup-empty\""));
        let record = AttemptRecord {
            event_id: id.clone(),
            endpoint_id: EndpointId::new("ep_a").unwrap(),
            replay_count: 0,
            attempt: 1,
            takeover: 0,
            started_at: "2026-11-30T10:00:00Z".parse().unwrap(),
            latency_ms: 12,
            status: Some(500),
            error_class: None,
            error: Some("http status 500".into()),
            location: None,
            response_excerpt: Some(XSS.into()),
            excerpt_truncated: true,
            outcome: "retry".into(),
            next_wait_seconds: Some(60),
        };
        let html = event_lookup(&found(std::slice::from_ref(&record)), &cw()).into_string();
        assert!(html.contains("data-rows=\"1\""));
        assert!(!html.contains("<img"));
        assert!(
            html.contains("&lt;img"),
            "what the receiver answered: {html}"
        );
        // The next attempt was due 1 s after the try (60 s at ×0.01).
        assert!(
            html.contains("<td class=\"next-due\">2026-11-30 10:00:01 UTC</td>"),
            "{html}"
        );
        // Issue 17: a delivery dead-lettered when its endpoint was disabled has a row, and
        // a last row says it is in the DLQ: the last row is not a retry due later.
        let disabled = AttemptRecord {
            attempt: 2,
            started_at: "2026-11-30T10:00:02Z".parse().unwrap(),
            latency_ms: 0,
            status: None,
            error: Some("not sent: the endpoint is disabled".into()),
            response_excerpt: None,
            excerpt_truncated: false,
            outcome: "dead_letter:endpoint_disabled".into(),
            next_wait_seconds: None,
            ..record
        };
        let html =
            event_lookup(&found(&[record_of(&disabled, 1), disabled]), &local()).into_string();
        let last = html.rsplit("<tr ").next().unwrap();
        assert!(
            last.starts_with("class=\"dead-letter\" data-reason=\"endpoint_disabled\""),
            "{html}"
        );
        assert!(last.contains("in DLQ: endpoint_disabled"), "{last}");
    }

    /// `r` as its attempt `attempt`, a retry.
    fn record_of(r: &AttemptRecord, attempt: u32) -> AttemptRecord {
        AttemptRecord {
            attempt,
            started_at: "2026-11-30T10:00:00Z".parse().unwrap(),
            status: Some(503),
            outcome: "retry".into(),
            next_wait_seconds: Some(60),
            ..r.clone()
        }
    }

    fn audit_report(unaccounted: usize) -> AuditReport {
        use tern_ops::audit::{EndpointTotals, Finding, PairRow, Reads, Totals, UnaccountedPair};
        let at: DateTime<Utc> = "2026-12-01T10:00:00Z".parse().unwrap();
        let row = |status: PairStatus, detail: &str| PairRow {
            event_id: "evt_01".into(),
            event_type: XSS.into(),
            tenant_id: "tnt_a".into(),
            created_at: at,
            endpoint_id: "ep_1".into(),
            finding: Finding {
                status,
                detail: detail.into(),
                due_at: None,
                reason: (status == PairStatus::DeadLettered).then(|| "endpoint_disabled".into()),
                at: None,
                message_id: None,
            },
        };
        let totals = Totals {
            delivered: 3,
            dead_lettered: 1,
            unaccounted,
            ..Totals::default()
        };
        AuditReport {
            since: at,
            until: at + chrono::Duration::hours(1),
            tenant_id: None,
            endpoint_id: None,
            checked_at: at,
            grace_seconds: 900,
            events: 4 + unaccounted,
            events_without_pairs: 0,
            totals,
            endpoints: vec![EndpointTotals {
                tenant_id: "tnt_a".into(),
                endpoint_id: "ep_1".into(),
                endpoint_state: "enabled",
                totals,
            }],
            unaccounted: (0..unaccounted)
                .map(|_| UnaccountedPair {
                    pair: row(PairStatus::Unaccounted, XSS),
                    age_seconds: 3600,
                    endpoint_now: "enabled".into(),
                    state_item: None,
                    attempts: vec![],
                })
                .collect(),
            not_delivered: vec![row(PairStatus::DeadLettered, "in the DLQ")],
            not_delivered_truncated: false,
            delivered_in_dlq: vec![],
            unreadable_outbox_items: vec![],
            reads: Reads::default(),
            notes: vec![XSS.into()],
        }
    }

    #[test]
    fn audit_says_nothing_is_lost_or_lists_each_lost_pair_as_text() {
        for target in [local(), cw()] {
            let view = AuditView::Done {
                since: "1h".into(),
                report: Box::new(audit_report(0)),
            };
            let html = audit(&view, &target).into_string();
            assert!(
                html.contains("data-unaccounted=\"0\" data-pairs=\"4\""),
                "{html}"
            );
            assert!(html.contains("Nothing is lost"), "{html}");
            assert!(!html.contains("id=\"audit-unaccounted\""), "{html}");
            assert!(html.contains("data-status=\"dead_lettered\""), "{html}");
            assert!(html.contains("endpoint_disabled"), "{html}");

            let view = AuditView::Done {
                since: "1h".into(),
                report: Box::new(audit_report(2)),
            };
            let html = audit(&view, &target).into_string();
            assert!(
                html.contains("data-unaccounted=\"2\" data-pairs=\"6\""),
                "{html}"
            );
            assert!(html.contains("2 of 6 pairs unaccounted"), "{html}");
            assert_eq!(html.matches("<tr class=\"audit-unaccounted\"").count(), 2);
            assert!(
                html.contains("no state item (no sender claimed it)"),
                "{html}"
            );
            assert!(
                !html.contains("<img"),
                "receiver and tenant text is escaped: {html}"
            );
        }
    }

    #[test]
    fn audit_failure_and_the_typed_window_are_text() {
        let view = AuditView::Failed {
            since: XSS.into(),
            error: format!("not a time: {XSS}"),
        };
        for target in [local(), cw()] {
            let html = audit(&view, &target).into_string();
            assert!(html.contains("id=\"audit-failed\""), "{html}");
            assert!(!html.contains("<img"), "{html}");
        }
        let html = audit(&view, &cw()).into_string();
        assert!(html.contains("<cwdb-action action=\"call\""), "{html}");
        assert!(
            html.contains("\\u003cimg") || html.contains("&lt;img"),
            "{html}"
        );
    }

    #[test]
    fn local_page_wraps_and_links_every_widget() {
        let html = local_page(Widget::Endpoints, "<div id=\"x\"></div>").into_string();
        assert!(html.starts_with("<!DOCTYPE html>"));
        for w in Widget::ALL {
            assert!(html.contains(&format!("href=\"/widgets/{}\"", w.as_str())));
        }
        assert!(html.contains("<div id=\"x\"></div>"));
        assert!(html.contains("href=\"/trace\""), "the trace page is linked");
    }

    fn span(
        name: &str,
        id: &str,
        parent: &str,
        start_ms: u128,
        took_ms: u128,
    ) -> tern_handlers::span_log::LoggedSpan {
        tern_handlers::span_log::LoggedSpan {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            span_id: id.into(),
            parent_span_id: parent.into(),
            name: name.into(),
            start_unix_nano: 1_000_000_000_000 + start_ms * 1_000_000,
            end_unix_nano: 1_000_000_000_000 + (start_ms + took_ms) * 1_000_000,
            attributes: [("service.name".to_owned(), XSS.to_owned())]
                .into_iter()
                .collect(),
            links: vec![],
            error: name == "POST",
        }
    }

    #[test]
    fn trace_draws_rows_on_one_axis_and_escapes_span_text() {
        let spans = vec![
            span("fan-out", "00000000000000a1", "0000000000000000", 0, 10),
            span("POST", "00000000000000a2", "00000000000000a1", 500, 20),
            span(XSS, "00000000000000a3", "00000000000000a2", 1000, 0),
        ];
        let chart = tern_handlers::span_log::waterfall_rows(&spans).expect("rows");
        let html = trace(&TraceView::Found {
            event_id: XSS.into(),
            chart,
        })
        .into_string();
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;/table&gt;&lt;img src=x onerror=alert(1)&gt;"));
        assert!(html.contains("data-spans=\"3\""));
        assert!(
            html.contains("data-depth=\"2\""),
            "the receiver's span under the attempt"
        );
        // The POST starts half-way along a 1,000 ms axis and is an error; the last span,
        // of no length, keeps its minimum width inside the axis.
        assert!(
            html.contains("class=\"bar error\" style=\"left:50.000%;width:2.000%\""),
            "{html}"
        );
        assert!(
            html.contains("style=\"left:99.600%;width:0.400%\""),
            "{html}"
        );
        for view in [
            TraceView::NotAsked,
            TraceView::NoSpans {
                event_id: XSS.into(),
            },
            TraceView::NoFile {
                path: XSS.into(),
                error: XSS.into(),
            },
        ] {
            let html = trace(&view).into_string();
            assert!(
                !html.contains("<img") && !html.contains("id=\"waterfall\""),
                "{html}"
            );
        }
    }
}
