//! The mcp function's synchronous calls take a running place in the shared record.

use super::*;

/// The mcp function runs a synchronous call's tool only in a running place of its tenant, in
/// the record every worker shares: with the tenant's one place held by a job, the call waits
/// out its budget and answers the quota refusal; with it free, the tool runs.
#[tokio::test]
async fn an_inline_call_of_the_mcp_function_takes_a_place_in_the_shared_record() {
    let mut vars = BASE.to_vec();
    vars.extend([
        ("STATE_KEY", "a-test-key-of-at-least-32-characters"),
        ("MAX_RUNNING_JOBS_PER_TENANT", "1"),
    ]);
    let config = env(Role::Mcp, &vars).unwrap();
    let (ports, _rx) = Ports::in_memory();
    let slots = ports.run_slots.clone().unwrap();
    let far = crate::clock::now_ms() + 60_000;
    assert!(
        slots
            .take(
                &crate::quota::SlotKey::runs_of(&"local".into()),
                "a-job",
                1,
                far
            )
            .await
            .unwrap()
    );
    let tools = crate::app::serving_registry(vec![crate::tools::doubles::wait()]);
    let service = super::service(&config, &ports, tools);
    let call = || {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "wait", "arguments": {"seconds": 0},
            "_meta": {"io.modelcontextprotocol/protocolVersion": crate::protocol::PROTOCOL_VERSION,
                      "io.modelcontextprotocol/clientCapabilities": {}}}});
        let mut headers = http::HeaderMap::new();
        for (k, v) in [
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("mcp-protocol-version", crate::protocol::PROTOCOL_VERSION),
            ("mcp-method", "tools/call"),
            ("mcp-name", "wait"),
        ] {
            headers.insert(k, http::HeaderValue::from_static(v));
        }
        crate::handler::HttpRequest {
            method: http::Method::POST,
            path: "/mcp".into(),
            headers,
            body: bytes::Bytes::from(serde_json::to_vec(&body).unwrap()),
        }
    };
    // An invocation with 2.5 s left: the call's budget is half a second.
    let answer = || async {
        let deadline = Some(Instant::now() + Duration::from_millis(2500));
        match crate::clock::within_deadline(deadline, service.handle(call()))
            .await
            .body
        {
            crate::handler::ReplyBody::Json(v) => v,
            _ => panic!("one JSON body"),
        }
    };
    let refused = answer().await;
    let quota = &refused["result"]["_meta"][crate::quota::QUOTA_META];
    assert_eq!(quota["limit"], "running_jobs", "{refused}");
    slots
        .release(&crate::quota::SlotKey::runs_of(&"local".into()), "a-job")
        .await
        .unwrap();
    let ran = answer().await;
    assert_eq!(ran["result"]["content"][0]["text"], "Waited.", "{ran}");
    // Given back: the job takes its place again.
    assert!(
        slots
            .take(
                &crate::quota::SlotKey::runs_of(&"local".into()),
                "a-job",
                1,
                far
            )
            .await
            .unwrap()
    );
}
