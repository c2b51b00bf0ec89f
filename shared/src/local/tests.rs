use super::*;
use crate::app::ToolSources;
use crate::engine::{Engine, TaskSettings};
use crate::store::memory::MemoryStore;
use crate::task::TaskRef;
use crate::worker::{Worker, WorkerSettings};

#[tokio::test]
async fn a_task_waiting_for_a_place_is_queued_once_however_often_it_is_sent() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryStore::new());
    let (queue, rx) = LocalQueue::new();
    let queue: Arc<dyn WorkQueue> = Arc::new(queue);
    let registry = crate::app::serving_registry(vec![crate::tools::doubles::wait()]);
    let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
    let worker = Arc::new(Worker::new(
        store,
        queue.clone(),
        registry,
        WorkerSettings::default(),
    ));
    // One place, held: everything sent waits.
    let gate = FairGate::new(1, 1);
    let held = gate.acquire(&"someone-else".into()).await;
    let (_stop_tx, stop) = watch::channel(false);
    tokio::spawn(run_worker_pool(
        worker,
        queue.clone(),
        rx,
        gate.clone(),
        stop,
    ));
    let task = engine
        .create_task(
            &"t".into(),
            "wait",
            serde_json::json!({"seconds": 0}),
            serde_json::Value::Null,
            serde_json::json!({}),
        )
        .await
        .unwrap();
    // The sweep re-sends a waiting task every round: a thousand rounds.
    for _ in 0..1000 {
        engine.sweep(Duration::ZERO).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        gate.waiting(&"t".into()),
        1,
        "one waiter, not one per message"
    );
    drop(held);
    // It runs once its turn comes.
    for _ in 0..100 {
        if engine
            .get(TaskRef::new(&"t".into(), &task.task_id))
            .await
            .unwrap()
            .status
            .is_terminal()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the task never ran");
}

#[test]
fn the_metrics_flag_is_off_an_address_or_the_default_if_free() {
    assert_eq!(
        MetricsListen::from_flag(None),
        Ok(MetricsListen::IfFree(DEFAULT_METRICS_LISTEN))
    );
    assert_eq!(
        MetricsListen::from_flag(Some("OFF")),
        Ok(MetricsListen::Off)
    );
    assert_eq!(
        MetricsListen::from_flag(Some("0.0.0.0:9464")),
        Ok(MetricsListen::At("0.0.0.0:9464".parse().unwrap()))
    );
    assert!(MetricsListen::from_flag(Some("localhost")).is_err());
}

#[tokio::test]
async fn a_taken_metrics_address_is_fatal_only_when_it_was_asked_for() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let hosts = ServiceConfig::default().allowed_hosts;
    let quiet = metrics_listen::bind(MetricsListen::IfFree(addr), &hosts).await;
    assert!(matches!(quiet, Ok(None)));
    let asked = metrics_listen::bind(MetricsListen::At(addr), &hosts).await;
    assert!(matches!(asked, Err(StartError::MetricsListen { .. })));
    // On loopback the listener keeps the loopback names; elsewhere any host is let through.
    let (_, names) =
        metrics_listen::bind(MetricsListen::At("127.0.0.1:0".parse().unwrap()), &hosts)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(names, hosts);
    let (_, names) = metrics_listen::bind(MetricsListen::At("0.0.0.0:0".parse().unwrap()), &hosts)
        .await
        .unwrap()
        .unwrap();
    assert!(names.is_empty());
}

/// One request to `server` as a 2026-07-28 client declaring the tasks extension.
async fn post(
    server: &LocalServer,
    method: &str,
    name: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let mut params = params;
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    });
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let answer = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let v: serde_json::Value = answer.json().await.unwrap();
    assert!(v.get("error").is_none(), "{method}: {v}");
    v["result"].clone()
}

/// The seam a new store plugs into: the whole server over the memory store, picked by one
/// option, creates, serves and completes a task through real HTTP — and never touches the
/// data directory.
#[tokio::test]
async fn a_server_over_the_memory_store_runs_a_task_to_completion_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("never-created");
    let mut opts = LocalOptions::new("127.0.0.1:0".parse().unwrap(), data_dir.clone());
    opts.store = LocalStore::Memory;
    opts.tools = ToolSources::rust(vec![crate::tools::doubles::wait()]);
    let server = start(opts).await.unwrap();
    let created = post(
        &server,
        "tools/call",
        "wait",
        serde_json::json!({"name": "wait", "arguments": {"seconds": 0.05}}),
    )
    .await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    let mut last = serde_json::Value::Null;
    for _ in 0..200 {
        last = post(&server, "tasks/get", &id, serde_json::json!({"taskId": id})).await;
        assert_eq!(last["taskId"], id.as_str(), "{last}");
        if last["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(last["status"], "completed", "{last}");
    assert!(!data_dir.exists(), "the memory store wrote nothing to disk");
}
