//! JSON Schema 2020-12: the check of `tools/call` arguments against a tool's `inputSchema`.
//!
//! The whole 2020-12 applicator, validation and unevaluated vocabularies (`$ref`, `$defs`,
//! `$anchor`, `$id`, `$dynamicRef`/`$dynamicAnchor`, the composition and conditional keywords,
//! `unevaluatedProperties`/`unevaluatedItems` with their annotations), checked against the
//! official JSON Schema test suite (`shared/tests/json_schema_suite.rs`). What it leaves out,
//! on purpose:
//! - **references outside the schema**: a `$ref` must point into the tool's own schema (by
//!   pointer, anchor or an embedded `$id`); one that does not is an error when the schema is
//!   compiled, never a fetch at call time;
//! - **other dialects**: a `$schema` other than 2020-12's is refused at compile time (the
//!   meaning of `items`, `$ref` and `dependencies` differs between drafts);
//! - **`format` and `content*`**: annotations only, as 2020-12 has them by default;
//! - **`pattern` syntax beyond ECMA-262's linear-time core**: patterns are ECMA-262 (Unicode
//!   mode), as JSON Schema says, translated for regex-lite with ECMA's meaning (`\s` and `.`
//!   Unicode-aware, `\d`, `\w`, `\b` ASCII); look-around, back-references, `\p{…}` and any
//!   syntax ECMA-262 does not have (`[[:alpha:]]`, `(?i)`, `\A`) are refused at compile time.
//!   Matching takes time linear in the string's length (`docs/tool-arguments.md`).
//!
//! Messages name the place in the arguments (a JSON pointer) and the rule broken; they never
//! quote the argument values (the caller's, maybe large), only property names and the schema's
//! own values. Checking stops at the first error unless errors are being collected, and then at
//! the requested number.
//!
//! Files by subject: `compile` (a schema's form; its index of resources, anchors and
//! keywords), `keywords` (arrays, objects, sizes, `type`), `numbers` (bounds, `multipleOf`,
//! equality), `patterns` (`pattern`, `patternProperties`) with `classes` (character classes),
//! `references` (`$ref`, `$dynamicRef`, URIs); evaluation itself is here.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

use regex_lite::Regex;
use serde_json::Value;

use compile::{AddrHasher, addr};
use keywords::{Keywords, SizeOf, sizes, type_matches, type_names};
use numbers::json_eq;

/// The one dialect: 2020-12's meta-schema URI (with or without the empty fragment).
const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";
/// The base URI of a schema whose root has no `$id`.
const DEFAULT_BASE: &str = "json-schema:///";
/// Nested schema evaluations, at most. Each takes up to ~2.3 KB of stack in a release build
/// (~7 KB in a debug one), so 128 fit in a tokio worker's 2 MiB with room to spare; a `$ref`
/// loop that makes no progress through the arguments ends here with an error, not a stack
/// overflow. Enough for any non-recursive schema, and for 30-odd levels of arguments under a
/// recursive one (a tree's node and its children list: about four evaluations per level);
/// deeper arguments are refused, naming this limit.
const MAX_DEPTH: usize = 128;
const TOO_DEEP: &str = "nests too deeply for this schema (at most 128 nested evaluations)";

/// A compiled schema. Its nodes are addressed by where they live in the boxed copy of the
/// schema it owns, which never changes after compilation.
pub struct Validator {
    root: Box<Value>,
    root_base: String,
    /// What compiling found of each schema object, by its address.
    nodes: HashMap<usize, Node, BuildHasherDefault<AddrHasher>>,
    /// `$dynamicAnchor`s: `"<resource URI>#<name>"` -> where.
    dynamic_anchors: HashMap<String, Target>,
    regexes: HashMap<String, Regex>,
    /// Whether any schema has `unevaluatedProperties` or `unevaluatedItems`: only then are the
    /// evaluated properties and items collected.
    annotate: bool,
}

static UNCOMPILED: Node = Node {
    present: u64::MAX,
    id: None,
    reference: None,
    dynamic: None,
};

/// One schema object, compiled.
#[derive(Default)]
struct Node {
    /// The keywords it has, one bit each ([`keyword_bit`]).
    present: u64,
    /// The base URI its `$id` sets, if it has one.
    id: Option<String>,
    reference: Option<Target>,
    dynamic: Option<DynamicTarget>,
}

/// Where a reference lands: the JSON pointer's tokens from the root, and the base URI in force
/// there.
#[derive(Clone)]
struct Target {
    tokens: Vec<String>,
    base: String,
}

/// A `$dynamicRef`: its static target, and the anchor name to look for in the dynamic scope
/// when that target carries a `$dynamicAnchor` of the same name.
struct DynamicTarget {
    target: Target,
    name: Option<String>,
}

/// One broken rule: where in the instance (a JSON pointer, empty at the root) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A JSON pointer into the instance: `""` for the instance itself, `/items/0` for one item.
    pub path: String,
    /// The rule broken, without the instance's values: "is longer than 10 characters".
    pub message: String,
}

/// Records a broken rule at `$at` (its message built only if it is wanted) and notes the
/// schema as failed; returns `None` from the evaluating function once nothing more can be
/// learned.
macro_rules! fail {
    ($cx:ident, $ok:ident, $at:expr, $msg:expr) => {{
        *$ok = false;
        if !$cx.fail($at, || $msg) {
            return None;
        }
    }};
}

/// A subschema's outcome, its failure (whose reasons it recorded itself) noted as this
/// schema's; returns `None` from the evaluating function once nothing more can be learned.
macro_rules! check {
    ($cx:ident, $ok:ident, $outcome:expr) => {{
        let outcome = $outcome;
        if outcome.is_none() {
            *$ok = false;
            if $cx.done() {
                return None;
            }
        }
        outcome
    }};
}

mod classes;
mod compile;
mod keywords;
mod numbers;
mod patterns;
mod references;
#[cfg(test)]
mod tests;

impl Validator {
    /// Whether `instance` satisfies the schema. Arguments that take the evaluation past
    /// [`MAX_DEPTH`] anywhere (even under `not` or one branch of an `anyOf`) do not: a check
    /// that could not be finished does not pass.
    pub fn is_valid(&self, instance: &Value) -> bool {
        let mut cx = Cx::new(0);
        self.eval(&self.root, &self.root_base, instance, &Path::Root, &mut cx)
            .is_some()
            && cx.too_deep.is_none()
    }

    /// Up to `limit` (at least one) of the rules `instance` breaks; empty when it satisfies the
    /// schema.
    pub fn errors(&self, instance: &Value, limit: usize) -> Vec<Failure> {
        let mut cx = Cx::new(limit.max(1));
        let valid = self
            .eval(&self.root, &self.root_base, instance, &Path::Root, &mut cx)
            .is_some()
            && cx.too_deep.is_none();
        if let Some(path) = cx.too_deep.take()
            && !cx.failures.iter().any(|f| f.message == TOO_DEEP)
        {
            cx.failures.truncate(limit.max(1) - 1);
            cx.failures.insert(
                0,
                Failure {
                    path,
                    message: TOO_DEEP.into(),
                },
            );
        }
        if !valid && cx.failures.is_empty() {
            // Every rule broken was inside a subschema that reports as a whole; cannot happen
            // at the root, but an invalid verdict never goes without a reason.
            cx.failures.push(Failure {
                path: String::new(),
                message: "does not match the schema".into(),
            });
        }
        cx.failures
    }

    /// Evaluates `schema` against `instance`: the annotations if it holds, `None` if not (with
    /// the reasons recorded when `cx` collects them).
    fn eval<'v, 'i>(
        &'v self,
        schema: &'v Value,
        base: &'v str,
        instance: &'i Value,
        at: &Path<'_>,
        cx: &mut Cx<'v>,
    ) -> Option<Ann<'i>> {
        let obj = match schema {
            Value::Object(obj) => obj,
            Value::Bool(false) => {
                cx.fail(at, || "is not allowed here".into());
                return None;
            }
            _ => return Some(Ann::default()),
        };
        if cx.depth >= MAX_DEPTH {
            // Reported even from a subschema whose failures are summed up (`anyOf`, ...):
            // the reason is the limit, not the arguments' shape.
            cx.too_deep.get_or_insert_with(|| at.render());
            cx.fail(at, || TOO_DEEP.into());
            return None;
        }
        // Every schema object a check reaches was compiled; were one not, it would be checked
        // for every keyword (a `pattern` there, never compiled, would fail: closed, not open).
        let node = self.nodes.get(&addr(schema)).unwrap_or(&UNCOMPILED);
        cx.depth += 1;
        if let Some(b) = &node.id {
            cx.scope.push(b);
        }
        let base = node.id.as_deref().unwrap_or(base);
        let kw = Keywords {
            obj,
            present: node.present,
        };
        let out = self.eval_object(node, kw, base, instance, at, cx);
        if node.id.is_some() {
            cx.scope.pop();
        }
        cx.depth -= 1;
        out
    }

    fn eval_object<'v, 'i>(
        &'v self,
        node: &'v Node,
        kw: Keywords<'v>,
        base: &'v str,
        instance: &'i Value,
        at: &Path<'_>,
        cx: &mut Cx<'v>,
    ) -> Option<Ann<'i>> {
        let mut ann = Ann::default();
        let ok = &mut true;
        if let Some(t) = &node.reference {
            let target = self.node(&t.tokens);
            if let Some(a) = check!(cx, ok, self.follow(target, &t.base, base, instance, at, cx)) {
                ann.merge(a);
            }
        }
        if let Some(d) = &node.dynamic {
            let (tokens, tbase) = self.dynamic_target(d, cx);
            let target = self.node(tokens);
            if let Some(a) = check!(cx, ok, self.follow(target, tbase, base, instance, at, cx)) {
                ann.merge(a);
            }
        }

        if let Some(t) = kw.get("type")
            && !type_matches(t, instance)
        {
            fail!(cx, ok, at, format!("is not of type {}", type_names(t)));
        }
        if let Some(Value::Array(values)) = kw.get("enum")
            && !values.iter().any(|v| json_eq(v, instance))
        {
            fail!(cx, ok, at, format!("is not one of {}", short_list(values)));
        }
        if let Some(c) = kw.get("const")
            && !json_eq(c, instance)
        {
            fail!(cx, ok, at, format!("is not {}", short(c)));
        }

        match instance {
            Value::Number(n) => self.eval_number(kw, n, at, cx, ok)?,
            Value::String(s) => self.eval_string(kw, s, at, cx, ok)?,
            _ => {}
        }

        self.eval_in_place(kw, base, instance, at, cx, &mut ann, ok)?;

        match instance {
            Value::Array(items) => {
                self.eval_array(kw, base, items, at, cx, &mut ann, ok)?;
            }
            Value::Object(props) => {
                self.eval_props(kw, base, instance, props, at, cx, &mut ann, ok)?;
            }
            _ => {}
        }
        (*ok).then_some(ann)
    }

    /// The in-place applicators (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`): their
    /// annotations count as this schema's.
    #[allow(clippy::too_many_arguments)]
    fn eval_in_place<'v, 'i>(
        &'v self,
        kw: Keywords<'v>,
        base: &'v str,
        instance: &'i Value,
        at: &Path<'_>,
        cx: &mut Cx<'v>,
        ann: &mut Ann<'i>,
        ok: &mut bool,
    ) -> Option<()> {
        if let Some(Value::Array(subs)) = kw.get("allOf") {
            for sub in subs {
                if let Some(a) = check!(cx, ok, self.eval(sub, base, instance, at, cx)) {
                    ann.merge(a);
                }
            }
        }
        if let Some(Value::Array(subs)) = kw.get("anyOf") {
            let mut any = false;
            for sub in subs {
                if let Some(a) = self.quietly(sub, base, instance, at, cx) {
                    any = true;
                    ann.merge(a);
                }
            }
            if !any {
                fail!(cx, ok, at, "does not match any of the anyOf schemas".into());
            }
        }
        if let Some(Value::Array(subs)) = kw.get("oneOf") {
            let mut matched = 0;
            let mut kept = None;
            for sub in subs {
                if let Some(a) = self.quietly(sub, base, instance, at, cx) {
                    matched += 1;
                    kept = Some(a);
                }
            }
            match (matched, kept) {
                (1, Some(a)) => ann.merge(a),
                (0, _) => fail!(cx, ok, at, "does not match any of the oneOf schemas".into()),
                _ => fail!(
                    cx,
                    ok,
                    at,
                    format!("matches {matched} of the oneOf schemas, not one")
                ),
            }
        }
        if let Some(sub) = kw.get("not")
            && self.quietly(sub, base, instance, at, cx).is_some()
        {
            fail!(cx, ok, at, "matches the schema in \"not\"".into());
        }
        if let Some(cond) = kw.get("if") {
            match self.quietly(cond, base, instance, at, cx) {
                Some(a) => {
                    ann.merge(a);
                    if let Some(then) = kw.get("then")
                        && let Some(a) = check!(cx, ok, self.eval(then, base, instance, at, cx))
                    {
                        ann.merge(a);
                    }
                }
                None => {
                    if let Some(otherwise) = kw.get("else")
                        && let Some(a) =
                            check!(cx, ok, self.eval(otherwise, base, instance, at, cx))
                    {
                        ann.merge(a);
                    }
                }
            }
        }
        Some(())
    }

    /// A string's length and `pattern`.
    fn eval_string(
        &self,
        kw: Keywords<'_>,
        s: &str,
        at: &Path<'_>,
        cx: &mut Cx<'_>,
        ok: &mut bool,
    ) -> Option<()> {
        if kw.has("minLength") || kw.has("maxLength") {
            let chars = s.chars().count();
            sizes(kw, SizeOf::STRING, chars, at, cx, ok)?;
        }
        if let Some(Value::String(p)) = kw.get("pattern")
            && !self.regexes.get(p).is_some_and(|re| re.is_match(s))
        {
            fail!(
                cx,
                ok,
                at,
                format!("does not match the pattern {}", short_str(p))
            );
        }
        Some(())
    }

    /// Evaluates a subschema whose failures are summed up by its parent (`anyOf`, `oneOf`,
    /// `not`, `if`, `contains`, `propertyNames`): none of its own reasons are recorded.
    fn quietly<'v, 'i>(
        &'v self,
        schema: &'v Value,
        base: &'v str,
        instance: &'i Value,
        at: &Path<'_>,
        cx: &mut Cx<'v>,
    ) -> Option<Ann<'i>> {
        let limit = std::mem::replace(&mut cx.limit, 0);
        let out = self.eval(schema, base, instance, at, cx);
        cx.limit = limit;
        out
    }
}

/// Evaluation state: the dynamic scope, the depth, and the failures collected so far.
struct Cx<'v> {
    scope: Vec<&'v str>,
    depth: usize,
    /// How many failures are wanted; 0 = none (only the verdict).
    limit: usize,
    /// Where evaluation hit [`MAX_DEPTH`], if it did.
    too_deep: Option<String>,
    failures: Vec<Failure>,
}

impl<'v> Cx<'v> {
    fn new(limit: usize) -> Self {
        Self {
            scope: Vec::new(),
            depth: 0,
            limit,
            too_deep: None,
            failures: Vec::new(),
        }
    }

    /// Records a failure if more are wanted; whether evaluation should go on.
    fn fail(&mut self, at: &Path<'_>, message: impl FnOnce() -> String) -> bool {
        if self.failures.len() < self.limit {
            self.failures.push(Failure {
                path: at.render(),
                message: message(),
            });
        }
        !self.done()
    }

    /// Whether nothing more can be learned: the verdict is known and no more failures are
    /// wanted.
    fn done(&self) -> bool {
        self.failures.len() >= self.limit
    }
}

/// Where in the instance: a chain of keys and indices, rendered only for a failure.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn render(&self) -> String {
        let mut segments = Vec::new();
        let mut p = self;
        loop {
            match p {
                Path::Root => break,
                Path::Key(up, k) => {
                    segments.push(escape(k));
                    p = up;
                }
                Path::Index(up, i) => {
                    segments.push(i.to_string());
                    p = up;
                }
            }
        }
        segments.iter().rev().fold(String::new(), |mut s, seg| {
            s.push('/');
            s.push_str(seg);
            s
        })
    }
}

/// What a schema that holds evaluated of an array or an object (for `unevaluated*`).
#[derive(Default)]
struct Ann<'i> {
    all_props: bool,
    /// Made at the first insertion (an empty `HashSet` still seeds its hasher).
    props: Option<HashSet<&'i str>>,
    all_items: bool,
    prefix: usize,
    items: Option<HashSet<usize>>,
}

impl<'i> Ann<'i> {
    fn merge(&mut self, other: Ann<'i>) {
        self.all_props |= other.all_props;
        if let Some(p) = other.props {
            self.props.get_or_insert_with(HashSet::new).extend(p);
        }
        self.all_items |= other.all_items;
        self.prefix = self.prefix.max(other.prefix);
        if let Some(i) = other.items {
            self.items.get_or_insert_with(HashSet::new).extend(i);
        }
    }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// A schema value for a message, cut short.
fn short(v: &Value) -> String {
    crate::protocol::truncate(&v.to_string(), 80)
}

fn short_str(s: &str) -> String {
    short(&Value::String(s.to_owned()))
}

fn short_list(values: &[Value]) -> String {
    let all = values
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    crate::protocol::truncate(&all, 120)
}
