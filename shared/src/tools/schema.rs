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
//! - **`pattern` syntax**: regular expressions are [`regex_lite`]'s: the ECMA-262 syntax
//!   schemas use (classes, groups, repetition, anchors; `\d`, `\w`, `\s` are ASCII, as in
//!   ECMA-262), without look-around, back-references or `\p{…}` classes. A pattern outside that
//!   is an error at compile time. Matching takes time linear in the argument's length.
//!
//! Messages name the place in the arguments (a JSON pointer) and the rule broken; they never
//! quote the argument values (the caller's, maybe large), only property names and the schema's
//! own values. Checking stops at the first error unless errors are being collected, and then at
//! the requested number.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};

use regex_lite::Regex;
use serde_json::{Map, Number, Value};

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
/// Arrays longer than this are checked for `uniqueItems` by hashing instead of pairwise.
const PAIRWISE_UNIQUE: usize = 32;

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

    /// The schema at a reference's target (resolved when compiled, so always there; were it
    /// not, `false`: the check fails rather than passes).
    fn node(&self, tokens: &[String]) -> &Value {
        let mut v: &Value = &self.root;
        for t in tokens {
            v = match v {
                Value::Object(m) => m.get(t),
                Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            }
            .unwrap_or(&Value::Bool(false));
        }
        v
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
            Value::String(s) => {
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
            }
            _ => {}
        }

        // In-place applicators: their annotations count as this schema's.
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

    /// Evaluates a reference's target, with its resource in the dynamic scope.
    fn follow<'v, 'i>(
        &'v self,
        target: &'v Value,
        target_base: &'v str,
        base: &str,
        instance: &'i Value,
        at: &Path<'_>,
        cx: &mut Cx<'v>,
    ) -> Option<Ann<'i>> {
        let entered = target_base != base;
        if entered {
            cx.scope.push(target_base);
        }
        let out = self.eval(target, target_base, instance, at, cx);
        if entered {
            cx.scope.pop();
        }
        out
    }

    /// The schema a `$dynamicRef` lands on: the outermost resource in the dynamic scope with a
    /// matching `$dynamicAnchor`, when the static target carries one; else the static target.
    fn dynamic_target<'v>(&'v self, d: &'v DynamicTarget, cx: &Cx<'v>) -> (&'v [String], &'v str) {
        if let Some(name) = &d.name {
            for resource in std::iter::once(&self.root_base[..]).chain(cx.scope.iter().copied()) {
                if let Some(t) = self.dynamic_anchors.get(&format!("{resource}#{name}")) {
                    return (&t.tokens, &t.base);
                }
            }
        }
        (&d.target.tokens, &d.target.base)
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

    fn eval_number(
        &self,
        kw: Keywords<'_>,
        n: &Number,
        at: &Path<'_>,
        cx: &mut Cx<'_>,
        ok: &mut bool,
    ) -> Option<()> {
        // Each bound: the comparison of the number with it that breaks it, and what it says.
        let bounds = [
            ("minimum", [Ordering::Less, Ordering::Less], "is less than"),
            (
                "exclusiveMinimum",
                [Ordering::Less, Ordering::Equal],
                "is not greater than",
            ),
            (
                "maximum",
                [Ordering::Greater, Ordering::Greater],
                "is greater than",
            ),
            (
                "exclusiveMaximum",
                [Ordering::Greater, Ordering::Equal],
                "is not less than",
            ),
        ];
        for (keyword, breaks, says) in bounds {
            if let Some(Value::Number(limit)) = kw.get(keyword)
                && breaks.contains(&num_cmp(n, limit))
            {
                fail!(cx, ok, at, format!("{says} {limit}"));
            }
        }
        if let Some(Value::Number(m)) = kw.get("multipleOf")
            && !is_multiple(n, m)
        {
            fail!(cx, ok, at, format!("is not a multiple of {m}"));
        }
        Some(())
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_array<'v, 'i>(
        &'v self,
        kw: Keywords<'v>,
        base: &'v str,
        items: &'i [Value],
        at: &Path<'_>,
        cx: &mut Cx<'v>,
        ann: &mut Ann<'i>,
        ok: &mut bool,
    ) -> Option<()> {
        sizes(kw, SizeOf::ARRAY, items.len(), at, cx, ok)?;
        if kw.get("uniqueItems") == Some(&Value::Bool(true)) && !all_unique(items) {
            fail!(cx, ok, at, "has items that are not unique".into());
        }
        let mut prefix = 0;
        if let Some(Value::Array(subs)) = kw.get("prefixItems") {
            for (i, (sub, item)) in subs.iter().zip(items).enumerate() {
                check!(cx, ok, self.eval(sub, base, item, &Path::Index(at, i), cx));
            }
            prefix = subs.len().min(items.len());
            ann.prefix = ann.prefix.max(prefix);
        }
        if let Some(sub) = kw.get("items") {
            for (i, item) in items.iter().enumerate().skip(prefix) {
                check!(cx, ok, self.eval(sub, base, item, &Path::Index(at, i), cx));
            }
            ann.all_items = true;
        }
        if let Some(sub) = kw.get("contains") {
            let mut found = 0;
            for (i, item) in items.iter().enumerate() {
                if self
                    .quietly(sub, base, item, &Path::Index(at, i), cx)
                    .is_some()
                {
                    found += 1;
                    if self.annotate {
                        ann.items.get_or_insert_with(HashSet::new).insert(i);
                    }
                }
            }
            let min = count(kw, "minContains").unwrap_or(1);
            if found < min {
                fail!(
                    cx,
                    ok,
                    at,
                    if min == 1 {
                        "has no item matching \"contains\"".into()
                    } else {
                        format!("has fewer than {min} items matching \"contains\"")
                    }
                );
            }
            if let Some(max) = count(kw, "maxContains")
                && found > max
            {
                fail!(
                    cx,
                    ok,
                    at,
                    format!("has more than {max} items matching \"contains\"")
                );
            }
        }
        if let Some(sub) = kw.get("unevaluatedItems") {
            if !ann.all_items {
                for (i, item) in items.iter().enumerate().skip(ann.prefix) {
                    if !ann.items.as_ref().is_some_and(|s| s.contains(&i)) {
                        check!(cx, ok, self.eval(sub, base, item, &Path::Index(at, i), cx));
                    }
                }
            }
            ann.all_items = true;
        }
        Some(())
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_props<'v, 'i>(
        &'v self,
        kw: Keywords<'v>,
        base: &'v str,
        instance: &'i Value,
        props: &'i Map<String, Value>,
        at: &Path<'_>,
        cx: &mut Cx<'v>,
        ann: &mut Ann<'i>,
        ok: &mut bool,
    ) -> Option<()> {
        sizes(kw, SizeOf::OBJECT, props.len(), at, cx, ok)?;
        if let Some(Value::Array(required)) = kw.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !props.contains_key(name) {
                    fail!(
                        cx,
                        ok,
                        at,
                        format!("lacks the required property {}", short_str(name))
                    );
                }
            }
        }
        if let Some(Value::Object(deps)) = kw.get("dependentRequired") {
            for (name, needed) in deps {
                if !props.contains_key(name) {
                    continue;
                }
                for other in needed
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    if !props.contains_key(other) {
                        fail!(
                            cx,
                            ok,
                            at,
                            format!(
                                "lacks the property {}, required with {}",
                                short_str(other),
                                short_str(name)
                            )
                        );
                    }
                }
            }
        }
        if let Some(Value::Object(deps)) = kw.get("dependentSchemas") {
            for (name, sub) in deps {
                if props.contains_key(name)
                    && let Some(a) = check!(cx, ok, self.eval(sub, base, instance, at, cx))
                {
                    ann.merge(a);
                }
            }
        }
        let properties = match kw.get("properties") {
            Some(Value::Object(p)) => Some(p),
            _ => None,
        };
        if let Some(properties) = properties {
            for (name, sub) in properties {
                if let Some((key, value)) = props.get_key_value(name) {
                    check!(cx, ok, self.eval(sub, base, value, &Path::Key(at, key), cx));
                    if self.annotate {
                        ann.props.get_or_insert_with(HashSet::new).insert(key);
                    }
                }
            }
        }
        let patterns: Vec<(&Regex, &Value)> = match kw.get("patternProperties") {
            Some(Value::Object(p)) => p
                .iter()
                .filter_map(|(pattern, sub)| Some((self.regexes.get(pattern)?, sub)))
                .collect(),
            _ => Vec::new(),
        };
        for (re, sub) in &patterns {
            for (key, value) in props {
                if re.is_match(key) {
                    check!(cx, ok, self.eval(sub, base, value, &Path::Key(at, key), cx));
                    if self.annotate {
                        ann.props.get_or_insert_with(HashSet::new).insert(key);
                    }
                }
            }
        }
        if let Some(sub) = kw.get("additionalProperties") {
            for (key, value) in props {
                let declared = properties.is_some_and(|p| p.contains_key(key))
                    || patterns.iter().any(|(re, _)| re.is_match(key));
                if !declared {
                    self.other_property(sub, base, key, value, at, cx, ok)?;
                }
            }
            ann.all_props = true;
        }
        if let Some(sub) = kw.get("propertyNames") {
            for key in props.keys() {
                let name = Value::String(key.clone());
                if self.quietly(sub, base, &name, at, cx).is_none() {
                    fail!(
                        cx,
                        ok,
                        at,
                        format!(
                            "has the property name {}, which is not allowed",
                            short_str(key)
                        )
                    );
                }
            }
        }
        if let Some(sub) = kw.get("unevaluatedProperties") {
            if !ann.all_props {
                for (key, value) in props {
                    if ann.props.as_ref().is_some_and(|s| s.contains(key.as_str())) {
                        continue;
                    }
                    self.other_property(sub, base, key, value, at, cx, ok)?;
                }
            }
            ann.all_props = true;
        }
        Some(())
    }

    /// A property that `additionalProperties` or `unevaluatedProperties` governs: refused by
    /// name when its schema is `false` (one clear line, not "is not allowed here" at the
    /// property's path), else checked against it.
    #[allow(clippy::too_many_arguments)]
    fn other_property<'v, 'i>(
        &'v self,
        sub: &'v Value,
        base: &'v str,
        key: &'i str,
        value: &'i Value,
        at: &Path<'_>,
        cx: &mut Cx<'v>,
        ok: &mut bool,
    ) -> Option<()> {
        if sub == &Value::Bool(false) {
            fail!(
                cx,
                ok,
                at,
                format!("has the property {}, which is not allowed", short_str(key))
            );
        } else {
            check!(cx, ok, self.eval(sub, base, value, &Path::Key(at, key), cx));
        }
        Some(())
    }
}

/// The size keywords of one kind of instance, with how a failure reads.
struct SizeOf {
    keywords: [&'static str; 2],
    says: [&'static str; 2],
    unit: &'static str,
}

impl SizeOf {
    const STRING: Self = Self {
        keywords: ["minLength", "maxLength"],
        says: ["is shorter than", "is longer than"],
        unit: "characters",
    };
    const ARRAY: Self = Self {
        keywords: ["minItems", "maxItems"],
        says: ["has fewer than", "has more than"],
        unit: "items",
    };
    const OBJECT: Self = Self {
        keywords: ["minProperties", "maxProperties"],
        says: ["has fewer than", "has more than"],
        unit: "properties",
    };
}

/// Checks a size (`n` characters, items or properties) against its `min…` and `max…`.
fn sizes(
    kw: Keywords<'_>,
    of: SizeOf,
    n: usize,
    at: &Path<'_>,
    cx: &mut Cx<'_>,
    ok: &mut bool,
) -> Option<()> {
    let [min, max] = of.keywords.map(|k| count(kw, k));
    if let Some(min) = min
        && n < min
    {
        fail!(cx, ok, at, format!("{} {min} {}", of.says[0], of.unit));
    }
    if let Some(max) = max
        && n > max
    {
        fail!(cx, ok, at, format!("{} {max} {}", of.says[1], of.unit));
    }
    Some(())
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

/// A reference waiting for every resource and anchor to be known.
#[derive(Clone)]
struct Pending {
    node: usize,
    base: String,
    reference: String,
    dynamic: bool,
    at: String,
}

#[derive(Default)]
struct Compiler {
    nodes: HashMap<usize, Node, BuildHasherDefault<AddrHasher>>,
    annotate: bool,
    /// Resource URI -> JSON pointer of its root.
    resources: HashMap<String, String>,
    /// `"<resource URI>#<name>"` -> JSON pointer, for `$anchor` and `$dynamicAnchor`.
    anchors: HashMap<String, String>,
    dynamic_anchors: HashMap<String, (String, String)>,
    /// The base URI in force at each schema's JSON pointer.
    bases: HashMap<String, String>,
    pending: Vec<Pending>,
    regexes: HashMap<String, Regex>,
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
        let bad = |keyword: &str, what: &str| format!("{}: {keyword} must be {what}", place(at));
        if let Some(d) = obj.get("$schema") {
            let d = d.as_str().ok_or_else(|| bad("$schema", "a string"))?;
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
            let id = id.as_str().ok_or_else(|| bad("$id", "a string"))?;
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
        for keyword in ["$anchor", "$dynamicAnchor"] {
            if let Some(name) = obj.get(keyword) {
                let name = name.as_str().filter(|n| is_anchor_name(n)).ok_or_else(|| {
                    bad(
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
                        .insert(key.clone(), (at.to_owned(), base.clone()));
                }
                self.anchors.insert(key, at.to_owned());
            }
        }
        for (keyword, dynamic) in [("$ref", false), ("$dynamicRef", true)] {
            if let Some(r) = obj.get(keyword) {
                let r = r.as_str().ok_or_else(|| bad(keyword, "a string"))?;
                self.pending.push(Pending {
                    node: addr(schema),
                    base: base.clone(),
                    reference: r.to_owned(),
                    dynamic,
                    at: at.to_owned(),
                });
            }
        }
        for (keyword, value) in obj {
            let here = format!("{at}/{}", escape(keyword));
            match keyword.as_str() {
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
                "minLength" | "maxLength" | "minItems" | "maxItems" | "minContains"
                | "maxContains" | "minProperties" | "maxProperties"
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
                "properties" | "patternProperties" | "$defs" | "definitions"
                | "dependentSchemas" => {
                    let map = value.as_object().ok_or_else(|| bad(keyword, "an object"))?;
                    for (name, sub) in map {
                        let there = format!("{here}/{}", escape(name));
                        if keyword == "patternProperties" {
                            self.regex(name, &there)?;
                        }
                        self.walk(sub, &there, &base)?;
                    }
                }
                "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                    let subs = value
                        .as_array()
                        .filter(|a| !a.is_empty())
                        .ok_or_else(|| bad(keyword, "a non-empty array of schemas"))?;
                    for (i, sub) in subs.iter().enumerate() {
                        self.walk(sub, &format!("{here}/{i}"), &base)?;
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
                    self.walk(value, &here, &base)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn regex(&mut self, pattern: &str, at: &str) -> Result<(), String> {
        if !self.regexes.contains_key(pattern) {
            let re = Regex::new(pattern).map_err(|e| {
                let why = e.to_string();
                let why = why.lines().last().unwrap_or("").trim();
                format!(
                    "{}: the pattern \"{pattern}\" is not supported: {why}",
                    place(at)
                )
            })?;
            self.regexes.insert(pattern.to_owned(), re);
        }
        Ok(())
    }

    /// Where `reference`, read under `base`, lands in `root`.
    fn target(&self, base: &str, reference: &str, root: &Value) -> Option<(String, String)> {
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

/// A schema object with the keywords it has (found when it was compiled): a keyword it lacks
/// costs the test of a bit, not a lookup in its map.
#[derive(Clone, Copy)]
struct Keywords<'v> {
    obj: &'v Map<String, Value>,
    present: u64,
}

impl<'v> Keywords<'v> {
    #[inline(always)]
    fn get(self, name: &str) -> Option<&'v Value> {
        let bit = keyword_bit(name);
        debug_assert!(bit != 0, "{name} is not a keyword the checker evaluates");
        if self.present & bit == 0 {
            None
        } else {
            self.obj.get(name)
        }
    }

    #[inline(always)]
    fn has(self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// The bit of a keyword evaluation looks up (0 for any other name). Inlined with a literal
/// name, it folds to a constant.
#[inline(always)]
fn keyword_bit(name: &str) -> u64 {
    let i = match name {
        "type" => 0,
        "enum" => 1,
        "const" => 2,
        "minLength" => 3,
        "maxLength" => 4,
        "pattern" => 5,
        "allOf" => 6,
        "anyOf" => 7,
        "oneOf" => 8,
        "not" => 9,
        "if" => 10,
        "then" => 11,
        "else" => 12,
        "minimum" => 13,
        "exclusiveMinimum" => 14,
        "maximum" => 15,
        "exclusiveMaximum" => 16,
        "multipleOf" => 17,
        "minItems" => 18,
        "maxItems" => 19,
        "uniqueItems" => 20,
        "prefixItems" => 21,
        "items" => 22,
        "contains" => 23,
        "minContains" => 24,
        "maxContains" => 25,
        "unevaluatedItems" => 26,
        "minProperties" => 27,
        "maxProperties" => 28,
        "required" => 29,
        "dependentRequired" => 30,
        "dependentSchemas" => 31,
        "properties" => 32,
        "patternProperties" => 33,
        "additionalProperties" => 34,
        "propertyNames" => 35,
        "unevaluatedProperties" => 36,
        _ => return 0,
    };
    1 << i
}

/// The unescaped tokens of a JSON pointer (`/a~1b/0` -> `["a/b", "0"]`).
fn tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Hashes the address of a schema node: one multiplication (Fibonacci hashing). Addresses are
/// the server's own, never a caller's input, so nothing can be made to collide on purpose.
#[derive(Default)]
struct AddrHasher(u64);

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

fn addr(v: &Value) -> usize {
    std::ptr::from_ref(v) as usize
}

fn place(pointer: &str) -> String {
    if pointer.is_empty() {
        "inputSchema".into()
    } else {
        format!("inputSchema{pointer}")
    }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn is_type_name(t: &str) -> bool {
    matches!(
        t,
        "null" | "boolean" | "object" | "array" | "number" | "integer" | "string"
    )
}

/// An array of strings, none twice (the form of `required` and `dependentRequired`).
fn is_name_list(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().all(Value::is_string) && distinct(a))
}

fn distinct(values: &[Value]) -> bool {
    values
        .iter()
        .enumerate()
        .all(|(i, a)| values[i + 1..].iter().all(|b| a != b))
}

fn is_anchor_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn count_of(v: &Value) -> Option<usize> {
    if let Some(u) = v.as_u64() {
        return usize::try_from(u).ok();
    }
    let f = v.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 1e15).then_some(f as usize)
}

fn count(kw: Keywords<'_>, keyword: &str) -> Option<usize> {
    kw.get(keyword).and_then(count_of)
}

fn type_matches(t: &Value, instance: &Value) -> bool {
    let one = |name: &str| match name {
        "null" => instance.is_null(),
        "boolean" => instance.is_boolean(),
        "object" => instance.is_object(),
        "array" => instance.is_array(),
        "string" => instance.is_string(),
        "number" => instance.is_number(),
        "integer" => match instance {
            Value::Number(n) => is_integer(n),
            _ => false,
        },
        _ => false,
    };
    match t {
        Value::String(name) => one(name),
        Value::Array(names) => names.iter().filter_map(Value::as_str).any(one),
        _ => true,
    }
}

fn type_names(t: &Value) -> String {
    match t {
        Value::Array(names) => names
            .iter()
            .map(|n| format!("\"{}\"", n.as_str().unwrap_or("?")))
            .collect::<Vec<_>>()
            .join(" or "),
        other => short(other),
    }
}

fn is_integer(n: &Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// A JSON number, exactly: integers as `i128`, the rest as `f64`.
enum Num {
    Int(i128),
    Float(f64),
}

fn num(n: &Number) -> Num {
    if let Some(u) = n.as_u64() {
        Num::Int(i128::from(u))
    } else if let Some(i) = n.as_i64() {
        Num::Int(i128::from(i))
    } else {
        Num::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Numbers compared by value: `1` and `1.0` are equal; a large integer is not rounded.
fn num_cmp(a: &Number, b: &Number) -> Ordering {
    match (num(a), num(b)) {
        (Num::Int(x), Num::Int(y)) => x.cmp(&y),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Num::Int(x), Num::Float(y)) => int_float_cmp(x, y),
        (Num::Float(x), Num::Int(y)) => int_float_cmp(y, x).reverse(),
    }
}

fn int_float_cmp(i: i128, f: f64) -> Ordering {
    // i128 covers ±1.7e38; JSON integers here are at most 64-bit.
    if f >= 1.0e38 {
        return Ordering::Less;
    }
    if f <= -1.0e38 {
        return Ordering::Greater;
    }
    let floor = f.floor();
    match i.cmp(&(floor as i128)) {
        Ordering::Equal if f > floor => Ordering::Less,
        other => other,
    }
}

/// `n` is a multiple of `m`: exactly, on their decimal forms, when those fit in 128 bits
/// (`0.0075` is a multiple of `0.0001`); else by floating-point division.
fn is_multiple(n: &Number, m: &Number) -> bool {
    if let (Some((a, ea)), Some((b, eb))) = (decimal(n), decimal(m)) {
        let e = ea.min(eb);
        let scale = |digits: u128, exp: i32| {
            10u128
                .checked_pow(u32::try_from(exp - e).ok()?)
                .and_then(|p| digits.checked_mul(p))
        };
        if let (Some(a), Some(b)) = (scale(a, ea), scale(b, eb)) {
            return b != 0 && a % b == 0;
        }
    }
    let (Some(x), Some(y)) = (n.as_f64(), m.as_f64()) else {
        return false;
    };
    let q = x / y;
    q.is_finite() && q.fract() == 0.0
}

/// The magnitude of a number as decimal digits and a power of ten.
fn decimal(n: &Number) -> Option<(u128, i32)> {
    let text = n.to_string();
    let text = text.trim_start_matches('-');
    let (mantissa, exp) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let frac = frac.trim_end_matches('0');
    let digits = format!("{whole}{frac}");
    let digits: u128 = digits.parse().ok()?;
    Some((digits, exp - i32::try_from(frac.len()).ok()?))
}

/// JSON equality with numbers compared by value.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => num_cmp(x, y) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn all_unique(items: &[Value]) -> bool {
    if items.len() <= PAIRWISE_UNIQUE {
        return items
            .iter()
            .enumerate()
            .all(|(i, a)| items[i + 1..].iter().all(|b| !json_eq(a, b)));
    }
    let mut seen = HashSet::with_capacity(items.len());
    items.iter().all(|item| {
        let mut key = String::new();
        canonical(item, &mut key);
        seen.insert(key)
    })
}

/// A text equal for two values exactly when [`json_eq`] holds: object keys sorted, integral
/// numbers written as integers.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Number(n) => match num(n) {
            Num::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Num::Float(f) if f.fract() == 0.0 && f.abs() < 1.0e38 => {
                let _ = write!(out, "{}", f as i128);
            }
            Num::Float(f) => {
                let _ = write!(out, "{f:e}");
            }
        },
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for k in keys {
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
                out.push(',');
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
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

/// RFC 3986 reference resolution (section 5.2), on the URIs schemas use.
fn resolve(base: &str, reference: &str) -> String {
    let r = Parts::of(reference);
    if r.scheme.is_some() {
        return r.with_path(&remove_dots(r.path));
    }
    let b = Parts::of(base);
    let mut out = Parts {
        scheme: b.scheme,
        authority: b.authority,
        path: b.path,
        query: b.query,
        fragment: r.fragment,
    };
    let path;
    if r.authority.is_some() {
        out.authority = r.authority;
        path = remove_dots(r.path);
        out.query = r.query;
    } else if r.path.is_empty() {
        path = b.path.to_owned();
        if r.query.is_some() {
            out.query = r.query;
        }
    } else {
        path = if r.path.starts_with('/') {
            remove_dots(r.path)
        } else if b.authority.is_some() && b.path.is_empty() {
            remove_dots(&format!("/{}", r.path))
        } else {
            let dir = b.path.rfind('/').map_or("", |i| &b.path[..=i]);
            remove_dots(&format!("{dir}{}", r.path))
        };
        out.query = r.query;
    }
    out.with_path(&path)
}

struct Parts<'a> {
    scheme: Option<&'a str>,
    authority: Option<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn of(s: &'a str) -> Self {
        let (s, fragment) = match s.split_once('#') {
            Some((a, f)) => (a, Some(f)),
            None => (s, None),
        };
        let (s, query) = match s.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (s, None),
        };
        let scheme_end = s.find(':').filter(|&i| {
            i > 0
                && s[..i].starts_with(|c: char| c.is_ascii_alphabetic())
                && s[..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        });
        let (scheme, rest) = match scheme_end {
            Some(i) => (Some(&s[..i]), &s[i + 1..]),
            None => (None, s),
        };
        let (authority, path) = match rest.strip_prefix("//") {
            Some(r) => {
                let end = r.find('/').unwrap_or(r.len());
                (Some(&r[..end]), &r[end..])
            }
            None => (None, rest),
        };
        Self {
            scheme,
            authority,
            path,
            query,
            fragment,
        }
    }

    fn with_path(&self, path: &str) -> String {
        let mut s = String::new();
        if let Some(scheme) = self.scheme {
            s.push_str(scheme);
            s.push(':');
        }
        if let Some(a) = self.authority {
            s.push_str("//");
            s.push_str(a);
        }
        s.push_str(path);
        if let Some(q) = self.query {
            s.push('?');
            s.push_str(q);
        }
        if let Some(f) = self.fragment {
            s.push('#');
            s.push_str(f);
        }
        s
    }
}

/// RFC 3986 section 5.2.4.
fn remove_dots(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let absolute = path.starts_with('/');
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len().saturating_sub(1);
    let mut trailing = false;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => trailing = i == last,
            ".." => {
                if out.len() > usize::from(absolute) {
                    out.pop();
                }
                trailing = i == last;
            }
            s => {
                out.push(s);
                trailing = false;
            }
        }
    }
    let mut joined = out.join("/");
    if trailing {
        joined.push('/');
    }
    if absolute && !joined.starts_with('/') {
        joined.insert(0, '/');
    }
    joined
}

fn strip_fragment(uri: &str) -> &str {
    uri.split_once('#').map_or(uri, |(u, _)| u)
}

fn fragment(uri: &str) -> Option<&str> {
    uri.split_once('#').map(|(_, f)| f)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
        Validator::new(&json!({"$schema": "https://json-schema.org/draft/2020-12/schema#"}))
            .unwrap();
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
}
