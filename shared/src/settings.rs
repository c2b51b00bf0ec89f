//! Each setting's name on the command line (`mcp-tasks serve --FLAG`), its environment
//! variable (the Lambda functions', `aws::lambda::Config`), its default and its bounds,
//! written once. The local CLI's clap arguments and the environment reader both read them
//! from here, so that a bound or a default changed here changes in both hosts.
//!
//! Where the two hosts differ on purpose it says so with a second entry (`*_ON_LAMBDA`):
//! a Lambda stream cannot outlive the function's 900-second limit, and a Lambda tenant's
//! running jobs hold worker invocations. An empty `flag` or `env` means the host has no such
//! setting (the local server has no dead-letter queue; a Lambda function no listener).

/// A whole-number setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Whole {
    /// The `mcp-tasks serve` flag, without its dashes (`""`: the local server has none).
    pub flag: &'static str,
    /// The environment variable (`""`: the Lambda functions have none).
    pub env: &'static str,
    /// The value when the flag or the variable is not given.
    pub default: u64,
    /// The smallest value accepted.
    pub min: u64,
    /// The largest value accepted.
    pub max: u64,
    /// What a refused environment value is told (never the value: it may be a secret).
    pub reason: &'static str,
}

impl Whole {
    /// The setting from its variable's text (`None`: unset): the default, the number when it
    /// is within the bounds, else `Err(self.reason)`.
    pub fn from_text(&self, text: Option<&str>) -> Result<u64, &'static str> {
        match text {
            None => Ok(self.default),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|n| (self.min..=self.max).contains(n))
                .ok_or(self.reason),
        }
    }
}

/// A rate (a number with a fraction): tasks a tenant may create per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// The `mcp-tasks serve` flag, without its dashes.
    pub flag: &'static str,
    /// The environment variable.
    pub env: &'static str,
    /// The value when not given.
    pub default: f64,
    /// The largest value accepted (the smallest is 0: no limit).
    pub max: f64,
    /// What a refused environment value is told.
    pub reason: &'static str,
}

impl Rate {
    /// Whether `r` is accepted: finite, from 0 to [`Rate::max`].
    pub fn accepts(&self, r: f64) -> bool {
        r.is_finite() && (0.0..=self.max).contains(&r)
    }

    /// The setting from its variable's text (`None`: unset).
    pub fn from_text(&self, text: Option<&str>) -> Result<f64, &'static str> {
        match text {
            None => Ok(self.default),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|r| self.accepts(*r))
                .ok_or(self.reason),
        }
    }
}

const YEAR_SECONDS: u64 = 365 * 24 * 3600;
const QUOTA_REASON: &str = "must be a whole number within the documented bounds";

/// How long a task stays readable after creation (its `ttlMs`), in seconds. DynamoDB's TTL
/// deletes lazily and reads treat an expired task as absent, so any value works; bounded so
/// that a typo cannot make tasks vanish at once or live forever.
pub const TASK_TTL_SECONDS: Whole = Whole {
    flag: "task-ttl-seconds",
    env: "TASK_TTL_SECONDS",
    default: 24 * 3600,
    min: 60,
    max: YEAR_SECONDS,
    reason: "must be a whole number of seconds from 60 to 31536000 (365 days)",
};

/// How many tenants the opt-in `tenant_*` metrics name (see [`crate::metrics`]).
pub const METRICS_TENANTS: Whole = Whole {
    flag: "metrics-tenants",
    env: "METRICS_TENANTS",
    default: 0,
    min: 0,
    max: crate::metrics::MAX_TENANT_LABELS as u64,
    reason: "must be a whole number from 0 to 1000",
};

/// Most unfinished tasks one tenant may have.
pub const MAX_ACTIVE_TASKS: Whole = Whole {
    flag: "max-active-tasks",
    env: "MAX_ACTIVE_TASKS_PER_TENANT",
    default: 1000,
    min: 1,
    max: 1_000_000,
    reason: QUOTA_REASON,
};

/// Most jobs (and inline calls) of one tenant running at once, on the local server.
pub const MAX_RUNNING_JOBS: Whole = Whole {
    flag: "max-running-jobs",
    env: "MAX_RUNNING_JOBS_PER_TENANT",
    default: 100,
    min: 1,
    max: 100_000,
    reason: QUOTA_REASON,
};

/// [`MAX_RUNNING_JOBS`] on Lambda, as the template's `MaxRunningJobsPerTenant`: a running job
/// may hold a worker invocation for its whole step, so a tenant's running jobs bound the
/// invocations it holds, and the default keeps that well below the template's
/// `WorkerMaxConcurrency` (50): one tenant holds at most 10 of them.
pub const MAX_RUNNING_JOBS_ON_LAMBDA: Whole = Whole {
    default: 10,
    ..MAX_RUNNING_JOBS
};

/// Tasks one tenant may create per second, sustained (0: no limit).
pub const CREATE_PER_SECOND: Rate = Rate {
    flag: "create-per-second",
    env: "TASK_CREATE_PER_SECOND",
    default: 20.0,
    max: 1e6,
    reason: "must be a number from 0 (no limit) to 1000000",
};

/// Tasks one tenant may create in a burst.
pub const CREATE_BURST: Whole = Whole {
    flag: "create-burst",
    env: "TASK_CREATE_BURST",
    default: 200,
    min: 1,
    max: 1_000_000,
    reason: QUOTA_REASON,
};

/// Longest one task may run, in seconds (its running time, not time waiting for input).
pub const MAX_TASK_SECONDS: Whole = Whole {
    flag: "max-task-seconds",
    env: "MAX_TASK_SECONDS",
    default: 24 * 3600,
    min: 1,
    max: YEAR_SECONDS,
    reason: QUOTA_REASON,
};

/// Most CPU time one task may use, in seconds.
pub const MAX_TASK_CPU_SECONDS: Whole = Whole {
    flag: "max-task-cpu-seconds",
    env: "MAX_TASK_CPU_SECONDS",
    default: 30 * 60,
    min: 1,
    max: YEAR_SECONDS,
    reason: QUOTA_REASON,
};

/// Longest streamed answer, in seconds (a synchronous call answered as SSE, a subscription):
/// 14 minutes by default, a minute under API Gateway's 15-minute stream and Lambda's
/// 15-minute timeout, so that the answer (or `-32021`) still goes out.
pub const STREAM_SECONDS: Whole = Whole {
    flag: "stream-seconds",
    env: "",
    default: 840,
    min: 1,
    max: 86_400,
    reason: "",
};

/// [`STREAM_SECONDS`] on Lambda (`RESPONSE_STREAMING=true`): at least the buffered budget's
/// order, at most 10 s under Lambda's 900-second limit.
pub const STREAM_SECONDS_ON_LAMBDA: Whole = Whole {
    flag: "",
    env: "STREAM_SECONDS",
    min: 30,
    max: 890,
    reason: "must be a whole number of seconds from 30 to 890",
    ..STREAM_SECONDS
};

/// Most streams (long synchronous calls and subscriptions) one tenant may have open at once.
pub const MAX_STREAMS_PER_TENANT: Whole = Whole {
    flag: "max-streams-per-tenant",
    env: "",
    default: 10,
    min: 1,
    max: 65_536,
    reason: "",
};

/// [`MAX_STREAMS_PER_TENANT`] on Lambda, counted across all instances.
pub const MAX_STREAMS_PER_TENANT_ON_LAMBDA: Whole = Whole {
    flag: "",
    env: "MAX_STREAMS_PER_TENANT",
    max: 10_000,
    reason: "must be a whole number from 1 to 10000",
    ..MAX_STREAMS_PER_TENANT
};

/// Most open streams of all tenants together, all instances (0: no cap). Lambda only.
pub const MAX_STREAMS: Whole = Whole {
    flag: "",
    env: "MAX_STREAMS",
    default: 0,
    min: 0,
    max: 10_000,
    reason: "must be a whole number from 0 to 10000",
};

/// Idle time, in seconds, before the Lambda sweep re-enqueues a working task.
pub const SWEEP_STALE_SECONDS: Whole = Whole {
    flag: "",
    env: "SWEEP_STALE_SECONDS",
    default: 300,
    min: 0,
    max: u64::MAX,
    reason: "must be a whole number of seconds",
};

/// Deliveries SQS makes before dead-lettering a message (the queue's `maxReceiveCount`);
/// required by the worker function, 1 elsewhere.
pub const MAX_RECEIVES: Whole = Whole {
    flag: "",
    env: "MAX_RECEIVES",
    default: 1,
    min: 1,
    max: u32::MAX as u64,
    reason: "must be a whole number of at least 1",
};

/// Most jobs running at once in all (every tenant's together). Local server only.
pub const MAX_CONCURRENT_JOBS: Whole = Whole {
    flag: "max-concurrent-jobs",
    env: "",
    default: 10_000,
    min: 1,
    max: 1_000_000,
    reason: "",
};

/// Most connections the local listener serves at once.
pub const MAX_CONNECTIONS: Whole = Whole {
    flag: "max-connections",
    env: "",
    default: 1024,
    min: 1,
    max: 65_536,
    reason: "",
};

/// Seconds a client has to send a request's headers (also the keep-alive idle timeout).
pub const HEADER_READ_TIMEOUT_SECS: Whole = Whole {
    flag: "header-read-timeout-secs",
    env: "",
    default: 10,
    min: 1,
    max: 300,
    reason: "",
};

/// Seconds an answer may wait for the client to read any of it.
pub const WRITE_TIMEOUT_SECS: Whole = Whole {
    flag: "write-timeout-secs",
    ..HEADER_READ_TIMEOUT_SECS
};

/// Seconds a client has to send a request's whole body.
pub const BODY_READ_TIMEOUT_SECS: Whole = Whole {
    flag: "body-read-timeout-secs",
    ..HEADER_READ_TIMEOUT_SECS
};

/// Most requests of one tenant in flight at once on the local listener.
pub const MAX_REQUESTS_PER_TENANT: Whole = Whole {
    flag: "max-requests-per-tenant",
    env: "",
    default: 64,
    min: 1,
    max: 65_536,
    reason: "",
};

/// Every whole-number setting, for the tests that hold the table together.
pub const ALL_WHOLE: &[Whole] = &[
    TASK_TTL_SECONDS,
    METRICS_TENANTS,
    MAX_ACTIVE_TASKS,
    MAX_RUNNING_JOBS,
    MAX_RUNNING_JOBS_ON_LAMBDA,
    CREATE_BURST,
    MAX_TASK_SECONDS,
    MAX_TASK_CPU_SECONDS,
    STREAM_SECONDS,
    STREAM_SECONDS_ON_LAMBDA,
    MAX_STREAMS_PER_TENANT,
    MAX_STREAMS_PER_TENANT_ON_LAMBDA,
    MAX_STREAMS,
    SWEEP_STALE_SECONDS,
    MAX_RECEIVES,
    MAX_CONCURRENT_JOBS,
    MAX_CONNECTIONS,
    HEADER_READ_TIMEOUT_SECS,
    WRITE_TIMEOUT_SECS,
    BODY_READ_TIMEOUT_SECS,
    MAX_REQUESTS_PER_TENANT,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_is_within_its_bounds_and_every_env_setting_has_a_reason() {
        for s in ALL_WHOLE {
            assert!((s.min..=s.max).contains(&s.default), "{s:?}");
            assert!(s.env.is_empty() || !s.reason.is_empty(), "{s:?}");
            assert!(!(s.env.is_empty() && s.flag.is_empty()), "{s:?}");
        }
        assert!(CREATE_PER_SECOND.accepts(CREATE_PER_SECOND.default));
    }

    #[test]
    fn the_defaults_of_the_domain_types_are_the_tables() {
        let q = crate::quota::Quotas::default();
        assert_eq!(q.max_active_tasks as u64, MAX_ACTIVE_TASKS.default);
        assert_eq!(q.max_running_jobs as u64, MAX_RUNNING_JOBS.default);
        assert_eq!(q.create_per_second, CREATE_PER_SECOND.default);
        assert_eq!(u64::from(q.create_burst), CREATE_BURST.default);
        assert_eq!(q.max_task_wall.as_secs(), MAX_TASK_SECONDS.default);
        assert_eq!(q.max_task_cpu.as_secs(), MAX_TASK_CPU_SECONDS.default);
        let t = crate::engine::TaskSettings::default();
        assert_eq!(t.ttl_ms, Some(TASK_TTL_SECONDS.default * 1000));
        let e = crate::edge::EdgeSettings::default();
        assert_eq!(e.max_connections as u64, MAX_CONNECTIONS.default);
        assert_eq!(
            e.header_read_timeout.as_secs(),
            HEADER_READ_TIMEOUT_SECS.default
        );
        assert_eq!(e.write_timeout.as_secs(), WRITE_TIMEOUT_SECS.default);
        assert_eq!(
            e.body_read_timeout.as_secs(),
            BODY_READ_TIMEOUT_SECS.default
        );
        assert_eq!(
            e.max_requests_per_tenant as u64,
            MAX_REQUESTS_PER_TENANT.default
        );
        let s = crate::handler::ServiceConfig::default();
        assert_eq!(
            s.max_streams_per_tenant as u64,
            MAX_STREAMS_PER_TENANT.default
        );
        assert_eq!(s.max_streams as u64, MAX_STREAMS.default);
    }

    #[test]
    fn a_value_out_of_bounds_is_refused_with_the_settings_reason() {
        assert_eq!(TASK_TTL_SECONDS.from_text(None), Ok(86_400));
        assert_eq!(TASK_TTL_SECONDS.from_text(Some("60")), Ok(60));
        assert_eq!(
            TASK_TTL_SECONDS.from_text(Some("59")),
            Err(TASK_TTL_SECONDS.reason)
        );
        assert_eq!(MAX_RECEIVES.from_text(Some("0")), Err(MAX_RECEIVES.reason));
        assert_eq!(
            CREATE_PER_SECOND.from_text(Some("NaN")),
            Err(CREATE_PER_SECOND.reason)
        );
    }
}
