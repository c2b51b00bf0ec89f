//! Where a declared tool's steps run: the [`Target`] port, what can go wrong with it, and what a
//! host lends the targets it builds (an AWS Lambda client; whether programs may be started).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

/// Bounds of one call, and the trace it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    /// How long to wait for the answer.
    pub timeout: Duration,
    /// The largest answer read; more is [`TargetError::TooLarge`].
    pub max_answer_bytes: usize,
    /// The task's trace ([`TraceId::of_task`]); `None` for a synchronous call, which has no
    /// task (an HTTP step then starts a trace of its own).
    pub trace: Option<TraceId>,
}

/// A W3C trace id (16 bytes) for a task's steps where no X-Ray trace is at hand (the local
/// server): derived from the task id, so every step of a task, across restarts and
/// hand-overs, is in one trace (docs/step-protocol.md, "Trace context").
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TraceId(pub [u8; 16]);

impl TraceId {
    /// The first 16 bytes of the SHA-256 of `task_id`.
    pub fn of_task(task_id: &str) -> Self {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(task_id.as_bytes());
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        Self(id)
    }

    /// 32 lowercase hex digits.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TraceId({})", self.hex())
    }
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
    /// HTTP with `sigv4`: the request could not be signed (no credentials, no region).
    #[error("its request could not be signed ({0})")]
    Unsigned(&'static str),
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
            Self::InvokeRefused(_) | Self::NotStarted | Self::TooLarge(_) | Self::Unsigned(_) => {
                false
            }
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

/// Invokes AWS Lambda functions (the `aws` adapter implements it with signed Invoke requests;
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

/// Signs HTTP requests with AWS Signature Version 4 (the `aws` adapter implements it with the
/// standard credentials and region; an `http` target with `sigv4` needs one).
#[async_trait]
pub trait RequestSigner: Send + Sync + 'static {
    /// Adds `service`'s signature to `request` (as it is now: headers added later are not
    /// signed). The error says what is missing, never a credential.
    async fn sign(&self, service: &str, request: &mut reqwest::Request)
    -> Result<(), &'static str>;
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
    /// The Step Functions API for `step_functions` targets (`None`: such a manifest refuses to
    /// load).
    pub states: Option<Arc<dyn StatesApi>>,
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
    /// Signs the requests of `http` targets with `sigv4` (`None`: such a manifest refuses to
    /// load).
    pub signer: Option<Arc<dyn RequestSigner>>,
    /// The X-Ray trace header of the work being done (on AWS: the work message's, else the
    /// invocation's), which HTTP steps carry on; `None` on the local server.
    pub xray: Option<fn() -> Option<String>>,
    /// The scope that marks the processes of `command` steps (the local server's:
    /// [`leftovers::scope_of`](super::command::leftovers::scope_of) its data directory, so
    /// that it kills at start what its steps left when it was killed). `None`: a scope of
    /// this process alone.
    pub step_scope: Option<String>,
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
            .field("signer", &self.signer.is_some())
            .field("states", &self.states.is_some())
            .field("base_dir", &self.base_dir)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// A Lambda client and a Step Functions API that are never called: a host that checks a
/// manifest without running it ([`TargetHost::checking`]).
struct NotCalled;

#[async_trait]
impl LambdaInvoker for NotCalled {
    async fn invoke(&self, _: &str, _: Vec<u8>, _: CallLimits) -> Result<Vec<u8>, TargetError> {
        Err(TargetError::InvokeRefused(
            "a manifest check invokes nothing",
        ))
    }
}

#[async_trait]
impl StatesApi for NotCalled {
    async fn call(
        &self,
        _: &'static str,
        _: serde_json::Value,
        _: Duration,
    ) -> Result<serde_json::Value, StatesError> {
        Err(StatesError::Refused("NotCalled".into()))
    }
}

#[async_trait]
impl RequestSigner for NotCalled {
    async fn sign(&self, _: &str, _: &mut reqwest::Request) -> Result<(), &'static str> {
        Err("a manifest check signs nothing")
    }
}

impl TargetHost {
    /// A host with every kind of AWS target present but never called: what checking a
    /// manifest builds its tools over (commands still need their program, and secrets
    /// their variable, as when serving).
    pub fn checking() -> Self {
        Self {
            lambda: Some(Arc::new(NotCalled)),
            states: Some(Arc::new(NotCalled)),
            signer: Some(Arc::new(NotCalled)),
            ..Self::default()
        }
    }

    /// The value of environment variable `name`, through [`TargetHost::env`].
    pub fn var(&self, name: &str) -> Option<String> {
        match &self.env {
            Some(f) => f(name),
            None => std::env::var(name).ok(),
        }
    }
}

/// Why a Step Functions call gave no answer. Never carries what the service said beyond its
/// error code (an execution's `cause` is the workflow's own text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatesError {
    /// Throttled (`ThrottlingException`, HTTP 429).
    #[error("Step Functions throttled the call")]
    Throttled,
    /// No answer in time.
    #[error("Step Functions did not answer in time")]
    Timeout,
    /// The connection failed, or a 5xx.
    #[error("Step Functions could not be reached")]
    Unreachable,
    /// Refused, with the service's error code (`ExecutionAlreadyExists`, `AccessDeniedException`…).
    #[error("Step Functions refused the call ({0})")]
    Refused(String),
}

impl StatesError {
    pub(super) fn retried(&self) -> bool {
        matches!(self, Self::Throttled | Self::Timeout | Self::Unreachable)
    }
}

/// The Step Functions API: one call of `action` (`StartExecution`, `DescribeExecution`,
/// `GetExecutionHistory`, `StopExecution`, `SendTaskSuccess`, `SendTaskFailure`) with its JSON
/// body, answering the service's JSON.
#[async_trait]
pub trait StatesApi: Send + Sync + 'static {
    /// One call.
    async fn call(
        &self,
        action: &'static str,
        body: serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, StatesError>;
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
