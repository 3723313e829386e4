//! The operator's console: four CloudWatch dashboard **custom widgets** and their actions.
//!
//! - **Dead letters**: the DLQ grouped by endpoint and reason (`tern_ops::dlq::group`), a
//!   sample payload per group, and per group *Replay* / *Replay (dry run)* buttons that
//!   invoke the replay function with the group's filters.
//! - **Endpoints**: every endpoint that is not healthy (disabled, open, paused, degraded),
//!   has dead letters or waiting deliveries, with its health (`tern_ops::health`: since when
//!   it fails, circuit, pause, last success, last failure and what the receiver answered,
//!   waiting deliveries and the next due time) and an *Enable* button.
//! - **Waiting**: per endpoint, the deliveries scheduled for a later attempt, with attempt
//!   number and due time, and the totals (`tern_ops::waiting`, from the ledger's waiting
//!   list).
//! - **Event lookup**: the attempt history of one event id (`tern_ops::attempts`: every
//!   try, when the next was due, and a row for each budget that ended in the DLQ).
//! - **Is anything lost?**: `tern audit`'s answer for a recent window (`tern_ops::audit`):
//!   every (event, subscribed endpoint) pair delivered, waiting, in flight, dead-lettered,
//!   parked or unaccounted, with what is known of each unaccounted one.
//!
//! A widget is a JSON event in, HTML out ([`handle`]). In AWS the console Lambda answers
//! the dashboard, and a button is a `<cwdb-action action="call">` that calls the same
//! Lambda with the action's parameters; in local mode `tern-local` serves the same HTML
//! on 127.0.0.1 and a button is a form that posts the same parameters ([`Target`]).
//! Everything rendered that came from a tenant or a receiver goes through `maud`, which
//! escapes every interpolated value; endpoint secrets are never read into a view.

#![warn(missing_docs)]

pub mod aws;
pub mod render;

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use tern_core::health::HealthPolicy;
use tern_core::ports::{DeliveryLedger, DrainableQueue, EndpointStore, PortError};
use tern_core::trace::{OutboxReader, QueueCounter};
use tern_core::waiting::{WaitingList, WaitingScope};
use tern_core::{DeadLetterReason, EndpointId, EventId, TenantId};
use tern_handlers::replay::{ReplayFilters, ReplayRequest, ReplaySummary};
use tern_ops::audit::{AuditRequest, AuditStores, Rules};
use tern_ops::dlq::{self, DeadLetterGroup};

/// Most DLQ messages a widget reads per render: 500. `tern_ops::peek` stops earlier when
/// its 20 s budget (`tern_ops::PEEK_TIME_BUDGET`) is spent; the widget says when the count
/// is a lower bound.
pub const MAX_DEAD_LETTERS_READ: usize = 500;

/// Time budget of a replay started from the console, in seconds: 20. The console function
/// waits for the replay (its timeout is 60 s, `infra/settings.json`: 20 s of replay, up to
/// 20 s to read the DLQ again, and margin); a larger DLQ takes several clicks, and the
/// widget shows what remains.
pub const CONSOLE_REPLAY_SECONDS: u32 = 20;

/// Most messages one console replay examines: 1000 (the replay function's default).
pub const CONSOLE_REPLAY_MAX_MESSAGES: u32 = tern_handlers::replay::DEFAULT_MAX_MESSAGES;

/// Longest window the "Is anything lost?" widget audits: 24 hours. Longer windows are
/// `tern audit`'s (a terminal has no 60 s limit).
pub const CONSOLE_AUDIT_MAX_WINDOW_HOURS: i64 = 24;

/// Time the "Is anything lost?" widget gives the audit, in seconds: 40 of the console
/// function's 60 s timeout (`infra/settings.json`), leaving 20 s for rendering and the
/// dashboard. An audit that does not finish in it is reported as such (the window holds
/// more events than one render can read), never as a partial answer.
pub const CONSOLE_AUDIT_SECONDS: u64 = 40;

/// Wait before the audit's second look at pairs it could not account for, in seconds: 5
/// (`tern audit` waits 10 s; the widget has less time).
pub const CONSOLE_AUDIT_RECHECK_SECONDS: u64 = 5;

/// A console request failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// The event is not a widget request this console understands.
    #[error("bad widget request: {0}")]
    BadRequest(String),
    /// An AWS call failed.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The replay function could not be invoked, or it failed.
    #[error("replay failed: {0}")]
    Replay(String),
}

/// Runs a replay. The console Lambda invokes the replay function ([`aws::LambdaReplay`]);
/// local mode calls the replay handler in process ([`InProcessReplay`]).
#[async_trait]
pub trait ReplayInvoker: Send + Sync {
    /// Runs `request` and returns its summary.
    async fn replay(&self, request: ReplayRequest) -> Result<ReplaySummary, ConsoleError>;
}

/// Runs the replay handler itself, with the same code the replay Lambda runs.
pub struct InProcessReplay {
    /// The replay's queues.
    pub deps: tern_handlers::replay::ReplayDeps,
    /// Metrics namespace.
    pub namespace: String,
}

#[async_trait]
impl ReplayInvoker for InProcessReplay {
    async fn replay(&self, request: ReplayRequest) -> Result<ReplaySummary, ConsoleError> {
        let metrics = tern_handlers::metrics::Metrics::new(
            &self.namespace,
            tern_handlers::metrics::MetricsSink::Discard,
        );
        Ok(tern_handlers::replay::handle(&self.deps, request, &metrics).await?)
    }
}

/// What the widgets read and act on. The console's role may only read these, invoke the
/// replay function and enable endpoints.
#[derive(Clone)]
pub struct ConsoleDeps {
    /// The DLQ: replays move its messages; lists read the tenants' dead-letter records
    /// (the DLQ is read only by a ledger that keeps none, [`dead_letter_groups`]).
    pub dlq: Arc<dyn DrainableQueue>,
    /// Endpoints (listed, and enabled by the Enable button).
    pub endpoints: Arc<dyn EndpointStore>,
    /// The attempt log.
    pub ledger: Arc<dyn DeliveryLedger>,
    /// Replays.
    pub replay: Arc<dyn ReplayInvoker>,
    /// Endpoint health records: Enable deletes the endpoint's first, so it starts with a
    /// closed circuit and an empty window, its 24 h history kept (as `tern endpoints enable` does). `None` only in
    /// set-ups without a health table.
    pub health: Option<Arc<dyn tern_core::health::HealthStore>>,
    /// The ledger's waiting list (the Waiting widget, and the Endpoints widget's waiting
    /// counts). `None` only in set-ups without one.
    pub waiting: Option<Arc<dyn WaitingList>>,
    /// The failure model's thresholds (`TERN_HEALTH_*`), for the states shown.
    pub policy: HealthPolicy,
    /// `TERN_TIME_SCALE` (1 in AWS): due times in the attempt history are real ones.
    pub time_scale: f64,
    /// What the "Is anything lost?" widget reads besides the above. `None` only in set-ups
    /// without it (the widget then says so).
    pub audit: Option<AuditDeps>,
}

/// What the "Is anything lost?" widget reads besides the DLQ, the endpoints, the ledger
/// and the health records (the stores `tern audit` reads).
#[derive(Clone)]
pub struct AuditDeps {
    /// The outbox table (a Scan of the events created in the window).
    pub outbox: Arc<dyn OutboxReader>,
    /// The relay-failure queue (read whole: received, then released).
    pub relay_failures: Arc<dyn DrainableQueue>,
    /// The delivery queue, only counted (never read).
    pub delivery_queue: Option<Arc<dyn QueueCounter>>,
    /// The sender's settings the judgement needs (its schedule, time scale, health
    /// thresholds, and the grace period).
    pub rules: Rules,
}

/// Where a button sends its action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A CloudWatch dashboard: `<cwdb-action action="call" endpoint="<function_arn>">`.
    CloudWatch {
        /// ARN of the console function (the one rendering the widget).
        function_arn: String,
    },
    /// Local mode: a form posting `params` (the action's JSON) to `action_path`; widgets
    /// link to each other under `/widgets/<name>`.
    Local {
        /// Path the forms post to.
        action_path: String,
    },
}

/// The four widgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Widget {
    /// DLQ grouped by endpoint and reason, with Replay buttons.
    DeadLetters,
    /// Endpoints that are not healthy, or have dead letters or waiting deliveries, with
    /// their health and Enable buttons.
    Endpoints,
    /// The deliveries waiting for a later attempt, per endpoint.
    Waiting,
    /// Attempt history of one event.
    EventLookup,
    /// Is anything lost? Every pair of a recent window accounted for (`tern audit`).
    Audit,
}

impl Widget {
    /// Every widget, in dashboard order.
    pub const ALL: [Self; 5] = [
        Self::DeadLetters,
        Self::Endpoints,
        Self::Waiting,
        Self::EventLookup,
        Self::Audit,
    ];

    /// Its name in requests and local URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeadLetters => "dead_letters",
            Self::Endpoints => "endpoints",
            Self::Waiting => "waiting",
            Self::EventLookup => "event_lookup",
            Self::Audit => "audit",
        }
    }

    /// Its title.
    pub fn title(self) -> &'static str {
        match self {
            Self::DeadLetters => "Dead letters",
            Self::Endpoints => "Endpoints",
            Self::Waiting => "Waiting",
            Self::EventLookup => "Event lookup",
            Self::Audit => "Is anything lost?",
        }
    }
}

impl std::str::FromStr for Widget {
    type Err = ConsoleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| ConsoleError::BadRequest(format!("unknown widget {s:?}")))
    }
}

/// A button's action, as carried in its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Replay (or count, in a dry run) one group of dead letters.
    Replay {
        /// Endpoint filter.
        endpoint_id: EndpointId,
        /// Reason filter.
        reason: DeadLetterReason,
        /// Count only.
        dry_run: bool,
    },
    /// Enable a disabled endpoint.
    Enable {
        /// Its tenant.
        tenant_id: TenantId,
        /// The endpoint.
        endpoint_id: EndpointId,
    },
}

impl Action {
    /// The replay request this action sends, if it is a replay.
    pub fn replay_request(&self) -> Option<ReplayRequest> {
        match self {
            Action::Replay {
                endpoint_id,
                reason,
                dry_run,
            } => Some(ReplayRequest {
                dry_run: *dry_run,
                max_messages: Some(CONSOLE_REPLAY_MAX_MESSAGES),
                max_seconds: Some(CONSOLE_REPLAY_SECONDS),
                filters: ReplayFilters {
                    endpoint_id: Some(endpoint_id.clone()),
                    reason: Some(*reason),
                    ..ReplayFilters::default()
                },
            }),
            Action::Enable { .. } => None,
        }
    }

    /// The parameters a button carries for this action (the JSON the dashboard passes back
    /// to the function on a click, or the local form posts).
    pub fn params(&self, widget: Widget) -> serde_json::Value {
        match self {
            Action::Replay {
                endpoint_id,
                reason,
                dry_run,
            } => serde_json::json!({
                "widget": widget.as_str(),
                "action": "replay",
                "endpoint_id": endpoint_id.as_str(),
                "reason": reason.as_str(),
                "dry_run": dry_run,
            }),
            Action::Enable {
                tenant_id,
                endpoint_id,
            } => serde_json::json!({
                "widget": widget.as_str(),
                "action": "enable",
                "tenant_id": tenant_id.as_str(),
                "endpoint_id": endpoint_id.as_str(),
            }),
        }
    }
}

/// The part of a custom widget event the console reads. The dashboard sends the widget's
/// `params` at the top level (and again in `widgetContext.params`); a `<cwdb-action>` call
/// sends the action's JSON at the top level; form inputs arrive in
/// `widgetContext.forms.all`. Unknown fields are ignored: the dashboard adds its own.
#[derive(Debug, Default, Deserialize)]
pub struct WidgetEvent {
    /// `true` when the dashboard asks for the widget's documentation.
    #[serde(default)]
    pub describe: bool,
    /// Which widget.
    #[serde(default)]
    pub widget: Option<String>,
    /// `replay` or `enable`.
    #[serde(default)]
    pub action: Option<String>,
    /// Action parameter.
    #[serde(default)]
    pub endpoint_id: Option<String>,
    /// Action parameter.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// Action parameter.
    #[serde(default)]
    pub reason: Option<String>,
    /// Action parameter.
    #[serde(default)]
    pub dry_run: bool,
    /// Event lookup parameter.
    #[serde(default)]
    pub event_id: Option<String>,
    /// Audit parameter: the window's start (`1h`, `30m`, an RFC 3339 time), as typed.
    #[serde(default)]
    pub since: Option<String>,
    /// The dashboard's context.
    #[serde(default, rename = "widgetContext")]
    pub widget_context: Option<WidgetContext>,
}

/// `widgetContext` of a custom widget event (the fields the console reads).
#[derive(Debug, Default, Deserialize)]
pub struct WidgetContext {
    /// The widget's own parameters.
    #[serde(default)]
    pub params: Option<serde_json::Value>,
    /// Form inputs of the widget.
    #[serde(default)]
    pub forms: Option<Forms>,
}

/// `widgetContext.forms`.
#[derive(Debug, Default, Deserialize)]
pub struct Forms {
    /// Every input of the widget, by name.
    #[serde(default)]
    pub all: serde_json::Map<String, serde_json::Value>,
}

/// A request, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WidgetRequest {
    /// Which widget.
    pub widget: Widget,
    /// The action to run first, if a button was clicked.
    pub action: Option<Action>,
    /// Event id to look up (event lookup only), as typed (validated when used).
    pub event_id: Option<String>,
    /// The event's tenant (event lookup only: the ledger keeps a tenant's events apart),
    /// as typed (validated when used).
    pub tenant_id: Option<String>,
    /// The audit window's start (audit only), as typed (validated when used).
    pub since: Option<String>,
}

fn bad(e: impl std::fmt::Display) -> ConsoleError {
    ConsoleError::BadRequest(e.to_string())
}

impl WidgetEvent {
    /// The validated request.
    ///
    /// # Errors
    /// [`ConsoleError::BadRequest`] naming the field.
    pub fn request(&self) -> Result<WidgetRequest, ConsoleError> {
        let context_param = |name: &str| {
            self.widget_context
                .as_ref()
                .and_then(|c| c.params.as_ref())
                .and_then(|p| p.get(name))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let widget: Widget = self
            .widget
            .clone()
            .or_else(|| context_param("widget"))
            .ok_or_else(|| {
                bad("the widget's params need \"widget\": dead_letters, endpoints, waiting, event_lookup or audit")
            })?
            .parse()?;
        let required = |v: &Option<String>, name: &str| {
            v.clone()
                .ok_or_else(|| bad(format!("action {:?} needs {name}", self.action)))
        };
        let action = match self.action.as_deref() {
            None => None,
            Some("replay") => Some(Action::Replay {
                endpoint_id: EndpointId::new(required(&self.endpoint_id, "endpoint_id")?)
                    .map_err(bad)?,
                reason: required(&self.reason, "reason")?.parse().map_err(bad)?,
                dry_run: self.dry_run,
            }),
            Some("enable") => Some(Action::Enable {
                tenant_id: TenantId::new(required(&self.tenant_id, "tenant_id")?).map_err(bad)?,
                endpoint_id: EndpointId::new(required(&self.endpoint_id, "endpoint_id")?)
                    .map_err(bad)?,
            }),
            Some(other) => return Err(bad(format!("unknown action {other:?}"))),
        };
        // A form field (what the operator typed) wins over the widget's own params.
        let field = |name: &str, direct: &Option<String>| {
            self.widget_context
                .as_ref()
                .and_then(|c| c.forms.as_ref())
                .and_then(|f| f.all.get(name))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .or_else(|| direct.clone())
                .or_else(|| context_param(name))
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        };
        Ok(WidgetRequest {
            widget,
            action,
            event_id: field("event_id", &self.event_id),
            tenant_id: field("tenant_id", &self.tenant_id),
            since: field("since", &self.since),
        })
    }
}

/// What an action did, shown at the top of the widget it was clicked in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionOutcome {
    /// A replay ran. `remaining` counts the group's dead letters read after it.
    Replayed {
        /// The action.
        action: Action,
        /// The replay's summary.
        summary: ReplaySummary,
        /// Dead letters of the group still in the DLQ, as read after the replay.
        remaining: usize,
    },
    /// An endpoint was enabled.
    Enabled {
        /// The endpoint.
        endpoint_id: EndpointId,
    },
    /// The action failed; nothing is lost (the DLQ keeps what was not moved).
    Failed {
        /// Why, as text.
        error: String,
    },
}

/// Dead-letter groups as they are now, and whether the read stopped at
/// [`MAX_DEAD_LETTERS_READ`]: from every tenant's dead-letter record
/// ([`tern_ops::dlq::read_record`]), never from the DLQ, so a render hides nothing from a
/// tenant's list or replay. Only a ledger that keeps no record (an in-memory test ledger)
/// falls back to reading the DLQ (received, then released).
pub async fn dead_letter_groups(
    ledger: &dyn DeliveryLedger,
    endpoints: &dyn EndpointStore,
    dlq: &dyn DrainableQueue,
) -> Result<(Vec<DeadLetterGroup>, bool), ConsoleError> {
    match dlq::read_record(ledger, endpoints, None, None, MAX_DEAD_LETTERS_READ).await {
        Ok(read) => {
            let views: Vec<_> = read.entries.iter().map(dlq::recorded_view).collect();
            Ok((dlq::group(&views), !read.complete))
        }
        Err(PortError::Rejected(_)) => {
            let messages = tern_ops::peek(dlq, MAX_DEAD_LETTERS_READ).await?;
            let capped = messages.len() >= MAX_DEAD_LETTERS_READ;
            let views: Vec<_> = messages.iter().map(dlq::view).collect();
            Ok((dlq::group(&views), capped))
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs the clicked action, if any, then renders the widget. Errors of the action are
/// shown in the widget; errors reading what the widget shows are returned.
///
/// # Errors
/// [`ConsoleError::Port`] when the DLQ, the endpoints or the ledger cannot be read.
pub async fn render_widget(
    deps: &ConsoleDeps,
    request: &WidgetRequest,
    target: &Target,
) -> Result<String, ConsoleError> {
    let mut outcome = None;
    if let Some(action) = &request.action {
        outcome = Some(run_action(deps, action).await);
    }
    let (groups, capped) = match request.widget {
        Widget::DeadLetters | Widget::Endpoints => {
            dead_letter_groups(
                deps.ledger.as_ref(),
                deps.endpoints.as_ref(),
                deps.dlq.as_ref(),
            )
            .await?
        }
        Widget::Waiting | Widget::EventLookup | Widget::Audit => (Vec::new(), false),
    };
    if let Some(ActionOutcome::Replayed {
        action:
            Action::Replay {
                endpoint_id,
                reason,
                ..
            },
        remaining,
        ..
    }) = &mut outcome
    {
        *remaining = groups
            .iter()
            .filter(|g| {
                g.endpoint_id.as_deref() == Some(endpoint_id.as_str())
                    && g.reason == reason.as_str()
            })
            .map(|g| g.count)
            .sum();
    }
    let html = match request.widget {
        Widget::DeadLetters => {
            render::dead_letters(&groups, capped, outcome.as_ref(), target).into_string()
        }
        Widget::Endpoints => {
            let endpoints = deps.endpoints.list_all().await?;
            let now = chrono::Utc::now();
            let (health, complete) = endpoint_health(deps, now).await?;
            let rows = render::failing_endpoints(&endpoints, &health, &groups);
            render::endpoints(&rows, complete, outcome.as_ref(), target).into_string()
        }
        Widget::Waiting => match (&deps.waiting, &deps.health) {
            (Some(list), Some(health)) => {
                let report = tern_ops::waiting::read(
                    list.as_ref(),
                    deps.endpoints.as_ref(),
                    health.as_ref(),
                    &WaitingScope::All,
                    &deps.policy,
                    deps.time_scale,
                    tern_ops::waiting::DEFAULT_PER_ENDPOINT,
                    chrono::Utc::now(),
                )
                .await
                .map_err(ops_error)?;
                render::waiting(&report, target).into_string()
            }
            _ => render::error(&ConsoleError::BadRequest(
                "this console has no waiting list or health table configured".into(),
            ))
            .into_string(),
        },
        Widget::EventLookup => {
            let typed_tenant = request.tenant_id.clone().unwrap_or_default();
            let lookup = match &request.event_id {
                None => render::Lookup::NotAsked {
                    tenant: typed_tenant,
                },
                Some(text) => match (
                    EventId::new(text.clone()),
                    TenantId::new(typed_tenant.clone()),
                ) {
                    (Err(e), _) => render::Lookup::Invalid {
                        tenant: typed_tenant,
                        input: text.clone(),
                        error: format!("not an event id: {e}"),
                    },
                    // The ledger keeps each tenant's events apart: the tenant is needed.
                    (_, Err(e)) => render::Lookup::Invalid {
                        tenant: typed_tenant,
                        input: text.clone(),
                        error: format!("not a tenant id (the event's tenant is needed): {e}"),
                    },
                    (Ok(id), Ok(tenant)) => {
                        let history = deps.ledger.history(&tenant, &id).await?;
                        let report = tern_ops::attempts::report_scaled(
                            id.as_str(),
                            None,
                            &history,
                            deps.time_scale,
                        );
                        render::Lookup::Found { tenant, id, report }
                    }
                },
            };
            render::event_lookup(&lookup, target).into_string()
        }
        Widget::Audit => {
            render::audit(&audit_window(deps, request.since.as_deref()).await, target).into_string()
        }
    };
    Ok(html)
}

/// Window start the "Is anything lost?" widget audits when none is typed: the last hour.
pub const CONSOLE_AUDIT_DEFAULT_SINCE: &str = "1h";

/// Runs the audit the widget shows: the window from `since` (default
/// [`CONSOLE_AUDIT_DEFAULT_SINCE`]) to now, at most [`CONSOLE_AUDIT_MAX_WINDOW_HOURS`]
/// long, within [`CONSOLE_AUDIT_SECONDS`]. Every failure is an outcome to show, not an
/// error: the widget explains it and points to `tern audit`.
pub async fn audit_window(deps: &ConsoleDeps, since: Option<&str>) -> render::AuditView {
    let typed = since.unwrap_or(CONSOLE_AUDIT_DEFAULT_SINCE).to_owned();
    let Some(audit) = &deps.audit else {
        return render::AuditView::Failed {
            since: typed,
            error: "this console has no outbox table or relay-failure queue configured".into(),
        };
    };
    let now = chrono::Utc::now();
    let start = match tern_ops::when::parse_time(&typed, now) {
        Ok(t) => t,
        Err(e) => {
            return render::AuditView::Failed {
                since: typed,
                error: e.to_string(),
            };
        }
    };
    if now - start > chrono::Duration::hours(CONSOLE_AUDIT_MAX_WINDOW_HOURS) {
        return render::AuditView::Failed {
            since: typed,
            error: format!(
                "the console audits at most the last {CONSOLE_AUDIT_MAX_WINDOW_HOURS} hours; for a longer window run `tern audit --since ...` in a terminal"
            ),
        };
    }
    let mut request = AuditRequest::new(start, now);
    request.recheck_after = std::time::Duration::from_secs(CONSOLE_AUDIT_RECHECK_SECONDS);
    request.max_listed = render::AUDIT_ROWS_SHOWN;
    let stores = AuditStores {
        outbox: audit.outbox.as_ref(),
        ledger: deps.ledger.as_ref(),
        endpoints: deps.endpoints.as_ref(),
        health: deps.health.as_deref(),
        dlq: deps.dlq.as_ref(),
        relay_failures: audit.relay_failures.as_ref(),
        delivery_queue: audit.delivery_queue.as_deref(),
    };
    let run = tern_ops::audit::audit(stores, &request, &audit.rules);
    match tokio::time::timeout(std::time::Duration::from_secs(CONSOLE_AUDIT_SECONDS), run).await {
        Ok(Ok(report)) => render::AuditView::Done {
            since: typed,
            report: Box::new(report),
        },
        Ok(Err(e)) => render::AuditView::Failed {
            since: typed,
            error: e.to_string(),
        },
        Err(_) => render::AuditView::Failed {
            error: format!(
                "the audit did not finish in {CONSOLE_AUDIT_SECONDS} s: the window holds more events than one render can read. Run `tern audit --since {typed}` in a terminal, or choose a shorter window"
            ),
            since: typed,
        },
    }
}

/// An operator library error as a console error.
fn ops_error(e: tern_ops::OpsError) -> ConsoleError {
    match e {
        tern_ops::OpsError::Port(p) => ConsoleError::Port(p),
        other => ConsoleError::BadRequest(other.to_string()),
    }
}

/// Every endpoint's health row with its waiting count (one read of the health records,
/// one of the waiting list), and whether the waiting counts are whole. Without a health
/// table, every endpoint reads as never attempted; without a waiting list, no counts.
async fn endpoint_health(
    deps: &ConsoleDeps,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(Vec<tern_ops::health::HealthRow>, bool), ConsoleError> {
    let Some(health) = &deps.health else {
        let endpoints = deps.endpoints.list_all().await?;
        return Ok((
            endpoints
                .iter()
                .map(|e| tern_ops::health::HealthRow::of(e, None, &deps.policy, now))
                .collect(),
            true,
        ));
    };
    match &deps.waiting {
        Some(list) => {
            let report = tern_ops::health::health_rows_waiting(
                deps.endpoints.as_ref(),
                health.as_ref(),
                list.as_ref(),
                None,
                &deps.policy,
                now,
            )
            .await
            .map_err(ops_error)?;
            Ok((report.endpoints, report.waiting_complete))
        }
        None => Ok((
            tern_ops::health::health_rows(
                deps.endpoints.as_ref(),
                health.as_ref(),
                None,
                &deps.policy,
                now,
            )
            .await
            .map_err(ops_error)?,
            true,
        )),
    }
}

async fn run_action(deps: &ConsoleDeps, action: &Action) -> ActionOutcome {
    match action {
        Action::Replay { .. } => {
            let Some(request) = action.replay_request() else {
                return ActionOutcome::Failed {
                    error: "not a replay".into(),
                };
            };
            // The check `tern replay` makes: a replay into an endpoint that cannot take
            // deliveries only sends them back to the DLQ. A dry run only counts.
            if !request.dry_run {
                let check = tern_ops::replay_check::bad_targets(
                    deps.ledger.as_ref(),
                    deps.endpoints.as_ref(),
                    &request.filters,
                    MAX_DEAD_LETTERS_READ,
                )
                .await;
                match check {
                    Ok(bad) if bad.is_empty() => {}
                    Ok(bad) => {
                        return ActionOutcome::Failed {
                            error: format!(
                                "not replayed: the endpoint cannot take deliveries:{}\nEnable it first (Endpoints widget), then replay.",
                                tern_ops::replay_check::list(&bad)
                            ),
                        };
                    }
                    Err(e) => {
                        return ActionOutcome::Failed {
                            error: format!("not replayed: the endpoint could not be checked: {e}"),
                        };
                    }
                }
            }
            match deps.replay.replay(request).await {
                Ok(summary) => ActionOutcome::Replayed {
                    action: action.clone(),
                    summary,
                    remaining: 0,
                },
                Err(e) => ActionOutcome::Failed {
                    error: e.to_string(),
                },
            }
        }
        Action::Enable {
            tenant_id,
            endpoint_id,
        } => match enable(deps, tenant_id, endpoint_id).await {
            Ok(()) => ActionOutcome::Enabled {
                endpoint_id: endpoint_id.clone(),
            },
            Err(e) => ActionOutcome::Failed {
                error: e.to_string(),
            },
        },
    }
}

async fn enable(
    deps: &ConsoleDeps,
    tenant: &TenantId,
    id: &EndpointId,
) -> Result<(), tern_core::ports::PortError> {
    if let Some(health) = &deps.health {
        health.reset(tenant, id).await?;
    }
    deps.endpoints.enable(tenant, id).await
}

/// Answers one custom widget event: the widget's HTML, or its documentation (as
/// `{"markdown": ...}`) when the dashboard asks to `describe` it. A bad request or an
/// unreachable store is rendered as an error message in the widget, so the dashboard
/// shows why rather than a blank box.
pub async fn handle(
    deps: &ConsoleDeps,
    event: serde_json::Value,
    target: &Target,
) -> serde_json::Value {
    let event: WidgetEvent = match serde_json::from_value(event) {
        Ok(e) => e,
        Err(e) => return serde_json::Value::String(render::error(&bad(e)).into_string()),
    };
    if event.describe {
        return serde_json::json!({ "markdown": render::DESCRIBE });
    }
    let result = match event.request() {
        Ok(request) => render_widget(deps, &request, target).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(html) => serde_json::Value::String(html),
        Err(e) => {
            tracing::warn!(error = %e, "widget failed");
            serde_json::Value::String(render::error(&e).into_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use chrono::Utc;
    use tern_core::endpoint::EndpointSecret;
    use tern_core::ports::{AttemptRecord, Claim, DeliveryState, ReceivedMessage};
    use tern_core::{DeadLetter, DeliveryMessage, Endpoint, Event, Secret};

    use super::*;

    const ARN: &str = "arn:aws:lambda:eu-west-1:123456789012:function:tern-console";

    fn fixture(name: &str) -> serde_json::Value {
        let path = format!("{}/../../events/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json")
    }

    /// The DLQ in memory: every message is visible (releases are no-ops), deletes remove.
    #[derive(Default)]
    struct MemDlq {
        messages: Mutex<Vec<ReceivedMessage>>,
        served: Mutex<usize>,
    }

    #[async_trait]
    impl DrainableQueue for MemDlq {
        async fn receive(
            &self,
            max: i32,
            _: i32,
            _: i32,
        ) -> Result<Vec<ReceivedMessage>, PortError> {
            // Each message once per read, as SQS's visibility timeout does.
            let all = self.messages.lock().unwrap().clone();
            let mut served = self.served.lock().unwrap();
            let batch: Vec<_> = all.into_iter().skip(*served).take(max as usize).collect();
            *served += batch.len();
            Ok(batch)
        }
        async fn delete(&self, _: &str) -> Result<(), PortError> {
            Ok(())
        }
        async fn release(&self, _: &str) -> Result<(), PortError> {
            // The read is over once a message is released: the next read starts again.
            *self.served.lock().unwrap() = 0;
            Ok(())
        }
    }

    #[derive(Default)]
    struct MemEndpoints(Mutex<Vec<Endpoint>>);

    #[async_trait]
    impl EndpointStore for MemEndpoints {
        async fn get(&self, t: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, PortError> {
            Ok(self
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|e| e.tenant_id == *t && e.id == *id)
                .cloned())
        }
        async fn list_for_tenant(&self, t: &TenantId) -> Result<Vec<Endpoint>, PortError> {
            Ok(self
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|e| e.tenant_id == *t)
                .cloned()
                .collect())
        }
        async fn list_all(&self) -> Result<Vec<Endpoint>, PortError> {
            Ok(self.0.lock().unwrap().clone())
        }
        async fn put(&self, e: &Endpoint) -> Result<(), PortError> {
            self.0.lock().unwrap().push(e.clone());
            Ok(())
        }
        async fn disable(&self, _: &TenantId, _: &EndpointId, _: &str) -> Result<(), PortError> {
            unreachable!("the console never disables")
        }
        async fn enable(&self, t: &TenantId, id: &EndpointId) -> Result<(), PortError> {
            let mut all = self.0.lock().unwrap();
            let e = all
                .iter_mut()
                .find(|e| e.tenant_id == *t && e.id == *id)
                .ok_or_else(|| PortError::Rejected("no such endpoint".into()))?;
            e.enabled = true;
            e.last_disabled_reason = e.disabled_reason.take();
            Ok(())
        }
        async fn set_secrets(
            &self,
            _: &TenantId,
            _: &EndpointId,
            _: &[EndpointSecret],
        ) -> Result<(), PortError> {
            unreachable!("the console never rotates")
        }
    }

    #[derive(Default)]
    struct MemLedger(Mutex<Vec<EventId>>);

    #[async_trait]
    impl DeliveryLedger for MemLedger {
        async fn claim(
            &self,
            _: &DeliveryMessage,
            _: chrono::DateTime<Utc>,
        ) -> Result<Claim, PortError> {
            unreachable!()
        }
        async fn finish(&self, _: &DeliveryMessage, _: DeliveryState) -> Result<(), PortError> {
            unreachable!()
        }
        async fn record_attempt(
            &self,
            _: &tern_core::DeliveryMessage,
            _: &AttemptRecord,
        ) -> Result<(), PortError> {
            unreachable!()
        }
        async fn history(
            &self,
            _: &tern_core::TenantId,
            event: &EventId,
        ) -> Result<Vec<AttemptRecord>, PortError> {
            self.0.lock().unwrap().push(event.clone());
            Ok(vec![])
        }
    }

    #[derive(Default)]
    struct FakeReplay {
        requests: Mutex<Vec<ReplayRequest>>,
        fail: bool,
    }

    #[async_trait]
    impl ReplayInvoker for FakeReplay {
        async fn replay(&self, request: ReplayRequest) -> Result<ReplaySummary, ConsoleError> {
            self.requests.lock().unwrap().push(request.clone());
            if self.fail {
                return Err(ConsoleError::Replay(
                    "Unhandled: the replay function timed out".into(),
                ));
            }
            Ok(ReplaySummary {
                dry_run: request.dry_run,
                examined: 2,
                matched: 1,
                replayed: u32::from(!request.dry_run),
                skipped: 1,
                ..ReplaySummary::default()
            })
        }
    }

    struct World {
        deps: ConsoleDeps,
        replay: Arc<FakeReplay>,
        ledger: Arc<MemLedger>,
        endpoints: Arc<MemEndpoints>,
    }

    fn world(fail_replay: bool) -> World {
        let event: Event = serde_json::from_value(serde_json::json!({
            "id": EventId::generate().as_str(), "type": "order.paid", "tenant_id": "tnt_a",
            "created_at": "2026-11-30T00:00:00Z", "payload": {"n": 1},
        }))
        .unwrap();
        let body = DeliveryMessage::first(event, EndpointId::new("ep_orders").unwrap())
            .dead_lettered(DeadLetter {
                reason: DeadLetterReason::Exhausted,
                last_status: Some(503),
                last_error: Some("http status 503".into()),
                attempts: 7,
                at: Utc::now(),
            })
            .to_body();
        let dlq = Arc::new(MemDlq::default());
        dlq.messages.lock().unwrap().push(ReceivedMessage {
            message_id: "m1".into(),
            receipt_handle: "r1".into(),
            body,
            attributes: vec![],
        });
        let mut off = Endpoint::new(
            EndpointId::new("ep_off").unwrap(),
            TenantId::new("tnt_a").unwrap(),
            "https://example.com/hook",
            vec!["*".into()],
            Secret::generate(),
            Utc::now(),
        );
        off.enabled = false;
        off.disabled_reason = Some("410 Gone".into());
        let orders = Endpoint::new(
            EndpointId::new("ep_orders").unwrap(),
            TenantId::new("tnt_a").unwrap(),
            "https://example.com/orders",
            vec!["*".into()],
            Secret::generate(),
            Utc::now(),
        );
        let endpoints = Arc::new(MemEndpoints(Mutex::new(vec![off, orders])));
        let ledger = Arc::new(MemLedger::default());
        let replay = Arc::new(FakeReplay {
            fail: fail_replay,
            ..FakeReplay::default()
        });
        World {
            deps: ConsoleDeps {
                dlq,
                endpoints: endpoints.clone(),
                ledger: ledger.clone(),
                replay: replay.clone(),
                health: None,
                waiting: None,
                policy: HealthPolicy::default(),
                time_scale: 1.0,
                audit: None,
            },
            replay,
            ledger,
            endpoints,
        }
    }

    fn cw() -> Target {
        Target::CloudWatch {
            function_arn: ARN.into(),
        }
    }

    async fn answer(w: &World, event: serde_json::Value) -> String {
        handle(&w.deps, event, &cw())
            .await
            .as_str()
            .expect("HTML is a JSON string")
            .to_owned()
    }

    #[tokio::test]
    async fn dashboard_load_renders_groups_with_buttons_calling_this_function() {
        let w = world(false);
        let html = answer(&w, fixture("console-widget-load.json")).await;
        assert!(html.contains("data-groups=\"1\""), "{html}");
        assert!(html.contains(&format!("endpoint=\"{ARN}\"")));
        assert!(
            w.replay.requests.lock().unwrap().is_empty(),
            "loading replays nothing"
        );
    }

    #[tokio::test]
    async fn replay_click_invokes_replay_with_the_groups_filters_and_shows_the_result() {
        let w = world(false);
        let html = answer(&w, fixture("console-widget-replay-click.json")).await;
        let requests = w.replay.requests.lock().unwrap().clone();
        assert_eq!(requests.len(), 1);
        let r = &requests[0];
        assert!(!r.dry_run);
        assert_eq!(
            r.filters.endpoint_id.as_ref().unwrap().as_str(),
            "ep_orders"
        );
        assert_eq!(r.filters.reason, Some(DeadLetterReason::Exhausted));
        assert_eq!(r.filters.event_type, None);
        assert_eq!(r.max_seconds, Some(CONSOLE_REPLAY_SECONDS));
        assert!(html.contains("data-replayed=\"1\""), "{html}");
        // The fake moved nothing, so the group is still read afterwards.
        assert!(html.contains("data-remaining=\"1\""), "{html}");
    }

    #[tokio::test]
    async fn replay_click_refuses_an_endpoint_that_cannot_take_deliveries_as_tern_replay_does() {
        let w = world(false);
        let set_orders = |f: &dyn Fn(&mut Vec<Endpoint>)| f(&mut w.endpoints.0.lock().unwrap());
        set_orders(&|all| {
            let e = all
                .iter_mut()
                .find(|e| e.id.as_str() == "ep_orders")
                .unwrap();
            e.enabled = false;
            e.disabled_reason = Some("operator: maintenance".into());
        });
        let html = answer(&w, fixture("console-widget-replay-click.json")).await;
        assert!(
            w.replay.requests.lock().unwrap().is_empty(),
            "nothing replayed into a disabled endpoint"
        );
        assert!(html.contains("data-failed=\"true\""), "{html}");
        assert!(
            html.contains("endpoint ep_orders: disabled (operator: maintenance)"),
            "{html}"
        );
        // A dry run only counts: it runs.
        answer(
            &w,
            serde_json::json!({"widget": "dead_letters", "action": "replay", "endpoint_id": "ep_orders", "reason": "exhausted", "dry_run": true}),
        )
        .await;
        assert_eq!(w.replay.requests.lock().unwrap().len(), 1);
        // An endpoint that does not exist (deleted) is refused too.
        set_orders(&|all| all.retain(|e| e.id.as_str() != "ep_orders"));
        let html = answer(&w, fixture("console-widget-replay-click.json")).await;
        assert!(
            html.contains("endpoint ep_orders: unknown (deleted"),
            "{html}"
        );
        assert_eq!(w.replay.requests.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn failed_replay_is_shown_not_thrown() {
        let w = world(true);
        let html = answer(&w, fixture("console-widget-replay-click.json")).await;
        assert!(html.contains("data-failed=\"true\""), "{html}");
        assert!(html.contains("the replay function timed out"));
        assert!(html.contains("data-groups=\"1\""), "the groups still show");
    }

    #[tokio::test]
    async fn lookup_reads_the_form_field_trimmed() {
        let w = world(false);
        let html = answer(&w, fixture("console-widget-lookup-form.json")).await;
        assert_eq!(
            w.ledger.0.lock().unwrap().clone(),
            vec![EventId::new("evt_01a22e4b93977052b78100000000abcd").unwrap()]
        );
        assert!(html.contains("id=\"lookup-empty\""), "{html}");
    }

    #[tokio::test]
    async fn describe_returns_markdown() {
        let w = world(false);
        let out = handle(&w.deps, fixture("console-widget-describe.json"), &cw()).await;
        assert!(out["markdown"].as_str().unwrap().contains("dead_letters"));
    }

    #[tokio::test]
    async fn enable_click_enables_and_lists_the_endpoint_as_failing_no_more() {
        let w = world(false);
        let html = answer(
            &w,
            serde_json::json!({"widget":"endpoints","action":"enable","tenant_id":"tnt_a","endpoint_id":"ep_off"}),
        )
        .await;
        assert!(html.contains("data-enabled=\"ep_off\""), "{html}");
        // Issue 17: it says when deliveries resume, and what is still cached.
        assert!(html.contains("Deliveries resume now"), "{html}");
        assert!(html.contains("TERN_HEALTH_CACHE_SECONDS"), "{html}");
        assert!(w.endpoints.0.lock().unwrap()[0].enabled);
        assert!(
            !html.contains("data-endpoint=\"ep_off\" data-state"),
            "{html}"
        );
    }

    #[tokio::test]
    async fn bad_requests_are_typed_errors_in_the_widget() {
        let w = world(false);
        for (event, needle) in [
            (serde_json::json!({}), "the widget's params need"),
            (
                serde_json::json!({"widget": "<script>"}),
                "unknown widget &quot;&lt;script&gt;&quot;",
            ),
            (
                serde_json::json!({"widget": "dead_letters", "action": "purge"}),
                "unknown action",
            ),
            (
                serde_json::json!({"widget": "dead_letters", "action": "replay", "endpoint_id": "ep_a"}),
                "needs reason",
            ),
            (
                serde_json::json!({"widget": "dead_letters", "action": "replay", "endpoint_id": "ep_a", "reason": "bogus"}),
                "unknown reason",
            ),
        ] {
            let html = answer(&w, event.clone()).await;
            assert!(html.contains("id=\"widget-error\""), "{event}: {html}");
            assert!(html.contains(needle), "{event}: {html}");
        }
        assert!(w.replay.requests.lock().unwrap().is_empty());
    }
}
