//! A manifest's TOML or type error as a refusal a newcomer can act on.

use super::ManifestError;

/// A TOML or shape error as a refusal a newcomer can act on: the line, the entry it is in (its
/// number and name), the key, and the parser's words with every quoted value taken out (a
/// token pasted in the wrong place is never printed back).
pub(super) fn toml_error(text: &str, origin: &str, e: &toml::de::Error) -> ManifestError {
    let at = e.span().map_or(text.len(), |s| s.start.min(text.len()));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let headers: Vec<usize> = text
        .match_indices("[[tool]]")
        .map(|(i, _)| i)
        .filter(|i| {
            text[..*i]
                .rsplit('\n')
                .next()
                .is_some_and(|l| l.trim().is_empty())
        })
        .collect();
    let n = headers.iter().filter(|h| **h < at).count();
    let entry = (n > 0).then(|| {
        let section = &text[headers[n - 1]..headers.get(n).copied().unwrap_or(text.len())];
        let name = section.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "name").then(|| v.trim().trim_matches('"').to_owned())
        });
        match name {
            Some(name) => format!("tool #{n} ({})", crate::protocol::truncate(&name, 64)),
            None => format!("tool #{n}"),
        }
    });
    let this_line = before.rsplit('\n').next().unwrap_or("");
    let keys: Vec<&str> = this_line
        .split('=')
        .rev()
        .skip(1)
        .filter_map(|part| {
            let k = part
                .rsplit(['{', ',', ' '])
                .find(|w| !w.trim().is_empty())?
                .trim();
            k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                .then_some(k)
        })
        .collect();
    let key = match keys.as_slice() {
        [] => String::new(),
        [k] => format!(", key {k}"),
        [inner, .., outer] => format!(", key {outer}.{inner}"),
    };
    ManifestError {
        origin: origin.to_owned(),
        entry,
        reason: format!(
            "not a tool manifest at line {line}{key}: {}",
            without_values(e.message())
        ),
    }
}

/// `s` with every double-quoted part replaced by `"…"`.
fn without_values(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut quoted = false;
    for c in s.chars() {
        match (c, quoted) {
            ('"', false) => {
                out.push_str("\"…\"");
                quoted = true;
            }
            ('"', true) => quoted = false,
            (_, true) => {}
            (c, false) => out.push(c),
        }
    }
    out
}
