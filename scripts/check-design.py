#!/usr/bin/env python3
"""Checks docs/design.md §2's module table against the CMake files (run by scripts/lint.sh).

The architecture is `target_link_libraries` (design.md §2); the table says it in words. This script
reads both and fails when they disagree:

  * every product library (add_library outside tests/ and bench/, not INTERFACE, not generated
    Protobuf code `*_proto`) has a row in the table, and every library a row names exists;
  * the libraries a row's "depends on" column names reach, through the table's own arrows, exactly
    the libraries that the CMake target reaches through its target_link_libraries: the table may
    leave out an arrow that follows from others (node -> config -> sgd), never add one that is not
    there or miss one that is;
  * the CMake arrows have no cycle.

The table is the first Markdown table of §2 with a column whose header holds "library" and a
column whose header holds "depends" (e.g. "depends on"); failing that, "dependencies" (the older
"external dependencies"). In the library cell every `gossip_*` name counts; in the dependency cell
every word that names a product library counts, with or without the `gossip_` prefix (`sgd`,
`gossip_sgd`), and everything else (Eigen, Protobuf, "—") is an external dependency and ignored.
Conditions in CMake (if(GOSSIP_GLOO) ...) are ignored: an arrow that exists in some build counts.

  scripts/check-design.py [--root DIR]    exit 0 when they agree, 1 with the differences, 2 when the
                                          table or the CMake files cannot be read
"""
import argparse
import os
import re
import sys

EXCLUDED_DIRS = {"tests", "bench", "build", ".git", "python", "docs", "examples", "scripts"}


def strip_comments(text):
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def cmake_calls(text, command):
    """Yields the argument lists of every `command(...)` call (parentheses nest, strings kept)."""
    for m in re.finditer(r"\b" + command + r"\s*\(", text, re.IGNORECASE):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield re.findall(r'"[^"]*"|[^\s"]+', text[m.end():i - 1])


def read_cmake(root):
    """{library: folder}, {library: set of linked names}, {library: kind} of the product."""
    folders, links, kinds = {}, {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        top = rel.split(os.sep)[0]
        if top in EXCLUDED_DIRS or top.startswith("build"):
            dirnames[:] = []
            continue
        for name in filenames:
            if name != "CMakeLists.txt" and not name.endswith(".cmake"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                text = strip_comments(f.read())
            for args in cmake_calls(text, "add_library"):
                if not args or "$" in args[0]:
                    continue
                kind = args[1].upper() if len(args) > 1 else "STATIC"
                if kind in ("INTERFACE", "IMPORTED", "ALIAS") or args[0].endswith("_proto"):
                    continue
                folders[args[0]] = "." if rel == "." else rel.replace(os.sep, "/")
                kinds[args[0]] = kind
            for args in cmake_calls(text, "target_link_libraries"):
                if args and "$" not in args[0]:
                    links.setdefault(args[0], set()).update(
                        a for a in args[1:] if a not in ("PUBLIC", "PRIVATE", "INTERFACE"))
    return folders, {lib: links.get(lib, set()) & set(folders) - {lib} for lib in folders}, kinds


def read_table(design_path, libraries):
    """{library: set of libraries its row depends on}, from §2's table."""
    with open(design_path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## 2\..*?(?=^## )", text, re.MULTILINE | re.DOTALL)
    if not m:
        raise ValueError(f"{design_path}: no section '## 2.'")
    rows = [line for line in m.group(0).splitlines() if line.lstrip().startswith("|")]
    tables, current = [], []
    for line in m.group(0).splitlines() + [""]:
        if line.lstrip().startswith("|"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    for table in tables:
        header = [h.lower() for h in table[0]]
        lib_col = next((i for i, h in enumerate(header) if "library" in h), None)
        dep_col = next((i for i, h in enumerate(header) if "depends" in h), None)
        if dep_col is None:
            dep_col = next((i for i, h in enumerate(header) if "dependencies" in h), None)
        if lib_col is None or dep_col is None:
            continue
        short = {lib[len("gossip_"):]: lib for lib in libraries if lib.startswith("gossip_")}
        deps = {}
        for cells in table[2:]:
            if len(cells) <= max(lib_col, dep_col):
                continue
            names = re.findall(r"\bgossip_\w+", cells[lib_col])
            words = re.findall(r"[A-Za-z_][\w]*", cells[dep_col])
            row_deps = {w if w in libraries else short[w] for w in words
                        if w in libraries or w in short}
            for name in names:
                deps.setdefault(name, set()).update(row_deps - {name})
        return deps
    raise ValueError(f"{design_path} §2: no table with a 'library' and a 'depends on' column"
                     f" ({len(rows)} table lines read)")


def closure(graph, start):
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(graph.get(n, ()))
    return seen


def find_cycle(graph):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    root = os.path.abspath(parser.parse_args().root)
    design = os.path.join(root, "docs", "design.md")
    try:
        folders, cmake, _ = read_cmake(root)
        table = read_table(design, set(folders))
    except (OSError, ValueError) as e:
        print(f"check-design: {e}", file=sys.stderr)
        return 2
    problems = []
    cycle = find_cycle(cmake)
    if cycle:
        problems.append("CMake: a cycle of target_link_libraries: " + " -> ".join(cycle))
    for lib in sorted(set(folders) - set(table)):
        problems.append(f"{lib} ({folders[lib]}/CMakeLists.txt) has no row in design.md §2's table")
    for lib in sorted(set(table) - set(folders)):
        problems.append(f"design.md §2 names {lib}, which no product CMake file defines")
    for lib in sorted(set(table) & set(folders)):
        real, documented = closure(cmake, lib) - {lib}, closure(table, lib) - {lib}
        for dep in sorted(real - documented):
            how = "links it" if dep in cmake[lib] else "reaches it through the libraries it links"
            problems.append(f"{lib} -> {dep}: {folders[lib]}/CMakeLists.txt {how}, but"
                            f" design.md §2's 'depends on' of {lib} does not reach it")
        for dep in sorted(documented - real):
            problems.append(f"{lib} -> {dep}: design.md §2 says so, but {lib}'s"
                            f" target_link_libraries do not reach it")
    if problems:
        print("check-design: docs/design.md §2 and the CMake files disagree:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"check-design: design.md §2 matches the CMake arrows of {len(folders)} libraries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
