#!/usr/bin/env python3
"""Function length check: lists every `fn` in crates/*/src/**/*.rs longer than --warn lines
(default 70) and exits 1 if any is longer than --max lines (default 100).

    scripts/fn-length.py [--max N] [--warn N] [--exclude crates/engine ...] [FILE ...]

A function's length runs from the line of its `fn` keyword to the line of its closing brace.
Bodies are found by brace matching after comments and string, byte-string, raw-string and
char literals are blanked out (lifetimes are told apart from char literals). `#[cfg(test)]`
modules are skipped: unit tests are not held to the limit. Output lines read
`file:line name length`, longest first. Standard library only.
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


RAW = re.compile(r'b?r(#*)"')


def blank(src):
    """`src` with comments and literals replaced by spaces (newlines kept, so that offsets
    and line numbers still match the file)."""
    out = list(src)
    n = len(src)
    i = 0

    def wipe(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif src.startswith("/*", i):
            # Block comments nest in Rust.
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c in "br" and (m := RAW.match(src, i)) and not _ident_char(src, i - 1):
            close = '"' + m.group(1)
            j = src.find(close, m.end())
            j = n if j < 0 else j + len(close)
            wipe(i, j)
            i = j
        elif c == '"' or (src.startswith('b"', i) and not _ident_char(src, i - 1)):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'" or (src.startswith("b'", i) and not _ident_char(src, i - 1)):
            j = i + (2 if c == "b" else 1)
            if src.startswith("\\", j):
                # An escape ('\n', '\'', '\u{1F600}'): the literal ends at the next quote.
                k = src.find("'", j + 2)
                k = n if k < 0 else k
                wipe(i, k + 1)
                i = k + 1
            elif j + 1 < n and src[j + 1] == "'":
                wipe(i, j + 2)
                i = j + 2
            else:
                i += 1  # a lifetime or a label
        else:
            i += 1
    return "".join(out)


def _ident_char(s, i):
    return i >= 0 and (s[i].isalnum() or s[i] == "_")


def matching(text, open_at):
    """Offset of the brace closing the one at `open_at` (or the end of the text)."""
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


TEST_MOD = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]\s*(?:#\s*\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def without_test_mods(text):
    """`text` with the bodies of `#[cfg(test)] mod x { ... }` blanked out."""
    while m := TEST_MOD.search(text):
        end = matching(text, m.end() - 1)
        text = text[: m.start()] + re.sub(r"[^\n]", " ", text[m.start() : end + 1]) + text[end + 1 :]
    return text


def functions(src):
    """(line, name, length) of every fn with a body."""
    text = without_test_mods(blank(src))
    found = []
    for m in FN.finditer(text):
        # The body is the first brace outside parentheses and brackets after the name; a
        # semicolon first means a declaration without one (a trait method, an extern fn).
        depth = 0
        for j in range(m.end(), len(text)):
            c = text[j]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth == 0 and c == ";":
                break
            elif depth == 0 and c == "{":
                first = text.count("\n", 0, m.start()) + 1
                last = text.count("\n", 0, matching(text, j)) + 1
                found.append((first, m.group(1), last - first + 1))
                break
    return found


def sources(excluded):
    for path in sorted(ROOT.glob("crates/*/src/**/*.rs")):
        rel = path.relative_to(ROOT).as_posix()
        if not any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in excluded):
            yield path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max", type=int, default=100, help="fail when a function is longer (default 100)")
    p.add_argument("--warn", type=int, default=70, help="list functions longer than this (default 70)")
    p.add_argument("--exclude", action="append", default=[], help="a path under the root to skip (repeatable)")
    p.add_argument("files", nargs="*", help="check these files instead of crates/*/src")
    a = p.parse_args()
    paths = [Path(f).resolve() for f in a.files] if a.files else list(sources(a.exclude))
    long, over = [], 0
    for path in paths:
        try:
            src = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            print(f"{path}: cannot read: {e}", file=sys.stderr)
            return 2
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        for line, name, n in functions(src):
            if n > a.warn:
                long.append((n, rel, line, name))
            over += n > a.max
    for n, rel, line, name in sorted(long, key=lambda x: (-x[0], x[1], x[2])):
        print(f"{rel}:{line} {name} {n}{'  (over ' + str(a.max) + ')' if n > a.max else ''}")
    if over:
        print(f"fn-length: {over} function(s) over {a.max} lines; split them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
