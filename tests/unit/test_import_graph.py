"""The library's import graph has no circle, and every package imports only the rooms its docstring allows
(docs/design.md, "Layout").

The graph is read from the source with `ast`: every import statement counts, at module level, inside a function or
under `TYPE_CHECKING`, because a lazy import is still an arrow a reader has to follow. A room is a package (its own
modules together, not its subpackages); a module directly under `composer_prime` is a room of its own (`loss`,
`atomic`, `cli`, ...). With no circle between rooms, the rooms stack into floors and no arrow points up.

Imports by name at run time (`cli.SUBCOMMANDS`, `python -m <module>` argv) are not arrows here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP_PACKAGES = [REPO / "composer_prime", REPO / "composer_agent", REPO / "composer_teachers"]
ENVIRONMENT_PACKAGES = sorted(p.parent for p in REPO.glob("environments/*/*/__init__.py"))
FLAT = {"composer_prime"}
"""Packages whose top-level modules are rooms of their own."""
DECLARED = re.compile(r"^May import:(.*?)(?:\n\s*\n|\Z)", re.S | re.M)
"""A package docstring's paragraph naming the rooms it may import, each in backticks (other words are comment)."""
ROOM_NAME = re.compile(r"`((?:composer_prime|composer_agent|composer_teachers)(?:\.\w+)*)`")
UNDECLARED: dict[str, str] = {}
"""Packages whose docstring does not yet name what they may import; their imports still count for the circles."""


class Module:
    def __init__(self, name: str, path: Path, package: bool) -> None:
        self.name, self.path, self.package = name, path, package


def find_modules(packages: list[Path]) -> dict[str, Module]:
    """Every module of `packages` and their subpackages (folders with an `__init__.py`; data folders such as the
    smoke's toy repository and the CPU stubs are not packages)."""
    found: dict[str, Module] = {}

    def walk(folder: Path, dotted: str) -> None:
        found[dotted] = Module(dotted, folder / "__init__.py", True)
        for path in sorted(folder.iterdir()):
            if path.is_dir() and (path / "__init__.py").is_file():
                walk(path, f"{dotted}.{path.name}")
            elif path.suffix == ".py" and path.name != "__init__.py":
                found[f"{dotted}.{path.stem}"] = Module(f"{dotted}.{path.stem}", path, False)

    for package in packages:
        walk(package, package.name)
    return found


def imported(module: Module, known: dict[str, Module]) -> set[str]:
    """The known modules `module` imports: `from X import a` names `X.a` when that is a module, else `X`;
    `import X.Y` names `X.Y` (or its nearest known parent)."""
    here = module.name if module.package else module.name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(module.path.read_text(), str(module.path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module.name:
                targets.add(name)
    return targets


def room(name: str, known: dict[str, Module]) -> str:
    if known[name].package:
        return name
    parent = name.rpartition(".")[0]
    return name if parent in FLAT else parent


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one node, as one circle through it (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return [circle_through(component, edges) for component in components]


def circle_through(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from the component's first node back to itself, inside the component."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(edges.get(node, ())):
                if child == start:
                    return [*paths[node], start]
                if child in members and child not in paths:
                    paths[child] = [*paths[node], child]
                    nxt.append(child)
        frontier = nxt
    return component


def module_graph(known: dict[str, Module]) -> dict[str, set[str]]:
    return {name: imported(module, known) for name, module in known.items()}


def room_graph(known: dict[str, Module], modules: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for name, targets in modules.items():
        rooms.setdefault(room(name, known), set()).update(room(t, known) for t in targets)
    for source, targets in rooms.items():
        targets.discard(source)
    return rooms


@pytest.fixture(scope="module")
def library() -> tuple[dict[str, Module], dict[str, set[str]]]:
    known = find_modules(TOP_PACKAGES + ENVIRONMENT_PACKAGES)
    return known, module_graph(known)


def test_no_circle_between_modules(library):
    _, modules = library
    found = circles(modules)
    assert not found, "modules import each other in a circle: " + "; ".join(" -> ".join(c) for c in found)


def test_no_circle_between_rooms(library):
    known, modules = library
    found = circles(room_graph(known, modules))
    assert not found, "rooms import each other in a circle (an arrow points up): " + "; ".join(
        " -> ".join(c) for c in found
    )


def test_every_package_imports_only_the_rooms_its_docstring_allows(library):
    known, modules = library
    rooms = {room(name, known) for name in known}
    problems = []
    for name, module in sorted(known.items()):
        if not module.package or name in UNDECLARED or not ROOM_NAME.fullmatch(f"`{name}`"):
            continue
        doc = ast.get_docstring(ast.parse(module.path.read_text())) or ""
        match = DECLARED.search(doc)
        if match is None:
            problems.append(f"{name}: its docstring has no `May import:` paragraph")
            continue
        allowed = set(ROOM_NAME.findall(match.group(1)))
        problems += [f"{name}: `May import:` names {a}, which is no room" for a in sorted(allowed - rooms)]
        for source in sorted(m for m in modules if room(m, known) == name):
            for target in sorted({room(t, known) for t in modules[source]} - {name} - allowed):
                problems.append(f"{source} imports {target}, which {name}'s docstring does not allow")
    assert not problems, "\n".join(problems)


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_sees_lazy_relative_and_package_circles(tmp_path: Path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def later():\n    from .a import x\n",
            "pkg/c.py": "import pkg.d\n",
            "pkg/d.py": "",
            "pkg/x/__init__.py": "",
            "pkg/x/m1.py": "from pkg.y.n1 import f\n",
            "pkg/x/m2.py": "",
            "pkg/y/__init__.py": "",
            "pkg/y/n1.py": "",
            "pkg/y/n2.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..x import m2\n",
        },
    )
    known = find_modules([tmp_path / "pkg"])
    modules = module_graph(known)
    assert modules["pkg.c"] == {"pkg.d"} and modules["pkg.y.n2"] == {"pkg.x.m2"}
    assert circles(modules) == [["pkg.a", "pkg.b", "pkg.a"]]
    assert circles(room_graph(known, modules)) == [["pkg.x", "pkg.y", "pkg.x"]]
