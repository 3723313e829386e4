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
