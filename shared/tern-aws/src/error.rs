//! Maps AWS SDK errors onto the domain's [`PortError`]: a few codes mean "this input will
//! never be accepted" (Rejected); everything else, throttling and network errors first,
//! is worth retrying (Unavailable).

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use tern_core::ports::PortError;

/// Error codes that reject the input itself (SQS and DynamoDB API references).
const REJECTING_CODES: &[&str] = &[
    "InvalidMessageContents",
    "MessageTooLong",
    "InvalidParameterValue",
    "ValidationException",
    "ItemCollectionSizeLimitExceededException",
];

/// Classifies an SDK error.
pub fn port_error<E, R>(err: SdkError<E, R>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().map(str::to_owned);
    let text = match &err {
        SdkError::ServiceError(se) if se.err().code().is_some() => {
            format!(
                "{}: {}",
                se.err().code().unwrap_or_default(),
                se.err().message().unwrap_or("")
            )
        }
        other => aws_sdk_sqs::error::DisplayErrorContext(other).to_string(),
    };
    match code {
        Some(c) if REJECTING_CODES.contains(&c.as_str()) => PortError::Rejected(text),
        _ => PortError::Unavailable(text),
    }
}
