//! A client of the Tern API for the tests: requests signed with SigV4 (the AWS SDK's own
//! signer, `tern_api::sigv4::sign_request`), as any client signs them, to a local API on
//! 127.0.0.1. Answers come back as status, headers and JSON.

use std::time::SystemTime;

use serde_json::Value;
use tern_api::sigv4::{LocalCredential, sign_request};
use tern_local::local::LocalTern;

/// One answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// `content-type`.
    pub content_type: String,
    /// Body as text.
    pub text: String,
    /// Body as JSON (`null` when empty or not JSON).
    pub json: Value,
    /// Every header of the answer, names in lower case.
    pub headers: Vec<(String, String)>,
}

impl Answer {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The problem's `type` name after `urn:tern:problem:`.
    pub fn problem(&self) -> &str {
        self.json["type"]
            .as_str()
            .and_then(|t| t.strip_prefix("urn:tern:problem:"))
            .unwrap_or("")
    }

    /// The problem's `field`.
    pub fn field(&self) -> &str {
        self.json["field"].as_str().unwrap_or("")
    }
}

/// A signed client of one local API.
#[derive(Clone)]
pub struct ApiClient {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The key pair it signs with.
    pub credential: LocalCredential,
    http: reqwest::Client,
}

impl ApiClient {
    /// A client of `local`'s API (started with [`LocalTern::start_api`]), signing with the
    /// key pair of `.tern/local.env`.
    pub fn of(local: &LocalTern) -> Self {
        let addr = local.api.expect("the local API is started");
        Self::new(
            &tern_local::api::url(addr),
            tern_local::api::local_credentials().remove(0),
        )
    }

    /// Serves `deps` through the API's router on 127.0.0.1 with local mode's SigV4 check
    /// (the key pair of `.tern/local.env`, every tenant) and returns a client of it and the
    /// server's task (the server stops when the task is aborted or the runtime ends).
    pub fn serve(deps: tern_api::ApiDeps) -> (Self, tokio::task::JoinHandle<()>) {
        let auth = tern_local::api::authenticator(&deps, tern_local::api::local_credentials());
        let listener = tern_local::console::bind(0).expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("addr");
        let server = tern_local::api::spawn(listener, tern_api::router(deps, auth));
        let client = Self::new(
            &tern_local::api::url(addr),
            tern_local::api::local_credentials().remove(0),
        );
        (client, server)
    }

    /// A client of the API at `base`.
    pub fn new(base: &str, credential: LocalCredential) -> Self {
        Self {
            base: base.to_owned(),
            credential,
            http: reqwest::Client::new(),
        }
    }

    /// The same API, signing with another key pair.
    pub fn with(&self, credential: LocalCredential) -> Self {
        Self {
            credential,
            ..self.clone()
        }
    }

    /// A signed request; `body` JSON when given.
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        self.raw(
            method,
            path,
            bytes,
            body.is_some().then_some("application/json"),
            true,
        )
        .await
    }

    /// `GET`.
    pub async fn get(&self, path: &str) -> Answer {
        self.call("GET", path, None).await
    }

    /// `POST` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.call("POST", path, Some(body)).await
    }

    /// Any request: `bytes` as the body with `content_type`, signed or not.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        bytes: Vec<u8>,
        content_type: Option<&str>,
        signed: bool,
    ) -> Answer {
        self.raw_with(method, path, bytes, content_type, signed, &[])
            .await
    }

    /// `POST` with a JSON body and `extra` headers (signed with the rest).
    pub async fn post_with(&self, path: &str, body: &Value, extra: &[(&str, &str)]) -> Answer {
        self.raw_with(
            "POST",
            path,
            body.to_string().into_bytes(),
            Some("application/json"),
            true,
            extra,
        )
        .await
    }

    /// As [`Self::raw`], with `extra` headers sent (and signed, when signed).
    pub async fn raw_with(
        &self,
        method: &str,
        path: &str,
        bytes: Vec<u8>,
        content_type: Option<&str>,
        signed: bool,
        extra: &[(&str, &str)],
    ) -> Answer {
        let host = self.base.trim_start_matches("http://").to_owned();
        let mut headers: Vec<(&str, &str)> = vec![("host", host.as_str())];
        if let Some(ct) = content_type {
            headers.push(("content-type", ct));
        }
        headers.extend_from_slice(extra);
        let mut request = self
            .http
            .request(
                method.parse().expect("method"),
                format!("{}{path}", self.base),
            )
            .body(bytes.clone());
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        for (k, v) in extra {
            request = request.header(*k, *v);
        }
        if signed {
            let added = sign_request(
                &self.credential,
                tern_local::api::LOCAL_REGION,
                method,
                path,
                &headers,
                &bytes,
                SystemTime::now(),
            )
            .expect("sign");
            for (k, v) in added {
                request = request.header(k, v);
            }
        }
        let response = request.send().await.expect("the local API answers");
        let status = response.status().as_u16();
        let answer_headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = response.text().await.unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            content_type,
            text,
            json,
            headers: answer_headers,
        }
    }
}
