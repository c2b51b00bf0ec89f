//! Configuration from the environment: what each function needs, checked at cold start.

use super::*;
use crate::protocol::state::{KeyFetch, KeyUnavailable, StateSealer};
use crate::settings;

/// Bounds of `STREAM_SECONDS` ([`settings::STREAM_SECONDS_ON_LAMBDA`]).
pub const MIN_STREAM_SECONDS: u64 = settings::STREAM_SECONDS_ON_LAMBDA.min;
/// See [`MIN_STREAM_SECONDS`].
pub const MAX_STREAM_SECONDS: u64 = settings::STREAM_SECONDS_ON_LAMBDA.max;

/// A missing or malformed environment variable: fails the cold start, never a request.
#[derive(thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set (or empty).
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    /// The auth variables together would let the wrong tokens in, or name no resource.
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthConfigError),
    /// A variable is set to something unusable.
    #[error("environment variable {name}: {reason}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// What is wrong (never the value: it may be a secret).
        reason: &'static str,
    },
    /// A secret the configuration names could not be read (its ARN and the service's error
    /// code, never its value).
    #[error(transparent)]
    Secret(#[from] crate::aws::secrets::SecretError),
}

/// A Secrets Manager secret to fetch at its first need ([`Config::state_sealer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// The secret's ARN.
    pub arn: String,
    /// A `VersionId`; `None`: the current value (`AWSCURRENT`).
    pub version: Option<String>,
}

/// Function configuration, read once at cold start.
///
/// | variable              | who                  | meaning                                        |
/// |-----------------------|----------------------|------------------------------------------------|
/// | `TABLE_NAME`          | all (required)       | the DynamoDB task table                        |
/// | `QUEUE_URL`           | all (required)       | the SQS work queue                             |
/// | `STATE_KEY`           | mcp (this or the next) | ≥ 32 characters; seals `requestState` (local runs, tests) |
/// | `STATE_KEY_SECRET_ARN` | mcp (this or the previous) | a Secrets Manager secret holding it, fetched at the first request that seals or opens a `requestState` ([`Config::state_sealer`]; the template's) |
/// | `STATE_KEY_SECRET_VERSION` | mcp with `STATE_KEY_SECRET_ARN` | the secret's `VersionId` to read (default: the current value) |
/// | `MAX_RECEIVES`        | worker (required)    | the queue's `maxReceiveCount` (DLQ redrive)    |
/// | `ALLOWED_HOSTS`       | mcp, tasks           | comma list for `Host`/`Origin`; empty: any     |
/// | `TOOLS`               | mcp, worker          | `builtin` (default) or `conformance`: read by the main (`tools/`) |
/// | `TOOLS_MANIFEST`      | mcp, worker          | a manifest file to serve instead of the bundled `tools.toml` |
/// | `TOOL_TARGET_FUNCTIONS` | mcp, worker        | the Lambda functions the role may invoke (the manifest's must be among them) |
/// | `TOOL_STATE_MACHINES` | mcp, worker          | the state machines the role may start (the manifest's must be among them) |
/// | `AWS_REGION`          | mcp, worker (Lambda sets it) | where a `lambda` target named without its region is |
/// | `SWEEP_STALE_SECONDS` | sweep                | idle time before a task is re-enqueued (300)   |
/// | `AUTH_MODE`           | mcp, tasks           | `jwt` (default) or `none` (one open tenant)    |
/// | `AUTH_ISSUER`         | mcp, tasks with jwt  | the expected `iss` (required)                  |
/// | `AUTH_RESOURCE`       | mcp, tasks with jwt  | this server's resource URI (the PRM `resource`; default: the first audience) |
/// | `AUTH_AUDIENCE`       | mcp, tasks with jwt  | accepted `aud` values, space/comma list (default: the resource; one of the two is required) |
/// | `AUTH_ALLOWED_CLIENT_IDS` | mcp, tasks with jwt | clients whose tokens without `aud` pass (Cognito; needs a required scope) |
/// | `AUTH_JWKS_URL`       | mcp, tasks with jwt  | the issuer's signing keys (required)           |
/// | `AUTH_TENANT_CLAIM`   | mcp, tasks with jwt  | the claim naming the tenant (`sub`)            |
/// | `AUTH_REQUIRED_SCOPES`| mcp, tasks with jwt  | scopes every token must carry (space/comma list) |
/// | `AUTH_ADVERTISED_SCOPES` | mcp, tasks with jwt | scopes clients are told to ask for (default: the required ones) |
/// | `MAX_ACTIVE_TASKS_PER_TENANT` | mcp        | unfinished tasks per tenant (1000)             |
/// | `TASK_CREATE_PER_SECOND` / `TASK_CREATE_BURST` | mcp | creations per tenant per instance (20/s, 200) |
/// | `MAX_TASK_SECONDS` / `MAX_TASK_CPU_SECONDS` | mcp, worker | per-task running and CPU time (86400, 1800) |
/// | `MAX_RUNNING_JOBS_PER_TENANT` | worker, mcp | a tenant's jobs and inline calls running at once (10: [`settings::MAX_RUNNING_JOBS_ON_LAMBDA`]) |
/// | `RESPONSE_STREAMING`  | mcp                  | `true`: API Gateway streams its answers (false) |
/// | `STREAM_SECONDS`      | mcp with streaming   | longest streamed answer (840; 30 to 890)       |
/// | `MAX_STREAMS_PER_TENANT` | mcp               | a tenant's open streams, all instances (10)    |
/// | `MAX_STREAMS`         | mcp                  | open streams of all tenants, all instances (0: no cap) |
/// | `METRICS_TENANTS`     | all                  | tenants named in the `tenant_*` metrics (0: none; up to 1000) |
#[derive(Clone)]
pub struct Config {
    /// Which function this is.
    pub role: Role,
    /// DynamoDB table.
    pub table_name: String,
    /// SQS queue URL.
    pub queue_url: String,
    /// The `requestState` key (SHA-256 of `STATE_KEY`), when set.
    pub state_key: Option<[u8; 32]>,
    /// The secret holding the `requestState` key (`STATE_KEY_SECRET_ARN`): read at the first
    /// request that needs the key ([`Config::state_sealer`]), never at cold start.
    pub state_key_secret: Option<SecretRef>,
    /// The SDK settings the secrets are read with ([`Config::reading_secrets_with`]: the
    /// ones the ports use); `None`: loaded at the first read.
    pub secrets_sdk: Option<aws_config::SdkConfig>,
    /// Accepted `Host`/`Origin` names; empty accepts any (the gateway only routes its own).
    pub allowed_hosts: Vec<String>,
    /// A manifest file to serve instead of the bundled one (`TOOLS_MANIFEST`).
    pub tools_manifest: Option<std::path::PathBuf>,
    /// The Lambda functions this function's role may invoke (`TOOL_TARGET_FUNCTIONS`, the
    /// template's `ToolTargetFunctions`): a manifest naming another one refuses to start.
    pub tool_target_functions: Vec<String>,
    /// The state machines this function's role may start and look at
    /// (`TOOL_STATE_MACHINES`, the template's `ToolStateMachines`): a manifest's
    /// `step_functions` targets must be among them.
    pub tool_state_machines: Vec<String>,
    /// The Secrets Manager secrets this function's role may read for declared tools' `http`
    /// targets (`TOOL_SECRET_ARNS`, the template's `ToolSecretArns`): a manifest naming
    /// another `secret_arn` refuses to start.
    pub tool_secret_arns: Vec<String>,
    /// This function's region (`AWS_REGION`, which Lambda sets): where a `lambda` target
    /// named without its ARN's region is looked for.
    pub region: Option<String>,
    /// Deliveries SQS makes before dead-lettering a message.
    pub max_receives: u32,
    /// How long a working task may sit unheld and unchanged before the sweep re-enqueues it.
    pub sweep_stale: Duration,
    /// `ttlMs` of the tasks the mcp function creates (`TASK_TTL_SECONDS`, default 24 h).
    pub tasks: TaskSettings,
    /// Bearer-token auth of the HTTP functions; `None` only when `AUTH_MODE=none` was chosen.
    pub auth: Option<AuthSettings>,
    /// With `RESPONSE_STREAMING=true` (the mcp function behind a streaming REST integration):
    /// how long one streamed answer may last (`STREAM_SECONDS`) — a synchronous tool call
    /// or a `subscriptions/listen`. `None`: answers are buffered, the synchronous budget is
    /// the gateway's (25 s), and a subscription is acknowledged and closed at once.
    pub stream_budget: Option<Duration>,
    /// Most streams one tenant may have open at once across all instances
    /// (`MAX_STREAMS_PER_TENANT`, default 10).
    pub max_streams_per_tenant: usize,
    /// Most open streams of all tenants together (`MAX_STREAMS`, default 0: no such cap).
    pub max_streams: usize,
    /// How many tenants this process names in the opt-in `tenant_*` metrics
    /// (`METRICS_TENANTS`, default 0: none; see [`crate::metrics`]).
    pub metrics_tenants: usize,
}

/// The sentence, not the variant: a main that returns the error has the runtime print it with
/// `{:?}` as the cold start's failure, which the operator reads in the function's log.
impl std::fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("role", &self.role)
            .field("table_name", &self.table_name)
            .field("queue_url", &self.queue_url)
            .field("state_key", &self.state_key.map(|_| "<set>"))
            .field("state_key_secret", &self.state_key_secret)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("tools_manifest", &self.tools_manifest)
            .field("tool_target_functions", &self.tool_target_functions)
            .field("tool_state_machines", &self.tool_state_machines)
            .field("tool_secret_arns", &self.tool_secret_arns)
            .field("region", &self.region)
            .field("max_receives", &self.max_receives)
            .field("sweep_stale", &self.sweep_stale)
            .field("task_ttl_ms", &self.tasks.ttl_ms)
            .field("auth", &self.auth.as_ref().map(|a| &a.issuer))
            .field("stream_budget", &self.stream_budget)
            .field("metrics_tenants", &self.metrics_tenants)
            .finish()
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env(role: Role) -> Result<Self, ConfigError> {
        Self::from_lookup(role, |k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (tests pass a map). Each setting's variable, default and
    /// bounds are those of [`crate::settings`]; the checks run in this order, so the first
    /// wrong variable is the one named.
    pub fn from_lookup(
        role: Role,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env = Env(get);
        let table_name = env.required("TABLE_NAME")?;
        let queue_url = env.required("QUEUE_URL")?;
        let (state_key, state_key_secret) = state_key_settings(&env, role)?;
        let max_receives = match (env.var(settings::MAX_RECEIVES.env), role) {
            (None, Role::Worker) => return Err(ConfigError::Missing("MAX_RECEIVES")),
            _ => env.whole(&settings::MAX_RECEIVES)? as u32,
        };
        let tools_manifest = env.var("TOOLS_MANIFEST").map(std::path::PathBuf::from);
        let tool_target_functions = env.list("TOOL_TARGET_FUNCTIONS");
        let tool_state_machines = env.list("TOOL_STATE_MACHINES");
        let tool_secret_arns = env.list("TOOL_SECRET_ARNS");
        let region = env.var("AWS_REGION");
        let sweep_stale = Duration::from_secs(env.whole(&settings::SWEEP_STALE_SECONDS)?);
        let tasks = TaskSettings {
            ttl_ms: Some(env.whole(&settings::TASK_TTL_SECONDS)? * 1000),
            quotas: quotas(&env)?,
            ..TaskSettings::default()
        };
        let allowed_hosts = env
            .var("ALLOWED_HOSTS")
            .map(|v| {
                v.split(',')
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let auth = auth(&env, role)?;
        let stream_budget = stream_budget(&env)?;
        Ok(Self {
            max_streams_per_tenant: env.whole(&settings::MAX_STREAMS_PER_TENANT_ON_LAMBDA)?
                as usize,
            max_streams: env.whole(&settings::MAX_STREAMS)? as usize,
            metrics_tenants: env.whole(&settings::METRICS_TENANTS)? as usize,
            role,
            table_name,
            queue_url,
            state_key,
            state_key_secret,
            secrets_sdk: None,
            allowed_hosts,
            tools_manifest,
            tool_target_functions,
            tool_state_machines,
            tool_secret_arns,
            region,
            max_receives,
            sweep_stale,
            tasks,
            auth,
            stream_budget,
        })
    }

    /// The server's settings ([`crate::app::Settings`]) this function runs with.
    pub fn settings(&self) -> crate::app::Settings {
        crate::app::Settings {
            service: ServiceConfig {
                allowed_hosts: self.allowed_hosts.clone(),
                tasks_only: self.role == Role::Tasks,
                // The tasks function is always buffered: its answers are small and immediate.
                stream_budget: self.stream_budget.filter(|_| self.role == Role::Mcp),
                max_streams_per_tenant: self.max_streams_per_tenant,
                max_streams: self.max_streams,
                ..ServiceConfig::default()
            },
            tasks: self.tasks.clone(),
            worker: WorkerSettings {
                unknown_tool_grace: UNKNOWN_TOOL_GRACE,
                ..WorkerSettings::default()
            },
            auth: self.auth.clone(),
        }
    }
}

/// The environment as [`Config::from_lookup`] reads it: a variable set to blanks is unset.
struct Env<F>(F);

impl<F: Fn(&str) -> Option<String>> Env<F> {
    fn var(&self, name: &'static str) -> Option<String> {
        (self.0)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.var(name).ok_or(ConfigError::Missing(name))
    }

    /// A list separated by spaces or commas (a template parameter is one string; no
    /// function, audience, client id or scope holds either).
    fn list(&self, name: &'static str) -> Vec<String> {
        self.var(name)
            .map(|v| {
                v.split([',', ' '])
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A whole-number setting, within its bounds ([`settings::Whole`]).
    fn whole(&self, s: &settings::Whole) -> Result<u64, ConfigError> {
        s.from_text(self.var(s.env).as_deref())
            .map_err(|reason| ConfigError::Invalid {
                name: s.env,
                reason,
            })
    }
}

/// The `requestState` key itself (`STATE_KEY`: a local run, a test), or the secret holding it
/// (`STATE_KEY_SECRET_ARN`: the template's), never both: which one counts would be a guess.
/// The mcp function needs one of them.
fn state_key_settings<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
    role: Role,
) -> Result<(Option<[u8; 32]>, Option<SecretRef>), ConfigError> {
    let secret = env.var("STATE_KEY_SECRET_ARN").map(|arn| SecretRef {
        arn,
        version: env.var("STATE_KEY_SECRET_VERSION"),
    });
    let key = match (env.var("STATE_KEY"), &secret, role) {
        (Some(_), Some(_), _) => {
            return Err(ConfigError::Invalid {
                name: "STATE_KEY_SECRET_ARN",
                reason: "set STATE_KEY or STATE_KEY_SECRET_ARN, not both",
            });
        }
        (None, None, Role::Mcp) => {
            return Err(ConfigError::Missing("STATE_KEY or STATE_KEY_SECRET_ARN"));
        }
        (None, _, _) => None,
        (Some(k), None, _) => Some(state_key(&k, "STATE_KEY")?),
    };
    Ok((key, secret))
}

/// Bearer-token auth of an HTTP function: on unless open access was chosen explicitly
/// (`AUTH_MODE=none`); the worker and the sweep take no request.
fn auth<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
    role: Role,
) -> Result<Option<AuthSettings>, ConfigError> {
    match (role, env.var("AUTH_MODE").as_deref()) {
        (Role::Worker | Role::Sweep, _) | (_, Some("none")) => Ok(None),
        (_, None | Some("jwt")) => {
            let issuer = env.required("AUTH_ISSUER")?;
            let (resource, audiences) =
                AuthSettings::resolve_resource(env.var("AUTH_RESOURCE"), env.list("AUTH_AUDIENCE"))
                    .map_err(|_| ConfigError::Missing("AUTH_RESOURCE or AUTH_AUDIENCE"))?;
            let settings = AuthSettings {
                issuer,
                resource,
                audiences,
                allowed_client_ids: env.list("AUTH_ALLOWED_CLIENT_IDS"),
                jwks: JwksSource::Url(env.required("AUTH_JWKS_URL")?),
                tenant_claim: env.var("AUTH_TENANT_CLAIM").unwrap_or_else(|| "sub".into()),
                required_scopes: env.list("AUTH_REQUIRED_SCOPES"),
                advertised_scopes: env.list("AUTH_ADVERTISED_SCOPES"),
                leeway: Duration::from_secs(60),
            };
            settings.check()?;
            Ok(Some(settings))
        }
        (_, Some(_)) => Err(ConfigError::Invalid {
            name: "AUTH_MODE",
            reason: "must be jwt or none",
        }),
    }
}

/// How long a streamed answer may last with `RESPONSE_STREAMING=true` (`STREAM_SECONDS`);
/// `None`: answers are buffered.
fn stream_budget<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
) -> Result<Option<Duration>, ConfigError> {
    match env.var("RESPONSE_STREAMING").as_deref() {
        None | Some("false") => Ok(None),
        Some("true") => Ok(Some(Duration::from_secs(
            env.whole(&settings::STREAM_SECONDS_ON_LAMBDA)?,
        ))),
        Some(_) => Err(ConfigError::Invalid {
            name: "RESPONSE_STREAMING",
            reason: "must be true or false",
        }),
    }
}

impl Config {
    /// Reads the secrets the configuration names with `sdk`'s settings (those the ports use,
    /// so a cold start loads them once), when first needed: nothing is read here.
    pub fn reading_secrets_with(self, sdk: &aws_config::SdkConfig) -> Self {
        Self {
            secrets_sdk: Some(sdk.clone()),
            ..self
        }
    }

    /// What seals and opens `requestState`: the key `STATE_KEY` gives; or the one its secret
    /// holds (`STATE_KEY_SECRET_ARN`), read from Secrets Manager at the first request that
    /// seals or opens a state, so that a cold start makes no call for it and most invocations
    /// (which never use it) never wait on it. A read that fails, or a value shorter than 32
    /// characters, is logged (`state_key_unavailable`, with the secret's ARN and the reason,
    /// never a value) and fails that one request with an internal error the client may
    /// retry; the next request reads again; a key read is kept for the process's life.
    /// Neither (the tasks function, which never seals): a throw-away key.
    pub fn state_sealer(&self) -> StateSealer {
        match (self.state_key, &self.state_key_secret) {
            (Some(key), _) => StateSealer::new(key),
            (None, Some(secret)) => {
                StateSealer::lazy(state_key_fetch(secret.clone(), self.secrets_sdk.clone()))
            }
            (None, None) => StateSealer::random(),
        }
    }
}

/// Reads the state key from `secret`, each time it is called: what [`StateSealer::lazy`]
/// calls until a read succeeds.
fn state_key_fetch(secret: SecretRef, sdk: Option<aws_config::SdkConfig>) -> KeyFetch {
    std::sync::Arc::new(move || {
        let (secret, sdk) = (secret.clone(), sdk.clone());
        Box::pin(async move {
            let sdk = match sdk {
                Some(sdk) => sdk,
                None => crate::aws::sdk_config().await,
            };
            read_state_key(&sdk, &secret).await.map_err(|e| {
                tracing::error!(
                    error = %e,
                    "state_key_unavailable: the requestState key could not be read; the request \
                     that needed it failed, the next one reads again"
                );
                KeyUnavailable
            })
        })
    })
}

/// The state key `secret` holds, read once from Secrets Manager.
async fn read_state_key(
    sdk: &aws_config::SdkConfig,
    secret: &SecretRef,
) -> Result<[u8; 32], ConfigError> {
    let client = crate::aws::secrets::secretsmanager_client(sdk);
    let value =
        crate::aws::secrets::secret_string(&client, &secret.arn, secret.version.as_deref()).await?;
    state_key(value.expose().trim(), "STATE_KEY_SECRET_ARN")
}

/// The `requestState` key from its text: SHA-256 of it, which must be at least 32 characters
/// (`name` says where it came from). The same text gives the same key, from the environment or
/// from the secret.
fn state_key(text: &str, name: &'static str) -> Result<[u8; 32], ConfigError> {
    if text.len() < 32 {
        return Err(ConfigError::Invalid {
            name,
            reason: "the key must be at least 32 characters",
        });
    }
    Ok(Sha256::digest(text.as_bytes()).into())
}

/// The per-tenant quotas from `MAX_ACTIVE_TASKS_PER_TENANT`, `MAX_RUNNING_JOBS_PER_TENANT`,
/// `TASK_CREATE_PER_SECOND`, `TASK_CREATE_BURST`, `MAX_TASK_SECONDS` and
/// `MAX_TASK_CPU_SECONDS` (each optional; defaults and bounds in [`crate::settings`]).
fn quotas<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Quotas, ConfigError> {
    let rate = settings::CREATE_PER_SECOND;
    let create_per_second = rate
        .from_text(env.var(rate.env).as_deref())
        .map_err(|reason| ConfigError::Invalid {
            name: rate.env,
            reason,
        })?;
    Ok(Quotas {
        max_active_tasks: env.whole(&settings::MAX_ACTIVE_TASKS)? as usize,
        max_running_jobs: env.whole(&settings::MAX_RUNNING_JOBS_ON_LAMBDA)? as usize,
        create_per_second,
        create_burst: env.whole(&settings::CREATE_BURST)? as u32,
        max_task_wall: Duration::from_secs(env.whole(&settings::MAX_TASK_SECONDS)?),
        max_task_cpu: Duration::from_secs(env.whole(&settings::MAX_TASK_CPU_SECONDS)?),
    })
}

/// How long after its creation a task whose tool the worker does not know is given back to
/// the queue before it fails ([`WorkerSettings::unknown_tool_grace`]): a deployment updates the
/// functions one after the other, so for a while the `mcp` function may offer a tool an older
/// worker does not have yet. Fifteen minutes covers a `sam deploy` many times over.
pub const UNKNOWN_TOOL_GRACE: std::time::Duration = std::time::Duration::from_secs(15 * 60);
