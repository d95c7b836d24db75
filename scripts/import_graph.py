#!/usr/bin/env python3
"""The server crate's import graph, read from its own `crate::`/`super::` paths.

Usage: scripts/import_graph.py [-v] [--long-fns] [SRC_DIR]   (default crates/server/src)

Reads every .rs file, collects the module paths it names (in `use` statements,
grouped `use crate::{a, b::c}` included, and inline paths such as
`crate::input::parse`), resolves each to the file that defines it (following
`pub use` re-exports), and prints: the number of files and arrows, the import
circles (strongly connected components) of more than two files, and every
arrow that points up the layers http (top) -> service -> device -> domain
(bottom). Files outside those folders (lib.rs, main.rs, serve.rs, bin/) are
the crate's top and may see everything. With --long-fns: instead, every
function longer than 80 lines. Comments are ignored; test modules
count like any other code. Exits 1 when there is a circle of more than two
files or an arrow pointing up.
"""
import os
import re
import sys

LAYERS = {"http": 3, "service": 2, "device": 1, "domain": 0}
TOP = 4  # crate root files: lib.rs, main.rs, serve.rs, bin/


def strip_comments(text):
    """Drop comments and the contents of string and char literals (a small lexer)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])[^']*?'", text[i:i + 12]) and not re.match(r"'[A-Za-z_][A-Za-z0-9_]*[^A-Za-z0-9_']", text[i:i + 40]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(rel):
    """`routes/mod.rs` -> ['routes']; `lib.rs` -> []; `a/b.rs` -> ['a','b']."""
    parts = rel[:-3].split("/")
    if parts[-1] == "mod" or rel in ("lib.rs", "main.rs"):
        parts = parts[:-1]
    if parts and parts[0] == "bin":
        return None
    return parts


def expand_use(tree):
    """Expand a use tree such as `a::{b, c::{d, e as f}, self}` into paths."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def split_top(s):
        depth, cur, parts = 0, "", []
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def rec(prefix, s):
        i = s.find("{")
        if i < 0:
            s = s.split("as")[0] if re.search(r"[a-zA-Z0-9_]as[A-Za-z_]", s) is None else s
            name = re.split(r"(?<=[A-Za-z0-9_*])as(?=[A-Za-z_])", s)[0]
            segs = [p for p in (prefix + "::" + name).split("::") if p]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            out.append(segs)
            return
        head = s[:i].rstrip(":")
        inner = s[i + 1 : s.rfind("}")]
        for part in split_top(inner):
            rec(prefix + ("::" + head if head else ""), part)

    rec("", tree)
    return out


PATH_RE = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_RE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    src = args[0] if args else "crates/server/src"
    files = {}
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(root, n)
                files[os.path.relpath(p, src)] = strip_comments(open(p).read())
    mod_to_file = {}
    for rel in files:
        m = module_of(rel)
        if m is not None and rel != "main.rs":
            mod_to_file[tuple(m)] = rel

    def base_mod(rel, text, pos):
        """The module `super` starts from at `pos` (inside `mod tests {}` it is the file)."""
        m = module_of(rel) or []
        before = text[:pos]
        inner = re.search(r"\bmod\s+\w+\s*\{", before)
        if inner and before.count("{", inner.start()) > before.count("}", inner.start()):
            return list(m)  # inside an inline module: super is this file
        return list(m[:-1])

    def absolute(rel, text, pos, kind, segs):
        if kind == "crate":
            return segs
        base = base_mod(rel, text, pos)
        while segs and segs[0] == "super":
            base = base[:-1]
            segs = segs[1:]
        return base + segs

    # pub use re-exports: (file, name) -> absolute path
    reexports = {}
    for rel, text in files.items():
        for mt in USE_RE.finditer(text):
            if not mt.group(1):
                continue
            for segs in expand_use(mt.group(2)):
                if not segs or segs[-1] == "*":
                    continue
                if segs[0] in ("crate", "super"):
                    segs = absolute(rel, text, mt.start(), segs[0], segs[1:])
                elif segs[0] == "self":
                    segs = (module_of(rel) or []) + segs[1:]
                elif tuple((module_of(rel) or []) + segs[:1]) in mod_to_file:
                    segs = (module_of(rel) or []) + segs
                else:
                    continue
                alias = re.search(r"\bas\s+(\w+)", mt.group(2))
                reexports[(rel, segs[-1])] = segs

    def resolve(segs, depth=0):
        best = None
        for i in range(len(segs), -1, -1):
            if tuple(segs[:i]) in mod_to_file:
                best = (mod_to_file[tuple(segs[:i])], segs[i:])
                break
        if best is None:
            return None
        f, rest = best
        if rest and (f, rest[0]) in reexports and depth < 10:
            target = reexports[(f, rest[0])] + rest[1:]
            g = resolve(target, depth + 1)
            if g:
                return g
        return f

    edges = {}
    for rel, text in files.items():
        targets = set()
        uses = [(m.start(), m.group(2)) for m in USE_RE.finditer(text)]
        spans = []
        for pos, tree in uses:
            for segs in expand_use(tree):
                if segs and segs[0] in ("crate", "super"):
                    segs = [s for s in segs if s != "*"]
                    t = resolve(absolute(rel, text, pos, segs[0], segs[1:]))
                    if t:
                        targets.add(t)
            spans.append((pos, pos + len(tree) + 5))
        for m in PATH_RE.finditer(text):
            if any(a <= m.start() < b for a, b in spans):
                continue
            segs = m.group(2).split("::")[1:]
            t = resolve(absolute(rel, text, m.start(), m.group(1), segs))
            if t:
                targets.add(t)
        targets.discard(rel)
        if rel.startswith("bin/"):
            targets = set()
        edges[rel] = sorted(targets)

    # Tarjan's strongly connected components
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, []):
            if w not in index:
                strong(w)
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
            sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(files):
        if v not in index:
            strong(v)

    def layer(rel):
        return LAYERS.get(rel.split("/")[0], TOP) if "/" in rel else TOP

    arrows = sum(len(t) for t in edges.values())
    circles = sorted((c for c in sccs if len(c) > 2), key=len, reverse=True)
    up = [(a, b) for a, ts in edges.items() for b in ts if layer(b) > layer(a)]
    largest = max((len(c) for c in sccs), default=0)
    print(f"files: {len(files)}")
    print(f"arrows: {arrows}")
    print(f"largest circle: {largest if largest > 1 else 0} files")
    print(f"circles of more than two files: {len(circles)}")
    for c in circles:
        print(f"  ({len(c)}) " + " ".join(c))
    print(f"arrows pointing up: {len(up)}")
    for a, b in sorted(up):
        print(f"  {a} -> {b}")
    if "-v" in sys.argv:
        for a in sorted(edges):
            print(f"{a} -> {', '.join(edges[a])}")
    return 1 if circles or up else 0


def long_functions(src, limit=80):
    """Functions longer than `limit` lines (signature to closing brace), for `--long-fns`."""
    out = []
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if not n.endswith(".rs"):
                continue
            path = os.path.join(root, n)
            lines = strip_comments(open(path).read()).split("\n")
            i = 0
            while i < len(lines):
                m = re.match(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)", lines[i])
                if not m:
                    i += 1
                    continue
                depth, j, opened = 0, i, False
                while j < len(lines):
                    depth += lines[j].count("{") - lines[j].count("}")
                    opened = opened or "{" in lines[j]
                    if opened and depth <= 0 or (not opened and lines[j].rstrip().endswith(";")):
                        break
                    j += 1
                if j - i + 1 > limit:
                    out.append((j - i + 1, os.path.relpath(path, src), i + 1, m.group(6)))
                i += 1
    return sorted(out, reverse=True)


if __name__ == "__main__":
    if "--long-fns" in sys.argv:
        args = [a for a in sys.argv[1:] if not a.startswith("-")]
        for n, f, line, name in long_functions(args[0] if args else "crates/server/src"):
            print(f"{n:4d} lines  {f}:{line}  {name}")
        sys.exit(0)
    sys.exit(main())
