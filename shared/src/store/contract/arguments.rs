//! The contract's arguments: written once with the task, read back exactly, never touched by
//! a record write, gone with the task.

use serde_json::{Value, json};

use super::{key, task};
use crate::store::{StoreError, TaskStore};

pub(super) async fn arguments_are_written_once_and_read_back_exactly(s: &impl TaskStore) {
    // What DynamoDB cannot hold natively (depth over 32, numbers out of its range) and text
    // of every kind must come back exactly as given.
    let mut deep = json!("leaf");
    for _ in 0..40 {
        deep = json!({ "d": deep });
    }
    let given = json!({
        "deep": deep,
        "numbers": [1e300, 1e-200, -0.5, 18_446_744_073_709_551_615u64, -9_007_199_254_740_993i64],
        "text": "naïve ✓ \u{0}\u{1f} 🦀",
        "empty": {}, "none": null, "list": [],
    });
    let t = task("a", Some(60_000));
    s.create(&t, &given).await.unwrap();
    assert_eq!(
        s.arguments(key("a", &t.task_id).borrowed()).await.unwrap(),
        Some(given.clone())
    );
    // Never part of the record a reader of the task gets.
    let read = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.inline_arguments, None);
    // Another tenant, an unknown task, a key-like id: nothing.
    assert_eq!(
        s.arguments(key("b", &t.task_id).borrowed()).await.unwrap(),
        None
    );
    assert_eq!(
        s.arguments(key("a", "tsk_missing").borrowed())
            .await
            .unwrap(),
        None
    );
    // A second create of the same key conflicts and leaves the first arguments.
    let mut again = t.clone();
    again.status_message = Some("again".into());
    assert!(matches!(
        s.create(&again, &json!({"other": true})).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(
        s.arguments(key("a", &t.task_id).borrowed()).await.unwrap(),
        Some(given)
    );
    // Arguments of any JSON type are kept (the engine only ever stores objects).
    let scalar = task("a", None);
    s.create(&scalar, &json!(7)).await.unwrap();
    assert_eq!(
        s.arguments(key("a", &scalar.task_id).borrowed())
            .await
            .unwrap(),
        Some(json!(7))
    );
}

pub(super) async fn arguments_survive_every_record_write_and_go_with_delete(s: &impl TaskStore) {
    let given = json!({"seconds": 3, "pad": "p".repeat(50_000)});
    let t = task("a", Some(60_000));
    s.create(&t, &given).await.unwrap();
    let mut cur = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    for i in 0..3 {
        cur.checkpoint = json!({"step": i});
        cur.version = s.update(&cur).await.unwrap();
    }
    cur.complete(json!({"content": []})).unwrap();
    s.update(&cur).await.unwrap();
    assert_eq!(
        s.arguments(key("a", &t.task_id).borrowed()).await.unwrap(),
        Some(given)
    );
    s.delete(key("a", &t.task_id).borrowed()).await.unwrap();
    assert_eq!(
        s.arguments(key("a", &t.task_id).borrowed()).await.unwrap(),
        None
    );
    // A record of an earlier build, with its arguments inline, keeps them through updates.
    let mut old = task("a", None);
    old.inline_arguments = Some(json!({"inline": 1}));
    s.create(&old, &Value::Null).await.unwrap();
    let mut cur = s
        .get(key("a", &old.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cur.inline_arguments, Some(json!({"inline": 1})));
    cur.checkpoint = json!(1);
    s.update(&cur).await.unwrap();
    let cur = s
        .get(key("a", &old.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cur.inline_arguments, Some(json!({"inline": 1})));
}

pub(super) async fn oversized_arguments_are_refused_and_store_nothing(s: &impl TaskStore) {
    let t = task("a", None);
    let huge = json!({"pad": "y".repeat(crate::store::MAX_RECORD_BYTES)});
    assert!(matches!(
        s.create(&t, &huge).await,
        Err(StoreError::TooLarge(_))
    ));
    assert_eq!(s.get(key("a", &t.task_id).borrowed()).await.unwrap(), None);
    assert_eq!(
        s.arguments(key("a", &t.task_id).borrowed()).await.unwrap(),
        None
    );
    // Just under the bound fits, beside a record of ordinary size.
    let fits = json!("z".repeat(crate::store::MAX_RECORD_BYTES - 2));
    s.create(&t, &fits).await.unwrap();
    assert_eq!(
        s.arguments(key("a", &t.task_id).borrowed()).await.unwrap(),
        Some(fits)
    );
}
