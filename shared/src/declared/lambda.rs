//! The `lambda` target: one synchronous invocation of a function per step, through the
//! host's [`LambdaInvoker`] (on AWS, the signed Invoke caller in `aws::invoke`).

use std::sync::Arc;

use async_trait::async_trait;

use super::target::{CallLimits, LambdaInvoker, Target, TargetError};

/// The `lambda` target: a synchronous invocation of a function per step.
pub struct LambdaTarget {
    /// The function's name or ARN.
    pub function: String,
    /// Who invokes it.
    pub invoker: Arc<dyn LambdaInvoker>,
}

#[async_trait]
impl Target for LambdaTarget {
    async fn call(&self, request: Vec<u8>, limits: CallLimits) -> Result<Vec<u8>, TargetError> {
        self.invoker.invoke(&self.function, request, limits).await
    }
}
