//! `tern endpoints add/update/show/rotate-signing-key` with custom headers, receiver
//! authentication and `v1a` signatures, through the real binary on moto: secret values
//! come from an environment variable, a file or standard input, are stored (the sender
//! reads them from the registry) and never printed on stdout or stderr.

mod common;

use std::io::Write as _;
use std::process::Stdio;

use common::{expect, json, setup, tern, text};
use tern_core::custom_headers::FieldValue;
use tern_core::ports::EndpointStore as _;
use tern_core::receiver_auth::ReceiverAuth;
use tern_core::{EndpointId, Signatures, TenantId};

/// Runs `tern` with `stdin` on its standard input; returns (exit code, stdout, stderr).
fn tern_with_stdin(env: &[(String, String)], args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tern runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("tern ends");
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reach_flags_store_secrets_from_env_file_and_stdin_and_never_print_them() {
    let s = setup("treach-").await;
    let (api_key, bearer, password, client_secret) = (
        "cli-api-key-Q1-secret",
        "cli-bearer-Q2-secret",
        "cli-password-Q3-secret",
        "cli-client-Q4-secret",
    );
    let mut env = s.env.clone();
    env.push(("RECEIVER_API_KEY".into(), api_key.into()));
    let token_file = std::env::temp_dir().join(format!("tern-cli-bearer-{}", std::process::id()));
    std::fs::write(&token_file, format!("{bearer}\n")).expect("token file");
    let mut printed = String::new();

    // add: a plain and a secret header (from the environment), bearer (from a file), both
    // signature schemes.
    let token_source = format!("file:{}", token_file.display());
    let added = json(
        &env,
        &[
            "endpoints",
            "add",
            "--tenant",
            "tnt_cli",
            "--url",
            "http://127.0.0.1:9/hook",
            "--header",
            "X-Tenant=acme",
            "--secret-header",
            "x-api-key=env:RECEIVER_API_KEY",
            "--auth",
            "bearer",
            "--bearer-token",
            &token_source,
            "--signatures",
            "both",
            "--json",
        ],
    );
    std::fs::remove_file(&token_file).expect("remove token file");
    printed.push_str(&added.to_string());
    let id = added["id"].as_str().expect("id").to_owned();
    let public_key = added["public_key"]
        .as_str()
        .expect("a v1a public key")
        .to_owned();
    assert!(public_key.starts_with("whpk_"), "{added}");
    assert_eq!(added["signatures"], "both");

    // What the sender will read.
    // Sealed with the deployment's key, as the sender reads it.
    let store = tern_aws::DynamoEndpointStore::new(
        aws_sdk_dynamodb::Client::new(&s.aws),
        s.resources.endpoints_table.clone(),
    )
    .with_secrets(tern_aws::kms::secrets_at_rest(
        &s.aws,
        Some(&s.resources.secrets_key_arn),
        std::time::Duration::ZERO,
    ));
    let tenant = TenantId::new("tnt_cli").expect("tenant");
    let endpoint_id = EndpointId::new(&id).expect("id");
    let stored = store
        .get(&tenant, &endpoint_id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(stored.headers.len(), 2);
    assert_eq!(stored.headers[0].value, FieldValue::Plain("acme".into()));
    assert_eq!(stored.headers[1].name, "x-api-key");
    assert_eq!(stored.headers[1].value.expose(), api_key);
    assert!(stored.headers[1].value.is_secret());
    assert_eq!(
        stored.auth,
        ReceiverAuth::Bearer {
            token: tern_core::SecretValue::new(bearer)
        },
        "one trailing newline of the file dropped"
    );
    assert_eq!(stored.signatures, Signatures::Both);
    assert_eq!(
        stored.signing_keys[0].key.public_key().to_string(),
        public_key
    );

    // show: names, the public key, "set" for secrets.
    let shown = expect(&env, &["endpoints", "show", &id], 0);
    printed.push_str(&shown);
    assert!(shown.contains("x-tenant: acme"), "{shown}");
    assert!(shown.contains("x-api-key: (secret, set)"), "{shown}");
    assert!(
        shown.contains("auth:                 bearer token=(secret, set)"),
        "{shown}"
    );
    assert!(shown.contains("signatures:           both"), "{shown}");
    assert!(shown.contains(&format!("{public_key}  current")), "{shown}");
    let shown_json = json(&env, &["endpoints", "show", &id, "--json"]);
    printed.push_str(&shown_json.to_string());
    assert_eq!(shown_json["headers"][1]["value"], serde_json::Value::Null);
    assert_eq!(shown_json["headers"][1]["secret"], true);
    assert_eq!(shown_json["auth"]["type"], "bearer");
    assert_eq!(
        shown_json["signing_keys"][0]["public_key"],
        public_key.as_str()
    );

    // update: basic with the password on standard input; a header removed.
    let (code, out, err) = tern_with_stdin(
        &env,
        &[
            "endpoints",
            "update",
            &id,
            "--auth",
            "basic",
            "--basic-username",
            "tern",
            "--basic-password",
            "stdin",
            "--remove-header",
            "X-Tenant",
        ],
        &format!("{password}\n"),
    );
    printed.push_str(&out);
    printed.push_str(&err);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("basic username=tern password=(secret, set)"),
        "{out}"
    );
    assert!(!out.contains("x-tenant"), "{out}");
    let stored = store
        .get(&tenant, &endpoint_id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(stored.headers.len(), 1);
    assert!(matches!(
        &stored.auth,
        ReceiverAuth::Basic { username, password: p } if username == "tern" && p.expose() == password
    ));

    // OAuth2 with the client secret from the environment; a token URL to a private
    // address is refused and nothing changes.
    env.push(("CLIENT_SECRET".into(), client_secret.into()));
    let out = tern(
        &env,
        &[
            "endpoints",
            "update",
            &id,
            "--auth",
            "oauth2",
            "--oauth-token-url",
            "http://10.0.0.5/token",
            "--oauth-client-id",
            "tern",
            "--oauth-client-secret",
            "env:CLIENT_SECRET",
        ],
    );
    printed.push_str(&text(&out.stdout));
    printed.push_str(&text(&out.stderr));
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("OAuth2 token URL"),
        "{}",
        text(&out.stderr)
    );
    let unchanged = store
        .get(&tenant, &endpoint_id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(unchanged.auth, stored.auth);
    let updated = expect(
        &env,
        &[
            "endpoints",
            "update",
            &id,
            "--auth",
            "oauth2",
            "--oauth-token-url",
            "http://127.0.0.1:9/token",
            "--oauth-client-id",
            "tern",
            "--oauth-client-secret",
            "env:CLIENT_SECRET",
            "--oauth-scope",
            "webhooks:write",
            "--oauth-client-auth",
            "client_secret_post",
        ],
        0,
    );
    printed.push_str(&updated);
    assert!(
        updated.contains(
            "oauth2_client_credentials token_url=http://127.0.0.1:9/token client_id=tern scope=webhooks:write client_auth=client_secret_post client_secret=(secret, set)"
        ),
        "{updated}"
    );

    // Forbidden header names and secrets typed as plain text are refused with a reason.
    let out = tern(
        &env,
        &["endpoints", "update", &id, "--header", "Host=evil.example"],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("cannot be set"),
        "{}",
        text(&out.stderr)
    );
    let out = tern(
        &env,
        &["endpoints", "update", &id, "--secret-header", "x-k=hunter2"],
    );
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(err.contains("SOURCE") && !err.contains("hunter2"), "{err}");

    // rotate-signing-key: a new public key; both sign during the overlap.
    let rotated = json(
        &env,
        &[
            "endpoints",
            "rotate-signing-key",
            &id,
            "--overlap-hours",
            "2",
            "--json",
        ],
    );
    let new_key = rotated["public_key"].as_str().expect("new key").to_owned();
    assert_ne!(new_key, public_key);
    let shown = expect(&env, &["endpoints", "show", &id], 0);
    printed.push_str(&shown);
    assert!(shown.contains(&format!("{new_key}  current")), "{shown}");
    assert!(
        shown.contains(&format!("{public_key}  previous")),
        "{shown}"
    );

    // Mutual TLS: a client certificate secret set, shown, refused outside the tenant's
    // own tern/mtls/<tenant id>/ (another tenant's included), then removed.
    let arn = format!(
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/{tenant}/acme-AbCdEf"
    );
    let arn = arn.as_str();
    let updated = expect(
        &env,
        &["endpoints", "update", &id, "--client-certificate-arn", arn],
        0,
    );
    assert!(
        updated.contains(&format!("client certificate:   {arn}")),
        "{updated}"
    );
    let stored = store
        .get(&tenant, &endpoint_id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(
        stored.client_certificate.map(|c| c.secret_arn).as_deref(),
        Some(arn)
    );
    assert_eq!(
        json(&env, &["endpoints", "show", &id, "--json"])["client_certificate_arn"],
        arn
    );
    for outside in [
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/mtls/someone_else/c",
    ] {
        let out = tern(
            &env,
            &[
                "endpoints",
                "update",
                &id,
                "--client-certificate-arn",
                outside,
            ],
        );
        assert_ne!(out.status.code(), Some(0), "{outside}");
        assert!(
            text(&out.stderr).contains(&format!("tern/mtls/{tenant}/")),
            "{}",
            text(&out.stderr)
        );
    }
    let updated = expect(
        &env,
        &["endpoints", "update", &id, "--no-client-certificate"],
        0,
    );
    assert!(updated.contains("client certificate:   none"), "{updated}");

    for secret in [api_key, bearer, password, client_secret] {
        assert!(
            !printed.contains(secret),
            "{secret} was printed:\n{printed}"
        );
    }
    assert!(
        !printed.contains("whsk_"),
        "a secret key was printed:\n{printed}"
    );
    s.moto.stop().await;
}
