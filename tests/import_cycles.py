"""The import check behind `make lint`: no circle of imports among the modules of daemon/ and
gadget/. grimp reads every import statement, those inside functions and under TYPE_CHECKING
too, which is how a circle hides from Python itself (the import runs later, or never).

    python tests/import_cycles.py [--report-only] [PACKAGE ...]

Prints each circle (a group of modules that import each other, with the import lines that
close it) and exits 1 when there is one; --report-only prints them and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Set
from pathlib import Path

import grimp

PACKAGES = ("daemon", "gadget")


def import_map(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Each module of the graph and the modules of the graph it imports."""
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def circles(imports: Mapping[str, Set[str]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other through imports (the strongly
    connected components, Tarjan's algorithm without recursion), each sorted, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def shortest_loop(imports: Mapping[str, Set[str]], group: Iterable[str]) -> list[str]:
    """The shortest path of imports from the group's first module back to itself."""
    members = set(group)
    start = min(members)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(imports[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise ValueError(f"{sorted(members)} is not a circle")


def report(graph: grimp.ImportGraph, groups: list[list[str]], packages: Iterable[str]) -> str:
    imports = import_map(graph)
    out = [f"{len(groups)} import circle(s) among {', '.join(packages)}:"]
    for n, group in enumerate(groups, 1):
        out.append(f"\n{n}. {' -> '.join(shortest_loop(imports, group))}")
        out.append(f"   ({len(group)} modules; the imports between them:)")
        for importer in group:
            for imported in sorted(imports[importer] & set(group)):
                for d in graph.get_import_details(importer=importer, imported=imported):
                    out.append(
                        f"   {importer}:{d['line_number']}: {d['line_contents'].strip()}"
                        f"  ({imported})"
                    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/import_cycles.py")
    parser.add_argument("packages", nargs="*", default=list(PACKAGES))
    parser.add_argument("--report-only", action="store_true", help="print the circles but exit 0")
    args = parser.parse_args(argv)
    # The packages are read from this checkout, not from wherever an install put them.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    graph = grimp.build_graph(*args.packages, cache_dir=None)
    groups = circles(import_map(graph))
    if not groups:
        names = ", ".join(args.packages)
        print(f"import circles: none among the {len(graph.modules)} modules of {names}")
        return 0
    print(report(graph, groups, args.packages))
    return 0 if args.report_only else 1


if __name__ == "__main__":
    sys.exit(main())
