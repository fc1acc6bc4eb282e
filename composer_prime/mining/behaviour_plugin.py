"""A pytest plugin (stdlib only) that records the calls into one feature made while the tests run.

The miner loads it with `-p _composer_prime_behaviour` on the original code, beside `_composer_prime_values` (a copy
of `composer_prime.grading.values`). `COMPOSER_PRIME_BEHAVIOUR` holds `{"root", "path", "qualname", "kind", "out"}`:
every call of a function whose file is `path` under `root` and whose qualname is the feature (`function`, `method`),
one of its methods (`class`), or any function of the file (`module`) is recorded; with `kind` `package` (swe-gym's
gold patch), every call a test makes into the package: a function of a non-test file under `root` called straight from
a frame of a test file (a test, a fixture, a helper), during one of the tests named in `tests`. Recorded: the
arguments at entry, then the result or the raised exception and the arguments after the call, each in the strict
tagged format. A call whose
values have no strict form is skipped and counted; so are coroutines, lambdas and nested functions. A call that
returns an iterator (a generator function's, recorded when the test first reads from it, or any function's `map`,
`iter` or generator) is recorded with its result `values.PENDING`: consuming it would take the items from the test,
so the miner fills it in from the gold's own lone replay, which drains it.
At session end `{"calls": [...], "skipped": n}` is written to `out`. At most `max_calls` calls are kept (default
`MAX_CALLS`), and, where the spec names them, at most `per_test` of one test and `per_target` into one function (the
suite-wide recording of `composer_prime.mining.regression` keeps a few calls of many tests, not many of one); a call
whose tagged values take more than `max_bytes` characters of JSON is skipped and counted.

For a `class` feature the candidate chooses how an instance keeps its state, so the replay must not rebuild one from
the gold's attributes: each instance of the feature's class that a traced method receives as its first argument is
named `<test>#<n>` in the call's `instance`, and the replay makes that instance's calls, in order, on one live object
of the candidate's class (`composer_prime.mining.behaviour` keeps whole chains only). So the recorder never
serialises what such an instance holds (which `__slots__` would refuse): every instance of the class is dumped by class
only (`values.OPAQUE`), except the first argument of an instance's first call, dumped as an object with no state when
it has none yet (no attribute in its `__dict__` or any slot), which is how the replay builds it; an instance first seen
with state (made by `copy`, say) cannot be rebuilt, and none of its calls is kept.

The hook is `sys.settrace` on the main thread: the global function only answers `call` events, and only a feature's
own frames get a local tracer, which sees the exception that leaves the frame (`exception` then `return` with None).
"""

from __future__ import annotations

import json
import os
import sys
import types

import _composer_prime_values as values
import pytest

_SPEC = json.loads(os.environ.get("COMPOSER_PRIME_BEHAVIOUR", "{}"))
_ROOT = os.path.realpath(_SPEC.get("root", os.getcwd()))
MAX_CALLS = 300
_MAX_CALLS = int(_SPEC.get("max_calls") or MAX_CALLS)
_PER_TEST = int(_SPEC.get("per_test") or 0)  # 0: no cap
_PER_TARGET = int(_SPEC.get("per_target") or 0)
_MAX_BYTES = int(_SPEC.get("max_bytes") or 0)
_per_test: dict[str, int] = {}
_per_target: dict[str, int] = {}
_GENERATOR = 0x20
_UNTRACEABLE = 0x80 | 0x100 | 0x200  # coroutine, iterable coroutine, async generator
_TEST_DIRS = {"tests", "test", "testing"}
_PACKAGE = _SPEC.get("kind") == "package"
_TESTS = set(_SPEC.get("tests", []))
_scope: dict[object, bool] = {}
_test_files: dict[str, bool] = {}
_calls: list[dict] = []
_seen: set[str] = set()
_skipped = [0]
_test = [""]
_resumed: dict[int, object] = {}
"""id -> a generator frame already recorded (kept alive, so that its id is not reused within the test), per test."""
_broken: set[str] = set()
"""Instances with a call that could not be recorded."""
_instances: dict[int, tuple[object, str]] = {}
"""id -> (the instance, kept alive so that its id is not reused within the test; its name), per test."""
_opaque: dict[type, str] = {}
"""The feature's class, once a traced method received one of its instances -> its `module:qualname`: its instances are
dumped by class only."""


def _relative(filename: str) -> str | None:
    if filename.startswith("<"):  # `<frozen os>`, `<string>`: no file, and realpath would put it under the cwd
        return None
    real = os.path.realpath(filename)
    return os.path.relpath(real, _ROOT).replace(os.sep, "/") if real.startswith(_ROOT + os.sep) else None


def _is_test_file(filename: str) -> bool:
    """A file under `root` that the grader treats as a test file (`grading.tree.is_test_path`)."""
    if filename not in _test_files:
        path = _relative(filename)
        parts = path.split("/") if path else []
        name = parts[-1] if parts else ""
        _test_files[filename] = bool(parts) and (
            name.startswith("test")  # the miner's rule (`mining.features.is_test_file`): unittest's names too
            or name.endswith(("_test.py", "tests.py"))
            or name == "conftest.py"
            or bool(_TEST_DIRS & set(parts))
        )
    return _test_files[filename]


def _in_scope(code) -> bool:
    if code not in _scope:
        qualname = getattr(code, "co_qualname", code.co_name)
        path = _relative(code.co_filename)
        feature, kind = _SPEC.get("qualname", ""), _SPEC.get("kind")
        wanted = path == _SPEC.get("path") and "<" not in qualname
        if kind == "package":
            wanted = path is not None and not _is_test_file(code.co_filename) and "<" not in qualname
        elif kind in ("function", "method"):
            wanted = wanted and qualname == feature
        elif kind == "class":
            wanted = wanted and qualname.startswith(feature + ".")
        _scope[code] = wanted and (_PACKAGE or not code.co_flags & _UNTRACEABLE)
    return _scope[code]


def _arguments(frame) -> tuple[list, dict]:
    code, local = frame.f_code, frame.f_locals
    names = code.co_varnames
    positional = [local[name] for name in names[: code.co_argcount]]
    keywords = {name: local[name] for name in names[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]}
    at = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & 0x04:  # *args
        positional += list(local[names[at]])
        at += 1
    if code.co_flags & 0x08:  # **kwargs
        keywords.update(local[names[at]])
    return positional, keywords


def _without_sentinels(frame, positional: list, keywords: dict) -> None:
    """Leave out the trailing positional and the keyword-only arguments that hold the function's own default where
    that default has no strict form: a sentinel (`__marker = object()` in `Cache.pop(self, key, default=__marker)`)
    the test cannot have passed. The replay then calls without them and the candidate's own default applies, as in
    the test's call (passing the gold's sentinel would tell a re-implementation that a default was given)."""
    try:
        qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        function = values.resolve(f"{frame.f_globals.get('__name__')}:{qualname}")
    except Exception:  # noqa: BLE001 - anything a lookup by name can raise: nothing is left out
        return
    code = getattr(function, "__code__", None)
    if code is not frame.f_code:
        return
    defaults, kwdefaults = function.__defaults__ or (), function.__kwdefaults__ or {}
    names = code.co_varnames[: code.co_argcount]
    first_default = code.co_argcount - len(defaults)
    while len(positional) <= len(names) and len(positional) > first_default:  # never past a `*args` item
        at = len(positional) - 1
        if positional[at] is not defaults[at - first_default] or _has_form(positional[at]):
            break
        positional.pop()
    for name in list(keywords):
        if name in kwdefaults and keywords[name] is kwdefaults[name] and not _has_form(keywords[name]):
            del keywords[name]


def _has_form(value) -> bool:
    try:
        values.dump(value, _opaque)
    except Exception:  # noqa: BLE001 - Unserialisable, or a value whose lookups raise
        return False
    return True


class _Call:
    def __init__(self, frame):
        self.positional, self.keywords = _arguments(frame)
        _without_sentinels(frame, self.positional, self.keywords)
        self.instance, first = _instance(frame, self.positional)
        try:
            self.record = {
                "test": _test[0],
                "target": f"{frame.f_globals.get('__name__')}:{getattr(frame.f_code, 'co_qualname', '')}",
                "args": [values.dump(arg, _opaque) for arg in self.positional],
                "kwargs": {name: values.dump(arg, _opaque) for name, arg in self.keywords.items()},
            }
        except Exception as exc:  # noqa: BLE001 - no strict form, or a value whose lookups raise: not recorded
            self.skip()
            raise values.Unserialisable(str(exc)) from exc
        if first:  # the replay builds it as `cls.__new__(cls)`: only an instance with no state yet is rebuilt so
            if not _stateless(self.positional[0]):
                self.skip()
                raise values.Unserialisable("an instance first seen with state")
            self.record["args"][0] = ["obj", _opaque[type(self.positional[0])], ["dict", []]]
        if self.instance is not None:
            self.record["instance"] = self.instance
        self.pending = None

    def skip(self):
        """Count a call that cannot be recorded; its instance's chain misses a step, so none of it replays."""
        _skipped[0] += 1
        if self.instance is not None:
            _broken.add(self.instance)

    def trace(self, frame, event, arg):
        if event == "exception":
            self.pending = arg[1]
        elif event == "line":
            self.pending = None
        elif event == "return":
            self.finish(arg)
        return self.trace

    def finish(self, result):
        try:
            if self.pending is not None and result is None:
                self.record["raised"] = values.dump(self.pending, _opaque)
            elif values.is_iterator(result):  # the test is about to read it: the gold's replay drains it instead
                self.record["result"] = values.PENDING
            else:
                self.record["result"] = values.dump(result, _opaque)
            self.record["args_after"] = [values.dump(arg, _opaque) for arg in self.positional]
            self.record["kwargs_after"] = {name: values.dump(arg, _opaque) for name, arg in self.keywords.items()}
        except Exception:  # noqa: BLE001 - as at entry: the traced test must never see the recorder's error
            self.skip()
            return
        key = json.dumps(
            [self.record["target"], self.record["args"], self.record["kwargs"], self.record.get("instance")],
            sort_keys=True,
        )
        if key in _seen or len(_calls) >= _MAX_CALLS:
            return
        test, target = self.record["test"], self.record["target"]
        if (_PER_TEST and _per_test.get(test, 0) >= _PER_TEST) or (
            _PER_TARGET and _per_target.get(target, 0) >= _PER_TARGET
        ):
            return
        if _MAX_BYTES and len(json.dumps(self.record)) > _MAX_BYTES:
            _skipped[0] += 1
            return
        _seen.add(key)
        _per_test[test] = _per_test.get(test, 0) + 1
        _per_target[target] = _per_target.get(target, 0) + 1
        _calls.append(self.record)


def _instance(frame, positional: list) -> tuple[str | None, bool]:
    """The name of the feature class's instance a method of a `class` feature was called on (None otherwise), and
    whether this is the first call seen on it."""
    if _SPEC.get("kind") != "class" or not positional:
        return None, False
    owner = type(positional[0])
    if owner.__qualname__ != _SPEC.get("qualname") or owner.__module__ != frame.f_globals.get("__name__"):
        return None, False
    if owner not in _opaque:
        _opaque[owner] = values.name_of(owner)
    known = _instances.get(id(positional[0]))
    first = known is None or known[0] is not positional[0]
    if first:
        known = (positional[0], f"{_test[0]}#{len(_instances)}")
        _instances[id(positional[0])] = known
    return known[1], first


def _stateless(obj) -> bool:
    """Whether `obj` holds no attribute yet: an empty `__dict__` and no slot set (read through the slots' member
    descriptors, never through the object's own `__getattribute__`)."""
    try:
        state = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        state = {}
    if type(state) is not dict or state:
        return False
    for klass in type(obj).__mro__:
        for slot in vars(klass).values():
            if isinstance(slot, types.MemberDescriptorType) and slot.__objclass__ is klass:
                try:
                    slot.__get__(obj, klass)
                except AttributeError:
                    continue
                return False
    return True


def _global(frame, event, arg):
    if event != "call" or not _in_scope(frame.f_code) or frame.f_globals.get("__name__") == "__main__":
        return None
    if _PACKAGE and (frame.f_back is None or not _is_test_file(frame.f_back.f_code.co_filename)):
        return None  # a call inside the package (or from pytest): only the tests' own calls are the behaviour
    if frame.f_code.co_flags & _UNTRACEABLE:  # a coroutine's result is not its return value
        _skipped[0] += 1
        return None
    generator = bool(frame.f_code.co_flags & _GENERATOR)
    if generator and id(frame) in _resumed:
        return None  # a later resume of a generator already recorded (each resume is a `call` event)
    if generator:
        _resumed[id(frame)] = frame
    try:
        call = _Call(frame)
    except values.Unserialisable:
        return None  # counted by the call
    except KeyError:
        _skipped[0] += 1
        return None
    if generator:  # first read by the test: its arguments as they are now; its items from the gold's replay
        call.finish(iter(()))
        return None
    return call.trace


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _test[0] = item.nodeid
    _instances.clear()
    _resumed.clear()
    if _PACKAGE and item.nodeid not in _TESTS:
        yield
        return
    previous = sys.gettrace()
    sys.settrace(_global)
    try:
        yield
    finally:
        sys.settrace(previous)


def pytest_sessionfinish(session, exitstatus):
    out = _SPEC.get("out")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump({"calls": _calls, "skipped": _skipped[0], "broken": sorted(_broken)}, handle)
