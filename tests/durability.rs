//! Durability, black-box: tasks and checkpoints survive a `kill -9`, and an interrupted job
//! resumes from its last checkpoint and completes exactly once.

mod support;

use std::time::Duration;

use serde_json::Value;
use serde_json::json;
use support::{Server, data_dir, expected_hash_chain};

/// Rounds done, from a `hash_chain` task's status message ("Hashed N of M rounds").
fn done_rounds(t: &Value) -> u64 {
    t["statusMessage"]
        .as_str()
        .and_then(|m| m.strip_prefix("Hashed "))
        .and_then(|m| m.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_job_killed_mid_run_resumes_from_its_checkpoint_and_completes_once() {
    let dir = data_dir();
    let first = Server::start(dir.path(), &[]);
    let c = first.client().with_tasks();
    let rounds = 2_000_000; // 10 steps of 200k rounds, each followed by a 300 ms pause
    let created = c
        .tool(
            "hash_chain",
            json!({"seed": "crash", "rounds": rounds, "pace_ms": 300}),
        )
        .await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    // Wait until a checkpoint beyond the start has been saved: checkpoints are written at
    // most once a second, and 5 steps take well over that.
    c.wait_task(&id, Duration::from_secs(30), |t| {
        done_rounds(t) >= 1_000_000
    })
    .await;
    let log1 = first.kill();
    assert!(
        !log1.contains(&format!("task.completed task_id={id}")),
        "finished before the kill"
    );

    let second = Server::start(dir.path(), &[]);
    let c = second.client().with_tasks();
    let before = c.get_task(&id).await;
    assert_eq!(before["createdAt"], created["createdAt"]);
    let done = c.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let sc = &done["result"]["structuredContent"];
    assert_eq!(sc["digest"], expected_hash_chain("crash", rounds));
    assert!(
        sc["resumedAt"].as_u64().unwrap() > 0,
        "resumed from a checkpoint, not from scratch: {sc}"
    );
    let log2 = second.kill();
    let completions = format!("{log1}{log2}")
        .lines()
        .filter(|l| l.contains("task.completed") && l.contains(&id))
        .count();
    assert_eq!(completions, 1, "completed exactly once");
    assert!(log2.contains("recovered unfinished tasks"));
}

/// A sleeping `wait` holds nothing but its record: killed mid-sleep, the server's restart
/// recovery finds it, gives it back to the queue until its wake time, and it completes then —
/// not early, not lost, once.
#[tokio::test]
async fn a_sleeping_wait_survives_a_restart_and_wakes_on_time() {
    let dir = data_dir();
    let first = Server::start(dir.path(), &[]);
    let c = first.client().with_tasks();
    let created = std::time::Instant::now();
    let id = c.tool("wait", json!({"seconds": 6})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    c.wait_task(&id, Duration::from_secs(5), |t| {
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("Waiting"))
    })
    .await;
    first.kill();
    let second = Server::start(dir.path(), &[]);
    let c = second.client().with_tasks();
    let asleep = c.get_task(&id).await;
    assert_eq!(asleep["status"], "working", "{asleep}");
    let done = c.wait_terminal(&id, Duration::from_secs(20)).await;
    let took = created.elapsed();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Waited 6 s.");
    assert!(took >= Duration::from_secs(6), "woke early: {took:?}");
    assert!(took < Duration::from_secs(12), "woke late: {took:?}");
}

#[tokio::test]
async fn finished_tasks_survive_a_restart() {
    let dir = data_dir();
    let first = Server::start(dir.path(), &[]);
    let c = first.client().with_tasks();
    let id = c.tool("wait", json!({"seconds": 0.2})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = c.wait_terminal(&id, Duration::from_secs(10)).await;
    first.kill();
    let second = Server::start(dir.path(), &[]);
    let again = second.client().with_tasks().get_task(&id).await;
    assert_eq!(again["status"], done["status"]);
    assert_eq!(again["result"], done["result"]);
    assert_eq!(again["lastUpdatedAt"], done["lastUpdatedAt"]);
}

#[tokio::test]
async fn a_second_server_cannot_open_a_data_dir_in_use() {
    let dir = data_dir();
    let _first = Server::start(dir.path(), &[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("data directory"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The server answers at once after a restart with many tasks in flight (their runs died with
/// the previous process), and recovers them in the background: serve first, recover after.
#[tokio::test]
async fn a_restart_with_ten_thousand_tasks_in_flight_answers_at_once() {
    const N: usize = 10_000;
    let dir = data_dir();
    // What a crash leaves: N working `wait` tasks, each under the lease of a dead run.
    support::seed_in_flight(dir.path(), N).await;
    let started = std::time::Instant::now();
    let s = Server::start(dir.path(), &["--max-active-tasks", "20000"]);
    let c = s.client().with_tasks();
    c.call("server/discover", json!({})).await;
    let first_answer = started.elapsed();
    eprintln!(
        "durability: first answer {} ms after starting with {N} tasks in flight",
        first_answer.as_millis()
    );
    assert!(
        first_answer < Duration::from_secs(2),
        "clients wait {first_answer:?} for a server that is recovering"
    );
    // And recovery happens: the dead runs' leases are released and the tasks run again.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let log = s.log.lock().unwrap().clone();
        if log.contains("recovered unfinished tasks") {
            assert!(
                log.contains(&format!("tasks={N}")),
                "{}",
                &log[log.len().saturating_sub(2000)..]
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "recovery did not finish"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The task database holds every tenant's arguments and results: only its owner reads it.
#[cfg(unix)]
#[tokio::test]
async fn the_data_directory_and_database_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let root = data_dir();
    // A new data directory.
    let fresh = root.path().join("fresh");
    let s = Server::start(&fresh, &[]);
    assert_eq!(mode(&fresh), 0o700);
    assert_eq!(mode(&fresh.join("tasks.redb")), 0o600);
    assert_eq!(mode(&fresh.join("state.key")), 0o600);
    drop(s);
    // One an older version left world-readable is tightened on start.
    let old = root.path().join("old");
    std::fs::create_dir(&old).unwrap();
    drop(Server::start(&old, &[]));
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        old.join("tasks.redb"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let s = Server::start(&old, &[]);
    assert_eq!(mode(&old), 0o700);
    assert_eq!(mode(&old.join("tasks.redb")), 0o600);
    drop(s);
}
