//! The portal's HTML: pure functions of what was read. `maud` escapes every interpolated
//! value (text and attributes): an endpoint's description, a receiver's answer, an event's
//! payload are shown as text, never as markup. No script; one stylesheet
//! (`portal.css`) and the brand's colour, both inline and allowed by hash in the CSP.

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use tern_core::portal::Grant;
use tern_core::ports::AttemptRecord;
use tern_core::{Endpoint, EndpointId, Event, EventId};

use crate::model;
use crate::problem::ApiError;
use tern_ops::text::cut;

/// Brand colour when the session names none.
pub const DEFAULT_BRAND: &str = "#1f4fd1";

/// Characters of a response excerpt or payload shown: 4,000.
pub const SHOWN_CHARS: usize = 4000;

/// What every page knows of its session.
pub struct Ctx<'a> {
    /// The session's grant.
    pub grant: &'a Grant,
    /// Its CSRF token, put in every form.
    pub csrf: &'a str,
}

/// One endpoint with its health, as listed.
pub struct Row {
    /// The endpoint (as the API shows it: no secret).
    pub endpoint: model::Endpoint,
    /// `healthy`, `degraded`, `paused`, `open`, `disabled`.
    pub state: String,
    /// Successes / attempts over 24 hours.
    pub success_rate: Option<f64>,
    /// Attempts over 24 hours.
    pub attempts: u64,
}

/// The delivery log's filters, as typed.
#[derive(Debug, Default)]
pub struct LogFilters {
    /// `delivered`, `failed`, `retry`, `dead_letter`.
    pub outcome: Option<String>,
    /// An event type.
    pub event_type: Option<String>,
    /// Start, `YYYY-MM-DDTHH:MM` UTC.
    pub since: Option<String>,
    /// End.
    pub until: Option<String>,
}

/// The result of an action, shown at the top of the page it returns to.
pub enum Banner {
    /// It worked.
    Ok(String),
    /// It did not; `field` names the input at fault.
    Error {
        /// What went wrong.
        detail: String,
        /// The field.
        field: Option<String>,
    },
    /// Secrets to show (reveal, rotate).
    Secrets {
        /// What they are.
        note: String,
        /// The values.
        values: Vec<String>,
    },
    /// A test send's attempt.
    Test(Box<model::TestSend>),
    /// A recovery's report.
    Recovered(Box<model::RecoverReport>),
}

impl Banner {
    /// Success text.
    pub fn ok(text: &str) -> Self {
        Self::Ok(text.to_owned())
    }

    /// An error.
    pub fn error(e: &ApiError) -> Self {
        Self::Error {
            detail: e.detail.clone(),
            field: e.field.clone(),
        }
    }

    /// Secrets.
    pub fn secrets(note: &str, values: Vec<String>) -> Self {
        Self::Secrets {
            note: note.to_owned(),
            values,
        }
    }
}

fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// An attempt's outcome in a customer's words (issue 28: the portal showed raw outcomes
/// such as `dead_letter:endpoint_disabled`). The raw value stays in `data-outcome` for
/// scripts and filters; an outcome this build does not know is shown as it is.
pub fn outcome_words(outcome: &str) -> String {
    use tern_core::DeadLetterReason as R;
    if let Some(reason) = outcome.strip_prefix("dead_letter:") {
        return match reason.parse::<R>() {
            Ok(R::Exhausted) => "Gave up: every attempt failed".into(),
            Ok(R::Gone) => "Gave up: the endpoint answered 410 Gone".into(),
            Ok(R::EndpointDisabled) => {
                "Held: the endpoint is disabled (enable it, then recover to send it)".into()
            }
            Ok(R::EndpointDeleted) => "Not sent: the endpoint was deleted".into(),
            Ok(R::BlockedDestination) => "Not sent: the URL's address is not allowed".into(),
            Ok(R::MalformedMessage) => "Not sent: the delivery could not be read".into(),
            Ok(R::NoActiveSecret) => "Not sent: no signing secret is active".into(),
            Err(_) => format!("Gave up ({reason})"),
        };
    }
    match outcome {
        tern_core::ports::OUTCOME_DELIVERED => "Delivered".into(),
        tern_core::ports::OUTCOME_RETRY => "Failed: tried again later".into(),
        tern_core::ports::OUTCOME_REQUEUED => "Held by the rate limit: sent later".into(),
        tern_core::ports::OUTCOME_ABANDONED => "Not sent (a fault on our side): tried again".into(),
        tern_core::ports::OUTCOME_DUPLICATE => "A duplicate copy: not sent again".into(),
        other => other.to_owned(),
    }
}

/// Why an endpoint is disabled, in a customer's words: the sender's `auto_disabled: ...`
/// and an operator's reasons read as sentences.
pub fn disabled_words(reason: &str) -> String {
    match reason.strip_prefix("auto_disabled: ") {
        Some(rest) => format!("Turned off automatically: {rest}"),
        None if reason == "operator" || reason == "disabled" => "Turned off by hand".into(),
        None => reason.to_owned(),
    }
}

fn rate(r: Option<f64>) -> String {
    r.map_or_else(
        || "no attempts".to_owned(),
        |r| format!("{:.1} %", r * 100.0),
    )
}

/// The page around `content`.
fn layout(ctx: Option<&Ctx<'_>>, title: &str, current: &str, content: Markup) -> Markup {
    let grant = ctx.map(|c| c.grant);
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Webhooks" }
                style { (PreEscaped(super::STYLE)) }
                style { (PreEscaped(super::brand_style(grant))) }
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header class="top" {
                    @if let Some(logo) = grant.and_then(|g| g.logo_url.as_deref()) {
                        img class="logo" src=(logo) alt="" width="32" height="32";
                    }
                    span class="brand" { "Webhooks" }
                    @if ctx.is_some() {
                        nav aria-label="Portal" {
                            a href="/portal/endpoints" aria-current=[(current == "endpoints").then_some("page")] { "Endpoints" }
                            a href="/portal/events" aria-current=[(current == "events").then_some("page")] { "Operational events" }
                        }
                    }
                }
                main id="main" tabindex="-1" {
                    h1 { (title) }
                    (content)
                }
                @if let Some(g) = grant {
                    footer {
                        "Session ends " (time(g.expires()))
                        @if g.read_only { " · read-only" }
                    }
                }
            }
        }
    }
}

/// A refusal: title and explanation, nothing else.
pub fn refusal(title: &str, text: &str) -> Markup {
    layout(None, title, "", html! { p id="refusal" { (text) } })
}

/// The page a valid, unused link shows: one button that posts the link's token, so
/// nothing but the customer's click spends it (link scanners fetch, never submit). No
/// script: the CSP allows none.
pub fn open_link(token: &str) -> Markup {
    layout(
        None,
        "Open your webhooks portal",
        "",
        html! {
            p { "This link opens your webhooks portal once." }
            form id="open" method="post" action="/portal/start" {
                input type="hidden" name="token" value=(token);
                button type="submit" { "Open the portal" }
            }
        },
    )
}

/// The body of the link's redirect (browsers follow `Location`).
pub fn redirecting() -> Markup {
    layout(
        None,
        "Opening the portal",
        "",
        html! { p { a href="/portal/endpoints" { "Continue to your endpoints" } } },
    )
}

/// Not found (or not this session's: the same page).
pub fn not_found(ctx: &Ctx<'_>, what: &str) -> Markup {
    layout(
        Some(ctx),
        "Not found",
        "",
        html! { p id="not-found" { "No such " (what) " here." } p { a href="/portal/endpoints" { "Back to your endpoints" } } },
    )
}

/// A problem reading or doing something.
pub fn problem(ctx: &Ctx<'_>, e: &ApiError) -> Markup {
    layout(
        Some(ctx),
        e.kind.title(),
        "",
        html! { p role="alert" class="error" { (e.detail) } p { a href="/portal/endpoints" { "Back to your endpoints" } } },
    )
}

fn csrf(ctx: &Ctx<'_>) -> Markup {
    html! { input type="hidden" name="csrf" value=(ctx.csrf); }
}

fn banner(b: Option<&Banner>) -> Markup {
    let Some(b) = b else { return html! {} };
    match b {
        Banner::Ok(text) => html! { div class="banner ok" role="status" id="banner" { (text) } },
        Banner::Error { detail, field } => html! {
            div class="banner error" role="alert" id="banner" data-field=[field.as_deref()] {
                @if let Some(f) = field { strong { (f) ": " } }
                (detail)
            }
        },
        Banner::Secrets { note, values } => html! {
            div class="banner ok" role="status" id="banner" {
                p { (note) }
                @for v in values { p { code class="secret" { (v) } } }
            }
        },
        Banner::Test(t) => html! {
            div class=(if t.delivered { "banner ok" } else { "banner error" }) role="status" id="test-result"
                data-delivered=(t.delivered) {
                h2 { "Test event " (if t.delivered { "delivered" } else { "not delivered" }) }
                dl class="facts" {
                    dt { "Event" } dd { code { (t.event_id) } " (" (t.event_type) ")" }
                    dt { "Status" } dd id="test-status" { (t.status.map_or_else(|| "no answer".to_owned(), |s| s.to_string())) }
                    dt { "Latency" } dd { (t.latency_ms) " ms" }
                    @if let Some(c) = &t.error_class { dt { "Error" } dd { (c) @if let Some(e) = &t.error { ": " (e) } } }
                }
                @if let Some(x) = &t.response_excerpt {
                    p { "Response" @if t.excerpt_truncated { " (first bytes)" } ":" }
                    pre class="excerpt" id="test-excerpt" { (cut(x, SHOWN_CHARS)) }
                }
            }
        },
        Banner::Recovered(r) => html! {
            div class="banner ok" role="status" id="recover-result"
                data-replayed=(r.dead_letters.replayed) data-resent=(r.waiting.resent.len()) {
                h2 { "Recovery started" }
                p {
                    (r.dead_letters.replayed) " dead-lettered and " (r.waiting.resent.len())
                    " waiting deliveries from " (time(r.since)) " to " (time(r.until)) " sent again."
                    @if r.enabled { " The endpoint was enabled." }
                    @if !r.waiting.complete || r.dead_letters.stopped.is_some() { " Not everything was examined in one go: run it again to continue." }
                }
            }
        },
    }
}

fn state_badge(state: &str) -> Markup {
    html! { span class={"state " (state)} { (state) } }
}

fn types_fieldset(choices: &[String], selected: &[String]) -> Markup {
    let all = selected.is_empty() || selected.iter().any(|t| t == "*");
    html! {
        fieldset {
            legend { "Event types" }
            label class="check" {
                input type="checkbox" name="event_types" value="*" checked[all];
                " All event types"
            }
            @for t in choices {
                label class="check" {
                    input type="checkbox" name="event_types" value=(t) checked[!all && selected.contains(t)];
                    " " code { (t) }
                }
            }
        }
    }
}

/// The endpoints: a table with health, and the form to add one.
pub fn endpoints(ctx: &Ctx<'_>, rows: &[Row], choices: &[String], b: Option<&Banner>) -> Markup {
    let may_add = !ctx.grant.read_only && ctx.grant.endpoints.is_none();
    layout(
        Some(ctx),
        "Endpoints",
        "endpoints",
        html! {
            (banner(b))
            @if rows.is_empty() {
                p id="no-endpoints" { "No endpoints yet." }
            } @else {
                div class="scroll" {
                    table id="endpoints" {
                        caption { "Your webhook endpoints and how their deliveries went in the last 24 hours" }
                        thead { tr { th scope="col" { "Endpoint" } th scope="col" { "State" } th scope="col" { "Success (24 h)" } th scope="col" { "Event types" } } }
                        tbody {
                            @for r in rows {
                                tr data-endpoint=(r.endpoint.id) {
                                    td {
                                        a href=(format!("/portal/endpoints/{}", r.endpoint.id)) { (cut(&r.endpoint.url, 80)) }
                                        @if let Some(d) = &r.endpoint.description { br; small { (cut(d, 120)) } }
                                    }
                                    td { (state_badge(if r.endpoint.enabled { &r.state } else { "disabled" })) }
                                    td { (rate(r.success_rate)) @if r.attempts > 0 { " of " (r.attempts) } }
                                    td { (r.endpoint.event_types.join(", ")) }
                                }
                            }
                        }
                    }
                }
            }
            @if may_add {
                section aria-labelledby="add-title" {
                    h2 id="add-title" { "Add an endpoint" }
                    form method="post" action="/portal/endpoints" id="add" {
                        (csrf(ctx))
                        label for="url" { "URL" }
                        input id="url" name="url" type="url" required placeholder="https://example.com/webhooks" autocomplete="url";
                        label for="description" { "Description (optional)" }
                        input id="description" name="description" type="text" maxlength="1024";
                        (types_fieldset(choices, &[]))
                        button type="submit" { "Add endpoint" }
                    }
                }
            }
        },
    )
}

/// The page after adding: the secret, this once.
pub fn created(ctx: &Ctx<'_>, created: &model::EndpointCreated) -> Markup {
    let e = &created.endpoint;
    layout(
        Some(ctx),
        "Endpoint added",
        "endpoints",
        html! {
            div class="banner ok" role="status" id="banner" {
                p { "Endpoint " code { (e.id) } " delivers to " code { (e.url) } "." }
                p { "Its signing secret, shown this once (Reveal on the endpoint's page shows it again):" }
                p { code class="secret" id="new-secret" { (created.secret) } }
                p { "Verify every delivery's " code { "webhook-signature" } " with it (Standard Webhooks)." }
            }
            p { a id="to-endpoint" href=(format!("/portal/endpoints/{}", e.id)) { "Manage this endpoint" } }
        },
    )
}

/// One endpoint: its state, the actions, the log link.
pub fn detail(
    ctx: &Ctx<'_>,
    row: &Row,
    health: Option<&model::EndpointHealth>,
    choices: &[String],
    b: Option<&Banner>,
) -> Markup {
    let e = &row.endpoint;
    let base = format!("/portal/endpoints/{}", e.id);
    let write = !ctx.grant.read_only;
    layout(
        Some(ctx),
        "Endpoint",
        "endpoints",
        html! {
            (banner(b))
            dl class="facts" id="facts" {
                dt { "URL" } dd { code { (e.url) } }
                dt { "Id" } dd { code { (e.id) } }
                @if let Some(d) = &e.description { dt { "Description" } dd { (d) } }
                dt { "State" } dd id="state" { (state_badge(if e.enabled { &row.state } else { "disabled" })) }
                @if let Some(r) = &e.disabled_reason { dt { "Disabled because" } dd { (disabled_words(r)) } }
                dt { "Success (24 h)" } dd { (rate(row.success_rate)) @if row.attempts > 0 { " of " (row.attempts) " attempts" } }
                @if let Some(h) = health {
                    @if let Some(f) = &h.last_failure {
                        dt { "Last failure" }
                        dd { (time(f.at)) ": " (f.status.map_or_else(|| f.error_class.clone().unwrap_or_default(), |s| format!("HTTP {s}")))
                             @if let Some(err) = &f.error { " (" (cut(err, 200)) ")" } }
                    }
                    @if let Some(t) = h.last_success_at { dt { "Last success" } dd { (time(t)) } }
                }
                dt { "Event types" } dd { (e.event_types.join(", ")) }
                (super::reach::facts(e))
                dt { "Secrets" } dd { (e.secrets.len()) " (" (e.secrets.iter().map(|s| s.state.as_str()).collect::<Vec<_>>().join(", ")) ")" }
            }
            p { a id="log-link" href=(format!("{base}/log")) { "Delivery log" } }
            @if write {
                section aria-labelledby="test-title" {
                    h2 id="test-title" { "Send a test event" }
                    form method="post" action=(format!("{base}/test")) id="test" {
                        (csrf(ctx))
                        p { "Sends a signed " code { "tern.test" } " event now and shows what your server answered." }
                        button type="submit" { "Send test event" }
                    }
                }
                section aria-labelledby="secret-title" {
                    h2 id="secret-title" { "Signing secret" }
                    form method="post" action=(format!("{base}/reveal")) id="reveal" class="inline" {
                        (csrf(ctx))
                        button type="submit" { "Reveal secret" }
                    }
                    form method="post" action=(format!("{base}/rotate")) id="rotate" {
                        (csrf(ctx))
                        label for="overlap" { "Keep the old secret signing for (hours)" }
                        input id="overlap" name="overlap_hours" type="number" min="0" max="168" value="24";
                        button type="submit" { "Rotate secret" }
                    }
                }
                (super::reach::forms(ctx, e, &base))
                section aria-labelledby="recover-title" {
                    h2 id="recover-title" { "Recover after an outage" }
                    form method="post" action=(format!("{base}/recover")) id="recover" {
                        (csrf(ctx))
                        p { "Sends again every delivery that failed in the window and has not succeeded since." }
                        label for="since" { "From (UTC)" }
                        input id="since" name="since" type="datetime-local" required;
                        label for="until" { "To (UTC, empty: now)" }
                        input id="until" name="until" type="datetime-local";
                        label class="check" { input type="checkbox" name="enable" value="yes" checked[!e.enabled]; " Enable the endpoint first" }
                        button type="submit" { "Recover" }
                    }
                }
                section aria-labelledby="edit-title" {
                    h2 id="edit-title" { "Settings" }
                    form method="post" action=(format!("{base}/update")) id="edit" {
                        (csrf(ctx))
                        label for="edit-url" { "URL" }
                        input id="edit-url" name="url" type="url" required value=(e.url);
                        label for="edit-description" { "Description" }
                        input id="edit-description" name="description" type="text" maxlength="1024" value=(e.description.clone().unwrap_or_default());
                        (types_fieldset(choices, &e.event_types))
                        label for="edit-rate" { "Rate limit: most requests a second to your server (empty: no limit)" }
                        input id="edit-rate" name="max_per_second" type="number" min="1" max="1000" value=[e.max_per_second];
                        fieldset {
                            legend { "Payload format" }
                            label class="check" { input type="radio" name="payload_format" value="raw" checked[e.payload_format == model::PayloadFormat::Raw]; " Raw: the event's payload as is" }
                            label class="check" { input type="radio" name="payload_format" value="standard_webhooks" checked[e.payload_format == model::PayloadFormat::StandardWebhooks]; " Standard Webhooks: " code { "{type, timestamp, data}" } }
                        }
                        button type="submit" { "Save" }
                    }
                    @if e.enabled {
                        form method="post" action=(format!("{base}/disable")) id="disable" class="inline" {
                            (csrf(ctx))
                            button type="submit" { "Disable" }
                        }
                    } @else {
                        form method="post" action=(format!("{base}/enable")) id="enable" class="inline" {
                            (csrf(ctx))
                            button type="submit" { "Enable" }
                        }
                    }
                    form method="post" action=(format!("{base}/delete")) id="delete" {
                        (csrf(ctx))
                        label class="check" { input type="checkbox" name="confirm" value="yes" required; " Delete this endpoint and drop its pending deliveries" }
                        button type="submit" class="danger" { "Delete" }
                    }
                }
            }
        },
    )
}

/// The delivery log: newest first, with its filters.
pub fn log(
    ctx: &Ctx<'_>,
    endpoint: &EndpointId,
    rows: &[(model::EndpointAttempt, Option<String>)],
    f: &LogFilters,
    next: Option<&str>,
) -> Markup {
    let base = format!("/portal/endpoints/{endpoint}");
    let outcomes = [
        ("", "Any outcome"),
        ("delivered", "Delivered"),
        ("failed", "Failed"),
        ("retry", "Failed, retry scheduled"),
        ("dead_letter", "Dead-lettered"),
    ];
    let next_href = next.map(|c| {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("outcome", &f.outcome),
            ("event_type", &f.event_type),
            ("since", &f.since),
            ("until", &f.until),
        ] {
            if let Some(v) = v {
                q.append_pair(k, v);
            }
        }
        q.append_pair("cursor", c);
        format!("{base}/log?{}", q.finish())
    });
    layout(
        Some(ctx),
        "Delivery log",
        "endpoints",
        html! {
            p { a href=(base) { "Back to the endpoint" } }
            form method="get" action=(format!("{base}/log")) id="filters" class="filters" {
                div {
                    label for="outcome" { "Outcome" }
                    select id="outcome" name="outcome" {
                        @for (v, label) in outcomes {
                            option value=(v) selected[f.outcome.as_deref().unwrap_or("") == v] { (label) }
                        }
                    }
                }
                div {
                    label for="event_type" { "Event type" }
                    input id="event_type" name="event_type" type="text" value=(f.event_type.clone().unwrap_or_default());
                }
                div {
                    label for="log-since" { "From (UTC)" }
                    input id="log-since" name="since" type="datetime-local" value=(f.since.clone().unwrap_or_default());
                }
                div {
                    label for="log-until" { "To (UTC)" }
                    input id="log-until" name="until" type="datetime-local" value=(f.until.clone().unwrap_or_default());
                }
                button type="submit" { "Filter" }
            }
            @if rows.is_empty() {
                p id="log-empty" { "No attempts match." }
            } @else {
                div class="scroll" {
                    table id="log" {
                        caption { "Attempts, newest first" }
                        thead { tr { th scope="col" { "Started" } th scope="col" { "Event" } th scope="col" { "Type" } th scope="col" { "Attempt" } th scope="col" { "Status" } th scope="col" { "Latency" } th scope="col" { "Outcome" } th scope="col" { "Response" } } }
                        tbody {
                            @for (a, ty) in rows {
                                tr class={"outcome-" (a.outcome.split(':').next().unwrap_or(""))} data-event=(a.event_id) data-outcome=(a.outcome) {
                                    td { (time(a.started_at)) }
                                    td { a href=(format!("{base}/log/{}", a.event_id)) { code { (a.event_id) } } }
                                    td { (ty.as_deref().unwrap_or("-")) }
                                    td { (a.attempt) @if a.replay_count > 0 { " (replay " (a.replay_count) ")" } }
                                    td { (a.status.map_or_else(|| a.error_class.clone().unwrap_or_else(|| "-".into()), |s| s.to_string())) }
                                    td { (a.latency_ms) " ms" }
                                    td { (outcome_words(&a.outcome)) }
                                    td class="response" { @if let Some(x) = &a.response_excerpt { code { (x) } } @else { "-" } }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(href) = next_href { p { a id="older" href=(href) { "Older attempts" } } }
        },
    )
}

/// The headers an attempt carried, secrets hidden: rebuilt from the attempt and the
/// endpoint (the attempt log does not store headers).
fn sent_headers(
    endpoint: &Endpoint,
    event: &EventId,
    ty: Option<&str>,
    a: &AttemptRecord,
) -> Vec<(String, String)> {
    let mut out = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("webhook-id".to_owned(), event.to_string()),
        (
            "webhook-timestamp".to_owned(),
            a.started_at.timestamp().to_string(),
        ),
        ("webhook-signature".to_owned(), "v1,… (hidden)".to_owned()),
        ("idempotency-key".to_owned(), event.to_string()),
    ];
    if let Some(t) = ty {
        out.push((
            tern_core::signing::header::WEBHOOK_EVENT_TYPE.to_owned(),
            t.to_owned(),
        ));
    }
    out.extend(endpoint.headers.iter().map(|h| {
        (
            h.name.clone(),
            match &h.value {
                tern_core::custom_headers::FieldValue::Plain(v) => v.clone(),
                tern_core::custom_headers::FieldValue::Secret(_) => "(hidden)".to_owned(),
            },
        )
    }));
    if endpoint.auth.sends_authorization() {
        out.push(("authorization".to_owned(), "(hidden)".to_owned()));
    }
    out
}

/// One event's attempts to one endpoint in full, with Resend.
pub fn attempt(
    ctx: &Ctx<'_>,
    endpoint: &Endpoint,
    event_id: &EventId,
    event: Option<&Event>,
    attempts: &[AttemptRecord],
    time_scale: f64,
    b: Option<&Banner>,
) -> Markup {
    let base = format!("/portal/endpoints/{}", endpoint.id);
    let ty = event.map(|e| e.event_type.to_string());
    layout(
        Some(ctx),
        "Delivery",
        "endpoints",
        html! {
            (banner(b))
            p { a href=(format!("{base}/log")) { "Back to the delivery log" } }
            dl class="facts" {
                dt { "Event" } dd { code { (event_id) } }
                dt { "Type" } dd { (ty.clone().unwrap_or_else(|| "- (past the outbox's retention)".into())) }
                dt { "Endpoint" } dd { code { (endpoint.url) } }
            }
            @if !ctx.grant.read_only {
                form method="post" action=(format!("{base}/log/{event_id}/resend")) id="resend" {
                    (csrf(ctx))
                    button type="submit" { "Resend" }
                }
            }
            @for a in attempts.iter().rev() {
                section class="attempt" aria-label=(format!("Attempt {}", a.attempt)) {
                    h2 { "Attempt " (a.attempt) @if a.replay_count > 0 { " of replay " (a.replay_count) } ": " (outcome_words(&a.outcome)) }
                    dl class="facts" {
                        dt { "Started" } dd { (time(a.started_at)) }
                        dt { "Status" } dd { (a.status.map_or_else(|| "no answer".to_owned(), |s| s.to_string())) }
                        dt { "Latency" } dd { (a.latency_ms) " ms" }
                        @if let Some(c) = a.error_class { dt { "Error class" } dd { (c.to_string()) } }
                        @if let Some(e) = &a.error { dt { "Error" } dd { (cut(e, 500)) } }
                        @if let Some(due) = tern_ops::attempts::next_attempt_due_at(a, time_scale) { dt { "Next attempt" } dd class="next-attempt" { (time(due)) } }
                    }
                    h3 { "Request headers" }
                    table class="headers" {
                        caption { "Sent with this attempt (secrets hidden)" }
                        tbody {
                            @for (k, v) in sent_headers(endpoint, event_id, ty.as_deref(), a) {
                                tr { th scope="row" { code { (k) } } td { code { (v) } } }
                            }
                        }
                    }
                    h3 { "Response" @if a.excerpt_truncated { " (first bytes)" } }
                    pre class="excerpt" { (a.response_excerpt.as_deref().map_or_else(|| "-".to_owned(), |x| cut(x, SHOWN_CHARS))) }
                }
            }
            @if attempts.is_empty() { p { "No attempt yet." } }
            @if let Some(e) = event {
                h2 { "Payload" }
                pre class="excerpt" id="payload" { (cut(e.payload.as_str(), SHOWN_CHARS)) }
            }
        },
    )
}

/// The operational events a tenant can receive, and how.
pub fn operational(ctx: &Ctx<'_>) -> Markup {
    use tern_core::operational::OperationalEventKind as K;
    let describe = |k: K| match k {
        K::Degraded => {
            "An endpoint's success rate fell below the degraded threshold over the health window (at most one per window)."
        }
        K::Disabled => {
            "An endpoint was disabled automatically: its success rate stayed below the disable threshold. Its deliveries wait as dead letters until it is enabled and recovered."
        }
        K::Recovered => {
            "An endpoint is back to normal: a probe succeeded, or its success rate rose above the degraded threshold again."
        }
    };
    layout(
        Some(ctx),
        "Operational events",
        "events",
        html! {
            p { "Tern tells you when one of your endpoints changes health, as events of these types:" }
            dl class="facts" id="operational" {
                @for k in K::ALL {
                    dt { code { (k.tern_event_type()) } }
                    dd { (describe(k)) }
                }
            }
            h2 { "How to receive them" }
            p { "Add an endpoint (or edit one) and tick the " code { "tern.endpoint.*" } " types in its event types. They are signed and delivered like any other event; a payload names the endpoint, its state and the success rate." }
            p { "Subscribe them on an endpoint other than the one they are about: a failing endpoint would not receive them." }
        },
    )
}

#[cfg(test)]
mod words_tests {
    use super::*;

    /// Every dead-letter reason and outcome the sender writes reads as words, never as
    /// its raw name.
    #[test]
    fn every_outcome_reads_in_a_customers_words() {
        for reason in tern_core::DeadLetterReason::ALL {
            let raw = format!("dead_letter:{}", reason.as_str());
            let words = outcome_words(&raw);
            assert!(
                !words.contains("dead_letter") && !words.contains('_'),
                "{raw}: {words}"
            );
        }
        for raw in [
            tern_core::ports::OUTCOME_DELIVERED,
            tern_core::ports::OUTCOME_RETRY,
            tern_core::ports::OUTCOME_REQUEUED,
            tern_core::ports::OUTCOME_ABANDONED,
            tern_core::ports::OUTCOME_DUPLICATE,
        ] {
            assert_ne!(outcome_words(raw), raw);
        }
        assert_eq!(
            disabled_words("auto_disabled: 12 % success over 1 min, last status 503"),
            "Turned off automatically: 12 % success over 1 min, last status 503"
        );
    }
}
