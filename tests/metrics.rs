//! `GET /metrics` on the local server: after a scripted set of lifecycles the scrape shows
//! exactly those counts (Prometheus text; the names and meanings are those of the EMF lines
//! the Lambda functions write, see `shared/src/metrics.rs`), behind the same authentication
//! as the endpoint, and never an id, an argument or a result — nor a tenant, unless the
//! operator asks for the bounded tenant dimension (`--metrics-tenants`).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Server, data_dir};

const WITHIN: Duration = Duration::from_secs(20);

async fn scrape(url: &str, bearer: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().get(url.replace("/mcp", "/metrics"));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
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
    let s = Server::start(dir.path(), &["--fixtures", "conformance"]);
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

    let (status, text) = scrape(&s.url, None).await;
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
    // Only GET.
    let resp = reqwest::Client::new()
        .post(s.url.replace("/mcp", "/metrics"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
}

#[tokio::test]
async fn the_scrape_is_behind_the_same_authentication_and_counts_refusals() {
    let (s, _dir) = support::jwt::start(&[]);
    let (status, text) = scrape(&s.url, None).await;
    assert_eq!(status, 401, "{text}");
    let (status, _) = scrape(&s.url, Some("not-a-token")).await;
    assert_eq!(status, 401);
    let (status, text) = scrape(&s.url, Some(&support::jwt::token("tenant-a"))).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        sample(&text, "mcp_tasks_auth_refusals_total{reason=\"missing\"}"),
        1,
        "{text}"
    );
    assert_eq!(
        sample(&text, "mcp_tasks_auth_refusals_total{reason=\"invalid\"}"),
        1,
        "{text}"
    );
    assert!(!text.contains("tenant-a"));
}

/// Tenants are named only when asked (`--metrics-tenants N`), and only the first N: past them
/// every tenant counts as `other`. The `tool` metrics are unchanged beside them.
#[tokio::test]
async fn tenants_are_named_only_when_asked_and_only_so_many() {
    let (s, _dir) = support::jwt::start(&["--metrics-tenants", "1"]);
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
    let (status, text) = scrape(&s.url, Some(&support::jwt::token("tenant-a"))).await;
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
