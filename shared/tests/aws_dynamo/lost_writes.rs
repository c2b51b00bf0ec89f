//! Conditional writes whose answer or request is lost on the way, through a spoiling proxy.

use aws_sdk_dynamodb::Client;
use mcp_tasks_core::aws::dynamo::DynamoStore;
use mcp_tasks_core::store::contract::task;
use mcp_tasks_core::store::{StoreError, TaskStore};
use serde_json::json;

use crate::{client, common, drop_table, fresh_store};

/// How the test proxy spoils the first `PutItem` it sees of the kind it is told ([`Spoil`]);
/// then it passes everything through.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// Forward the write, then answer 500 as if the answer were lost: the write landed.
    AnswerLost,
    /// Answer 500 without forwarding: the write never happened.
    RequestLost,
    /// Answer 500 at once and forward the write 300 ms later: it lands after the store looked.
    LandsLate,
    /// As `AnswerLost`, and the next `GetItem` (the store's read-back) fails too.
    AnswerAndReadLost,
}

/// Which `PutItem` of a create a [`lossy_proxy`] spoils: the arguments item's or the record's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spoil {
    Arguments,
    Record,
}

/// A proxy in front of the emulator that spoils the first `PutItem` as `loss` says; returns
/// the endpoint and the number of `PutItem` requests it saw.
async fn lossy_proxy(
    endpoint: String,
    loss: Loss,
    spoil: Spoil,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let puts = Arc::new(AtomicUsize::new(0));
    let fail_get = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::new();
    let counter = puts.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (http, endpoint, counter, fail_get) = (
            http.clone(),
            endpoint.clone(),
            counter.clone(),
            fail_get.clone(),
        );
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let arguments_item = String::from_utf8_lossy(&body).contains("#args#");
            let target = parts
                .headers
                .get("x-amz-target")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let error = || {
                axum::response::Response::builder()
                    .status(500)
                    .header("content-type", "application/x-amz-json-1.0")
                    .body(axum::body::Body::from(
                        r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"lost"}"#,
                    ))
                    .unwrap()
            };
            let forward = {
                let mut fwd = http.post(format!("{endpoint}{}", parts.uri.path()));
                for (k, v) in &parts.headers {
                    if k != "host" && k != "content-length" {
                        fwd = fwd.header(k, v);
                    }
                }
                fwd.body(body)
            };
            let spoil = target.ends_with(".PutItem")
                && arguments_item == (spoil == Spoil::Arguments)
                && counter.fetch_add(1, Ordering::SeqCst) == 0;
            if target.ends_with(".GetItem") && fail_get.swap(false, Ordering::SeqCst) {
                return error();
            }
            if spoil {
                match loss {
                    Loss::RequestLost => return error(),
                    Loss::LandsLate => {
                        tokio::spawn(async move {
                            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                            forward.send().await.unwrap();
                        });
                        return error();
                    }
                    Loss::AnswerLost | Loss::AnswerAndReadLost => {
                        forward.send().await.unwrap();
                        fail_get.store(matches!(loss, Loss::AnswerAndReadLost), Ordering::SeqCst);
                        return error();
                    }
                }
            }
            let resp = forward.send().await.unwrap();
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await.unwrap();
            let mut out = axum::response::Response::builder().status(status);
            for (k, v) in &headers {
                if k != "content-length" && k != "transfer-encoding" {
                    out = out.header(k, v);
                }
            }
            out.body(axum::body::Body::from(bytes)).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), puts)
}

/// A conditional write whose answer is lost (it landed), whose request is lost (it did not),
/// which lands only after the store looked, or whose read-back fails too, is neither reported
/// as a conflict nor applied twice. Arguments with a float (`2.0`, which DynamoDB hands back
/// as `2`) must not defeat the check. A real conflict through the same proxy is a conflict.
#[tokio::test]
async fn a_lost_answer_to_a_conditional_write_is_not_a_conflict() {
    let Some(c) = client().await else { return };
    let [endpoint] = common::endpoints("aws_dynamo", [common::DYNAMODB]).unwrap();
    let direct = fresh_store(&c).await;
    for loss in [
        Loss::AnswerLost,
        Loss::RequestLost,
        Loss::LandsLate,
        Loss::AnswerAndReadLost,
    ] {
        // create, then update, each through a fresh proxy that spoils its first PutItem
        let store = |url: String| {
            let conf = c.config().to_builder().endpoint_url(url).build();
            DynamoStore::new(Client::from_conf(conf), direct.table_name())
        };
        // The create's two writes (arguments, then the record), each spoiled in turn.
        let args = json!({"seconds": 2.0, "ratio": 0.5, "n": 3});
        let mut t = task("lossy", None);
        for spoil in [Spoil::Arguments, Spoil::Record] {
            t = task("lossy", None);
            let (url, _) = lossy_proxy(endpoint.clone(), loss, spoil).await;
            store(url)
                .create(&t, &args)
                .await
                .unwrap_or_else(|e| panic!("{loss:?} {spoil:?}: create: {e}"));
            tokio::time::sleep(std::time::Duration::from_millis(400)).await; // a late landing
            let stored = direct.get(t.key()).await.unwrap().unwrap();
            assert_eq!(stored.version, t.version, "{loss:?} {spoil:?}");
            assert_eq!(
                direct.arguments(t.key()).await.unwrap(),
                Some(args.clone()),
                "{loss:?} {spoil:?}"
            );
        }
        let stored = direct.get(t.key()).await.unwrap().unwrap();

        let mut next = stored.clone();
        next.status_message = Some("halfway".into());
        let (url, puts) = lossy_proxy(endpoint.clone(), loss, Spoil::Record).await;
        let s = store(url);
        assert_eq!(
            s.update(&next)
                .await
                .unwrap_or_else(|e| panic!("{loss:?}: update: {e}")),
            stored.version + 1,
            "{loss:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(400)).await; // a late landing
        let now = direct.get(t.key()).await.unwrap().unwrap();
        assert_eq!(now.version, stored.version + 1, "{loss:?}: applied once");
        assert_eq!(now.status_message.as_deref(), Some("halfway"));
        assert!(
            puts.load(std::sync::atomic::Ordering::SeqCst) <= 2,
            "{loss:?}"
        );
        // The proxy passes everything now: a stale write is still a conflict.
        assert!(
            matches!(s.update(&next).await, Err(StoreError::Conflict)),
            "{loss:?}"
        );
    }
    drop_table(&c, direct.table_name()).await;
}
