//! Lambda `mcp`: the MCP endpoint behind API Gateway — everything the local endpoint serves,
//! `tasks/*` included, through the same router.

use lambda_http::tower::ServiceExt as _;
use lambda_http::{Error, Request, RequestExt as _, run, run_with_streaming_response, service_fn};
use mcp_tasks_core::aws::lambda::{
    Config, Ports, Role, block_on, http_invocation, http_router, init_logging,
    prefer_one_cert_bundle, serving_tools,
};
use mcp_tasks_core::aws::sdk_config;
use mcp_tasks_tools::{BUNDLED_MANIFEST, ToolSet};

fn main() -> Result<(), Error> {
    // SAFETY: first thing in the process, before any thread (the runtime's) exists.
    unsafe { prefer_one_cert_bundle() };
    block_on(serve())
}

async fn serve() -> Result<(), Error> {
    init_logging();
    // The requestState key comes from Secrets Manager when the environment names its secret
    // (STATE_KEY_SECRET_ARN, as deployed), read at the first request that needs it (never
    // here: init makes no network call) with the SDK settings the ports use.
    let sdk = sdk_config().await;
    let config = Config::from_env(Role::Mcp)?.reading_secrets_with(&sdk);
    let tools = serving_tools(&config, ToolSet::tools_from_env()?, BUNDLED_MANIFEST).await?;
    let router = http_router(&config, &Ports::connect_with(&config, sdk), tools);
    // Behind a streaming integration (`RESPONSE_STREAMING=true`) every answer goes out as
    // it is written: a JSON answer as one whole body, an SSE answer event by event.
    let streamed = config.stream_budget.is_some();
    // Each request runs within its invocation's deadline; its metrics go out after it.
    let handler = service_fn(move |req: Request| {
        let deadline = req.lambda_context_ref().map(|c| c.deadline());
        http_invocation(Role::Mcp, streamed, deadline, router.clone().oneshot(req))
    });
    if streamed {
        run_with_streaming_response(handler).await
    } else {
        run(handler).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn config() -> Config {
        Config::from_lookup(Role::Mcp, |k| match k {
            "TABLE_NAME" => Some("tasks".into()),
            "QUEUE_URL" => Some("http://127.0.0.1:1/000000000000/work".into()),
            "STATE_KEY" => Some("a-test-key-of-at-least-32-characters".into()),
            "AUTH_MODE" => Some("none".into()),
            _ => None,
        })
        .unwrap()
    }

    /// Feeds an API Gateway event file through the router, as the runtime would.
    async fn invoke(event: &str) -> (u16, Value) {
        let (ports, _rx) = Ports::in_memory();
        let request = lambda_http::request::from_str(event).expect("an API Gateway event");
        let tools = serving_tools(&config(), ToolSet::Builtin.tools(), BUNDLED_MANIFEST)
            .await
            .unwrap();
        let response = http_router(&config(), &ports, tools)
            .oneshot(request)
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn the_sample_tools_list_events_list_the_builtin_tools() {
        // The REST API event the template delivers, and the same request as an HTTP API event.
        for event in [
            include_str!("../../../events/mcp-tools-list.json"),
            include_str!("../../../events/mcp-tools-list-http-api.json"),
        ] {
            let (status, body) = invoke(event).await;
            assert_eq!(status, 200, "{body}");
            let names: Vec<&str> = body["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| t["name"].as_str())
                .collect();
            assert!(names.contains(&"wait"), "{names:?}");
        }
    }

    #[tokio::test]
    async fn the_mcp_function_serves_tasks_methods_too() {
        let (_, body) = invoke(include_str!("../../../events/tasks-get.json")).await;
        assert_eq!(body["error"]["code"], -32602, "an unknown task: {body}");
    }
}
