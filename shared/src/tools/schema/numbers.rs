//! Numbers: the bounds, `multipleOf`, `type: integer`, and JSON equality (numbers compared
//! by value) for `enum`, `const` and `uniqueItems`.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt::Write as _;

use serde_json::{Number, Value};

use super::keywords::Keywords;
use super::{Cx, Path, Validator};

/// Arrays longer than this are checked for `uniqueItems` by hashing instead of pairwise.
pub(super) const PAIRWISE_UNIQUE: usize = 32;

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

pub(super) fn is_integer(n: &Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// A JSON number, exactly: integers as `i128`, the rest as `f64`.
pub(super) enum Num {
    Int(i128),
    Float(f64),
}

pub(super) fn num(n: &Number) -> Num {
    if let Some(u) = n.as_u64() {
        Num::Int(i128::from(u))
    } else if let Some(i) = n.as_i64() {
        Num::Int(i128::from(i))
    } else {
        Num::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Numbers compared by value: `1` and `1.0` are equal; a large integer is not rounded.
pub(super) fn num_cmp(a: &Number, b: &Number) -> Ordering {
    match (num(a), num(b)) {
        (Num::Int(x), Num::Int(y)) => x.cmp(&y),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Num::Int(x), Num::Float(y)) => int_float_cmp(x, y),
        (Num::Float(x), Num::Int(y)) => int_float_cmp(y, x).reverse(),
    }
}

pub(super) fn int_float_cmp(i: i128, f: f64) -> Ordering {
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
pub(super) fn is_multiple(n: &Number, m: &Number) -> bool {
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
pub(super) fn decimal(n: &Number) -> Option<(u128, i32)> {
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
pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
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

pub(super) fn all_unique(items: &[Value]) -> bool {
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
pub(super) fn canonical(v: &Value, out: &mut String) {
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
