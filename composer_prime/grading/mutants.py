"""Where a canary mutates a test, and how: the equality it aims at, and the edits that keep the file's layout.

The equality of a test is the first `assert a == b` or `self.assertEqual(a, b)` met in a walk of its body in source
order, into `for`, `while`, `if` and `with` blocks, and into a helper of the same file that the test calls as a
statement (`check(x, 3)`). The walk does not enter what could swallow the mutated assert's failure or skip it
silently: `try` blocks, `with` blocks whose context catches exceptions (`pytest.raises`, `assertRaises`,
`suppress`), nested functions and classes. An equality in a block that may not run (a loop over an empty list, an
untaken branch) is *guarded*: the mutant records that it reached it and fails at its end otherwise, so a mutant that
skips its mutated assert still fails as a mutant must; an equality below a `return` of its test is passed over. A
helper's equality is mutated in a copy of the helper that only the mutant calls.

The swapped kind's inputs come from the gold's recorded calls (`answers`, `swaps`): the call side of an equality with
a literal expected side gets the arguments of a recorded call whose recorded answer clearly differs from it.

Every edit keeps `lines` (the file split as the tokenizer splits it) at its length, so the file's AST positions stay
valid for the next edit; an entry may come to hold several lines.
"""

from __future__ import annotations

import ast
import re
import secrets
from dataclasses import dataclass

EQUAL_METHODS = {"assertEqual": "assertNotEqual", "assertEquals": "assertNotEquals"}
SWALLOWS = re.compile(r"(raises|Raises|RaisesRegexp?|suppress|ignored)$")
"""Context managers whose block may end in a caught exception: the walk does not enter them."""
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def source_lines(source: str) -> list[str]:
    """`source` split into lines, ends kept, as Python's tokenizer splits it: on `\\n`, `\\r\\n` and `\\r` only
    (`str.splitlines` also splits on form feeds, `\\v`, `\\x1c`-`\\x1e`, `\\x85`, U+2028 and U+2029, which a
    source file may hold inside a line)."""
    return _LINE.findall(source)


@dataclass
class Equality:
    """The equality a mutant aims at: its two sides and statement, whether it needs a guard, and the helper it lies
    in (with the statement of the test that calls it, and whether that one needs a guard)."""

    left: ast.expr
    right: ast.expr
    statement: ast.stmt
    guarded: bool
    helper: ast.FunctionDef | None = None
    call: ast.stmt | None = None
    call_guarded: bool = False


def _swallows(node: ast.With | ast.AsyncWith) -> bool:
    for item in node.items:
        func = item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if SWALLOWS.search(name):
            return True
    return False


def walk(body: list[ast.stmt], guarded: bool = False):
    """(statement, guarded) for the statements of `body` in source order, with those of the blocks a mutant may
    reach (see the module docstring)."""
    for statement in body:
        yield statement, guarded
        if isinstance(statement, ast.For | ast.AsyncFor | ast.While | ast.If):
            yield from walk(statement.body, True)
            yield from walk(statement.orelse, True)
        elif isinstance(statement, ast.With | ast.AsyncWith) and not _swallows(statement):
            yield from walk(statement.body, guarded)


def sides(statement: ast.stmt) -> tuple[ast.expr, ast.expr] | None:
    """(left, right) of `assert a == b` or `self.assertEqual(a, b)`, else None."""
    test = statement.test if isinstance(statement, ast.Assert) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        return test.left, test.comparators[0]
    call = statement.value if isinstance(statement, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in EQUAL_METHODS
        and len(call.args) >= 2
    ):
        return call.args[0], call.args[1]
    return None


def exits(node: ast.FunctionDef) -> list[int]:
    """The lines of the function's ways out before its end (`return`, `yield`), nested functions left out."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    found, stack = [], list(node.body)
    while stack:
        child = stack.pop()
        if isinstance(child, ast.Return | ast.Yield | ast.YieldFrom):
            found.append(child.lineno)
        stack.extend(c for c in ast.iter_child_nodes(child) if not isinstance(c, nested))
    return found


def _unreachable(node: ast.FunctionDef, statement: ast.stmt, guarded: bool) -> bool:
    """Whether a mutant of `statement` could pass for honest code by not running it: a guarded one needs a body
    that starts below the `def` line and no way out before the end (the guard's check must run); an unguarded one,
    no way out above it (a case that returns early never reaches it: itsdangerous' parametrized cases did)."""
    ways_out = exits(node)
    if guarded:
        return node.body[0].lineno <= node.lineno or bool(ways_out)
    return any(line < statement.lineno for line in ways_out)


def helpers(module: ast.Module) -> dict[str, ast.FunctionDef]:
    """Module-level functions a test may call as helpers: not tests, no decorator but the harmless ones."""
    return {
        node.name: node
        for node in module.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("test") and not node.decorator_list
    }


def _own(node: ast.FunctionDef) -> Equality | None:
    for statement, guarded in walk(node.body):
        found = sides(statement)
        if found is not None and not _unreachable(node, statement, guarded):
            return Equality(*found, statement, guarded)
    return None


def equality(node: ast.FunctionDef, helper_defs: dict[str, ast.FunctionDef]) -> Equality | None:
    """The equality a mutant of test `node` aims at (see the module docstring), or None."""
    for statement, guarded in walk(node.body):
        found = sides(statement)
        if found is not None:
            if _unreachable(node, statement, guarded):
                continue
            return Equality(*found, statement, guarded)
        call = statement.value if isinstance(statement, ast.Expr) else None
        name = call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None
        if name in helper_defs and not _unreachable(node, statement, guarded):
            inner = _own(helper_defs[name])
            if inner is not None:
                inner.helper, inner.call, inner.call_guarded = helper_defs[name], statement, guarded
                return inner
    return None


def expected_side(left: ast.expr, right: ast.expr) -> ast.expr:
    """The expected side of `left == right`: the right one, unless only the right one calls something."""
    calls = [any(isinstance(n, ast.Call) for n in ast.walk(side)) for side in (left, right)]
    return left if calls == [False, True] else right


def other(value: object) -> object:
    """A literal of the same type and shape as `value` that does not equal it, or None where there is none."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        changed = value + 1.0 if abs(value) < 1e15 else value * 2
        return changed if changed != value else None
    if isinstance(value, str | bytes):
        if not value:
            return None
        last = value[-1:]
        swap = ("y" if last != "y" else "z") if isinstance(value, str) else (b"y" if last != b"y" else b"z")
        return value[:-1] + swap
    if isinstance(value, tuple | list) and value:
        changed = other(value[-1])
        return None if changed is None else type(value)([*value[:-1], changed])
    if isinstance(value, dict) and value:
        key = list(value)[-1]
        new = other(value[key])
        return None if new is None else {**value, key: new}
    return None


def perturbed(side: ast.expr) -> str | None:
    try:
        value = ast.literal_eval(side)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    changed = other(value)
    return None if changed is None or type(changed) is not type(value) else repr(changed)


def insert(line: str, offset: int, text: str) -> str:
    """`text` inserted at UTF-8 byte `offset` of `line` (ast columns count bytes)."""
    data = line.encode()
    return (data[:offset] + text.encode() + data[offset:]).decode()


def replace(lines: list[str], node: ast.AST, text: str) -> None:
    """Replace the source of `node` by `text`, in place, keeping the line count (later rows are emptied)."""
    row, end = node.lineno - 1, node.end_lineno - 1
    head, tail = lines[row].encode()[: node.col_offset], lines[end].encode()[node.end_col_offset :]
    lines[row : end + 1] = [(head + text.encode() + tail).decode()] + [""] * (end - row)


def segment(lines: list[str], node: ast.AST) -> str:
    """The source of `node` in `lines`."""
    row, end = node.lineno - 1, node.end_lineno - 1
    data = "".join(lines[row : end + 1]).encode()
    stop = len(data) - (len(lines[end].encode()) - node.end_col_offset)
    return data[node.col_offset : stop].decode()


def body_indent(lines: list[str], node: ast.FunctionDef) -> str:
    first = node.body[0]
    return lines[first.lineno - 1].encode()[: first.col_offset].decode()  # the body's own: tabs stay tabs


def append_last(lines: list[str], node: ast.FunctionDef, text: str) -> None:
    """`text` as a statement after the last one of `node`'s body."""
    last = node.body[-1]
    lines[last.end_lineno - 1] = lines[last.end_lineno - 1].rstrip("\r\n") + f"\n{body_indent(lines, node)}{text}\n"


def guard(lines: list[str], func: ast.FunctionDef, statement: ast.stmt) -> None:
    """Make `func` fail at its end unless `statement` ran: a list filled just before it, checked after the body."""
    name = "_reached"
    while name in {n.id for n in ast.walk(func) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)
    }:
        name += "_"
    row = statement.lineno - 1
    lines[row] = insert(lines[row], statement.col_offset, f"{name}.append(1); ")
    first = func.body[0].lineno - 1
    lines[first] = body_indent(lines, func) + f"{name} = []\n" + lines[first]
    append_last(lines, func, f"assert {name}")


def flip(lines: list[str], found: Equality) -> None:
    """`a == b` -> `a != b`; `assertEqual` -> `assertNotEqual`."""
    statement, left, right = found.statement, found.left, found.right
    if isinstance(statement, ast.Assert):  # the `==` lies between the two sides
        row, col = left.end_lineno - 1, left.end_col_offset
        last, stop = right.lineno - 1, right.col_offset
        span = "".join(lines[row : last + 1])
        tail = len(lines[last]) - stop
        middle = span[col : len(span) - tail].replace("==", "!=", 1)
        lines[row : last + 1] = [span[:col] + middle + span[len(span) - tail :]] + [""] * (last - row)
        return
    func = statement.value.func
    start = func.end_col_offset - len(func.attr.encode())
    line = lines[func.end_lineno - 1].encode()
    new = EQUAL_METHODS[func.attr].encode()
    lines[func.end_lineno - 1] = (line[:start] + new + line[func.end_col_offset :]).decode()


def edit(lines: list[str], found: Equality, kind: str, swap: str | None = None) -> None:
    """Apply mutant `kind` to the equality `found` in `lines`, in place (`swap`: the call's new source, for
    `swapped`)."""
    side = expected_side(found.left, found.right)
    if kind == "wrapped":
        edits = [(side.end_lineno, side.end_col_offset, "]"), (side.lineno, side.col_offset, "[")]
        if isinstance(found.statement, ast.Assert):
            # `(a == [b]) is True`: numpy's `==` answers a one-element list with an array, whose truth is its one
            # element's, so an honest numpy scalar would pass the bare `a == [b]`; an object equal to anything
            # answers True and still passes it. At one position the later edit in this list lands first.
            first, last = sorted((found.left, found.right), key=lambda n: (n.lineno, n.col_offset))
            edits = [(last.end_lineno, last.end_col_offset, ") is True"), *edits, (first.lineno, first.col_offset, "(")]
        for row, col, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
            lines[row - 1] = insert(lines[row - 1], col, text)
    elif kind == "perturbed":
        replace(lines, side, perturbed(side))
    elif kind == "swapped":
        replace(lines, found.left if side is found.right else found.right, swap)
    else:
        flip(lines, found)


def mutate(lines: list[str], node: ast.FunctionDef, found: Equality, kind: str, swap: str | None = None) -> str:
    """Apply mutant `kind` to test `node` whose equality is `found`, in `lines`, in place; the source of the helper
    copy the mutant calls, to add to the module ("" when the equality is the test's own)."""
    if found.helper is None:
        edit(lines, found, kind, swap)  # first: a guard shifts the columns of the statement's row
        if found.guarded:
            guard(lines, node, found.statement)
        return ""
    copy = list(lines)
    name = f"{found.helper.name}_{secrets.token_hex(2)}"
    edit(copy, found, kind, swap)
    if found.guarded:
        guard(copy, found.helper, found.statement)
    row = found.helper.lineno - 1
    copy[row] = re.sub(rf"\bdef\s+{found.helper.name}\b", f"def {name}", copy[row], count=1)
    text = "".join(copy[found.helper.lineno - 1 : found.helper.end_lineno])
    replace(lines, found.call.value.func, name)
    if found.call_guarded:
        guard(lines, node, found.call)
    return text


@dataclass(frozen=True)
class Answer:
    """A call the gold answered, in plain literals (`answers`): the function's name, arguments and result."""

    name: str
    args: tuple
    kwargs: tuple
    result: object

    def source(self, func: str) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"{func}({', '.join(parts)})"


def _plain(tree):
    """The value of a tagged tree (`values`) made of literals only; ValueError for anything else."""
    if not isinstance(tree, list) or not tree:
        raise ValueError(tree)
    tag = tree[0]
    if tag == "none":
        return None
    if tag == "bool" and isinstance(tree[1], bool):
        return tree[1]
    if tag == "int" and len(str(tree[1])) <= 40:
        return int(tree[1])
    if tag == "float":
        return float(tree[1])
    if tag == "str" and isinstance(tree[1], str):
        return tree[1]
    if tag in ("list", "tuple"):
        return (list if tag == "list" else tuple)(_plain(item) for item in tree[1])
    raise ValueError(tag)


def answers(calls) -> list[Answer]:  # type: ignore[no-untyped-def]
    """The recorded calls (`behaviour.RecordedCall`) to module-level functions whose arguments and result are plain
    literals, as `Answer`s; the rest are left out."""
    found = []
    for call in calls:
        function = call.target.partition(":")[2]
        if call.raised is not None or call.result is None or call.instance or "." in function:
            continue
        try:
            args = tuple(_plain(a) for a in call.args)
            kwargs = tuple(sorted((k, _plain(v)) for k, v in call.kwargs.items()))
            found.append(Answer(function, args, kwargs, _plain(call.result)))
        except (ValueError, IndexError, TypeError):
            continue
    return found


def _close(a: object, b: object) -> bool:
    """Whether `a == b` might hold for a value the replay takes for `a`: numbers within 1e-6 relative."""
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def swaps(found: Equality, known: list[Answer]) -> list[str]:
    """The calls a `swapped` mutant may put in place of the equality's call side: recorded calls of the same function
    whose answer clearly differs from the literal expected side."""
    side = expected_side(found.left, found.right)
    call = found.left if side is found.right else found.right
    if not isinstance(call, ast.Call) or any(isinstance(a, ast.Starred) for a in call.args):
        return []
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    try:
        want = ast.literal_eval(side)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return []
    try:
        own = tuple(ast.literal_eval(a) for a in call.args)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        own = None
    if any(k.arg is None for k in call.keywords):
        return []
    func = ast.unparse(call.func)
    return sorted({a.source(func) for a in known if a.name == name and a.args != own and not _close(a.result, want)})
