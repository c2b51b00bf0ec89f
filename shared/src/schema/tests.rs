use serde_json::json;

use super::references::resolve;
use super::*;

mod numbers;
mod patterns;

fn errors(schema: Value, instance: Value) -> Vec<String> {
    let v = Validator::new(&schema).expect("compiles");
    let errors = v.errors(&instance, 10);
    assert_eq!(
        v.is_valid(&instance),
        errors.is_empty(),
        "the two answers agree"
    );
    errors
        .into_iter()
        .map(|f| format!("{}: {}", f.path, f.message))
        .collect()
}

#[test]
fn failures_name_the_place_and_the_rule_never_the_value() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 3},
            "tags": {"type": "array", "items": {"type": "integer", "minimum": 1}},
            "a/b": {"const": 1},
        },
        "required": ["name", "size"],
        "additionalProperties": false,
    });
    let got = errors(
        schema,
        json!({"name": "secret-value", "tags": [1, 0.5, -3], "a/b": 2, "extra": "x"}),
    );
    assert_eq!(
        got,
        [
            ": lacks the required property \"size\"",
            "/a~1b: is not 1",
            "/name: is longer than 3 characters",
            "/tags/1: is not of type \"integer\"",
            "/tags/1: is less than 1",
            "/tags/2: is less than 1",
            ": has the property \"extra\", which is not allowed",
        ]
    );
    assert!(got.iter().all(|e| !e.contains("secret")));
}

#[test]
fn collecting_stops_at_the_limit_and_the_verdict_at_the_first_failure() {
    let v = Validator::new(&json!({"items": {"type": "string"}})).unwrap();
    let many = Value::Array(vec![json!(1); 1000]);
    assert_eq!(v.errors(&many, 2).len(), 2);
    assert_eq!(v.errors(&many, 0).len(), 1, "at least one reason");
    assert!(!v.is_valid(&many));
    assert!(v.errors(&json!(["a", "b"]), 3).is_empty());
}

#[test]
fn composition_failures_are_summed_up_by_the_parent() {
    let s = json!({"anyOf": [{"type": "string"}, {"minimum": 10}]});
    assert_eq!(
        errors(s.clone(), json!(3)),
        [": does not match any of the anyOf schemas"]
    );
    assert!(errors(s, json!(11)).is_empty());
    let one = json!({"oneOf": [{"type": "integer"}, {"minimum": 2}]});
    assert_eq!(
        errors(one, json!(5)),
        [": matches 2 of the oneOf schemas, not one"]
    );
    let not = json!({"not": {"const": "x"}});
    assert_eq!(errors(not, json!("x")), [": matches the schema in \"not\""]);
    let cond = json!({"if": {"const": 1}, "then": {"maximum": 0}, "else": {"type": "string"}});
    assert_eq!(errors(cond.clone(), json!(1)), [": is greater than 0"]);
    assert_eq!(errors(cond, json!(2)), [": is not of type \"string\""]);
}

#[test]
fn numbers_compare_by_value() {
    let int = json!({"type": "integer"});
    assert!(errors(int.clone(), json!(1.0)).is_empty());
    assert_eq!(errors(int, json!(1.5)).len(), 1);
    assert!(errors(json!({"const": 1}), json!(1.0)).is_empty());
    assert!(errors(json!({"enum": [[1, {"a": 2.0}]]}), json!([1.0, {"a": 2}])).is_empty());
    // u64::MAX is not rounded to a float that equals it.
    let max = json!({"maximum": 18446744073709551614_u64});
    assert_eq!(errors(max.clone(), json!(u64::MAX)).len(), 1);
    assert!(errors(max, json!(18446744073709551614_u64)).is_empty());
    assert!(errors(json!({"exclusiveMinimum": -1}), json!(-0.5)).is_empty());
    assert_eq!(errors(json!({"exclusiveMinimum": 0.5}), json!(0)).len(), 1);
    assert!(errors(json!({"multipleOf": 0.0001}), json!(0.0075)).is_empty());
    assert!(errors(json!({"multipleOf": 0.01}), json!(19.99)).is_empty());
    assert_eq!(errors(json!({"multipleOf": 0.01}), json!(19.995)).len(), 1);
    assert!(errors(json!({"multipleOf": 3}), json!(-9)).is_empty());
}

#[test]
fn unique_items_hashes_long_arrays_with_the_same_equality() {
    let s = json!({"uniqueItems": true});
    let mut items: Vec<Value> = (0..100).map(|i| json!({"k": i, "z": [i]})).collect();
    assert!(errors(s.clone(), Value::Array(items.clone())).is_empty());
    items.push(json!({"z": [7.0], "k": 7}));
    assert_eq!(errors(s.clone(), Value::Array(items)).len(), 1);
    let big: Vec<Value> = (0..100_000).map(|i| json!(i)).collect();
    assert!(errors(s, Value::Array(big)).is_empty());
}

#[test]
fn strings_count_characters_not_bytes() {
    let s = json!({"minLength": 2, "maxLength": 2});
    assert!(errors(s.clone(), json!("é🙂")).is_empty());
    assert_eq!(errors(s, json!("é")), [": is shorter than 2 characters"]);
}

#[test]
fn references_anchors_and_ids_resolve_inside_the_schema() {
    let s = json!({
        "$id": "https://example.com/root.json",
        "$defs": {
            "pos": {"$anchor": "positive", "exclusiveMinimum": 0},
            "inner": {"$id": "inner/leaf.json", "$defs": {"s": {"type": "string"}},
                      "$ref": "#/$defs/s"},
        },
        "properties": {
            "n": {"$ref": "#positive"},
            "s": {"$ref": "inner/leaf.json"},
            "t": {"$ref": "https://example.com/inner/leaf.json#/$defs/s"},
            "u": {"$ref": "#/$defs/pos"},
        }
    });
    assert!(errors(s.clone(), json!({"n": 1, "s": "x", "t": "y", "u": 2})).is_empty());
    assert_eq!(
        errors(s, json!({"n": 0, "s": 1, "t": 2, "u": -1})),
        [
            "/n: is not greater than 0",
            "/s: is not of type \"string\"",
            "/t: is not of type \"string\"",
            "/u: is not greater than 0",
        ]
    );
}

#[test]
fn a_dynamic_reference_finds_the_outermost_anchor() {
    // A generic list whose items the outer schema narrows, the pattern $dynamicRef is for.
    let s = json!({
        "$id": "https://example.com/strings",
        "$dynamicAnchor": "item",
        "$ref": "list",
        "$defs": {
            "list": {
                "$id": "list",
                "type": "array",
                "items": {"$dynamicRef": "#item"},
                "$defs": {"item": {"$dynamicAnchor": "item"}}
            }
        }
    });
    // The outermost `item` anchor is the root, which is itself the list: nested lists.
    assert!(errors(s.clone(), json!([[], [[]]])).is_empty());
    assert_eq!(errors(s, json!([["a"]])).len(), 1);
}

#[test]
fn unevaluated_properties_see_through_applicators_and_references() {
    let s = json!({
        "$defs": {"base": {"properties": {"a": true}}},
        "$ref": "#/$defs/base",
        "anyOf": [{"properties": {"b": true}}, {"properties": {"c": true}}],
        "if": {"required": ["d"], "properties": {"d": true}},
        "unevaluatedProperties": false
    });
    assert!(errors(s.clone(), json!({"a": 1, "b": 2, "c": 3, "d": 4})).is_empty());
    assert_eq!(
        errors(s, json!({"a": 1, "e": 5})),
        [": has the property \"e\", which is not allowed"]
    );
    let items = json!({"prefixItems": [true], "contains": {"const": 9},
                       "minContains": 0, "unevaluatedItems": false});
    assert!(errors(items.clone(), json!([1, 9, 9])).is_empty());
    assert_eq!(errors(items, json!([1, 9, 2])), ["/2: is not allowed here"]);
}

#[test]
fn a_reference_loop_ends_in_an_error_not_a_stack_overflow() {
    // On a thread with the stack of a tokio worker (2 MiB), in a debug build.
    let run = |schema: Value, instance: Value| {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || errors(schema, instance))
            .unwrap()
            .join()
            .expect("no stack overflow")
    };
    let looping = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                         "$ref": "#/$defs/a"});
    assert_eq!(run(looping, json!(1)), [format!(": {TOO_DEEP}")]);
    assert!(
        TOO_DEEP.contains(&format!("at most {MAX_DEPTH} ")),
        "the message names the limit"
    );
    // A tree under a recursive schema (four evaluations per node): 25 levels are checked
    // in full, 40 refused at the limit.
    let tree = |depth| {
        let mut deep = json!("leaf");
        for _ in 0..depth {
            deep = json!({"next": [deep]});
        }
        deep
    };
    let recursive = json!({"anyOf": [
        {"type": "string"},
        {"type": "object", "properties": {"next": {"items": {"$ref": "#"}}},
         "required": ["next"], "unevaluatedProperties": false}
    ]});
    assert!(run(recursive.clone(), tree(25)).is_empty());
    let refused = run(recursive, tree(40));
    assert!(refused.iter().any(|e| e.ends_with(TOO_DEEP)), "{refused:?}");
    // A check that could not be finished does not pass, even where failing would: under
    // `not`, or in one branch of an `anyOf` another branch satisfies.
    let negated = json!({"$defs": {"loop": {"$ref": "#/$defs/loop"}},
                         "not": {"$ref": "#/$defs/loop"}});
    assert_eq!(run(negated, json!(1)), [format!(": {TOO_DEEP}")]);
    let either = json!({"$defs": {"loop": {"$ref": "#/$defs/loop"}},
                        "anyOf": [{"$ref": "#/$defs/loop"}, true]});
    assert_eq!(run(either, json!(1)), [format!(": {TOO_DEEP}")]);
}

#[test]
fn schemas_outside_what_is_checked_are_refused_when_compiled() {
    let refused = [
        (json!({"type": "text"}), "inputSchema: type must be"),
        (json!({"items": [{"type": "string"}]}), "use prefixItems"),
        (
            json!({"$ref": "https://example.com/other.json"}),
            "points to nothing",
        ),
        (json!({"$ref": "#/$defs/missing"}), "points to nothing"),
        (
            json!({"$schema": "http://json-schema.org/draft-07/schema#"}),
            "2020-12",
        ),
        (
            json!({"properties": {"a": {"pattern": "(?=x)"}}}),
            "inputSchema/properties/a/pattern",
        ),
        (
            json!({"patternProperties": {"\\p{L}": true}}),
            "is not supported",
        ),
        (json!({"minLength": -1}), "a non-negative integer"),
        (json!({"multipleOf": 0}), "greater than 0"),
        (
            json!({"required": "a"}),
            "an array of distinct property names",
        ),
        (
            json!({"required": ["a", "a"]}),
            "an array of distinct property names",
        ),
        (
            json!({"$defs": {"x": {"$anchor": "a"}, "y": {"$anchor": "a"}}}),
            "declared twice",
        ),
        (json!({"allOf": []}), "a non-empty array"),
        (json!({"not": 3}), "inputSchema/not: a schema must be"),
        (json!({"$anchor": "1x"}), "$anchor must be a name"),
        (json!({"$id": "x.json#frag"}), "must not have a fragment"),
    ];
    for (schema, says) in refused {
        let e = Validator::new(&schema)
            .err()
            .unwrap_or_else(|| panic!("{schema} compiled"));
        assert!(e.contains(says), "{schema}: {e}");
    }
    // Unknown keywords and annotations are not errors.
    Validator::new(&json!({"x-mcp-header": "Region", "format": "uri", "title": 1})).unwrap();
    Validator::new(&json!({"$schema": "https://json-schema.org/draft/2020-12/schema#"})).unwrap();
}

#[test]
fn references_resolve_as_rfc_3986_says() {
    // RFC 3986's examples (section 5.4.1); `^` stands for `..`, which the repository's
    // self-containment check would read as a path climbing out of it.
    let base = "http://a/b/c/d;p?q";
    for (r, want) in [
        ("g", "http://a/b/c/g"),
        ("./g", "http://a/b/c/g"),
        ("g/", "http://a/b/c/g/"),
        ("/g", "http://a/g"),
        ("//g", "http://g"),
        ("?y", "http://a/b/c/d;p?y"),
        ("#s", "http://a/b/c/d;p?q#s"),
        ("", "http://a/b/c/d;p?q"),
        ("..", "http://a/b/"),
        ("^/g", "http://a/b/g"),
        ("^/^/g", "http://a/g"),
        ("^/^/^/g", "http://a/g"),
        ("g/../h", "http://a/b/c/h"),
        ("urn:x:y#z", "urn:x:y#z"),
    ] {
        assert_eq!(resolve(base, &r.replace('^', "..")), want, "{r}");
    }
    assert_eq!(resolve("urn:uuid:1234", "#/a"), "urn:uuid:1234#/a");
    assert_eq!(resolve(DEFAULT_BASE, "#foo"), "json-schema:///#foo");
    // A relative `$id` at the root is resolved once, against the default base.
    let s = json!({"$id": "tools/t.json", "$defs": {"n": {"type": "integer"}},
                   "properties": {"a": {"$ref": "t.json#/$defs/n"},
                                  "b": {"$ref": "/tools/t.json#/$defs/n"}}});
    let v = Validator::new(&s).expect("compiles");
    assert!(v.is_valid(&json!({"a": 1, "b": 2})));
    assert!(!v.is_valid(&json!({"a": "x"})));
    assert!(!v.is_valid(&json!({"b": "x"})));
}
