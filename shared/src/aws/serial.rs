//! Tests against moto only (feature `contracts`): an HTTP client that sends DynamoDB writes one
//! at a time.
//!
//! moto 5.2.5 evaluates a write's condition and then applies the write with no lock in
//! between, so two concurrent writes conditional on the same item can both succeed — which
//! DynamoDB never allows (it applies one item's writes one after the other). Sending each
//! write request alone gives the adapters what DynamoDB guarantees per request, and nothing
//! more: a read-then-write in the code under test still races, because only single requests
//! are kept apart.

use std::sync::Arc;

use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;

/// The DynamoDB operations that write (`X-Amz-Target: DynamoDB_20120810.<op>`).
const WRITES: [&str; 6] = [
    ".PutItem",
    ".UpdateItem",
    ".DeleteItem",
    ".BatchWriteItem",
    ".TransactWriteItems",
    ".ExecuteStatement",
];

/// `inner`, with every DynamoDB write request sent only once the one before it was answered.
pub fn one_write_at_a_time(inner: SharedHttpClient) -> SharedHttpClient {
    SharedHttpClient::new(Serial {
        inner,
        gate: Arc::default(),
    })
}

#[derive(Debug)]
struct Serial {
    inner: SharedHttpClient,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl HttpClient for Serial {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(SerialConnector {
            inner: self.inner.http_connector(settings, components),
            gate: self.gate.clone(),
        })
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct SerialConnector {
    inner: SharedHttpConnector,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl HttpConnector for SerialConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let write = request
            .headers()
            .get("x-amz-target")
            .is_some_and(|t| t.starts_with("DynamoDB_") && WRITES.iter().any(|w| t.ends_with(w)));
        if !write {
            return self.inner.call(request);
        }
        let (inner, gate) = (self.inner.clone(), self.gate.clone());
        HttpConnectorFuture::new(async move {
            let _alone = gate.lock().await;
            inner.call(request).await
        })
    }
}
