#!/usr/bin/env python3
"""The import graph of the `eligibility` crate (src/), checked against its floors; with
`bench`, of the bench crate (bench/src/), which has no floors but must have no circle.

Every file is a module; an edge A -> B means A names an item of B (`use crate::b::...`,
`super::...`, or a `crate::b::...` path in code). The check fails on a circle between
modules, or on an edge that runs up the floors below (docs/architecture.md draws them).

    scripts/import_graph.py            # the check; prints the edges that break it
    scripts/import_graph.py bench      # the bench crate: circles only
    scripts/import_graph.py --dot      # the graph in Graphviz form, one node per top module

The crate root (lib.rs) is not a node: it declares the modules.
"""

import re
import sys
from pathlib import Path

BENCH = "bench" in sys.argv[1:]
ROOT = Path(__file__).resolve().parent.parent / ("bench/src" if BENCH else "src")
CRATE = "bench" if BENCH else "eligibility"

# Top modules by floor, highest first: a module may name modules on its own floor's
# lower floors only (and its own top module's other files, as long as no circle forms).
FLOORS = [
    ["main", "cli", "commands"],
    ["compose"],
    ["config"],
    ["job"],
    ["cluster", "source", "sink", "change_log"],
    ["progress"],
    ["metrics", "dead_letter", "shutdown", "worker_error", "retry"],
]
FLOOR_OF = {name: index for index, floor in enumerate(FLOORS) for name in floor}


def module_of(path: Path) -> tuple:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts in (["lib"],):
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def strip(text: str) -> str:
    """Code without comments, string literals or the test module."""
    token = re.compile(
        r'//[^\n]*|/\*.*?\*/|r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|' r"b?'(?:\\.|[^'\\])'",
        re.S,
    )
    text = token.sub(lambda m: '""' if m.group(0)[0] in 'rb"' else " ", text)
    # `#[cfg(test)] mod tests { ... }` sits at the end of a file by convention here.
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    return text[: cut.start()] if cut else text


def use_paths(tree: str, prefix: list) -> list:
    """Every path of a `use` tree, e.g. `a::{b, c::{d, e}}`."""
    tree = tree.strip()
    depth = 0
    for index, char in enumerate(tree):
        if char == "{":
            if depth == 0:
                head = [p for p in tree[:index].split("::") if p.strip()]
                inner = tree[index + 1 : tree.rindex("}")]
                paths, start, level = [], 0, 0
                for i, c in enumerate(inner + ","):
                    if c == "{":
                        level += 1
                    elif c == "}":
                        level -= 1
                    elif c == "," and level == 0:
                        if inner[start:i].strip():
                            paths += use_paths(inner[start:i], prefix + [h.strip() for h in head])
                        start = i + 1
                return paths
            depth += 1
    path = tree.split(" as ")[0]
    return [prefix + [p.strip() for p in path.split("::") if p.strip()]]


def resolve(module: tuple, path: list):
    """The absolute path a `crate::`, `super::` or `self::` path names, or None."""
    if not path or path[0] not in ("crate", "super", "self"):
        return None
    base, rest = list(module), list(path)
    if rest[0] == "crate":
        base, rest = [], rest[1:]
    while rest and rest[0] in ("super", "self"):
        if rest[0] == "super":
            base = base[:-1]
        rest = rest[1:]
    if rest and rest[-1] == "self":
        rest = rest[:-1]
    return tuple(base + rest)


def references(module: tuple, text: str, modules: dict) -> set:
    code = strip(text)
    found = []
    for tree in re.findall(r"\buse\s+([^;]+);", code):
        found += use_paths(tree, [])
    found += [p.split("::") for p in re.findall(r"\b(?:crate|super)(?:::\w+)+", code)]
    resolved = set()
    for path in found:
        target = resolve(module, path)
        if target is None:
            continue
        resolved.add(target)
        # A module brought in by name (`use crate::commands;`) is then named through it.
        if target in modules and target:
            alias = target[-1]
            for rest in re.findall(rf"(?<![\w:]){alias}((?:::\w+)+)", code):
                resolved.add(target + tuple(rest.split("::")[1:]))
    return resolved


def main() -> int:
    modules = {module_of(path): path for path in ROOT.rglob("*.rs")}
    modules[("main",)] = modules.pop(("main",), ROOT / "main.rs")
    edges = set()
    for module, path in modules.items():
        for target in references(module, path.read_text(), modules):
            # The longest module that is a prefix of the path named.
            while target and target not in modules:
                target = target[:-1]
            if target and target != module:
                edges.add((module, target))
    # `eligibility::` (`bench::`) from main.rs names the library's modules.
    for target in re.findall(rf"\b{CRATE}::(\w+)", strip((ROOT / "main.rs").read_text())):
        edges.add((("main",), (target,)))
    edges = {(a, b) for a, b in edges if a}

    if "--dot" in sys.argv:
        tops = sorted({(a[0], b[0]) for a, b in edges if a[0] != b[0]})
        print("digraph imports {\n  rankdir=TB; node [shape=box];")
        for index, floor in enumerate([] if BENCH else FLOORS):
            names = " ".join(f'"{n}"' for n in floor)
            print(f"  {{ rank=same; {names} }}")
        for a, b in tops:
            print(f'  "{a}" -> "{b}";')
        print("}")
        return 0

    problems = []
    for a, b in sorted(edges) if not BENCH else []:
        fa, fb = FLOOR_OF.get(a[0]), FLOOR_OF.get(b[0])
        if fa is None or fb is None:
            problems.append(f"not on a floor: {'::'.join(a if fa is None else b)}")
        elif a[0] != b[0] and fb < fa:
            problems.append(f"runs up a floor: {'::'.join(a)} -> {'::'.join(b)}")
    # Circles: strongly connected components of more than one module.
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    index, stack, on_stack, low, number, circles = [0], [], set(), {}, {}, []

    def visit(node):
        number[node] = low[node] = index[0]
        index[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in number:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], number[nxt])
        if low[node] == number[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted("::".join(m) or "crate" for m in component))

    sys.setrecursionlimit(10_000)
    for node in list(graph):
        if node not in number:
            visit(node)
    problems += [f"circle: {' <-> '.join(circle)}" for circle in circles]
    for problem in sorted(set(problems)):
        print(problem)
    print(f"{len(modules)} modules, {len(edges)} imports, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
