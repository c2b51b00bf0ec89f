//! `mcp-tasks tasks …` and `mcp-tasks dlq …`, black-box: the real binary on the data directory
//! of a real (stopped) server, and — with feature `aws` — on the DynamoDB/SQS emulator.
//!
//! The AWS test needs `DYNAMODB_ENDPOINT`/`AWS_ENDPOINT_URL_DYNAMODB` and
//! `SQS_ENDPOINT`/`AWS_ENDPOINT_URL_SQS`; without them it prints a loud SKIPPED line and
//! passes, unless `REQUIRE_EMULATORS` is set.
//!
//! ```text
//! scripts/aws-emulator.sh start
//! E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
//!   cargo test -p mcp-tasks --all-features --test admin
//! ```

#[cfg(feature = "aws")]
#[path = "../shared/tests/common/mod.rs"]
mod common;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Server, data_dir};

const WITHIN: Duration = Duration::from_secs(20);

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect()
    }

    #[track_caller]
    fn ok(self) -> Self {
        assert_eq!(self.code, 0, "{self:?}");
        self
    }

    /// Exit status `code`, with a one-line message on stderr containing `says`.
    #[track_caller]
    fn fails(self, code: i32, says: &str) -> Self {
        assert_eq!(self.code, code, "{self:?}");
        assert!(self.stderr.contains(says), "wanted {says:?}: {self:?}");
        self
    }
}

/// Runs `mcp-tasks ARGS` with `env` (and nothing of the caller's AWS settings).
fn run_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.args(args).env("NO_COLOR", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_")
            || [
                "TABLE_NAME",
                "QUEUE_URL",
                "DLQ_URL",
                "DYNAMODB_ENDPOINT",
                "SQS_ENDPOINT",
            ]
            .contains(&k.as_str())
        {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run mcp-tasks");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(args: &[&str]) -> Run {
    run_with(args, &[])
}

/// `args` followed by `--data-dir DIR`.
fn on(dir: &Path, args: &[&str]) -> Run {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--data-dir");
    all.push(dir.to_str().unwrap());
    run(&all)
}

/// SIGTERM, then waits for the server to exit (it releases the store as it goes).
fn stop(mut s: Server) {
    let killed = Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let start = Instant::now();
    while !s.exited() {
        assert!(
            start.elapsed() < WITHIN,
            "the server did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `--after` value of a text listing's `next page:` line.
fn next_page(r: &Run) -> Option<String> {
    r.stderr
        .lines()
        .find_map(|l| l.strip_prefix("next page: --after "))
        .map(str::to_owned)
}

#[tokio::test]
async fn tasks_are_listed_shown_and_cancelled_in_a_stopped_servers_store() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let mut long = Vec::new();
    for _ in 0..2 {
        let created = c.tool("wait", json!({"seconds": 600})).await;
        long.push(created["taskId"].as_str().unwrap().to_owned());
    }
    long.sort();
    let quick = c.tool("wait", json!({"seconds": 0.1})).await;
    let quick = quick["taskId"].as_str().unwrap().to_owned();
    let done = c.wait_terminal(&quick, WITHIN).await;
    assert_eq!(done["status"], "completed", "{done}");
    // Both long jobs run (their first progress is written) before the server stops.
    for id in &long {
        c.wait_task(id, WITHIN, |t| t["statusMessage"].is_string())
            .await;
    }
    stop(s);

    // Every tenant's unfinished tasks: the two long ones, not the finished one.
    let all = on(dir.path(), &["tasks", "list"]).ok();
    assert_eq!(all.lines().len(), 2, "{all:?}");
    for (line, id) in all.lines().iter().zip(&long) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(
            cols[..4],
            [id.as_str(), "local", "working", "wait"],
            "{line}"
        );
        assert!(cols[4].ends_with('Z') && cols[5].ends_with('Z'), "{line}");
        assert!(cols[6].contains("600.0 s"), "{line}");
    }
    assert!(!all.stdout.contains(&quick));
    let json_all = on(dir.path(), &["tasks", "list", "--json"]).ok();
    let tasks = json_all.json_lines();
    assert_eq!(tasks.len(), 2, "{json_all:?}");
    assert_eq!(tasks[0]["task_id"], long[0].as_str());
    assert_eq!(tasks[0]["tenant"], "local");
    assert_eq!(tasks[0]["status"], "working");
    assert!(tasks[0]["created_at"].as_str().unwrap().ends_with('Z'));

    // One tenant, page by page: the cursor goes to stderr in text, as a last line in JSON.
    let first = on(
        dir.path(),
        &["tasks", "list", "--tenant", "local", "--limit", "1"],
    )
    .ok();
    assert_eq!(first.lines().len(), 1);
    assert!(first.stdout.starts_with(&long[0]), "{first:?}");
    let cursor = next_page(&first).expect("a next page");
    let second = on(
        dir.path(),
        &[
            "tasks", "list", "--tenant", "local", "--limit", "1", "--after", &cursor,
        ],
    )
    .ok();
    assert!(second.stdout.starts_with(&long[1]), "{second:?}");
    let json_first = on(
        dir.path(),
        &[
            "tasks", "list", "--tenant", "local", "--limit", "1", "--json",
        ],
    )
    .ok();
    let lines = json_first.json_lines();
    assert_eq!(lines.len(), 2, "{json_first:?}");
    assert_eq!(lines[1], json!({"next": cursor}));
    // A cursor continues only its own kind of listing.
    on(dir.path(), &["tasks", "list", "--after", &cursor]).fails(2, "belongs to a listing");
    let none = on(dir.path(), &["tasks", "list", "--status", "input_required"]).ok();
    assert!(none.stdout.is_empty() && none.stderr.contains("no unfinished tasks"));
    let other = on(dir.path(), &["tasks", "list", "--tenant", "someone-else"]).ok();
    assert!(other.stdout.is_empty(), "{other:?}");

    // Show: the whole record, never the arguments unless asked.
    let shown = on(
        dir.path(),
        &["tasks", "show", &long[0], "--tenant", "local"],
    )
    .ok();
    assert!(
        shown
            .stdout
            .contains(&format!("task              {}", long[0])),
        "{shown:?}"
    );
    assert!(
        shown.stdout.contains("status            working"),
        "{shown:?}"
    );
    assert!(
        !shown.stdout.contains("seconds"),
        "arguments shown: {shown:?}"
    );
    let record = on(
        dir.path(),
        &["tasks", "show", &long[0], "--tenant", "local", "--json"],
    )
    .ok()
    .json_lines()
    .remove(0);
    assert_eq!(record["status"], "working");
    assert_eq!(record["tool"], "wait");
    assert!(record.get("arguments").is_none(), "{record}");
    let with_args = on(
        dir.path(),
        &[
            "tasks",
            "show",
            &long[0],
            "--tenant",
            "local",
            "--json",
            "--arguments",
        ],
    )
    .ok()
    .json_lines()
    .remove(0);
    assert_eq!(with_args["arguments"], json!({"seconds": 600}));
    let finished = on(dir.path(), &["tasks", "show", &quick, "--tenant", "local"]).ok();
    assert!(
        finished.stdout.contains("status            completed"),
        "{finished:?}"
    );
    assert!(
        finished.stdout.contains("Waited 0.1 s."),
        "the result: {finished:?}"
    );
    on(
        dir.path(),
        &["tasks", "show", &quick, "--tenant", "someone-else"],
    )
    .fails(1, "no task");

    // Cancel through the engine: once, then refused; a finished task is refused.
    let cancelled = on(
        dir.path(),
        &["tasks", "cancel", &long[0], "--tenant", "local"],
    )
    .ok();
    assert_eq!(cancelled.stdout.trim(), format!("cancelled {}", long[0]));
    let after = on(
        dir.path(),
        &["tasks", "show", &long[0], "--tenant", "local"],
    )
    .ok();
    assert!(
        after.stdout.contains("status            cancelled"),
        "{after:?}"
    );
    on(
        dir.path(),
        &["tasks", "cancel", &long[0], "--tenant", "local"],
    )
    .fails(1, "is already cancelled");
    on(
        dir.path(),
        &["tasks", "cancel", &quick, "--tenant", "local"],
    )
    .fails(1, "is already completed");
    let left = on(dir.path(), &["tasks", "list"]).ok();
    assert_eq!(left.lines().len(), 1);
    assert!(left.stdout.starts_with(&long[1]));

    // The server, started again, sees the cancel; the other task still runs.
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    assert_eq!(c.get_task(&long[0]).await["status"], "cancelled");
    assert_eq!(c.get_task(&long[1]).await["status"], "working");
}

#[tokio::test]
async fn a_running_server_keeps_its_data_directory_to_itself() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let id = c.tool("wait", json!({"seconds": 600})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let in_use = "is in use by a running `mcp-tasks serve`; stop it first";
    on(dir.path(), &["tasks", "list"]).fails(2, in_use);
    on(dir.path(), &["tasks", "cancel", &id, "--tenant", "local"]).fails(2, in_use);
    // Nothing changed: the server still runs the task.
    assert_eq!(c.get_task(&id).await["status"], "working");
}

#[test]
fn a_missing_or_foreign_data_directory_is_an_error_not_an_empty_list() {
    let dir = data_dir();
    let typo = dir.path().join("mcp-taks");
    on(&typo, &["tasks", "list"]).fails(2, "there is no data directory");
    assert!(!typo.exists(), "the data directory was created");
    on(dir.path(), &["tasks", "list"]).fails(2, "holds no task store");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "something was created in an empty directory"
    );
}

#[tokio::test]
async fn hostile_inputs_are_refused_with_a_clear_message() {
    let dir = data_dir();
    drop(
        mcp_tasks_core::store::embedded::EmbeddedStore::open(&dir.path().join("tasks.redb"))
            .unwrap(),
    );
    let id = mcp_tasks_core::task::new_task_id();
    let long_tenant = "t".repeat(300);
    let cases: [(&[&str], &str); 11] = [
        (
            &["tasks", "list", "--tenant", "a\x07b\x1b[2J"],
            "contains control characters",
        ),
        (
            &["tasks", "show", &id, "--tenant", "a\nb"],
            "contains control characters",
        ),
        (
            &["tasks", "show", "tsk_\x1b[2J", "--tenant", "local"],
            "is not a task id",
        ),
        (
            &["tasks", "cancel", &"x".repeat(200), "--tenant", "local"],
            "is not a task id",
        ),
        (
            &["tasks", "show", &id, "--tenant", &long_tenant],
            "is too long",
        ),
        (
            &["tasks", "list", "--limit", "1000000"],
            "the limit must be from 1 to 1000",
        ),
        (
            &["tasks", "list", "--limit", "99999999999999999999999"],
            "not a number from 1 to 1000",
        ),
        (
            &["tasks", "list", "--limit", "0"],
            "the limit must be from 1 to 1000",
        ),
        (
            &["tasks", "list", "--status", "done"],
            "unknown status \"done\"",
        ),
        (
            &["tasks", "list", "--status", "completed"],
            "finished tasks (completed) are not listed",
        ),
        (
            &["tasks", "list", "--after", "not-a-cursor\x07"],
            "is not a cursor",
        ),
    ];
    for (args, says) in cases {
        let r = on(dir.path(), args).fails(2, says);
        assert!(
            !r.stderr.contains('\x1b') && !r.stderr.contains('\x07'),
            "a control character reached the terminal: {r:?}"
        );
    }
    // A 100 KB value: refused, and the message stays short (clap quotes the whole value).
    let huge = "a".repeat(100_000);
    let r = on(dir.path(), &["tasks", "show", &id, "--tenant", &huge]).fails(2, "is too long");
    assert!(r.stderr.len() < 2_000, "{} bytes of error", r.stderr.len());
    // Well-formed but unknown: not found (1), not a usage error.
    on(dir.path(), &["tasks", "show", &id, "--tenant", "local"]).fails(1, "no task");
    on(dir.path(), &["tasks", "cancel", &id, "--tenant", "local"]).fails(1, "no task");
    // The two backends exclude each other.
    run(&["tasks", "list", "--aws", "--data-dir", "x"]).fails(2, "cannot be used with");
}

#[test]
fn the_dead_letter_queue_is_aws_only() {
    let dir = data_dir();
    for cmd in ["list", "redrive"] {
        on(dir.path(), &["dlq", cmd]).fails(2, "the embedded store has no dead-letter queue");
    }
}

#[cfg(feature = "aws")]
mod aws {
    use std::time::Duration;

    use aws_sdk_sqs::types::MessageSystemAttributeName;
    use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
    use mcp_tasks_core::aws::sqs::SqsQueue;
    use mcp_tasks_core::queue::{WorkKind, WorkMessage};
    use mcp_tasks_core::store::{TaskRef, TaskStore as _};
    use mcp_tasks_core::task::{Lease, TaskRecord, new_task_id};
    use serde_json::{Value, json};

    use super::{Run, common, run_with};

    async fn task(store: &DynamoStore, tenant: &str) -> TaskRecord {
        let t = TaskRecord::new(tenant, new_task_id(), "wait", None, 1000, json!({}));
        store
            .create(&t, &json!({"seconds": 600, "note": "ARG-SECRET"}))
            .await
            .unwrap();
        store.get(t.key()).await.unwrap().unwrap()
    }

    /// Receives every message of `url` (waiting up to a few seconds for stragglers).
    async fn drain(sqs: &aws_sdk_sqs::Client, url: &str, want: usize) -> Vec<String> {
        let mut bodies = Vec::new();
        let start = std::time::Instant::now();
        while bodies.len() < want && start.elapsed() < Duration::from_secs(10) {
            let got = sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .visibility_timeout(60)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .unwrap();
            for m in got.messages.unwrap_or_default() {
                bodies.push(m.body.unwrap_or_default());
            }
        }
        bodies
    }

    #[tokio::test]
    async fn tasks_and_the_dead_letter_queue_on_the_aws_emulator() {
        let Some([ddb, sqs_endpoint]) =
            common::endpoints("admin::aws", [common::DYNAMODB, common::SQS])
        else {
            return;
        };
        let dynamo = aws_sdk_dynamodb::Client::new(&common::sdk_config(&ddb).await);
        let sqs = aws_sdk_sqs::Client::new(&common::sdk_config(&sqs_endpoint).await);
        let table = common::unique("admin");
        create_table(&dynamo, &table).await.unwrap();
        let (queue_url, dlq_url) = SqsQueue::create_queue_with_dlq(
            &sqs,
            &common::unique("admin-work"),
            Duration::from_secs(30),
            3,
        )
        .await
        .unwrap();
        let home = tempfile::tempdir().unwrap();
        let home = home.path().to_str().unwrap().to_owned();
        let env = [
            ("HOME", home.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("DYNAMODB_ENDPOINT", ddb.as_str()),
            ("SQS_ENDPOINT", sqs_endpoint.as_str()),
            ("TABLE_NAME", table.as_str()),
            ("QUEUE_URL", queue_url.as_str()),
            ("DLQ_URL", dlq_url.as_str()),
        ];
        let mcp = |args: &[&str]| -> Run {
            let mut all = args.to_vec();
            all.push("--aws");
            run_with(&all, &env)
        };

        let store = DynamoStore::new(dynamo.clone(), table.clone());
        let mut alice = [
            task(&store, "alice").await,
            task(&store, "alice").await,
            task(&store, "alice").await,
        ];
        alice.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        let bob = task(&store, "bob").await;
        // One waits for input; one has finished; one is held by a live worker.
        let mut asking = alice[1].clone();
        asking
            .require_input([("k".to_owned(), json!({"method": "elicitation/create"}))].into())
            .unwrap();
        store.update(&asking).await.unwrap();
        let done = task(&store, "alice").await;
        let mut finished = done.clone();
        finished
            .complete(json!({"content": [{"type": "text", "text": "RESULT-TEXT"}]}))
            .unwrap();
        store.update(&finished).await.unwrap();
        let mut held = alice[2].clone();
        held.lease = Some(Lease {
            owner: "a-live-worker".into(),
            expires_at_ms: mcp_tasks_core::clock::now_ms() + 600_000,
        });
        store.update(&held).await.unwrap();

        // Listing: one tenant in task-id order, a status, every tenant.
        let listed = mcp(&["tasks", "list", "--tenant", "alice"]).ok();
        let ids: Vec<&str> = listed
            .lines()
            .iter()
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        let want: Vec<&str> = alice.iter().map(|t| t.task_id.as_str()).collect();
        assert_eq!(ids, want, "{listed:?}");
        let asking_only = mcp(&[
            "tasks",
            "list",
            "--tenant",
            "alice",
            "--status",
            "input_required",
        ])
        .ok();
        assert_eq!(asking_only.lines().len(), 1);
        assert!(asking_only.stdout.contains(&alice[1].task_id));
        assert!(asking_only.stdout.contains("\tinput_required\t"));
        let every = mcp(&["tasks", "list", "--json"]).ok().json_lines();
        assert_eq!(every.len(), 4, "{every:?}");
        assert!(
            every
                .iter()
                .any(|t| t["tenant"] == "bob" && t["task_id"] == bob.task_id.as_str())
        );

        // Show: the result, not the arguments.
        let shown = mcp(&["tasks", "show", &done.task_id, "--tenant", "alice"]).ok();
        assert!(
            shown.stdout.contains("status            completed"),
            "{shown:?}"
        );
        assert!(shown.stdout.contains("RESULT-TEXT"));
        assert!(!shown.stdout.contains("ARG-SECRET"));
        let record = mcp(&[
            "tasks",
            "show",
            &bob.task_id,
            "--tenant",
            "bob",
            "--json",
            "--arguments",
        ])
        .ok()
        .json_lines()
        .remove(0);
        assert_eq!(record["arguments"]["note"], "ARG-SECRET");
        mcp(&["tasks", "show", &bob.task_id, "--tenant", "alice"]).fails(1, "no task");

        // Cancel: at once when nobody runs the task; a flag for the live worker; refused
        // when finished.
        let c = mcp(&["tasks", "cancel", &alice[0].task_id, "--tenant", "alice"]).ok();
        assert_eq!(c.stdout.trim(), format!("cancelled {}", alice[0].task_id));
        let now = store
            .get(TaskRef {
                tenant: "alice",
                task_id: &alice[0].task_id,
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(now.status.as_str(), "cancelled");
        let c = mcp(&["tasks", "cancel", &alice[2].task_id, "--tenant", "alice"]).ok();
        assert!(c.stdout.starts_with("cancel requested for"), "{c:?}");
        let now = store
            .get(TaskRef {
                tenant: "alice",
                task_id: &alice[2].task_id,
            })
            .await
            .unwrap()
            .unwrap();
        assert!(now.cancel_requested && now.status.as_str() == "working");
        mcp(&["tasks", "cancel", &done.task_id, "--tenant", "alice"])
            .fails(1, "is already completed");
        mcp(&["tasks", "cancel", &alice[0].task_id, "--tenant", "alice"])
            .fails(1, "is already cancelled");
        // Settings missing: a usage error naming them.
        run_with(&["tasks", "list", "--aws"], &[("AWS_REGION", "us-east-1")])
            .fails(2, "--aws needs --table or TABLE_NAME");

        // The dead-letter queue: two work messages and one that is not.
        let work = |t: &TaskRecord, kind| {
            serde_json::to_string(&WorkMessage {
                tenant: t.tenant.clone(),
                task_id: t.task_id.clone(),
                kind,
            })
            .unwrap()
        };
        for body in [
            work(&alice[1], WorkKind::Resume),
            work(&bob, WorkKind::Wake(2)),
            "GARBAGE-SECRET: not a work message".to_owned(),
        ] {
            sqs.send_message()
                .queue_url(&dlq_url)
                .message_body(body)
                .send()
                .await
                .unwrap();
        }
        let listed = mcp(&["dlq", "list"]).ok();
        assert_eq!(listed.lines().len(), 3, "{listed:?}");
        assert!(!format!("{listed:?}").contains("GARBAGE-SECRET"));
        let line_of = |r: &Run, id: &str| {
            r.lines()
                .into_iter()
                .find(|l| l.contains(id))
                .map(str::to_owned)
        };
        let a = line_of(&listed, &alice[1].task_id).expect("alice's message listed");
        assert!(a.contains("\talice\t") && a.ends_with("\tresume"), "{a}");
        assert!(a.contains("\treceives 1\t"), "{a}");
        let b = line_of(&listed, &bob.task_id).expect("bob's message listed");
        assert!(b.ends_with("\twake 2"), "{b}");
        assert_eq!(
            listed
                .lines()
                .iter()
                .filter(|l| l.ends_with("(not a work message)"))
                .count(),
            1
        );
        let as_json = mcp(&["dlq", "list", "--json"]).ok().json_lines();
        assert_eq!(as_json.len(), 3, "listing left the messages in place");
        assert!(as_json.iter().all(|m| m["message_id"].is_string()));
        assert!(!format!("{as_json:?}").contains("GARBAGE-SECRET"));

        // Redrive: the two work messages move; the other stays, reported (exit status 1).
        let moved = mcp(&["dlq", "redrive"]).fails(1, "moved 2 to the work queue; left 1");
        assert_eq!(
            moved
                .lines()
                .iter()
                .filter(|l| l.starts_with("moved\t"))
                .count(),
            2
        );
        assert_eq!(
            moved
                .lines()
                .iter()
                .filter(|l| l.starts_with("left\t"))
                .count(),
            1
        );
        assert!(!format!("{moved:?}").contains("GARBAGE-SECRET"));
        let mut arrived: Vec<String> = drain(&sqs, &queue_url, 2)
            .await
            .iter()
            .map(|b| {
                let v: Value = serde_json::from_str(b).unwrap();
                v["task_id"].as_str().unwrap().to_owned()
            })
            .collect();
        arrived.sort();
        let mut want = vec![alice[1].task_id.clone(), bob.task_id.clone()];
        want.sort();
        assert_eq!(arrived, want);
        let rest = drain(&sqs, &dlq_url, 1).await;
        assert_eq!(rest, ["GARBAGE-SECRET: not a work message"]);

        let _ = dynamo.delete_table().table_name(&table).send().await;
        for url in [&queue_url, &dlq_url] {
            let _ = sqs.delete_queue().queue_url(url).send().await;
        }
    }
}
