//! The receiver settings a customer sets on its endpoint's page (issue 28): custom headers
//! (secret ones typed into password inputs and never shown again), authentication to its
//! server (basic, bearer, OAuth2 client credentials) and the signature schemes, with the
//! Ed25519 public key to copy. The forms become the API's own PATCH body
//! (`EndpointPatch`), so every check and every rule of keeping a secret is the API's
//! (`crate::reach`); a secret input left empty keeps the stored secret.
//!
//! No script (the CSP allows none): the authentication's type is a radio group, and each
//! type's fields are read only when that type is chosen.

use maud::{Markup, html};
use serde_json::{Map, Value, json};

use super::handlers::Form;
use super::pages::Ctx;
use crate::model::{self, ReceiverAuthType, Signatures};

/// Rows of a headers form read at most: every header an endpoint may have, twice over
/// (a form is the customer's browser's, so its size is bounded here, not trusted).
const MAX_FORM_ROWS: usize = 2 * tern_core::custom_headers::MAX_CUSTOM_HEADERS;

/// What a secret input says while its value is stored: the value is never sent back.
const KEEP_HINT: &str = "set: leave empty to keep it";

fn auth_words(kind: ReceiverAuthType) -> &'static str {
    match kind {
        ReceiverAuthType::None => "None (the signatures authenticate each request)",
        ReceiverAuthType::Basic => "HTTP Basic",
        ReceiverAuthType::Bearer => "Bearer token",
        ReceiverAuthType::Oauth2ClientCredentials => "OAuth2 client credentials",
    }
}

fn signatures_name(s: Signatures) -> &'static str {
    match s {
        Signatures::V1 => "v1",
        Signatures::V1a => "v1a",
        Signatures::Both => "both",
    }
}

fn signatures_words(s: Signatures) -> &'static str {
    match s {
        Signatures::V1 => "v1: HMAC-SHA256 with the signing secret",
        Signatures::V1a => "v1a: Ed25519, verified with the public key below",
        Signatures::Both => "both: v1 and v1a in every request",
    }
}

/// The settings as facts (`dt`/`dd` pairs): plain header values, a secret's presence,
/// never a secret value.
pub(super) fn facts(e: &model::Endpoint) -> Markup {
    html! {
        dt { "Custom headers" }
        dd id="fact-headers" {
            @if e.headers.is_empty() { "none" }
            @for h in &e.headers {
                code { (h.name) ": " @if let Some(v) = &h.value { (v) } @else { "(secret, set)" } } br;
            }
        }
        dt { "Authentication" }
        dd id="fact-auth" {
            (auth_words(e.auth.kind))
            @if let Some(u) = &e.auth.username { ", user " code { (u) } }
            @if let Some(t) = &e.auth.token_url { ", token from " code { (t) } }
            @if let Some(c) = &e.auth.client_id { ", client " code { (c) } }
            @if e.auth.secret.is_some() { " (secret set)" }
        }
        dt { "Signatures" } dd id="fact-signatures" { (signatures_words(e.signatures)) }
        dt { "Rate limit" }
        dd { @match e.max_per_second { Some(n) => { (n) " requests a second" }, None => "none" } }
        dt { "Payload format" }
        dd { @match e.payload_format { model::PayloadFormat::Raw => "raw: the event's payload as is", model::PayloadFormat::StandardWebhooks => "Standard Webhooks: {type, timestamp, data}" } }
    }
}

fn csrf(ctx: &Ctx<'_>) -> Markup {
    html! { input type="hidden" name="csrf" value=(ctx.csrf); }
}

/// The three forms: custom headers, authentication, signatures (and the key rotation).
pub(super) fn forms(ctx: &Ctx<'_>, e: &model::Endpoint, base: &str) -> Markup {
    let auth = &e.auth;
    let is = |k: ReceiverAuthType| auth.kind == k;
    let keep = |k: ReceiverAuthType| is(k).then_some(KEEP_HINT);
    html! {
        section aria-labelledby="headers-title" {
            h2 id="headers-title" { "Custom headers" }
            form method="post" action=(format!("{base}/headers")) id="headers" {
                (csrf(ctx))
                p { "Sent with every request, after the webhook headers. A secret value (an API key) is stored encrypted and never shown again: leave its field empty to keep it." }
                @for (i, h) in e.headers.iter().enumerate() {
                    fieldset {
                        legend { code { (h.name) } @if h.secret { " (secret)" } }
                        input type="hidden" name=(format!("h{i}_name")) value=(h.name);
                        @if h.secret {
                            input type="hidden" name=(format!("h{i}_secret")) value="yes";
                            label for=(format!("h{i}-value")) { "New value (empty: keep the stored one)" }
                            input id=(format!("h{i}-value")) name=(format!("h{i}_value")) type="password" autocomplete="new-password" placeholder=(KEEP_HINT);
                        } @else {
                            label for=(format!("h{i}-value")) { "Value" }
                            input id=(format!("h{i}-value")) name=(format!("h{i}_value")) type="text" maxlength="2048" value=[h.value.as_deref()];
                        }
                        label class="check" { input type="checkbox" name=(format!("h{i}_remove")) value="yes"; " Remove" }
                    }
                }
                fieldset {
                    legend { "Add a header" }
                    label for="new-header-name" { "Name" }
                    input id="new-header-name" name="new_name" type="text" maxlength="64" placeholder="X-Tenant";
                    label for="new-header-value" { "Value" }
                    input id="new-header-value" name="new_value" type="text" maxlength="2048";
                }
                fieldset {
                    legend { "Add a secret header" }
                    label for="new-secret-name" { "Name" }
                    input id="new-secret-name" name="new_secret_name" type="text" maxlength="64" placeholder="X-Api-Key";
                    label for="new-secret-value" { "Secret value" }
                    input id="new-secret-value" name="new_secret_value" type="password" maxlength="2048" autocomplete="new-password";
                }
                button type="submit" { "Save headers" }
            }
        }
        section aria-labelledby="auth-title" {
            h2 id="auth-title" { "Authentication" }
            form method="post" action=(format!("{base}/auth")) id="auth" {
                (csrf(ctx))
                p { "How each request authenticates to your server, besides the signature. Secrets are stored encrypted and never shown again: leave a secret field empty to keep the stored one (same type, same user name or client)." }
                fieldset {
                    legend { "Type" }
                    @for (value, kind) in [("none", ReceiverAuthType::None), ("basic", ReceiverAuthType::Basic), ("bearer", ReceiverAuthType::Bearer), ("oauth2_client_credentials", ReceiverAuthType::Oauth2ClientCredentials)] {
                        label class="check" { input type="radio" name="auth_type" value=(value) id=(format!("auth-{value}")) checked[is(kind)]; " " (auth_words(kind)) }
                    }
                }
                fieldset {
                    legend { "HTTP Basic" }
                    label for="basic-username" { "User name" }
                    input id="basic-username" name="basic_username" type="text" maxlength="1024" autocomplete="off" value=[auth.username.as_deref()];
                    label for="basic-password" { "Password" }
                    input id="basic-password" name="basic_password" type="password" autocomplete="new-password" placeholder=[keep(ReceiverAuthType::Basic)];
                }
                fieldset {
                    legend { "Bearer token" }
                    label for="bearer-token" { "Token" }
                    input id="bearer-token" name="bearer_token" type="password" autocomplete="new-password" placeholder=[keep(ReceiverAuthType::Bearer)];
                }
                fieldset {
                    legend { "OAuth2 client credentials" }
                    label for="oauth-token-url" { "Token URL" }
                    input id="oauth-token-url" name="oauth_token_url" type="url" maxlength="2048" value=[auth.token_url.as_deref()];
                    label for="oauth-client-id" { "Client id" }
                    input id="oauth-client-id" name="oauth_client_id" type="text" maxlength="1024" autocomplete="off" value=[auth.client_id.as_deref()];
                    label for="oauth-client-secret" { "Client secret" }
                    input id="oauth-client-secret" name="oauth_client_secret" type="password" autocomplete="new-password" placeholder=[keep(ReceiverAuthType::Oauth2ClientCredentials)];
                    label for="oauth-scope" { "Scope (optional, space-separated)" }
                    input id="oauth-scope" name="oauth_scope" type="text" maxlength="1024" value=[auth.scope.as_deref()];
                    label for="oauth-audience" { "Audience (optional)" }
                    input id="oauth-audience" name="oauth_audience" type="text" maxlength="1024" value=[auth.audience.as_deref()];
                    label for="oauth-client-auth" { "Client authentication" }
                    select id="oauth-client-auth" name="oauth_client_auth" {
                        option value="client_secret_basic" selected[auth.client_auth != Some(model::ClientAuthMethod::ClientSecretPost)] { "HTTP Basic (client_secret_basic)" }
                        option value="client_secret_post" selected[auth.client_auth == Some(model::ClientAuthMethod::ClientSecretPost)] { "In the body (client_secret_post)" }
                    }
                }
                button type="submit" { "Save authentication" }
            }
        }
        section aria-labelledby="signatures-title" {
            h2 id="signatures-title" { "Signatures" }
            form method="post" action=(format!("{base}/signatures")) id="signatures" {
                (csrf(ctx))
                fieldset {
                    legend { "Schemes in webhook-signature" }
                    @for s in [Signatures::V1, Signatures::V1a, Signatures::Both] {
                        label class="check" { input type="radio" name="signatures" value=(signatures_name(s)) id=(format!("signatures-{}", signatures_name(s))) checked[e.signatures == s]; " " (signatures_words(s)) }
                    }
                }
                button type="submit" { "Save signatures" }
            }
            @if e.signing_keys.is_empty() {
                p { "No Ed25519 key yet: choosing v1a or both makes one." }
            } @else {
                p { "Ed25519 public keys (not secret: copy the current one into your verifier):" }
                ul id="public-keys" {
                    @for k in &e.signing_keys {
                        li { code class="public-key" data-state=(k.state) { (k.public_key) } " " (k.state)
                            @if let Some(t) = k.expires_at { ", signs until " (t.format("%Y-%m-%d %H:%M UTC").to_string()) } }
                    }
                }
            }
            form method="post" action=(format!("{base}/rotate-signing-key")) id="rotate-key" {
                (csrf(ctx))
                label for="key-overlap" { "Keep the old key signing for (hours)" }
                input id="key-overlap" name="overlap_hours" type="number" min="0" max="720" value="24";
                button type="submit" { "Rotate signing key" }
            }
        }
    }
}

/// A secret input: its text as typed (a password may hold spaces), `None` when empty.
fn secret(form: &Form, name: &str) -> Option<String> {
    form.raw(name).filter(|v| !v.is_empty()).map(str::to_owned)
}

/// `{"headers": [...]}` from the headers form: the rows kept (a secret row without a new
/// value keeps its stored value: the API's rule), then the new ones.
pub(super) fn headers_patch(form: &Form) -> Value {
    let mut list = Vec::new();
    for i in 0..MAX_FORM_ROWS {
        let Some(name) = form.get(&format!("h{i}_name")) else {
            continue;
        };
        if form.get(&format!("h{i}_remove")) == Some("yes") {
            continue;
        }
        let mut row = Map::new();
        row.insert("name".into(), json!(name));
        if form.get(&format!("h{i}_secret")) == Some("yes") {
            row.insert("secret".into(), json!(true));
            if let Some(v) = secret(form, &format!("h{i}_value")) {
                row.insert("value".into(), json!(v));
            }
        } else {
            row.insert(
                "value".into(),
                json!(form.get(&format!("h{i}_value")).unwrap_or_default()),
            );
        }
        list.push(Value::Object(row));
    }
    if let Some(name) = form.get("new_name") {
        list.push(json!({"name": name, "value": form.get("new_value").unwrap_or_default()}));
    }
    if let Some(name) = form.get("new_secret_name") {
        let mut row = json!({"name": name, "secret": true});
        if let Some(v) = secret(form, "new_secret_value") {
            row["value"] = json!(v);
        }
        list.push(row);
    }
    json!({ "headers": list })
}

/// `{"auth": {...}}` from the authentication form: the chosen type's fields only; a
/// secret left empty is left out (kept, by the API's rule, or refused naming it).
pub(super) fn auth_patch(form: &Form) -> Value {
    let kind = form.get("auth_type").unwrap_or_default();
    let mut auth = Map::new();
    auth.insert("type".into(), json!(kind));
    let mut put = |key: &str, value: Option<String>| {
        if let Some(v) = value {
            auth.insert(key.into(), json!(v));
        }
    };
    let text = |name: &str| form.get(name).map(str::to_owned);
    match kind {
        "basic" => {
            put("username", Some(text("basic_username").unwrap_or_default()));
            put("password", secret(form, "basic_password"));
        }
        "bearer" => put("token", secret(form, "bearer_token")),
        "oauth2_client_credentials" => {
            put(
                "token_url",
                Some(text("oauth_token_url").unwrap_or_default()),
            );
            put(
                "client_id",
                Some(text("oauth_client_id").unwrap_or_default()),
            );
            put("client_secret", secret(form, "oauth_client_secret"));
            put("scope", text("oauth_scope"));
            put("audience", text("oauth_audience"));
            put("client_auth", text("oauth_client_auth"));
        }
        _ => {}
    }
    json!({ "auth": Value::Object(auth) })
}

/// `{"signatures": "..."}` from the signatures form.
pub(super) fn signatures_patch(form: &Form) -> Value {
    json!({ "signatures": form.get("signatures").unwrap_or_default() })
}
