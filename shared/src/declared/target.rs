//! Where a declared tool's steps run: the [`Target`] port, what can go wrong with it, and what a
//! host lends the targets it builds (an AWS Lambda client; whether programs may be started).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

/// Bounds of one call.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    /// How long to wait for the answer.
    pub timeout: Duration,
    /// The largest answer read; more is [`TargetError::TooLarge`].
    pub max_answer_bytes: usize,
}

/// Why a call to a target gave no answer, as the task's failure message says it (`Tool X
/// failed: its target timed out (5 tries)`): no variant carries what the target sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// No answer within the step's timeout.
    #[error("its target timed out")]
    Timeout,
    /// The target said it is overloaded (HTTP 429, Lambda throttling).
    #[error("its target was throttled")]
    Throttled,
    /// HTTP: a status other than 200 (5xx are retried, others not).
    #[error("its target answered HTTP {0}")]
    Status(u16),
    /// The connection failed or broke.
    #[error("its target could not be reached")]
    Unreachable,
    /// Lambda: the function raised an error (`X-Amz-Function-Error`).
    #[error("its target's function failed")]
    FunctionError,
    /// Lambda: the Invoke API refused the call (no such function, access denied, …).
    #[error("its target could not be invoked ({0})")]
    InvokeRefused(&'static str),
    /// A command exited with a non-zero status, or was killed by a signal (`None`).
    #[error("{}", match .0 { Some(c) => format!("its target exited with status {c}"), None => "its target was killed by a signal".to_owned() })]
    Exited(Option<i32>),
    /// A command could not be started.
    #[error("its target could not be started")]
    NotStarted,
    /// The answer was longer than the tool allows.
    #[error("its target answered more than {0} bytes")]
    TooLarge(usize),
    /// The secret the request carries (`secret_arn`) could not be read (the log says which
    /// and why); read again at the next try.
    #[error("its target's secret could not be read")]
    SecretUnavailable,
}

impl TargetError {
    /// Whether asking again may help (docs/step-protocol.md, "Transports").
    pub fn retried(&self) -> bool {
        match self {
            Self::Timeout
            | Self::Throttled
            | Self::Unreachable
            | Self::FunctionError
            | Self::Exited(_)
            | Self::SecretUnavailable => true,
            Self::Status(s) => *s >= 500,
            Self::InvokeRefused(_) | Self::NotStarted | Self::TooLarge(_) => false,
        }
    }
}

/// A place steps run. `call` may be dropped at any time (a cancel, the worker's deadline):
/// whatever it started is then abandoned (a command killed, a request dropped).
#[async_trait]
pub trait Target: Send + Sync + 'static {
    /// Sends one request; returns the answer's bytes.
    async fn call(&self, request: Vec<u8>, limits: CallLimits) -> Result<Vec<u8>, TargetError>;
}

/// Invokes AWS Lambda functions (the `aws` adapter implements it with the SDK's Lambda client;
/// tests with an emulated Invoke API).
#[async_trait]
pub trait LambdaInvoker: Send + Sync + 'static {
    /// A synchronous (`RequestResponse`) invocation of `function` with `payload`.
    async fn invoke(
        &self,
        function: &str,
        payload: Vec<u8>,
        limits: CallLimits,
    ) -> Result<Vec<u8>, TargetError>;
}

/// A source of environment variables.
pub type VarLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What the host that loads a manifest lends the targets it builds.
#[derive(Clone, Default)]
pub struct TargetHost {
    /// Whether `command` targets may run here (the local server: yes; Lambda: never).
    pub allow_commands: bool,
    /// The Lambda client for `lambda` targets (`None`: such a manifest refuses to load).
    pub lambda: Option<Arc<dyn LambdaInvoker>>,
    /// Where a relative command path, and a command's working directory, are taken from: the
    /// manifest file's directory.
    pub base_dir: Option<std::path::PathBuf>,
    /// Reads a secret named by the manifest (`secret_env`): the process environment by
    /// default; tests pass their own.
    pub env: Option<VarLookup>,
    /// Where the Secrets Manager secrets the manifest names (`secret_arn`) are read, each at
    /// the first call that needs it ([`LazySecrets`]): `Some` on Lambda (where an entry's
    /// `secret_arn` wins over its `secret_env`), `None` on the local server (which reads
    /// `secret_env` only).
    pub secrets: Option<LazySecrets>,
}

/// Reads one secret's string value by ARN (on Lambda, a Secrets Manager `GetSecretValue`);
/// `Err` says why (the ARN and the service's code, never a value), for the log.
pub type SecretFetch = Arc<
    dyn Fn(String) -> futures_util::future::BoxFuture<'static, Result<String, String>>
        + Send
        + Sync,
>;

/// The `secret_arn` values of a host, read through a [`SecretFetch`] at the first call that
/// needs each (never when the targets are built, so a cold start makes no call for them),
/// kept once read; a read that fails fails that call ([`TargetError::SecretUnavailable`],
/// retried as a step is) and is tried again at the next. `Debug` shows no value.
#[derive(Clone)]
pub struct LazySecrets {
    fetch: SecretFetch,
    read: Arc<
        std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::OnceCell<String>>>>,
    >,
}

impl std::fmt::Debug for LazySecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let read = self.read.lock().map(|m| m.len()).unwrap_or(0);
        write!(f, "LazySecrets({read} read)")
    }
}

impl LazySecrets {
    /// Secrets read through `fetch`.
    pub fn new(fetch: SecretFetch) -> Self {
        Self {
            fetch,
            read: Arc::default(),
        }
    }

    /// Secrets whose values are known (tests): an ARN not among them cannot be read.
    pub fn fixed(values: std::collections::HashMap<String, String>) -> Self {
        let values = Arc::new(values);
        Self::new(Arc::new(move |arn: String| {
            let value = values.get(&arn).cloned();
            Box::pin(async move { value.ok_or_else(|| format!("secret {arn} has no value")) })
        }))
    }

    /// The value of the secret `arn`: read now if it was not yet (concurrent callers wait for
    /// the same read), or kept from an earlier read. An empty value counts as unreadable.
    pub async fn value(&self, arn: &str) -> Result<String, String> {
        let cell = {
            let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
            read.entry(arn.to_owned()).or_default().clone()
        };
        cell.get_or_try_init(|| async {
            let value = (self.fetch)(arn.to_owned()).await?;
            match value.is_empty() {
                true => Err(format!("secret {arn} has an empty value")),
                false => Ok(value),
            }
        })
        .await
        .cloned()
    }
}

impl std::fmt::Debug for TargetHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetHost")
            .field("allow_commands", &self.allow_commands)
            .field("lambda", &self.lambda.is_some())
            .field("base_dir", &self.base_dir)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

impl TargetHost {
    /// The value of environment variable `name`, through [`TargetHost::env`].
    pub fn var(&self, name: &str) -> Option<String> {
        match &self.env {
            Some(f) => f(name),
            None => std::env::var(name).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_retried_and_how_it_reads() {
        assert!(TargetError::Status(503).retried());
        assert!(!TargetError::Status(404).retried());
        assert!(TargetError::Exited(Some(3)).retried());
        assert!(!TargetError::TooLarge(10).retried());
        assert_eq!(
            TargetError::Status(503).to_string(),
            "its target answered HTTP 503"
        );
        assert_eq!(
            TargetError::Exited(Some(3)).to_string(),
            "its target exited with status 3"
        );
        assert_eq!(
            TargetError::FunctionError.to_string(),
            "its target's function failed"
        );
    }
}
