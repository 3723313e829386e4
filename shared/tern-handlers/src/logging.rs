//! Logging set-up shared by the Lambda binaries, local mode and the tests, so that no
//! verbosity setting can print an endpoint secret.
//!
//! Tern's own log lines never hold a secret (`Secret`'s `Debug` is redacted and no
//! handler logs a header value or an endpoint record). The AWS SDK is the risk: at TRACE
//! level `aws_smithy_runtime` prints whole HTTP response bodies and deserialized outputs,
//! and a DynamoDB `GetItem`/`Query` of the endpoints table carries the `whsec_` secrets.
//! [`guard`] drops those events whatever `RUST_LOG` asks for.

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{FilterFn, filter_fn};
use tracing_subscriber::layer::SubscriberExt as _;
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

/// The Lambda binaries' subscriber: JSON lines on stdout (CloudWatch Logs), verbosity
/// from `RUST_LOG` (default: errors only), and the [`guard`].
pub fn init_lambda() {
    tracing_subscriber::registry()
        .with(guard())
        .with(tracing_subscriber::EnvFilter::from_default_env())
        .with(tracing_subscriber::fmt::layer().json())
        .init();
}
