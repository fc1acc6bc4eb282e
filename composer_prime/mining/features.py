"""Candidate features from the syntax trees of a repository's source files.

A feature is something a test can exercise and an agent can rebuild from a description: a public top-level
function or class, a public method, or a whole module of public definitions. Each candidate carries what the
task prompt needs (signature, docstring, the members of a class or module) and the line span to delete.
Pure functions over source text; the caller reads the files.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # record imports the grader; `mine-features --help` and its input checks must stay light
    from composer_prime.mining.record import FeatureKind

NOT_SOURCE_NAMES = frozenset({"setup.py", "conftest.py", "noxfile.py", "__main__.py"})
TEST_DIRS = frozenset({"tests", "test", "testing"})
PYTEST_CONFIGS = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})


def is_test_file(path: str) -> bool:
    """Test modules by pytest's default names and unittest's (`test*.py`, `*tests.py`: `tests.py`,
    `testtimeparse.py`; `collection` makes pytest collect those), `conftest.py` files and everything under a `tests/`
    folder."""
    parts = PurePosixPath(path).parts
    name = parts[-1]
    if not name.endswith(".py"):
        return False
    return (
        name.startswith("test")
        or name.endswith(("_test.py", "tests.py"))
        or name == "conftest.py"
        or bool(TEST_DIRS & set(parts))
    )


def is_protected_file(path: str) -> bool:
    """Files grading restores from the task: test files, everything else under a `tests/` folder (test data), and
    the pytest configuration at the repository root."""
    return is_test_file(path) or path in PYTEST_CONFIGS or bool(TEST_DIRS & set(PurePosixPath(path).parts[:-1]))


def is_source_file(path: str) -> bool:
    """Python files whose features may be mined: not tests, not packaging or task-runner scripts."""
    parts = PurePosixPath(path).parts
    return (
        path.endswith(".py")
        and not is_test_file(path)
        and parts[-1] not in NOT_SOURCE_NAMES
        and not {"docs", "examples", "scripts", "benchmarks", "bench"} & set(parts[:-1])
    )


def module_name(path: str) -> str:
    """Dotted import name of a source file (`src/` layout aware): `src/pkg/a.py` -> `pkg.a`, `pkg/__init__.py` -> `pkg`."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@dataclass(frozen=True)
class Feature:
    """One deletable feature and its description."""

    kind: FeatureKind
    path: str
    qualname: str
    """Dotted name inside the module (`Cart.total`); empty for a whole module."""
    start: int
    """First line (1-based), decorators included."""
    end: int
    """Last line (1-based, inclusive)."""
    signature: str
    """`def total(self, discount: float = 0.0) -> float`, `class Cart(Base)` or `module pkg.cart`."""
    docstring: str | None = None
    members: tuple[tuple[str, str | None], ...] = field(default=())
    """For a class or module: (signature, docstring) of each public member, in source order."""
    body_lines: int = 0
    """Statements' line count without the docstring: a size proxy."""

    @property
    def name(self) -> str:
        """The name other code uses: the function, class or method name, or the module's last component."""
        return self.qualname.rsplit(".", 1)[-1] if self.qualname else module_name(self.path).rsplit(".", 1)[-1]

    @property
    def key(self) -> str:
        return f"{self.path}::{self.qualname}" if self.qualname else self.path


def signature_of(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    """The header line of a definition, decorators on lines of their own, without the body."""
    decorators = "".join(f"@{ast.unparse(dec)}\n" for dec in node.decorator_list)
    if isinstance(node, ast.ClassDef):
        bases = [ast.unparse(base) for base in node.bases] + [ast.unparse(kw) for kw in node.keywords]
        return f"{decorators}class {node.name}" + (f"({', '.join(bases)})" if bases else "")
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"{decorators}{prefix} {node.name}({ast.unparse(node.args)}){returns}"


def _body_without_docstring(node: ast.AST) -> list[ast.stmt]:
    body = list(getattr(node, "body", []))
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]
    return body


def _trivial(node: ast.AST) -> bool:
    """A body that is only `pass`, `...` or `raise NotImplementedError`: nothing to re-implement."""
    body = _body_without_docstring(node)
    if not body:
        return True
    if len(body) > 1:
        return False
    stmt = body[0]
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and stmt.value.value is Ellipsis:
        return True
    return isinstance(stmt, ast.Raise) and "NotImplementedError" in ast.unparse(stmt)


def _span(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> tuple[int, int]:
    start = min([node.lineno] + [dec.lineno for dec in node.decorator_list])
    return start, node.end_lineno or node.lineno


def _lines(node: ast.AST) -> int:
    return sum((stmt.end_lineno or stmt.lineno) - stmt.lineno + 1 for stmt in _body_without_docstring(node))


def _public(name: str) -> bool:
    return not name.startswith("_")


def _member_docs(node: ast.AST) -> tuple[tuple[str, str | None], ...]:
    members = []
    for child in getattr(node, "body", []):
        is_definition = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if is_definition and (_public(child.name) or child.name == "__init__"):
            members.append((signature_of(child), ast.get_docstring(child)))
    return tuple(members)


def _one_line_statements(tree: ast.Module) -> bool:
    """Whether no two top-level or class-level statements share a line (`a = 1; b = 2` would defeat line deletion)."""
    seen: set[int] = set()
    for body in [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]:
        for stmt in body:
            if stmt.lineno in seen:
                return False
            seen.add(stmt.lineno)
    return True


def discover(path: str, source: str) -> list[Feature]:
    """The candidate features of one source file; a file that does not parse yields none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    if not _one_line_statements(tree):
        return []
    features: list[Feature] = []
    for node in tree.body:
        if not _candidate(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        kind: FeatureKind = "class" if isinstance(node, ast.ClassDef) else "function"
        members = _member_docs(node) if kind == "class" else ()
        features.append(_feature(kind, path, node.name, node, members))
        if isinstance(node, ast.ClassDef):
            features += [
                _feature("method", path, f"{node.name}.{child.name}", child)
                for child in node.body
                if _candidate(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
    module_members = _member_docs(tree)
    has_code = any(f.kind in ("function", "class") for f in features)
    if PurePosixPath(path).name != "__init__.py" and module_members and has_code:
        features.append(
            Feature(
                kind="module",
                path=path,
                qualname="",
                start=1,
                end=len(source.splitlines()),
                signature=f"module {module_name(path)}",
                docstring=ast.get_docstring(tree),
                members=module_members,
                body_lines=_lines(tree),
            )
        )
    return features


def _candidate(node: ast.AST, kinds: tuple[type, ...]) -> bool:
    return isinstance(node, kinds) and _public(node.name) and not _trivial(node)  # type: ignore[attr-defined]


def _feature(kind: FeatureKind, path: str, qualname: str, node: ast.AST, members: tuple = ()) -> Feature:
    start, end = _span(node)
    return Feature(
        kind=kind,
        path=path,
        qualname=qualname,
        start=start,
        end=end,
        signature=signature_of(node),
        docstring=ast.get_docstring(node),
        members=members,
        body_lines=_lines(node),
    )
