//! `tern local` through the real binary (built with the `local` feature:
//! `cargo test -p tern-cli --features local --test local_mode`): it says what it is doing,
//! its `.tern/local.env` is enough on its own (region for the AWS CLI and boto3 too), the
//! first step of the local-mode walkthrough (README, docs/local-mode.md) works from that
//! file, and once it stops the same file
//! gets "is `tern local` running?". Everything stays on 127.0.0.1.
#![cfg(feature = "local")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;

/// Safety net so a broken start fails the test instead of hanging it; not a speed check.
const START_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tern(dir: &std::path::Path, env: &[(String, String)], args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("tern runs")
}

/// Stops the `tern local` this test started (by its pid) when the test ends, pass or fail.
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

#[test]
fn tern_local_reports_progress_and_its_env_file_is_enough() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tern-local-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let moto = workspace().join(".venv/bin/moto_server");
    assert!(
        moto.is_file(),
        "moto is required: run `make venv` ({})",
        moto.display()
    );
    let child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["local", "--time-scale", "0.01"])
        .current_dir(&dir)
        .env("TERN_MOTO_SERVER", &moto)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tern local starts");
    let mut child = Stop(child);
    let (tx, rx) = mpsc::channel::<String>();
    for stream in [
        Box::new(child.0.stderr.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.0.stdout.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    // stderr (status lines) and stdout (the banner) are read by two threads: wait for all.
    let expected = [
        "starting moto",
        "creating the tables and queues",
        "starting the stream and queue pollers",
        "Local mode is running",
        "Press Ctrl-C to stop.",
    ];
    let mut said: Vec<String> = Vec::new();
    while !expected.iter().all(|e| said.iter().any(|l| l.contains(e))) {
        match rx.recv_timeout(START_LIMIT) {
            Ok(line) => said.push(line),
            Err(e) => {
                panic!("tern local did not start ({e}); it said: {said:#?}");
            }
        }
    }
    let joined = said.join("\n");
    assert!(
        joined.contains("--schedule short") && joined.contains("RUST_LOG"),
        "{joined}"
    );
    // The customer portal link of the demo tenant: loading it spends nothing and shows its
    // button; the button's post opens it (once), setting the session cookie and leaving for
    // the endpoints page.
    let link = joined
        .lines()
        .find(|l| l.contains("Customer portal of tenant tnt_demo"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("no portal link in: {joined}"))
        .to_owned();
    let rest = link
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{link}"));
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    assert!(path.starts_with("/portal/start?token=v1."), "{link}");
    use std::io::{Read as _, Write as _};
    let send = |request: String| {
        let mut stream = std::net::TcpStream::connect(host).expect("the local API listens");
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    let page = send(format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    ));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("id=\"open\""), "{page}");
    assert!(!page.to_ascii_lowercase().contains("set-cookie"), "{page}");
    let token = path
        .split_once("token=")
        .map(|(_, t)| t)
        .unwrap_or_default();
    let form = format!("token={token}");
    let answer = send(format!(
        "POST /portal/start HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    ));
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("set-cookie: __host-tern-portal="),
        "{answer}"
    );

    // Local mode's OTLP collector: a span another program exports (OTLP/HTTP protobuf, an
    // ExportTraceServiceRequest of one span, encoded by hand) lands in .tern/spans.jsonl.
    let collector = joined
        .lines()
        .find(|l| l.contains("OTLP/HTTP collector for your program's spans"))
        .and_then(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with("http://127.0.0.1:"))
        })
        .unwrap_or_else(|| panic!("no collector address in: {joined}"))
        .to_owned();
    let collector_host = collector.trim_start_matches("http://").to_owned();
    let span = {
        let mut b = vec![0x0a, 16];
        b.extend([0x4b; 16]); // trace id
        b.extend([0x12, 8]);
        b.extend([0x5a; 8]); // span id
        let name = b"collected-by-tern-local";
        b.extend([0x2a, name.len() as u8]);
        b.extend(name);
        b
    };
    let wrap = |tag: u8, inner: Vec<u8>| {
        let mut b = vec![tag, inner.len() as u8];
        b.extend(inner);
        b
    };
    // Span in ScopeSpans.spans (2), in ResourceSpans.scope_spans (2), in
    // ExportTraceServiceRequest.resource_spans (1).
    let export = wrap(0x0a, wrap(0x12, wrap(0x12, span)));
    let mut stream = std::net::TcpStream::connect(&collector_host).expect("the collector listens");
    stream
        .write_all(
            format!(
                "POST /v1/traces HTTP/1.1\r\nHost: {collector_host}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                export.len()
            )
            .as_bytes(),
        )
        .unwrap();
    stream.write_all(&export).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let spans = std::fs::read_to_string(dir.join(".tern/spans.jsonl")).unwrap_or_default();
    assert!(
        spans.contains("\"name\":\"collected-by-tern-local\"") && spans.contains(&"4b".repeat(16)),
        "{spans}"
    );

    // The env file alone: `export K='V'` lines.
    let text = std::fs::read_to_string(dir.join(".tern/local.env")).unwrap();
    let env: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("AWS_DEFAULT_REGION"), Some("us-east-1"), "{text}");
    assert_eq!(get("AWS_REGION"), Some("us-east-1"));
    assert!(get("AWS_ACCESS_KEY_ID").is_some() && get("AWS_SECRET_ACCESS_KEY").is_some());
    let url = get("AWS_ENDPOINT_URL").unwrap().to_owned();

    // The walkthrough's first step, from the file alone: it prints the secret.
    let out = tern(
        &dir,
        &env,
        &[
            "endpoints",
            "add",
            "--tenant",
            "tnt_me",
            "--url",
            "http://127.0.0.1:8000/hook",
            "--schedule",
            "short",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("signing secret (shown once"));

    // Stop it (the process this test started), then the same file is stale.
    drop(child);
    let out = tern(&dir, &env, &["dlq"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&url) && err.contains("is `tern local` running?"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
