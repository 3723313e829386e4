//! A Tern webhook receiver with nothing but `std`, `tern-receiver` and `serde_json` (to read
//! the event type from a `standard_webhooks` body).
//!
//! ```text
//! TERN_WEBHOOK_SECRET=whsec_... [TERN_PAYLOAD_FORMAT=raw|standard_webhooks] \
//!     cargo run -p tern-receiver --example receiver -- [PORT]
//! ```
//!
//! PORT defaults to `$PORT`, else 8000; it listens on `$HOST`, else 127.0.0.1.
//! `TERN_PAYLOAD_FORMAT` is the endpoint's payload format in Tern (default `raw`). The HTTP
//! handling is deliberately minimal (one request per connection, `content-length` bodies
//! only) to keep the example small; in a real service use your framework and keep the
//! steps of `handle`. `examples/receivers/rust.md` shows the same with axum.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;

use tern_receiver::{Verifier, header};

const MAX_BODY_BYTES: usize = 1024 * 1024;
const MAX_HEADER_LINES: usize = 100;

/// The endpoint's payload format in Tern, as `TERN_PAYLOAD_FORMAT` names it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PayloadFormat {
    /// The body is the application's payload; the type is in `webhook-event-type`.
    Raw,
    /// The body is `{"type","timestamp","data"}`; `data` is the application's payload.
    StandardWebhooks,
}

/// One accepted event, for the worker.
struct Work {
    id: String,
    event_type: Option<String>,
    body: Vec<u8>,
}

struct App {
    verifier: Verifier,
    format: PayloadFormat,
    /// Event ids already accepted. In-memory, so lost on restart and unbounded: in production
    /// use a durable store with a TTL (a table with a unique key on the id, Redis `SET NX EX`,
    /// DynamoDB with a conditional put and TTL), keeping ids longer than Tern's retry window
    /// plus the time within which you might replay.
    seen: Mutex<HashSet<String>>,
    work: Mutex<Sender<Work>>,
}

/// Your business logic. Runs on a worker thread, after the 200 has been sent.
fn process(work: &Work) {
    println!(
        "processing {} type={} ({} bytes)",
        work.id,
        work.event_type.as_deref().unwrap_or("None"),
        work.body.len()
    );
}

/// The event type: from the signed body's `type` for `standard_webhooks` (`None` when the
/// body is not such an envelope), from the unsigned `webhook-event-type` header for raw
/// payloads (`Some(None)` when it is absent).
fn event_type(
    format: PayloadFormat,
    headers: &[(String, String)],
    body: &[u8],
) -> Option<Option<String>> {
    match format {
        PayloadFormat::StandardWebhooks => {
            let envelope: serde_json::Value = serde_json::from_slice(body).ok()?;
            envelope.get("data")?;
            Some(Some(envelope.get("type")?.as_str()?.to_owned()))
        }
        PayloadFormat::Raw => Some(
            headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(header::WEBHOOK_EVENT_TYPE))
                .map(|(_, value)| value.clone()),
        ),
    }
}

/// The steps: raw body, verify, learn the type, dedupe, acknowledge fast.
fn handle(app: &App, headers: &[(String, String)], body: Vec<u8>) -> (u16, String) {
    // 1-2. Verify over the raw bytes: headers in any case, several v1 entries, 300 s
    // tolerance both ways, constant-time comparison.
    let webhook = match app.verifier.verify_now(headers, &body) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("rejected: {e}");
            return (400, r#"{"error":"invalid signature"}"#.to_owned());
        }
    };
    // 3. The event type: from the signed body for standard_webhooks, never from the
    // unsigned header. A body of the wrong shape is a 400: Tern retries, then dead-letters
    // it (replayable once the two settings agree).
    let Some(event_type) = event_type(app.format, headers, &body) else {
        eprintln!("rejected: not a standard_webhooks body");
        return (
            400,
            r#"{"error":"expected a standard_webhooks body"}"#.to_owned(),
        );
    };
    // 4. Dedupe on webhook-id (the same on every retry and replay).
    let first_time = app
        .seen
        .lock()
        .map(|mut seen| seen.insert(webhook.id.clone()))
        .unwrap_or(false);
    if !first_time {
        return (
            200,
            format!(r#"{{"status":"duplicate","id":"{}"}}"#, webhook.id),
        );
    }
    // 5. Hand the work off and answer at once.
    if let Ok(work) = app.work.lock() {
        let _ = work.send(Work {
            id: webhook.id.clone(),
            event_type,
            body,
        });
    }
    (
        200,
        format!(r#"{{"status":"accepted","id":"{}"}}"#, webhook.id),
    )
}

fn serve(app: &App, stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let is_post = line.starts_with("POST ");
    let mut headers = Vec::new();
    let mut length: Option<usize> = None;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || headers.len() > MAX_HEADER_LINES {
            return Ok(());
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        if let Some((name, value)) = l.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok();
            }
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
    }
    let (status, reply) = match (is_post, length) {
        (false, _) => (405, r#"{"error":"POST only"}"#.to_owned()),
        (true, None) => (411, r#"{"error":"content-length required"}"#.to_owned()),
        (true, Some(n)) if n > MAX_BODY_BYTES => (413, r#"{"error":"body too large"}"#.to_owned()),
        (true, Some(n)) => {
            let mut body = vec![0; n];
            reader.read_exact(&mut body)?;
            handle(app, &headers, body)
        }
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        405 => "Method Not Allowed",
        411 => "Length Required",
        _ => "Payload Too Large",
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    )?;
    out.flush()
}

fn main() {
    let secret = std::env::var("TERN_WEBHOOK_SECRET").unwrap_or_default();
    let verifier = match Verifier::new(&secret) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("TERN_WEBHOOK_SECRET: {e}");
            std::process::exit(2);
        }
    };
    let port = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PORT").ok())
        .unwrap_or_else(|| "8000".to_owned());
    let host = std::env::var("HOST").unwrap_or_else(|_| "127.0.0.1".to_owned());
    let format = match std::env::var("TERN_PAYLOAD_FORMAT").as_deref() {
        Err(_) | Ok("raw") => PayloadFormat::Raw,
        Ok("standard_webhooks") => PayloadFormat::StandardWebhooks,
        Ok(_) => {
            eprintln!("TERN_PAYLOAD_FORMAT must be raw or standard_webhooks");
            std::process::exit(2);
        }
    };

    let (tx, rx) = channel::<Work>();
    thread::spawn(move || {
        for work in rx {
            process(&work);
        }
    });
    let app = Arc::new(App {
        verifier,
        format,
        seen: Mutex::new(HashSet::new()),
        work: Mutex::new(tx),
    });
    let listener = match TcpListener::bind(format!("{host}:{port}")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bind {host}:{port}: {e}");
            std::process::exit(2);
        }
    };
    println!("listening on http://{host}:{port}/");
    for stream in listener.incoming().flatten() {
        let app = Arc::clone(&app);
        thread::spawn(move || {
            if let Err(e) = serve(&app, stream) {
                eprintln!("connection: {e}");
            }
        });
    }
}
