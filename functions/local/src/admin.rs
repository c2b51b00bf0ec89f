//! `mcp-tasks tasks …` and `mcp-tasks dlq …`: the operator commands (issue 11). Parsing and
//! printing only; what they do is `mcp_tasks_core::admin` (and `aws::dlq`).
//!
//! Backends: `--data-dir DIR` (default `.mcp-tasks`), the embedded store of a stopped
//! `mcp-tasks serve` — never created, refused while a server holds it; or `--aws`, the
//! DynamoDB table and SQS queues named by `--table`/`TABLE_NAME`, `--queue-url`/`QUEUE_URL`
//! and `--dlq-url`/`DLQ_URL`, reached through the SDK's usual settings (region, credentials,
//! `AWS_ENDPOINT_URL`), with `DYNAMODB_ENDPOINT` and `SQS_ENDPOINT` overriding the endpoint of
//! one service (as the emulator tests name them).
//!
//! Output: text for people on stdout (one line per task or message, tab-separated; anything
//! that came from a store or a queue has its control characters escaped), or `--json`: one
//! JSON object per line, its strings' control characters escaped — DEL and U+0080–U+009F too,
//! which serde_json leaves as they are (`terminal::json_text`). A listing that may continue says how: in text, a `next page:` line on
//! stderr; in JSON, a last line `{"next": CURSOR}`. Errors are one line on stderr.
//!
//! Exit status: 0 done, 1 not found or refused (unknown task, already finished, messages left
//! in the dead-letter queue), 2 usage or backend error (the data directory in use or damaged,
//! AWS unreachable).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Subcommand;
use mcp_tasks_core::admin::{
    self, AdminError, CancelMode, CancelOutcome, DEFAULT_LIMIT, ListQuery, MAX_LIMIT, TaskDetails,
    TaskSummary,
};
use mcp_tasks_core::queue::WorkQueue;
use mcp_tasks_core::store::TaskStore;
use mcp_tasks_core::task::{TaskId, TaskRef, TaskStatus};
use mcp_tasks_core::tenant::Tenant;
use serde_json::json;

use crate::terminal::json_text;

/// `mcp-tasks tasks`.
#[derive(clap::Args)]
pub struct TasksArgs {
    #[command(subcommand)]
    command: TasksCommand,
}

#[derive(Subcommand)]
enum TasksCommand {
    /// List unfinished tasks (finished ones are not indexed: read them with `show`).
    List(ListArgs),
    /// Show one task's whole record (its result too; its arguments only with --arguments).
    Show(ShowArgs),
    /// Cancel one task, as `tasks/cancel` does (a finished task is refused: exit status 1).
    Cancel(CancelArgs),
}

/// `mcp-tasks dlq`.
#[derive(clap::Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    command: DlqCommand,
}

#[derive(Subcommand)]
enum DlqCommand {
    /// List the dead-letter queue's messages (id, receives, sent time, the task they name).
    List(DlqListArgs),
    /// Move work messages back to the work queue (sent first, then deleted); anything else
    /// stays in the dead-letter queue and is reported.
    Redrive(DlqListArgs),
}

/// Where the tasks are: the embedded store of a data directory, or AWS.
#[derive(clap::Args)]
struct Backend {
    /// The data directory of `mcp-tasks serve` (its embedded store). The server must be
    /// stopped: it holds the store locked while it runs.
    #[arg(long, default_value = ".mcp-tasks", conflicts_with = "aws")]
    data_dir: PathBuf,
    /// Use the deployed DynamoDB table and SQS queues instead (AWS settings from the
    /// environment as the SDK reads them; DYNAMODB_ENDPOINT / SQS_ENDPOINT override one
    /// service's endpoint).
    #[arg(long)]
    aws: bool,
    /// The DynamoDB task table [default: $TABLE_NAME].
    #[arg(long, requires = "aws")]
    table: Option<String>,
    /// The SQS work queue's URL [default: $QUEUE_URL].
    #[arg(long, requires = "aws")]
    queue_url: Option<String>,
    /// The SQS dead-letter queue's URL [default: $DLQ_URL].
    #[arg(long, requires = "aws")]
    dlq_url: Option<String>,
}

#[derive(clap::Args)]
struct ListArgs {
    /// Only this tenant's tasks (in creation order); without it, every tenant's.
    #[arg(long, value_parser = tenant_arg)]
    tenant: Option<Tenant>,
    /// Only tasks of this status: working or input_required.
    #[arg(long, value_parser = status_arg)]
    status: Option<TaskStatus>,
    /// Most tasks listed (1 to 1000).
    #[arg(long, default_value_t = DEFAULT_LIMIT, value_parser = limit_arg)]
    limit: usize,
    /// Continue a listing: the cursor its previous page printed.
    #[arg(long)]
    after: Option<String>,
    /// One JSON object per task, then `{"next": CURSOR}` when more may follow.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    backend: Backend,
}

#[derive(clap::Args)]
struct ShowArgs {
    /// The task id.
    #[arg(value_parser = task_id_arg)]
    id: TaskId,
    /// The task's tenant (`local` for a server without authentication).
    #[arg(long, value_parser = tenant_arg)]
    tenant: Tenant,
    /// Also show the arguments the task was created with (the client's data).
    #[arg(long)]
    arguments: bool,
    /// The record as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    backend: Backend,
}

#[derive(clap::Args)]
struct CancelArgs {
    /// The task id.
    #[arg(value_parser = task_id_arg)]
    id: TaskId,
    /// The task's tenant (`local` for a server without authentication).
    #[arg(long, value_parser = tenant_arg)]
    tenant: Tenant,
    #[command(flatten)]
    backend: Backend,
}

#[derive(clap::Args)]
struct DlqListArgs {
    /// Most messages handled (1 to 1000).
    #[arg(long, default_value_t = DEFAULT_LIMIT, value_parser = limit_arg)]
    limit: usize,
    /// One JSON object per message.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    backend: Backend,
}

/// A tenant as an operator names one, checked as the authenticator checks a token's.
fn tenant_arg(s: &str) -> Result<Tenant, String> {
    admin::check_tenant(s).map_err(|e| e.to_string())?;
    Ok(Tenant::new(s))
}

fn task_id_arg(s: &str) -> Result<TaskId, String> {
    admin::check_task_id(s).map_err(|e| e.to_string())
}

fn status_arg(s: &str) -> Result<TaskStatus, String> {
    admin::parse_status(s).map_err(|e| e.to_string())
}

fn limit_arg(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("not a number from 1 to {MAX_LIMIT}"))?;
    admin::check_limit(n).map_err(|e| e.to_string())?;
    Ok(n)
}

/// A failed command: its exit status and one line for stderr.
struct Fail(i32, String);

impl From<AdminError> for Fail {
    fn from(e: AdminError) -> Self {
        let code = match e {
            AdminError::NotFound { .. }
            | AdminError::Expired { .. }
            | AdminError::Finished { .. } => 1,
            AdminError::Invalid(_) | AdminError::Store(_) | AdminError::Engine(_) => 2,
        };
        Fail(code, with_causes(&e))
    }
}

/// `e` and its causes on one line. The detail of a store error is for the operator here (no
/// client sees it).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !line.contains(&s_text) {
            line.push_str(&format!(": {s_text}"));
        }
        source = s.source();
    }
    line
}

fn finish(result: Result<i32, Fail>) -> i32 {
    match result {
        Ok(code) => code,
        Err(Fail(code, line)) => {
            eprintln!("mcp-tasks: {}", plain(&line));
            code
        }
    }
}

/// Logs of the library (a store's unreadable record, a failed release) on stderr.
fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// `mcp-tasks tasks …`; returns the exit status.
pub async fn tasks(args: TasksArgs) -> i32 {
    init_logs();
    finish(match args.command {
        TasksCommand::List(a) => list(a).await,
        TasksCommand::Show(a) => show(a).await,
        TasksCommand::Cancel(a) => cancel(a).await,
    })
}

/// `mcp-tasks dlq …`; returns the exit status.
pub async fn dlq(args: DlqArgs) -> i32 {
    init_logs();
    finish(match args.command {
        DlqCommand::List(a) => dlq_list(a).await,
        DlqCommand::Redrive(a) => dlq_redrive(a).await,
    })
}

/// The ports of the chosen backend.
struct Opened {
    store: Arc<dyn TaskStore>,
    queue: Option<Arc<dyn WorkQueue>>,
    /// The embedded store is this process's alone while it is open (no worker can run a
    /// task); on AWS workers run.
    cancel: CancelMode,
}

async fn open(b: &Backend) -> Result<Opened, Fail> {
    if b.aws {
        return aws::open(b).await;
    }
    let store = admin::open_embedded(&b.data_dir).map_err(|e| Fail(2, with_causes(&e)))?;
    Ok(Opened {
        store: Arc::new(store),
        queue: None,
        cancel: CancelMode::AtOnce,
    })
}

async fn list(a: ListArgs) -> Result<i32, Fail> {
    let query = ListQuery {
        tenant: a.tenant,
        status: a.status,
        limit: a.limit,
        after: a.after,
    };
    let opened = open(&a.backend).await?;
    let page = admin::list(&*opened.store, &query).await?;
    if a.json {
        for t in &page.tasks {
            println!("{}", json_text(&json!(t), false));
        }
        if let Some(next) = &page.next {
            println!("{}", json_text(&json!({ "next": next }), false));
        }
        return Ok(0);
    }
    for t in &page.tasks {
        println!("{}", task_line(t));
    }
    match &page.next {
        Some(next) => eprintln!("next page: --after {next}"),
        None if page.tasks.is_empty() => eprintln!("no unfinished tasks"),
        None => {}
    }
    Ok(0)
}

/// One listed task: id, tenant, status, tool, created, updated, message (tab-separated).
fn task_line(t: &TaskSummary) -> String {
    let status = match t.expired {
        true => format!("{} (expired)", t.status.as_str()),
        false => t.status.as_str().to_owned(),
    };
    [
        plain(&t.task_id),
        plain(&t.tenant),
        status,
        plain(&t.tool),
        t.created_at.clone(),
        t.last_updated_at.clone(),
        plain(t.status_message.as_deref().unwrap_or("")),
    ]
    .join("\t")
}

async fn show(a: ShowArgs) -> Result<i32, Fail> {
    let opened = open(&a.backend).await?;
    let d = admin::show(&*opened.store, TaskRef::new(&a.tenant, &a.id), a.arguments).await?;
    if a.json {
        println!("{}", json_text(&d.to_json(), false));
    } else {
        print_details(&d);
    }
    Ok(0)
}

fn print_details(d: &TaskDetails) {
    let s = d.summary();
    let r = &d.record;
    let row = |k: &str, v: &str| println!("{k:<18}{}", plain(v));
    row("task", &s.task_id);
    row("tenant", &s.tenant);
    row("status", s.status.as_str());
    row("tool", &s.tool);
    if let Some(m) = &s.status_message {
        row("message", m);
    }
    row("created", &s.created_at);
    row("updated", &s.last_updated_at);
    let v = d.to_json();
    match v["expires_at"].as_str() {
        Some(at) if d.expired => row("expires", &format!("{at} (expired)")),
        Some(at) => row("expires", at),
        None => row("expires", "never"),
    }
    row("poll interval", &format!("{} ms", r.poll_interval_ms));
    row("version", &r.version.to_string());
    row(
        "runs",
        &format!(
            "{} (interrupted {} in a row, {} died in all)",
            r.attempts, r.interruptions, r.deaths
        ),
    );
    if r.cancel_requested {
        row("cancel requested", "yes");
    }
    if let Some(l) = &r.lease {
        row(
            "lease",
            &format!(
                "{} until {}",
                l.owner,
                mcp_tasks_core::clock::iso8601(l.expires_at_ms)
            ),
        );
    }
    if let Some(w) = r.wake_at_ms {
        row("wakes at", &mcp_tasks_core::clock::iso8601(w));
    }
    // The JSON parts, pretty, every control character in their strings escaped.
    for (label, key) in [
        ("input requests", "input_requests"),
        ("input responses", "input_responses"),
        ("result", "result"),
        ("error", "error"),
        ("checkpoint", "checkpoint"),
        ("arguments", "arguments"),
    ] {
        let value = &v[key];
        let empty = value.is_null() || value.as_object().is_some_and(|o| o.is_empty());
        if !empty {
            let text = json_text(value, true);
            println!("{label}:\n{}", indent(&text));
        }
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn cancel(a: CancelArgs) -> Result<i32, Fail> {
    let opened = open(&a.backend).await?;
    let engine = admin::engine(opened.store.clone(), opened.queue.clone());
    match admin::cancel(
        &engine,
        &*opened.store,
        TaskRef::new(&a.tenant, &a.id),
        opened.cancel,
    )
    .await?
    {
        CancelOutcome::Cancelled(t) => println!("cancelled {}", t.task_id),
        CancelOutcome::Requested(t) => println!(
            "cancel requested for {}: the worker running it stops it within about a second",
            t.task_id
        ),
    }
    Ok(0)
}

const NO_DLQ: &str = "the embedded store has no dead-letter queue: the local worker fails a \
                      task it gives up on (see `mcp-tasks tasks list` and `tasks show`); use \
                      --aws for the deployed work queue's";

async fn dlq_list(a: DlqListArgs) -> Result<i32, Fail> {
    if !a.backend.aws {
        return Err(Fail(2, NO_DLQ.into()));
    }
    aws::dlq_list(&a).await
}

async fn dlq_redrive(a: DlqListArgs) -> Result<i32, Fail> {
    if !a.backend.aws {
        return Err(Fail(2, NO_DLQ.into()));
    }
    aws::dlq_redrive(&a).await
}

/// `s` with control characters escaped (a tenant, a message: written by others, shown on a
/// terminal).
fn plain(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = match c.is_control() {
                true => c.escape_default().collect(),
                false => vec![c],
            };
            escaped
        })
        .collect()
}

/// The flag, else the environment variable (non-empty).
#[cfg_attr(not(feature = "aws"), allow(dead_code))]
fn flag_or_env(flag: &Option<String>, var: &str) -> Option<String> {
    flag.clone()
        .or_else(|| std::env::var(var).ok().filter(|v| !v.is_empty()))
}

#[cfg(not(feature = "aws"))]
mod aws {
    use super::{Backend, DlqListArgs, Fail, Opened};

    const NO_AWS: &str = "this mcp-tasks was built without AWS support (cargo feature `aws`)";

    pub async fn open(_: &Backend) -> Result<Opened, Fail> {
        Err(Fail(2, NO_AWS.into()))
    }
    pub async fn dlq_list(_: &DlqListArgs) -> Result<i32, Fail> {
        Err(Fail(2, NO_AWS.into()))
    }
    pub async fn dlq_redrive(_: &DlqListArgs) -> Result<i32, Fail> {
        Err(Fail(2, NO_AWS.into()))
    }
}

#[cfg(feature = "aws")]
mod aws;
