#!/usr/bin/env python3
"""Keeps README.md and docs/ true to the repository, offline:

1. every relative link resolves: the file exists, and a `#anchor` names a heading of it (GitHub's
   slugs);
2. every command a reader would copy from a ```sh block still runs as written, as far as it can
   be checked without running it: each `--flag` of an `mcp-tasks SUBCOMMAND` (or `cargo run … -p
   mcp-tasks -- SUBCOMMAND`) line is one that subcommand's `--help` lists; each `make TARGET` is a
   target of the Makefile; each script (`bash scripts/…`, `python3 bench/…`, `examples/…`) exists;
   each `cargo test … --test NAME` names a test target of the workspace;
3. every flag `mcp-tasks serve --help` lists is in docs/running-locally.md's table.

    docs_check.py [--binary target/debug/mcp-tasks]    # exit 1 with one line per problem

Without --binary the flags are not checked (the other checks still run).
"""
from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^```(\w*)")


def pages() -> list[pathlib.Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "upstream" not in p.parts]
    return [ROOT / "README.md", *sorted(docs)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            in_code = not in_code
            continue
        m = None if in_code else HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of each fenced block."""
    blocks, lang, lines = [], None, []
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and lang is None:
            lang, lines = m.group(1), []
        elif line.startswith("```") and lang is not None:
            blocks.append((lang, lines))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def commands(lines: list[str]) -> list[str]:
    """Shell command lines, continuations joined, comments dropped."""
    out, cur = [], ""
    for raw in lines:
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append(cur.strip())
        cur = ""
    return out


def help_flags(binary: str, sub: list[str]) -> set[str]:
    out = subprocess.run([binary, *sub, "--help"], capture_output=True, text=True)
    return set(re.findall(r"--[a-z][a-z0-9-]*", out.stdout))


def test_targets() -> set[str]:
    names = set()
    for toml in ROOT.glob("**/Cargo.toml"):
        if "target" in toml.parts or ".tools" in toml.parts:
            continue
        names.update(re.findall(r'\[\[test\]\]\s*\nname\s*=\s*"([^"]+)"', toml.read_text()))
    names.update(p.stem for p in (ROOT / "shared/tests").glob("*.rs"))
    names.update(p.parent.name for p in (ROOT / "shared/tests").glob("*/main.rs"))
    names.update(p.stem for p in ROOT.glob("tools/*/tests/*.rs"))
    return names


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))


def check(binary: str | None) -> list[str]:
    problems: list[str] = []
    tests, makes = test_targets(), make_targets()
    helps: dict[tuple[str, ...], set[str]] = {}
    for page in pages():
        rel = page.relative_to(ROOT)
        text = page.read_text()
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in LINK.findall(prose):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                problems.append(f"{rel}: link to {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{rel}: link to {target}: no such heading")
        for lang, lines in code_blocks(text):
            if lang not in ("sh", "bash", "shell"):
                continue
            for cmd in commands(lines):
                words = cmd.split()
                m = re.search(r"(?:^|\s)(?:mcp-tasks|cargo run [^|;&]*?-p mcp-tasks --)\s+"
                              r"(serve|call|tasks|dlq)(\s+(list|show|cancel|redrive))?", cmd)
                if m and binary:
                    sub = tuple(w for w in (m.group(1), m.group(3)) if w)
                    if sub not in helps:
                        helps[sub] = help_flags(binary, list(sub))
                    rest = cmd[m.end():]
                    for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest):
                        if flag not in helps[sub]:
                            problems.append(f"{rel}: `{cmd}`: {' '.join(sub)} has no {flag}")
                for i, w in enumerate(words):
                    if w == "make" and i + 1 < len(words) and not words[i + 1].startswith("-"):
                        if words[i + 1] not in makes:
                            problems.append(f"{rel}: `{cmd}`: no make target {words[i + 1]}")
                    if w == "--test" and i + 1 < len(words) and words[i + 1] not in tests:
                        problems.append(f"{rel}: `{cmd}`: no test target {words[i + 1]}")
                    if re.match(r"^(\./)?(scripts|bench|examples|tests)/[\w./-]+\.(sh|py|toml|mjs)$", w):
                        if not (ROOT / w.removeprefix("./")).exists():
                            problems.append(f"{rel}: `{cmd}`: {w} does not exist")
    if binary:
        # Every flag of `serve` is in the reference table a reader looks it up in.
        table = (ROOT / "docs/running-locally.md").read_text()
        for flag in sorted(help_flags(binary, ["serve"]) - {"--help", "--version"}):
            if f"`{flag}" not in table:
                problems.append(f"docs/running-locally.md: serve's {flag} is not in the table")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary")
    args = ap.parse_args()
    problems = check(args.binary)
    for p in problems:
        print(f"docs: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"docs: ok ({len(pages())} pages: links resolve, commands name what exists)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
