#!/usr/bin/env python3
"""Import circles between the top-level modules of each crate, and between
the files of each module folder.

A top-level module is a file `src/x.rs` or a folder `src/x/`. Module `a`
uses `b` when a file of `a` names `crate::b` (or, in a top-level file,
`super::b`) in code, not in comments. Inside a folder `src/x/`, the same
holds one level down: its files and folders (but `mod.rs`) are the
modules, and `crate::x::b` or `super::b` names one. Test code (`tests.rs`,
`*_tests.rs`, `src/tests/`, and `#[cfg(test)] mod` blocks) is left out.
Prints each circle and exits 1 when there is one.
"""
import os
import re
import sys


def code_of(text):
    """The file's code: comments (docs link to anything) and test modules
    (`#[cfg(test)] mod NAME { ... }`, matched by braces) left out."""
    text = re.sub(r"//.*", "", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append(text[i:m.start()])
        i = j
    out.append(text[i:])
    return "".join(out)


def modules(src):
    out = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry in ("lib.rs", "main.rs", "mod.rs"):
            continue
        if entry == "tests" or entry == "tests.rs" or entry.endswith("_tests.rs"):
            continue
        if entry.endswith(".rs"):
            out[entry[:-3]] = [path]
        elif os.path.isdir(path):
            files = []
            for root, _, names in os.walk(path):
                files += [os.path.join(root, n) for n in names if n.endswith(".rs") and n != "tests.rs"]
            out[entry] = files
    return out


def edges(src, path=""):
    """The graph of the modules in folder `src`, whose module path from the
    crate's root is `path` (`""` at the root, `"netlink::"` below)."""
    mods = modules(src)
    graph = {m: set() for m in mods}
    prefix = r"\bcrate::" + re.escape(path)
    for m, files in mods.items():
        for f in files:
            text = code_of(open(f, encoding="utf-8").read())
            names = set(re.findall(prefix + r"(\w+)", text))
            # `use crate::{a, b::c}` groups
            for group in re.findall(prefix + r"\{([^}]*)\}", text, flags=re.S):
                names |= set(re.findall(r"(?:^|[,\s{])(\w+)", group))
            top_level = os.path.dirname(f) == src
            if top_level:
                names |= set(re.findall(r"\bsuper::(\w+)", text))
            graph[m] |= {n for n in names if n in mods and n != m}
    return graph


def circles(graph):
    # Tarjan's strongly connected components.
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "crates"
    found = 0
    for crate in sorted(os.listdir(root)):
        src = os.path.join(root, crate, "src")
        if not os.path.isdir(src):
            continue
        folders = [(src, "")]
        for root_dir, dirs, _ in os.walk(src):
            for d in sorted(dirs):
                folder = os.path.join(root_dir, d)
                rel = os.path.relpath(folder, src)
                if "tests" in rel.split(os.sep):
                    continue
                folders.append((folder, "::".join(rel.split(os.sep)) + "::"))
        for folder, path in folders:
            graph = edges(folder, path)
            for c in circles(graph):
                found += 1
                detail = "; ".join(f"{a} -> {', '.join(sorted(graph[a] & set(c)))}" for a in c)
                where = f"{crate}::{path.rstrip(':')}" if path else crate
                print(f"{where}: {' <-> '.join(c)}  ({detail})")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
