//! `pattern` and `patternProperties`: ECMA-262 regular expressions, as JSON Schema has them
//! (Unicode mode, no flags), translated into regex-lite's syntax with ECMA's meaning and
//! compiled once with the schema. What is accepted, and what matching costs:
//! `docs/tool-arguments.md`.
//!
//! Every construct is written out in regex-lite's terms (characters as `\x{…}`, classes as
//! code point ranges), so no Rust meaning reaches the engine; syntax ECMA-262 does not have
//! (`[[:alpha:]]`, `(?i)`, `\A`, `\z`, `\x{…}`, possessive `*+`) or that regex-lite cannot
//! match in linear time (look-around, back-references) is refused when the schema is compiled,
//! and so is `\p{…}` (no Unicode tables). Matching is regex-lite's Pike VM: time linear in the
//! string (about 50 ns a byte measured), so a string's cost is bounded by the request body
//! limit (4 MiB by default) times the patterns the schema checks it against.

use std::collections::HashSet;

use regex_lite::Regex;

use super::classes::{
    LINE_TERMINATOR, MAX_CODE_POINT, Range, class_escape, complement, push_class, push_code_point,
};
use super::compile::{Compiler, place};

impl Compiler {
    pub(super) fn regex(&mut self, pattern: &str, at: &str) -> Result<(), String> {
        if !self.regexes.contains_key(pattern) {
            let re = compile(pattern).map_err(|why| {
                format!(
                    "{}: the pattern \"{pattern}\" is not supported: {why}",
                    place(at)
                )
            })?;
            self.regexes.insert(pattern.to_owned(), re);
        }
        Ok(())
    }
}

/// An ECMA-262 pattern, compiled; or why it cannot be.
pub(super) fn compile(pattern: &str) -> Result<Regex, String> {
    let translated = translate(pattern)?;
    Regex::new(&translated).map_err(|e| {
        let why = e.to_string();
        why.lines().last().unwrap_or("").trim().to_owned()
    })
}

/// What came before a quantifier: only an atom may be repeated.
#[derive(Clone, Copy, PartialEq)]
enum Last {
    /// The start of an alternative or a group, or `|`.
    Nothing,
    Atom,
    /// `^`, `$`, `\b`, `\B`.
    Assertion,
    /// An atom already repeated (`a*+` is Rust's possessive form, an error in ECMA-262).
    Quantified,
}

/// One member of a character class.
enum ClassAtom {
    Char(u32),
    Set(Vec<Range>),
}

struct Translator {
    chars: Vec<char>,
    at: usize,
    out: String,
    last: Last,
    open_groups: usize,
    names: HashSet<String>,
}

/// The pattern in regex-lite's syntax, meaning what ECMA-262 (Unicode mode) says it means.
pub(super) fn translate(pattern: &str) -> Result<String, String> {
    let mut t = Translator {
        chars: pattern.chars().collect(),
        at: 0,
        out: String::with_capacity(pattern.len() * 2),
        last: Last::Nothing,
        open_groups: 0,
        names: HashSet::new(),
    };
    while let Some(c) = t.next() {
        t.term(c)?;
    }
    if t.open_groups > 0 {
        return Err("a group \"(\" is not closed".into());
    }
    Ok(t.out)
}

impl Translator {
    fn next(&mut self) -> Option<char> {
        let c = self.chars.get(self.at).copied();
        self.at += usize::from(c.is_some());
        c
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let here = self.peek(0) == Some(c);
        self.at += usize::from(here);
        here
    }

    fn term(&mut self, c: char) -> Result<(), String> {
        match c {
            '|' => {
                self.out.push('|');
                self.last = Last::Nothing;
            }
            '(' => self.open_group()?,
            ')' => {
                if self.open_groups == 0 {
                    return Err("\")\" closes no group (write \\) for the character)".into());
                }
                self.open_groups -= 1;
                self.out.push(')');
                self.last = Last::Atom;
            }
            '^' | '$' => {
                self.out.push(c);
                self.last = Last::Assertion;
            }
            '*' | '+' | '?' => self.quantifier(&c.to_string())?,
            '{' => match self.braces() {
                Some(q) => self.quantifier(&q)?,
                None => return Err(lone(c)),
            },
            '}' | ']' => return Err(lone(c)),
            '.' => self.atom_set(&complement(LINE_TERMINATOR)),
            '[' => {
                self.class()?;
                self.last = Last::Atom;
            }
            '\\' => self.escape()?,
            c => self.atom_char(u32::from(c)),
        }
        Ok(())
    }

    fn open_group(&mut self) -> Result<(), String> {
        if self.eat('?') {
            match self.next() {
                Some(':') => {}
                Some('=' | '!') => return Err(LOOK_AROUND.into()),
                Some('<') if matches!(self.peek(0), Some('=' | '!')) => {
                    return Err(LOOK_AROUND.into());
                }
                Some('<') => self.group_name()?,
                _ => {
                    return Err(
                        "\"(?\" is followed by neither \":\" nor a group name: inline \
                                flags such as (?i) and the other (? forms are not ECMA-262's"
                            .into(),
                    );
                }
            }
        }
        self.out.push_str("(?:");
        self.open_groups += 1;
        self.last = Last::Nothing;
        Ok(())
    }

    /// A capturing group's name (`(?<name>`): named or not, groups match the same, so only its
    /// form is checked (and that no other group has it).
    fn group_name(&mut self) -> Result<(), String> {
        let mut name = String::new();
        loop {
            match self.next() {
                Some('>') => break,
                Some(c)
                    if c.is_alphabetic()
                        || matches!(c, '$' | '_')
                        || (!name.is_empty()
                            && (c.is_alphanumeric() || matches!(c, '\u{200C}' | '\u{200D}'))) =>
                {
                    name.push(c);
                }
                _ => return Err("a group name must be an identifier, closed by \">\"".into()),
            }
        }
        if name.is_empty() || !self.names.insert(name) {
            return Err("a group name must be an identifier that no other group has".into());
        }
        Ok(())
    }

    /// `{n}`, `{n,}` or `{n,m}` after the `{` just read, as regex-lite writes it; `None` (and
    /// nothing consumed) if the brace starts none of them.
    fn braces(&mut self) -> Option<String> {
        let start = self.at;
        let digits = |t: &mut Self| {
            let from = t.at;
            while t.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                t.at += 1;
            }
            (t.at > from).then(|| t.chars[from..t.at].iter().collect::<String>())
        };
        let min = digits(self);
        let max = if self.eat(',') {
            Some(digits(self))
        } else {
            None
        };
        match (min, max) {
            (Some(n), max) if self.eat('}') => Some(match max {
                None => format!("{{{n}}}"),
                Some(None) => format!("{{{n},}}"),
                Some(Some(m)) => format!("{{{n},{m}}}"),
            }),
            _ => {
                self.at = start;
                None
            }
        }
    }

    fn quantifier(&mut self, q: &str) -> Result<(), String> {
        if self.last != Last::Atom {
            return Err(format!(
                "\"{q}\" repeats nothing (only a character, a class or a group can be repeated \
                 once; possessive forms such as *+ are not ECMA-262's)"
            ));
        }
        if let Some((n, m)) = q
            .trim_matches(['{', '}'])
            .split_once(',')
            .filter(|(_, m)| !m.is_empty())
        {
            let (n, m) = (n.parse::<u64>(), m.parse::<u64>());
            if let (Ok(n), Ok(m)) = (n, m)
                && n > m
            {
                return Err(format!("the repetition {q} has its numbers out of order"));
            }
        }
        self.out.push_str(q);
        if self.eat('?') {
            self.out.push('?');
        }
        self.last = Last::Quantified;
        Ok(())
    }

    /// An escape outside a class (the `\` read).
    fn escape(&mut self) -> Result<(), String> {
        let Some(c) = self.next() else {
            return Err("the pattern ends with a lone \\".into());
        };
        match c {
            'b' | 'B' => {
                // regex-lite's word boundaries are ASCII ones: ECMA-262's.
                self.out.push('\\');
                self.out.push(c);
                self.last = Last::Assertion;
            }
            'd' | 'D' | 'w' | 'W' | 's' | 'S' => self.atom_set(&class_escape(c)),
            _ => {
                let cp = self.char_escape(c, false)?;
                self.atom_char(cp);
            }
        }
        Ok(())
    }

    /// The code point a character escape stands for (`\` and `c` read); `-` is one inside a
    /// class only. May be a lone surrogate (from `\u`), which no string can hold.
    fn char_escape(&mut self, c: char, in_class: bool) -> Result<u32, String> {
        Ok(match c {
            'f' => 0x0C,
            'n' => 0x0A,
            'r' => 0x0D,
            't' => 0x09,
            'v' => 0x0B,
            'c' => match self.next() {
                Some(l) if l.is_ascii_alphabetic() => u32::from(l) % 32,
                _ => return Err("\\c must be followed by a letter".into()),
            },
            '0' if !self.peek(0).is_some_and(|d| d.is_ascii_digit()) => 0,
            'x' => self
                .hex(2)
                .ok_or("\\x must be followed by two hexadecimal digits")?,
            'u' => self.unicode_escape()?,
            '^' | '$' | '\\' | '.' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|'
            | '/' => u32::from(c),
            '-' if in_class => u32::from(c),
            '-' => return Err("\\- is an escape inside a class only (write - alone)".into()),
            '1'..='9' | 'k' => {
                return Err(
                    "back-references are not supported (matching stays linear-time)".into(),
                );
            }
            'p' | 'P' => {
                return Err(
                    "Unicode property escapes (\\p{…}, \\P{…}) are not supported (no Unicode \
                     tables)"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "\\{other} is not an ECMA-262 escape{}",
                    if in_class { " in a class" } else { "" }
                ));
            }
        })
    }

    /// `\uHHHH` (a surrogate pair written as two of them is one code point) or `\u{H…}`.
    fn unicode_escape(&mut self) -> Result<u32, String> {
        const BAD: &str = "\\u must be followed by four hexadecimal digits or {code point}";
        if self.eat('{') {
            let from = self.at;
            while self.peek(0).is_some_and(|c| c.is_ascii_hexdigit()) {
                self.at += 1;
            }
            let hex: String = self.chars[from..self.at].iter().collect();
            let cp = u32::from_str_radix(&hex, 16)
                .ok()
                .filter(|&cp| cp <= MAX_CODE_POINT);
            return match cp {
                Some(cp) if self.eat('}') => Ok(cp),
                _ => Err(BAD.into()),
            };
        }
        let high = self.hex(4).ok_or(BAD)?;
        if (0xD800..0xDC00).contains(&high)
            && self.peek(0) == Some('\\')
            && self.peek(1) == Some('u')
        {
            let back = self.at;
            self.at += 2;
            match self.hex(4) {
                Some(low) if (0xDC00..0xE000).contains(&low) => {
                    return Ok(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00));
                }
                _ => self.at = back,
            }
        }
        Ok(high)
    }

    fn hex(&mut self, n: usize) -> Option<u32> {
        let digits: String = self.chars.get(self.at..self.at + n)?.iter().collect();
        if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        self.at += n;
        u32::from_str_radix(&digits, 16).ok()
    }

    /// A character class (the `[` read).
    fn class(&mut self) -> Result<(), String> {
        let negated = self.eat('^');
        let mut ranges: Vec<Range> = Vec::new();
        loop {
            let c = self.next().ok_or("a class \"[\" is not closed")?;
            if c == ']' {
                break;
            }
            let first = self.class_atom(c)?;
            let range_follows =
                self.peek(0) == Some('-') && !matches!(self.peek(1), None | Some(']'));
            if !range_follows {
                match first {
                    ClassAtom::Char(cp) => ranges.push((cp, cp)),
                    ClassAtom::Set(set) => ranges.extend(set),
                }
                continue;
            }
            self.at += 1;
            let c = self.next().ok_or("a class \"[\" is not closed")?;
            match (first, self.class_atom(c)?) {
                (ClassAtom::Char(lo), ClassAtom::Char(hi)) if lo <= hi => ranges.push((lo, hi)),
                (ClassAtom::Char(_), ClassAtom::Char(_)) => {
                    return Err("a class range has its ends out of order".into());
                }
                _ => {
                    return Err(
                        "a class range cannot start or end with \\d, \\w or \\s (write \\- for \
                         the character)"
                            .into(),
                    );
                }
            }
        }
        let ranges = if negated { complement(&ranges) } else { ranges };
        push_class(&mut self.out, &ranges);
        Ok(())
    }

    fn class_atom(&mut self, c: char) -> Result<ClassAtom, String> {
        if c != '\\' {
            return Ok(ClassAtom::Char(u32::from(c)));
        }
        let c = self
            .next()
            .ok_or("the pattern ends with a lone \\ in a class")?;
        Ok(match c {
            'b' => ClassAtom::Char(0x08),
            'd' | 'D' | 'w' | 'W' | 's' | 'S' => ClassAtom::Set(class_escape(c)),
            c => ClassAtom::Char(self.char_escape(c, true)?),
        })
    }

    fn atom_char(&mut self, cp: u32) {
        match char::from_u32(cp) {
            Some(c) if c.is_ascii_alphanumeric() || !c.is_ascii() => self.out.push(c),
            Some(_) => push_code_point(&mut self.out, cp),
            // A lone surrogate: no string the server holds has one.
            None => push_class(&mut self.out, &[]),
        }
        self.last = Last::Atom;
    }

    fn atom_set(&mut self, ranges: &[Range]) {
        push_class(&mut self.out, ranges);
        self.last = Last::Atom;
    }
}

const LOOK_AROUND: &str =
    "look-ahead and look-behind are not supported (matching stays linear-time)";

fn lone(c: char) -> String {
    format!("a lone \"{c}\" (write \\{c} for the character)")
}
