//! The reach options of `tern endpoints add` and `update`: custom headers, authentication
//! to the receiver, signature schemes, and where secret values are read from.
//!
//! A secret value (a secret header's value, a basic password, a bearer token, an OAuth2
//! client secret) is given as a SOURCE, so it need not appear on the command line, in
//! the shell's history or in the process list:
//! - `env:VAR`: the environment variable `VAR`;
//! - `file:PATH`: the file's content (one trailing newline dropped);
//! - `prompt`: asked on the terminal, not echoed;
//! - `stdin`: one line of standard input (for scripts; one option at most per command);
//! - `value:TEXT`: the text itself (it lands in the shell's history: avoid).

use std::io::{BufRead as _, IsTerminal as _};

use tern_core::custom_headers::{CustomHeader, FieldValue};
use tern_core::receiver_auth::{OAuth2ClientCredentials, ReceiverAuth};
use tern_core::{SecretValue, Signatures};
use tern_ops::OpsError;
use tern_ops::reach::{auth_kind, client_auth};

/// Help text on SOURCE, shown under each command's options.
pub const SOURCE_HELP: &str = "SOURCE of a secret value: env:VAR (an environment variable), file:PATH (a file; one \
trailing newline dropped), prompt (asked on the terminal, not echoed), stdin (one line of standard input), \
value:TEXT (the text itself: it lands in your shell history). Secret values are stored like signing \
secrets and never shown: `show` says they are set.";

/// Longest file read for a secret value, in bytes: 64 KiB (every secret value is at most
/// 8 KiB: `tern_core::receiver_auth::MAX_TOKEN_BYTES`).
const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

fn parse_signatures(text: &str) -> Result<Signatures, String> {
    text.parse()
        .map_err(|e: tern_core::signing_key::SignaturesError| e.to_string())
}

/// Custom header, authentication and signature options shared by `add` and `update`.
#[derive(clap::Args, Debug, Default)]
pub struct ReachArgs {
    /// A header sent with every attempt, `NAME=VALUE` (repeatable). Tern's own headers
    /// (webhook-*, idempotency-key, x-webhook-signature, user-agent, content-type), host,
    /// content-length and hop-by-hop headers are refused.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,
    /// A secret header, `NAME=SOURCE` (repeatable): its value is read from SOURCE,
    /// stored like a signing secret and never shown.
    #[arg(long = "secret-header", value_name = "NAME=SOURCE")]
    pub secret_headers: Vec<String>,
    /// Authentication to the receiver: none, basic, bearer or oauth2 (client
    /// credentials). Give every option of that type with it.
    #[arg(long, value_name = "TYPE")]
    pub auth: Option<String>,
    /// Basic: the user name.
    #[arg(long, value_name = "USER")]
    pub basic_username: Option<String>,
    /// Basic: the password, from SOURCE.
    #[arg(long, value_name = "SOURCE")]
    pub basic_password: Option<String>,
    /// Bearer: the token, from SOURCE.
    #[arg(long, value_name = "SOURCE")]
    pub bearer_token: Option<String>,
    /// OAuth2: the token endpoint (checked like the endpoint URL).
    #[arg(long, value_name = "URL")]
    pub oauth_token_url: Option<String>,
    /// OAuth2: the client id.
    #[arg(long, value_name = "ID")]
    pub oauth_client_id: Option<String>,
    /// OAuth2: the client secret, from SOURCE.
    #[arg(long, value_name = "SOURCE")]
    pub oauth_client_secret: Option<String>,
    /// OAuth2: space-separated scopes.
    #[arg(long, value_name = "SCOPES")]
    pub oauth_scope: Option<String>,
    /// OAuth2: the audience (the API the token is for).
    #[arg(long, value_name = "AUDIENCE")]
    pub oauth_audience: Option<String>,
    /// OAuth2: how the client id and secret are sent: client_secret_basic (default) or
    /// client_secret_post.
    #[arg(long, value_name = "METHOD")]
    pub oauth_client_auth: Option<String>,
    /// Signature schemes in webhook-signature: v1 (HMAC-SHA256, the default), v1a
    /// (Ed25519: the receiver verifies with a public key, shown by `show`) or both.
    #[arg(long, value_parser = parse_signatures)]
    pub signatures: Option<Signatures>,
    /// Mutual TLS: the Secrets Manager secret (its ARN; the name must start with
    /// tern/mtls/<tenant id>/, the endpoint's own tenant) holding the client certificate chain and key as PEM, offered to a
    /// receiver that asks for a client certificate.
    #[arg(
        long,
        value_name = "SECRET_ARN",
        conflicts_with = "no_client_certificate"
    )]
    pub client_certificate_arn: Option<String>,
    /// Mutual TLS: offer no client certificate any more (update only).
    #[arg(long)]
    pub no_client_certificate: bool,
}

/// Reads secret values, allowing standard input once.
#[derive(Default)]
pub struct SecretReader {
    stdin_used: bool,
}

impl SecretReader {
    /// The value `source` names, for `what` (named in errors and the prompt).
    ///
    /// # Errors
    /// [`OpsError::Invalid`]: an unknown form, an unset variable, an unreadable file, no
    /// terminal to prompt on, standard input asked twice. Never repeats a value.
    pub fn read(&mut self, source: &str, what: &str) -> Result<SecretValue, OpsError> {
        let bad = |m: String| OpsError::Invalid(format!("{what}: {m}"));
        let text = if let Some(var) = source.strip_prefix("env:") {
            std::env::var(var).map_err(|_| bad(format!("environment variable {var} is not set")))?
        } else if let Some(path) = source.strip_prefix("file:") {
            let file =
                std::fs::File::open(path).map_err(|e| bad(format!("cannot read {path}: {e}")))?;
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(file, MAX_SECRET_FILE_BYTES),
                &mut text,
            )
            .map_err(|e| bad(format!("cannot read {path}: {e}")))?;
            strip_newline(text)
        } else if let Some(text) = source.strip_prefix("value:") {
            text.to_owned()
        } else if source == "prompt" {
            if !std::io::stdin().is_terminal() {
                return Err(bad(
                    "no terminal to prompt on: use stdin, env:VAR or file:PATH".into(),
                ));
            }
            rpassword::prompt_password(format!("{what}: "))
                .map_err(|e| bad(format!("cannot read the terminal: {e}")))?
        } else if source == "stdin" {
            if std::mem::replace(&mut self.stdin_used, true) {
                return Err(bad("standard input is read for one value only".into()));
            }
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|e| bad(format!("cannot read standard input: {e}")))?;
            strip_newline(line)
        } else {
            return Err(bad(
                "give a SOURCE: env:VAR, file:PATH, prompt, stdin or value:TEXT".into(),
            ));
        };
        if text.is_empty() {
            return Err(bad("the value is empty".into()));
        }
        Ok(SecretValue::new(text))
    }
}

/// `text` without one trailing `\n` or `\r\n`.
fn strip_newline(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

/// `NAME=VALUE` split at its first `=`. The error never repeats the text: without an
/// `=` there is no telling the name from a secret.
fn split_pair<'a>(pair: &'a str, what: &str) -> Result<(&'a str, &'a str), OpsError> {
    pair.split_once('=')
        .ok_or_else(|| OpsError::Invalid(format!("{what} must be NAME=VALUE (no '=' found)")))
}

impl ReachArgs {
    /// The client certificate change `--client-certificate-arn` or
    /// `--no-client-certificate` gives: `None` for no change, `Some(None)` to remove it.
    /// With `tenant` known, the ARN is checked here; without it (an update that finds the
    /// endpoint by id) it is checked when applied to the endpoint, whose tenant is known
    /// then (`Endpoint::validate`).
    ///
    /// # Errors
    /// [`OpsError::Invalid`] for an ARN that is not a Secrets Manager secret under the
    /// tenant's own prefix, `tern/mtls/<tenant id>/`.
    pub fn client_certificate(
        &self,
        tenant: Option<&tern_core::TenantId>,
    ) -> Result<Option<Option<tern_core::client_certificate::ClientCertificate>>, OpsError> {
        use tern_core::client_certificate::ClientCertificate;
        if self.no_client_certificate {
            return Ok(Some(None));
        }
        self.client_certificate_arn
            .as_deref()
            .map(|arn| match tenant {
                Some(tenant) => ClientCertificate::new(arn, tenant)
                    .map(Some)
                    .map_err(|e| OpsError::Invalid(e.to_string())),
                None => Ok(Some(ClientCertificate {
                    secret_arn: arn.trim().to_owned(),
                })),
            })
            .transpose()
    }

    /// The headers `--header` and `--secret-header` give, checked.
    ///
    /// # Errors
    /// [`OpsError::Invalid`] with the header's rule.
    pub fn headers(&self, secrets: &mut SecretReader) -> Result<Vec<CustomHeader>, OpsError> {
        let invalid = |e: tern_core::custom_headers::HeaderError| OpsError::Invalid(e.to_string());
        let mut out = Vec::new();
        for pair in &self.headers {
            let (name, value) = split_pair(pair, "--header")?;
            out.push(
                CustomHeader::new(name, FieldValue::Plain(value.to_owned())).map_err(invalid)?,
            );
        }
        for pair in &self.secret_headers {
            let (name, source) = split_pair(pair, "--secret-header")?;
            let value = secrets.read(source, &format!("header {name}"))?;
            out.push(CustomHeader::new(name, FieldValue::Secret(value)).map_err(invalid)?);
        }
        Ok(out)
    }

    /// The authentication `--auth` and its options give; `None` without `--auth`.
    ///
    /// # Errors
    /// [`OpsError::Invalid`]: an option of another type, a missing one, a bad value.
    pub fn auth(&self, secrets: &mut SecretReader) -> Result<Option<ReceiverAuth>, OpsError> {
        let given = [
            ("--basic-username", self.basic_username.is_some(), "basic"),
            ("--basic-password", self.basic_password.is_some(), "basic"),
            ("--bearer-token", self.bearer_token.is_some(), "bearer"),
            (
                "--oauth-token-url",
                self.oauth_token_url.is_some(),
                "oauth2_client_credentials",
            ),
            (
                "--oauth-client-id",
                self.oauth_client_id.is_some(),
                "oauth2_client_credentials",
            ),
            (
                "--oauth-client-secret",
                self.oauth_client_secret.is_some(),
                "oauth2_client_credentials",
            ),
            (
                "--oauth-scope",
                self.oauth_scope.is_some(),
                "oauth2_client_credentials",
            ),
            (
                "--oauth-audience",
                self.oauth_audience.is_some(),
                "oauth2_client_credentials",
            ),
            (
                "--oauth-client-auth",
                self.oauth_client_auth.is_some(),
                "oauth2_client_credentials",
            ),
        ];
        let Some(kind) = self.auth.as_deref() else {
            if let Some((flag, ..)) = given.iter().find(|(_, set, _)| *set) {
                return Err(OpsError::Invalid(format!("{flag} needs --auth")));
            }
            return Ok(None);
        };
        let kind = auth_kind(kind)?;
        if let Some((flag, ..)) = given.iter().find(|(_, set, k)| *set && *k != kind) {
            return Err(OpsError::Invalid(format!(
                "{flag} does not go with --auth {kind}"
            )));
        }
        let need = |v: &Option<String>, flag: &str| {
            v.clone()
                .ok_or_else(|| OpsError::Invalid(format!("--auth {kind} needs {flag}")))
        };
        let auth = match kind {
            "none" => ReceiverAuth::None,
            "basic" => ReceiverAuth::Basic {
                username: need(&self.basic_username, "--basic-username")?,
                password: secrets.read(
                    &need(&self.basic_password, "--basic-password")?,
                    "basic password",
                )?,
            },
            "bearer" => ReceiverAuth::Bearer {
                token: secrets
                    .read(&need(&self.bearer_token, "--bearer-token")?, "bearer token")?,
            },
            _ => ReceiverAuth::Oauth2ClientCredentials(OAuth2ClientCredentials {
                token_url: need(&self.oauth_token_url, "--oauth-token-url")?,
                client_id: need(&self.oauth_client_id, "--oauth-client-id")?,
                client_secret: secrets.read(
                    &need(&self.oauth_client_secret, "--oauth-client-secret")?,
                    "OAuth2 client secret",
                )?,
                scope: self.oauth_scope.clone(),
                audience: self.oauth_audience.clone(),
                client_auth: self
                    .oauth_client_auth
                    .as_deref()
                    .map(client_auth)
                    .transpose()?
                    .unwrap_or_default(),
            }),
        };
        auth.validate()
            .map_err(|e| OpsError::Invalid(e.to_string()))?;
        Ok(Some(auth))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources() {
        let mut r = SecretReader::default();
        assert_eq!(r.read("value:abc", "x").unwrap().expose(), "abc");
        let dir = std::env::temp_dir().join(format!("tern-secret-{}", std::process::id()));
        std::fs::write(&dir, "from-file\r\n").unwrap();
        assert_eq!(
            r.read(&format!("file:{}", dir.display()), "x")
                .unwrap()
                .expose(),
            "from-file"
        );
        std::fs::remove_file(&dir).unwrap();
        let err = r.read("hunter2", "basic password").unwrap_err().to_string();
        assert!(err.contains("SOURCE") && !err.contains("hunter2"), "{err}");
        let err = r.read("env:TERN_TEST_SURELY_UNSET_VAR", "x").unwrap_err();
        assert!(err.to_string().contains("not set"));
    }

    #[test]
    fn auth_options_must_match_their_type() {
        let mut r = SecretReader::default();
        let args = ReachArgs {
            bearer_token: Some("value:t".into()),
            ..ReachArgs::default()
        };
        assert!(
            args.auth(&mut r)
                .unwrap_err()
                .to_string()
                .contains("needs --auth")
        );
        let args = ReachArgs {
            auth: Some("basic".into()),
            basic_username: Some("u".into()),
            bearer_token: Some("value:t".into()),
            ..ReachArgs::default()
        };
        assert!(
            args.auth(&mut r)
                .unwrap_err()
                .to_string()
                .contains("does not go with")
        );
        let args = ReachArgs {
            auth: Some("oauth2".into()),
            oauth_token_url: Some("https://auth.example/token".into()),
            oauth_client_id: Some("c".into()),
            ..ReachArgs::default()
        };
        assert!(
            args.auth(&mut r)
                .unwrap_err()
                .to_string()
                .contains("--oauth-client-secret")
        );
        let args = ReachArgs {
            auth: Some("bearer".into()),
            bearer_token: Some("value:tok".into()),
            ..ReachArgs::default()
        };
        assert_eq!(
            args.auth(&mut r).unwrap(),
            Some(ReceiverAuth::Bearer {
                token: SecretValue::new("tok")
            })
        );
    }

    #[test]
    fn header_errors_never_repeat_a_value() {
        let mut r = SecretReader::default();
        let args = ReachArgs {
            headers: vec!["x-key:secretvalue".into()],
            ..ReachArgs::default()
        };
        let err = args.headers(&mut r).unwrap_err().to_string();
        assert!(!err.contains("secretvalue"), "{err}");
        let args = ReachArgs {
            headers: vec!["host=evil.example".into()],
            ..ReachArgs::default()
        };
        assert!(
            args.headers(&mut r)
                .unwrap_err()
                .to_string()
                .contains("host")
        );
    }
}
