//! The operator's console in local mode: the same widgets as the CloudWatch dashboard's
//! custom widgets (`tern-console`), served as pages on 127.0.0.1. A button is a form that
//! posts the action's parameters to `/action`, which runs the same action code (the replay
//! handler in process, the endpoint store's `enable`) against moto.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tern_console::render::local_page;
use tern_console::{
    AuditDeps, ConsoleDeps, ConsoleError, InProcessReplay, Target, Widget, WidgetEvent,
};
use tokio::task::JoinHandle;

/// Port the console asks for first: 8790. When it is taken (another local mode, a test
/// running alongside), the console takes any free port; `tern local` prints the address.
pub const DEFAULT_CONSOLE_PORT: u16 = 8790;

/// Path the console's forms post to.
pub const ACTION_PATH: &str = "/action";

/// The console's dependencies in a local deployment: the same stores the handlers use.
pub fn console_deps(local: &crate::LocalTern, namespace: &str) -> ConsoleDeps {
    let setting = |name: &str| {
        local
            .env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    // The deployment's own settings: the health thresholds it runs with, and its time
    // scale (the attempt log stores logical waits).
    let policy = tern_handlers::config::health_policy(&tern_handlers::config::Env(&setting))
        .unwrap_or_default();
    let audit_rules = tern_ops::audit::rules_from_env(
        &tern_handlers::config::Env(&setting),
        tern_ops::audit::DEFAULT_GRACE,
    )
    .ok();
    let time_scale = setting("TERN_TIME_SCALE")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0 && *s <= 1.0)
        .unwrap_or(1.0);
    ConsoleDeps {
        dlq: local.replay.dlq.clone(),
        endpoints: local.sender.endpoints.clone(),
        ledger: local.sender.ledger.clone(),
        waiting: Some(Arc::new(tern_aws::DynamoLedger::new(
            aws_sdk_dynamodb::Client::new(&local.aws),
            &local.resources.attempts_table,
            30,
        ))),
        policy,
        time_scale,
        health: Some(Arc::new(tern_aws::DynamoHealthStore::new(
            aws_sdk_dynamodb::Client::new(&local.aws),
            &local.resources.health_table,
        ))),
        audit: audit_rules.map(|rules| AuditDeps {
            outbox: Arc::new(tern_aws::DynamoOutboxReader::new(
                aws_sdk_dynamodb::Client::new(&local.aws),
                &local.resources.outbox_table,
            )),
            relay_failures: Arc::new(tern_aws::SqsQueue::new(
                local.sqs(),
                &local.resources.relay_failure_queue_url,
            )),
            delivery_queue: Some(Arc::new(tern_aws::SqsQueue::new(
                local.sqs(),
                &local.resources.delivery_queue_url,
            ))),
            rules,
        }),
        replay: Arc::new(InProcessReplay {
            deps: tern_handlers::replay::ReplayDeps {
                dlq: local.replay.dlq.clone(),
                delivery_queue: local.replay.delivery_queue.clone(),
                ledger: local.replay.ledger.clone(),
            },
            namespace: namespace.to_owned(),
        }),
    }
}

fn target() -> Target {
    Target::Local {
        action_path: ACTION_PATH.to_owned(),
    }
}

async fn page(deps: &ConsoleDeps, event: serde_json::Value) -> Response {
    let fallback = Widget::DeadLetters;
    let parsed: Result<WidgetEvent, ConsoleError> =
        serde_json::from_value(event).map_err(|e| ConsoleError::BadRequest(e.to_string()));
    let request = parsed.and_then(|e| e.request());
    let (widget, html) = match request {
        Ok(request) => {
            let html = tern_console::render_widget(deps, &request, &target())
                .await
                .unwrap_or_else(|e| tern_console::render::error(&e).into_string());
            (request.widget, html)
        }
        Err(e) => (fallback, tern_console::render::error(&e).into_string()),
    };
    Html(local_page(widget, &html).into_string()).into_response()
}

#[derive(Deserialize)]
struct LookupQuery {
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    event_id: Option<String>,
    #[serde(default)]
    since: Option<String>,
}

async fn widget_page(
    State(deps): State<ConsoleDeps>,
    Path(name): Path<String>,
    Query(q): Query<LookupQuery>,
) -> Response {
    page(
        &deps,
        serde_json::json!({
            "widget": name, "tenant_id": q.tenant_id, "event_id": q.event_id, "since": q.since,
        }),
    )
    .await
}

#[derive(Deserialize)]
struct ActionForm {
    params: String,
}

/// True when a request that changes something comes from the console's own pages: its
/// `Host` is the loopback address (not a name a web page could rebind to 127.0.0.1) and its
/// `Origin`, when the browser sends one, is that same host. A page of another site open in
/// the operator's browser cannot post to `/action`.
pub fn same_origin(headers: &axum::http::HeaderMap) -> bool {
    let header = |name: axum::http::header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let Some(host) = header(axum::http::header::HOST) else {
        return false;
    };
    let loopback = crate::loopback::is_loopback_host(&host);
    let origin_ok =
        header(axum::http::header::ORIGIN).is_none_or(|o| o == format!("http://{host}"));
    loopback && origin_ok
}

async fn action(
    State(deps): State<ConsoleDeps>,
    headers: axum::http::HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    if !same_origin(&headers) {
        return (
            axum::http::StatusCode::FORBIDDEN,
            "actions are accepted only from the console's own pages",
        )
            .into_response();
    }
    match serde_json::from_str::<serde_json::Value>(&form.params) {
        Ok(event) => page(&deps, event).await,
        Err(e) => {
            page(
                &deps,
                serde_json::json!({ "widget": format!("bad params: {e}") }),
            )
            .await
        }
    }
}

#[derive(Deserialize)]
struct TraceQuery {
    #[serde(default)]
    event_id: Option<String>,
}

/// Longest event id the trace page looks up, characters: 128 (`tern_core::ids::MAX_ID_LEN`).
const MAX_EVENT_ID_CHARS: usize = 128;

/// `/trace?event_id=`: the event's trace as a waterfall, from the span file `tern trace`
/// reads, laid out by the same code ([`tern_handlers::span_log`]).
async fn trace_page(
    State(span_file): State<Arc<std::path::PathBuf>>,
    Query(q): Query<TraceQuery>,
) -> Response {
    use tern_console::render::{TRACE_TITLE, TraceView, local_page_titled, trace};
    use tern_handlers::span_log;
    let event_id: Option<String> = q
        .event_id
        .map(|e| e.trim().chars().take(MAX_EVENT_ID_CHARS).collect())
        .filter(|e: &String| !e.is_empty());
    let Some(event_id) = event_id else {
        return Html(
            local_page_titled(TRACE_TITLE, &trace(&TraceView::NotAsked).into_string())
                .into_string(),
        )
        .into_response();
    };
    let path = span_file.as_ref().clone();
    let read = tokio::task::spawn_blocking(move || span_log::read(&path))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    let spans = match &read {
        Ok(spans) => span_log::trace_of(spans, &event_id),
        Err(_) => Vec::new(),
    };
    let view = match (&read, span_log::waterfall_rows(&spans)) {
        (Err(error), _) => TraceView::NoFile {
            path: span_file.display().to_string(),
            error: error.clone(),
        },
        (Ok(_), Some(chart)) => TraceView::Found {
            event_id: event_id.clone(),
            chart,
        },
        (Ok(_), None) => TraceView::NoSpans {
            event_id: event_id.clone(),
        },
    };
    Html(local_page_titled(TRACE_TITLE, &trace(&view).into_string()).into_string()).into_response()
}

/// The console's routes: `/` (to the dead letters), `/widgets/{dead_letters|endpoints|
/// event_lookup}` (`?tenant_id=&event_id=` for the lookup), `/trace?event_id=` (the
/// event's waterfall from `span_file`) and `POST /action`.
pub fn router(deps: ConsoleDeps, span_file: std::path::PathBuf) -> Router {
    let traces = Router::new()
        .route("/trace", get(trace_page))
        .with_state(Arc::new(span_file));
    Router::new()
        .route("/", get(|| async { Redirect::to("/widgets/dead_letters") }))
        .route("/widgets/{name}", get(widget_page))
        .route(ACTION_PATH, post(action))
        .with_state(deps)
        .merge(traces)
}

/// Binds 127.0.0.1:`port` (any free port when it is taken, or when `port` is 0). Call
/// from inside a Tokio runtime.
///
/// # Errors
/// The bind error when no port can be had.
pub fn bind(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .or_else(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))?;
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
}

/// Serves the console on `listener` until the task is aborted, to requests with a
/// loopback `Host` only ([`crate::loopback`]: a DNS-rebinding page can neither read the
/// pages, which show every tenant's dead letters, nor post actions).
pub fn spawn(
    listener: tokio::net::TcpListener,
    deps: ConsoleDeps,
    span_file: std::path::PathBuf,
) -> JoinHandle<()> {
    let router = router(deps, span_file).layer(axum::middleware::from_fn(
        crate::loopback::only_loopback_host,
    ));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::warn!(error = %e, "the local console stopped");
        }
    })
}

/// The address's URL.
pub fn url(addr: SocketAddr) -> String {
    format!("http://{addr}/")
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderMap;

    use super::same_origin;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn actions_only_from_the_consoles_own_pages() {
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8790"),
            ("origin", "http://127.0.0.1:8790")
        ])));
        assert!(
            same_origin(&headers(&[("host", "127.0.0.1:8790")])),
            "a non-browser client"
        );
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8790"),
            ("origin", "https://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "rebound.example:8790"),
            ("origin", "http://rebound.example:8790")
        ])));
        assert!(!same_origin(&headers(&[])));
    }
}
