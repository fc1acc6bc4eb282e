"""The recording side of issue 39's relaxed replay, mined for real: a generator's items are recorded (drained by a
lone replay of the gold, never taken from the test), an iterator class that returns itself still replays call by
call, and an exception class the gold adds is recorded as the nearest base the starting tree has. Honest candidates
unlike the gold then replay at 1.0 and stubs below it."""

from __future__ import annotations

import pytest

from tests.e2e.grading.test_replay_blind_spots import mine, replay_stub

pytestmark = pytest.mark.slow

CORE = '''\
class RangeError(ValueError):
    """A value outside [0, 100]."""


def check(value):
    """`value` if it is within [0, 100]."""
    if not 0 <= value <= 100:
        raise RangeError(value)
    return value


def evens(values):
    """The even numbers of `values`, lazily."""
    for value in values:
        if value % 2 == 0:
            yield value


class Countdown:
    """Counts down from `start` to 1."""

    def __init__(self, start):
        self.left = start

    def __iter__(self):
        return self

    def __next__(self):
        if self.left <= 0:
            raise StopIteration
        self.left -= 1
        return self.left + 1
'''
TESTS = """\
import pytest


def test_check():
    from nums.core import check

    assert check(5) == 5
    with pytest.raises(ValueError):
        check(120)


def test_evens():
    from nums.core import evens

    assert list(evens([1, 2, 3, 4])) == [2, 4]
    assert list(evens([6, 7])) == [6]


def test_countdown():
    from nums.core import Countdown

    counter = Countdown(2)
    assert iter(counter) is counter
    assert next(counter) == 2
    assert next(counter) == 1
"""


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("relaxed-mine")
    repo, tasks, skipped = mine(root, "nums", CORE, TESTS)
    return root, repo, {task.feature.qualname or task.feature.path: task for task in tasks}, skipped


def test_a_generators_items_are_recorded_and_an_honest_list_replays(mined, tmp_path) -> None:
    _, repo, tasks, skipped = mined
    task = tasks.get("evens")
    assert task is not None, skipped
    results = sorted(str(call.result) for call in task.behaviour)
    assert results == [str(["iter", [["int", "2"], ["int", "4"]]]), str(["iter", [["int", "6"]]])], task.behaviour
    honest = CORE.replace(
        "    for value in values:\n        if value % 2 == 0:\n            yield value\n",
        "    return [value for value in values if not value % 2]\n",
    )
    assert replay_stub(tmp_path, repo, task.behaviour, "nums", honest) == (1.0, [])
    stub = CORE.replace("        if value % 2 == 0:\n", "        if value:\n")
    assert replay_stub(tmp_path / "stub", repo, task.behaviour, "nums", stub)[0] < 1.0


def test_an_iterator_that_returns_itself_replays_call_by_call(mined) -> None:
    """`__iter__` returning `self` is the class feature's own instance, dumped by class only before anything would
    drain it (draining it would empty the live object the chain's `__next__` calls use)."""
    _, _, tasks, skipped = mined
    task = tasks.get("Countdown")
    assert task is not None, skipped
    targets = [call.target.rpartition(".")[2] for call in task.behaviour]
    assert targets == ["__init__", "__iter__", "__next__"], task.behaviour  # (a repeated call is recorded once)
    assert task.behaviour[1].result == ["obj", "nums.core:Countdown", ["opaque"]]
    assert task.behaviour[2].result == ["int", "2"]


def test_an_exception_class_the_gold_adds_is_recorded_as_its_base(mined, tmp_path) -> None:
    """Deleting the module deletes `RangeError` with it: its task wants any `ValueError`. Deleting `check` alone
    leaves `RangeError` in the starting tree: its task still wants a `RangeError`."""
    _, repo, tasks, skipped = mined
    module, function = tasks.get("nums/core.py"), tasks.get("check")
    assert module is not None and function is not None, (sorted(tasks), skipped)
    assert [c.raised[:2] for c in module.behaviour if c.raised] == [["exc", "builtins:ValueError"]], module.behaviour
    assert [c.raised[:2] for c in function.behaviour if c.raised] == [["exc", "nums.core:RangeError"]]
    plain = CORE.replace("        raise RangeError(value)", "        raise ValueError(value)").replace(
        'class RangeError(ValueError):\n    """A value outside [0, 100]."""\n\n\n', ""
    )
    calls = [c for c in module.behaviour if c.target.endswith(":check")]
    assert replay_stub(tmp_path, repo, calls, "nums", plain) == (1.0, [])
    wrong = plain.replace("raise ValueError(value)", "raise TypeError(value)")
    assert replay_stub(tmp_path / "wrong", repo, calls, "nums", wrong)[0] < 1.0
    keeps = CORE.replace("        raise RangeError(value)", "        raise ValueError(value)")
    function_calls = [c for c in function.behaviour if c.raised]
    assert replay_stub(tmp_path / "keeps", repo, function_calls, "nums", keeps)[0] < 1.0
