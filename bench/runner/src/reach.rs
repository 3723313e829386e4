//! Requests per delivery with OAuth2 client credentials on (`make bench-reach`, issue 20
//! "Measured"): deliveries through local mode to one endpoint whose receiver wants a
//! bearer token from a token server on 127.0.0.1, counted on the wire: POSTs at the
//! receiver, token requests at the token server, AWS calls behind the counting proxy.
//!
//! Two token lifetimes: an hour (`expires_in` 3600, the common one: one fetch per warm
//! sender per endpoint for the whole run) and 4 seconds (used for 2 s, half the lifetime:
//! the cache's expiry at work over a run of several seconds). Counts do not depend on the
//! build profile.

use std::time::Instant;

use serde::Serialize;
use tern_core::SecretValue;
use tern_core::receiver_auth::{ClientAuthMethod, OAuth2ClientCredentials, ReceiverAuth};
use tern_local::{Behavior, Receiver, Reply};

use crate::proxy::{CountingProxy, Counts};
use crate::{BoxError, FUNCTION_LABELS, scenario_counts};

/// One run: deliveries to an OAuth2 endpoint whose tokens live `expires_in` seconds, or
/// (`expires_in` `None`) to the same receiver without authentication, for comparison.
#[derive(Debug, Serialize)]
pub struct OauthRun {
    /// The token server's `expires_in`, seconds; `None`: no authentication.
    pub expires_in: Option<u64>,
    /// Events published (one delivery each).
    pub deliveries: usize,
    /// POSTs the receiver answered (all 200: each carried a valid token).
    pub receiver_posts: usize,
    /// Requests the token server got.
    pub token_requests: usize,
    /// From the first publish to the drained queue, seconds.
    pub seconds: f64,
    /// The functions' AWS calls (relay and sender), all operations, per delivery.
    pub aws_calls_per_delivery: f64,
}

/// Runs without authentication, then both token lifetimes, with `n` deliveries each.
pub async fn run(proxy: &CountingProxy, n: usize) -> Result<Vec<OauthRun>, BoxError> {
    let mut runs = Vec::new();
    for expires_in in [None, Some(3600_u64), Some(4)] {
        runs.push(
            oauth_run(proxy, n, expires_in)
                .await
                .map_err(|e| format!("oauth, expires_in {expires_in:?}: {e}"))?,
        );
    }
    Ok(runs)
}

async fn oauth_run(
    proxy: &CountingProxy,
    n: usize,
    expires_in: Option<u64>,
) -> Result<OauthRun, BoxError> {
    let tokens = Receiver::start().await?;
    tokens.set(
        "/token",
        Behavior::Always(
            Reply::status(200)
                .header("content-type", "application/json")
                .body(&format!(
                    r#"{{"access_token":"bench-token","token_type":"Bearer","expires_in":{}}}"#,
                    expires_in.unwrap_or(0)
                )),
        ),
    );
    let grant = OAuth2ClientCredentials {
        token_url: tokens.url("/token"),
        client_id: "bench".into(),
        client_secret: SecretValue::new("bench-client-secret"),
        scope: None,
        audience: None,
        client_auth: ClientAuthMethod::ClientSecretBasic,
    };
    let started = Instant::now();
    let (scenario, behavior) = match expires_in {
        Some(s) => (
            format!("oauth-{s}"),
            Behavior::RequireAuthorization("Bearer bench-token".into()),
        ),
        None => ("no-auth".to_owned(), Behavior::Always(Reply::status(200))),
    };
    let counts = scenario_counts(
        proxy,
        &scenario,
        behavior,
        |e| {
            if expires_in.is_some() {
                e.auth = ReceiverAuth::Oauth2ClientCredentials(grant);
            }
        },
        n,
        n,
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(OauthRun {
        expires_in,
        deliveries: n,
        // scenario_counts waited for n POSTs; a 401 would have been one more POST and
        // one more token request, which the token count shows.
        receiver_posts: n,
        token_requests: tokens.requests("/token").len(),
        seconds,
        aws_calls_per_delivery: function_calls(&counts) as f64 / n as f64,
    })
}

fn function_calls(counts: &Counts) -> u64 {
    FUNCTION_LABELS
        .iter()
        .filter_map(|l| counts.get(*l))
        .flat_map(|ops| ops.values())
        .sum()
}

/// The runs as a Markdown table.
pub fn markdown(runs: &[OauthRun]) -> String {
    let mut s = String::from(
        "\n## OAuth2 client credentials: requests per delivery\n\n\
         One endpoint, one local sender (one warm Lambda instance's cache), its receiver \
         answering 200 only to `Bearer <token>`; the token server on 127.0.0.1.\n\n\
         | expires_in (s) | deliveries | receiver POSTs | token requests | run (s) | token requests per delivery | AWS calls per delivery (relay + sender) |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in runs {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {:.4} | {:.2} |\n",
            r.expires_in
                .map_or_else(|| "no auth".to_owned(), |e| e.to_string()),
            r.deliveries,
            r.receiver_posts,
            r.token_requests,
            r.seconds,
            r.token_requests as f64 / r.deliveries as f64,
            r.aws_calls_per_delivery,
        ));
    }
    s
}
