//! The `tern` binary itself, against moto: exit codes (0 done, 1 the command failed, 2
//! usage), `endpoints show --json`, and the enable / disable / delete commands end to end.
//! Everything stays on 127.0.0.1.

use std::process::Output;

use tern_core::ports::EndpointStore;
use tern_core::{Endpoint, EndpointId, Secret, TenantId};
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

    let store = tern_aws::DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        resources.endpoints_table.clone(),
    );
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
