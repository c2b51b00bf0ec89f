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
