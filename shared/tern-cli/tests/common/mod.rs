//! What the CLI tests share: a moto server with the resources, and the real `tern` binary
//! run with exactly the environment given. Everything stays on 127.0.0.1.

#![allow(dead_code)]

use std::process::Output;

use serde_json::Value;
use tern_local::MotoServer;
use tern_local::resources::Resources;

/// Runs `tern` with `args` and exactly the environment of `env` (no TERN_* leaks in).
pub fn tern(env: &[(String, String)], args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("tern runs")
}

/// Bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `tern`, expects exit code `code`, returns stdout.
pub fn expect(env: &[(String, String)], args: &[&str], code: i32) -> String {
    let out = tern(env, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs `tern ... --json`, expects exit 0, returns the JSON.
pub fn json(env: &[(String, String)], args: &[&str]) -> Value {
    let out = expect(env, args, 0);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

/// A moto server with Tern's resources.
pub struct Setup {
    /// The server (stop it at the end).
    pub moto: MotoServer,
    /// SDK configuration for it.
    pub aws: aws_config::SdkConfig,
    /// What was created.
    pub resources: Resources,
    /// AWS access and the TERN_* names, as `.tern/local.env` has them.
    pub env: Vec<(String, String)>,
}

/// Starts moto and creates the resources under `prefix`.
pub async fn setup(prefix: &str) -> Setup {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let aws = moto.sdk_config().await;
    let resources = tern_local::resources::provision(&aws, prefix, None)
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
    Setup {
        moto,
        aws,
        resources,
        env,
    }
}
