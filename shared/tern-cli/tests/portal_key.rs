//! `tern portal-rotate-key` through the real binary against the key ring in moto's Secrets
//! Manager: a new key signs from then on, the previous one keeps verifying (so live portal
//! sessions survive), the oldest goes after `KEYS_KEPT`, no key material is printed, and a
//! missing secret is a clear error (exit 1). Everything stays on 127.0.0.1.

mod common;

use common::{expect, setup, tern, text};
use serde_json::Value;
use tern_core::portal::{KEYS_KEPT, KeyRing};

async fn secret_text(aws: &aws_config::SdkConfig, id: &str) -> String {
    aws_sdk_secretsmanager::Client::new(aws)
        .get_secret_value()
        .secret_id(id)
        .send()
        .await
        .expect("read the key ring")
        .secret_string
        .expect("a text secret")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_puts_a_new_key_in_front_and_keeps_the_previous_one() {
    let s = setup("cli-portal-key-").await;
    let secret = s.resources.portal_key_secret.clone();
    let ring =
        async || KeyRing::from_secret_text(&secret_text(&s.aws, &secret).await).expect("ring");
    let first = ring().await.current().id.clone();

    let out = expect(&s.env, &["portal-rotate-key"], 0);
    let after = ring().await;
    let second = after.current().id.clone();
    assert_ne!(second, first, "a new key signs");
    assert!(out.contains(&second), "the new key's id is printed: {out}");
    assert!(
        after.key(&first).is_some(),
        "the previous key still verifies live sessions"
    );

    // Again: the ring keeps KEYS_KEPT keys, the oldest goes.
    assert_eq!(KEYS_KEPT, 2, "this test rotates past a ring of two");
    let out2 = expect(&s.env, &["portal-rotate-key"], 0);
    let last = ring().await;
    assert!(last.key(&first).is_none(), "the oldest key is dropped");
    assert!(
        last.key(&second).is_some(),
        "the one before keeps verifying"
    );
    assert_ne!(last.current().id, second);

    // No key material in what was printed.
    let stored: Value = serde_json::from_str(&secret_text(&s.aws, &secret).await).expect("JSON");
    for key in stored["keys"].as_array().expect("keys") {
        let material = key["secret"].as_str().expect("secret");
        assert!(material.len() >= 32);
        assert!(!out.contains(material) && !out2.contains(material));
    }

    // A deployment without the secret: a clear error, exit 1, nothing created.
    let env: Vec<(String, String)> = s
        .env
        .iter()
        .map(|(k, v)| {
            let v = if k == "TERN_PORTAL_KEY_SECRET" {
                "tern-no-such-portal-keys".to_owned()
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect();
    let missing = tern(&env, &["portal-rotate-key"]);
    let stderr = text(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tern-no-such-portal-keys") && stderr.contains("ResourceNotFoundException"),
        "names the secret and why: {stderr}"
    );
    assert!(
        !stderr.contains("unavailable"),
        "a missing secret is not a service outage: {stderr}"
    );
    s.moto.stop().await;
}
