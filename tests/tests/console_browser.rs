//! The operator's console in a real browser (issue 8, section 1): headless Chromium
//! (Debian's `/usr/bin/chromium`, driven by `tests/browser/console.mjs` with playwright-core)
//! renders each widget of the local console on a moto deployment: an empty DLQ, three DLQ
//! groups, a payload that tries to inject HTML, a disabled endpoint, an event's history.
//! Then it clicks Enable and Replay, and the DLQ empties and the receiver gets every event.
//!
//! `make test-console` installs Chromium and the npm package and runs this. Screenshots go
//! to `$TERN_SCREENSHOTS_DIR` (`make console-screenshots` points it at `docs/console`, the
//! docs/operating.md's pictures), else to a temporary directory. A missing Chromium or Node package
//! fails the test with the command that installs it: it never skips.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tern_core::ports::{MessageQueue, QueueEntry};
use tern_core::{
    DeadLetter, DeadLetterReason, DeliveryMessage, EndpointId, Event, EventId, TenantId,
};
use tern_local::LocalOptions;
use tern_tests::*;

const XSS: &str = "</table><img src=x onerror=alert(1)>";

fn screenshots_dir() -> PathBuf {
    std::env::var_os("TERN_SCREENSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tern-console-screenshots"))
}

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// Runs the browser through `steps`; returns its report (`captures`, `dialogs`).
async fn browse(base: &str, steps: serde_json::Value) -> serde_json::Value {
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "headless Chromium is required at /usr/bin/chromium: run `make chromium` (apt-get install -y chromium)"
    );
    assert!(
        browser_dir().join("node_modules/playwright-core").exists(),
        "playwright-core is required: run `make test-console` (npm ci in tests/browser)"
    );
    let out = tokio::process::Command::new("node")
        .arg(browser_dir().join("console.mjs"))
        .arg(base)
        .arg(screenshots_dir())
        .arg(steps.to_string())
        .output()
        .await
        .expect("node runs");
    assert!(
        out.status.success(),
        "browser run failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("browser report is JSON")
}

fn capture<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    &report["captures"][name]
}

fn html<'a>(report: &'a serde_json::Value, name: &str) -> &'a str {
    capture(report, name)["html"]
        .as_str()
        .expect("captured html")
}

fn event(tenant: &str, payload: serde_json::Value) -> Event {
    serde_json::from_value(serde_json::json!({
        "id": EventId::generate().as_str(), "type": "order.paid", "tenant_id": tenant,
        "created_at": "2026-11-30T09:00:00Z", "payload": payload,
    }))
    .expect("event")
}

/// Puts a dead letter on the DLQ as the sender writes it.
async fn dead_letter(
    local: &tern_local::LocalTern,
    event: Event,
    endpoint: &str,
    reason: DeadLetterReason,
    status: Option<u16>,
    error: &str,
    minute: u32,
) -> EventId {
    let id = event.id.clone();
    let message = DeliveryMessage::first(event, EndpointId::new(endpoint).expect("id"))
        .dead_lettered(DeadLetter {
            reason,
            last_status: status,
            last_error: Some(error.to_owned()),
            attempts: 7,
            at: format!("2026-11-30T10:{minute:02}:00Z")
                .parse()
                .expect("time"),
        });
    // As the sender dead-letters: the tenant's dead-letter record (what the widget
    // reads), then the DLQ (what a replay moves).
    tern_core::ports::DeliveryLedger::record_dead_letter(local.sender.ledger.as_ref(), &message)
        .await
        .expect("record the dead letter");
    let dlq = tern_aws::SqsQueue::new(local.sqs(), &local.resources.dlq_url);
    dlq.send(&QueueEntry {
        id: "seed".into(),
        body: message.to_body(),
        delay_seconds: 0,
        attributes: vec![],
        group_id: None,
    })
    .await
    .expect("seed the DLQ");
    id
}

fn group_rows(html: &str) -> usize {
    html.matches("<tr class=\"group\"").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_console_renders_widgets_and_replay_click_delivers() {
    let options = LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        // Any free port: tests run side by side.
        console_port: Some(0),
        ..LocalOptions::default()
    };
    let (local, _events) = deployment("console_browser", options).await;
    let base = tern_local::console::url(local.console.expect("the console started"));
    let receiver = Receiver::start().await.expect("receiver");
    let tenant = "tnt_shop";

    // 1. The empty DLQ.
    let report = browse(
        &base,
        serde_json::json!([
            {"goto": "/widgets/dead_letters"},
            {"capture": "empty"},
            {"screenshot": "dead-letters-empty.png"},
        ]),
    )
    .await;
    assert!(html(&report, "empty").contains("id=\"dlq-empty\""));
    assert_eq!(group_rows(html(&report, "empty")), 0);

    // 2. Three endpoints, one disabled after a 410; six dead letters in three groups, one
    //    group carrying an HTML-injection payload and error text.
    let orders = add_endpoint_with(
        &local,
        EndpointId::new("ep_orders").unwrap(),
        tenant,
        &receiver.url("/orders"),
        &["*"],
        None,
        None,
    )
    .await;
    add_endpoint_with(
        &local,
        EndpointId::new("ep_billing").unwrap(),
        tenant,
        &receiver.url("/billing"),
        &["*"],
        None,
        None,
    )
    .await;
    add_endpoint_with(
        &local,
        EndpointId::new("ep_crm").unwrap(),
        tenant,
        &receiver.url("/crm"),
        &["*"],
        None,
        None,
    )
    .await;
    local
        .sender
        .endpoints
        .disable(
            &TenantId::new(tenant).unwrap(),
            &EndpointId::new("ep_billing").unwrap(),
            "410 Gone from the receiver",
        )
        .await
        .expect("disable");
    let mut order_events = Vec::new();
    for (i, minute) in [1, 4, 7].into_iter().enumerate() {
        order_events.push(
            dead_letter(
                &local,
                event(
                    tenant,
                    serde_json::json!({"order": 1000 + i, "total_cents": 4200}),
                ),
                "ep_orders",
                DeadLetterReason::Exhausted,
                Some(503),
                "http status 503",
                minute,
            )
            .await,
        );
    }
    dead_letter(
        &local,
        event(tenant, serde_json::json!({"invoice": "inv_77"})),
        "ep_billing",
        DeadLetterReason::Gone,
        Some(410),
        "http status 410",
        2,
    )
    .await;
    for minute in [3, 5] {
        dead_letter(
            &local,
            event(tenant, serde_json::json!({"note": XSS})),
            "ep_crm",
            DeadLetterReason::Exhausted,
            Some(500),
            XSS,
            minute,
        )
        .await;
    }

    // 3. Each widget, rendered by the browser.
    let report = browse(
        &base,
        serde_json::json!([
            {"goto": "/widgets/dead_letters"},
            {"capture": "groups"},
            {"screenshot": "dead-letters.png"},
            {"goto": "/widgets/endpoints"},
            {"capture": "endpoints"},
            {"screenshot": "endpoints.png"},
            {"goto": "/widgets/dead_letters"},
            {"click": "button[data-action=replay][data-endpoint=ep_orders][data-dry-run=true]"},
            {"capture": "dry_run"},
        ]),
    )
    .await;
    let groups = html(&report, "groups");
    assert_eq!(group_rows(groups), 3, "three DLQ groups");
    for (endpoint, reason, count) in [
        ("ep_orders", "exhausted", 3),
        ("ep_crm", "exhausted", 2),
        ("ep_billing", "gone", 1),
    ] {
        assert!(
            groups.contains(&format!(
                "<tr class=\"group\" data-endpoint=\"{endpoint}\" data-reason=\"{reason}\" data-count=\"{count}\">"
            )),
            "{endpoint}/{reason} x{count} in {groups}"
        );
    }
    // The injection renders as text: no image element, no script ran, the text is shown.
    assert_eq!(capture(&report, "groups")["images"], 0);
    assert!(
        capture(&report, "groups")["text"]
            .as_str()
            .unwrap()
            .contains(XSS)
    );
    assert!(
        report["dialogs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["type"] == "confirm"),
        "only the buttons' confirmations: {}",
        report["dialogs"]
    );
    let endpoints = html(&report, "endpoints");
    assert!(endpoints.contains("data-endpoint=\"ep_billing\" data-state=\"disabled\""));
    // Listed for its dead letters; its health is fine (nothing was attempted here).
    assert!(endpoints.contains(
        "data-endpoint=\"ep_orders\" data-state=\"healthy\" data-waiting=\"0\" data-dead-letters=\"3\""
    ));
    assert!(endpoints.contains("410 Gone from the receiver"));
    assert!(endpoints.contains("data-action=\"enable\" data-endpoint=\"ep_billing\""));
    assert!(
        !endpoints.contains(orders.secrets[0].secret.expose()),
        "no secret is ever rendered"
    );
    // The dry run counted and moved nothing.
    let dry = html(&report, "dry_run");
    assert!(dry.contains("data-dry-run=\"true\""), "{dry}");
    assert!(dry.contains("data-matched=\"3\""), "{dry}");
    assert!(dry.contains("data-remaining=\"3\""), "{dry}");
    assert_eq!(group_rows(dry), 3);

    // 4. Enable the disabled endpoint, then click Replay on every group: the DLQ empties.
    let report = browse(
        &base,
        serde_json::json!([
            {"goto": "/widgets/endpoints"},
            {"click": "button[data-action=enable][data-endpoint=ep_billing]"},
            {"capture": "enabled"},
            {"goto": "/widgets/dead_letters"},
            {"click": "button[data-action=replay][data-endpoint=ep_orders][data-dry-run=false]"},
            {"capture": "replayed_orders"},
            {"screenshot": "dead-letters-replayed.png"},
            {"click": "button[data-action=replay][data-endpoint=ep_crm][data-dry-run=false]"},
            {"click": "button[data-action=replay][data-endpoint=ep_billing][data-dry-run=false]"},
            {"capture": "after"},
        ]),
    )
    .await;
    assert!(html(&report, "enabled").contains("data-enabled=\"ep_billing\""));
    let replayed = html(&report, "replayed_orders");
    assert!(replayed.contains("data-replayed=\"3\""), "{replayed}");
    assert!(replayed.contains("data-remaining=\"0\""), "{replayed}");
    assert_eq!(group_rows(replayed), 2, "the replayed group is gone");
    let after = html(&report, "after");
    assert!(after.contains("id=\"dlq-empty\""), "{after}");
    let confirmations: Vec<&str> = report["dialogs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["message"].as_str())
        .collect();
    assert_eq!(
        confirmations.len(),
        4,
        "each click asked first: {confirmations:?}"
    );

    // 5. The receiver got every event, and the DLQ is empty.
    assert_eq!(
        receiver
            .wait_for("/orders", 3, Duration::from_secs(60))
            .await
            .len(),
        3
    );
    assert_eq!(
        receiver
            .wait_for("/crm", 2, Duration::from_secs(60))
            .await
            .len(),
        2
    );
    assert_eq!(
        receiver
            .wait_for("/billing", 1, Duration::from_secs(60))
            .await
            .len(),
        1
    );
    assert!(
        peek_queue(&local, &local.resources.dlq_url)
            .await
            .is_empty()
    );
    assert!(
        history_reaches(&local, tenant, &order_events[0], 1, Duration::from_secs(30)).await,
        "the delivery is in the attempt log"
    );

    // 6. The event lookup shows that delivery.
    let report = browse(
        &base,
        serde_json::json!([
            {"goto": "/widgets/event_lookup"},
            {"fill": "input[name=tenant_id]", "value": tenant},
            {"fill": "input[name=event_id]", "value": order_events[0].as_str()},
            {"click": "form.lookup button"},
            {"capture": "lookup"},
            {"screenshot": "event-lookup.png"},
            {"goto": "/widgets/endpoints"},
            {"capture": "endpoints_after"},
        ]),
    )
    .await;
    let lookup = html(&report, "lookup");
    assert!(
        lookup.contains("<tr class=\"attempt\" data-outcome=\"delivered\">"),
        "{lookup}"
    );
    assert!(html(&report, "endpoints_after").contains("id=\"endpoints-empty\""));
}

/// The dashboard's markup (what the console Lambda returns), in a real browser: the HTML
/// injection stays text, and each `<cwdb-action>` holds the JSON of its button's action,
/// read back the same through `textContent` and `innerHTML`.
#[tokio::test]
async fn browser_console_cloudwatch_markup_carries_params() {
    use tern_console::render;
    use tern_core::ports::ReceivedMessage;
    let messages: Vec<ReceivedMessage> = [
        (
            "ep_orders",
            DeadLetterReason::Exhausted,
            serde_json::json!({"n": 1}),
        ),
        (
            "ep_crm",
            DeadLetterReason::Exhausted,
            serde_json::json!({"note": XSS}),
        ),
        (
            "ep_billing",
            DeadLetterReason::Gone,
            serde_json::json!({"n": 2}),
        ),
    ]
    .into_iter()
    .map(|(endpoint, reason, payload)| ReceivedMessage {
        message_id: "m".into(),
        receipt_handle: "r".into(),
        body: DeliveryMessage::first(
            event("tnt_shop", payload),
            EndpointId::new(endpoint).unwrap(),
        )
        .dead_lettered(DeadLetter {
            reason,
            last_status: Some(500),
            last_error: Some(XSS.into()),
            attempts: 7,
            at: "2026-11-30T10:00:00Z".parse().unwrap(),
        })
        .to_body(),
        attributes: vec![],
    })
    .collect();
    let views: Vec<_> = messages.iter().map(tern_local::ops::dlq::view).collect();
    let groups = tern_local::ops::dlq::group(&views);
    let target = tern_console::Target::CloudWatch {
        function_arn: "arn:aws:lambda:eu-west-1:123456789012:function:tern-console".into(),
    };
    let html = render::dead_letters(&groups, false, None, &target).into_string();
    let dir = std::env::temp_dir().join(format!("tern-cw-markup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("dead-letters.html");
    std::fs::write(
        &file,
        format!("<!DOCTYPE html><html><body>{html}</body></html>"),
    )
    .unwrap();
    let url = format!("file://{}", file.display());
    let report = browse(
        &url,
        serde_json::json!([
            {"goto": url},
            {"capture": "page"},
            {"eval": "Array.from(document.querySelectorAll('cwdb-action')).map(e => [e.getAttribute('endpoint'), e.getAttribute('confirmation'), JSON.parse(e.textContent), JSON.parse(e.innerHTML)])", "as": "actions"},
        ]),
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(capture(&report, "page")["images"], 0);
    assert!(
        report["dialogs"].as_array().unwrap().is_empty(),
        "no script ran"
    );
    let actions = report["captures"]["actions"].as_array().expect("actions");
    assert_eq!(actions.len(), 6, "Replay and Replay (dry run) per group");
    for a in actions {
        assert_eq!(
            a[0],
            "arn:aws:lambda:eu-west-1:123456789012:function:tern-console"
        );
        assert_eq!(a[2], a[3], "textContent and innerHTML read the same params");
    }
    let replay_crm = actions
        .iter()
        .find(|a| a[2]["endpoint_id"] == "ep_crm" && a[2]["dry_run"] == false)
        .expect("the ep_crm Replay button");
    assert_eq!(
        replay_crm[2],
        serde_json::json!({"widget": "dead_letters", "action": "replay", "endpoint_id": "ep_crm", "reason": "exhausted", "dry_run": false})
    );
    assert!(
        replay_crm[1]
            .as_str()
            .unwrap()
            .starts_with("Replay the 1 dead letters of ep_crm (exhausted)")
    );
}

/// Issue 17: the console answers the on-call questions from real data. A receiver that
/// answers 503 with a body that tries to inject HTML opens its endpoint's circuit; the
/// Endpoints widget shows it (it has no dead letters) with since when it fails, when the
/// circuit opened, what the receiver answered (as text) and its waiting deliveries; the
/// Waiting widget lists each with its attempt number and due time; the Event lookup of a
/// delivery to a disabled endpoint ends with its `endpoint_disabled` dead letter, not a
/// retry due later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_console_shows_health_what_waits_and_every_dead_letter() {
    let options = LocalOptions {
        time_scale: 0.01,
        lookup: Some(no_dns()),
        console_port: Some(0),
        ..LocalOptions::default()
    };
    let (local, _events) = deployment("console_oncall", options).await;
    let base = tern_local::console::url(local.console.expect("the console started"));
    let receiver = Receiver::start().await.expect("receiver");
    let body = "<img src=x onerror=alert(1)> down for maintenance";
    receiver.set(
        "/down",
        tern_local::receiver::Behavior::Always(tern_local::receiver::Reply::status(503).body(body)),
    );
    let tenant = "tnt_oncall";
    let down = add_endpoint_with(
        &local,
        EndpointId::new("ep_down").unwrap(),
        tenant,
        &receiver.url("/down"),
        &["order.paid"],
        None,
        None,
    )
    .await;
    let off = add_endpoint_with(
        &local,
        EndpointId::new("ep_off").unwrap(),
        tenant,
        &receiver.url("/off"),
        &["invoice.sent"],
        None,
        None,
    )
    .await;
    local
        .sender
        .endpoints
        .disable(&off.tenant_id, &off.id, "disabled by an operator")
        .await
        .expect("disable");
    for n in 0..8 {
        publish(&local, "order.paid", tenant, &format!(r#"{{"order":{n}}}"#)).await;
    }
    let to_off = publish(&local, "invoice.sent", tenant, r#"{"invoice":1}"#).await;

    // Wait until the circuit is open and deliveries wait (retries, and those held back).
    let list = tern_aws::DynamoLedger::new(local.dynamodb(), &local.resources.attempts_table, 30);
    let health = tern_aws::DynamoHealthStore::new(local.dynamodb(), &local.resources.health_table);
    let scope = tern_core::waiting::WaitingScope::Endpoint(down.tenant_id.clone(), down.id.clone());
    let ready = eventually(Duration::from_secs(60), async || {
        let open = tern_core::health::HealthStore::get(&health, &down.tenant_id, &down.id)
            .await
            .ok()
            .flatten()
            .is_some_and(|h| h.opened_at.is_some());
        let waiting = tern_core::waiting::WaitingList::waiting(&list, &scope, 100)
            .await
            .map(|r| r.entries.len())
            .unwrap_or(0);
        open && waiting >= 4
    })
    .await;
    assert!(ready, "the circuit opened and deliveries wait");
    assert!(
        history_reaches(&local, tenant, &to_off, 1, Duration::from_secs(30)).await,
        "the disabled endpoint's delivery was dead-lettered with a row"
    );

    let report = browse(
        &base,
        serde_json::json!([
            {"goto": "/widgets/endpoints"},
            {"capture": "endpoints"},
            {"goto": "/widgets/waiting"},
            {"capture": "waiting"},
            {"goto": format!("/widgets/event_lookup?tenant_id={tenant}&event_id={}", to_off.as_str())},
            {"capture": "lookup"},
            {"goto": "/widgets/audit?since=1h"},
            {"capture": "audit"},
            {"screenshot": "audit.png"},
            {"goto": "/widgets/audit?since=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"},
            {"capture": "audit-bad-window"},
            {"goto": "/widgets/audit?since=3d"},
            {"capture": "audit-too-long"},
        ]),
    )
    .await;
    assert!(
        report["dialogs"].as_array().unwrap().is_empty(),
        "no script ran: {}",
        report["dialogs"]
    );

    // Endpoints: the open circuit is listed although it has no dead letter.
    let endpoints = html(&report, "endpoints");
    assert!(
        endpoints.contains("data-endpoint=\"ep_down\" data-state=\"open\""),
        "{endpoints}"
    );
    let row = endpoints
        .split("<tr class=\"endpoint\"")
        .find(|r| r.contains("data-endpoint=\"ep_down\""))
        .unwrap();
    assert!(row.contains("data-dead-letters=\"0\""), "{row}");
    let waiting_count: u64 = row
        .split("data-waiting=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(waiting_count >= 4, "{row}");
    for cell in ["failing-since", "next-due", "next-probe"] {
        assert!(
            row.contains(&format!("<td class=\"{cell}\">20")),
            "{cell} has a time: {row}"
        );
    }
    assert_eq!(capture(&report, "endpoints")["images"], 0);
    assert!(
        capture(&report, "endpoints")["text"]
            .as_str()
            .unwrap()
            .contains(&format!("status 503: \"{body}\"")),
        "what the receiver answered, as text"
    );
    assert!(endpoints.contains("data-endpoint=\"ep_off\" data-state=\"disabled\""));
    assert!(!endpoints.contains(down.secrets[0].secret.expose()));

    // Waiting: each delivery with its attempt and due time, and the total.
    let waiting = html(&report, "waiting");
    let listed: Vec<&str> = waiting
        .split("<tr class=\"waiting-delivery\" data-endpoint=\"ep_down\"")
        .skip(1)
        .collect();
    assert!(listed.len() >= 4, "{waiting}");
    for d in &listed {
        assert!(d.contains("data-attempt=\""), "{d}");
        assert!(d.contains("<td>20"), "a due time: {d}");
    }
    assert!(
        waiting.contains("data-endpoint=\"ep_down\" data-waiting=\"")
            && waiting.contains("data-state=\"open\""),
        "{waiting}"
    );
    assert!(
        capture(&report, "waiting")["text"]
            .as_str()
            .unwrap()
            .contains("open circuit"),
        "what holds them"
    );

    // Event lookup: the disabled endpoint's delivery ends in the DLQ, said so last.
    let lookup = html(&report, "lookup");
    let last = lookup.rsplit("<tr ").next().unwrap();
    assert!(
        last.starts_with("class=\"dead-letter\" data-reason=\"endpoint_disabled\""),
        "{lookup}"
    );
    assert!(
        lookup.contains("data-outcome=\"dead_letter:endpoint_disabled\""),
        "{lookup}"
    );
    // Is anything lost? Every pair of the hour is accounted for: the disabled endpoint's
    // in the DLQ with its reason, the open circuit's waiting or in flight.
    let audit = html(&report, "audit");
    assert!(
        audit.contains("id=\"audit-verdict\" data-unaccounted=\"0\" data-pairs=\"9\""),
        "{audit}"
    );
    assert!(
        audit.contains("data-status=\"dead_lettered\" data-count=\"1\""),
        "{audit}"
    );
    let off_row = audit
        .split("<tr class=\"audit-pair\"")
        .skip(1)
        .find(|r| r.contains("data-endpoint=\"ep_off\""))
        .unwrap_or_else(|| panic!("the disabled endpoint's pair is listed: {audit}"));
    assert!(
        off_row.contains("data-status=\"dead_lettered\""),
        "{off_row}"
    );
    assert!(off_row.contains("endpoint_disabled"), "{off_row}");
    let down_rows = audit
        .split("<tr class=\"audit-pair\"")
        .skip(1)
        .filter(|r| r.contains("data-endpoint=\"ep_down\""))
        .count();
    assert_eq!(down_rows, 8, "the open circuit's pairs are listed: {audit}");
    assert!(
        capture(&report, "audit")["text"]
            .as_str()
            .unwrap()
            .contains("Nothing is lost"),
        "the verdict in words"
    );
    // A window that is not a time is said so, as text (no image, no script).
    let bad = html(&report, "audit-bad-window");
    assert!(bad.contains("id=\"audit-failed\""), "{bad}");
    assert_eq!(capture(&report, "audit-bad-window")["images"], 0);
    let too_long = capture(&report, "audit-too-long")["text"].as_str().unwrap();
    assert!(too_long.contains("at most the last 24 hours"), "{too_long}");
}

// ------------------------------------------------------------ the trace of one event (issue 30)

/// This test process's span file, local mode's store: Tern's spans go to it through the
/// same exporter `tern local` installs when no OTLP endpoint is set.
fn span_file() -> &'static PathBuf {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("tern-console-trace-{}.jsonl", std::process::id()));
        assert!(
            tern_handlers::telemetry::install(tern_handlers::telemetry::span_log_provider(
                "tern-local",
                &path
            )),
            "tracing is installed once per test process"
        );
        path
    })
}

/// The spans of `event`'s trace in the span file, after a flush.
async fn trace_spans(event: &EventId) -> Vec<tern_handlers::span_log::LoggedSpan> {
    tern_handlers::telemetry::flush().await;
    let spans = tern_handlers::span_log::read(span_file()).unwrap_or_default();
    tern_handlers::span_log::trace_of(&spans, event.as_str())
}

fn count(spans: &[tern_handlers::span_log::LoggedSpan], name: &str) -> usize {
    spans.iter().filter(|s| s.name == name).count()
}

/// A receiver's span, sent to local mode's OTLP collector as an OpenTelemetry SDK sends
/// it (OTLP/HTTP protobuf), with HTML in its name, service and attribute.
async fn export_receiver_span(
    collector: &tern_local::collector::Collector,
    parent: &tern_handlers::span_log::LoggedSpan,
) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message as _;
    let text = |key: &str, value: &str| KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    };
    let span = Span {
        trace_id: hex::decode(&parent.trace_id).expect("trace id"),
        span_id: hex::decode("5e1f5e1f5e1f5e1f").expect("span id"),
        parent_span_id: hex::decode(&parent.span_id).expect("parent id"),
        name: XSS.to_owned(),
        kind: 2,
        // Inside the attempt, as a receiver's work is.
        start_time_unix_nano: u64::try_from(parent.start_unix_nano).expect("time") + 1_000,
        end_time_unix_nano: u64::try_from(parent.end_unix_nano).expect("time"),
        attributes: vec![text("http.response.status_code", XSS)],
        ..Span::default()
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![text("service.name", XSS)],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![span],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    };
    let answer = reqwest::Client::new()
        .post(collector.traces_url())
        .header("content-type", "application/x-protobuf")
        .body(request.encode_to_vec())
        .send()
        .await
        .expect("the collector answers");
    assert_eq!(answer.status(), 200, "the collector took the export");
}

/// The console's trace page (issue 30): one event's trace as a waterfall, from the span
/// file `tern trace` reads. The event goes to an endpoint that fails twice, then takes it,
/// and to one that fails until its budget ends (dead-lettered), is fixed and replayed from
/// the console; a receiver's span with HTML in every text arrives through local mode's
/// OTLP collector. Every attempt, wait, the dead letter, the replay and the receiver's
/// span are rows on one time axis, in time order; the HTML stays text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_console_shows_the_trace_of_one_event_as_a_waterfall() {
    let file = span_file().clone();
    let collector = tern_local::collector::Collector::start(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        file.clone(),
    )
    .await
    .expect("local mode's OTLP collector");
    let options = LocalOptions {
        time_scale: 0.001,
        lookup: Some(no_dns()),
        console_port: Some(0),
        span_file: file,
        ..LocalOptions::default()
    };
    let (local, _events) = deployment("console_trace", options).await;
    let base = tern_local::console::url(local.console.expect("the console started"));
    let receiver = Receiver::start().await.expect("receiver");
    receiver.set(
        "/orders",
        Behavior::FailFirst {
            count: 2,
            status: 500,
        },
    );
    receiver.set("/ledger", Behavior::Always(Reply::status(503)));
    let tenant = "tnt_trace_page";
    let orders = add_endpoint_with(
        &local,
        EndpointId::new("ep_orders").unwrap(),
        tenant,
        &receiver.url("/orders"),
        &["*"],
        Some(3),
        Some(tern_core::RetrySchedule::parse("1,1").expect("schedule")),
    )
    .await;
    add_endpoint_with(
        &local,
        EndpointId::new("ep_ledger").unwrap(),
        tenant,
        &receiver.url("/ledger"),
        &["*"],
        Some(2),
        Some(tern_core::RetrySchedule::parse("1").expect("schedule")),
    )
    .await;
    let event = publish(
        &local,
        "order.paid",
        tenant,
        r#"{"order_id":"o_1","amount":4200}"#,
    )
    .await;
    assert_eq!(
        receiver
            .wait_for("/orders", 3, Duration::from_secs(60))
            .await
            .len(),
        3
    );
    assert_eq!(
        receiver
            .wait_for("/ledger", 2, Duration::from_secs(60))
            .await
            .len(),
        2
    );
    let dead = eventually(Duration::from_secs(60), async || {
        count(&trace_spans(&event).await, "dead-letter") == 1
    })
    .await;
    assert!(dead, "the ledger endpoint's delivery is dead-lettered");

    // The receiver of the successful attempt traces: its span arrives through the collector.
    let spans = trace_spans(&event).await;
    let delivered = spans
        .iter()
        .find(|s| {
            s.name == "POST"
                && s.attr("tern.endpoint.id") == Some(orders.id.as_str())
                && s.attr("tern.outcome") == Some("delivered")
        })
        .expect("the successful attempt's span");
    export_receiver_span(&collector, delivered).await;

    // The ledger is fixed; the operator replays its dead letter from the console.
    receiver.set("/ledger", Behavior::Always(Reply::status(200)));
    let report = browse(
        &base,
        serde_json::json!([
            {"goto": "/widgets/dead_letters"},
            {"click": "button[data-action=replay][data-endpoint=ep_ledger][data-dry-run=false]"},
            {"capture": "replayed"},
        ]),
    )
    .await;
    assert!(
        html(&report, "replayed").contains("data-replayed=\"1\""),
        "{}",
        html(&report, "replayed")
    );
    assert_eq!(
        receiver
            .wait_for("/ledger", 3, Duration::from_secs(60))
            .await
            .len(),
        3
    );
    // 1 fan-out, 3 + 2 + 1 attempts, 2 + 1 waits, 1 dead letter, 1 replay, 1 receiver span.
    let expected = [
        ("fan-out", 1),
        ("POST", 6),
        ("retry wait", 3),
        ("dead-letter", 1),
        ("replay", 1),
        (XSS, 1),
    ];
    let complete = eventually(Duration::from_secs(60), async || {
        let spans = trace_spans(&event).await;
        expected.iter().all(|(name, n)| count(&spans, name) == *n)
    })
    .await;
    let spans = trace_spans(&event).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(complete, "spans of the event: {names:?}");

    // The event lookup links to the trace; the trace page draws it.
    let report = browse(
        &base,
        serde_json::json!([
            {"goto": format!("/widgets/event_lookup?tenant_id={tenant}&event_id={}", event.as_str())},
            {"click": "#trace-link"},
            {"capture": "trace"},
            {"screenshot": "trace.png"},
            {"eval": "Array.from(document.querySelectorAll('#waterfall tr.span')).map(r => ({name: r.dataset.name, start: parseFloat(r.dataset.startMs), depth: parseInt(r.dataset.depth), error: r.dataset.error === 'true', left: parseFloat(r.querySelector('.bar').style.left), width: parseFloat(r.querySelector('.bar').style.width), what: r.querySelector('td.what').innerText}))", "as": "rows"},
            {"eval": "document.querySelector('#waterfall').dataset.totalMs", "as": "total_ms"},
        ]),
    )
    .await;
    let page = html(&report, "trace");
    assert!(
        capture(&report, "trace")["url"]
            .as_str()
            .is_some_and(|u| u.ends_with(&format!("/trace?event_id={}", event.as_str()))),
        "{}",
        capture(&report, "trace")["url"]
    );
    assert!(
        page.contains(&format!("data-spans=\"{}\"", spans.len())),
        "{page}"
    );
    let rows = report["captures"]["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), spans.len());
    for (name, n) in expected {
        assert_eq!(
            rows.iter().filter(|r| r["name"] == name).count(),
            n,
            "{name} rows in {rows:?}"
        );
    }
    // One time axis: rows in time order, bars placed by start, inside the axis.
    let starts: Vec<f64> = rows.iter().map(|r| r["start"].as_f64().unwrap()).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
    let total_ms = report["captures"]["total_ms"]
        .as_str()
        .and_then(|t| t.parse::<f64>().ok())
        .expect("the axis' length");
    assert!(
        total_ms >= starts[starts.len() - 1],
        "{total_ms} {starts:?}"
    );
    for r in rows {
        let (l, w) = (r["left"].as_f64().unwrap(), r["width"].as_f64().unwrap());
        let at = r["start"].as_f64().unwrap() / total_ms * 100.0;
        // Placed at its start; a bar at the axis' end moves left by at most its minimum width.
        assert!(
            l <= at + 0.01 && l >= at - 0.41 && w > 0.0 && l >= 0.0 && l + w <= 100.0 + 1e-6,
            "{r} on an axis of {total_ms} ms"
        );
    }
    assert_eq!(rows[0]["name"], "fan-out", "the fan-out starts the trace");
    let position = |name: &str| rows.iter().position(|r| r["name"] == name).unwrap();
    assert!(
        position("dead-letter") < position("replay"),
        "the replay after the dead letter: {rows:?}"
    );
    // Failed attempts are drawn as errors: two 500s of the orders endpoint, two 503s.
    let failed = rows
        .iter()
        .filter(|r| r["name"] == "POST" && r["error"] == true)
        .count();
    assert_eq!(failed, 4, "{rows:?}");
    // The receiver's span sits under the successful attempt (the fan-out's grandchild).
    let receiver_row = &rows[position(XSS)];
    assert_eq!(receiver_row["depth"], 2, "{receiver_row}");
    // Its HTML stays text: no image element, no dialog, the text shown as typed.
    assert_eq!(capture(&report, "trace")["images"], 0);
    assert!(
        report["dialogs"].as_array().unwrap().is_empty(),
        "{}",
        report["dialogs"]
    );
    let text = capture(&report, "trace")["text"].as_str().unwrap();
    assert!(text.contains(XSS), "{text}");
    assert!(
        receiver_row["what"]
            .as_str()
            .unwrap()
            .contains(&format!("service {XSS}"))
    );
}
