//! References: `$ref` and `$dynamicRef` targets, followed at evaluation time, and RFC 3986
//! resolution of the URIs schemas use.

use serde_json::Value;

use super::{Ann, Cx, DynamicTarget, Path, Validator};

impl Validator {
    /// The schema at a reference's target (resolved when compiled, so always there; were it
    /// not, `false`: the check fails rather than passes).
    pub(super) fn node(&self, tokens: &[String]) -> &Value {
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

    /// Evaluates a reference's target, with its resource in the dynamic scope.
    pub(super) fn follow<'v, 'i>(
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
    pub(super) fn dynamic_target<'v>(
        &'v self,
        d: &'v DynamicTarget,
        cx: &Cx<'v>,
    ) -> (&'v [String], &'v str) {
        if let Some(name) = &d.name {
            for resource in std::iter::once(&self.root_base[..]).chain(cx.scope.iter().copied()) {
                if let Some(t) = self.dynamic_anchors.get(&format!("{resource}#{name}")) {
                    return (&t.tokens, &t.base);
                }
            }
        }
        (&d.target.tokens, &d.target.base)
    }
}

/// The unescaped tokens of a JSON pointer (`/a~1b/0` -> `["a/b", "0"]`).
pub(super) fn tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// RFC 3986 reference resolution (section 5.2), on the URIs schemas use.
pub(super) fn resolve(base: &str, reference: &str) -> String {
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

pub(super) struct Parts<'a> {
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
pub(super) fn remove_dots(path: &str) -> String {
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

pub(super) fn strip_fragment(uri: &str) -> &str {
    uri.split_once('#').map_or(uri, |(u, _)| u)
}

pub(super) fn fragment(uri: &str) -> Option<&str> {
    uri.split_once('#').map(|(_, f)| f)
}

pub(super) fn percent_decode(s: &str) -> Option<String> {
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
