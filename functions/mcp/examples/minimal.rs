//! The floor of a cold start: a `lambda_http` function built like the `mcp` function's main
//! (the same tokio runtime, the same tracing subscriber, `lambda_http::run` in buffered mode)
//! that answers every request with one fixed, small `server/discover`-like JSON-RPC result. No
//! configuration, no AWS SDK, no router: what any Rust `lambda_http` function costs.
//!
//! tests/cold_start.rs starts it side by side with the real `mcp` function (`COLD START` lines):
//!
//! ```text
//! cargo build --release -p mcp-tasks-mcp --example minimal
//! ```

use lambda_http::{Body, Error, Request, Response, run, service_fn, tracing};

/// The fixed answer: a `server/discover` result's shape, constant.
const DISCOVER: &str = concat!(
    r#"{"jsonrpc":"2.0","id":1,"result":{"#,
    r#""supportedVersions":["2026-07-28"],"#,
    r#""capabilities":{"tools":{"listChanged":false}},"#,
    r#""serverInfo":{"name":"minimal","version":"0.1.0"}}}"#,
);

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    run(service_fn(|_: Request| async {
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from(DISCOVER))
            .map_err(Error::from)
    }))
    .await
}
