//! The keywords of arrays and objects, the size keywords, `type`, and how evaluation finds
//! the keywords a schema object has.

use std::cmp::Ordering;
use std::collections::HashSet;

use regex_lite::Regex;
use serde_json::{Map, Number, Value};

use super::numbers::{all_unique, is_integer, is_multiple, num_cmp};
use super::{Ann, Cx, Path, Validator, short, short_str};

impl Validator {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn eval_array<'v, 'i>(
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
    pub(super) fn eval_props<'v, 'i>(
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
        required_present(kw, props, at, cx, ok)?;
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
pub(super) struct SizeOf {
    pub(super) keywords: [&'static str; 2],
    pub(super) says: [&'static str; 2],
    pub(super) unit: &'static str,
}

impl SizeOf {
    pub(super) const STRING: Self = Self {
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
pub(super) fn sizes(
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

/// A schema object with the keywords it has (found when it was compiled): a keyword it lacks
/// costs the test of a bit, not a lookup in its map.
#[derive(Clone, Copy)]
pub(super) struct Keywords<'v> {
    pub(super) obj: &'v Map<String, Value>,
    pub(super) present: u64,
}

impl<'v> Keywords<'v> {
    #[inline(always)]
    pub(super) fn get(self, name: &str) -> Option<&'v Value> {
        let bit = keyword_bit(name);
        debug_assert!(bit != 0, "{name} is not a keyword the checker evaluates");
        if self.present & bit == 0 {
            None
        } else {
            self.obj.get(name)
        }
    }

    #[inline(always)]
    pub(super) fn has(self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// The bit of a keyword evaluation looks up (0 for any other name). Inlined with a literal
/// name, it folds to a constant.
#[inline(always)]
pub(super) fn keyword_bit(name: &str) -> u64 {
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

pub(super) fn count(kw: Keywords<'_>, keyword: &str) -> Option<usize> {
    kw.get(keyword).and_then(count_of)
}

pub(super) fn type_matches(t: &Value, instance: &Value) -> bool {
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

pub(super) fn type_names(t: &Value) -> String {
    match t {
        Value::Array(names) => names
            .iter()
            .map(|n| format!("\"{}\"", n.as_str().unwrap_or("?")))
            .collect::<Vec<_>>()
            .join(" or "),
        other => short(other),
    }
}

/// A keyword's count (`minLength`, `maxItems`, …): a non-negative integer, written with a
/// fraction or not.
pub(super) fn count_of(v: &Value) -> Option<usize> {
    if let Some(u) = v.as_u64() {
        return usize::try_from(u).ok();
    }
    let f = v.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 1e15).then_some(f as usize)
}

impl Validator {
    pub(super) fn eval_number(
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
}

/// `required` and `dependentRequired`: the properties an object must have.
fn required_present(
    kw: Keywords<'_>,
    props: &Map<String, Value>,
    at: &Path<'_>,
    cx: &mut Cx<'_>,
    ok: &mut bool,
) -> Option<()> {
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
    Some(())
}
