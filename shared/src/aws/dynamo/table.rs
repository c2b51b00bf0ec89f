//! Creating the table and its indexes, and adding an index an existing table lacks.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};

use super::{
    ATTR_ACTIVE, ATTR_EXPIRES_MS, ATTR_PK, ATTR_QUIET, ATTR_SHARD, ATTR_TENANT_ACTIVE, ATTR_TTL,
    DynamoStore, INDEX_ACTIVE, INDEX_EXPIRY, INDEX_QUIET, INDEX_TENANT_ACTIVE, backend,
};
use crate::store::StoreError;

/// An index: its name, partition key and sort key (attribute, type).
type IndexSpec = (
    &'static str,
    (&'static str, ScalarAttributeType),
    (&'static str, ScalarAttributeType),
);

/// The table's global secondary indexes (template.yaml declares the same).
fn index_specs() -> [IndexSpec; 4] {
    use ScalarAttributeType::{N, S};
    [
        (INDEX_ACTIVE, (ATTR_SHARD, N), (ATTR_ACTIVE, S)),
        (INDEX_EXPIRY, (ATTR_SHARD, N), (ATTR_EXPIRES_MS, N)),
        (INDEX_TENANT_ACTIVE, (ATTR_TENANT_ACTIVE, S), (ATTR_PK, S)),
        (INDEX_QUIET, (ATTR_SHARD, N), (ATTR_QUIET, N)),
    ]
}

fn key_element(name: &str, attr: &str, kind: KeyType) -> Result<KeySchemaElement, StoreError> {
    KeySchemaElement::builder()
        .attribute_name(attr)
        .key_type(kind)
        .build()
        .map_err(|e| backend("create_table", name, e))
}

fn attribute(
    name: &str,
    attr: &str,
    kind: ScalarAttributeType,
) -> Result<AttributeDefinition, StoreError> {
    AttributeDefinition::builder()
        .attribute_name(attr)
        .attribute_type(kind)
        .build()
        .map_err(|e| backend("create_table", name, e))
}

fn keys_only() -> Projection {
    Projection::builder()
        .projection_type(ProjectionType::KeysOnly)
        .build()
}

/// Creates the task table with its four indexes (on-demand billing) and enables TTL on
/// [`ATTR_TTL`]; waits until all of it is active. Idempotent: an existing table keeps its
/// data and settings, gets any index it lacks (one `UpdateTable` each — how a table made
/// before `tenant_active` existed is migrated, after
/// [`DynamoStore::backfill_tenant_index`]) and has TTL switched on only when it is off.
///
/// On AWS, building an index on a large table takes a while; should this call give up waiting
/// for it, calling it again resumes waiting.
pub async fn create_table(client: &Client, name: &str) -> Result<(), StoreError> {
    let mut request = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key_element(name, ATTR_PK, KeyType::Hash)?)
        .attribute_definitions(attribute(name, ATTR_PK, ScalarAttributeType::S)?);
    let mut defined = vec![ATTR_PK];
    for (index, (hash, hash_kind), (sort, sort_kind)) in index_specs() {
        for (attr, kind) in [(hash, hash_kind), (sort, sort_kind)] {
            if !defined.contains(&attr) {
                defined.push(attr);
                request = request.attribute_definitions(attribute(name, attr, kind)?);
            }
        }
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(index)
                .key_schema(key_element(name, hash, KeyType::Hash)?)
                .key_schema(key_element(name, sort, KeyType::Range)?)
                .projection(keys_only())
                .build()
                .map_err(|e| backend("create_table", name, e))?,
        );
    }
    let created = request.send().await;
    let existed = match created {
        Ok(_) => {
            tracing::info!(table = name, "dynamodb.table_created");
            false
        }
        Err(e) if e.code() == Some("ResourceInUseException") => true,
        Err(e) => return Err(backend("create_table", name, e)),
    };
    wait_until_active(client, name).await?;
    if existed {
        add_missing_indexes(client, name).await?;
    }

    let ttl = client
        .describe_time_to_live()
        .table_name(name)
        .send()
        .await
        .map_err(|e| backend("describe_time_to_live", name, e))?;
    let status = ttl
        .time_to_live_description()
        .and_then(|d| d.time_to_live_status());
    if !matches!(
        status,
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
    ) {
        let spec = TimeToLiveSpecification::builder()
            .attribute_name(ATTR_TTL)
            .enabled(true)
            .build()
            .map_err(|e| backend("update_time_to_live", name, e))?;
        client
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(spec)
            .send()
            .await
            .map_err(|e| backend("update_time_to_live", name, e))?;
    }
    Ok(())
}

/// Adds the indexes an existing table lacks, one `UpdateTable` each (DynamoDB builds one at a
/// time), waiting for each to become active. Before `tenant_active` is added, the attribute is
/// backfilled onto the active items (see the module docs): items need not wait for the index,
/// and a call that stops half way leaves either no index (the next call backfills again, at
/// the cost of failed conditions) or one whose items are complete.
async fn add_missing_indexes(client: &Client, name: &str) -> Result<(), StoreError> {
    for (index, (hash, hash_kind), (sort, sort_kind)) in index_specs() {
        if index_names(client, name).await?.iter().any(|i| i == index) {
            continue;
        }
        if index == INDEX_TENANT_ACTIVE {
            DynamoStore::new(client.clone(), name)
                .backfill_tenant_index()
                .await?;
        }
        if index == INDEX_QUIET {
            DynamoStore::new(client.clone(), name)
                .backfill_quiet_index()
                .await?;
        }
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(index)
            .key_schema(key_element(name, hash, KeyType::Hash)?)
            .key_schema(key_element(name, sort, KeyType::Range)?)
            .projection(keys_only())
            .build()
            .map_err(|e| backend("update_table", name, e))?;
        let added = client
            .update_table()
            .table_name(name)
            .attribute_definitions(attribute(name, hash, hash_kind)?)
            .attribute_definitions(attribute(name, sort, sort_kind)?)
            .global_secondary_index_updates(
                GlobalSecondaryIndexUpdate::builder().create(create).build(),
            )
            .send()
            .await;
        if let Err(e) = added {
            // Another process may have added it at the same moment.
            if !index_names(client, name).await?.iter().any(|i| i == index) {
                return Err(backend("update_table", name, e));
            }
        }
        tracing::info!(table = name, index, "dynamodb.index_added");
        wait_until_active(client, name).await?;
    }
    Ok(())
}

/// The names of a table's global secondary indexes.
async fn index_names(client: &Client, name: &str) -> Result<Vec<String>, StoreError> {
    let out = client
        .describe_table()
        .table_name(name)
        .send()
        .await
        .map_err(|e| backend("describe_table", name, e))?;
    Ok(out
        .table()
        .map(|t| {
            t.global_secondary_indexes()
                .iter()
                .filter_map(|i| i.index_name().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// Polls until the table and its indexes are active (a few seconds on AWS, at once locally).
async fn wait_until_active(client: &Client, name: &str) -> Result<(), StoreError> {
    let mut pause = Duration::from_millis(50);
    for _ in 0..120 {
        let out = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| backend("describe_table", name, e))?;
        if let Some(t) = out.table()
            && t.table_status() == Some(&TableStatus::Active)
            && t.global_secondary_indexes()
                .iter()
                .all(|i| i.index_status() == Some(&IndexStatus::Active))
        {
            return Ok(());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
    tracing::warn!(table = name, "dynamodb.table_not_active");
    Err(StoreError::backend("dynamodb table did not become active"))
}
