use super::*;
use serde_json::json;

fn record() -> TaskRecord {
    TaskRecord::new(
        "t".into(),
        TaskId::generate(),
        "tool",
        Some(60_000),
        1000,
        json!({}),
    )
}

/// The direct writer gives byte for byte what the tree did, in every state.
#[test]
fn the_get_answer_writes_the_same_bytes_as_the_json_tree() {
    let meta = json!({"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks", "version": "0"}});
    let mut cases = Vec::new();
    let mut t = record();
    cases.push(t.clone());
    t.status_message = Some("Waited 1 of 3 s \"quoted\" ✓".into());
    cases.push(t.clone());
    let mut asking = record();
    asking
        .require_input(BTreeMap::from([(
            "k1".to_owned(),
            json!({"method": "elicitation/create"}),
        )]))
        .unwrap();
    cases.push(asking);
    for result in [
        Some(json!({"content": [{"type": "text", "text": "hi"}], "isError": false})),
        Some(json!({"content": [], "resultType": "other", "structuredContent": {"z": 1}})),
        Some(json!({"zzz": 1, "aaa": 2})),
        Some(json!("not an object")),
        None,
    ] {
        let mut done = record();
        done.complete(json!({})).unwrap();
        done.result = result;
        cases.push(done);
    }
    for error in [
        Some(ErrorObject {
            code: -32603,
            message: "boom".into(),
            data: Some(json!({"why": [1, 2]})),
        }),
        Some(ErrorObject {
            code: -1,
            message: String::new(),
            data: None,
        }),
        None,
    ] {
        let mut failed = record();
        failed.fail(ErrorObject::internal("x")).unwrap();
        failed.error = error;
        cases.push(failed);
    }
    let mut cancelled = record();
    cancelled.cancel().unwrap();
    cancelled.ttl_ms = None;
    cases.push(cancelled);
    for id in [json!(7), json!("req-\u{1}")] {
        for t in &cases {
            let mut tree = t.to_detailed();
            tree.insert("_meta".into(), meta.clone());
            let want = serde_json::to_string(&json!({"jsonrpc": "2.0", "id": id, "result": tree}))
                .unwrap();
            let got = serde_json::to_string(&GetAnswer {
                id: &id,
                task: t,
                meta: &meta,
            })
            .unwrap();
            assert_eq!(got, want);
            let meta_json = serde_json::to_vec(&meta).unwrap();
            let answer = GetAnswer {
                id: &id,
                task: t,
                meta: &meta,
            };
            assert_eq!(answer.to_vec_with(&meta_json).unwrap(), want.as_bytes());
        }
    }
}

#[test]
fn transition_table_is_exactly_the_lifecycle() {
    use TaskStatus::*;
    let legal = [
        (Working, InputRequired),
        (Working, Completed),
        (Working, Failed),
        (Working, Cancelled),
        (InputRequired, Working),
        (InputRequired, Completed),
        (InputRequired, Failed),
        (InputRequired, Cancelled),
    ];
    for from in TaskStatus::ALL {
        for to in TaskStatus::ALL {
            assert_eq!(
                from.can_become(to),
                legal.contains(&(from, to)),
                "{from:?} -> {to:?}"
            );
            let mut r = record();
            r.status = from;
            let outcome = r.transition(to);
            assert_eq!(outcome.is_ok(), legal.contains(&(from, to)));
            if outcome.is_err() {
                assert_eq!(r.status, from, "a refused transition changes nothing");
            }
        }
    }
}

#[test]
fn terminal_states_refuse_every_change() {
    for terminal in [
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ] {
        let mut r = record();
        r.status = terminal;
        assert!(r.complete(json!({})).is_err());
        assert!(r.fail(ErrorObject::internal("x")).is_err());
        assert!(r.cancel().is_err());
        let mut reqs = BTreeMap::new();
        reqs.insert("k".into(), json!({}));
        assert!(r.require_input(reqs).is_err());
        assert_eq!(r.status, terminal);
    }
}

#[test]
fn answers_for_unknown_keys_are_ignored_and_partial_answers_keep_waiting() {
    let mut r = record();
    let mut reqs = BTreeMap::new();
    reqs.insert("a".into(), json!({"method": "elicitation/create"}));
    reqs.insert("b".into(), json!({"method": "elicitation/create"}));
    r.require_input(reqs).unwrap();
    let unknown = json!({"zzz": {"action": "accept"}});
    assert!(!r.answer(unknown.as_object().unwrap()));
    assert_eq!(r.status, TaskStatus::InputRequired);
    let a = json!({"a": {"action": "accept"}});
    assert!(r.answer(a.as_object().unwrap()));
    assert_eq!(r.status, TaskStatus::InputRequired);
    assert!(!r.input_requests.contains_key("a"));
    assert!(!r.answer(a.as_object().unwrap()), "a retry has no effect");
    let b = json!({"b": {"action": "accept"}});
    assert!(r.answer(b.as_object().unwrap()));
    assert_eq!(r.status, TaskStatus::Working);
    assert_eq!(r.input_responses.len(), 2);
}

#[test]
fn malformed_answers_to_outstanding_requests_are_refused() {
    let mut r = record();
    let mut reqs = BTreeMap::new();
    reqs.insert(
        "e".into(),
        json!({"method": "elicitation/create", "params": {}}),
    );
    reqs.insert("r".into(), json!({"method": "roots/list", "params": {}}));
    r.require_input(reqs).unwrap();
    for bad in [
        json!({"e": "yes"}),
        json!({"e": {"action": "maybe"}}),
        json!({"e": {"action": "accept", "content": 5}}),
        json!({"r": {"roots": "none"}}),
    ] {
        assert!(r.check_answers(bad.as_object().unwrap()).is_err(), "{bad}");
    }
    for good in [
        json!({"e": {"action": "decline"}}),
        json!({"e": {"action": "accept", "content": {"x": 1}}, "unknown": 5}),
        json!({"r": {"roots": []}}),
    ] {
        assert!(r.check_answers(good.as_object().unwrap()).is_ok(), "{good}");
    }
}

#[test]
fn input_keys_are_never_reused() {
    let mut r = record();
    let mut reqs = BTreeMap::new();
    reqs.insert("a".into(), json!({}));
    r.require_input(reqs.clone()).unwrap();
    r.answer(json!({"a": {}}).as_object().unwrap());
    assert!(matches!(
        r.require_input(reqs),
        Err(InputRequestError::ReusedKey(_))
    ));
}

#[test]
fn task_ids_are_unique_printable_and_short() {
    let a = TaskId::generate();
    let b = TaskId::generate();
    assert_ne!(a, b);
    assert!(is_valid_task_id(&a));
    assert!(a.len() <= 128);
    assert!(!is_valid_task_id("has space"));
    assert!(!is_valid_task_id(""));
    assert!(!is_valid_task_id(&"x".repeat(129)));
}

#[test]
fn detailed_task_carries_what_its_status_requires() {
    let mut r = record();
    r.complete(json!({"content": [], "resultType": "complete"}))
        .unwrap();
    let d = r.to_detailed();
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["status"], "completed");
    assert_eq!(d["result"]["resultType"], "complete");
    assert!(!d.contains_key("inputRequests"));
    let c = record().to_create_result();
    assert_eq!(c["resultType"], "task");
    assert!(c.contains_key("ttlMs"));
    assert!(!c.contains_key("result"));
}

/// `tasks/get` answers for records of every shape, fixed in time and id.
fn pinned_cases() -> Vec<(Value, TaskRecord)> {
    let pin = |mut t: TaskRecord| {
        t.task_id = TaskId::from_static("tsk_01KB0000000000000000000000deadbeefcafe0000");
        t.created_at_ms = 1_785_240_000_123;
        t.last_updated_at_ms = 1_785_240_061_456;
        t
    };
    let mut out = Vec::new();
    let mut t = record();
    out.push(pin(t.clone()));
    t.status_message = Some("Waited 1 of 3 s \"quoted\" ✓ \u{7f}\u{1}".into());
    t.poll_interval_ms = 30_000;
    out.push(pin(t.clone()));
    let mut asking = record();
    asking
        .require_input(BTreeMap::from([
            ("b".to_owned(), json!({"method": "roots/list"})),
            (
                "a".to_owned(),
                json!({"method": "elicitation/create", "params": {"z": 1, "a": [2]}}),
            ),
        ]))
        .unwrap();
    out.push(pin(asking));
    for result in [
        Some(json!({"content": [{"type": "text", "text": "hi"}], "isError": false})),
        Some(json!({"content": [], "resultType": "other", "structuredContent": {"z": 1}})),
        Some(json!({"zzz": 1, "aaa": 2})),
        Some(json!("not an object")),
        None,
    ] {
        let mut done = record();
        done.complete(json!({})).unwrap();
        done.result = result;
        out.push(pin(done));
    }
    for error in [
        Some(ErrorObject {
            code: -32603,
            message: "boom".into(),
            data: Some(json!({"why": [1, 2]})),
        }),
        None,
    ] {
        let mut failed = record();
        failed.fail(ErrorObject::internal("x")).unwrap();
        failed.error = error;
        out.push(pin(failed));
    }
    let mut cancelled = record();
    cancelled.cancel().unwrap();
    cancelled.ttl_ms = None;
    out.push(pin(cancelled));
    let ids = [json!(7), json!("req-\u{1}"), json!(null)];
    out.into_iter()
        .enumerate()
        .map(|(i, t)| (ids[i % ids.len()].clone(), t))
        .collect()
}

/// The bytes of `tasks/get` answers, pinned in `get_answers.golden` (written by the code before
/// the wire shape was derived once, and by every version since): a change to the shape that a
/// client could see fails here. `GOLDEN_WRITE=1` rewrites the file (then review its diff).
#[test]
fn tasks_get_answers_are_the_pinned_bytes() {
    let meta = json!({"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks", "version": "0"}});
    let got: String = pinned_cases()
        .iter()
        .map(|(id, t)| {
            let answer = GetAnswer {
                id,
                task: t,
                meta: &meta,
            };
            let written = serde_json::to_string(&answer).unwrap();
            // The server's way (its `_meta` written once), byte for byte the same.
            let meta_json = serde_json::to_vec(&meta).unwrap();
            assert_eq!(
                String::from_utf8(answer.to_vec_with(&meta_json).unwrap()).unwrap(),
                written
            );
            written + "\n"
        })
        .collect();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/task/get_answers.golden");
    if std::env::var("GOLDEN_WRITE").is_ok_and(|v| v == "1") {
        std::fs::write(path, &got).unwrap();
    }
    let want = std::fs::read_to_string(path).expect("src/task/get_answers.golden");
    assert_eq!(got, want);
}
