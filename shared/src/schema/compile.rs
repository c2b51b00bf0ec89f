//! Compiling a schema: its form checked, its resources, anchors, references and patterns
//! indexed, and each schema object's keywords noted.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use regex_lite::Regex;
use serde_json::{Map, Value};

use super::keywords::count_of;
use super::references::{fragment, percent_decode, resolve, strip_fragment, tokens};
use super::{
    DEFAULT_BASE, DIALECT, DynamicTarget, Node, Target, Validator, escape, keywords::keyword_bit,
};

impl Validator {
    /// Compiles `schema`, or says what is wrong with it and where.
    pub fn new(schema: &Value) -> Result<Self, String> {
        let root = Box::new(schema.clone());
        let mut c = Compiler::default();
        c.resources.insert(DEFAULT_BASE.to_owned(), String::new());
        c.walk(&root, "", DEFAULT_BASE)?;
        // The root's own `$id`, resolved once by the walk, if it has one.
        let root_base = c
            .bases
            .get("")
            .map_or(DEFAULT_BASE, String::as_str)
            .to_owned();
        // Resolving a reference may reach a schema the walk did not (one inside an unknown
        // keyword): it is walked then, and its own references join the queue.
        let mut next = 0;
        while let Some(pending) = c.pending.get(next).cloned() {
            next += 1;
            let (pointer, base) = c
                .target(&pending.base, &pending.reference, &root)
                .ok_or_else(|| {
                    format!(
                        "{}: {} \"{}\" points to nothing in this schema (references outside it \
                         are not fetched)",
                        place(&pending.at),
                        if pending.dynamic {
                            "$dynamicRef"
                        } else {
                            "$ref"
                        },
                        pending.reference
                    )
                })?;
            if !c.bases.contains_key(&pointer) {
                let target = root.pointer(&pointer).expect("resolved above");
                c.walk(target, &pointer, &base)?;
            }
            let target = Target {
                tokens: tokens(&pointer),
                base,
            };
            let node = c.nodes.entry(pending.node).or_default();
            if pending.dynamic {
                let resolved = resolve(&pending.base, &pending.reference);
                let name = fragment(&resolved)
                    .filter(|f| !f.is_empty() && !f.starts_with('/'))
                    .filter(|f| {
                        let key = format!("{}#{}", strip_fragment(&resolved), f);
                        c.dynamic_anchors.contains_key(&key)
                    })
                    .map(str::to_owned);
                node.dynamic = Some(DynamicTarget { target, name });
            } else {
                node.reference = Some(target);
            }
        }
        Ok(Self {
            nodes: c.nodes,
            dynamic_anchors: c
                .dynamic_anchors
                .into_iter()
                .map(|(k, (pointer, base))| {
                    let tokens = tokens(&pointer);
                    (k, Target { tokens, base })
                })
                .collect(),
            regexes: c.regexes,
            annotate: c.annotate,
            root_base,
            root,
        })
    }
}

/// A reference waiting for every resource and anchor to be known.
#[derive(Clone)]
pub(super) struct Pending {
    node: usize,
    base: String,
    reference: String,
    dynamic: bool,
    at: String,
}

#[derive(Default)]
pub(super) struct Compiler {
    pub(super) nodes: HashMap<usize, Node, BuildHasherDefault<AddrHasher>>,
    pub(super) annotate: bool,
    /// Resource URI -> JSON pointer of its root.
    pub(super) resources: HashMap<String, String>,
    /// `"<resource URI>#<name>"` -> JSON pointer, for `$anchor` and `$dynamicAnchor`.
    pub(super) anchors: HashMap<String, String>,
    pub(super) dynamic_anchors: HashMap<String, (String, String)>,
    /// The base URI in force at each schema's JSON pointer.
    pub(super) bases: HashMap<String, String>,
    pub(super) pending: Vec<Pending>,
    pub(super) regexes: HashMap<String, Regex>,
}

impl Compiler {
    /// Checks the form of `schema` (at JSON pointer `at`, under base URI `base`) and indexes
    /// its resources, anchors, references and patterns.
    fn walk(&mut self, schema: &Value, at: &str, base: &str) -> Result<(), String> {
        let obj = match schema {
            Value::Bool(_) => return Ok(()),
            Value::Object(obj) => obj,
            _ => {
                return Err(format!(
                    "{}: a schema must be an object or a boolean",
                    place(at)
                ));
            }
        };
        let base = self.identify(schema, obj, at, base)?;
        self.index_anchors(obj, at, &base)?;
        self.queue_references(schema, obj, at, &base)?;
        for (keyword, value) in obj {
            self.keyword(keyword, value, at, &base)?;
        }
        Ok(())
    }

    /// The dialect and `$id` of the schema at `at`: the base URI in force inside it, recorded
    /// with what keywords it has.
    fn identify(
        &mut self,
        schema: &Value,
        obj: &Map<String, Value>,
        at: &str,
        base: &str,
    ) -> Result<String, String> {
        if let Some(d) = obj.get("$schema") {
            let d = d.as_str().ok_or_else(|| bad(at, "$schema", "a string"))?;
            if d.trim_end_matches('#') != DIALECT {
                return Err(format!(
                    "{}: $schema \"{d}\" is not JSON Schema 2020-12, the one dialect checked",
                    place(at)
                ));
            }
        }
        let mut base = base.to_owned();
        let mut id_base = None;
        if let Some(id) = obj.get("$id") {
            let id = id.as_str().ok_or_else(|| bad(at, "$id", "a string"))?;
            let resolved = resolve(&base, id);
            if fragment(&resolved).is_some_and(|f| !f.is_empty()) {
                return Err(format!(
                    "{}: $id \"{id}\" must not have a fragment",
                    place(at)
                ));
            }
            base = strip_fragment(&resolved).to_owned();
            id_base = Some(base.clone());
            self.resources.insert(base.clone(), at.to_owned());
        }
        self.bases.insert(at.to_owned(), base.clone());
        let present = obj.keys().fold(0, |bits, k| bits | keyword_bit(k));
        self.annotate |=
            present & (keyword_bit("unevaluatedProperties") | keyword_bit("unevaluatedItems")) != 0;
        let node = self.nodes.entry(addr(schema)).or_default();
        node.present = present;
        node.id = id_base;
        Ok(base)
    }

    /// Records the `$anchor` and `$dynamicAnchor` of the schema at `at`.
    fn index_anchors(
        &mut self,
        obj: &Map<String, Value>,
        at: &str,
        base: &str,
    ) -> Result<(), String> {
        for keyword in ["$anchor", "$dynamicAnchor"] {
            if let Some(name) = obj.get(keyword) {
                let name = name.as_str().filter(|n| is_anchor_name(n)).ok_or_else(|| {
                    bad(
                        at,
                        keyword,
                        "a name (a letter or _, then letters, digits, -, _ or .)",
                    )
                })?;
                let key = format!("{base}#{name}");
                if self.anchors.get(&key).is_some_and(|p| p != at) {
                    return Err(format!(
                        "{}: the anchor \"{name}\" is declared twice in one resource",
                        place(at)
                    ));
                }
                if keyword == "$dynamicAnchor" {
                    self.dynamic_anchors
                        .insert(key.clone(), (at.to_owned(), base.to_owned()));
                }
                self.anchors.insert(key, at.to_owned());
            }
        }
        Ok(())
    }

    /// Queues the `$ref` and `$dynamicRef` of the schema at `at`, resolved once every
    /// resource and anchor is known.
    fn queue_references(
        &mut self,
        schema: &Value,
        obj: &Map<String, Value>,
        at: &str,
        base: &str,
    ) -> Result<(), String> {
        for (keyword, dynamic) in [("$ref", false), ("$dynamicRef", true)] {
            if let Some(r) = obj.get(keyword) {
                let r = r.as_str().ok_or_else(|| bad(at, keyword, "a string"))?;
                self.pending.push(Pending {
                    node: addr(schema),
                    base: base.to_owned(),
                    reference: r.to_owned(),
                    dynamic,
                    at: at.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Checks the form of one keyword of the schema at `at`, walking the schemas it holds.
    fn keyword(
        &mut self,
        keyword: &str,
        value: &Value,
        at: &str,
        base: &str,
    ) -> Result<(), String> {
        let here = format!("{at}/{}", escape(keyword));
        let bad = |keyword: &str, what: &str| bad(at, keyword, what);
        match keyword {
            "type" => {
                let ok = match value {
                    Value::String(t) => is_type_name(t),
                    Value::Array(ts) => {
                        !ts.is_empty()
                            && ts.iter().all(|t| t.as_str().is_some_and(is_type_name))
                            && distinct(ts)
                    }
                    _ => false,
                };
                if !ok {
                    return Err(bad("type", "a type name or an array of them"));
                }
            }
            "enum" if !value.is_array() => return Err(bad("enum", "an array")),
            "multipleOf" if !value.as_f64().is_some_and(|m| m > 0.0) => {
                return Err(bad("multipleOf", "a number greater than 0"));
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum"
                if !value.is_number() =>
            {
                return Err(bad(keyword, "a number"));
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minContains" | "maxContains"
            | "minProperties" | "maxProperties"
                if count_of(value).is_none() =>
            {
                return Err(bad(keyword, "a non-negative integer"));
            }
            "uniqueItems" if !value.is_boolean() => return Err(bad(keyword, "a boolean")),
            "pattern" => {
                let p = value.as_str().ok_or_else(|| bad("pattern", "a string"))?;
                self.regex(p, &here)?;
            }
            "required" if !is_name_list(value) => {
                return Err(bad("required", "an array of distinct property names"));
            }
            "dependentRequired"
                if !value
                    .as_object()
                    .is_some_and(|m| m.values().all(is_name_list)) =>
            {
                return Err(bad(
                    keyword,
                    "an object of arrays of distinct property names",
                ));
            }
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                let map = value.as_object().ok_or_else(|| bad(keyword, "an object"))?;
                for (name, sub) in map {
                    let there = format!("{here}/{}", escape(name));
                    if keyword == "patternProperties" {
                        self.regex(name, &there)?;
                    }
                    self.walk(sub, &there, base)?;
                }
            }
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                let subs = value
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| bad(keyword, "a non-empty array of schemas"))?;
                for (i, sub) in subs.iter().enumerate() {
                    self.walk(sub, &format!("{here}/{i}"), base)?;
                }
            }
            "items" if value.is_array() => {
                return Err(format!(
                    "{}: items must be a schema (an array of schemas is the pre-2020-12 \
                     form: use prefixItems)",
                    place(at)
                ));
            }
            "additionalProperties"
            | "propertyNames"
            | "items"
            | "contains"
            | "not"
            | "if"
            | "then"
            | "else"
            | "unevaluatedItems"
            | "unevaluatedProperties" => {
                self.walk(value, &here, base)?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// `AT: KEYWORD must be WHAT`: a keyword of the wrong form.
fn bad(at: &str, keyword: &str, what: &str) -> String {
    format!("{}: {keyword} must be {what}", place(at))
}

/// Hashes the address of a schema node: one multiplication (Fibonacci hashing). Addresses are
/// the server's own, never a caller's input, so nothing can be made to collide on purpose.
#[derive(Default)]
pub(super) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(super) fn addr(v: &Value) -> usize {
    std::ptr::from_ref(v) as usize
}

pub(super) fn place(pointer: &str) -> String {
    if pointer.is_empty() {
        "inputSchema".into()
    } else {
        format!("inputSchema{pointer}")
    }
}

pub(super) fn is_type_name(t: &str) -> bool {
    matches!(
        t,
        "null" | "boolean" | "object" | "array" | "number" | "integer" | "string"
    )
}

/// An array of strings, none twice (the form of `required` and `dependentRequired`).
pub(super) fn is_name_list(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().all(Value::is_string) && distinct(a))
}

pub(super) fn distinct(values: &[Value]) -> bool {
    values
        .iter()
        .enumerate()
        .all(|(i, a)| values[i + 1..].iter().all(|b| a != b))
}

pub(super) fn is_anchor_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Compiler {
    /// Where `reference`, read under `base`, lands in `root`.
    pub(super) fn target(
        &self,
        base: &str,
        reference: &str,
        root: &Value,
    ) -> Option<(String, String)> {
        let resolved = resolve(base, reference);
        let resource = strip_fragment(&resolved);
        let start = self.resources.get(resource)?;
        let pointer = match fragment(&resolved) {
            None | Some("") => start.clone(),
            Some(f) if f.starts_with('/') => format!("{start}{}", percent_decode(f)?),
            Some(name) => self.anchors.get(&format!("{resource}#{name}"))?.clone(),
        };
        root.pointer(&pointer)?;
        let base = self.base_at(&pointer).unwrap_or(resource).to_owned();
        Some((pointer, base))
    }

    /// The base URI in force at a JSON pointer: that of the nearest indexed schema at or above
    /// it.
    fn base_at(&self, pointer: &str) -> Option<&str> {
        let mut p = pointer;
        loop {
            if let Some(b) = self.bases.get(p) {
                return Some(b);
            }
            p = &p[..p.rfind('/')?];
        }
    }
}
