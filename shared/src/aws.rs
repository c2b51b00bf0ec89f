//! AWS adapters of the ports: [`dynamo::DynamoStore`] (the [`crate::store::TaskStore`]) and
//! [`sqs::SqsQueue`] (the [`crate::queue::WorkQueue`]), the operators' view of the work
//! queue's dead-letter queue ([`dlq`]), and secrets read from Secrets Manager ([`secrets`]). Nothing outside this module imports the AWS SDK.
//! Endpoints follow the SDK's standard settings (`AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`), which is how the local emulators and
//! LocalStack are reached.
//!
//! # Timeouts
//!
//! The SDK sets no operation or attempt timeout of its own (only a 3.1 s connect timeout): a
//! call on a connection that the other side accepted and then never answers waits for ever,
//! and with it the worker's cancel check, its hand-over, and the whole batch of the
//! invocation. Every client is therefore built by [`dynamodb_client`] or [`sqs_client`], which
//! set [`Timeouts`]; see there for the values and why.
//!
//! # The invocation's deadline
//!
//! A Lambda function may not plan work past its own timeout. The HTTP functions run each
//! request inside [`crate::clock::within_deadline`] (the deadline the Lambda context gives),
//! and waits that would otherwise use a fixed budget (the legacy `tasks/result`, a streamed
//! synchronous call, a subscription) read [`crate::clock::invocation_deadline`] and stop in
//! time to answer.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use aws_config::timeout::TimeoutConfig;

pub mod dlq;
pub mod dynamo;
pub mod esm;
mod https;
pub mod invoke;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod lending;
pub mod secrets;
#[cfg(feature = "contracts")]
pub mod serial;
pub mod signed;
pub mod sqs;
pub mod states;
#[cfg(test)]
pub(crate) mod testing;
pub mod xray;

/// Loads the shared SDK configuration once (region, credentials, endpoint overrides). Build
/// clients from it once per process (at cold start or at first use, [`FirstUse`]), never per
/// request, with [`dynamodb_client`] and [`sqs_client`] (which add the [`Timeouts`]).
///
/// In a Lambda function whose role's credentials are in the environment (as Lambda always
/// puts them), those are the credentials, read by the environment provider alone: the
/// default chain would find the same ones first, but building it (profile files, web
/// identity, container and instance-metadata providers, each with its own client) cost a
/// cold start ~0.3 ms and its HTTPS client loaded the TLS roots before any client needed them.
/// The region is then Lambda's `AWS_REGION`, which the default region chain (environment,
/// profile, instance metadata, whose client it builds) would also find first.
///
/// Every client built from it shares one HTTPS client (one connection pool), the SDK's
/// default, which sets up TLS at its first call rather than when each client is built
/// ([`https`]).
///
/// Loaded at the first call and kept: a process's environment does not change, and the mcp
/// and worker functions ask twice at cold start (their ports, and the clients their declared
/// tools borrow), which loaded it twice (~50 k instructions of a cold start's ~1.3 M).
pub async fn sdk_config() -> aws_config::SdkConfig {
    static LOADED: tokio::sync::OnceCell<aws_config::SdkConfig> =
        tokio::sync::OnceCell::const_new();
    // Boxed: the loader's future is ~8.7 KB, which every caller's future would otherwise hold
    // (and copy) inline.
    LOADED
        .get_or_init(|| Box::pin(load_sdk_config()))
        .await
        .clone()
}

async fn load_sdk_config() -> aws_config::SdkConfig {
    let mut loader =
        aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(https::client());
    if credentials_in_lambda_environment(|k| std::env::var_os(k).is_some()) {
        loader = loader.credentials_provider(
            aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
        );
        if let Some(region) = std::env::var("AWS_REGION").ok().filter(|r| !r.is_empty()) {
            loader = loader.region(aws_config::Region::new(region));
        }
        // The loader's `profile_files` takes the deprecated alias (aws-config's own code
        // allows it too); the type behind it is aws-runtime's `EnvConfigFiles`.
        #[allow(deprecated)]
        if !names_profile_files(|k| std::env::var_os(k).is_some()) {
            // A Lambda function has no `~/.aws` (no home at all): reading the default profile
            // files looked for both and cost ~25 k instructions of every cold start. An
            // environment that names a profile or a file still gets them read.
            loader = loader.profile_files(
                aws_config::profile::profile_file::ProfileFiles::builder()
                    .with_contents(
                        aws_config::profile::profile_file::ProfileFileKind::Config,
                        "",
                    )
                    .build(),
            );
        }
    }
    loader.load().await
}

/// Whether the environment names a profile or a profile file, which the SDK would then read.
fn names_profile_files(is_set: impl Fn(&str) -> bool) -> bool {
    [
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ]
    .into_iter()
    .any(is_set)
}

/// The HTTPS client the AWS clients of this process share ([`https`]: HTTP/1.1, set up at its
/// first call): what an `SdkConfig` built elsewhere than [`sdk_config`] (a test's) must be
/// given, since the SDK's own default client is not built in.
pub fn https_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    https::client()
}

/// Whether this process is a Lambda function with its credentials in the environment.
fn credentials_in_lambda_environment(is_set: impl Fn(&str) -> bool) -> bool {
    [
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ]
    .into_iter()
    .all(is_set)
}

/// The timeouts of one AWS client.
///
/// - `attempt` bounds one HTTP attempt, from sending the request to the last byte of the
///   answer. Past it the attempt is abandoned (its connection dropped) and, for calls that
///   the SDK retries, retried on a fresh connection: a hung connection costs one attempt, not
///   the call.
/// - `operation` bounds the whole call, retries and their back-off included: what a caller
///   waits at most before it gets an error.
/// - `connect` bounds the TCP (and TLS) connect; the SDK's own default is 3.1 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// One connection set-up.
    pub connect: Duration,
    /// One attempt.
    pub attempt: Duration,
    /// The whole call, retries included.
    pub operation: Duration,
}

impl Timeouts {
    /// DynamoDB: answers take single-digit milliseconds (a 400 KB item or a 16 MB
    /// `BatchGetItem` page well under a second inside a region), so an attempt still
    /// unanswered after 2 s is a dead connection or a stuck node, and retrying elsewhere is
    /// the cure. 10 s for the call leaves room for the SDK's standard three attempts with
    /// their back-off (2 + ~1 + 2 + ~2 + 2 s) and is what a caller waits at most: a third of
    /// the mcp function's 30 s and below the tasks function's 10 s minus its answer.
    pub const DYNAMODB: Timeouts = Timeouts {
        connect: Duration::from_secs(3),
        attempt: Duration::from_secs(2),
        operation: Duration::from_secs(10),
    };

    /// SQS `SendMessage` (all the functions do with SQS): tens of milliseconds when healthy;
    /// the same reasoning as [`Timeouts::DYNAMODB`], with 3 s attempts (SQS's tail latency is
    /// longer than DynamoDB's). A long-polling receiver needs [`Timeouts::sqs_long_poll`].
    pub const SQS: Timeouts = Timeouts {
        connect: Duration::from_secs(3),
        attempt: Duration::from_secs(3),
        operation: Duration::from_secs(10),
    };

    /// An SQS client that long-polls `ReceiveMessage` with `WaitTimeSeconds` = `wait`: SQS
    /// holds such a request up to `wait` before it answers, so an attempt may take that long
    /// plus the usual 3 s, and the call one such attempt and a retry's start.
    pub fn sqs_long_poll(wait: Duration) -> Timeouts {
        Timeouts {
            attempt: wait + Self::SQS.attempt,
            operation: wait + Self::SQS.operation,
            ..Self::SQS
        }
    }

    fn config(self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }
}

/// An AWS client built at its first use, not before: what an adapter holds, so that a cold
/// start builds only the clients its first event needs.
///
/// Building a service client parses the SDK's table of AWS partitions and compiles its
/// regular expressions (~0.5 M instructions each for DynamoDB and SQS, more than the rest of
/// the mcp function's own start together), and many first events need neither client
/// (`initialize`, `tools/list`, `server/discover`, a refused token). A use pays it once; every
/// clone shares the one client. A ready client converts into one ([`From`]).
pub struct FirstUse<C>(Arc<LazyLock<C, Box<dyn FnOnce() -> C + Send>>>);

impl<C> FirstUse<C> {
    /// The client `build` makes, when it is first used.
    pub fn new(build: impl FnOnce() -> C + Send + 'static) -> Self {
        Self(Arc::new(LazyLock::new(Box::new(build))))
    }
}

impl<C: Send + 'static> From<C> for FirstUse<C> {
    fn from(client: C) -> Self {
        Self::new(move || client)
    }
}

impl<C> Clone for FirstUse<C> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<C> std::ops::Deref for FirstUse<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.0
    }
}

impl<C> std::fmt::Debug for FirstUse<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstUse").finish_non_exhaustive()
    }
}

/// The DynamoDB client of the functions and tools: `sdk`'s settings with
/// [`Timeouts::DYNAMODB`].
pub fn dynamodb_client(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
    dynamodb_client_with(sdk, Timeouts::DYNAMODB)
}

/// [`dynamodb_client`] with other timeouts.
pub fn dynamodb_client_with(
    sdk: &aws_config::SdkConfig,
    timeouts: Timeouts,
) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(sdk)
        .timeout_config(timeouts.config())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// The SQS client of the functions: `sdk`'s settings with [`Timeouts::SQS`].
pub fn sqs_client(sdk: &aws_config::SdkConfig) -> aws_sdk_sqs::Client {
    sqs_client_with(sdk, Timeouts::SQS)
}

/// [`sqs_client`] with other timeouts (a long-polling receiver:
/// [`Timeouts::sqs_long_poll`]).
pub fn sqs_client_with(sdk: &aws_config::SdkConfig, timeouts: Timeouts) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::config::Builder::from(sdk)
        .timeout_config(timeouts.config())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

tokio::task_local! {
    /// The trace of the work message being handled (its `AWSTraceHeader`).
    static WORK_TRACE: String;
}

/// Runs `f` (the handling of one work message) as part of the trace `header` names, if any:
/// what it sends ([`trace_header`]) carries that trace on.
pub async fn within_trace<F: std::future::Future>(header: Option<&str>, f: F) -> F::Output {
    match header.filter(|h| is_trace_header(h)) {
        Some(h) => WORK_TRACE.scope(h.to_owned(), f).await,
        None => f.await,
    }
}

/// The X-Ray trace header a send should carry: the work message's being handled (a
/// hand-over continues its trace), else the Lambda invocation's (`_X_AMZN_TRACE_ID`, which
/// the runtime sets for each invocation), else none (the local server, tests).
pub fn trace_header() -> Option<String> {
    WORK_TRACE
        .try_with(Clone::clone)
        .ok()
        .or_else(|| std::env::var("_X_AMZN_TRACE_ID").ok())
        .filter(|h| is_trace_header(h))
}

/// Whether `h` looks like an X-Ray trace header (`Root=1-…`, printable, bounded): anything
/// else is not passed on, so a malformed one can never make SQS refuse a send.
fn is_trace_header(h: &str) -> bool {
    h.starts_with("Root=1-") && h.len() <= 256 && h.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_use_client_is_built_once_at_its_first_use_and_shared_by_clones() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let builds = Arc::new(AtomicUsize::new(0));
        let client = FirstUse::new({
            let builds = builds.clone();
            move || {
                builds.fetch_add(1, Ordering::SeqCst);
                String::from("client")
            }
        });
        let clone = client.clone();
        assert_eq!(
            builds.load(Ordering::SeqCst),
            0,
            "nothing built before a use"
        );
        assert_eq!(clone.len(), 6);
        assert_eq!(*client, "client");
        assert_eq!(builds.load(Ordering::SeqCst), 1, "built once, for both");
        // A ready client is used as it is.
        assert_eq!(*FirstUse::from(String::from("ready")), "ready");
    }

    #[test]
    fn only_a_lambda_function_with_environment_credentials_skips_the_default_chain() {
        let all = [
            "AWS_LAMBDA_FUNCTION_NAME",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        ];
        assert!(credentials_in_lambda_environment(|k| all.contains(&k)));
        for missing in all {
            assert!(
                !credentials_in_lambda_environment(|k| k != missing && all.contains(&k)),
                "without {missing}"
            );
        }
    }

    #[test]
    fn profile_files_are_skipped_only_when_nothing_names_one() {
        assert!(!names_profile_files(|_| false));
        for k in [
            "AWS_PROFILE",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
        ] {
            assert!(names_profile_files(|v| v == k), "{k}");
        }
    }
    use super::testing::sdk_at;
    use crate::queue::{WorkKind, WorkMessage, WorkQueue as _};
    use crate::store::TaskStore as _;
    use tokio::io::AsyncReadExt as _;

    /// An endpoint that accepts every connection and reads what it is sent, but never answers:
    /// a stuck server, or a connection whose answers are lost.
    async fn black_hole() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        format!("http://{addr}")
    }

    /// A hung endpoint makes store and queue calls fail (after the operation timeout, about
    /// 10 s, or the conditional write's bounded retries) instead of waiting for ever. The
    /// outer timeout only detects a hang; it is no speed limit.
    #[tokio::test]
    async fn a_work_messages_trace_is_carried_on_and_odd_headers_are_not() {
        let root = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let inside = within_trace(Some(root), async { trace_header() }).await;
        assert_eq!(inside.as_deref(), Some(root));
        for odd in [
            "",
            "Root=2-x",
            "Root=1-a b",
            &format!("Root=1-{}", "a".repeat(300)),
        ] {
            let got = within_trace(Some(odd), async { trace_header() }).await;
            assert_ne!(got.as_deref(), Some(odd), "{odd:?} passed on");
        }
    }

    #[tokio::test]
    async fn calls_to_an_endpoint_that_never_answers_fail_instead_of_hanging() {
        let sdk = sdk_at(&black_hole().await).await;
        let store = dynamo::DynamoStore::new(dynamodb_client(&sdk), "tasks");
        let queue = sqs::SqsQueue::new(sqs_client(&sdk), "http://127.0.0.1:1/000000000000/q");
        let task = crate::task::TaskRecord::new(
            "t".into(),
            crate::task::TaskId::generate(),
            "wait",
            None,
            1000,
            serde_json::json!({}),
        );
        let msg = WorkMessage {
            tenant: "t".into(),
            task_id: task.task_id.clone(),
            kind: WorkKind::Start,
        };
        // A conditional write: retried by the store itself, within the same bound.
        let mut later = task.clone();
        later.version = 3;
        let hang = Duration::from_secs(90);
        let (got, written, sent) = tokio::time::timeout(hang, async {
            let now = tokio::time::Instant::now();
            let took = |what: &str| println!("{what} failed after {:?}", now.elapsed());
            tokio::join!(
                async {
                    let r = store.get(task.key()).await;
                    took("get");
                    r
                },
                async {
                    let r = store.update(&later).await;
                    took("update");
                    r
                },
                async {
                    let r = queue.enqueue(msg, Duration::ZERO).await;
                    took("enqueue");
                    r
                },
            )
        })
        .await
        .expect("a call to an endpoint that never answers hung");
        assert!(got.is_err(), "{got:?}");
        assert!(written.is_err(), "{written:?}");
        assert!(sent.is_err(), "{sent:?}");
    }
}
