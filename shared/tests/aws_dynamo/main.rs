//! The task store contract and the DynamoDB-specific promises, against a DynamoDB emulator:
//! moto in the test command (`scripts/aws-emulator.sh start`), or Amazon's DynamoDB Local
//! (`scripts/dynamodb-local.sh start`, which needs an AWS account under its licence).
//!
//! The endpoint comes from `DYNAMODB_ENDPOINT`, else `AWS_ENDPOINT_URL_DYNAMODB`. Without either
//! the tests print a loud SKIPPED line and pass — unless `REQUIRE_EMULATORS` is set (to
//! anything but empty or `0`; CI sets `1`), where a missing emulator is a failure.
//!
//! ```text
//! scripts/aws-emulator.sh start
//! DYNAMODB_ENDPOINT=$(cat .tools/moto/endpoint) cargo test -p mcp-tasks-core --features aws,contracts --test aws_dynamo
//! ```
//!
//! Credentials and region: the environment's when `AWS_ACCESS_KEY_ID` is set, otherwise dummy
//! ones (`test`/`test`, `us-east-1`), so a run never reaches for instance metadata or a real
//! account's configuration. Every store gets a fresh table with a random name.
//!
//! DynamoDB Local updates its global secondary indexes synchronously; real DynamoDB does so
//! within about a second, so against AWS the listing checks here (and the contract's) could
//! see a write late. Point these tests at the emulator.
//!
//! By subject: the contracts (`contracts.rs`), the table and its migrations (`table.rs`),
//! tenants (`tenancy.rs`), each tenant's places (`places.rs`), what a record holds
//! (`records.rs`), the listings (`listing.rs`), lost writes (`lost_writes.rs`) and the sweep
//! (`sweep.rs`); this file holds what they share.

#[path = "../common/mod.rs"]
mod common;

mod contracts;
mod listing;
mod lost_writes;
mod places;
mod records;
mod runs_cost;
mod sweep;
mod table;
mod tenancy;

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{Credentials, Region};
use aws_sdk_dynamodb::types::AttributeValue;
use mcp_tasks_core::aws::dynamo::{self, DynamoStore};

/// A client for the emulator, or `None` (after the SKIPPED line) when there is none.
async fn client() -> Option<Client> {
    client_with(false).await
}

/// [`client`], with its writes sent one at a time when the emulator is moto
/// (`mcp_tasks_core::aws::serial`): what the checks of racing writers need.
async fn racing_client() -> Option<Client> {
    client_with(true).await
}

async fn client_with(racing: bool) -> Option<Client> {
    let [endpoint] = common::endpoints("aws_dynamo", [common::DYNAMODB])?;
    let mut http = mcp_tasks_core::aws::https_client();
    if racing && is_moto(&endpoint).await {
        http = mcp_tasks_core::aws::serial::one_write_at_a_time(http);
    }
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(endpoint);
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        loader = loader.credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "aws_dynamo test",
        ));
    }
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        loader = loader.region(Region::new("us-east-1"));
    }
    Some(Client::new(&loader.load().await))
}

/// Whether the endpoint is moto (it answers `/moto-api/`).
async fn is_moto(endpoint: &str) -> bool {
    reqwest::get(format!("{endpoint}/moto-api/"))
        .await
        .is_ok_and(|r| r.status().is_success())
}

fn unique_table() -> String {
    format!(
        "mcp-tasks-test-{}",
        ulid::Ulid::new().to_string().to_lowercase()
    )
}

/// A store on a fresh table.
async fn fresh_store(client: &Client) -> DynamoStore {
    let name = unique_table();
    dynamo::create_table(client, &name).await.unwrap();
    DynamoStore::new(client.clone(), name)
}

/// Drops a test table (the emulator is in memory; this keeps long sessions small).
async fn drop_table(client: &Client, name: &str) {
    let _ = client.delete_table().table_name(name).send().await;
}

async fn raw_item(
    client: &Client,
    table: &str,
    pk: String,
) -> Option<HashMap<String, AttributeValue>> {
    client
        .get_item()
        .table_name(table)
        .key(dynamo::ATTR_PK, AttributeValue::S(pk))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

/// An engine over `store` with an in-process queue (what it enqueues arrives on the receiver).
fn engine_over(
    store: &DynamoStore,
) -> (
    mcp_tasks_core::engine::Engine,
    tokio::sync::mpsc::UnboundedReceiver<mcp_tasks_core::queue::WorkMessage>,
) {
    let (queue, rx) = mcp_tasks_core::queue::LocalQueue::new();
    let engine = mcp_tasks_core::engine::Engine::new(
        std::sync::Arc::new(store.clone()),
        std::sync::Arc::new(queue),
        mcp_tasks_core::engine::TaskSettings::default(),
    );
    (engine, rx)
}

/// Changes one item by hand: `expression` with the attribute named `#a` set to `attr`.
async fn edit_raw(
    client: &Client,
    table: &str,
    key: String,
    expression: &str,
    attr: &str,
    value: Option<AttributeValue>,
) {
    let mut req = client
        .update_item()
        .table_name(table)
        .key(dynamo::ATTR_PK, AttributeValue::S(key))
        .update_expression(expression)
        .expression_attribute_names("#a", attr);
    if let Some(v) = value {
        req = req.expression_attribute_values(":v", v);
    }
    req.send().await.unwrap();
}
