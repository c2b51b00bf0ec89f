//! Mapping a [`TaskRecord`] to an item and back.
//!
//! [`store::encode`](crate::store) first refuses records over
//! [`MAX_RECORD_BYTES`](crate::store::MAX_RECORD_BYTES) of JSON with `TooLarge`, exactly as the
//! local adapters do. A record within that bound always fits an item: when its native mapping
//! would not be accepted — over DynamoDB's 400 KB item size (a list element costs DynamoDB
//! more bytes than JSON, e.g. long arrays of small numbers), deeper than DynamoDB's 32 levels,
//! or holding numbers outside DynamoDB's range — the record's structured top-level fields are
//! stored as JSON text in binary attributes instead (see `to_item`), and read back exactly.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_dynamo::aws_sdk_dynamodb_1 as sd;
use serde_json::{Map, Value};

use super::key::{pk, shard_of, tenant_prefix};
use super::{
    ATTR_ACTIVE, ATTR_EXPIRES_MS, ATTR_PK, ATTR_QUIET, ATTR_SHARD, ATTR_TENANT_ACTIVE, ATTR_TTL,
    codec,
};
use crate::store::StoreError;
use crate::task::{QUIET_GRAIN_MS, TaskRecord};

/// DynamoDB's item size limit.
const MAX_ITEM_BYTES: usize = 400 * 1024;
/// DynamoDB's nesting limit for maps and lists.
const MAX_DEPTH: usize = 32;
/// DynamoDB's limit for a sort key value (`active_pk`, and `pk` in `tenant_active`).
const MAX_SORT_KEY_BYTES: usize = 1024;

/// Attributes the adapter writes beside the record's own fields: no record field may use them.
pub(super) const RESERVED: [&str; 7] = [
    ATTR_PK,
    ATTR_SHARD,
    ATTR_ACTIVE,
    ATTR_TENANT_ACTIVE,
    ATTR_EXPIRES_MS,
    ATTR_QUIET,
    ATTR_TTL,
];

/// The item of a record: its fields by `serde_dynamo`, plus key, index and TTL attributes.
///
/// When that native item would be refused by DynamoDB (size, depth or number range; see the
/// module docs), every top-level map or list — and any top-level number out of range — is
/// stored as its JSON text in a binary attribute instead. The record's JSON is at most
/// `MAX_RECORD_BYTES`, so this form always fits.
pub(super) fn to_item(task: &TaskRecord) -> Result<HashMap<String, AttributeValue>, StoreError> {
    let mut item: HashMap<String, AttributeValue> =
        sd::to_item(task).map_err(|e| codec("serialize", e))?;
    let key = pk(task.key());
    if RESERVED.iter().any(|r| item.contains_key(*r)) {
        return Err(codec(
            "serialize",
            "a record field uses a reserved attribute name",
        ));
    }
    if !task.status.is_terminal() {
        if key.len() > MAX_SORT_KEY_BYTES {
            return Err(codec("serialize", "tenant and task id exceed 1024 bytes"));
        }
        item.insert(ATTR_ACTIVE.into(), AttributeValue::S(key.clone()));
        item.insert(
            ATTR_TENANT_ACTIVE.into(),
            AttributeValue::S(tenant_prefix(&task.tenant)),
        );
    }
    item.insert(
        ATTR_SHARD.into(),
        AttributeValue::N(shard_of(&key).to_string()),
    );
    if let Some(mark) = quiet_key(task) {
        item.insert(ATTR_QUIET.into(), AttributeValue::N(mark.to_string()));
    }
    if let Some(at) = task.expires_at_ms() {
        item.insert(ATTR_EXPIRES_MS.into(), AttributeValue::N(at.to_string()));
        item.insert(
            ATTR_TTL.into(),
            AttributeValue::N(super::ttl_seconds(at).to_string()),
        );
    }
    item.insert(ATTR_PK.into(), AttributeValue::S(key));

    if !storable(&item) {
        let json = serde_json::to_value(task).map_err(|e| codec("serialize", e))?;
        let Value::Object(fields) = json else {
            return Err(codec("serialize", "a record is not a JSON object"));
        };
        for (name, value) in fields {
            let compact = item.get(&name).is_some_and(|v| {
                v.is_m() || v.is_l() || v.as_n().is_ok_and(|n| !number_in_range(n))
            });
            if compact {
                let text = serde_json::to_vec(&value).map_err(|e| codec("serialize", e))?;
                item.insert(name, AttributeValue::B(Blob::new(text)));
            }
        }
    }
    Ok(item)
}

/// The `quiet` index's sort key of a task: its [`quiet_mark_ms`](TaskRecord::quiet_mark_ms)
/// rounded down to [`QUIET_GRAIN_MS`]. The index is read for the tasks whose mark is at or
/// before `now - window` (the orphan sweep, with a window of minutes), and the sweep checks
/// each record it reads against the exact mark, so a key up to a grain early finds the same
/// tasks; rounded, the key of a job that parks and wakes every second (its mark is its wake
/// time) moves once a minute, not on every wake — each move is two index writes (the old entry
/// out, the new one in).
pub(super) fn quiet_key(task: &TaskRecord) -> Option<u64> {
    task.quiet_mark_ms().map(|m| m - m % QUIET_GRAIN_MS)
}

/// The record of an item (index attributes are ignored; JSON-text fields are parsed back).
pub(super) fn from_item(
    mut item: HashMap<String, AttributeValue>,
) -> Result<TaskRecord, StoreError> {
    let texts: Vec<String> = item
        .iter()
        .filter(|(_, v)| v.is_b())
        .map(|(k, _)| k.clone())
        .collect();
    if texts.is_empty() {
        return sd::from_item(item).map_err(|e| codec("deserialize", e));
    }
    let mut parsed = Map::new();
    for name in texts {
        if let Some(AttributeValue::B(b)) = item.remove(&name) {
            let v: Value =
                serde_json::from_slice(b.as_ref()).map_err(|e| codec("deserialize", e))?;
            parsed.insert(name, v);
        }
    }
    let mut fields: Map<String, Value> =
        sd::from_item(item).map_err(|e| codec("deserialize", e))?;
    fields.extend(parsed);
    serde_json::from_value(Value::Object(fields)).map_err(|e| codec("deserialize", e))
}

/// Whether DynamoDB accepts `item` as it is: at most 400 KB by DynamoDB's own accounting,
/// at most 32 levels deep, every number within DynamoDB's range.
pub(super) fn storable(item: &HashMap<String, AttributeValue>) -> bool {
    let mut size = 0;
    for (name, v) in item {
        match measure(v, 0) {
            Some(n) => size += name.len() + n,
            None => return false,
        }
    }
    size <= MAX_ITEM_BYTES
}

/// DynamoDB's size of one value (an upper bound, per "Item sizes and formats"), or `None`
/// when DynamoDB would refuse it.
pub(super) fn measure(v: &AttributeValue, depth: usize) -> Option<usize> {
    Some(match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => {
            if !number_in_range(n) {
                return None;
            }
            n.bytes().filter(u8::is_ascii_digit).count().div_ceil(2) + 1
        }
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(items) => {
            if depth >= MAX_DEPTH {
                return None;
            }
            let mut n = 3;
            for i in items {
                n += 1 + measure(i, depth + 1)?;
            }
            n
        }
        AttributeValue::M(fields) => {
            if depth >= MAX_DEPTH {
                return None;
            }
            let mut n = 3;
            for (k, i) in fields {
                n += 1 + k.len() + measure(i, depth + 1)?;
            }
            n
        }
        AttributeValue::Ss(x) => x.iter().map(String::len).sum(),
        AttributeValue::Ns(x) => x.iter().map(|n| n.len()).sum(),
        AttributeValue::Bs(x) => x.iter().map(|b| b.as_ref().len()).sum(),
        _ => return None,
    })
}

/// DynamoDB numbers: at most 38 significant digits, magnitude from 1E-130 to below 1E+126.
pub(super) fn number_in_range(n: &str) -> bool {
    let digits = n.trim_start_matches('-');
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.bytes().chain(frac.bytes()).any(|b| !b.is_ascii_digit()) {
        // serde_dynamo writes plain decimals; anything else is left to DynamoDB to judge.
        return true;
    }
    let int = int.trim_start_matches('0');
    let all = format!("{int}{frac}");
    let significant = all.trim_start_matches('0').trim_end_matches('0');
    if significant.is_empty() {
        return true; // zero
    }
    if significant.len() > 38 {
        return false;
    }
    if !int.is_empty() {
        int.len() <= 126
    } else {
        let leading_zeros = frac.len() - frac.trim_start_matches('0').len();
        leading_zeros < 130
    }
}
