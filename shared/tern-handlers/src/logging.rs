//! Logging set-up shared by the Lambda binaries, local mode and the tests, so that no
//! verbosity setting can print an endpoint secret.
//!
//! Tern's own log lines never hold a secret (`Secret`'s `Debug` is redacted and no
//! handler logs a header value or an endpoint record). The AWS SDK is the risk: at TRACE
//! level `aws_smithy_runtime` prints whole HTTP response bodies and deserialized outputs,
//! and a DynamoDB `GetItem`/`Query` of the endpoints table carries the `whsec_` secrets.
//! [`guard`] drops those events whatever `RUST_LOG` asks for.

use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterFn, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Target prefixes of the AWS SDK runtime whose TRACE events print request and response
/// bodies.
pub const BODY_LOGGING_TARGETS: [&str; 2] = ["aws_smithy", "aws_sdk_"];

/// True when an event or span may be logged: anything at DEBUG or above, and TRACE from
/// every target except the AWS SDK runtime's (see [`BODY_LOGGING_TARGETS`]).
pub fn is_safe(meta: &Metadata<'_>) -> bool {
    *meta.level() != Level::TRACE
        || !BODY_LOGGING_TARGETS
            .iter()
            .any(|p| meta.target().starts_with(p))
}

/// A filter layer applying [`is_safe`]. Add it to every subscriber, next to the
/// `RUST_LOG` filter: both must let an event through.
pub fn guard() -> FilterFn<fn(&Metadata<'_>) -> bool> {
    filter_fn(is_safe as fn(&Metadata<'_>) -> bool)
}

/// The Lambda binaries' line format: one JSON object per line, each field once.
///
/// The Lambda runtime runs every invocation inside a `Lambda runtime invoke` span that
/// holds `requestId` (and `xrayTraceId` when tracing is on). tracing-subscriber's JSON
/// format prints by default both the current span (`"span"`) and the list of enclosing
/// spans (`"spans"`), so that span, and the request id, appeared twice on every line.
/// Only the list is kept: it names every enclosing span once, innermost last.
pub fn json_layer<S, W>(writer: W) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(false)
        .with_span_list(true)
        .with_writer(writer)
}

/// The Lambda binaries' subscriber: JSON lines on stdout (CloudWatch Logs, format
/// [`json_layer`]), verbosity from `RUST_LOG` (default: errors only), and the [`guard`].
pub fn init_lambda() {
    tracing_subscriber::registry()
        .with(guard())
        .with(tracing_subscriber::EnvFilter::from_default_env())
        .with(json_layer(std::io::stdout))
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn a_line_inside_the_lambda_span_carries_the_request_id_once() {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(json_layer(buffer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            // The span the Lambda runtime opens (lambda_runtime::layers::trace::request_span).
            let span = tracing::info_span!(
                "Lambda runtime invoke",
                requestId = "8476a536-e9f4-11e8-9739-2dfe598c3fcd",
                xrayTraceId = "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700"
            );
            let _entered = span.enter();
            tracing::info!(delivery_id = "dlv_1", attempt = 1, "attempt");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(
            text.matches("8476a536-e9f4-11e8-9739-2dfe598c3fcd").count(),
            1,
            "{text}"
        );
        assert_eq!(text.matches("Root=1-").count(), 1, "{text}");
        assert_eq!(
            line["spans"][0]["requestId"], "8476a536-e9f4-11e8-9739-2dfe598c3fcd",
            "{text}"
        );
        assert_eq!(line["fields"]["delivery_id"], "dlv_1", "{text}");
    }
}
