//! ECMA-262's character classes as code point ranges, and how regex-lite is given them.

use std::fmt::Write as _;

/// A code point range, both ends included.
pub(super) type Range = (u32, u32);

/// ECMA-262's `\d`.
const DIGIT: &[Range] = &[(0x30, 0x39)];
/// ECMA-262's `\w` (without the `i` flag, which patterns never have).
const WORD: &[Range] = &[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)];
/// ECMA-262's `\s`: WhiteSpace (TAB, VT, FF, ZWNBSP and Unicode's Space_Separator) and
/// LineTerminator (LF, CR, LS, PS).
const SPACE: &[Range] = &[
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
];
/// ECMA-262's LineTerminator: what `.` does not match.
pub(super) const LINE_TERMINATOR: &[Range] = &[(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)];
pub(super) const MAX_CODE_POINT: u32 = 0x10_FFFF;
const SURROGATES: Range = (0xD800, 0xDFFF);

pub(super) fn class_escape(c: char) -> Vec<Range> {
    let set = match c.to_ascii_lowercase() {
        'd' => DIGIT,
        'w' => WORD,
        _ => SPACE,
    };
    if c.is_ascii_uppercase() {
        complement(set)
    } else {
        set.to_vec()
    }
}

/// Every code point outside `ranges`.
pub(super) fn complement(ranges: &[Range]) -> Vec<Range> {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    let mut out = Vec::new();
    let mut next = 0u32;
    for (lo, hi) in sorted {
        if lo > next {
            out.push((next, lo - 1));
        }
        next = next.max(hi.saturating_add(1));
    }
    if next <= MAX_CODE_POINT {
        out.push((next, MAX_CODE_POINT));
    }
    out
}

/// A class of `ranges`, as regex-lite reads it; without surrogates, which are no characters
/// (an empty class matches nothing).
pub(super) fn push_class(out: &mut String, ranges: &[Range]) {
    let mut kept = Vec::new();
    for &(lo, hi) in ranges {
        if lo < SURROGATES.0 {
            kept.push((lo, hi.min(SURROGATES.0 - 1)));
        }
        if hi > SURROGATES.1 {
            kept.push((lo.max(SURROGATES.1 + 1), hi));
        }
    }
    if kept.is_empty() {
        out.push_str("[^\\x{0}-\\x{10FFFF}]");
        return;
    }
    out.push('[');
    for (lo, hi) in kept {
        push_code_point(out, lo);
        if hi > lo {
            out.push('-');
            push_code_point(out, hi);
        }
    }
    out.push(']');
}

pub(super) fn push_code_point(out: &mut String, cp: u32) {
    let _ = write!(out, "\\x{{{cp:X}}}");
}
