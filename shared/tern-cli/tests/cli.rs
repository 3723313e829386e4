//! The `tern` binary itself, against moto: exit codes (0 done, 1 the command failed, 2
//! usage), `endpoints show --json`, and the enable / disable / delete commands end to end.
//! Everything stays on 127.0.0.1.

use std::process::Output;

use tern_core::ports::EndpointStore;
use tern_core::{Endpoint, EndpointId, PayloadFormat, Secret, TenantId};
use tern_local::MotoServer;

/// Runs `tern` with `args` and the environment of `env`.
fn tern(env: &[(String, String)], args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env_remove("RUST_LOG")
        .output()
        .expect("tern runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_commands_exit_codes_and_json() {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let aws = moto.sdk_config().await;
    let resources = tern_local::resources::provision(&aws, "tcli-", None)
        .await
        .expect("resources");
    let mut env: Vec<(String, String)> = vec![
        ("AWS_ENDPOINT_URL".into(), moto.url.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
        // As local mode sets them: the private-range check is what must refuse 10.0.0.5.
        ("TERN_HTTPS_ONLY".into(), "false".into()),
        ("TERN_ALLOW_DESTINATIONS".into(), "127.0.0.1/32".into()),
    ];
    env.extend(resources.env().into_iter().map(|(k, v)| (k.to_owned(), v)));

    // Sealed with the deployment's key, as the sender reads it.
    let store = tern_aws::DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        resources.endpoints_table.clone(),
    )
    .with_secrets(tern_aws::kms::secrets_at_rest(
        &aws,
        Some(&resources.secrets_key_arn),
        std::time::Duration::ZERO,
    ));
    let secret = Secret::generate();
    let ep = Endpoint::new(
        EndpointId::generate(),
        TenantId::new("tnt_cli").unwrap(),
        "http://127.0.0.1:9/hook",
        vec!["*".into()],
        secret.clone(),
        chrono::Utc::now(),
    );
    store.put(&ep).await.unwrap();
    let id = ep.id.as_str();

    // Usage errors: clap's exit code 2.
    for args in [
        &["endpoints", "show"][..],
        &["endpoints", "enable"],
        &["endpoints", "update", id, "--timeout-ms", "soon"],
        &["endpoints", "frobnicate", id],
    ] {
        let out = tern(&env, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }

    // An unknown id: a clear error naming it, exit code 1, for every endpoint command.
    for args in [
        &["endpoints", "show", "ep_nope"][..],
        &["endpoints", "show", "ep_nope", "--json"],
        &["endpoints", "enable", "ep_nope"],
        &["endpoints", "disable", "ep_nope"],
        &["endpoints", "delete", "ep_nope"],
        &["endpoints", "update", "ep_nope", "--description", "x"],
        &["endpoints", "rotate-secret", "ep_nope"],
        &["endpoints", "show", id, "--tenant", "tnt_other"],
    ] {
        let out = tern(&env, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("not found") && (err.contains("ep_nope") || err.contains(id)),
            "{args:?}: {err}"
        );
    }

    // disable (a 410's reason), a second disable without --reason keeps it, show --json.
    store
        .disable(&ep.tenant_id, &ep.id, "gone: receiver answered 410 Gone")
        .await
        .unwrap();
    let out = tern(&env, &["endpoints", "disable", id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tern(&env, &["endpoints", "show", id, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["id"], id);
    assert_eq!(v["tenant_id"], "tnt_cli");
    assert_eq!(v["enabled"], false);
    assert_eq!(v["disabled_reason"], "gone: receiver answered 410 Gone");
    assert_eq!(v["secrets"][0]["state"], "current");
    assert!(!text(&out.stdout).contains(secret.expose().trim_start_matches("whsec_")));

    // enable, then the last reason is kept.
    let out = tern(&env, &["endpoints", "enable", id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tern(&env, &["endpoints", "show", id, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["enabled"], true);
    assert!(v["disabled_reason"].is_null());
    assert_eq!(
        v["last_disabled_reason"],
        "gone: receiver answered 410 Gone"
    );

    // update refuses a private URL (the SSRF guard, as for add) with exit code 1.
    let out = tern(
        &env,
        &["endpoints", "update", id, "--url", "http://10.0.0.5/hook"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("10.0.0.5"),
        "{}",
        text(&out.stderr)
    );

    // delete; then it is gone (exit 1).
    let out = tern(&env, &["endpoints", "delete", id, "--tenant", "tnt_cli"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(store.get(&ep.tenant_id, &ep.id).await.unwrap(), None);
    assert_eq!(
        tern(&env, &["endpoints", "show", id]).status.code(),
        Some(1)
    );
    moto.stop().await;
}

/// `--payload-format` on `endpoints add` and `update`, read back by `show`, `list` and the
/// store itself: what the sender reads is what the operator set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_format_round_trips_through_add_update_show_and_list() {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let aws = moto.sdk_config().await;
    let resources = tern_local::resources::provision(&aws, "tfmt-", None)
        .await
        .expect("resources");
    let mut env: Vec<(String, String)> = vec![
        ("AWS_ENDPOINT_URL".into(), moto.url.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
        ("TERN_HTTPS_ONLY".into(), "false".into()),
        ("TERN_ALLOW_DESTINATIONS".into(), "127.0.0.1/32".into()),
    ];
    env.extend(resources.env().into_iter().map(|(k, v)| (k.to_owned(), v)));
    // Sealed with the deployment's key, as the sender reads it.
    let store = tern_aws::DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        resources.endpoints_table.clone(),
    )
    .with_secrets(tern_aws::kms::secrets_at_rest(
        &aws,
        Some(&resources.secrets_key_arn),
        std::time::Duration::ZERO,
    ));
    let tenant = TenantId::new("tnt_fmt").unwrap();
    let stored = async |id: &str| {
        store
            .get(&tenant, &EndpointId::new(id).unwrap())
            .await
            .unwrap()
            .expect("stored")
            .payload_format
    };
    let show = |id: &str| {
        let out = tern(&env, &["endpoints", "show", id, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        v["payload_format"].as_str().unwrap_or("(none)").to_owned()
    };
    let add = |extra: &[&str]| {
        let mut args = vec![
            "endpoints",
            "add",
            "--tenant",
            "tnt_fmt",
            "--url",
            "http://127.0.0.1:9/hook",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = tern(&env, &args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        v["id"].as_str().expect("an id").to_owned()
    };

    // add: raw unless asked; standard_webhooks when asked.
    let plain = add(&[]);
    assert_eq!(show(&plain), "raw");
    assert_eq!(stored(&plain).await, PayloadFormat::Raw);
    let wrapped = add(&["--payload-format", "standard_webhooks"]);
    assert_eq!(show(&wrapped), "standard_webhooks");
    assert_eq!(stored(&wrapped).await, PayloadFormat::StandardWebhooks);

    // list: one column says which.
    let out = tern(&env, &["endpoints", "list", "--tenant", "tnt_fmt"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(
        listed
            .lines()
            .next()
            .unwrap_or("")
            .contains("PAYLOAD FORMAT"),
        "{listed}"
    );
    for (id, format) in [(&plain, " raw "), (&wrapped, " standard_webhooks ")] {
        let line = listed.lines().find(|l| l.starts_with(id.as_str()));
        assert!(
            line.is_some_and(|l| l.contains(format)),
            "{id} {format:?}:\n{listed}"
        );
    }

    // update: only the format changes, both ways, the dash spelling too.
    let out = tern(
        &env,
        &["endpoints", "update", &wrapped, "--payload-format", "raw"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("payload format:       raw"));
    assert_eq!(stored(&wrapped).await, PayloadFormat::Raw);
    let out = tern(
        &env,
        &[
            "endpoints",
            "update",
            &plain,
            "--payload-format",
            "standard-webhooks",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(show(&plain), "standard_webhooks");
    assert_eq!(stored(&plain).await, PayloadFormat::StandardWebhooks);

    // An unknown format is a usage error naming the valid ones; nothing changes.
    for args in [
        &[
            "endpoints",
            "update",
            plain.as_str(),
            "--payload-format",
            "json",
        ][..],
        &[
            "endpoints",
            "add",
            "--tenant",
            "tnt_fmt",
            "--url",
            "http://127.0.0.1:9/x",
            "--payload-format",
            "json",
        ],
    ] {
        let out = tern(&env, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains("standard_webhooks"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(stored(&plain).await, PayloadFormat::StandardWebhooks);
    moto.stop().await;
}

/// `--max-per-second` on `endpoints add` and `update` (0 removes the limit), read back by
/// `show` and by the store the sender reads; a value out of range is refused and changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_round_trips_through_add_update_and_show() {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let aws = moto.sdk_config().await;
    let resources = tern_local::resources::provision(&aws, "trate-", None)
        .await
        .expect("resources");
    let mut env: Vec<(String, String)> = vec![
        ("AWS_ENDPOINT_URL".into(), moto.url.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
        ("TERN_HTTPS_ONLY".into(), "false".into()),
        ("TERN_ALLOW_DESTINATIONS".into(), "127.0.0.1/32".into()),
    ];
    env.extend(resources.env().into_iter().map(|(k, v)| (k.to_owned(), v)));
    // Sealed with the deployment's key, as the sender reads it.
    let store = tern_aws::DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        resources.endpoints_table.clone(),
    )
    .with_secrets(tern_aws::kms::secrets_at_rest(
        &aws,
        Some(&resources.secrets_key_arn),
        std::time::Duration::ZERO,
    ));
    let tenant = TenantId::new("tnt_rate").unwrap();
    let stored = async |id: &str| {
        store
            .get(&tenant, &EndpointId::new(id).unwrap())
            .await
            .unwrap()
            .expect("stored")
            .max_per_second
    };
    let show = |id: &str| {
        let out = tern(&env, &["endpoints", "show", id, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        v["max_per_second"].clone()
    };

    let out = tern(
        &env,
        &[
            "endpoints",
            "add",
            "--tenant",
            "tnt_rate",
            "--url",
            "http://127.0.0.1:9/hook",
            "--max-per-second",
            "10",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let id = v["id"].as_str().expect("an id").to_owned();
    assert_eq!(stored(&id).await, Some(10));
    assert_eq!(show(&id), 10);
    let out = tern(&env, &["endpoints", "show", &id]);
    assert!(
        text(&out.stdout).contains("rate limit:           10 per second"),
        "{}",
        text(&out.stdout)
    );

    let out = tern(&env, &["endpoints", "update", &id, "--max-per-second", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(stored(&id).await, Some(3));

    // Out of range: refused, nothing changes.
    let out = tern(
        &env,
        &["endpoints", "update", &id, "--max-per-second", "5000"],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("1..=1000"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(stored(&id).await, Some(3));

    // 0 removes it.
    let out = tern(&env, &["endpoints", "update", &id, "--max-per-second", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(stored(&id).await, None);
    assert_eq!(show(&id), serde_json::Value::Null);
    let out = tern(&env, &["endpoints", "show", &id]);
    assert!(
        text(&out.stdout).contains("rate limit:           none"),
        "{}",
        text(&out.stdout)
    );
    moto.stop().await;
}

/// `tern endpoints encrypt-secrets`: an endpoint stored in plain text (before the stack had
/// its key) is sealed, a second run finds nothing to do, and the secret no longer appears
/// in the table; `--new-epoch` rotates the keyring and re-seals it under the new epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypt_secrets_seals_plain_text_endpoints_once() {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let aws = moto.sdk_config().await;
    let resources = tern_local::resources::provision(&aws, "tenc-", None)
        .await
        .expect("resources");
    let mut env: Vec<(String, String)> = vec![
        ("AWS_ENDPOINT_URL".into(), moto.url.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
    ];
    env.extend(resources.env().into_iter().map(|(k, v)| (k.to_owned(), v)));
    // Written without a key, as a deployment before sealing did.
    let plain = tern_aws::DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        resources.endpoints_table.clone(),
    );
    let secret = Secret::generate();
    let ep = Endpoint::new(
        EndpointId::generate(),
        TenantId::new("tnt_enc").unwrap(),
        "http://127.0.0.1:9/hook",
        vec!["*".into()],
        secret.clone(),
        chrono::Utc::now(),
    );
    plain.put(&ep).await.expect("plain put");
    let scan = async || {
        let out = aws_sdk_dynamodb::Client::new(&aws)
            .scan()
            .table_name(&resources.endpoints_table)
            .send()
            .await
            .expect("scan");
        format!("{:?}", out.items.unwrap_or_default())
    };
    assert!(scan().await.contains(secret.expose()), "plain before");

    let out = tern(&env, &["endpoints", "encrypt-secrets", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (report["scanned"].as_u64(), report["sealed"].as_u64()),
        (Some(1), Some(1)),
        "{report}"
    );
    assert!(!scan().await.contains(secret.expose()), "sealed after");
    let out = tern(&env, &["endpoints", "encrypt-secrets"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("sealed the secrets of 0 under epoch 1, 1 held none to seal"),
        "{}",
        text(&out.stdout)
    );
    // The operator's rotation: a new keyring epoch, and everything re-sealed under it.
    let out = tern(&env, &["endpoints", "encrypt-secrets", "--new-epoch"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("new secrets epoch 2")
            && said.contains("sealed the secrets of 1 under epoch 2, 0 held none to seal"),
        "{said}"
    );
    assert!(scan().await.contains("tern2.2."), "under the new epoch");
    assert!(!scan().await.contains(secret.expose()), "still sealed");
    // What the sender reads is still the same endpoint.
    let sealed = tern_aws::DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        resources.endpoints_table.clone(),
    )
    .with_secrets(tern_aws::kms::secrets_at_rest(
        &aws,
        Some(&resources.secrets_key_arn),
        std::time::Duration::ZERO,
    ));
    assert_eq!(
        sealed.get(&ep.tenant_id, &ep.id).await.expect("get"),
        Some(ep)
    );
    moto.stop().await;
}
