//! `mcp-tasks serve`: the whole system in one process on 127.0.0.1; `mcp-tasks call`: a small
//! MCP client that runs one tool on any 2026-07-28 server (`call/`); `mcp-tasks tasks` and
//! `mcp-tasks dlq`: operator commands on a stopped server's store or on AWS (`admin.rs`).

mod admin;
mod call;
mod terminal;

/// mimalloc instead of the system allocator: see `Cargo.toml` and `bench/hotpath.sh`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use std::time::Duration;

use std::sync::Arc;

use mcp_tasks_core::app::{Lending, ToolSources};
use mcp_tasks_core::auth::{AuthSettings, JwksSource};
use mcp_tasks_core::declared::{Manifest, TargetHost};
use mcp_tasks_core::edge::EdgeSettings;
use mcp_tasks_core::local::{self, LocalOptions};
use mcp_tasks_core::quota::Quotas;
use mcp_tasks_core::settings;
use mcp_tasks_tools::ToolSet;

#[derive(Parser)]
#[command(
    name = "mcp-tasks",
    version,
    about = "A durable MCP task server (MCP 2026-07-28, SEP-2663 tasks)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the MCP endpoint, the task endpoints and the worker in one process. Exit status:
    /// 0 stopped (Ctrl-C, SIGTERM), 2 cannot start (a setting, the address, the data directory
    /// in use, unreadable or damaged).
    Serve(Box<ServeArgs>),
    /// Call a tool on an MCP server (2026-07-28) and print its result, following it as a task
    /// (progress, questions, Ctrl-C cancels) when it becomes one. Exit status: 0 completed,
    /// 1 tool error or task failed, 2 usage/protocol/HTTP error, 130 interrupted.
    Call(call::CallArgs),
    /// Operator commands on tasks: list the unfinished ones, show one, cancel one — in the
    /// embedded store of a stopped server (--data-dir) or on AWS (--aws). Exit status: 0 done,
    /// 1 not found or refused, 2 usage or backend error (a data directory in use or damaged).
    Tasks(admin::TasksArgs),
    /// The work queue's dead-letter queue (--aws only): list its messages, or move them back
    /// to the work queue. Exit status: 0 done, 1 messages left or failed, 2 usage or backend
    /// error.
    Dlq(admin::DlqArgs),
    /// Declared tools (docs/tool-manifest.md): `check FILE` reads a manifest as `serve --tools`
    /// would, without serving, and lists its tools. Exit status: 0 valid, 2 refused.
    #[command(subcommand)]
    Tools(ToolsCommand),
}

/// `mcp-tasks tools`.
#[derive(Subcommand)]
enum ToolsCommand {
    /// Check a manifest: its TOML, every entry, each schema, each command's program; the AWS
    /// targets' names only (nothing is invoked).
    Check {
        /// The manifest file.
        file: PathBuf,
    },
}

/// `mcp-tasks serve`.
#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// Where tasks are stored (they survive restarts).
    #[arg(long, default_value = ".mcp-tasks")]
    data_dir: PathBuf,
    /// Serve the official conformance suite's fixture tools instead of the built-in ones.
    #[arg(long, value_enum)]
    fixtures: Option<Fixtures>,
    /// A manifest of declared tools (docs/tool-manifest.md), served beside the others: their
    /// steps run in a Lambda function, an HTTPS endpoint or a program.
    #[arg(long = "tools", value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// How long a task stays readable after creation (its ttlMs), in seconds.
    #[arg(long = settings::TASK_TTL_SECONDS.flag, default_value_t = settings::TASK_TTL_SECONDS.default, value_parser = clap::value_parser!(u64).range(settings::TASK_TTL_SECONDS.min..=settings::TASK_TTL_SECONDS.max))]
    task_ttl_seconds: u64,
    /// Name up to this many tenants in the opt-in `tenant_tasks_created`/`_finished` metrics
    /// (0: no metric names a tenant; later tenants count as `other`).
    #[arg(long = settings::METRICS_TENANTS.flag, default_value_t = settings::METRICS_TENANTS.default, value_parser = clap::value_parser!(u64).range(settings::METRICS_TENANTS.min..=settings::METRICS_TENANTS.max))]
    metrics_tenants: u64,
    /// Where GET /metrics is served, for operators: an address of its own, never the MCP
    /// listener tenants reach; `off` serves none [default: 127.0.0.1:9464, if free].
    #[arg(long, value_name = "IP:PORT|off")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    auth: AuthArgs,
    #[command(flatten)]
    edge: EdgeArgs,
    #[command(flatten)]
    quotas: QuotaArgs,
}

/// Per-tenant quotas (with `--auth jwt` a tenant is a token's tenant claim; without auth
/// everything is one local tenant). Over a quota, `tools/call` answers a tool error naming the
/// limit and when to retry (docs/quotas.md).
#[derive(clap::Args)]
struct QuotaArgs {
    /// Most unfinished tasks one tenant may have.
    #[arg(long = settings::MAX_ACTIVE_TASKS.flag, default_value_t = settings::MAX_ACTIVE_TASKS.default, value_parser = clap::value_parser!(u64).range(settings::MAX_ACTIVE_TASKS.min..=settings::MAX_ACTIVE_TASKS.max))]
    max_active_tasks: u64,
    /// Most jobs of one tenant running at once (the rest wait their turn).
    #[arg(long = settings::MAX_RUNNING_JOBS.flag, default_value_t = settings::MAX_RUNNING_JOBS.default, value_parser = clap::value_parser!(u64).range(settings::MAX_RUNNING_JOBS.min..=settings::MAX_RUNNING_JOBS.max))]
    max_running_jobs: u64,
    /// Tasks one tenant may create per second, sustained (0: no limit).
    #[arg(long = settings::CREATE_PER_SECOND.flag, default_value_t = settings::CREATE_PER_SECOND.default)]
    create_per_second: f64,
    /// Tasks one tenant may create in a burst.
    #[arg(long = settings::CREATE_BURST.flag, default_value_t = settings::CREATE_BURST.default as u32, value_parser = clap::value_parser!(u32).range(settings::CREATE_BURST.min as i64..=settings::CREATE_BURST.max as i64))]
    create_burst: u32,
    /// Longest one task may run, in seconds (its running time, not time waiting for input).
    #[arg(long = settings::MAX_TASK_SECONDS.flag, default_value_t = settings::MAX_TASK_SECONDS.default, value_parser = clap::value_parser!(u64).range(settings::MAX_TASK_SECONDS.min..=settings::MAX_TASK_SECONDS.max))]
    max_task_seconds: u64,
    /// Most CPU time one task may use, in seconds.
    #[arg(long = settings::MAX_TASK_CPU_SECONDS.flag, default_value_t = settings::MAX_TASK_CPU_SECONDS.default, value_parser = clap::value_parser!(u64).range(settings::MAX_TASK_CPU_SECONDS.min..=settings::MAX_TASK_CPU_SECONDS.max))]
    max_task_cpu_seconds: u64,
    /// Most jobs running at once in all (every tenant's together).
    #[arg(long = settings::MAX_CONCURRENT_JOBS.flag, default_value_t = settings::MAX_CONCURRENT_JOBS.default, value_parser = clap::value_parser!(u64).range(settings::MAX_CONCURRENT_JOBS.min..=settings::MAX_CONCURRENT_JOBS.max))]
    max_concurrent_jobs: u64,
}

impl QuotaArgs {
    fn quotas(&self) -> anyhow::Result<Quotas> {
        if !settings::CREATE_PER_SECOND.accepts(self.create_per_second) {
            anyhow::bail!("--create-per-second must be a number from 0 to 1000000");
        }
        Ok(Quotas {
            max_active_tasks: self.max_active_tasks as usize,
            max_running_jobs: self.max_running_jobs as usize,
            create_per_second: self.create_per_second,
            create_burst: self.create_burst,
            max_task_wall: Duration::from_secs(self.max_task_seconds),
            max_task_cpu: Duration::from_secs(self.max_task_cpu_seconds),
        })
    }
}

/// Bounds of the HTTP listener against clients that connect and then dawdle.
#[derive(clap::Args)]
struct EdgeArgs {
    /// Most connections served at once; over it new connections wait in the listen backlog.
    #[arg(long = settings::MAX_CONNECTIONS.flag, default_value_t = settings::MAX_CONNECTIONS.default as u32, value_parser = clap::value_parser!(u32).range(settings::MAX_CONNECTIONS.min as i64..=settings::MAX_CONNECTIONS.max as i64))]
    max_connections: u32,
    /// Seconds a client has to send a request's headers (also the keep-alive idle timeout).
    #[arg(long = settings::HEADER_READ_TIMEOUT_SECS.flag, default_value_t = settings::HEADER_READ_TIMEOUT_SECS.default, value_parser = clap::value_parser!(u64).range(settings::HEADER_READ_TIMEOUT_SECS.min..=settings::HEADER_READ_TIMEOUT_SECS.max))]
    header_read_timeout_secs: u64,
    /// Seconds an answer may wait for the client to read any of it (then the connection is
    /// reset).
    #[arg(long = settings::WRITE_TIMEOUT_SECS.flag, default_value_t = settings::WRITE_TIMEOUT_SECS.default, value_parser = clap::value_parser!(u64).range(settings::WRITE_TIMEOUT_SECS.min..=settings::WRITE_TIMEOUT_SECS.max))]
    write_timeout_secs: u64,
    /// Seconds a client has to send a request's whole body (else 408, connection closed).
    #[arg(long = settings::BODY_READ_TIMEOUT_SECS.flag, default_value_t = settings::BODY_READ_TIMEOUT_SECS.default, value_parser = clap::value_parser!(u64).range(settings::BODY_READ_TIMEOUT_SECS.min..=settings::BODY_READ_TIMEOUT_SECS.max))]
    body_read_timeout_secs: u64,
    /// Most requests of one tenant in flight at once (over it: 429 with Retry-After).
    #[arg(long = settings::MAX_REQUESTS_PER_TENANT.flag, default_value_t = settings::MAX_REQUESTS_PER_TENANT.default as u32, value_parser = clap::value_parser!(u32).range(settings::MAX_REQUESTS_PER_TENANT.min as i64..=settings::MAX_REQUESTS_PER_TENANT.max as i64))]
    max_requests_per_tenant: u32,
    /// Longest streamed answer, in seconds: a synchronous tool call from a client without the
    /// tasks extension (past it: -32021), or a subscriptions/listen stream (closed gracefully).
    #[arg(long = settings::STREAM_SECONDS.flag, default_value_t = settings::STREAM_SECONDS.default, value_parser = clap::value_parser!(u64).range(settings::STREAM_SECONDS.min..=settings::STREAM_SECONDS.max))]
    stream_seconds: u64,
    /// Most streams (long synchronous calls and subscriptions) one tenant may have open at once.
    #[arg(long = settings::MAX_STREAMS_PER_TENANT.flag, default_value_t = settings::MAX_STREAMS_PER_TENANT.default as u32, value_parser = clap::value_parser!(u32).range(settings::MAX_STREAMS_PER_TENANT.min as i64..=settings::MAX_STREAMS_PER_TENANT.max as i64))]
    max_streams_per_tenant: u32,
}

impl EdgeArgs {
    fn settings(&self) -> EdgeSettings {
        EdgeSettings {
            header_read_timeout: Duration::from_secs(self.header_read_timeout_secs),
            write_timeout: Duration::from_secs(self.write_timeout_secs),
            body_read_timeout: Duration::from_secs(self.body_read_timeout_secs),
            max_connections: self.max_connections as usize,
            max_requests_per_tenant: self.max_requests_per_tenant as usize,
        }
    }
}

/// Bearer-token authentication (an OAuth 2.1 resource server).
#[derive(clap::Args)]
struct AuthArgs {
    /// `none` (loopback only: every request is the local tenant) or `jwt`.
    #[arg(long, value_enum, default_value = "none")]
    auth: AuthMode,
    /// Expected token issuer (`iss`); also the authorization server named in the metadata.
    #[arg(long)]
    issuer: Option<String>,
    /// The resource this server is: the Protected Resource Metadata's `resource` and the
    /// challenge's metadata URL [default: the first --audience, else http://LISTEN/mcp].
    #[arg(long)]
    resource: Option<String>,
    /// An accepted token audience (`aud`; repeatable, one match is enough) [default: the
    /// resource].
    #[arg(long = "audience")]
    audiences: Vec<String>,
    /// An app client whose tokens WITHOUT `aud` are accepted (Cognito's `client_id`;
    /// repeatable; needs --required-scope).
    #[arg(long = "allowed-client-id")]
    allowed_client_ids: Vec<String>,
    /// Where the issuer publishes its signing keys.
    #[arg(long, conflicts_with = "jwks_file")]
    jwks_url: Option<String>,
    /// A JWKS document on disk instead of --jwks-url.
    #[arg(long)]
    jwks_file: Option<PathBuf>,
    /// The token claim that names the tenant.
    #[arg(long, default_value = "sub")]
    tenant_claim: String,
    /// A scope every token must carry, read from `scope` or `scp` (repeatable).
    #[arg(long = "required-scope")]
    required_scopes: Vec<String>,
    /// A scope named in the metadata's `scopes_supported` and the challenge's `scope`, for
    /// clients to ask for (repeatable) [default: the required scopes].
    #[arg(long = "advertise-scope")]
    advertised_scopes: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AuthMode {
    None,
    Jwt,
}

impl AuthArgs {
    fn settings(self, listen: SocketAddr) -> anyhow::Result<Option<AuthSettings>> {
        if self.auth == AuthMode::None {
            if !listen.ip().is_loopback() {
                anyhow::bail!(
                    "refusing --auth none on {listen}: without authentication the server binds to loopback only"
                );
            }
            return Ok(None);
        }
        let issuer = self
            .issuer
            .ok_or_else(|| anyhow::anyhow!("--auth jwt needs --issuer"))?;
        let jwks = match (self.jwks_url, self.jwks_file) {
            (Some(u), None) => JwksSource::Url(u),
            (None, Some(f)) => JwksSource::File(f),
            _ => anyhow::bail!("--auth jwt needs --jwks-url or --jwks-file"),
        };
        let resource = match (self.resource, self.audiences.is_empty()) {
            (None, true) if listen.port() == 0 => {
                anyhow::bail!("--auth jwt on port 0 needs --resource (the resource URI)")
            }
            (None, true) => Some(format!("http://{listen}/mcp")),
            (resource, _) => resource,
        };
        let (resource, audiences) = AuthSettings::resolve_resource(resource, self.audiences)?;
        let settings = AuthSettings {
            issuer,
            resource,
            audiences,
            allowed_client_ids: self.allowed_client_ids,
            jwks,
            tenant_claim: self.tenant_claim,
            required_scopes: self.required_scopes,
            advertised_scopes: self.advertised_scopes,
            leeway: Duration::from_secs(60),
        };
        settings.check()?;
        Ok(Some(settings))
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Fixtures {
    Conformance,
}

#[tokio::main]
async fn main() {
    let args = match parse_cli().command {
        Command::Call(args) => std::process::exit(call::run(args).await),
        Command::Tasks(args) => std::process::exit(admin::tasks(args).await),
        Command::Dlq(args) => std::process::exit(admin::dlq(args).await),
        Command::Tools(ToolsCommand::Check { file }) => std::process::exit(check_tools(&file)),
        Command::Serve(serve) => *serve,
    };
    if let Err(e) = serve(args).await {
        // One line, the causes after the reason (a damaged database names its file).
        eprintln!("mcp-tasks: error: {}", terminal::visible(&format!("{e:#}")));
        std::process::exit(2);
    }
}

/// `mcp-tasks serve`, until Ctrl-C or SIGTERM; `Err` when it cannot start.
async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs {
        listen,
        data_dir,
        fixtures,
        manifest,
        task_ttl_seconds,
        metrics_tenants,
        metrics_listen,
        auth,
        edge,
        quotas,
    } = args;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut opts = LocalOptions::new(listen, data_dir);
    let settings = &mut opts.settings;
    settings.tasks.ttl_ms = Some(task_ttl_seconds * 1000);
    settings.auth = auth.settings(listen)?;
    settings.service.stream_budget = Some(Duration::from_secs(edge.stream_seconds));
    settings.service.max_streams_per_tenant = edge.max_streams_per_tenant as usize;
    settings.tasks.quotas = quotas.quotas()?;
    if !listen.ip().is_loopback() {
        // Off loopback, clients name the host they reached (a gateway or a public name);
        // tokens, not Host checks, protect the endpoint there.
        settings.service.allowed_hosts.clear();
    }
    opts.edge = edge.settings();
    opts.max_concurrent_jobs = quotas.max_concurrent_jobs as usize;
    opts.metrics_tenants = metrics_tenants as usize;
    opts.metrics_listen =
        local::MetricsListen::from_flag(metrics_listen.as_deref()).map_err(anyhow::Error::msg)?;
    opts.tools = ToolSources::rust(
        match fixtures {
            Some(Fixtures::Conformance) => ToolSet::Conformance,
            None => ToolSet::Builtin,
        }
        .tools(),
    );
    let mut declared = None;
    if let Some(path) = &manifest {
        let read = Manifest::read(path)?;
        declared = Some((path, read.summary()));
        opts.tools = opts.tools.with_manifest(read);
        opts.lending = lending(path)?;
    }
    #[cfg(feature = "fault-injection")]
    if let Ok(spec) = std::env::var(mcp_tasks_core::fault::ENV) {
        opts.faults = mcp_tasks_core::fault::Faults::parse(&spec)
            .map_err(|e| anyhow::anyhow!("{}: {e}", mcp_tasks_core::fault::ENV))?;
    }
    let server = local::start(opts).await?;
    if let Some((path, summary)) = declared {
        println!(
            "mcp-tasks declared tools from {}: {}",
            terminal::visible(&path.display().to_string()),
            terminal::visible(&summary.join(", "))
        );
    }
    let url = server.url();
    if let Some(metrics) = server.metrics_url() {
        println!("mcp-tasks metrics on {metrics}");
    }
    println!("mcp-tasks listening on {url}");
    println!("Add it to Claude Code with:\n  claude mcp add --transport http mcp-tasks {url}");
    server.run_until(stop_signal()).await;
    Ok(())
}

/// What a manifest's targets may use here: programs (relative to the file's directory),
/// HTTPS endpoints, and (with AWS support) Lambda functions, SigV4-signed HTTPS endpoints and
/// Step Functions state machines. The server builds the targets' host from it.
fn lending(path: &std::path::Path) -> anyhow::Result<Lending> {
    let base_dir = std::fs::canonicalize(path)?
        .parent()
        .map(std::path::Path::to_path_buf);
    Ok(Lending {
        allow_commands: true,
        base_dir,
        #[cfg(feature = "aws")]
        clients: Some(Arc::new(mcp_tasks_core::aws::lending::AwsLending::local())),
        ..Lending::default()
    })
}

/// `mcp-tasks tools check FILE`: 0 and the list of tools, or 2 and why not.
fn check_tools(path: &std::path::Path) -> i32 {
    let checked = Manifest::read(path).and_then(|m| {
        m.check_schemas()?;
        let base_dir = std::fs::canonicalize(path)
            .ok()
            .and_then(|p| p.parent().map(std::path::Path::to_path_buf));
        let host = TargetHost {
            allow_commands: true,
            base_dir,
            ..TargetHost::checking()
        };
        m.tools(&host)?;
        Ok(m)
    });
    match checked {
        Ok(m) => {
            let summary = m.summary();
            println!(
                "{}: {} tool{}: {}",
                terminal::visible(&path.display().to_string()),
                summary.len(),
                if summary.len() == 1 { "" } else { "s" },
                terminal::visible(&summary.join(", "))
            );
            0
        }
        Err(e) => {
            eprintln!("mcp-tasks: error: {}", terminal::visible(&e.to_string()));
            2
        }
    }
}

/// The command line; a usage error is printed with the control characters of the input
/// escaped and each line over 300 characters cut in the middle (clap quotes the offending value, and a tenant
/// or id given to `mcp-tasks tasks` may hold anything), then exits with clap's status (2).
fn parse_cli() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // Long lines are cut in the middle (clap quotes the whole offending value, however
            // long; the reason comes after it).
            const HEAD: usize = 100;
            const TAIL: usize = 200;
            let rendered = e.render().to_string();
            for line in rendered.lines() {
                let chars: Vec<char> = line.chars().collect();
                let kept: Vec<char> = if chars.len() > HEAD + TAIL {
                    let mut k = chars[..HEAD].to_vec();
                    k.extend(" … ".chars());
                    k.extend_from_slice(&chars[chars.len() - TAIL..]);
                    k
                } else {
                    chars
                };
                let shown: String = kept
                    .into_iter()
                    .flat_map(|c| match c.is_control() {
                        true => c.escape_default().collect::<Vec<_>>(),
                        false => vec![c],
                    })
                    .collect();
                eprintln!("{shown}");
            }
            std::process::exit(e.exit_code())
        }
        Err(e) => e.exit(),
    }
}

/// Ctrl-C, or SIGTERM (what service managers and container runtimes send).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
