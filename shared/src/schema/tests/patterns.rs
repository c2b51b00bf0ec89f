//! `pattern` and `patternProperties` as ECMA-262 has them.

use serde_json::json;

use super::super::Validator;

fn matches(pattern: &str, s: &str) -> bool {
    Validator::new(&json!({"pattern": pattern}))
        .unwrap_or_else(|e| panic!("{pattern}: {e}"))
        .is_valid(&json!(s))
}

fn refusal(pattern: &str) -> String {
    match Validator::new(&json!({"pattern": pattern})) {
        Ok(_) => panic!("{pattern} compiled"),
        Err(e) => e,
    }
}

#[test]
fn white_space_and_the_dot_are_ecma_262_s() {
    // `\s`: WhiteSpace and LineTerminator, Unicode's included.
    let spaces = [
        "\t", "\n", "\u{b}", "\u{c}", "\r", " ", "\u{a0}", "\u{1680}", "\u{2003}", "\u{200a}",
        "\u{2028}", "\u{2029}", "\u{202f}", "\u{205f}", "\u{3000}", "\u{feff}",
    ];
    for s in spaces {
        assert!(matches(r"^\s$", s), "{s:?}");
        assert!(matches(r"^[\s]$", s), "{s:?}");
        assert!(!matches(r"^\S$", s), "{s:?}");
        assert!(!matches(r"^[^\s]$", s), "{s:?}");
        assert!(!matches(r"^[\S]$", s), "{s:?}");
    }
    // Not the next line (U+0085), a zero-width space, a former space separator, a letter.
    for s in ["\u{85}", "\u{200b}", "\u{180e}", "x", "\u{1}"] {
        assert!(!matches(r"^\s$", s), "{s:?}");
        assert!(matches(r"^\S$", s), "{s:?}");
    }
    // `.`: any code point but a line terminator, an astral one as one.
    for s in ["a", "é", "🐲", "\t", "\u{85}", "\u{feff}"] {
        assert!(matches("^.$", s), "{s:?}");
    }
    for s in ["\n", "\r", "\u{2028}", "\u{2029}"] {
        assert!(!matches("^.$", s), "{s:?}");
        assert!(matches("^[^]$", s), "{s:?}");
    }
}

#[test]
fn digits_words_and_boundaries_are_ascii() {
    assert!(matches(r"^\d+$", "0123456789"));
    assert!(!matches(r"^\d$", "٣"));
    assert!(matches(r"^\D$", "٣"));
    assert!(matches(r"^\w+$", "azAZ09_"));
    assert!(!matches(r"^\w$", "é"));
    assert!(matches(r"^[\W]$", "é"));
    assert!(matches(r"a\b", "aé"), "é is no word character");
    assert!(!matches(r"a\B", "aé"));
}

#[test]
fn escapes_classes_groups_and_repetition() {
    assert!(matches(r"^\cC\cj\f\v$", "\u{3}\n\u{c}\u{b}"));
    assert!(matches(r"^\x41\u0042\u{43}\0$", "ABC\0"));
    // A surrogate pair written as two escapes is one code point; a lone surrogate is in no
    // string.
    assert!(matches(r"^\uD83D\uDC32$", "🐲"));
    assert!(matches(r"^\u{1F432}$", "🐲"));
    assert!(matches(r"^[\uD83D\uDC32-\u{1F434}]$", "🐳"));
    assert!(!matches(r"\uD83D", "🐲"));
    assert!(matches(
        r"^\/\.\*\[\]\{\}\(\)\|\^\$\\\?\+$",
        r"/.*[]{}()|^$\?+"
    ));
    // Characters that regex-lite reads as syntax and ECMA-262 as themselves.
    assert!(matches("^a#b c~d&e-f<g>$", "a#b c~d&e-f<g>"));
    assert!(matches("^[&~#-]+$", "&~#-"));
    // Classes: a dash at either end or escaped, `[` as a member, `\b` as backspace, the empty
    // class (nothing) and its negation (anything).
    assert!(matches("^[-a-c]+$", "ab-c") && matches("^[a-c-]+$", "-"));
    assert!(matches(r"^[\-\b]+$", "-\u{8}"));
    assert!(matches("^[[]$", "["));
    assert!(!matches("[]", "") && !matches("[]", "abc"));
    assert!(!matches("[^a-z]", "abc"));
    // Groups, named or not, and repetition, lazy or not.
    assert!(matches("^(?<word>ab)+(?:c|d){2,3}?$", "ababcd"));
    assert!(matches("^a{2}$", "aa") && !matches("^a{2}$", "aaa"));
    assert!(matches("^a{2,}b*?$", "aaab"));
    // `^` and `$` are the string's ends: no line mode, no match before a trailing newline.
    assert!(!matches("^abc$", "abc\n"));
    assert!(!matches("^b", "a\nb"));
    // patternProperties read their patterns the same way.
    let v = Validator::new(&json!({"patternProperties": {r"^\s": false}})).unwrap();
    assert!(!v.is_valid(&json!({"\u{a0}x": 1})));
    assert!(v.is_valid(&json!({"x": 1})));
}

#[test]
fn syntax_only_rust_gives_a_meaning_to_is_refused_when_compiled() {
    for (pattern, says) in [
        ("[[:alpha:]]", "a lone \"]\""),
        ("(?i)abc", "inline flags"),
        ("(?i:abc)", "inline flags"),
        ("(?P<n>a)", "inline flags"),
        ("(?#note)", "inline flags"),
        (r"\Aabc", r"\A is not an ECMA-262 escape"),
        (r"abc\z", r"\z is not an ECMA-262 escape"),
        (r"\Z", r"\Z is not an ECMA-262 escape"),
        (r"\x{41}", r"\x must be followed by two hexadecimal digits"),
        ("a*+", "repeats nothing"),
        ("a++", "repeats nothing"),
        ("a{2}{3}", "repeats nothing"),
        ("a???", "repeats nothing"),
        (r"\p{L}", "Unicode property escapes"),
        (r"[\P{Lu}]", "Unicode property escapes"),
        ("(?=a)", "look-ahead"),
        ("(?<!a)b", "look-behind"),
        (r"(a)\1", "back-references"),
        (r"(?<n>a)\k<n>", "back-references"),
        ("a{2", "a lone \"{\""),
        ("a}", "a lone \"}\""),
        (r"\-", "inside a class only"),
        (r"\a", r"\a is not an ECMA-262 escape"),
        (r"\e", r"\e is not an ECMA-262 escape"),
        (r"[\B]", "in a class"),
        (r"[a-\d]", "cannot start or end"),
        ("[z-a]", "out of order"),
        ("a{3,2}", "out of order"),
        ("(a", "not closed"),
        ("a)", "closes no group"),
        ("[a", "not closed"),
        ("*a", "repeats nothing"),
        ("^*", "repeats nothing"),
        (r"\b+", "repeats nothing"),
        ("(?<a>x)(?<a>y)", "no other group has"),
        (r"\c1", r"\c must be followed by a letter"),
        (r"\01", r"\0 is not an ECMA-262 escape"),
        ("\\", "lone \\"),
    ] {
        let e = refusal(pattern);
        assert!(e.contains(says), "{pattern}: {e}");
        assert!(
            e.starts_with("inputSchema/pattern: the pattern "),
            "{pattern}: {e}"
        );
    }
}
