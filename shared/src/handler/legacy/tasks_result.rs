//! `tasks/result` (2025-11-25): a task's result once it is terminal, waiting for it up to the
//! synchronous budget.

use serde_json::{Map, Value, json};

use super::with_data;
use crate::handler::McpService;
use crate::protocol::McpError;
use crate::task::TaskId;
use crate::task::{TaskRef, TaskStatus};
use crate::tenant::Tenant;

/// `_meta` key that ties a `tasks/result` answer to its task (2025-11-25).
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

impl McpService {
    /// `tasks/result`: the task's `CallToolResult` (or its JSON-RPC error) once terminal,
    /// waiting up to the synchronous budget for that — or less, when the invocation serving
    /// it ends sooner (see [`result_deadline`]). The store's own time counts: a read starts
    /// only when the slowest read so far would still end by the deadline, and a read after
    /// the first is cut at the deadline (the status it would have told is the last one read).
    pub(super) async fn legacy_result(
        &self,
        id: TaskId,
        tenant: &Tenant,
    ) -> Result<Map<String, Value>, McpError> {
        let started = tokio::time::Instant::now();
        let deadline = result_deadline(
            started,
            self.config.sync_budget,
            crate::clock::invocation_deadline(),
        );
        let mut gap = std::time::Duration::from_millis(50);
        let mut slowest = std::time::Duration::ZERO;
        let mut last: Option<TaskStatus> = None;
        let task = loop {
            let began = tokio::time::Instant::now();
            let read = self.engine.get(TaskRef::new(tenant, &id));
            let task = match last {
                None => read.await?,
                Some(_) => match tokio::time::timeout_at(deadline, read).await {
                    Ok(task) => task?,
                    Err(_) => break None,
                },
            };
            slowest = slowest.max(began.elapsed());
            if task.status.is_terminal() {
                break Some(task);
            }
            last = Some(task.status);
            let now = tokio::time::Instant::now();
            // The next read, after the pause, must end by the deadline at the pace seen.
            let pause = gap.min(deadline.saturating_duration_since(now));
            if now >= deadline || now + pause + slowest > deadline {
                break None;
            }
            tokio::time::sleep(pause).await;
            gap = (gap * 2).min(std::time::Duration::from_millis(500));
        };
        let Some(task) = task else {
            let status = last.map_or("working", TaskStatus::as_str);
            return Err(with_data(
                McpError::invalid_params(format!(
                    "Task is still {status} after waiting {} s: poll tasks/get and call \
                     tasks/result again once it is terminal",
                    started.elapsed().as_secs()
                )),
                json!({"taskId": id, "status": status}),
            ));
        };
        let related = json!({RELATED_TASK: {"taskId": task.task_id}});
        match task.status {
            TaskStatus::Completed => {
                let mut m = task
                    .result
                    .as_ref()
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_else(|| {
                        let mut m = Map::new();
                        m.insert("content".into(), json!([]));
                        m
                    });
                m.remove("resultType");
                match m.get_mut("_meta") {
                    Some(Value::Object(own)) => {
                        own.insert(RELATED_TASK.into(), related[RELATED_TASK].clone());
                    }
                    _ => {
                        m.insert("_meta".into(), related);
                    }
                }
                Ok(m)
            }
            TaskStatus::Failed => {
                Err(McpError::from_object(task.error.clone().unwrap_or_else(
                    || crate::protocol::ErrorObject::internal("Task failed"),
                )))
            }
            _ => Err(with_data(
                McpError::invalid_params("Task was cancelled: it has no result"),
                json!({"taskId": id, "status": "cancelled"}),
            )),
        }
    }
}

/// What `tasks/result` keeps of an invocation's time for its answer: the last read of the
/// task (milliseconds on DynamoDB), the reply, the runtime's hand-back.
pub(super) const ANSWER_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// When `tasks/result` stops waiting and answers `-32602` with `data.status`: the synchronous
/// budget after `started`, but never later than [`ANSWER_MARGIN`] before the invocation's own
/// deadline. The `tasks` function runs 10 s (its Lambda timeout) where the budget is 25 s:
/// waiting the budget there would be a bare 502 from API Gateway, and 10 s billed, instead of
/// an answer the client can act on.
pub(super) fn result_deadline(
    started: tokio::time::Instant,
    budget: std::time::Duration,
    invocation: Option<tokio::time::Instant>,
) -> tokio::time::Instant {
    let by_budget = started + budget;
    match invocation {
        Some(d) => by_budget.min(d.checked_sub(ANSWER_MARGIN).unwrap_or(started)),
        None => by_budget,
    }
}
