//! Tool arguments into Rust types: serde over the arguments' `serde_json::Value`, as
//! `serde_json::from_value` does, but reading an integral number written with a fraction
//! (`1000.0`) as the integer it is (JSON Schema says so, and the argument checker agrees), and
//! failing the way the checker does: where (`arguments/rounds`) and what, never the value.
//!
//! Kept apart from the checker (`schema`), which the worker does not link.

use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Expected, IntoDeserializer, MapAccess, SeqAccess,
    Unexpected, Visitor,
};
use serde_json::Value;

/// `value` as a `T`.
pub(crate) fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, Error> {
    T::deserialize(Reader {
        value,
        path: &Path::Root,
    })
}

/// Why arguments did not deserialize: where (a JSON pointer into them) and the rule, without
/// the value.
#[derive(Debug)]
pub struct Error {
    path: Option<String>,
    message: String,
}

impl Error {
    fn new(message: String) -> Self {
        Self {
            path: None,
            message,
        }
    }

    /// The innermost place the error arose keeps it; the ones it passes through leave it.
    fn at(mut self, path: &Path<'_>) -> Self {
        self.path.get_or_insert_with(|| path.render());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.as_deref().unwrap_or("");
        write!(f, "arguments{path}: {}", self.message)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    /// A type's own refusal (a `TryFrom`, a `deserialize_with`) is worded by its code and may
    /// quote the value: not repeated.
    fn custom<T: fmt::Display>(_message: T) -> Self {
        Self::new("is not a value this tool takes here".into())
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Self::new(format!("is {}{}", kind(&unexpected), wanted(expected)))
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Self::new(format!(
            "is {} out of what this tool takes here{}",
            kind(&unexpected),
            wanted(expected)
        ))
    }

    fn invalid_length(len: usize, expected: &dyn Expected) -> Self {
        Self::new(format!("has {len} items{}", wanted(expected)))
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        Self::new(format!("is not one of {}", names(expected)))
    }

    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        Self::new(format!(
            "has the property {}, which is not allowed",
            name(field)
        ))
    }

    fn missing_field(field: &'static str) -> Self {
        Self::new(format!("lacks the required property {}", name(field)))
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::new(format!("has the property {} twice", name(field)))
    }
}

/// What a value is, in JSON's words, without the value.
fn kind(unexpected: &Unexpected<'_>) -> &'static str {
    match unexpected {
        Unexpected::Bool(_) => "a boolean",
        Unexpected::Unsigned(_) | Unexpected::Signed(_) => "an integer",
        Unexpected::Float(_) => "a number",
        Unexpected::Char(_) | Unexpected::Str(_) => "a string",
        Unexpected::Unit | Unexpected::Option => "null",
        Unexpected::Seq => "an array",
        Unexpected::Map => "an object",
        _ => "a value",
    }
}

/// What serde expected, in JSON's words (`, expected an integer`), or nothing when it names
/// Rust's types only (`struct Args`).
fn wanted(expected: &dyn Expected) -> String {
    let e = expected.to_string();
    let json = match e.as_str() {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer",
        "f32" | "f64" => "a number",
        "a boolean" => "a boolean",
        "a string" | "a borrowed string" | "a character" | "a char" => "a string",
        "a sequence" => "an array",
        "a map" => "an object",
        "unit" => "null",
        _ if e.starts_with("struct ") => "an object",
        _ if e.starts_with("tuple") || e.starts_with("an array") => "an array",
        _ => return String::new(),
    };
    format!(", expected {json}")
}

fn name(s: &str) -> String {
    Value::String(crate::protocol::truncate(s, 64)).to_string()
}

fn names(all: &[&str]) -> String {
    let list = all.iter().map(|n| name(n)).collect::<Vec<_>>().join(", ");
    crate::protocol::truncate(&list, 120)
}

/// Where in the arguments: a chain of keys and indices, rendered only for an error.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn render(&self) -> String {
        match self {
            Path::Root => String::new(),
            Path::Key(up, k) => format!(
                "{}/{}",
                up.render(),
                k.replace('~', "~0").replace('/', "~1")
            ),
            Path::Index(up, i) => format!("{}/{i}", up.render()),
        }
    }
}

/// A value to deserialize, and where it is.
struct Reader<'a> {
    value: &'a Value,
    path: &'a Path<'a>,
}

impl<'a> Reader<'a> {
    fn any<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (_, Some(i), _) => visitor.visit_i64(i),
                (_, _, f) => visitor.visit_f64(f.unwrap_or(f64::NAN)),
            },
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => {
                let mut seq = Items {
                    items: items.iter(),
                    index: 0,
                    path: self.path,
                };
                let out = visitor.visit_seq(&mut seq)?;
                match seq.items.len() {
                    0 => Ok(out),
                    _ => Err(de::Error::invalid_length(items.len(), &"fewer items")),
                }
            }
            Value::Object(map) => {
                let mut entries = Entries {
                    entries: map.iter(),
                    value: None,
                    path: self.path,
                };
                let out = visitor.visit_map(&mut entries)?;
                match entries.entries.len() {
                    0 => Ok(out),
                    _ => Err(de::Error::invalid_length(map.len(), &"fewer properties")),
                }
            }
        }
    }

    /// For an integer type: an integral number written with a fraction is that integer.
    fn integer<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        const TWO_63: f64 = 9_223_372_036_854_775_808.0;
        match self.value {
            Value::Number(n) if n.is_f64() => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                // Exact: `f` is integral and within i64 (or u64); the visitor checks its own
                // type's range.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                if f.fract() == 0.0 && (-TWO_63..TWO_63).contains(&f) {
                    visitor.visit_i64(f as i64)
                } else if f.fract() == 0.0 && (0.0..2.0 * TWO_63).contains(&f) {
                    visitor.visit_u64(f as u64)
                } else {
                    visitor.visit_f64(f)
                }
            }
            _ => self.any(visitor),
        }
    }

    fn enumeration<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Value::Object(map) if map.len() == 1 => {
                let (key, value) = map.iter().next().expect("one entry");
                visitor.visit_enum(Variant {
                    key,
                    value,
                    path: self.path,
                })
            }
            _ => Err(de::Error::invalid_type(
                unexpected(self.value),
                &"a string or an object of one property",
            )),
        }
    }
}

fn unexpected(value: &Value) -> Unexpected<'static> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(_) => Unexpected::Bool(false),
        Value::Number(_) => Unexpected::Float(0.0),
        Value::String(_) => Unexpected::Str(""),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// A `Reader` method, with the error placed at the reader's path.
macro_rules! placed {
    ($($method:ident => $how:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            let path = self.path;
            self.$how(visitor).map_err(|e| e.at(path))
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Reader<'_> {
    type Error = Error;

    placed! {
        deserialize_any => any,
        deserialize_u8 => integer, deserialize_u16 => integer, deserialize_u32 => integer,
        deserialize_u64 => integer, deserialize_u128 => integer,
        deserialize_i8 => integer, deserialize_i16 => integer, deserialize_i32 => integer,
        deserialize_i64 => integer, deserialize_i128 => integer,
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let path = self.path;
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
        .map_err(|e| e.at(path))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = self.path;
        visitor.visit_newtype_struct(self).map_err(|e| e.at(path))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = self.path;
        self.enumeration(visitor).map_err(|e| e.at(path))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool f32 f64 char str string bytes byte_buf unit unit_struct seq tuple tuple_struct map
        struct identifier
    }
}

/// An array's items, each read at its index.
struct Items<'a> {
    items: std::slice::Iter<'a, Value>,
    index: usize,
    path: &'a Path<'a>,
}

impl<'de> SeqAccess<'de> for Items<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(value) = self.items.next() else {
            return Ok(None);
        };
        let path = Path::Index(self.path, self.index);
        self.index += 1;
        seed.deserialize(Reader { value, path: &path }).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// An object's properties, each value read at its key. A key's own errors (an unknown field)
/// are the object's, placed there by the reader that visits it.
struct Entries<'a> {
    entries: serde_json::map::Iter<'a>,
    value: Option<(&'a str, &'a Value)>,
    path: &'a Path<'a>,
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        seed.deserialize(Key(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| Error::new("is not a value this tool takes here".into()))?;
        let path = Path::Key(self.path, key);
        seed.deserialize(Reader { value, path: &path })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A property name: a string, or the integer it spells for a map with integer keys.
struct Key<'a>(&'a str);

macro_rules! integer_key {
    ($($method:ident => $int:ty, $visit:ident);* $(;)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0.parse::<$int>() {
                Ok(n) => visitor.$visit(n),
                Err(_) => Err(de::Error::invalid_type(Unexpected::Str(""), &visitor)),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Key<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_str(self.0)
    }

    integer_key! {
        deserialize_u8 => u64, visit_u64; deserialize_u16 => u64, visit_u64;
        deserialize_u32 => u64, visit_u64; deserialize_u64 => u64, visit_u64;
        deserialize_i8 => i64, visit_i64; deserialize_i16 => i64, visit_i64;
        deserialize_i32 => i64, visit_i64; deserialize_i64 => i64, visit_i64;
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(self.0.into_deserializer())
    }

    serde::forward_to_deserialize_any! {
        bool u128 i128 f32 f64 char str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

/// An enum written `{"variant": content}`: the content is read at the variant's key.
struct Variant<'a> {
    key: &'a str,
    value: &'a Value,
    path: &'a Path<'a>,
}

impl<'de, 'a> de::EnumAccess<'de> for Variant<'a> {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), Error> {
        let variant = seed.deserialize(Key(self.key))?;
        Ok((variant, self))
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.value {
            Value::Null => Ok(()),
            other => Err(
                <Error as de::Error>::invalid_type(unexpected(other), &"null")
                    .at(&Path::Key(self.path, self.key)),
            ),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        let path = Path::Key(self.path, self.key);
        seed.deserialize(Reader {
            value: self.value,
            path: &path,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        let path = Path::Key(self.path, self.key);
        de::Deserializer::deserialize_seq(
            Reader {
                value: self.value,
                path: &path,
            },
            visitor,
        )
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = Path::Key(self.path, self.key);
        de::Deserializer::deserialize_map(
            Reader {
                value: self.value,
                path: &path,
            },
            visitor,
        )
    }
}
