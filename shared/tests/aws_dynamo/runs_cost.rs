//! What the running-jobs guard sends for a full tenant: the deferral of every message a tenant
//! queues past its cap (every 5 s each) must not be a conditional write that fails and is
//! billed the write units of the tenant's `#runs` item anyway.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use mcp_tasks_core::aws::dynamo::DynamoStore;
use mcp_tasks_core::quota::{RunSlots, SlotKey};
use mcp_tasks_core::tenant::Tenant;

use crate::{client, common, drop_table, fresh_store};

type Calls = Arc<Mutex<BTreeMap<String, usize>>>;

/// A proxy in front of the emulator that counts the DynamoDB operations it forwards.
async fn counting_proxy(endpoint: String) -> (String, Calls) {
    let calls: Calls = Arc::default();
    let counted = calls.clone();
    let http = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (http, endpoint, counted) = (http.clone(), endpoint.clone(), counted.clone());
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let op = parts
                .headers
                .get("x-amz-target")
                .and_then(|v| v.to_str().ok())
                .and_then(|t| t.rsplit('.').next())
                .unwrap_or("")
                .to_owned();
            *counted.lock().unwrap().entry(op).or_default() += 1;
            let mut fwd = http.post(format!("{endpoint}{}", parts.uri.path()));
            for (k, v) in &parts.headers {
                if k != "host" && k != "content-length" {
                    fwd = fwd.header(k, v);
                }
            }
            let resp = fwd.body(body).send().await.unwrap();
            let mut out = axum::response::Response::builder().status(resp.status().as_u16());
            for (k, v) in resp.headers() {
                if k != "content-length" && k != "transfer-encoding" {
                    out = out.header(k, v);
                }
            }
            out.body(axum::body::Body::from(resp.bytes().await.unwrap()))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), calls)
}

/// A tenant holding all its places, asked again 20 times (its deferred messages): one
/// consistent read each and no write (it was one `UpdateItem` failing its condition each, billed
/// 3 write units for a full tenant's item); a place freed is taken again at once.
#[tokio::test]
async fn a_full_tenants_take_is_one_read_and_no_write() {
    let Some(c) = client().await else { return };
    let [endpoint] = common::endpoints("aws_dynamo", [common::DYNAMODB]).unwrap();
    let direct = fresh_store(&c).await;
    let (url, calls) = counting_proxy(endpoint).await;
    let conf = c.config().to_builder().endpoint_url(url).build();
    let store = DynamoStore::new(Client::from_conf(conf), direct.table_name());
    let tenant = SlotKey::runs_of(&Tenant::from("busy"));
    let until = mcp_tasks_core::clock::now_ms() + 600_000;
    for i in 0..4 {
        assert!(
            store
                .take(&tenant, &format!("run-{i}"), 4, until)
                .await
                .unwrap()
        );
    }
    calls.lock().unwrap().clear();
    for i in 0..20 {
        assert!(
            !store
                .take(&tenant, &format!("waiting-{i}"), 4, until)
                .await
                .unwrap()
        );
    }
    let seen = calls.lock().unwrap().clone();
    eprintln!("aws_dynamo runs: 20 takes of a full tenant sent {seen:?}");
    assert_eq!(seen.get("UpdateItem"), None, "{seen:?}");
    assert_eq!(seen.get("GetItem"), Some(&20), "{seen:?}");
    // A run of its own is still renewed while full, and a freed place is taken.
    assert!(store.take(&tenant, "run-0", 4, until + 1).await.unwrap());
    store.release(&tenant, "run-3").await.unwrap();
    assert!(store.take(&tenant, "waiting-0", 4, until).await.unwrap());
    assert!(!store.take(&tenant, "waiting-1", 4, until).await.unwrap());
    drop_table(&c, direct.table_name()).await;
}
