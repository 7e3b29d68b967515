#!/usr/bin/env python3
"""Checks that a crate's modules import each other without cycles.

Two levels are checked: the crate's top-level modules (each folder or file under src/ as one
node), and, inside each folder, its files (mod.rs and each sibling). An edge A -> B means code
in A names an item of B (`crate::b::...`, `super::b::...`, a `use crate::{...}` group, a
re-export of lib.rs, or in a mod.rs a child module by its bare name). `#[cfg(test)]` modules are left out: tests may
reach anywhere. A module declaring a child (`mod x;`) is not an edge.

Usage: module-cycles.py [CRATE_SRC ...]   (default: every crates/*/src)
Prints the layering found, and each cycle; exits 1 if there is one.
"""
import glob
import os
import re
import sys


def modules(src):
    """Module path (tuple) -> file, for every .rs file under src."""
    out = {}
    for d, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(d, f), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] in ("lib", "main", "mod"):
                parts = parts[:-1]
            out[tuple(parts)] = os.path.join(d, f)
    return out


def strip_tests(text):
    """The text without `#[cfg(test)]` items (a module or a single item, found by braces)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        j = m.end()
        # The item ends at `;` before any `{`, or at the brace that closes its first `{`.
        semi, brace = text.find(";", j), text.find("{", j)
        if brace == -1 or (semi != -1 and semi < brace):
            i = semi + 1
            continue
        depth, k = 0, brace
        while k < len(text):
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    out.append(text[i:])
    return "".join(out)


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def expand(prefix, group):
    """Paths of a `use` group: expand('crate', 'a::{b, c::d}') -> ['crate::a::b', ...]."""
    group = group.strip()
    m = re.match(r"^([\w:]*?)(::)?\{(.*)\}$", group, flags=re.S)
    if not m:
        return [f"{prefix}::{group}" if prefix else group]
    head = m.group(1)
    base = f"{prefix}::{head}" if head else prefix
    inner, parts, depth, cur = m.group(3), [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (ch == "{") - (ch == "}")
        cur += ch
    parts.append(cur)
    return [p for part in parts if part.strip() for p in expand(base, part.strip())]


def references(text):
    """Every `crate::...` path the text names."""
    paths = []
    for m in re.finditer(r"use\s+crate::(\{.*?\});", text, flags=re.S):
        paths += expand("", m.group(1))
    for m in re.finditer(r"crate::((?:\w+::)*\w+)", text):
        paths.append(m.group(1))
    return [tuple(p.split("::")) for p in paths]


def reexports(lib_text, mods):
    """Name -> module of the crate root's `pub use` items."""
    out = {}
    for m in re.finditer(r"pub(?:\(crate\))?\s+use\s+([^;]+);", lib_text, flags=re.S):
        for p in expand("", m.group(1).strip()):
            parts = tuple(x for x in p.split("::") if x)
            out[parts[-1]] = resolve(parts[:-1], mods)
    return out


def resolve(path, mods):
    """The longest prefix of `path` that is a module."""
    for n in range(len(path), 0, -1):
        if path[:n] in mods:
            return path[:n]
    return None


def cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def check(src):
    mods = modules(src)
    lib = mods.get((), None)
    roots = reexports(open(lib).read(), mods) if lib else {}
    raw = {}  # module -> set of modules it names
    for mod, path in mods.items():
        text = strip_comments(strip_tests(open(path).read()))
        targets = set()
        refs = references(text)
        # `super::x` names a sibling of this file's module (of a folder's own file: of the folder).
        for m in re.finditer(r"(?<![\w:])super::((?:\w+::)*\w+)", text):
            refs.append(mod[:-1] + tuple(m.group(1).split("::")))
        for m in re.finditer(r"use\s+super::(\{.*?\}|(?:\w+::)+\{.*?\});", text, flags=re.S):
            refs += [mod[:-1] + tuple(x for x in p.split("::") if x) for p in expand("", m.group(1))]
        for ref in refs:
            t = resolve(ref, mods)
            if t is None and len(ref) == 1 and ref[0] in roots:
                t = roots[ref[0]]
            if t is not None and t != mod:
                targets.add(t)
        if path.endswith("mod.rs"):
            for child in [k for k in mods if len(k) == len(mod) + 1 and k[: len(mod)] == mod]:
                if re.search(r"(?<![\w:])" + child[-1] + r"::", text):
                    targets.add(child)
        raw[mod] = targets
    bad = False
    # Top level: each first path segment is one node.
    top_edges = {}
    for mod, ts in raw.items():
        if not mod:
            continue
        for t in ts:
            if t and t[0] != mod[0]:
                top_edges.setdefault(mod[0], set()).add(t[0])
    tops = {m[0] for m in mods if m}
    for c in cycles(tops, top_edges):
        bad = True
        print(f"{src}: cycle between top-level modules: {' <-> '.join(c)}")
    # Inside each folder: the folder's own file and each child (collapsed to the child).
    folders = {m for m in mods if m and mods[m].endswith("mod.rs")}
    for f in sorted(folders):
        kids = lambda m: m[: len(f) + 1] if len(m) > len(f) and m[: len(f)] == f else (f if m == f else None)
        nodes, edges = set(), {}
        for mod, ts in raw.items():
            a = kids(mod)
            if a is None:
                continue
            nodes.add(a)
            for t in ts:
                b = kids(t)
                if b is not None and b != a:
                    edges.setdefault(a, set()).add(b)
        for c in cycles(nodes, edges):
            bad = True
            print(f"{src}: cycle inside {'::'.join(f)}: {' <-> '.join('::'.join(x) for x in c)}")
    if not bad:
        order = sorted(tops, key=lambda t: len(reach(t, top_edges)))
        print(f"{src}: no cycles; top-level modules, fewest dependencies first: {', '.join(order)}")
    return not bad


def reach(v, edges, seen=None):
    seen = set() if seen is None else seen
    for w in edges.get(v, ()):
        if w not in seen:
            seen.add(w)
            reach(w, edges, seen)
    return seen


if __name__ == "__main__":
    ok = all([check(s) for s in (sys.argv[1:] or sorted(glob.glob("crates/*/src")))])
    sys.exit(0 if ok else 1)
