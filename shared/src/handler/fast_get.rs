//! `tasks/get`, the most repeated request, without the JSON tree: an ordinary 2026-07-28
//! `tasks/get` body is read straight into the few strings it carries, its headers compared
//! without copies, the record shared with the store's cache and the answer written into one
//! buffer. Only a body whose every check would pass on the general path is taken here; any
//! other (a fault anywhere, a duplicate key, a `progressToken`, a large body) is handed back
//! untouched and goes the general way ([`McpService::answer`]), so the answers are the same
//! bytes either way (`wire.golden`, `get_answers.golden`).

use std::borrow::Cow;
use std::fmt;

use http::{HeaderMap, HeaderName};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::{McpService, Reply, ReplyBody};
use crate::protocol::envelope::MAX_DEPTH;
use crate::protocol::headers::{MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, expect_header};
use crate::protocol::{McpError, Method, SUPPORTED_VERSIONS, TASKS_EXTENSION, meta};
use crate::task::{TaskId, TaskRef};
use crate::tenant::Tenant;

/// A visitor's answers to every scalar (read, checked by the parser, and dropped).
macro_rules! scalars {
    ($v:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($v)
        }
    };
}

/// Largest body taken here. Under it the general path's limits on strings, keys and members
/// ([`crate::protocol::envelope`]) cannot be reached, and `_meta` written compactly stays
/// under [`crate::protocol::envelope::MAX_META_BYTES`] (a number grows at most 4.5-fold when
/// written again: `1e15`); only the nesting depth is left to check.
const MAX_BODY: usize = 2 * 1024;

const METHOD_HEADER: HeaderName = HeaderName::from_static(MCP_METHOD);
const VERSION_HEADER: HeaderName = HeaderName::from_static(MCP_PROTOCOL_VERSION);
const NAME_HEADER: HeaderName = HeaderName::from_static(MCP_NAME);

/// An ordinary `tasks/get`, as read by [`decode`].
pub(super) struct FastGet<'a> {
    id: Value,
    task_id: Cow<'a, str>,
    version: Cow<'a, str>,
    declares_tasks: bool,
}

/// The request in `body`, if it is a `tasks/get` the general path would decode without a
/// fault; `None` sends it the general way.
pub(super) fn decode(body: &[u8]) -> Option<FastGet<'_>> {
    if body.len() > MAX_BODY {
        return None;
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let top = de.deserialize_any(Top::default()).ok()?;
    de.end().ok()?;
    let valid_id = match &top.id {
        Some(Value::String(_)) => true,
        Some(Value::Number(n)) => n.is_i64() || n.is_u64(),
        _ => false,
    };
    if !valid_id
        || *top.jsonrpc? != *b"2.0"
        || *top.method? != *Method::TasksGet.as_str().as_bytes()
    {
        return None;
    }
    let params = top.params?;
    let meta = params.meta?;
    Some(FastGet {
        id: top.id?,
        task_id: params.task_id?,
        version: meta.version?,
        declares_tasks: meta.declares_tasks?,
    })
}

impl McpService {
    /// Answers a [`decode`]d `tasks/get`: the general path's checks in its order
    /// ([`McpService::dispatch`] and its `task_id`), then the task.
    pub(super) async fn fast_tasks_get(
        &self,
        get: FastGet<'_>,
        headers: &HeaderMap,
        tenant: &Tenant,
    ) -> Reply {
        match self.fast_answer(&get, headers, tenant).await {
            Ok(reply) => reply,
            Err(e) => {
                if e.error.code == crate::protocol::INTERNAL_ERROR {
                    tracing::warn!(
                        method = "tasks/get",
                        "request failed with an internal error"
                    );
                }
                Reply::error(Some(&get.id), &e)
            }
        }
    }

    async fn fast_answer(
        &self,
        get: &FastGet<'_>,
        headers: &HeaderMap,
        tenant: &Tenant,
    ) -> Result<Reply, McpError> {
        let method = Method::TasksGet;
        expect(headers, &METHOD_HEADER, method.as_str(), true)?;
        expect(headers, &VERSION_HEADER, &get.version, true)?;
        if !SUPPORTED_VERSIONS.contains(&&*get.version) {
            return Err(McpError::unsupported_version(&get.version));
        }
        if !get.declares_tasks {
            // The words of the general path's `task_id`.
            return Err(McpError::tasks_extension_required(format!(
                "{method} requires the {TASKS_EXTENSION} extension to be declared on the request"
            )));
        }
        expect(headers, &NAME_HEADER, &get.task_id, false)?;
        let task_id = TaskId::parse(get.task_id.as_ref()).ok_or_else(McpError::task_not_found)?;
        let task = self
            .engine
            .get_shared(TaskRef::new(tenant, &task_id))
            .await?;
        let answer = crate::task::GetAnswer {
            id: &get.id,
            task: &task,
            meta: &self.meta,
        };
        let body = answer
            .to_vec_with(&self.meta_json)
            .map_err(|_| McpError::internal())?;
        Ok(Reply {
            status: 200,
            headers: Vec::new(),
            body: ReplyBody::Text("application/json", body),
        })
    }
}

/// [`expect_header`], with the common case — one plain value equal to the body's — decided
/// without a copy; anything else (absent, encoded, different, not ASCII) is judged by it.
fn expect(
    headers: &HeaderMap,
    name: &HeaderName,
    body: &str,
    required: bool,
) -> Result<(), McpError> {
    if let Some(v) = headers.get(name)
        && let Ok(v) = v.to_str()
    {
        let v = v.trim();
        if v == body && !v.starts_with("=?base64?") {
            return Ok(());
        }
    }
    expect_header(headers, name.as_str(), body, required)
}

/// The envelope: `jsonrpc`, `id`, `method`, `params`; a key twice is not taken here.
#[derive(Default)]
struct Top<'a> {
    jsonrpc: Option<Cow<'a, [u8]>>,
    id: Option<Value>,
    method: Option<Cow<'a, [u8]>>,
    params: Option<Params<'a>>,
}

/// `params`: `taskId` and `_meta`.
#[derive(Default)]
struct Params<'a> {
    task_id: Option<Cow<'a, str>>,
    meta: Option<Meta<'a>>,
}

/// `params._meta`: the protocol version and whether the capabilities declare the tasks
/// extension (absent until `clientCapabilities` is read).
#[derive(Default)]
struct Meta<'a> {
    version: Option<Cow<'a, str>>,
    declares_tasks: Option<bool>,
}

/// Fails the fast read (the body then goes the general way).
fn not_here<E: serde::de::Error>() -> E {
    E::custom("not a plain tasks/get")
}

/// A key that is none of the constants: text, as the general path's parser requires.
fn utf8<E: serde::de::Error>(k: &[u8]) -> Result<(), E> {
    std::str::from_utf8(k).map(drop).map_err(|_| not_here())
}

/// Puts a value in a slot that must still be empty.
fn once<T, E: serde::de::Error>(slot: &mut Option<T>, v: T) -> Result<(), E> {
    match slot.replace(v) {
        None => Ok(()),
        Some(_) => Err(not_here()),
    }
}

/// Depth of the envelope's members (the envelope itself is 1, as the general path counts).
const MEMBER: usize = 2;

impl<'de> Visitor<'de> for Top<'de> {
    type Value = Self;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC request")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut m: A) -> Result<Self, A::Error> {
        while let Some(k) = m.next_key_seed(Key)? {
            match &*k {
                b"jsonrpc" => once(&mut self.jsonrpc, m.next_value_seed(Key)?)?,
                b"method" => once(&mut self.method, m.next_value_seed(Key)?)?,
                b"id" => once(&mut self.id, m.next_value_seed(Shaped(MEMBER))?)?,
                b"params" => {
                    let p = m.next_value_seed(Object(Params::default(), MEMBER))?;
                    once(&mut self.params, p)?;
                }
                other => {
                    utf8(other)?;
                    m.next_value_seed(Walk(MEMBER))?;
                }
            }
        }
        Ok(self)
    }
}

impl<'de> Visitor<'de> for Object<Params<'de>> {
    type Value = Params<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("params")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Params<'de>, A::Error> {
        let Object(mut p, depth) = self;
        while let Some(k) = m.next_key_seed(Key)? {
            match &*k {
                b"taskId" => once(&mut p.task_id, m.next_value_seed(Str)?)?,
                b"_meta" => {
                    let meta = m.next_value_seed(Object(Meta::default(), depth + 1))?;
                    once(&mut p.meta, meta)?;
                }
                other => {
                    utf8(other)?;
                    m.next_value_seed(Walk(depth + 1))?;
                }
            }
        }
        Ok(p)
    }
}

impl<'de> Visitor<'de> for Object<Meta<'de>> {
    type Value = Meta<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("params._meta")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Meta<'de>, A::Error> {
        let Object(mut meta, depth) = self;
        while let Some(k) = m.next_key_seed(Key)? {
            match &*k {
                k if k == meta::PROTOCOL_VERSION.as_bytes() => {
                    once(&mut meta.version, m.next_value_seed(Str)?)?
                }
                k if k == meta::CLIENT_CAPABILITIES.as_bytes() => {
                    let caps = m.next_value_seed(Object(Caps(false), depth + 1))?;
                    once(&mut meta.declares_tasks, caps)?;
                }
                // Read and checked by the general path.
                b"progressToken" => return Err(not_here()),
                other => {
                    utf8(other)?;
                    m.next_value_seed(Walk(depth + 1))?;
                }
            }
        }
        Ok(meta)
    }
}

/// `clientCapabilities`: whether `extensions` (its last, as in a JSON tree) holds the tasks
/// extension as an object.
struct Caps(bool);

impl<'de> Visitor<'de> for Object<Caps> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("clientCapabilities")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<bool, A::Error> {
        let Object(Caps(mut declares), depth) = self;
        while let Some(k) = m.next_key_seed(Key)? {
            match &*k {
                b"extensions" => declares = m.next_value_seed(Entry(TASKS_EXTENSION, depth + 1))?,
                other => {
                    utf8(other)?;
                    m.next_value_seed(Walk(depth + 1))?;
                }
            }
        }
        Ok(declares)
    }
}

/// A typed object at a depth: its visitor fills `T`.
struct Object<T>(T, usize);

impl<'de, T> DeserializeSeed<'de> for Object<T>
where
    Object<T>: Visitor<'de>,
{
    type Value = <Object<T> as Visitor<'de>>::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        if self.1 > MAX_DEPTH {
            return Err(not_here());
        }
        d.deserialize_map(self)
    }
}

/// A string's bytes (a key, or a value compared with a constant), borrowed from the body
/// when it has no escapes, not checked for UTF-8: one that is not a constant must be checked
/// ([`utf8`]).
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, [u8]>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_bytes(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, [u8]>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_bytes<E>(self, v: &'de [u8]) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// A string, borrowed from the body when it has no escapes.
struct Str;

impl<'de> DeserializeSeed<'de> for Str {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Str {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// A JSON tree (the id), no deeper than the general path allows.
struct Shaped(usize);

impl<'de> DeserializeSeed<'de> for Shaped {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.0 {
            // Deeper than a scalar: the id is not one the fast path answers anyway.
            depth if depth > MAX_DEPTH => Err(not_here()),
            _ => {
                let v = serde::Deserialize::deserialize(d)?;
                match &v {
                    Value::String(_) | Value::Number(_) => Ok(v),
                    _ => Err(not_here()),
                }
            }
        }
    }
}

/// `extensions`: whether it is an object whose entry `key` (its last) is an object.
struct Entry(&'static str, usize);

impl<'de> DeserializeSeed<'de> for Entry {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        if self.1 > MAX_DEPTH {
            return Err(not_here());
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Entry {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<bool, A::Error> {
        let mut found = false;
        while let Some(k) = m.next_key_seed(Key)? {
            if *k == *self.0.as_bytes() {
                found = m.next_value_seed(IsObject(self.1 + 1))?;
            } else {
                utf8(&k)?;
                m.next_value_seed(Walk(self.1 + 1))?;
            }
        }
        Ok(found)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<bool, A::Error> {
        Walk(self.1).visit_seq(s).map(|()| false)
    }
    scalars!(false);
}

/// Whether a value is an object (walked like any other).
struct IsObject(usize);

impl<'de> DeserializeSeed<'de> for IsObject {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        if self.0 > MAX_DEPTH {
            return Err(not_here());
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IsObject {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<bool, A::Error> {
        Walk(self.0).visit_map(m).map(|()| true)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<bool, A::Error> {
        Walk(self.0).visit_seq(s).map(|()| false)
    }
    scalars!(false);
}

/// Any value, read (strings and numbers are checked as the general path reads them) and
/// dropped; deeper than [`MAX_DEPTH`] fails.
#[derive(Clone, Copy)]
struct Walk(usize);

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.0 > MAX_DEPTH {
            return Err(not_here());
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        while let Some(k) = m.next_key_seed(Key)? {
            utf8(&k)?;
            m.next_value_seed(Walk(self.0 + 1))?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        while s.next_element_seed(Walk(self.0 + 1))?.is_some() {}
        Ok(())
    }
    scalars!(());
}

#[cfg(test)]
#[path = "fast_get_tests.rs"]
mod tests;
