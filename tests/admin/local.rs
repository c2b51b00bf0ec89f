//! The embedded store of a stopped server: listed, shown, cancelled; never while in use.

use serde_json::json;

use crate::support::{Server, data_dir};
use crate::{WITHIN, next_page, on, stop};

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
