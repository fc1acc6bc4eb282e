"""A pytest plugin (stdlib only) that records, per test, which functions of the repository it called.

The miner copies this file next to the suite's run as `_composer_prime_trace.py` and loads it with
`-p _composer_prime_trace`, so it works under any launcher that passes pytest arguments through. During each
test's setup, call and teardown a profile hook notes `(path, qualname)` of every Python function entered whose
file lies under `COMPOSER_PRIME_TRACE_ROOT`; at session end the map `{test id: [[path, qualname], ...]}` is
written as JSON to `COMPOSER_PRIME_TRACE_OUT`.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest

_ROOT = os.path.realpath(os.environ.get("COMPOSER_PRIME_TRACE_ROOT", os.getcwd()))
_OUT = os.environ.get("COMPOSER_PRIME_TRACE_OUT")
_calls: dict[str, set[tuple[str, str]]] = {}
_current: set[tuple[str, str]] | None = None
_paths: dict[str, str | None] = {}


def _relative(filename: str) -> str | None:
    if filename not in _paths:
        real = os.path.realpath(filename)
        inside = real.startswith(_ROOT + os.sep)
        _paths[filename] = os.path.relpath(real, _ROOT).replace(os.sep, "/") if inside else None
    return _paths[filename]


def _profile(frame, event, arg):
    if event != "call" or _current is None:
        return
    code = frame.f_code
    path = _relative(code.co_filename)
    if path is not None:
        _current.add((path, getattr(code, "co_qualname", code.co_name)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    _current = _calls.setdefault(item.nodeid, set())
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        _current = None


def pytest_sessionfinish(session, exitstatus):
    if _OUT:
        with open(_OUT, "w", encoding="utf-8") as handle:
            json.dump({test: sorted(calls) for test, calls in _calls.items()}, handle)
