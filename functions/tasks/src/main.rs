//! Lambda `tasks`: `tasks/get`, `tasks/update` and `tasks/cancel` only (API Gateway routing
//! rules send `Mcp-Method: tasks/*` here); any other method is `-32601`.

use lambda_http::tower::ServiceExt as _;
use lambda_http::{Error, Request, RequestExt as _, run, service_fn};
use mcp_tasks_core::aws::lambda::{
    Config, Ports, Role, block_on, http_invocation, init_logging, prefer_one_cert_bundle,
    tasks_router,
};

fn main() -> Result<(), Error> {
    // SAFETY: first thing in the process, before any thread (the runtime's) exists.
    unsafe { prefer_one_cert_bundle() };
    block_on(serve())
}

async fn serve() -> Result<(), Error> {
    init_logging();
    let config = Config::from_env(Role::Tasks)?;
    let router = tasks_router(&config, &Ports::connect(&config).await);
    // Each request runs within its invocation's deadline; its metrics go out after it. The
    // answers are buffered.
    run(service_fn(move |req: Request| {
        let deadline = req.lambda_context_ref().map(|c| c.deadline());
        http_invocation(Role::Tasks, false, deadline, router.clone().oneshot(req))
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    async fn invoke(event: &str) -> Value {
        let config = Config::from_lookup(Role::Tasks, |k| match k {
            "TABLE_NAME" => Some("tasks".into()),
            "QUEUE_URL" => Some("http://127.0.0.1:1/000000000000/work".into()),
            "AUTH_MODE" => Some("none".into()),
            _ => None,
        })
        .unwrap();
        let (ports, _rx) = Ports::in_memory();
        let request = lambda_http::request::from_str(event).expect("an API Gateway event");
        let response = tasks_router(&config, &ports)
            .oneshot(request)
            .await
            .unwrap();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    #[tokio::test]
    async fn tasks_methods_are_served() {
        let body = invoke(include_str!("../../../events/tasks-get.json")).await;
        assert_eq!(body["error"]["code"], -32602, "an unknown task: {body}");
    }

    #[tokio::test]
    async fn every_other_method_does_not_exist_here() {
        let body = invoke(include_str!("../../../events/mcp-tools-list.json")).await;
        assert_eq!(body["error"]["code"], -32601, "{body}");
    }
}
