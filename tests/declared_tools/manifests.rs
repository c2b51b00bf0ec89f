//! A manifest that cannot be served stops `serve` before it listens, naming the file, the
//! entry and the problem: a bad schema, a duplicate name, an unknown key or target, a name
//! that a built-in tool already has, a secret that is not set.

use super::write_manifest;

const OK: &str =
    "description = \"d\"\ninput_schema = { type = \"object\" }\ntarget = { command = [\"true\"] }";

#[test]
fn manifests_that_cannot_be_served_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(String, &str)> = vec![
        (
            format!(
                "[[tool]]\nname = \"a\"\n{}",
                OK.replace(
                    "{ type = \"object\" }",
                    "{ type = \"object\", properties = { x = { pattern = \"(\" } } }"
                )
            ),
            "tool #1 (a): input_schema does not compile",
        ),
        (
            format!("[[tool]]\nname = \"a\"\n{OK}\n[[tool]]\nname = \"a\"\n{OK}"),
            "tool #2 (a): a tool of this name is declared earlier",
        ),
        (
            format!("[[tool]]\nname = \"a\"\n{OK}\nretries = 3"),
            "unknown field `retries`",
        ),
        (
            format!(
                "[[tool]]\nname = \"a\"\n{}",
                OK.replace("{ command = [\"true\"] }", "{ grpc = \"x\" }")
            ),
            "unknown field `grpc`",
        ),
        (
            format!("[[tool]]\nname = \"wait\"\n{OK}"),
            "two tools are named wait",
        ),
        (
            format!(
                "[[tool]]\nname = \"a\"\n{}",
                OK.replace(
                    "{ command = [\"true\"] }",
                    "{ http = \"https://x.example\", secret_env = \"MCP_TASKS_TEST_UNSET\" }"
                )
            ),
            "tool #1 (a): secret_env MCP_TASKS_TEST_UNSET is not set",
        ),
    ];
    for (text, says) in cases {
        let manifest = write_manifest(dir.path(), &text);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--tools")
            .arg(&manifest)
            .env_remove("MCP_TASKS_TEST_UNSET")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}: started");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening"),
            "{text}: listened"
        );
        assert!(
            stderr.contains(says),
            "{text}\n=> {stderr}\n(wanted: {says})"
        );
        if !says.starts_with("two tools") {
            assert!(stderr.contains("tools.toml"), "names the file: {stderr}");
        }
    }
}

/// docs/add-a-tool.md shows the Python example as it is and a manifest entry that reads.
#[test]
fn the_docs_show_the_examples_as_they_are() {
    let docs = std::fs::read_to_string(super::repo().join("docs/add-a-tool.md")).unwrap();
    let block = |lang: &str| -> String {
        docs.split(&format!("```{lang}\n"))
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap_or_else(|| panic!("docs/add-a-tool.md has a {lang} block"))
            .to_owned()
    };
    let report = std::fs::read_to_string(super::repo().join("examples/python/report.py")).unwrap();
    assert!(
        report.contains(block("python").trim_end()),
        "docs/add-a-tool.md's Python differs from examples/python/report.py"
    );
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_manifest(dir.path(), &block("toml"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--tools")
        .arg(&manifest)
        // No AWS is reachable: the entry must load, not run.
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = out;
    use std::io::BufRead as _;
    let listening = std::io::BufReader::new(out.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("listening on"));
    let _ = out.kill();
    let _ = out.wait();
    assert!(listening, "the docs' entry did not load");
}

/// `mcp-tasks tools check FILE` reads a manifest as `serve` would, without serving: 0 and the
/// tools it declares, or 2 and the refusal (naming the file, the entry, the line and the key,
/// never a value pasted into the wrong key).
#[test]
fn tools_check_validates_a_manifest_without_serving() {
    let dir = tempfile::tempdir().unwrap();
    let check = |text: &str| {
        let manifest = write_manifest(dir.path(), text);
        std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
            .args(["tools", "check"])
            .arg(&manifest)
            .output()
            .unwrap()
    };
    let good = format!(
        "[[tool]]\nname = \"a\"\n{OK}\n\n[[tool]]\nname = \"b\"\nprotocol = \"plain\"\n{}\n\n\
         [[tool]]\nname = \"c\"\n{}",
        OK.replace(
            "{ command = [\"true\"] }",
            "{ lambda = \"arn:aws:lambda:eu-west-1:123456789012:function:resize\" }"
        ),
        OK.replace(
            "{ command = [\"true\"] }",
            "{ step_functions = \"arn:aws:states:eu-west-1:123456789012:stateMachine:approve\" }"
        )
    );
    let out = check(&good);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout
            .ends_with("tools.toml: 3 tools: a (command), b (lambda, plain), c (step_functions)\n"),
        "{stdout}"
    );
    let bad = format!(
        "[[tool]]\nname = \"a\"\n{}",
        OK.replace("[\"true\"]", "\"sk-live-0123456789abcdef\"")
    );
    let out = check(&bad);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("tools.toml: tool #1 (a): not a tool manifest at line 5, key target.command"),
        "{stderr}"
    );
    assert!(!stderr.contains("sk-live"), "{stderr}");
}

/// `serve` says which declared tools it loaded.
#[test]
fn serve_lists_the_declared_tools_it_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_manifest(dir.path(), &format!("[[tool]]\nname = \"a\"\n{OK}"));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--tools")
        .arg(&manifest)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::BufRead as _;
    let lines: Vec<String> = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .take_while(|l| !l.contains("listening on"))
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("mcp-tasks declared tools from ")
                && l.ends_with("tools.toml: a (command)")),
        "{lines:?}"
    );
}

/// Every manifest under examples/ is one `mcp-tasks tools check` accepts.
#[test]
fn the_example_manifests_check() {
    let examples = super::repo().join("examples");
    let mut files = vec![
        examples.join("tools.toml"),
        examples.join("lambda-tools.toml"),
    ];
    for dir in ["plain", "step-functions"] {
        files.push(examples.join(dir).join("tools.toml"));
    }
    for f in files {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
            .args(["tools", "check"])
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
