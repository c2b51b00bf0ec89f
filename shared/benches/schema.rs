//! The argument checker (`schema`) against the `jsonschema` crate it replaced, on the
//! built-in tools' schemas and a recursive one: compiling a schema (what the first call of a
//! tool pays after a cold start) and checking arguments (every `tools/call`), valid and not.
//!
//!   cargo bench -p mcp-tasks-core --bench schema
//!
//! Five interleaved rounds; each line gives the median time per operation of both and their
//! ratio (ours / theirs: below 1 is faster). Absolute times on a shared machine are noise; the
//! ratio, measured in the same run, is the figure.

use std::hint::black_box;
use std::time::{Duration, Instant};

use mcp_tasks_core::tools::Registry;

use mcp_tasks_core::schema::Validator;
use serde_json::{Value, json};

const ROUNDS: usize = 5;
const BUDGET: Duration = Duration::from_millis(200);
/// The length of the long string matched against a pattern, in bytes.
const LONG: usize = 64 * 1024;

/// Nanoseconds per call of `f`, run for about [`BUDGET`].
fn time(mut f: impl FnMut()) -> f64 {
    let mut n = 0u64;
    let start = Instant::now();
    while start.elapsed() < BUDGET {
        for _ in 0..64 {
            f();
        }
        n += 64;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn report(what: &str, ours: Vec<f64>, theirs: Vec<f64>) {
    let (o, t) = (median(ours), median(theirs));
    println!("{what:<52} {o:>10.0} ns {t:>10.0} ns {:>7.2}×", o / t);
}

fn main() {
    let registry = Registry::new(mcp_tasks_demo_tools::tools());
    let mut cases: Vec<(String, Value, Value, Value)> = Vec::new();
    for tool in registry.list().as_array().expect("tools") {
        let name = tool["name"].as_str().expect("name").to_owned();
        let schema = tool["inputSchema"].clone();
        let (good, bad) = match name.as_str() {
            "hash_chain" => (
                json!({"seed": "abc", "rounds": 100, "pace_ms": 0}),
                json!({"seed": "abc", "rounds": 0, "extra": 1}),
            ),
            "wait" => (json!({"seconds": 5}), json!({"seconds": -1})),
            _ => continue,
        };
        cases.push((name, schema, good, bad));
    }
    let tree = json!({
        "$defs": {"node": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 64, "pattern": "^[a-z]+$"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 8}},
            "required": ["name"], "additionalProperties": false}},
        "type": "object", "properties": {"root": {"$ref": "#/$defs/node"}},
        "required": ["root"], "additionalProperties": false
    });
    let leaf = |n: &str| json!({"name": n});
    let good_tree = json!({"root": {"name": "a", "children": [
        {"name": "b", "children": [leaf("c"), leaf("d")]}, leaf("e"), leaf("f")]}});
    let bad_tree = json!({"root": {"name": "a", "children": [
        {"name": "B", "children": [leaf("c"), {"nom": "d"}]}]}});
    cases.push((
        "tree (recursive $ref, pattern)".into(),
        tree,
        good_tree,
        bad_tree,
    ));
    let patterns = json!({
        "type": "object",
        "properties": {
            "email": {"type": "string", "pattern": "^[^\\s@]+@[^\\s@]+\\.[a-z]{2,}$"},
            "slug": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"},
            "phone": {"type": "string", "pattern": "^\\+?\\d{1,3}[ .-]?\\d{3,14}$"},
            "title": {"type": "string", "pattern": "^\\S(.*\\S)?$"},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^\\w{1,32}$"}}
        },
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": false
    });
    let good_patterns = json!({"email": "ada@example.org", "slug": "an-example-slug",
        "phone": "+44 2079460000", "title": "A title of some sixty characters, give or take",
        "tags": ["a", "bb", "ccc"], "x-trace": "abc"});
    let bad_patterns = json!({"email": "not an email", "slug": "Bad Slug",
        "phone": "+44 2079460000", "title": " padded ", "tags": ["ok", "no way"]});
    cases.push((
        "patterns (5 strings, classes)".into(),
        patterns,
        good_patterns,
        bad_patterns,
    ));
    // One long string under a pattern with nested quantifiers (exponential for a backtracking
    // engine on a string that fails at its end): the cost per byte of matching.
    let words = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(1150);
    let long = &words[..LONG];
    cases.push((
        format!("{} KiB string, one pattern", LONG / 1024),
        json!({"type": "string", "pattern": "^(\\w+[\\s,.]*)*$"}),
        json!(long),
        json!(format!("{}!", &long[..LONG - 1])),
    ));

    println!(
        "{:<52} {:>13} {:>13} {:>8}",
        "", "checker", "jsonschema", "ratio"
    );
    for (name, schema, good, bad) in &cases {
        let ours = Validator::new(schema).expect("compiles");
        let theirs = jsonschema::validator_for(schema).expect("compiles");
        for (args, want) in [(good, true), (bad, false)] {
            let (o, t) = (ours.is_valid(args), theirs.is_valid(args));
            assert!(
                o == want && t == want,
                "{name}: valid {want}? ours {o}, theirs {t}"
            );
        }
        let mut rows: [(Vec<f64>, Vec<f64>); 3] = Default::default();
        for _ in 0..ROUNDS {
            rows[0].0.push(time(|| {
                black_box(Validator::new(black_box(schema)).is_ok());
            }));
            rows[0].1.push(time(|| {
                black_box(jsonschema::validator_for(black_box(schema)).is_ok());
            }));
            rows[1].0.push(time(|| {
                black_box(ours.errors(black_box(good), 3));
            }));
            rows[1].1.push(time(|| {
                black_box(theirs.iter_errors(black_box(good)).take(3).count());
            }));
            rows[2].0.push(time(|| {
                black_box(ours.errors(black_box(bad), 3));
            }));
            rows[2].1.push(time(|| {
                let errors: Vec<String> = theirs
                    .iter_errors(black_box(bad))
                    .take(3)
                    .map(|e| e.masked().to_string())
                    .collect();
                black_box(errors);
            }));
        }
        let [compile, valid, invalid] = rows;
        report(&format!("{name}: compile"), compile.0, compile.1);
        let per_byte = |xs: &[f64]| median(xs.to_vec()) / LONG as f64;
        let long = name
            .contains("KiB string")
            .then(|| (per_byte(&valid.0), per_byte(&valid.1)));
        report(&format!("{name}: valid arguments"), valid.0, valid.1);
        if let Some((ours, theirs)) = long {
            println!(
                "{:<52} {ours:>10.1} ns {theirs:>10.1} ns (valid arguments, per byte)",
                ""
            );
        }
        report(
            &format!("{name}: invalid (3 messages)"),
            invalid.0,
            invalid.1,
        );
    }
}
