use super::item::{RESERVED, number_in_range};
use super::key::split_pk;
use super::*;
use crate::task::{TaskId, TaskStatus};
use serde_json::json;

fn record(tenant: &str, ttl: Option<u64>) -> TaskRecord {
    let mut t = TaskRecord::new(
        tenant.into(),
        TaskId::generate(),
        "tool",
        ttl,
        1000,
        json!({}),
    );
    t.checkpoint = json!({"n": 1, "s": "", "f": 0.5, "deep": {"a": [1, null, true]}});
    t
}

#[test]
fn keys_escape_the_tenant_so_different_pairs_never_collide() {
    assert_eq!(
        pk(TaskRef::new(&"acme".into(), &TaskId::from_static("tsk_1"))),
        "acme#tsk_1"
    );
    assert_ne!(
        pk(TaskRef::new(&"a#b".into(), &TaskId::from_static("c"))),
        pk(TaskRef::new(&"a".into(), &TaskId::from_static("b#c")))
    );
    assert_ne!(
        pk(TaskRef::new(&"a%23".into(), &TaskId::from_static("c"))),
        pk(TaskRef::new(&"a#".into(), &TaskId::from_static("c")))
    );
    for (tenant, id) in [("a#b", "c"), ("a", "b#c"), ("%#%", "%#%#"), ("", "x")] {
        let id = &TaskId::from_static(id);
        let k = split_pk(&pk(TaskRef::new(&Tenant::from(tenant), id))).unwrap();
        assert_eq!((k.tenant.as_str(), &k.task_id), (tenant, id));
        // The tenant index's partition key is the key's tenant part: never empty.
        assert!(
            pk(TaskRef::new(&Tenant::from(tenant), id))
                .starts_with(&tenant_prefix(&Tenant::from(tenant)))
        );
        assert!(tenant_prefix(&Tenant::from(tenant)).ends_with('#'));
    }
    assert_eq!(tenant_prefix(&"".into()), "#");
    assert_ne!(tenant_prefix(&"a#b".into()), tenant_prefix(&"a%23b".into()));
}

#[test]
fn shards_are_stable_and_spread() {
    // Stored in items: must never change between releases.
    assert_eq!(shard_of(""), (0xcbf2_9ce4_8422_2325u64 % 16) as u32);
    let used: std::collections::HashSet<u32> = (0..200)
        .map(|i| {
            shard_of(&pk(TaskRef::new(
                &"t".into(),
                &TaskId::parse(format!("tsk_{i}")).unwrap(),
            )))
        })
        .collect();
    assert_eq!(used.len(), SHARDS as usize);
}

#[test]
fn items_carry_index_and_ttl_attributes_only_when_they_apply() {
    let mut t = record("t", Some(1_500));
    t.created_at_ms = 10_000;
    let item = to_item(&t).unwrap();
    assert_eq!(
        item[ATTR_PK].as_s().unwrap(),
        &pk(TaskRef::new(&"t".into(), &t.task_id))
    );
    assert_eq!(
        item[ATTR_ACTIVE].as_s().unwrap(),
        &pk(TaskRef::new(&"t".into(), &t.task_id))
    );
    assert_eq!(item[ATTR_TENANT_ACTIVE].as_s().unwrap(), "t#");
    assert_eq!(item[ATTR_EXPIRES_MS].as_n().unwrap(), "11500");
    // DynamoDB may delete the item any time after `ttl`: not before the sweep has had two days
    // to purge the expired task and give its place back.
    assert_eq!(
        item[ATTR_TTL].as_n().unwrap(),
        &(12 + 2 * 86_400).to_string(),
        "seconds, rounded up, two days after expiry"
    );
    assert!(item["checkpoint"].is_m(), "native attributes by default");
    assert!(
        !item.contains_key("arguments"),
        "arguments live in their own item"
    );
    assert_eq!(from_item(item).unwrap(), t);

    let mut done = record("t", None);
    done.complete(json!({"content": []})).unwrap();
    let item = to_item(&done).unwrap();
    for absent in [ATTR_ACTIVE, ATTR_TENANT_ACTIVE, ATTR_EXPIRES_MS, ATTR_TTL] {
        assert!(!item.contains_key(absent), "{absent}");
    }
    assert_eq!(from_item(item).unwrap(), done);
}

#[test]
fn record_fields_never_use_the_adapter_attribute_names() {
    let mut t = record("t", Some(1));
    t.status = TaskStatus::InputRequired;
    let Value::Object(fields) = serde_json::to_value(&t).unwrap() else {
        panic!("a record is an object");
    };
    for r in RESERVED {
        assert!(!fields.contains_key(r), "{r}");
    }
}

#[test]
fn records_dynamodb_cannot_hold_natively_are_stored_as_json_text_and_read_back() {
    let mut deep = json!("leaf");
    for _ in 0..40 {
        deep = json!({ "d": deep });
    }
    let cases = [
        deep,
        json!({"big": 1e300, "tiny": 1e-200}),
        // 120k one-digit numbers: ~240 KB of JSON, ~360 KB + overhead in DynamoDB's
        // accounting (3 bytes an element) plus the result below: over 400 KB natively.
        json!(vec![7; 120_000]),
    ];
    for checkpoint in cases {
        let mut t = record("t", None);
        t.checkpoint = checkpoint;
        if t.checkpoint.is_array() {
            t.result = Some(json!(vec![1; 40_000]));
        }
        encode(&t).unwrap();
        let item = to_item(&t).unwrap();
        assert!(item["checkpoint"].is_b());
        assert!(item["status"].is_s(), "scalars stay native");
        assert!(item["version"].is_n());
        assert_eq!(from_item(item).unwrap(), t);
    }
}

#[test]
fn terminal_statuses_match_the_stored_spelling() {
    for s in TaskStatus::ALL {
        let stored = serde_json::to_value(s).unwrap();
        let stored = stored.as_str().unwrap();
        assert_eq!(TERMINAL.contains(&stored), s.is_terminal(), "{s:?}");
    }
}

#[test]
fn dynamodb_number_range_is_enforced() {
    for ok in ["0", "-1", "0.5", "18446744073709551615", "1e5"] {
        assert!(number_in_range(ok), "{ok}");
    }
    let big = format!("1{}", "0".repeat(126));
    let tiny = format!("0.{}1", "0".repeat(130));
    let precise = "1".repeat(39);
    for bad in [big.as_str(), tiny.as_str(), precise.as_str()] {
        assert!(!number_in_range(bad), "{bad}");
    }
}

/// An item as text: every attribute with its type, map keys sorted (binary as its UTF-8).
fn canonical(v: &AttributeValue) -> String {
    let s = |x: &str| serde_json::to_string(x).unwrap();
    match v {
        AttributeValue::S(x) => format!("{{\"S\":{}}}", s(x)),
        AttributeValue::N(x) => format!("{{\"N\":{}}}", s(x)),
        AttributeValue::B(b) => format!("{{\"B\":{}}}", s(&String::from_utf8_lossy(b.as_ref()))),
        AttributeValue::Bool(b) => format!("{{\"BOOL\":{b}}}"),
        AttributeValue::Null(_) => "{\"NULL\":true}".into(),
        AttributeValue::L(l) => {
            let items: Vec<String> = l.iter().map(canonical).collect();
            format!("{{\"L\":[{}]}}", items.join(","))
        }
        AttributeValue::M(m) => format!("{{\"M\":{}}}", canonical_map(m)),
        other => panic!("unexpected attribute {other:?}"),
    }
}

fn canonical_map(m: &HashMap<String, AttributeValue>) -> String {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let fields: Vec<String> = keys
        .into_iter()
        .map(|k| format!("{}:{}", serde_json::to_string(k).unwrap(), canonical(&m[k])))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// The DynamoDB item of a record, every attribute pinned: items written by an earlier build
/// read back, and the key, index and TTL attributes stay where the table expects them.
#[test]
fn an_item_keeps_its_stored_attributes() {
    let golden = r#"{"active_pk":{"S":"a%23b%25\"é\\#tsk_01J0GOLDEN"},"attempts":{"N":"2"},"cancel_requested":{"BOOL":false},"checkpoint":{"M":{"deep":{"M":{"a":{"L":[{"N":"1"},{"NULL":true},{"BOOL":true},{"S":"x"}]}}},"f":{"N":"0.5"},"n":{"N":"1"}}},"client_capabilities":{"M":{"extensions":{"M":{"io.modelcontextprotocol/tasks":{"M":{}}}}}},"created_at_ms":{"N":"1700000000000"},"expires_ms":{"N":"1700003600000"},"input_requests":{"M":{"k1":{"M":{"method":{"S":"elicitation/create"},"params":{"M":{"message":{"S":"ok?"}}}}}}},"input_responses":{"M":{}},"interruptions":{"N":"0"},"issued_input_keys":{"L":[{"S":"k1"}]},"last_updated_at_ms":{"N":"1700000000500"},"lease":{"M":{"expires_at_ms":{"N":"1700000060000"},"owner":{"S":"w-1"}}},"pk":{"S":"a%23b%25\"é\\#tsk_01J0GOLDEN"},"poll_interval_ms":{"N":"1000"},"shard":{"N":"8"},"status":{"S":"input_required"},"status_message":{"S":"half way \"there\" ✓"},"task_id":{"S":"tsk_01J0GOLDEN"},"tenant":{"S":"a#b%\"é\\"},"tenant_active":{"S":"a%23b%25\"é\\#"},"tool":{"S":"wait"},"ttl":{"N":"1700176400"},"ttl_ms":{"N":"3600000"},"version":{"N":"7"}}"#;
    let t = crate::store::contract::golden_record();
    let item = to_item(&t).unwrap();
    assert_eq!(canonical_map(&item), golden);
    assert_eq!(from_item(item).unwrap(), t);
}

/// A paced job parks and wakes every ~1.1 s, each park writing its wake time, which is its
/// quiet mark: the `quiet` index key moves once a minute, not at every wake (each move is two
/// index writes), and stays at or before the exact mark the sweep checks.
#[test]
fn a_paced_jobs_quiet_key_moves_once_a_minute() {
    let mut t = record("t", None);
    t.status = TaskStatus::Working;
    let minute = crate::task::QUIET_GRAIN_MS;
    let start = 1_700_000_040_000 - 1_700_000_040_000 % minute;
    let mut keys = std::collections::BTreeSet::new();
    for wake in 0..110 {
        let at = start + wake * 1_100;
        t.last_updated_at_ms = at;
        t.wake_at_ms = Some(at + 1_100);
        let item = to_item(&t).unwrap();
        let key: u64 = item[ATTR_QUIET].as_n().unwrap().parse().unwrap();
        assert!(key <= t.quiet_mark_ms().unwrap());
        assert!(t.quiet_mark_ms().unwrap() - key < minute);
        keys.insert(key);
    }
    // 110 wakes over 121 s: three minutes touched, three keys.
    assert_eq!(keys.len(), 3, "{keys:?}");
}
