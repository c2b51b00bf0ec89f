//! Numbers: the bounds, `multipleOf`, `type: integer`, and JSON equality (numbers compared
//! by value) for `enum`, `const` and `uniqueItems`.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt::Write as _;

use serde_json::{Number, Value};

/// Arrays longer than this are checked for `uniqueItems` by hashing instead of pairwise.
pub(super) const PAIRWISE_UNIQUE: usize = 32;

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

/// `n` is a multiple of `m` (greater than 0, as compiling checked), decided exactly, never by
/// floating-point division: when the numbers as written divide, or the doubles that hold them
/// do. "As written" is the shortest decimal that reads back as the same double (what serde_json
/// prints, and what a client sent unless it wrote more digits than a double keeps): `0.0075`
/// is a multiple of `0.0001`, though their doubles are not. The doubles' exact values answer
/// where rounding to the shortest decimal lost digits: `2^70` is a multiple of `2^69`. The
/// rule, with examples: `docs/tool-arguments.md`.
pub(super) fn is_multiple(n: &Number, m: &Number) -> bool {
    let (Some(x), Some(y)) = (Binary::of(n), Binary::of(m)) else {
        return false;
    };
    x.divides_by(y) || Decimal::of(n).divides_by(Decimal::of(m))
}

/// A number's magnitude as `mantissa × 2^exp`, exactly, with the mantissa odd (or 0).
#[derive(Clone, Copy)]
struct Binary {
    mantissa: u64,
    exp: i32,
}

impl Binary {
    fn of(n: &Number) -> Option<Self> {
        let (mantissa, exp) = if let Some(u) = n.as_u64() {
            (u, 0)
        } else if let Some(i) = n.as_i64() {
            (i.unsigned_abs(), 0)
        } else {
            let f = n.as_f64().filter(|f| f.is_finite())?;
            let bits = f.to_bits();
            let fraction = bits & ((1 << 52) - 1);
            // The exponent field is 11 bits: no truncation.
            #[allow(clippy::cast_possible_truncation)]
            let field = ((bits >> 52) & 0x7FF) as i32;
            if field == 0 {
                (fraction, -1074)
            } else {
                (fraction | (1 << 52), field - 1075)
            }
        };
        let zeros = if mantissa == 0 {
            0
        } else {
            mantissa.trailing_zeros()
        };
        Some(Self {
            mantissa: mantissa >> zeros,
            exp: exp + zeros.cast_signed(),
        })
    }

    /// `self / by` is an integer: `(a / b) × 2^(p − q)` with `a`, `b` odd is one exactly when
    /// `b` divides `a` and `p ≥ q`.
    fn divides_by(self, by: Self) -> bool {
        self.mantissa == 0
            || (by.mantissa != 0 && self.mantissa.is_multiple_of(by.mantissa) && self.exp >= by.exp)
    }
}

/// A number's magnitude as `digits × 10^exp`, read from its shortest decimal form, with no
/// trailing zero in the digits (or 0).
#[derive(Clone, Copy)]
struct Decimal {
    digits: u64,
    exp: i32,
}

impl Decimal {
    fn of(n: &Number) -> Self {
        let (mut digits, mut exp) = if let Some(u) = n.as_u64() {
            (u, 0)
        } else if let Some(i) = n.as_i64() {
            (i.unsigned_abs(), 0)
        } else {
            // `{:e}` writes the shortest digits that read back as the same double: at most 17,
            // so they fit in a u64.
            let text = format!("{:e}", n.as_f64().unwrap_or(0.0).abs());
            let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
            let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
            let digits = format!("{whole}{fraction}").parse().unwrap_or(0);
            let places = i32::try_from(fraction.len()).unwrap_or(0);
            (digits, exp.parse::<i32>().unwrap_or(0) - places)
        };
        while digits != 0 && digits.is_multiple_of(10) {
            digits /= 10;
            exp += 1;
        }
        Self { digits, exp }
    }

    /// `self / by` is an integer: `(A × 10^d) / B` for `d ≥ 0`, decided by `A × 10^d mod B`
    /// (powers of ten reduced modulo `B` as they are raised, so `1e308 / 5e-324` costs a few
    /// multiplications, not a 600-digit number); for `d < 0`, `B × 10^-d` must divide `A`.
    fn divides_by(self, by: Self) -> bool {
        if self.digits == 0 {
            return true;
        }
        if by.digits == 0 {
            return false;
        }
        let (a, b) = (u128::from(self.digits), u128::from(by.digits));
        let d = i64::from(self.exp) - i64::from(by.exp);
        if d >= 0 {
            return (a % b * pow_mod(10, d.unsigned_abs(), b)).is_multiple_of(b);
        }
        // A has at most 20 digits: past 10^20, B × 10^-d exceeds it.
        u32::try_from(d.unsigned_abs())
            .ok()
            .and_then(|k| 10u128.checked_pow(k))
            .and_then(|p| b.checked_mul(p))
            .is_some_and(|divisor| a.is_multiple_of(divisor))
    }
}

/// `base^exp mod m`, for `m` below 2^64 (so every product fits in a u128).
fn pow_mod(mut base: u128, mut exp: u64, m: u128) -> u128 {
    let mut out = 1 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            out = out * base % m;
        }
        base = base * base % m;
        exp >>= 1;
    }
    out
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
