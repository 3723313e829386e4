//! Deadlines and retries for every AWS call Tern makes.
//!
//! Without them the SDK waits as long as a connection stays open: a DynamoDB, SQS or Step
//! Functions endpoint that accepts a connection and never answers would hold a sender batch
//! until Lambda's function timeout killed it, with no message reported. With them a stalled
//! call fails after [`OPERATION_TIMEOUT`] as a [`tern_core::ports::PortError::Unavailable`],
//! and only the messages (or the stream record) it served are reported in
//! `batchItemFailures`.
//!
//! The numbers, and why they fit each function's timeout (`infra/settings.json`):
//! - sender (60 s): it plans against the invocation's deadline with these numbers
//!   (`tern_handlers::deadline`, [`crate::wiring::sender_time_reserve`]): a message starts
//!   only when its claim, the longest attempt deadline (30 s,
//!   `tern_core::endpoint::MAX_TIMEOUT_MS`), two carrying writes, the deferral flush and
//!   1 s for the answer fit: 4 × 6 + 30 + 1 = 55 s < 60 s. The writes for people after
//!   the POST are cut off rather than let the batch run past its deadline; the markers
//!   (delivered, finished) are tried again for up to 6 s when throttled, within that
//!   (`tern_handlers::markers`, which shows how that fits the claim's lease).
//! - relay (30 s): records are handled in order and the relay stops at the first failed one,
//!   so a stall costs one operation timeout: 6 s < 30 s. It also plans against the
//!   invocation's deadline (`tern_handlers::relay_send`): no `SendMessageBatch` starts in
//!   the last 8 s, calls in flight are abandoned 5 s before (more than one 2 s try), parks
//!   end 3 s before and the fan-out checkpoint 1 s before.
//! - replay (300 s): its drain loop stops at the first failed call: 6 s.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;

/// Time to open a connection to an AWS endpoint: 2 s. In-region connects take
/// milliseconds; the SDK's own default is 3.1 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Deadline of one try of a call (connect, send, whole response): 2 s. DynamoDB and SQS
/// answer in milliseconds; a try that takes seconds is stalled, and a fresh try is better.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// Deadline of a whole call, its retries and their backoff included: 6 s.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(6);

/// Tries per call, the first included: 3 (the SDK's standard retry mode, exponential
/// backoff with jitter, throttling and transient errors only), all within
/// [`OPERATION_TIMEOUT`].
pub const MAX_ATTEMPTS: u32 = 3;

/// The timeouts above, as the SDK takes them.
pub fn timeout_config() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(ATTEMPT_TIMEOUT)
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
}

/// The retry policy above, as the SDK takes it.
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS)
}

/// `aws` with Tern's deadlines and bounded retries. Every client the wiring builds (and the
/// `tern` tool's) comes from a config passed through here.
pub fn bounded(aws: &SdkConfig) -> SdkConfig {
    aws.to_builder()
        .timeout_config(timeout_config())
        .retry_config(retry_config())
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_config_carries_every_deadline() {
        let aws = SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let bounded = bounded(&aws);
        let timeouts = bounded.timeout_config().expect("timeouts set");
        assert_eq!(timeouts.connect_timeout(), Some(CONNECT_TIMEOUT));
        assert_eq!(timeouts.operation_attempt_timeout(), Some(ATTEMPT_TIMEOUT));
        assert_eq!(timeouts.operation_timeout(), Some(OPERATION_TIMEOUT));
        let retry = bounded.retry_config().expect("retry set");
        assert_eq!(retry.max_attempts(), MAX_ATTEMPTS);
        // A try must fit the call's deadline more than once, or retries never happen.
        assert!(ATTEMPT_TIMEOUT * 2 < OPERATION_TIMEOUT);
    }
}
