//! Issue 28, "Done when": the integrator's path as documented is a test. The quick start of
//! each client's own README (`clients/python/README.md`, `clients/typescript/README.md`)
//! and the "Sign and call" blocks of `clients/README.md` are extracted and run unedited:
//! the only configuration is what the docs tell a user to set, the API's URL and the local
//! keys (`.tern/local.env`'s names) and `RECEIVER_URL`, here a receiver on 127.0.0.1 that
//! this test controls. It answers 200, then 503 while the program says the receiver is
//! down, then 200 again; every request it gets is verified with the independent Standard
//! Webhooks library of the program's language (PyPI / npm `standardwebhooks`) and the
//! secret the program printed. The test fails when a block no longer runs or an outcome
//! is missing: a verified delivery, the failed attempt in the endpoint's log during the
//! outage, the delivery the recovery made, a portal link that opens.
//!
//! `docs/compared-to-svix.md` holds the same program written with Svix's SDKs; the second
//! test counts the lines of all four (formatted by `ruff format` / `prettier` at their
//! defaults, blank and comment-only lines left out), checks the counts the doc states, and
//! fails when a quick start is not shorter than Svix's.
//!
//! Needs the project venv (`make venv`) and the TypeScript client's packages
//! (`make clients-deps`); missing, the test fails saying what to run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tern_local::LocalOptions;
use tern_tests::api::ApiClient;
use tern_tests::portal::PortalClient;
use tern_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;

/// The tenant the documented programs use.
const TENANT: &str = "tnt_acme";

/// Longest wait for one step of a program (its first delivery, the failure in the log, the
/// recovered delivery, its exit): generous for a loaded machine; nothing waits longer.
const STEP_DEADLINE: Duration = Duration::from_secs(120);

/// Local mode's time scale. The flow never waits for a scheduled retry: the failed attempt
/// is the outage's first, the recovery resends at once. At 0.5 the first automatic retry
/// comes at least 30 s after that failure (the default schedule's 60 s, jitter only
/// added), so the delivery after the recovery is the recovery's, which the test checks by
/// its replay count, not a retry's.
const TIME_SCALE: f64 = 0.5;

/// What a quick start prints before it waits for Enter (`input()`, `rl.question()`).
const PAUSE: &str = "press Enter";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

// ------------------------------------------------------------------ Markdown

/// A fenced code block: its info string and its text (every line, newline-terminated).
struct Fence {
    info: String,
    body: String,
}

impl Fence {
    /// The block's language: the info string's first word.
    fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }
}

/// The fenced code blocks of `markdown` (fences of three backticks at the line's start).
fn fences(markdown: &str) -> Vec<Fence> {
    let mut out = Vec::new();
    let mut open: Option<Fence> = None;
    for line in markdown.lines() {
        match open.as_mut() {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    open = Some(Fence {
                        info: info.trim().to_owned(),
                        body: String::new(),
                    });
                }
            }
            Some(fence) => {
                if line.trim_end() == "```" {
                    out.extend(open.take());
                } else {
                    fence.body.push_str(line);
                    fence.body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    out
}

/// The text of the `## heading` section of `markdown`, up to the next `## `.
fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let start = markdown
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("no section `## {heading}`"));
    let rest = &markdown[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 4);
    &rest[..end]
}

/// One program from every block of `markdown` in one of `langs`, in order.
fn program(markdown: &str, langs: &[&str]) -> String {
    let blocks: Vec<String> = fences(markdown)
        .into_iter()
        .filter(|f| langs.contains(&f.lang()))
        .map(|f| f.body)
        .collect();
    assert!(!blocks.is_empty(), "no {langs:?} block");
    blocks.concat()
}

/// The lines that are code: neither blank nor only a comment (`comment` starts one).
fn code_lines(program: &str, comment: &str) -> usize {
    program
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with(comment))
        .count()
}

// ------------------------------------------------------------------ the languages

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lang {
    Python,
    TypeScript,
}

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::TypeScript => "typescript",
        }
    }

    /// The README whose quick start this is.
    fn readme(self) -> &'static str {
        match self {
            Lang::Python => "clients/python/README.md",
            Lang::TypeScript => "clients/typescript/README.md",
        }
    }

    /// The info-string languages of its blocks.
    fn fences(self) -> &'static [&'static str] {
        match self {
            Lang::Python => &["python"],
            Lang::TypeScript => &["ts", "typescript"],
        }
    }

    fn comment(self) -> &'static str {
        match self {
            Lang::Python => "#",
            Lang::TypeScript => "//",
        }
    }

    /// The file a user saves the program as (the TypeScript README says `.mts`: an ES
    /// module, so its top-level `await` runs whatever the project's `type`).
    fn file(self) -> &'static str {
        match self {
            Lang::Python => "quickstart.py",
            Lang::TypeScript => "quickstart.mts",
        }
    }

    /// The quick start of the README.
    fn quick_start(self) -> String {
        program(&read(self.readme()), self.fences())
    }
}

fn venv_python() -> PathBuf {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the project venv is missing ({}): run `make venv`",
        python.display()
    );
    python
}

fn ts_package() -> PathBuf {
    let pkg = root().join("clients/typescript");
    for tool in ["tsx", "typescript", "prettier", "standardwebhooks"] {
        assert!(
            pkg.join("node_modules").join(tool).is_dir(),
            "the TypeScript client's packages are missing ({tool}): run `make clients-deps` \
             (npm ci in clients/typescript)"
        );
    }
    pkg
}

/// Runs a short command to its end; panics with its output when it fails.
fn run_to_end(command: &mut std::process::Command, what: &str) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what} could not start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A directory where a user would keep the program: for TypeScript a project of its own
/// (`"type": "module"`) whose `node_modules` holds `@tern/client` (this checkout's package,
/// as `npm install` of the tarball places it, resolved through its `exports` to a fresh
/// `dist/`, which [`build_ts_package`] makes), `tsx`, `typescript` and `@types/node`; the
/// program is type-checked there under `--strict`.
fn user_project(lang: Lang, name: &str, source: &str) -> Project {
    let dir = std::env::temp_dir().join(format!(
        "tern-quickstart-{}-{}-{name}",
        std::process::id(),
        lang.name()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("project directory");
    let project = Project(dir.clone());
    std::fs::write(dir.join(lang.file()), source).expect("write the program");
    if lang == Lang::TypeScript {
        let pkg = ts_package();
        std::fs::write(
            dir.join("package.json"),
            r#"{"private":true,"type":"module"}"#,
        )
        .expect("package.json");
        let modules = dir.join("node_modules");
        std::fs::create_dir_all(modules.join("@tern")).expect("node_modules");
        let link = |from: PathBuf, to: PathBuf| {
            std::os::unix::fs::symlink(from, to).expect("link a package");
        };
        link(pkg.clone(), modules.join("@tern/client"));
        for dep in ["tsx", "typescript", "@types"] {
            link(pkg.join("node_modules").join(dep), modules.join(dep));
        }
        run_to_end(
            std::process::Command::new("node")
                .current_dir(&dir)
                .args(["node_modules/typescript/bin/tsc", "--strict", "--noEmit"])
                .args(["--skipLibCheck", "--module", "nodenext"])
                .args(["--moduleResolution", "nodenext", "--target", "es2022"])
                .args(["--types", "node", lang.file()]),
            &format!("tsc --strict on the {name} program"),
        );
    }
    project
}

/// A program's directory, removed when dropped (also when the test fails).
struct Project(PathBuf);

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds the TypeScript package's `dist/` from this checkout's `src/` (what `npm pack`
/// and `npm install` ship).
fn build_ts_package() {
    let pkg = ts_package();
    run_to_end(
        std::process::Command::new("node").current_dir(&pkg).args([
            "node_modules/typescript/bin/tsc",
            "-p",
            "tsconfig.build.json",
        ]),
        "building clients/typescript/dist",
    );
}

/// A program started from its project directory with the environment the docs name.
fn start(lang: Lang, dir: &Path, env: &[(&str, String)]) -> Running {
    let mut command = match lang {
        Lang::Python => {
            let mut c = Command::new(venv_python());
            // This checkout's tern-client, whichever checkout the venv installed.
            c.env("PYTHONPATH", root().join("clients/python"));
            c.arg(lang.file());
            c
        }
        Lang::TypeScript => {
            let mut c = Command::new("node");
            c.args(["--import", "tsx", lang.file()]);
            c
        }
    };
    command
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        // Nothing may leave 127.0.0.1, and no credentials but the environment's.
        .env("NO_PROXY", "*")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("the {} program could not start: {e}", lang.name()));
    let stdin = child.stdin.take();
    let stdout = collect(child.stdout.take().expect("stdout"));
    let stderr = collect(child.stderr.take().expect("stderr"));
    Running {
        child,
        stdin,
        stdout,
        stderr,
    }
}

/// Everything a pipe gave so far, growing as it reads.
fn collect(
    mut pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> watch::Receiver<String> {
    let (tx, rx) = watch::channel(String::new());
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let chunk = String::from_utf8_lossy(&buf[..n]).into_owned();
            tx.send_modify(|t| t.push_str(&chunk));
        }
    });
    rx
}

/// A running program.
struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: watch::Receiver<String>,
    stderr: watch::Receiver<String>,
}

impl Running {
    fn output(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            *self.stdout.borrow(),
            *self.stderr.borrow()
        )
    }

    /// Waits until the program has printed `n` pauses; panics with its output otherwise.
    async fn paused(&mut self, n: usize, what: &str) {
        let reached = matches!(
            tokio::time::timeout(
                STEP_DEADLINE,
                self.stdout.wait_for(|t| t.matches(PAUSE).count() >= n),
            )
            .await,
            Ok(Ok(_))
        );
        if !reached {
            let _ = self.child.start_kill();
            panic!(
                "the program did not reach {what} within {STEP_DEADLINE:?}:\n{}",
                self.output()
            );
        }
    }

    /// Presses Enter.
    async fn enter(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(b"\n").await.expect("write to the program");
        stdin.flush().await.expect("flush");
    }

    /// Waits for the program's end; returns whether it succeeded and all it printed.
    async fn end(mut self) -> (bool, String, String) {
        drop(self.stdin.take());
        let status = match tokio::time::timeout(STEP_DEADLINE, self.child.wait()).await {
            Ok(status) => status.expect("wait for the program"),
            Err(_) => {
                let _ = self.child.start_kill();
                panic!(
                    "the program did not end within {STEP_DEADLINE:?}:\n{}",
                    self.output()
                );
            }
        };
        // The pipes close with the process; their readers finish.
        for pipe in [&mut self.stdout, &mut self.stderr] {
            let _ = tokio::time::timeout(Duration::from_secs(10), pipe.wait_for(|_| false)).await;
        }
        let stdout = self.stdout.borrow().clone();
        let stderr = self.stderr.borrow().clone();
        (status.success(), stdout, stderr)
    }
}

/// The word after `marker` in `text` (the programs print `delivered: evt_...` and so on;
/// a line printed after a prompt follows it on the same line).
fn word_after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let at = text.find(marker)? + marker.len();
    text[at..].split_whitespace().next()
}

/// The environment of a documented program: `.tern/local.env`'s names and the receiver.
fn environment(api: &ApiClient, receiver_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("TERN_API_URL", api.base.clone()),
        (
            "AWS_ACCESS_KEY_ID",
            tern_local::api::LOCAL_ACCESS_KEY_ID.to_owned(),
        ),
        (
            "AWS_SECRET_ACCESS_KEY",
            tern_local::api::LOCAL_SECRET_ACCESS_KEY.to_owned(),
        ),
        ("AWS_REGION", tern_local::api::LOCAL_REGION.to_owned()),
        ("RECEIVER_URL", receiver_url.to_owned()),
    ]
}

// ------------------------------------------------------------------ verification

/// Verifies each request with the Standard Webhooks library of `lang` (PyPI / npm
/// `standardwebhooks`) and `secret`; returns per request `true` or the library's error.
/// A copy of the first request with its body changed is checked too and must fail, so the
/// verifier is seen to refuse.
fn verify_in(lang: Lang, secret: &str, requests: &[Captured]) -> Vec<Value> {
    let mut cases: Vec<Value> = requests
        .iter()
        .map(|r| {
            json!({
                "headers": {
                    "webhook-id": r.header("webhook-id").unwrap_or(""),
                    "webhook-timestamp": r.header("webhook-timestamp").unwrap_or(""),
                    "webhook-signature": r.header("webhook-signature").unwrap_or(""),
                },
                "body": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &r.body),
            })
        })
        .collect();
    let mut forged = cases[0].clone();
    let mut body = requests[0].body.to_vec();
    body.push(b' ');
    forged["body"] = json!(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        &body
    ));
    cases.push(forged);
    let input = json!({"secret": secret, "requests": cases}).to_string();
    const PYTHON: &str = r#"
import base64, json, sys
from standardwebhooks import Webhook
case = json.load(sys.stdin)
hook = Webhook(case["secret"])
out = []
for r in case["requests"]:
    try:
        hook.verify(base64.b64decode(r["body"]), r["headers"])
        out.append(True)
    except Exception as e:
        out.append(f"{type(e).__name__}: {e}")
print(json.dumps(out))
"#;
    const NODE: &str = r#"
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";
const c = JSON.parse(readFileSync(0, "utf8"));
const hook = new Webhook(c.secret);
console.log(JSON.stringify(c.requests.map((r) => {
  try { hook.verify(Buffer.from(r.body, "base64"), r.headers); return true; }
  catch (e) { return String(e); }
})));
"#;
    let mut command = match lang {
        Lang::Python => {
            let mut c = std::process::Command::new(venv_python());
            c.args(["-c", PYTHON]);
            c
        }
        Lang::TypeScript => {
            let mut c = std::process::Command::new("node");
            c.current_dir(ts_package())
                .args(["--input-type=module", "-e", NODE]);
            c
        }
    };
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the verifier starts");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("the verifier ends");
    assert!(
        out.status.success(),
        "the {} verifier failed: {}",
        lang.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut verdicts: Vec<Value> = serde_json::from_slice(&out.stdout).expect("verdicts");
    let forged = verdicts.pop().expect("the forged verdict");
    assert_ne!(
        forged,
        json!(true),
        "{} standardwebhooks accepted a changed body",
        lang.name()
    );
    verdicts
}

// ------------------------------------------------------------------ the API, by this test

async fn endpoints_of(api: &ApiClient, tenant: &str) -> Vec<Value> {
    let list = api.get(&format!("/v1/tenants/{tenant}/endpoints")).await;
    assert_eq!(list.status, 200, "{}", list.text);
    list.json["items"].as_array().cloned().unwrap_or_default()
}

/// Deletes every endpoint of `tenant`: the documented programs share one tenant id.
async fn clear(api: &ApiClient, tenant: &str) {
    for e in endpoints_of(api, tenant).await {
        let id = e["id"].as_str().expect("id");
        let gone = api
            .call(
                "DELETE",
                &format!("/v1/tenants/{tenant}/endpoints/{id}"),
                None,
            )
            .await;
        assert_eq!(gone.status, 204, "{}", gone.text);
    }
}

// ------------------------------------------------------------------ the quick start

/// Runs `lang`'s quick start as a user would, playing the person at the keyboard and the
/// customer's receiver, and checks every outcome.
async fn quick_start(lang: Lang, api: &ApiClient, receiver: &Receiver) {
    let name = lang.name();
    let path = format!("/{name}/quickstart");
    receiver.set(&path, Behavior::Always(Reply::status(200)));
    let dir = user_project(lang, "quickstart", &lang.quick_start());
    let mut program = start(lang, &dir.0, &environment(api, &receiver.url(&path)));

    // 1, 2: the endpoint, its secret, and a delivery the program saw delivered.
    program.paused(1, "the outage's pause").await;
    let out = program.stdout.borrow().clone();
    let secret = word_after(&out, "signing secret, for the receiver:")
        .unwrap_or_else(|| panic!("no signing secret printed:\n{out}"))
        .to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let first = word_after(&out, "delivered:")
        .unwrap_or_else(|| panic!("no delivery printed:\n{out}"))
        .to_owned();
    let before = receiver.requests(&path);
    assert!(
        before
            .iter()
            .any(|r| r.answered == 200 && r.header("webhook-id") == Some(first.as_str())),
        "{name}: the program said {first} was delivered; the receiver got {:?}",
        before
            .iter()
            .map(|r| (r.header("webhook-id"), r.answered))
            .collect::<Vec<_>>()
    );

    // 3: the outage. The receiver answers 503 until the program's second pause.
    receiver.set(&path, Behavior::Always(Reply::status(503)));
    program.enter().await;
    program.paused(2, "the recovery's pause").await;
    let out = program.stdout.borrow().clone();
    let second = word_after(&out, "failed:")
        .unwrap_or_else(|| panic!("no failure printed:\n{out}"))
        .to_owned();
    let failed_to: Vec<Captured> = receiver
        .requests(&path)
        .into_iter()
        .filter(|r| r.answered == 503)
        .collect();
    assert!(
        failed_to
            .iter()
            .any(|r| r.header("webhook-id") == Some(second.as_str())),
        "{name}: the program reported {second} failed; the receiver answered 503 to {:?}",
        failed_to
            .iter()
            .map(|r| r.header("webhook-id"))
            .collect::<Vec<_>>()
    );
    let endpoints = endpoints_of(api, TENANT).await;
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    let endpoint_id = endpoints[0]["id"].as_str().expect("id").to_owned();
    let log = api
        .get(&format!(
            "/v1/tenants/{TENANT}/endpoints/{endpoint_id}/attempts?outcome=failed"
        ))
        .await;
    assert_eq!(log.status, 200, "{}", log.text);
    assert!(
        log.json["items"].as_array().is_some_and(|items| items
            .iter()
            .any(|a| a["event_id"] == second.as_str() && a["status"] == 503)),
        "{name}: the endpoint's log, read by this test, lacks the outage's 503: {}",
        log.text
    );

    // 4: the receiver is back; the program recovers.
    receiver.set(&path, Behavior::Always(Reply::status(200)));
    let recovered_at: DateTime<Utc> = Utc::now();
    program.enter().await;
    let (ok, out, err) = program.end().await;
    assert!(ok, "the {name} quick start failed:\n{out}\n{err}");
    assert_eq!(
        word_after(&out, "recovered:"),
        Some(second.as_str()),
        "{out}"
    );
    let after: Vec<Captured> = receiver
        .requests(&path)
        .into_iter()
        .filter(|r| r.at >= recovered_at && r.answered == 200)
        .collect();
    assert!(
        after
            .iter()
            .any(|r| r.header("webhook-id") == Some(second.as_str())),
        "{name}: no delivery of {second} after the recovery"
    );
    // The recovery delivered it, not a scheduled retry (TIME_SCALE): a resend's replay
    // count is above the first budget's.
    let event = api
        .get(&format!("/v1/tenants/{TENANT}/events/{second}"))
        .await;
    let delivery = &event.json["deliveries"][0];
    assert_eq!(delivery["state"], "delivered", "{}", event.text);
    assert!(
        delivery["replay_count"].as_u64() >= Some(1),
        "{}",
        event.text
    );

    // Every request the receiver got, verified independently with the printed secret.
    let all = receiver.requests(&path);
    for (request, verdict) in all.iter().zip(verify_in(lang, &secret, &all)) {
        assert_eq!(
            verdict,
            json!(true),
            "{name}: a request to the receiver did not verify ({:?}, {})",
            request.header("webhook-id"),
            request.answered
        );
    }

    // 5: the portal link opens: its page holds the button, which opens the session.
    let link = word_after(&out, "portal:")
        .unwrap_or_else(|| panic!("no portal link printed:\n{out}"))
        .to_owned();
    let mut browser = PortalClient::new(&api.base);
    let page = browser.get(&link).await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(
        page.html.contains("id=\"open\"") && page.html.contains("Open the portal"),
        "{}",
        page.html
    );
    let opened = browser.open(&link).await;
    assert_eq!(opened.status, 303, "{}", opened.html);
    let endpoints_page = browser.get("/portal/endpoints").await;
    assert_eq!(endpoints_page.status, 200);
    assert!(
        endpoints_page.html.contains(&endpoint_id),
        "{}",
        endpoints_page.html
    );

    // The documented refusal: a URL Tern will not send to, its problem's detail and field
    // shown, the program ended with an error.
    let mut refused = start(lang, &dir.0, &environment(api, "ftp://127.0.0.1/hook"));
    drop(refused.stdin.take());
    let (ok, out, err) = refused.end().await;
    assert!(!ok, "{name}: a refused URL ended well:\n{out}\n{err}");
    assert!(
        err.contains("refused: ") && err.contains("(field url)"),
        "{name}: the refusal's detail and field are not shown:\n{out}\n{err}"
    );

    eprintln!(
        "{name}: refused as documented: {}",
        err.lines().find(|l| l.contains("refused: ")).unwrap_or("")
    );
    eprintln!(
        "{name}: delivered {first}, 503 to {second} during the outage, recovered, {} requests verified, portal opened",
        all.len()
    );
    clear(api, TENANT).await;
}

/// Runs the "Sign and call" blocks of clients/README.md in `lang` as one program; checks
/// what they made.
async fn sign_and_call(lang: Lang, api: &ApiClient, receiver: &Receiver) {
    let name = lang.name();
    let readme = read("clients/README.md");
    let source = program(section(&readme, "Sign and call"), lang.fences());
    let path = format!("/{name}/sign-and-call");
    let dir = user_project(lang, "sign-and-call", &source);
    let mut env = environment(api, &receiver.url(&path));
    env.push(("CUSTOMER_API_KEY", "k-documented".to_owned()));
    env.push(("CUSTOMER_TOKEN", "t-documented".to_owned()));
    let mut running = start(lang, &dir.0, &env);
    drop(running.stdin.take());
    let (ok, out, err) = running.end().await;
    assert!(
        ok,
        "the {name} 'Sign and call' blocks failed:\n{out}\n{err}"
    );
    // Three endpoints: the facade's create, the one with receiver settings, the raw call's.
    let endpoints = endpoints_of(api, TENANT).await;
    assert_eq!(endpoints.len(), 3, "{endpoints:?}");
    let configured = endpoints
        .iter()
        .find(|e| e["auth"]["type"] == "bearer")
        .unwrap_or_else(|| panic!("no endpoint with the bearer token: {endpoints:?}"));
    assert_eq!(configured["signatures"], "both");
    // Header names are kept lowercase (HTTP's are case-insensitive).
    assert_eq!(
        configured["headers"][0]["name"], "x-api-key",
        "{configured}"
    );
    assert_eq!(
        configured["headers"][0]["value"],
        Value::Null,
        "{configured}"
    );
    assert_eq!(configured["headers"][1]["value"], "eu", "{configured}");
    clear(api, TENANT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_quick_starts_and_calls_run_against_local_mode() {
    // The toolchains first, so a missing one is reported before anything starts.
    venv_python();
    build_ts_package();
    let (mut local, _rx) = deployment(
        "quickstart",
        LocalOptions {
            time_scale: TIME_SCALE,
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
    let receiver = Receiver::start().await.expect("receiver");

    for lang in [Lang::Python, Lang::TypeScript] {
        quick_start(lang, &api, &receiver).await;
        sign_and_call(lang, &api, &receiver).await;
    }
}

// ------------------------------------------------------------------ compared with Svix

/// The formatter's output for `source` (`ruff format` / `prettier`, default settings,
/// no configuration file).
fn formatted(lang: Lang, source: &str) -> String {
    let mut command = match lang {
        Lang::Python => {
            let ruff = root().join(".venv/bin/ruff");
            assert!(
                ruff.is_file(),
                "ruff is missing ({}): run `make venv`",
                ruff.display()
            );
            let mut c = std::process::Command::new(ruff);
            c.args([
                "format",
                "--isolated",
                "--stdin-filename",
                "quickstart.py",
                "-",
            ]);
            c
        }
        Lang::TypeScript => {
            let mut c = std::process::Command::new("node");
            c.current_dir(ts_package()).args([
                "node_modules/prettier/bin/prettier.cjs",
                "--no-config",
                "--stdin-filepath",
                "quickstart.mts",
            ]);
            c
        }
    };
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the formatter starts");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(source.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("the formatter ends");
    assert!(
        out.status.success(),
        "the formatter refused the program: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The count the doc's table states for `row` (`| Python | 37 | 52 |`): (Tern, Svix).
fn stated(doc: &str, row: &str) -> (usize, usize) {
    let line = doc
        .lines()
        .find(|l| l.starts_with(&format!("| {row} |")))
        .unwrap_or_else(|| panic!("no `| {row} |` row in docs/compared-to-svix.md"));
    let cells: Vec<usize> = line
        .split('|')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    match cells[..] {
        [tern, svix] => (tern, svix),
        _ => panic!("the row `{line}` does not hold two counts"),
    }
}

#[test]
fn the_quick_starts_are_shorter_than_svix_and_formatted_alike() {
    let doc = read("docs/compared-to-svix.md");
    let blocks = fences(&doc);
    for (lang, row) in [(Lang::Python, "Python"), (Lang::TypeScript, "TypeScript")] {
        let tag = match lang {
            Lang::Python => "python",
            Lang::TypeScript => "ts",
        };
        let one = |who: &str| {
            let found: Vec<&Fence> = blocks
                .iter()
                .filter(|f| f.info == format!("{tag} {who}"))
                .collect();
            assert_eq!(
                found.len(),
                1,
                "one ```{tag} {who} block in docs/compared-to-svix.md"
            );
            found[0].body.clone()
        };
        let (tern, svix) = (one("tern"), one("svix"));
        assert_eq!(
            tern,
            lang.quick_start(),
            "the {row} Tern program of docs/compared-to-svix.md is not {}'s quick start",
            lang.readme()
        );
        for (who, source) in [("Tern", &tern), ("Svix", &svix)] {
            assert_eq!(
                formatted(lang, source),
                *source,
                "the {row} {who} program is not formatted as the doc says"
            );
        }
        let (tern_lines, svix_lines) = (
            code_lines(&tern, lang.comment()),
            code_lines(&svix, lang.comment()),
        );
        assert_eq!(
            stated(&doc, row),
            (tern_lines, svix_lines),
            "docs/compared-to-svix.md states other counts for {row} than its programs have"
        );
        assert!(
            tern_lines < svix_lines,
            "the {row} quick start has {tern_lines} lines, Svix's {svix_lines}: not fewer"
        );
        eprintln!("{row}: Tern {tern_lines} lines, Svix {svix_lines}");
    }
}

#[test]
fn the_markdown_helpers_read_what_they_should() {
    let text = "intro\n```sh\nnpm i\n```\n## A\n```python x\nprint(1)\n# c\n\n```\n## B\n```ts\nlet a = 1;\n```\n";
    let all = fences(text);
    assert_eq!(all.len(), 3);
    assert_eq!(all[1].lang(), "python");
    assert_eq!(all[1].info, "python x");
    assert_eq!(all[1].body, "print(1)\n# c\n\n");
    assert_eq!(
        program(section(text, "A"), &["python"]),
        "print(1)\n# c\n\n"
    );
    assert!(!section(text, "A").contains("let a"));
    assert_eq!(program(section(text, "B"), &["ts"]), "let a = 1;\n");
    assert_eq!(code_lines("print(1)\n# c\n\n  x = 1  # y\n", "#"), 2);
}
