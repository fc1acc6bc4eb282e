"""Delete one feature from a source tree so that the rest still imports.

The definition's lines go (decorators included; an emptied class body gets `pass`). For a top-level function or
class, every `from <its module> import <name>` in the other source files loses that alias (a package `__init__`
that re-exports it propagates the removal to `from <package> import <name>`), and `__all__` lists drop the name.
A whole module is deleted only when no other source file imports it. Test files are never edited: the tests
that import the feature fail, which is what makes them FAIL_TO_PASS. Pure: file texts in, changed texts out.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

from composer_prime.mining.features import Feature, is_source_file, module_name


class CannotDelete(Exception):
    """The feature cannot be removed cleanly; the miner skips it with this reason."""


Edit = tuple[int, int, list[str]]  # first line, last line (1-based, inclusive), replacement lines


@dataclass(frozen=True)
class Deletion:
    changed: dict[str, str | None]
    """Path -> new text for every edited file; None for a deleted file."""
    removed: str
    """The deleted definition, dedented (what must appear nowhere in the task snapshot)."""
    edits: dict[str, list[Edit] | None]
    """Path -> the line edits that turn the original text into `changed`'s (`apply_edits`); None for a deleted file."""


def apply_edits(text: str, edits: list[Edit]) -> str:
    """Apply line edits (first line, last line, replacement lines; 1-based, inclusive, not overlapping) to `text`."""
    lines = text.splitlines(keepends=True)
    for start, end, replacement in sorted(edits, key=lambda edit: edit[0], reverse=True):
        lines[start - 1 : end] = replacement
    return "".join(lines)


def _package_of(path: str) -> list[str]:
    name = module_name(path)
    parts = name.split(".") if name else []
    return parts if path.endswith("__init__.py") else parts[:-1]


def resolve_from(path: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` in `path` reads from."""
    if node.level == 0:
        return node.module or ""
    package = _package_of(path)
    base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(base + ([node.module] if node.module else []))


def _char_col(line: str, byte_col: int) -> int:
    """ast columns count UTF-8 bytes; string offsets count characters."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def _cut(lines: list[str], stmt: ast.stmt, items: list[ast.AST]) -> Edit:
    """An edit of `stmt`'s own text that removes `items` (elements of one list, names of one import) and their
    separating commas, keeping every other character: the file's formatting survives. An item alone on its line
    takes the line with it."""
    start, end = stmt.lineno, stmt.end_lineno or stmt.lineno
    block = lines[start - 1 : end]
    offsets = [0]
    for line in block:
        offsets.append(offsets[-1] + len(line))
    text = "".join(block)

    def at(lineno: int, col: int) -> int:
        return offsets[lineno - start] + _char_col(lines[lineno - 1], col)

    for item in sorted(items, key=lambda node: (node.lineno, node.col_offset), reverse=True):
        first, last = at(item.lineno, item.col_offset), at(item.end_lineno or item.lineno, item.end_col_offset or 0)
        line_start = text.rfind("\n", 0, first) + 1
        line_end = text.find("\n", last)
        line_end = len(text) if line_end < 0 else line_end + 1
        rest = text[last:line_end].strip().removeprefix(",").strip()
        if not text[line_start:first].strip() and (not rest or rest.startswith("#")):
            text = text[:line_start] + text[line_end:]
            continue
        after = last + len(text[last:]) - len(text[last:].lstrip(" "))
        if text[after : after + 1] == ",":
            tail = after + 1
            tail += len(text[tail:]) - len(text[tail:].lstrip(" "))
            text = text[:first] + text[tail:]
        else:
            before = first
            while before > 0 and text[before - 1] == " ":
                before -= 1
            if text[before - 1 : before] == ",":
                before -= 1
            text = text[:before] + text[last:]
    return start, end, text.splitlines(keepends=True)


def _drop_from_all(tree: ast.Module, names: set[str], lines: list[str]) -> list[Edit]:
    edits: list[Edit] = []
    for stmt in tree.body:
        target = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            target = stmt.target
        if not (isinstance(target, ast.Name) and target.id == "__all__"):
            continue
        value = stmt.value
        if not isinstance(value, (ast.List, ast.Tuple)):
            continue
        dropped = [elt for elt in value.elts if isinstance(elt, ast.Constant) and elt.value in names]
        if dropped:
            edits.append(_cut(lines, stmt, dropped))
    return edits


def _drop_imports(
    path: str, tree: ast.Module, module: str, name: str, skip: range, lines: list[str]
) -> tuple[list[Edit], set[str]]:
    """Edits removing `name` imported from `module`, and the local names those imports bound."""
    edits: list[Edit] = []
    bound: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.lineno in skip or resolve_from(path, node) != module:
            continue
        kept = [alias for alias in node.names if alias.name != name]
        if len(kept) == len(node.names):
            continue
        bound |= {alias.asname or alias.name for alias in node.names if alias.name == name}
        indent = " " * node.col_offset
        end = node.end_lineno or node.lineno
        if kept:
            edits.append(_cut(lines, node, [alias for alias in node.names if alias.name == name]))
        elif node.col_offset:
            edits.append((node.lineno, end, [indent + "pass\n"]))
        else:
            edits.append((node.lineno, end, []))
    return edits, bound


def _definition_edit(text: str, tree: ast.Module, feature: Feature) -> Edit:
    lines = text.splitlines(keepends=True)
    start, end = feature.start, feature.end
    # Keep the file tidy: swallow the blank lines after the block when a blank line precedes it.
    while end < len(lines) and not lines[end].strip() and (start == 1 or not lines[start - 2].strip()):
        end += 1
    replacement: list[str] = []
    if feature.kind == "method":
        cls_name = feature.qualname.split(".")[0]
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
        remaining = [
            stmt
            for stmt in cls.body
            if stmt.lineno < feature.start or stmt.lineno > feature.end
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
        ]
        if not remaining:
            indent = len(lines[feature.start - 1]) - len(lines[feature.start - 1].lstrip())
            replacement = [" " * indent + "pass\n"]
    return start, end, replacement


def _module_importers(files: dict[str, str], target: str) -> list[str]:
    importers = []
    for path, text in files.items():
        if not is_source_file(path) or module_name(path) == target:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(
                alias.name == target or alias.name.startswith(target + ".") for alias in node.names
            ):
                importers.append(path)
                break
            if isinstance(node, ast.ImportFrom):
                source = resolve_from(path, node)
                if source == target or any(f"{source}.{alias.name}" == target for alias in node.names):
                    importers.append(path)
                    break
    return importers


def delete_feature(files: dict[str, str], feature: Feature) -> Deletion:
    """Remove `feature` from `files` (path -> text); raise `CannotDelete` when the result would not hold together."""
    text = files[feature.path]
    lines = text.splitlines(keepends=True)
    removed = textwrap.dedent("".join(lines[feature.start - 1 : feature.end]))
    if feature.kind == "module":
        importers = _module_importers(files, module_name(feature.path))
        if importers:
            raise CannotDelete(f"module is imported by other source files: {', '.join(sorted(importers))}")
        return Deletion(changed={feature.path: None}, removed=removed, edits={feature.path: None})

    edits: dict[str, list[Edit]] = {path: [] for path in files}
    trees = {}
    for path, source in files.items():
        if is_source_file(path):
            try:
                trees[path] = ast.parse(source)
            except SyntaxError:
                continue
    if feature.path not in trees:
        raise CannotDelete("the file does not parse")
    edits[feature.path].append(_definition_edit(text, trees[feature.path], feature))

    if feature.kind in ("function", "class"):
        pending = [(module_name(feature.path), feature.name)]
        done: set[tuple[str, str]] = set()
        exported: dict[str, set[str]] = {feature.path: {feature.name}}
        while pending:
            module, name = pending.pop()
            if (module, name) in done:
                continue
            done.add((module, name))
            for path, tree in trees.items():
                skip = range(feature.start, feature.end + 1) if path == feature.path else range(0)
                lines = files[path].splitlines(keepends=True)
                import_edits, bound = _drop_imports(path, tree, module, name, skip, lines)
                edits[path] += import_edits
                if bound and path.endswith("__init__.py"):
                    exported.setdefault(path, set()).update(bound)
                    pending += [(module_name(path), local) for local in bound]
        for path, names in exported.items():
            edits[path] += _drop_from_all(trees[path], names, files[path].splitlines(keepends=True))

    changed: dict[str, str | None] = {}
    for path, file_edits in edits.items():
        if not file_edits:
            continue
        new_text = apply_edits(files[path], file_edits)
        try:
            ast.parse(new_text)
        except SyntaxError as exc:
            raise CannotDelete(f"deleting leaves {path} unparsable (line {exc.lineno}: {exc.msg})") from exc
        changed[path] = new_text
    return Deletion(changed=changed, removed=removed, edits={path: sorted(edits[path]) for path in changed})
