//! What the commands refuse, with a clear message: hostile inputs, a DLQ without AWS.

use crate::support::data_dir;
use crate::{on, run};

#[tokio::test]
async fn hostile_inputs_are_refused_with_a_clear_message() {
    let dir = data_dir();
    drop(
        mcp_tasks_core::store::embedded::EmbeddedStore::open(&dir.path().join("tasks.redb"))
            .unwrap(),
    );
    let id = mcp_tasks_core::task::TaskId::generate();
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
