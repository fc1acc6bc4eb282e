"""Record a feature's behaviour for its task: the calls the covering tests make into it, kept where a lone replay
answers as recorded (see `composer_prime.grading.behaviour` for how grading uses them)."""

from __future__ import annotations

import ast
import functools
import json
import posixpath
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from composer_prime.grading import values
from composer_prime.grading.behaviour import IGNORED, RecordedCall, mismatch
from composer_prime.grading.tree import is_test_path
from composer_prime.mining.features import is_test_file
from composer_prime.mining.testrun import replay_calls, run_tests


def record_behaviour(
    test_cmd: list[str],
    work: Path,
    feature: dict[str, str],
    targets: list[str],
    timeout_s: float,
    starting: dict[str, str | None] | None = None,
) -> tuple[list[RecordedCall], int]:
    """Run `targets` on the original code in `work` with the recorder of calls into `feature` (`path`, `qualname`,
    `kind`), replay what it saw exactly as grading will, and return (the calls answered as recorded, how many calls
    were seen but not kept). `starting`: the files the task's starting tree has otherwise (None: removed), for
    `floored`. Raises the test run's `TestCommandTimeout` / `TestCommandFailed`."""
    recorded, skipped, _ = record_calls(test_cmd, work, feature, targets, timeout_s)
    calls = without_test_code(recorded)
    changed = starting or {}
    before = existed_before(work, lambda path: changed[path] if path in changed else _read(work / path), [".", "src"])
    if feature.get("kind") != "class":
        calls = floored(with_drained_results(test_cmd, work, calls, timeout_s), before)
        kept = replayed_as_recorded(test_cmd, work, calls, timeout_s)
        return kept, skipped + len(recorded) - len(kept)
    qualname = feature["qualname"]
    calls = [as_observed(call, qualname) for call in without_representation(calls)]
    calls = floored(with_drained_results(test_cmd, work, calls, timeout_s), before)
    answers = replay_calls(test_cmd, work, calls, timeout_s) if calls else []
    kept = whole_chains(calls, [mismatch(c, a) is None for c, a in zip(calls, answers, strict=True)], qualname)
    return kept, skipped + len(recorded) - len(kept)


def record_calls(
    test_cmd: list[str],
    work: Path,
    feature: dict,
    targets: list[str],
    timeout_s: float,
    pythonpath: list[str] | None = None,
) -> tuple[list[RecordedCall], int, dict[str, str]]:
    """Run `targets` in `work` with the behaviour recorder (`feature`: see `behaviour_plugin`); (the calls it saw,
    how many it saw without a strict form, the run's per-test outcomes)."""
    run = run_tests(test_cmd, work, timeout_s, targets=targets or None, record=feature, pythonpath=pythonpath)
    if run.behaviour is None:
        return [], 0, run.outcomes
    calls: list[RecordedCall] = []
    skipped = int(run.behaviour.get("skipped", 0))
    broken = set(run.behaviour.get("broken") or [])  # instances with a call that could not be recorded
    for raw in run.behaviour.get("calls", []):
        try:
            call = RecordedCall.model_validate(raw)
        except ValidationError:
            skipped += 1
            continue
        if call.instance in broken:
            skipped += 1  # its chain misses a step: none of it replays as the tests made it
        else:
            calls.append(call)
    return calls, skipped, run.outcomes


TEST_MODULES = ("pytest", "_pytest", "pluggy", "py", "conftest")
"""Top-level modules of the test machinery: a value naming one is test code too."""


def names_test_code(call: RecordedCall) -> bool:
    """Whether the call's values name a test module (`tests/helpers.py`, `test_x.py`, `conftest.py`, as the grader's
    `tree.is_test_path` reads a module's path; and unittest's names as the miner collects them, `titlecase/tests.py`,
    `features.is_test_file`) or pytest."""
    trees = [
        call.args,
        list(call.kwargs.values()),
        call.result,
        call.raised,
        call.args_after,
        list(call.kwargs_after.values()),
    ]
    for name in _names(trees):
        module = name.partition(":")[0]
        path = module.replace(".", "/") + ".py"
        if module.split(".")[0] in TEST_MODULES or is_test_path(path) or is_test_file(path):
            return True
    return False


def _names(tree: object) -> list[str]:
    """The `module:qualname` names a tagged tree (or a list of them) refers to."""
    found: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if not isinstance(node, list) or not node:
            continue
        if node[0] in ("type", "fn", "exc", "enum", "obj") and len(node) > 1 and isinstance(node[1], str):
            found.append(node[1])
        stack.extend(item for item in node[isinstance(node[0], str) :] if isinstance(item, list))
    return found


def without_test_code(calls: list[RecordedCall]) -> list[RecordedCall]:
    """The calls that name nothing of a test module, less the whole chain of an instance one of whose calls does.

    Grading replays the calls before it writes the task's test files into the box, so a held-out test's helper
    (`inc` in toolz's `test_functoolz.py`, passed to `compose`) cannot be imported there, and a visible test file is the
    agent's to edit: a call that needs either is not behaviour the replay can judge."""
    return _without(calls, [names_test_code(call) for call in calls])


REPRESENTATION = frozenset(
    {"__getstate__", "__setstate__", "__reduce__", "__reduce_ex__", "__getnewargs__", "__getnewargs_ex__"}
)
"""Methods whose answer or argument is how an instance lays out its state (pickling's protocol): the candidate's
choice, as `as_observed` has it, so a class feature's calls to them are not replayed."""


def without_representation(calls: list[RecordedCall]) -> list[RecordedCall]:
    """A class feature's calls less those to `REPRESENTATION` methods and the whole chain of their instance (toolz's
    `Compose.__getstate__` answers the gold's `(first, funcs)`; a re-implementation that pickles another way, or
    by default, is as sound)."""
    return _without(calls, [c.target.rpartition(".")[2] in REPRESENTATION for c in calls])


def _without(calls: list[RecordedCall], flagged: list[bool]) -> list[RecordedCall]:
    """`calls` less the flagged ones and every call of an instance one of whose calls is flagged: a chain that misses a
    step does not replay as the tests made it."""
    bad = {c.instance for c, flag in zip(calls, flagged, strict=True) if flag and c.instance}
    return [c for c, flag in zip(calls, flagged, strict=True) if not flag and c.instance not in bad]


def replayed_as_recorded(
    test_cmd: list[str], work: Path, calls: list[RecordedCall], timeout_s: float, pythonpath: list[str] | None = None
) -> list[RecordedCall]:
    """The calls a lone replay against the code in `work`, exactly as grading makes it, answers as recorded."""
    answers = replay_calls(test_cmd, work, calls, timeout_s, pythonpath) if calls else []
    return [call for call, answer in zip(calls, answers, strict=True) if mismatch(call, answer) is None]


def with_drained_results(
    test_cmd: list[str], work: Path, calls: list[RecordedCall], timeout_s: float, pythonpath: list[str] | None = None
) -> list[RecordedCall]:
    """`calls` with each result the recorder left `values.PENDING` (an iterator the test was about to read) taken
    from a lone replay against the code in `work`, exactly as grading makes it: the items it drained (or what it
    raised) and the arguments after the call. A call that replay answered with an error, or with an iterator past
    `values.MAX_ITEMS`, is dropped; the caller's own replay then checks the filled-in calls like any other."""
    if not any(call.result == values.PENDING for call in calls):
        return calls
    answers = replay_calls(test_cmd, work, calls, timeout_s, pythonpath)
    kept = []
    for call, answer in zip(calls, answers, strict=True):
        if call.result != values.PENDING:
            kept.append(call)
            continue
        if not answer or "error" in answer or not isinstance(answer.get("args_after"), list):
            continue
        result, raised = answer.get("result"), answer.get("raised")
        if (result is None) == (raised is None) or (result or [None])[0] == "unserialisable":
            continue
        update = {
            "result": result,
            "raised": raised,
            "args_after": answer["args_after"],
            "kwargs_after": answer.get("kwargs_after") or {},
        }
        try:
            kept.append(RecordedCall.model_validate(call.model_dump() | update))
        except ValidationError:
            continue
    return kept


def existed_before(gold: Path, starting: Callable[[str], str | None], pythonpath: list[str]) -> Callable[[str], bool]:
    """Whether the class `module:qualname` existed before the gold's change: a module of the repository (a file under
    `gold`, found through `pythonpath`) must define it in the starting tree's text of that file (`starting(path)`,
    None where the starting tree has no such file); a module outside it (builtins, the standard library, an installed
    package) did."""

    @functools.cache
    def check(name: str) -> bool:
        module, _, qualname = name.partition(":")
        relative = module.replace(".", "/")
        for root in pythonpath:
            for candidate in (f"{relative}.py", f"{relative}/__init__.py"):
                path = posixpath.normpath(posixpath.join(root, candidate))
                if (gold / path).is_file():
                    return _defines(starting(path), qualname)
        return True

    return check


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _defines(source: str | None, qualname: str) -> bool:
    """Whether `source` defines the class `qualname` (nested classes by their dotted path) outside any function."""
    try:
        body = ast.parse(source).body if source is not None else []
    except (SyntaxError, ValueError):
        return False
    for part in qualname.split("."):
        found = None
        stack = list(body)
        while stack and found is None:
            node = stack.pop()
            if isinstance(node, ast.ClassDef) and node.name == part:
                found = node
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                stack.extend(
                    [
                        *node.body,
                        *getattr(node, "orelse", []),
                        *getattr(node, "finalbody", []),
                        *(stmt for handler in getattr(node, "handlers", []) for stmt in handler.body),
                    ]
                )
        if found is None:
            return False
        body = found.body
    return True


def floored(calls: list[RecordedCall], existed: Callable[[str], bool]) -> list[RecordedCall]:
    """`calls` with each raised exception recorded as the nearest class of its MRO that `existed` before the gold's
    change: an exception class the gold adds (`class PercentError(ValueError)`) is one a candidate cannot know, so
    any `ValueError` answers for it, as the tests' `pytest.raises(ValueError)` accepts; one that existed is still
    wanted (or a subclass of it)."""
    return [
        call.model_copy(update={"raised": exception_floor(call.raised, existed)}) if call.raised else call
        for call in calls
    ]


def exception_floor(tree: list, existed: Callable[[str], bool]) -> list:
    """A tagged exception named by the first class of its MRO (its own, then its bases' names) that `existed`."""
    if tree[:1] != ["exc"] or len(tree) != 4 or not isinstance(tree[3], list):
        return tree  # a builtin exception, which always existed
    names = [tree[1], *tree[3]]
    for index, name in enumerate(names):
        if isinstance(name, str) and existed(name):
            if index == 0:
                return tree
            return ["exc", name, tree[2]] + ([] if name.startswith("builtins:") else [names[index + 1 :]])
    return tree


def _owner(call: RecordedCall, qualname: str) -> str:
    """`module:qualname` of a `class` feature, from one of its calls."""
    return call.target.partition(":")[0] + ":" + qualname


def as_observed(call: RecordedCall, qualname: str) -> RecordedCall:
    """A `class` feature's call with every instance of the class in its answer compared by its class only
    (`values.OPAQUE`): what an instance holds, and under which names, is the candidate's choice."""
    cls = _owner(call, qualname)
    return call.model_copy(
        update={
            "result": values.opaque(call.result, cls) if call.result is not None else None,
            "args_after": [values.opaque(tree, cls) for tree in call.args_after],
            "kwargs_after": {name: values.opaque(tree, cls) for name, tree in call.kwargs_after.items()},
        }
    )


def whole_chains(calls: list[RecordedCall], replayed: list[bool], qualname: str) -> list[RecordedCall]:
    """The calls of a `class` feature (`as_observed`) that replay without the gold's representation of its instances:
    whole chains of one instance's calls (each replayed as recorded, none missing, the first on an object with no
    state yet, which the candidate's `__init__` then builds; `record_calls` drops an instance it could not record
    whole), and calls that take no instance of the class but their
    own. A chain's later calls carry no state for their instance: the replay uses the live object."""
    bad, dropped = set(), set()
    first: dict[str, RecordedCall] = {}
    for index, (call, ok) in enumerate(zip(calls, replayed, strict=True)):
        cls = _owner(call, qualname)
        own = call.args[1:] if call.instance else call.args
        if call.instance and call.instance not in first:
            first[call.instance] = call
            ok = ok and not values.holds_state_of(call.args[0], cls)
        if not ok or any(values.holds_state_of(tree, cls) for tree in [*own, *call.kwargs.values()]):
            dropped.add(index)
            bad.add(call.instance)
    kept = []
    for index, call in enumerate(calls):
        if index in dropped or (call.instance and call.instance in bad):
            continue
        if call.instance and first[call.instance] is not call:
            call = call.model_copy(
                update={"args": [values.opaque(call.args[0], _owner(call, qualname)), *call.args[1:]]}
            )
        kept.append(call)
    return kept


def blind(calls: list[RecordedCall]) -> str | None:
    """Why a stub that ignores its input would replay exactly as the gold code does, or None when some call tells
    them apart. Blind: every call leaves its arguments as they were and answers None, or raises (one exception type, or
    several, which one class can subclass all of), or answers with one of its own arguments (`return self`, a
    decorator's `return fn`): a stub needs no knowledge to do that (a feature whose effect is module state or private
    state); or gives one value for different inputs (a constant). Judged as grading compares: "as they were" and "one
    value" by `values.same` (a change to private attributes only leaves an argument as it was; answers within
    pytest.approx's tolerance, or a str enum and its value, are one value), and a call the gold answered with None
    takes any answer (`behaviour.IGNORED`), so it is left out of "one value" and "one of its arguments": `return 5`
    replays `f(1) -> None, f(2) -> 5`."""
    if not calls:
        return None
    for c in calls:
        own = slice(1 if c.instance else 0, None)  # (how a class feature's instance changed is the candidate's)
        if len(c.args_after) != len(c.args) or set(c.kwargs_after) != set(c.kwargs):
            return None
        pairs = [
            *zip(c.args_after[own], c.args[own], strict=True),
            *((v, c.kwargs[k]) for k, v in c.kwargs_after.items()),
        ]
        if not all(_alike(after, before) for after, before in pairs):
            return None
    if all(c.raised for c in calls):  # one class can subclass every type raised: `class Any(TypeError, KeyError)`
        raised = sorted({str(c.raised[1]) for c in calls})
        return f"raises {raised[0]}" if len(raised) == 1 else f"raises one of {', '.join(raised)}"
    if any(c.raised for c in calls):
        return None  # some raise, some answer: a stub must know which
    valued = [c for c in calls if c.result != IGNORED]
    if not valued:
        return "returns None"
    echoed = _echoed(valued)
    if echoed is not None:  # `return self` of a chainable method, `return fn` of a registering decorator
        return f"returns its argument {echoed}"
    if not all(_alike(valued[0].result, c.result) for c in valued[1:]):
        return None
    inputs = {json.dumps([c.args, c.kwargs], sort_keys=True) for c in calls}
    if len(inputs) > 1:  # different inputs, one answer: `return <it>` replays them all
        return f"returns the same value ({json.dumps(valued[0].result)[:80]})"
    return None  # one input and its answer: a stub must know that answer


def _echoed(calls: list[RecordedCall]) -> str | None:
    """The argument (position or keyword) every call answers with, as grading compares, if there is one."""
    if any(c.raised or c.result is None for c in calls):
        return None
    first = calls[0]
    for where in [*range(len(first.args)), *first.kwargs]:
        given = [_argument(c, where) for c in calls]
        if all(arg is not None and _alike(c.result, arg) for c, arg in zip(calls, given, strict=True)):
            return f"#{where}" if isinstance(where, int) else repr(where)
    return None


def _argument(call: RecordedCall, where: int | str) -> list | None:
    if isinstance(where, int):
        return call.args[where] if where < len(call.args) else None
    return call.kwargs.get(where)


def _alike(a, b) -> bool:
    """Whether grading's comparison tells the two recorded trees apart in neither direction."""
    return values.same(a, b) and values.same(b, a)
