"""Replay blind spots an independent review of issue 28's grading found (each a stub-passable oracle the miner kept,
or host work the candidate controls), kept as regression tests, with what held. A task the miner keeps must have an
oracle a stub that ignores its input cannot pass: a chainable method whose only effect is private state (`return
self`), a registering decorator (`return fn`), a feature whose every call raises (one class can subclass every type
raised) are refused as replay blind; comparing a set answer in the order the candidate chose does bounded work."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from composer_prime.grading import values
from composer_prime.grading.behaviour import compare
from composer_prime.mining.config import MineConfig
from composer_prime.mining.miner import Miner
from composer_prime.mining.testrun import replay_calls
from tests.e2e.mining.test_featdel_mine import one_module_repo

pytestmark = pytest.mark.slow


def mine(tmp_path, package, core, tests, extra=None):
    tests += "\n\ndef test_unrelated():  # a test that does not exercise the feature (the miner needs one)\n    assert 1 + 1 == 2\n"
    repo = one_module_repo(tmp_path, package, core, tests)
    for name, text in (extra or {}).items():
        (repo / package / name).write_text(text)
    out = tmp_path / "tasks.jsonl"
    tasks = Miner(MineConfig(repo=repo, out=out, test_timeout_s=60, min_body_lines=0), log=lambda line: None).run()
    skipped = json.loads(out.with_name("tasks.jsonl.skipped.json").read_text())["skipped"]
    return repo, tasks, skipped


def replay_stub(tmp_path, repo, calls, package, core):
    """Replay `calls` on a copy of `repo` whose `<package>/core.py` is `core`, as grading does: (share, mismatches)."""
    work = tmp_path / "work"
    shutil.copytree(repo, work)
    (work / package / "core.py").write_text(core)
    return compare(calls, replay_calls([sys.executable, "-m", "pytest"], work, calls, 60))


# ---------------------------------------------------------------------------------------------------------------
# 1a. HIGH. A registration decorator: the feature's effect is module state (as issue 28's replay blind spot) but
#     it returns its argument, so no two answers are alike and `blind` keeps it. `return fn` replays every call.
REGISTRY = '''\
_handlers = {}


def handler(fn):
    """Register `fn` under its name (a decorator): returns it unchanged."""
    key = fn.__name__.lower()
    _handlers[key] = fn
    return fn


def dispatch(name, *args):
    """Call the handler registered under `name`."""
    key = name.strip().lower()
    return _handlers[key](*args)
'''

OPS = """\
def add(a, b):
    return a + b


def neg(a):
    return -a
"""

REGISTRY_TESTS = """\
from reg import core
from reg.ops import add, neg


def test_register_then_dispatch():
    assert core.handler(add) is add
    core.handler(neg)
    assert core.dispatch("ADD ", 1, 2) == 3
    assert core.dispatch("neg", 4) == -4
"""


def test_a_decorator_returning_its_argument_is_replay_blind(tmp_path):
    repo, tasks, skipped = mine(tmp_path, "reg", REGISTRY, REGISTRY_TESTS, {"ops.py": OPS})
    task = next((t for t in tasks if t.feature.qualname == "handler"), None)
    if task is None:  # refused: the fix holds
        assert skipped["reg/core.py::handler"].startswith("replay blind"), skipped
        return
    stub = REGISTRY.replace("    key = fn.__name__.lower()\n    _handlers[key] = fn\n", "")
    share, wrong = replay_stub(tmp_path, repo, task.behaviour, "reg", stub)
    assert share < 1.0, f"kept with {len(task.behaviour)} call(s); the stub `return fn` replays them all"


# ---------------------------------------------------------------------------------------------------------------
# 1b. HIGH. A fluent method (`return self`) whose effect is private state: the answers are `self` with different
#     public attributes (`name`), so not alike and kept; a do-nothing `return self` answers each one as recorded
#     (the result and `self` after are compared by public attributes only).
TALLY = '''\
class Tally:
    """Counts words."""

    def __init__(self, name):
        self.name = name
        self._counts = {}

    def add(self, word):
        """Count one more `word`; returns the tally (chainable)."""
        key = word.strip().lower()
        self._counts[key] = self._counts.get(key, 0) + 1
        return self

    def count(self, word):
        """How often `word` was added."""
        return self._counts.get(word.strip().lower(), 0)
'''

TALLY_TESTS = """\
from tally.core import Tally


def test_fruit():
    t = Tally("fruit").add("Apple ").add("apple")
    assert t.count("apple") == 2


def test_veg():
    assert Tally("veg").add("Leek").count("leek") == 1
"""


def test_a_chainable_method_changing_only_private_state_is_replay_blind(tmp_path):
    repo, tasks, skipped = mine(tmp_path, "tally", TALLY, TALLY_TESTS)
    task = next((t for t in tasks if t.feature.qualname == "Tally.add"), None)
    if task is None:
        assert skipped["tally/core.py::Tally.add"].startswith("replay blind"), skipped
        return
    stub = TALLY.replace("        self._counts[key] = self._counts.get(key, 0) + 1\n", "")
    share, wrong = replay_stub(tmp_path, repo, task.behaviour, "tally", stub)
    assert share < 1.0, f"kept with {len(task.behaviour)} call(s); `return self` replays them all"


# ---------------------------------------------------------------------------------------------------------------
# 1c. held. A method that adds a public attribute the "before" state lacks is not blind (`same` both ways) and a
#     do-nothing stub does not replay.
LAMP = '''\
class Lamp:
    """A lamp."""

    def __init__(self, room):
        self.room = room
        self._log = []

    def label(self, text):
        """Give the lamp a label."""
        self._log.append(text)
        self.tag = text.strip().upper()
'''

LAMP_TESTS = """\
from lamp.core import Lamp


def test_label():
    lamp = Lamp("hall")
    lamp.label(" a ")
    assert lamp.tag == "A"


def test_label_again():
    lamp = Lamp("den")
    lamp.label("b")
    assert lamp.tag == "B"
"""


def test_held_a_new_public_attribute_is_a_change(tmp_path):
    repo, tasks, skipped = mine(tmp_path, "lamp", LAMP, LAMP_TESTS)
    task = next(t for t in tasks if t.feature.qualname == "Lamp.label")
    stub = LAMP.replace("        self.tag = text.strip().upper()\n", "")
    share, wrong = replay_stub(tmp_path, repo, task.behaviour, "lamp", stub)
    assert share < 1.0, wrong


# ---------------------------------------------------------------------------------------------------------------
# 2. MEDIUM. Every recorded call raises, with two or more types: the answers differ, so `blind` keeps it; one
#    exception class with every recorded type as a base (legal Python: `class Any(TypeError, ValueError, KeyError)`)
#    answers each call as recorded, and passes each `pytest.raises`. No knowledge of which input raises what.
FAIL = '''\
_ERRORS = {"type": TypeError, "value": ValueError, "key": KeyError}


def fail(kind, message):
    """Raise the error registered for `kind` with `message`."""
    error = _ERRORS[kind]
    raise error(message)
'''

FAIL_TESTS = """\
import pytest

from oops import core


def test_type():
    with pytest.raises(TypeError):
        core.fail("type", "t")


def test_value():
    with pytest.raises(ValueError):
        core.fail("value", "v")


def test_key():
    with pytest.raises(KeyError):
        core.fail("key", "k")
"""

FAIL_STUB = """\
class _Any(TypeError, ValueError, KeyError):
    pass


def fail(kind, message):
    raise _Any(message)
"""


def test_an_all_raising_feature_is_blind_to_one_exception_with_every_base(tmp_path):
    repo, tasks, skipped = mine(tmp_path, "oops", FAIL, FAIL_TESTS)
    task = next((t for t in tasks if t.feature.qualname == "fail"), None)
    if task is None:
        assert skipped["oops/core.py::fail"].startswith("replay blind"), skipped
        return
    share, wrong = replay_stub(tmp_path, repo, task.behaviour, "oops", FAIL_STUB)
    assert share < 1.0, f"kept with {len(task.behaviour)} call(s) raising 3 types; one multi-base class replays all"


def test_held_raising_where_the_gold_returned_is_wrong_whatever_bases_it_claims():
    from composer_prime.grading.behaviour import RecordedCall, mismatch

    call = RecordedCall(target="m:f", args=[["int", "1"]], result=["none"], args_after=[["int", "1"]])
    forged = {"raised": ["exc", "m:X", [], ["builtins:Exception"]], "args_after": [["int", "1"]], "kwargs_after": {}}
    assert mismatch(call, forged)
    # where the gold returned None any answer is taken (`behaviour.IGNORED`); where it returned a value, an exception
    # *returned* with that value's tag claimed as a base is not that value
    call = RecordedCall(target="m:f", args=[["int", "1"]], result=["int", "7"], args_after=[["int", "1"]])
    forged = {"result": ["exc", "builtins:TypeError", [], ["int"]], "args_after": [["int", "1"]], "kwargs_after": {}}
    assert mismatch(call, forged)


# ---------------------------------------------------------------------------------------------------------------
# 3. MEDIUM (availability). `_unordered` is quadratic in the candidate's order: the host compares (synchronously,
#    `grader._grade_tree` -> `behaviour.compare` on the env server's loop) a set answer the candidate wrote in
#    reverse canonical order, each float padded with zeros up to the 64 MB line limit (`float()` is linear in it).
SLOW = """
import json, time
from composer_prime.grading import values
n = {n}
exp = ["set", [["{tag}", repr(i + 0.5) if "{tag}" == "float" else str(i)] for i in range(n)]]
pad = "0" * {pad}
act = ["set", [[item[0], item[1] + pad] for item in reversed(exp[1])]]
t = time.monotonic()
values.same(exp, act)
print(time.monotonic() - t)
"""


@pytest.mark.parametrize(("n", "tag", "pad"), [(300, "float", 200_000), (5000, "int", 0)])
def test_comparing_a_set_answer_does_bounded_work(n, tag, pad):
    """The candidate's process writes the answer in reverse canonical order (floats padded with zeros towards the 64 MB
    line limit): a first-match scan over every pair held the host's event loop 9.6 s and 11.6 s; matching by canonical
    text first, at most `values.MAX_INEXACT` pairwise, answers at once (the import alone is left out of the time)."""
    code = SLOW.format(n=n, tag=tag, pad=pad)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-800:]
    assert float(run.stdout.split()[-1]) < 2.0, f"values.same took {run.stdout.split()[-1]} s on a {n}-item set"


P = __import__("collections").namedtuple("P", "x y")


def test_held_equivalences_compare_what_is_stored():
    """The `==` equivalences compare stored items: a namedtuple, dict subclass or frozenset with other items, a bool for
    a different int, and a claimed namedtuple wrapper around a wrong tuple are all still different."""
    from collections import OrderedDict

    d = lambda v: values.dump(v)  # noqa: E731

    class Shadow(dict):
        def __getitem__(self, key):
            return 1

        def items(self):
            return [("a", 1)]

    assert not values.same(d((1, 2)), d(P(2, 1)))
    assert not values.same(d({"a": 1}), d(Shadow(a=2)))
    assert not values.same(d({"a": 1}), d(OrderedDict(a=1, b=2)))
    assert not values.same(d({1, 2}), d(frozenset({1})))
    assert not values.same(d(2), d(True)) and not values.same(d(0), d(True)) and not values.same(d(True), d(0))
    assert not values.same(["tuple", [["int", "1"]]], ["obj", "x:Y", ["tuple", [["int", "2"]]]])
    assert not values.same(["tuple", [["int", "1"]]], ["obj", "x:Y", ["list", [["int", "1"]]]])
