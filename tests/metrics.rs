//! `GET /metrics` on the local server's operator listener (`--metrics-listen`): after a
//! scripted set of lifecycles the scrape shows exactly those counts (Prometheus text; the
//! names and meanings are those of the EMF lines the Lambda functions write, see
//! `shared/src/metrics.rs`), and never an id, an argument or a result — nor a tenant, unless
//! the operator asks for the bounded tenant dimension (`--metrics-tenants`). The MCP listener,
//! which tenants reach with their tokens, serves no metrics at all.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Server, data_dir};

const WITHIN: Duration = Duration::from_secs(20);

/// The flag that puts the metrics listener on a free loopback port (the test servers run side
/// by side; the default port is one).
const METRICS_ANYWHERE: [&str; 2] = ["--metrics-listen", "127.0.0.1:0"];

/// A GET of `url` with optional headers; the status and body.
async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = reqwest::Client::new().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// The operator's scrape of `s`.
async fn scrape(s: &Server) -> (u16, String) {
    let url = s.metrics_url.as_deref().expect("the server serves metrics");
    get(url, &[]).await
}

/// The value of one sample line (`name{labels} value`), 0 when absent.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn a_scrape_after_scripted_lifecycles_shows_exactly_those_counts() {
    let dir = data_dir();
    let s = Server::start(
        dir.path(),
        &[
            "--fixtures",
            "conformance",
            METRICS_ANYWHERE[0],
            METRICS_ANYWHERE[1],
        ],
    );
    let c = s.client().with_tasks();
    let secret = "do-not-count-me-7f3a";
    let mut ids = Vec::new();
    for seconds in [0, 0] {
        let r = c
            .tool("slow_compute", json!({"seconds": seconds, "label": secret}))
            .await;
        ids.push(r["taskId"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        assert_eq!(c.wait_terminal(id, WITHIN).await["status"], "completed");
    }
    let long = c
        .tool("slow_compute", json!({"seconds": 600, "label": secret}))
        .await;
    let long = long["taskId"].as_str().unwrap().to_owned();
    c.wait_task(&long, WITHIN, |t| {
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("Waited"))
    })
    .await;
    c.call("tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(c.wait_terminal(&long, WITHIN).await["status"], "cancelled");
    let bad = c.tool("protocol_error_job", json!({})).await;
    let bad = bad["taskId"].as_str().unwrap().to_owned();
    assert_eq!(c.wait_terminal(&bad, WITHIN).await["status"], "failed");
    // One synchronous call (a client without the tasks extension).
    let sync: Value = s
        .client()
        .tool("slow_compute", json!({"seconds": 0, "label": secret}))
        .await;
    assert_eq!(sync["resultType"], "complete", "{sync}");

    let (status, text) = scrape(&s).await;
    assert_eq!(status, 200, "{text}");
    println!("{text}");
    let ns = "mcp_tasks_";
    for (series, want) in [
        ("tasks_created_total{tool=\"slow_compute\"}", 3),
        ("tasks_created_total{tool=\"protocol_error_job\"}", 1),
        (
            "tasks_finished_total{tool=\"slow_compute\",status=\"completed\"}",
            2,
        ),
        (
            "tasks_finished_total{tool=\"slow_compute\",status=\"cancelled\"}",
            1,
        ),
        (
            "tasks_finished_total{tool=\"protocol_error_job\",status=\"failed\"}",
            1,
        ),
        ("task_start_wait_ms_count{tool=\"slow_compute\"}", 3),
        ("sync_calls_total{tool=\"slow_compute\"}", 1),
        ("sync_call_ms_count{tool=\"slow_compute\"}", 1),
    ] {
        assert_eq!(
            sample(&text, &format!("{ns}{series}")),
            want,
            "{series}\n{text}"
        );
    }
    // Created = finished, per tool, once everything is over.
    let finished: u64 = ["completed", "failed", "cancelled"]
        .iter()
        .map(|st| {
            sample(
                &text,
                &format!("{ns}tasks_finished_total{{tool=\"slow_compute\",status=\"{st}\"}}"),
            )
        })
        .sum();
    assert_eq!(finished, 3);
    assert!(
        sample(
            &text,
            &format!("{ns}job_run_ms_count{{tool=\"slow_compute\"}}")
        ) >= 3,
        "{text}"
    );
    for leak in [secret, "local", ids[0].as_str(), long.as_str()] {
        assert!(!text.contains(leak), "the scrape shows {leak:?}");
    }
    // Only GET, only /metrics.
    let url = s.metrics_url.clone().unwrap();
    let resp = reqwest::Client::new()
        .post(&url)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    let (status, _) = get(&url.replace("/metrics", "/mcp"), &[]).await;
    assert_eq!(status, 404);
}

/// The metrics are for operators: a tenant's valid token reads none of them on the MCP
/// listener (`404`, as any path that is not the endpoint), however it asks, while the
/// operator's listener serves them without a token — refusals counted, tenants named only
/// because the operator asked, and none of it in any answer a tenant gets.
#[tokio::test]
async fn a_tenants_token_reads_no_metrics_and_the_operators_listener_does() {
    let mut flags = vec!["--metrics-tenants", "5"];
    flags.extend(METRICS_ANYWHERE);
    let (s, _dir) = support::jwt::start(&flags);
    let tenant = support::jwt::token("tenant-a");
    let c = s.client().with_bearer(&tenant).with_tasks();
    let r = c.tool("wait", json!({"seconds": 0})).await;
    let id = r["taskId"].as_str().unwrap().to_owned();
    assert_eq!(c.wait_terminal(&id, WITHIN).await["status"], "completed");
    let refused = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status().as_u16(),
        401,
        "no token: refused, and counted"
    );
    let base = s.url.trim_end_matches("/mcp").to_owned();
    let bearer = format!("Bearer {tenant}");
    for path in [
        "/metrics",
        "/metrics/",
        "/metrics?format=text",
        "//metrics",
        "/mcp/../metrics",
    ] {
        for auth in [Some(bearer.as_str()), None] {
            let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
            let (status, text) = get(&format!("{base}{path}"), &headers).await;
            assert_eq!(status, 404, "{path} (token: {}): {text}", auth.is_some());
            assert!(
                !text.contains("mcp_tasks_") && !text.contains("tenant-a"),
                "{path}: {text}"
            );
        }
    }
    // The operator's listener, no token needed: the counts, the tenant named as asked.
    let (status, text) = scrape(&s).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        sample(&text, "mcp_tasks_auth_refusals_total{reason=\"missing\"}"),
        1,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "mcp_tasks_tenant_tasks_created_total{tenant=\"tenant-a\"}"
        ),
        1,
        "{text}"
    );
    // It answers only requests naming a loopback host: a page the operator's browser opens
    // cannot read it through a rebound DNS name.
    let url = s.metrics_url.clone().unwrap();
    for forged in [("host", "evil.example"), ("origin", "http://evil.example")] {
        let (status, text) = get(&url, &[forged]).await;
        assert_eq!(status, 403, "{forged:?}: {text}");
        assert!(!text.contains("tenant-a"), "{text}");
    }
}

/// `--metrics-listen off` serves no metrics; an address the operator named that cannot be
/// had stops the server from starting, saying why.
#[tokio::test]
async fn the_metrics_listener_is_off_on_request_and_a_taken_address_is_refused() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &["--metrics-listen", "off"]);
    assert_eq!(s.metrics_url, None);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = data_dir();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            &addr,
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot listen for metrics on {addr} (--metrics-listen)"
        )),
        "{stderr}"
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "everywhere",
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && stderr.contains("IP:PORT"),
        "{stderr}"
    );
}

/// Tenants are named only when asked (`--metrics-tenants N`), and only the first N: past them
/// every tenant counts as `other`. The `tool` metrics are unchanged beside them.
#[tokio::test]
async fn tenants_are_named_only_when_asked_and_only_so_many() {
    let (s, _dir) = support::jwt::start(&[
        "--metrics-tenants",
        "1",
        METRICS_ANYWHERE[0],
        METRICS_ANYWHERE[1],
    ]);
    let mut ids = Vec::new();
    for tenant in ["tenant-a", "tenant-b", "tenant-c"] {
        let c = s
            .client()
            .with_bearer(&support::jwt::token(tenant))
            .with_tasks();
        let r = c.tool("wait", json!({"seconds": 0})).await;
        let id = r["taskId"].as_str().unwrap().to_owned();
        assert_eq!(c.wait_terminal(&id, WITHIN).await["status"], "completed");
        ids.push(id);
    }
    let (status, text) = scrape(&s).await;
    assert_eq!(status, 200, "{text}");
    let created = |t: &str| {
        sample(
            &text,
            &format!("mcp_tasks_tenant_tasks_created_total{{tenant=\"{t}\"}}"),
        )
    };
    let finished = |t: &str| {
        sample(
            &text,
            &format!(
                "mcp_tasks_tenant_tasks_finished_total{{tenant=\"{t}\",status=\"completed\"}}"
            ),
        )
    };
    assert_eq!((created("tenant-a"), created("other")), (1, 2), "{text}");
    assert_eq!((finished("tenant-a"), finished("other")), (1, 2), "{text}");
    assert!(
        !text.contains("tenant-b") && !text.contains("tenant-c"),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mcp_tasks_tasks_created_total{tool=\"wait\"}"),
        3,
        "{text}"
    );
    for id in &ids {
        assert!(!text.contains(id.as_str()), "no task id in a metric");
    }
}
