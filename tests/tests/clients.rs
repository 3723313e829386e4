//! Issue 18 item 6: the clients of `clients/`, end to end against local mode. A Node
//! program (`clients/typescript/examples/e2e.ts`, @tern/client) and a Python program
//! (`clients/python/examples/e2e.py`, tern-client) each run a receiver on 127.0.0.1,
//! create an endpoint through the SigV4-signed API, write an order row and the event in
//! one `TransactWriteItems` built by their outbox builder, verify the delivery with the
//! independent Standard Webhooks library of their language (npm / PyPI `standardwebhooks`),
//! read it back through the API, and check a problem answer, tenant isolation and that a
//! canceled transaction publishes nothing.
//!
//! Then this test checks from the outside, with its own clients: the order row is in the
//! program's table, the event is delivered, and the receiver the program ran was the only
//! place it went. Node (`clients/typescript/node_modules`, `npm ci`) and the project venv
//! with tern-client (`make venv`) are required: missing, the test fails saying what to run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;
use tern_local::LocalOptions;
use tern_tests::api::ApiClient;
use tern_tests::*;

/// The workspace root (this crate is `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Longest a client program may run: 120 s (it waits at most 30 s for any one thing).
const PROGRAM_DEADLINE: Duration = Duration::from_secs(120);

/// The Node command for the TypeScript program; panics with what to run when the package
/// is not installed.
fn node_program() -> Command {
    let pkg = root().join("clients/typescript");
    let tsx = pkg.join("node_modules/tsx");
    assert!(
        tsx.is_dir(),
        "the TypeScript client's packages are missing ({}): run `make clients-deps` \
         (npm ci in clients/typescript)",
        tsx.display()
    );
    let mut command = Command::new("node");
    command
        .current_dir(&pkg)
        .args(["--import", "tsx", "examples/e2e.ts"]);
    command
}

/// The venv's Python for the Python program; panics with what to run when the venv or
/// tern-client is missing.
fn python_program() -> Command {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the project venv is missing ({}): run `make venv`",
        python.display()
    );
    let pkg = root().join("clients/python");
    let mut command = Command::new(python);
    command
        .current_dir(&pkg)
        .arg("examples/e2e.py")
        // This checkout's tern-client, whichever checkout the venv installed.
        .env("PYTHONPATH", &pkg);
    command
}

/// Runs one client program against `local`'s API for `tenant`; returns the JSON line it
/// printed. Panics with its output when it fails.
async fn run(
    mut command: Command,
    name: &str,
    api: &ApiClient,
    local: &tern_local::LocalTern,
    tenant: &str,
) -> Value {
    command
        .env("TERN_API_URL", &api.base)
        .env("AWS_ACCESS_KEY_ID", tern_local::api::LOCAL_ACCESS_KEY_ID)
        .env(
            "AWS_SECRET_ACCESS_KEY",
            tern_local::api::LOCAL_SECRET_ACCESS_KEY,
        )
        .env("AWS_REGION", tern_local::api::LOCAL_REGION)
        .env("AWS_ENDPOINT_URL", moto_url())
        .env("TERN_OUTBOX_TABLE", &local.resources.outbox_table)
        .env("TERN_E2E_TENANT", tenant)
        .env("TERN_E2E_OTHER_TENANT", "tnt_someone_else")
        .env(
            "TERN_E2E_ORDERS_TABLE",
            format!(
                "{}orders-{name}",
                local.resources.outbox_table.trim_end_matches("outbox")
            ),
        )
        // Nothing may leave 127.0.0.1: no proxy, no shared config or credentials files.
        .env("NO_PROXY", "*")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY");
    let child = tokio::task::spawn_blocking(move || command.output());
    let output = tokio::time::timeout(PROGRAM_DEADLINE, child)
        .await
        .unwrap_or_else(|_| {
            panic!("the {name} client program ran longer than {PROGRAM_DEADLINE:?}")
        })
        .expect("join")
        .unwrap_or_else(|e| panic!("the {name} client program could not start: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the {name} client program failed ({:?}):\n{stdout}\n{stderr}",
        output.status.code()
    );
    let line = stdout.lines().last().unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!("the {name} program printed no summary ({e}):\n{stdout}\n{stderr}")
    })
}

/// What this test checks itself of one program's run: its order row, and its event
/// delivered to its endpoint, seen through the API with this test's own signer.
async fn check_independently(
    summary: &Value,
    api: &ApiClient,
    local: &tern_local::LocalTern,
    tenant: &str,
) {
    let text = |k: &str| {
        summary[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k} in {summary}"))
            .to_owned()
    };
    let (event_id, endpoint_id) = (text("event_id"), text("endpoint_id"));
    let row = local
        .dynamodb()
        .get_item()
        .table_name(text("orders_table"))
        .key("order_id", AttributeValue::S(text("order_id")))
        .send()
        .await
        .expect("read the order row");
    let item = row.item().expect("the order row exists");
    assert_eq!(item["event_id"].as_s().ok(), Some(&event_id), "{summary}");
    let event = api
        .get(&format!("/v1/tenants/{tenant}/events/{event_id}"))
        .await;
    assert_eq!(event.status, 200, "{}", event.text);
    let deliveries = event.json["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 1, "{}", event.text);
    assert_eq!(deliveries[0]["endpoint_id"], endpoint_id.as_str());
    assert_eq!(deliveries[0]["state"], "delivered", "{}", event.text);
    assert_eq!(summary["verified"], "standardwebhooks");
    assert!(summary["endpoint_log"].as_u64() >= Some(1), "{summary}");
    assert_eq!(summary["problem_field"], "url");
    // The receiver settings the program set (clients/README.md) and the key it rotated in:
    // the endpoint, read with this test's signer, holds that public key, and is back to
    // its defaults.
    assert_eq!(summary["receiver_settings"], "carried", "{summary}");
    let endpoint = api
        .get(&format!("/v1/tenants/{tenant}/endpoints/{endpoint_id}"))
        .await;
    assert_eq!(
        endpoint.json["signing_keys"][0]["public_key"], summary["v1a_public_key"],
        "{}",
        endpoint.text
    );
    assert_eq!(endpoint.json["auth"], serde_json::json!({"type": "none"}));
    assert_eq!(summary["other_tenant_status"], 404);
    assert_eq!(summary["canceled_event_status"], 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_and_python_clients_publish_through_the_outbox_and_read_the_api() {
    // Both programs first, so a missing toolchain is reported before anything starts.
    let (node, python) = (node_program(), python_program());
    let (mut local, _rx) = deployment(
        "clients",
        LocalOptions {
            time_scale: 0.001,
            lookup: Some(no_dns()),
            console_port: None,
            ..LocalOptions::default()
        },
    )
    .await;
    local
        .start_api(0, tern_local::api::local_credentials())
        .expect("the local API starts");
    let api = ApiClient::of(&local);

    let ts = run(node, "typescript", &api, &local, "tnt_node_app").await;
    eprintln!("typescript: {ts}");
    assert_eq!(ts["client"], "typescript");
    check_independently(&ts, &api, &local, "tnt_node_app").await;

    let py = run(python, "python", &api, &local, "tnt_python_app").await;
    eprintln!("python: {py}");
    assert_eq!(py["client"], "python");
    check_independently(&py, &api, &local, "tnt_python_app").await;

    // Each tenant sees only its own endpoint.
    for (tenant, summary) in [("tnt_node_app", &ts), ("tnt_python_app", &py)] {
        let list = api.get(&format!("/v1/tenants/{tenant}/endpoints")).await;
        assert_eq!(list.status, 200, "{}", list.text);
        let ids: Vec<&str> = list.json["items"]
            .as_array()
            .expect("endpoints")
            .iter()
            .filter_map(|e| e["id"].as_str())
            .collect();
        assert_eq!(
            ids,
            [summary["endpoint_id"].as_str().expect("id")],
            "{tenant}"
        );
    }
}
