#!/usr/bin/env python3
"""The repository builds, runs and tests from its own clone alone.

Fails (exit 1, one line per finding) when a tracked code, test, script or config file names a
path above the repository root:

- a relative path whose `..` segments climb above the root from any directory it may be
  resolved against: the file's own directory; for Rust files also the directory of the package
  that compiles them (`CARGO_MANIFEST_DIR`, and the working directory of `cargo test`); for
  scripts, Makefiles and configs also the repository root (the working directory the test
  command runs them from). A path glued to a computed directory (`$(dirname ...)/../x`,
  `${dir}/../x`) is resolved against the file's directory only;
- an absolute path under the directory that holds this clone (but outside the clone).

It also checks the SHA-256 sums of the official schemas in tests/spec against the table in
tests/spec/README.md.

  python3 scripts/lib/self_contained.py [ROOT]        # check ROOT (default: this repository)
  python3 scripts/lib/self_contained.py --self-test   # the guard catches a planted read

Known blind spot: a path assembled from separate pieces (`.join("..").join("..")`) is not seen.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CODE_SUFFIXES = {
    ".rs", ".sh", ".bash", ".py", ".toml", ".js", ".mjs", ".cjs", ".ts", ".lua", ".yaml",
    ".yml", ".json", ".cfg", ".ini", ".txt",
}
CODE_NAMES = {"Makefile", "run", "Dockerfile"}
# Copies of upstream documents and schemas: data, never read as paths.
SKIP_PREFIXES = ("docs/", "tests/spec/", "shared/tests/json-schema-suite/")
# Lock files list package names and hashes, not paths.
SKIP_DIRS = ("scripts/lock/", "tests/peers/lock/")

# A run of `../` segments (a last bare `..` may end it), then the rest of the path; or, glued to
# a computed directory, `/..` segments ending the path (`$(dirname "$0")/../..`). A bare `..`
# elsewhere is not a path (Lua's concatenation, prose).
UP_RUN = re.compile(
    r"(?<![\w.])((?:\.\./)+(?:\.\.(?![\w./-]))?|(?<=/)\.\.(?:/\.\.)*(?![\w./-]))([\w.\-/]*)"
)
# Rust forms resolved against the source file's own directory.
RUST_FILE_RELATIVE = re.compile(r"include_str!|include_bytes!|#\[path\s*=")


def tracked_files(root: Path) -> list[str]:
    if (root / ".git").exists():
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"],
            check=True, capture_output=True,
        ).stdout.decode()
        return [f for f in out.split("\0") if f]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = [d for d in dirnames if d not in {".git", "target", ".tools", "node_modules"}]
        for name in filenames:
            files.append(name if rel == "." else f"{rel}/{name}")
    return files


def is_code(rel: str) -> bool:
    if rel.startswith(SKIP_PREFIXES) or rel.startswith(SKIP_DIRS):
        return False
    p = Path(rel)
    return p.suffix in CODE_SUFFIXES or p.name in CODE_NAMES


def depth(rel_dir: str) -> int:
    return 0 if rel_dir in ("", ".") else len(Path(rel_dir).parts)


def rust_owners(root: Path, files: list[str]) -> dict[str, str]:
    """Maps a .rs file outside any package directory (e.g. tests/x.rs) to the directory of the
    package whose Cargo.toml names it with `path = "..."`."""
    owners: dict[str, str] = {}
    for rel in files:
        if Path(rel).name != "Cargo.toml":
            continue
        pkg = Path(rel).parent
        text = (root / rel).read_text(errors="replace")
        for m in re.finditer(r'path\s*=\s*"([^"]+\.rs)"', text):
            target = os.path.normpath((pkg / m.group(1)).as_posix())
            owners[target] = pkg.as_posix()
    return owners


def owner_of(rel: str, owners: dict[str, str]) -> str | None:
    """The package of a .rs file named in a Cargo.toml, or of a module beside or below one
    (tests/support/mod.rs belongs to whoever compiles tests/x.rs)."""
    rel = os.path.normpath(rel)
    if rel in owners:
        return owners[rel]
    d = Path(rel).parent
    while d != Path("."):
        for owned, pkg in owners.items():
            if Path(owned).parent == d:
                return pkg
        d = d.parent
    return None


def package_dir(root: Path, rel: str) -> str | None:
    d = Path(rel).parent
    while True:
        manifest = root / d / "Cargo.toml"
        if manifest.exists() and "[package]" in manifest.read_text(errors="replace"):
            return d.as_posix()
        if d == Path("."):
            return None
        d = d.parent


def bases_for(root: Path, rel: str, line: str, owners: dict[str, str]) -> list[str]:
    """The directories a relative path on this line may be resolved against."""
    here = Path(rel).parent.as_posix()
    if rel.endswith(".rs"):
        if RUST_FILE_RELATIVE.search(line):
            return [here]
        # CARGO_MANIFEST_DIR, or the working directory of `cargo test` / `cargo run -p`.
        pkgs = [p for p in (package_dir(root, rel), owner_of(rel, owners)) if p]
        if "CARGO_MANIFEST_DIR" in line:
            return pkgs or [here]
        return pkgs + ["."] if pkgs else [here, "."]
    if Path(rel).name == "Cargo.toml":
        return [here]
    return [here, "."]


def comment_prefix(rel: str) -> str | None:
    """What starts a whole-line comment in this kind of file (prose there is not a read)."""
    suffix = Path(rel).suffix
    if suffix in {".rs", ".js", ".mjs", ".cjs", ".ts"}:
        return "//"
    if suffix == ".lua":
        return "--"
    if suffix in {".sh", ".bash", ".py", ".toml", ".yaml", ".yml", ".cfg", ".ini"} or Path(
        rel
    ).name in CODE_NAMES:
        return "#"
    return None


def findings(root: Path) -> list[str]:
    root = root.resolve()
    files = tracked_files(root)
    owners = rust_owners(root, files)
    parent = str(root.parent)
    abs_outside = (
        re.compile(re.escape(parent.rstrip("/") + "/") + r"(?!" + re.escape(root.name) + r"(?:/|\b))[\w.\-]+")
        if parent not in ("/", "") else None
    )
    found = []
    for rel in files:
        if not is_code(rel):
            continue
        path = root / rel
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        comment = comment_prefix(rel)
        for lineno, line in enumerate(text.splitlines(), 1):
            if comment and line.lstrip().startswith(comment):
                continue
            bases = None
            for m in UP_RUN.finditer(line):
                # Where the line's relative paths resolve from: asked only of a line that climbs
                # (it reads manifests, and most lines have no `..` at all).
                if bases is None:
                    bases = bases_for(root, rel, line, owners)
                ups = m.group(1).count("..")
                glued = m.start() > 0 and line[m.start() - 1] == "/"
                candidates = bases[:1] if glued else bases
                escapes = [b for b in candidates if ups > depth(b)]
                if escapes:
                    base = escapes[0]
                    found.append(
                        f"{rel}:{lineno}: `{m.group(0)}` climbs above the repository root "
                        f"(resolved from {base if base != '.' else 'the root'})"
                    )
            if abs_outside is not None:
                for m in abs_outside.finditer(line):
                    found.append(f"{rel}:{lineno}: `{m.group(0)}` is outside the repository")
    found.extend(schema_sums(root))
    return found


def schema_sums(root: Path) -> list[str]:
    readme = root / "tests/spec/README.md"
    if not readme.exists():
        return ["tests/spec/README.md is missing (the official schemas' origin and sums)"]
    problems = []
    sums = re.findall(r"^([0-9a-f]{64})  (\S+)$", readme.read_text(), re.M)
    if not sums:
        problems.append("tests/spec/README.md lists no SHA-256 sums")
    for digest, name in sums:
        f = root / "tests/spec" / name
        if not f.exists():
            problems.append(f"tests/spec/{name} is missing")
        elif hashlib.sha256(f.read_bytes()).hexdigest() != digest:
            problems.append(f"tests/spec/{name} does not match its SHA-256 in tests/spec/README.md")
    return problems


def self_test(root: Path) -> int:
    """Copies the tracked files to a scratch tree beside a fake sibling folder, checks that the
    copy passes, then adds a read of that sibling to a script and to a Rust test (relative and
    absolute) and checks that the guard fails on each."""
    files = [f for f in tracked_files(root) if (root / f).is_file()]
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "repo"
        for rel in files:
            dst = clone / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dst)
        # The planted paths are built here, never written out in this file: this file must not
        # itself name a path outside the repository.
        sibling = "sibling-docs"
        up = ".." + "/"
        (Path(tmp) / sibling / "spec").mkdir(parents=True)
        ok = True
        base = findings(clone)
        if base:
            print("self-test: the unchanged copy should pass, but:", *base, sep="\n  ")
            ok = False
        for rel, line in [
            ("scripts/test.sh", f"cat {up}{sibling}/spec/schema.json >/dev/null\n"),
            ("tests/protocol.rs",
             f'// read by a test\nconst _S: &str = "{up * 3}{sibling}/spec/x.json";\n'),
            ("scripts/test.sh", f"cat {tmp}/{sibling}/spec/x.json >/dev/null\n"),
        ]:
            target = clone / rel
            before = target.read_text()
            target.write_text(before + line)
            got = findings(clone)
            target.write_text(before)
            if not any(g.startswith(f"{rel}:") for g in got):
                print(f"self-test: an added `{line.strip()}` in {rel} was not caught")
                ok = False
        print(f"self-test: {'ok' if ok else 'FAILED'} (the guard passes the copy and fails each planted read)")
        return 0 if ok else 1


def main() -> int:
    args = sys.argv[1:]
    default_root = Path(__file__).resolve().parents[2]
    if args and args[0] == "--self-test":
        return self_test(Path(args[1]) if len(args) > 1 else default_root)
    root = Path(args[0]) if args else default_root
    problems = findings(root)
    for p in problems:
        print(f"self-contained: {p}", file=sys.stderr)
    if problems:
        print(
            f"self-contained: {len(problems)} problem(s): the repository must build, run and test "
            "from its own clone (copy what it needs into it, noting the origin)",
            file=sys.stderr,
        )
        return 1
    print("self-contained: ok (no code, test or script reads above the repository root)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
