//! Nothing a store holds reaches a terminal raw: `mcp-tasks tasks` escapes the control
//! characters of what it prints (C0 but newline and tab, DEL, C1, so every escape sequence),
//! in text and in JSON.

mod support;

use std::process::Command;

use serde_json::{Value, json};

/// What a hostile server or a damaged record may hold: a window-title OSC ended by BEL, a
/// clear-screen CSI, a C1 CSI (U+009B), DEL and a carriage return.
const HOSTILE: &str = "\x1b]0;owned\x07\x1b[2J\u{9b}31m\x7f\r";

/// Whether a terminal could act on `c` (what must never be written raw).
fn unsafe_char(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// The characters of `text` a terminal could act on, for assertion messages.
fn unsafe_in(text: &str) -> Vec<char> {
    text.chars().filter(|c| unsafe_char(*c)).collect()
}

/// A stopped server's store holding [`HOSTILE`] in a status message, an input request and a
/// result: `tasks show` and `tasks list` print none of it raw, in text or JSON.
#[tokio::test]
async fn tasks_show_and_list_escape_del_and_c1_too() {
    use mcp_tasks_core::store::TaskStore as _;
    use mcp_tasks_core::store::embedded::EmbeddedStore;
    use mcp_tasks_core::task::{TaskRecord, TaskStatus, new_task_id};

    let dir = support::data_dir();
    let (asking, done) = {
        let store = EmbeddedStore::open(&dir.path().join("tasks.redb")).unwrap();
        let mut asking = TaskRecord::new("local", new_task_id(), "t", None, 1000, json!({}));
        asking.status = TaskStatus::InputRequired;
        asking.status_message = Some(format!("waiting {HOSTILE}"));
        asking.input_requests.insert(
            "q".into(),
            json!({"method": "elicitation/create", "params": {"message": HOSTILE}}),
        );
        let mut done = TaskRecord::new("local", new_task_id(), "t", None, 1000, json!({}));
        done.status = TaskStatus::Completed;
        done.result = Some(json!({"content": [{"type": "text", "text": HOSTILE}]}));
        for t in [&asking, &done] {
            store.create(t, &json!({"note": HOSTILE})).await.unwrap();
        }
        (asking.task_id, done.task_id)
    };
    let tasks = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
            .arg("tasks")
            .args(args)
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let show = |id: &str, json: bool| {
        let mut args = vec!["show", id, "--tenant", "local", "--arguments"];
        if json {
            args.push("--json");
        }
        tasks(&args)
    };
    for (what, out) in [
        ("show (text), asking", show(&asking, false)),
        ("show (text), done", show(&done, false)),
        ("show --json, asking", show(&asking, true)),
        ("show --json, done", show(&done, true)),
        ("list", tasks(&["list"])),
        ("list --json", tasks(&["list", "--json"])),
    ] {
        assert!(
            unsafe_in(&out).is_empty(),
            "{what}: raw {:?} in {out}",
            unsafe_in(&out)
        );
        assert!(
            out.contains("owned"),
            "{what}: the text itself is shown: {out}"
        );
    }
    // The JSON is the same value as stored.
    let v: Value = serde_json::from_str(&show(&done, true)).unwrap();
    assert_eq!(v["result"]["content"][0]["text"], HOSTILE);
    assert_eq!(v["arguments"]["note"], HOSTILE);
    let listed: Value =
        serde_json::from_str(tasks(&["list", "--json"]).lines().next().unwrap()).unwrap();
    assert_eq!(listed["status_message"], format!("waiting {HOSTILE}"));
}
