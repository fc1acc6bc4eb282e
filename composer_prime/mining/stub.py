"""Delete a feature's implementation and keep its name: the `stub` deletion mode.

A function or method keeps its decorators and header (and, with `docstring=True`, its docstring); its body becomes
`raise NotImplementedError`. A class keeps its decorators, header and docstring, and each method it defines becomes
such a stub; its other statements (attributes, nested classes) go, and an emptied body gets `pass`. Nothing else in
the tree changes: every import of the name still resolves, so a test module that imports every public name at the
top still collects and only the tests that call the feature fail. A whole module has no stub form (`CannotDelete`).
Pure: file texts in, changed texts out, like `deletion.delete_feature`.
"""

from __future__ import annotations

import ast
import textwrap

from composer_prime.mining.deletion import CannotDelete, Deletion
from composer_prime.mining.features import Feature

RAISE = "raise NotImplementedError"


def _node(tree: ast.Module, feature: Feature) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef:
    body: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for part in feature.qualname.split("."):
        found = next((n for n in body if getattr(n, "name", None) == part), None)
        if found is None:
            break
        body = getattr(found, "body", [])
    if not isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        raise CannotDelete(f"stub: no definition named {feature.qualname} in {feature.path}")
    return found


def _docstring(node: ast.AST) -> ast.stmt | None:
    first = node.body[0] if getattr(node, "body", None) else None  # type: ignore[attr-defined]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first
    return None


def _starts_line(lines: list[str], stmt: ast.stmt) -> bool:
    """Whether nothing but indentation precedes `stmt` on its first line."""
    return not lines[stmt.lineno - 1][: stmt.col_offset].strip()


def _stub_lines(lines: list[str], node: ast.AST, keep_doc: bool) -> list[str]:
    """The header (decorators included, comments between it and the body dropped), the docstring if kept, and
    `raise NotImplementedError` (or `pass` for a class with nothing left) at the body's indentation."""
    start = min([node.lineno] + [dec.lineno for dec in node.decorator_list])  # type: ignore[attr-defined]
    body: list[ast.stmt] = node.body  # type: ignore[attr-defined]
    if not _starts_line(lines, body[0]):
        raise CannotDelete("stub: the body starts on the header's line (`def f(): ...`); no header can be kept")
    header = lines[start - 1 : body[0].lineno - 1]
    while header and header[-1].strip().startswith("#") or header and not header[-1].strip():
        header.pop()
    indent = lines[body[0].lineno - 1][: len(lines[body[0].lineno - 1]) - len(lines[body[0].lineno - 1].lstrip())]
    kept = list(header)
    doc = _docstring(node)
    if doc is not None and keep_doc:
        if len(body) > 1 and not _starts_line(lines, body[1]):
            raise CannotDelete("stub: the body continues on the docstring's line")
        kept += lines[doc.lineno - 1 : doc.end_lineno or doc.lineno]
    if isinstance(node, ast.ClassDef):
        methods = [stmt for stmt in body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for number, method in enumerate(methods):
            kept += ["\n"] if number or len(kept) > len(header) else []
            kept += _stub_lines(lines, method, keep_doc)
        if not methods and (doc is None or not keep_doc):
            kept.append(f"{indent}pass\n")
    else:
        kept.append(f"{indent}{RAISE}\n")
    return [line if line.endswith("\n") else line + "\n" for line in kept]


def stub_feature(files: dict[str, str], feature: Feature, docstring: bool = True) -> Deletion:
    """Replace `feature`'s implementation in `files` (path -> text) by a stub; raise `CannotDelete` when it has no
    stub form. `removed` is the implementation (the body after the docstring; for a class, the whole definition)."""
    if feature.kind == "module":
        raise CannotDelete("stub: a whole module has no stub form (use the whole deletion)")
    text = files[feature.path]
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise CannotDelete("the file does not parse") from exc
    node = _node(tree, feature)
    lines = text.splitlines(keepends=True)
    end = node.end_lineno or node.lineno
    replacement = _stub_lines(lines, node, docstring)
    new_text = "".join(lines[: feature.start - 1] + replacement + lines[end:])
    try:
        ast.parse(new_text)
    except SyntaxError as exc:  # pragma: no cover - a header kept verbatim parses with any body
        raise CannotDelete(f"stubbing leaves {feature.path} unparsable (line {exc.lineno}: {exc.msg})") from exc
    if isinstance(node, ast.ClassDef):
        removed = textwrap.dedent("".join(lines[feature.start - 1 : end]))
    else:
        doc = _docstring(node)
        first = node.body[1] if doc is not None and len(node.body) > 1 else node.body[0]
        removed = textwrap.dedent("".join(lines[first.lineno - 1 : end]))
    edit = (feature.start, end, replacement)
    return Deletion(changed={feature.path: new_text}, removed=removed, edits={feature.path: [edit]})
