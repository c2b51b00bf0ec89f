//! The `lambda` target's invoker: a synchronous `Invoke` (`RequestResponse`) per step with the
//! SDK's Lambda client, built at first use. The step protocol retries (with its own back-off,
//! parked between tries), so the SDK's retries are off: a throttle is reported at once rather
//! than retried twice over. Endpoints follow the SDK's settings (`AWS_ENDPOINT_URL_LAMBDA`),
//! which is how the tests' emulated Invoke API is reached.

use async_trait::async_trait;
use aws_sdk_lambda::error::SdkError;
use aws_sdk_lambda::operation::invoke::InvokeError;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;

use super::FirstUse;
use crate::declared::{CallLimits, LambdaInvoker, TargetError};

/// Invokes functions with the SDK.
pub struct SdkInvoker {
    client: FirstUse<aws_sdk_lambda::Client>,
}

impl SdkInvoker {
    /// An invoker over `sdk`'s settings; the client is built at the first invocation.
    pub fn new(sdk: aws_config::SdkConfig) -> Self {
        Self {
            client: FirstUse::new(move || {
                let config = aws_sdk_lambda::config::Builder::from(&sdk)
                    .retry_config(aws_config::retry::RetryConfig::disabled())
                    .timeout_config(
                        aws_config::timeout::TimeoutConfig::builder()
                            .connect_timeout(std::time::Duration::from_secs(3))
                            .build(),
                    )
                    .build();
                aws_sdk_lambda::Client::from_conf(config)
            }),
        }
    }
}

#[async_trait]
impl LambdaInvoker for SdkInvoker {
    async fn invoke(
        &self,
        function: &str,
        payload: Vec<u8>,
        limits: CallLimits,
    ) -> Result<Vec<u8>, TargetError> {
        let out = self
            .client
            .invoke()
            .function_name(function)
            .invocation_type(InvocationType::RequestResponse)
            .payload(Blob::new(payload))
            .customize()
            .config_override(
                aws_sdk_lambda::config::Builder::default().timeout_config(
                    aws_config::timeout::TimeoutConfig::builder()
                        .operation_timeout(limits.timeout)
                        .build(),
                ),
            )
            .send()
            .await
            .map_err(invoke_error)?;
        if out.function_error().is_some() {
            return Err(TargetError::FunctionError);
        }
        let body = out.payload.map(Blob::into_inner).unwrap_or_default();
        if body.len() > limits.max_answer_bytes {
            return Err(TargetError::TooLarge(limits.max_answer_bytes));
        }
        Ok(body)
    }
}

/// What an `Invoke` error means for the step (docs/step-protocol.md, "Transports"): throttles,
/// timeouts, broken connections and the service's 5xx are retried; the rest are the
/// deployment's mistakes (no such function, no permission, a payload too large) and fail the
/// task at once.
fn invoke_error(e: SdkError<InvokeError, aws_smithy_runtime_api::http::Response>) -> TargetError {
    match &e {
        SdkError::TimeoutError(_) => TargetError::Timeout,
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => TargetError::Unreachable,
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            match se.err() {
                InvokeError::TooManyRequestsException(_)
                | InvokeError::Ec2ThrottledException(_) => TargetError::Throttled,
                InvokeError::ResourceNotFoundException(_) => {
                    TargetError::InvokeRefused("no such function")
                }
                InvokeError::RequestTooLargeException(_) => {
                    TargetError::InvokeRefused("request too large")
                }
                _ if status == 403 => TargetError::InvokeRefused("access denied"),
                _ if status == 429 => TargetError::Throttled,
                _ if status >= 500 => TargetError::Unreachable,
                _ => TargetError::InvokeRefused("refused"),
            }
        }
        _ => TargetError::Unreachable,
    }
}
