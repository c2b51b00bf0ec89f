//! What the function binaries are granted and what they link, checked without the emulator.

use crate::support_aws;

/// The template reader behind `Env::assert_permitted` finds each function's actions (and only
/// its own): without the emulator.
#[test]
fn the_template_reader_finds_each_functions_grants() {
    let g = support_aws::granted_actions();
    let has = |who: &str, a: &str| g[who].iter().any(|x| x == a);
    assert!(has("mcp", "dynamodb:PutItem") && has("mcp", "sqs:SendMessage"));
    assert!(has("worker", "sqs:ReceiveMessage"));
    assert!(has("sweep", "dynamodb:DeleteItem") && has("sweep", "dynamodb:Query"));
    assert!(!has("mcp", "dynamodb:DeleteItem"), "{:?}", g["mcp"]);
    assert!(!has("tasks", "sqs:ReceiveMessage"), "{:?}", g["tasks"]);
    assert!(!has("worker", "dynamodb:DeleteItem"), "{:?}", g["worker"]);
}

/// What each function links, checked on its binary: what it does not use costs every cold start
/// (its pages read, its relocations applied) and the deployment package. A crate's code is
/// found by its source files (`…/<crate>-<version>/src/…`), which the panic locations of any
/// of its code a binary links carry, stripped or not. Without the emulator.
///
/// - The checker of `tools/call` arguments (`schema`) only in the mcp function: the
///   tasks function serves `tasks/*` with no tool registered (`aws::lambda::tasks_router`),
///   and the worker's registry does not check arguments (`tools::Registry::checking_arguments`).
/// - The `jsonschema` crate (the tests' oracle for the wire; 3.2 MB of the arm64 mcp function
///   when it checked arguments) and the regex crate's engines in none: the functions' logger
///   filters by target (`aws::lambda::init_logging`), not with `EnvFilter`'s patterns, and
///   `pattern`s are matched with regex-lite, which the AWS SDK links anyway.
/// - No HTTP/2 anywhere: the AWS clients talk HTTP/1.1 through `aws/https.rs`, not the SDK's
///   default client, which links `h2`.
#[test]
fn the_functions_link_only_what_they_use() {
    let b = support_aws::binaries();
    for (name, path) in [
        ("mcp", &b.mcp),
        ("tasks", &b.tasks),
        ("worker", &b.worker),
        ("sweep", &b.sweep),
    ] {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let crates = linked_crates(&bytes);
        // The control: every function links hyper; a search that misses it looks for the
        // wrong thing.
        assert!(
            crates.contains("hyper"),
            "the {name} binary names none of hyper's sources"
        );
        assert!(
            !crates.contains("h2"),
            "the {name} function links HTTP/2 (h2)"
        );
        // The argument checker only where `tools/call` is served (found by one of its
        // messages); the tests' schema engine and the regex crate's engines nowhere. (Its
        // regex engine, regex-lite, is in all four anyway: the SDK's endpoint rules use it.)
        let only_mcp = name == "mcp";
        let checker = bytes
            .windows(CHECKER_MESSAGE.len())
            .any(|w| w == CHECKER_MESSAGE.as_bytes());
        assert_eq!(
            checker,
            only_mcp,
            "the {name} function {} the argument checker",
            if only_mcp { "does not link" } else { "links" }
        );
        for krate in ["jsonschema", "regex-automata"] {
            assert!(!crates.contains(krate), "the {name} function links {krate}");
        }
    }
}

/// A message of the argument checker (`schema`), as its binary holds it.
const CHECKER_MESSAGE: &str = "nests too deeply for this schema";

/// The crates whose sources (`/<crate>-<version>/src/`) a binary names.
fn linked_crates(bytes: &[u8]) -> std::collections::HashSet<String> {
    let mut crates = std::collections::HashSet::new();
    for (at, _) in bytes.windows(5).enumerate().filter(|(_, w)| *w == b"/src/") {
        let before = &bytes[..at];
        let version = before
            .iter()
            .rev()
            .take_while(|c| c.is_ascii_digit() || **c == b'.')
            .count();
        let Some(rest) = before[..before.len() - version].strip_suffix(b"-") else {
            continue;
        };
        let name = rest
            .iter()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'-' || **c == b'_')
            .count();
        if version > 0 && name > 0 && rest[..rest.len() - name].ends_with(b"/") {
            let name = &rest[rest.len() - name..];
            crates.insert(String::from_utf8_lossy(name).into_owned());
        }
    }
    crates
}
