"""Canaries drawn from the suite, run by a real pytest: parametrized cases, class and unittest methods are copied and
mutated, every mutant kind is written, honest code leaves every canary as expected, and forgers pass a mutant."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from composer_prime.grading.behaviour import RecordedCall
from composer_prime.grading.canaries import KINDS, import_effects, planted, verdicts
from composer_prime.grading.grader import Suite, judge, run_suite
from composer_prime.grading.mutants import Answer, answers

pytestmark = pytest.mark.slow  # a real pytest session in a subprocess per case: outside the fast tier

SUITE = """\
import unittest

import pytest

from pkg import double, name, total


def helper(n):
    return double(n)


@pytest.mark.parametrize("n, want", [(1, 2), (2, 4), (5, 10)])
def test_double(n, want):
    assert helper(n) == want


def test_name():
    assert name() == "abc"


class TestShop:
    def test_total(self):
        assert total([1, 2]) == 3

    def test_empty(self):
        assert total([]) == 0


class T(unittest.TestCase):
    def test_eq(self):
        self.assertEqual(double(3), 6)

    def test_side(self):
        double(1)
"""

HONEST = (
    "def double(n):\n    return n + n\n\n\ndef name():\n    return 'ab' + 'c'\n\n\ndef total(xs):\n    return sum(xs)\n"
)

# what the gold answered, as the replay records it: `double(4)` and `total([1, 2, 3])` are calls no test of SUITE makes
KNOWN = [Answer("double", (4,), (), 8), Answer("total", ([1, 2, 3],), (), 6), Answer("double", (3,), (), 6)]

# a broken implementation whose values equal anything but a one-element list: it tells the wrapped mutant apart
SLY = """\
class Sly:
    def __eq__(self, other):
        return not (isinstance(other, list) and len(other) == 1)

    def __ne__(self, other):
        return not self.__eq__(other)


def double(n):
    return Sly()


def name():
    return Sly()


def total(xs):
    return Sly()
"""

# a forger in a root conftest.py: every failed call report becomes a pass
FORGER = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        report.outcome = "passed"
"""


def run(tmp_path: Path, package: str, prefer: frozenset[str], kinds=KINDS, conftest: str | None = None):  # type: ignore[no-untyped-def]
    """Plant canaries for tests/test_ops.py, run pytest on it and them; (canaries, outcomes, void reasons)."""
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_ops.py").write_text(SUITE)
    (tmp_path / "pkg.py").write_text(package)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    if conftest is not None:
        (tmp_path / "conftest.py").write_text(conftest)
    made = planted("tests/test_ops.py", SUITE, {"tests/test_ops.py"}, prefer, kinds, KNOWN)
    return (made, *run_beside(tmp_path, "tests/test_ops.py", made))


def run_beside(tmp_path: Path, original: str, made: list, first: bool = False):  # type: ignore[no-untyped-def]
    """Write the canaries `made` beside `original`, run pytest on all of them (the canaries `first` or last);
    (outcomes, void reasons, stdout)."""
    for canary in made:
        (tmp_path / canary.path).write_text(canary.source)
    paths = [original, *(c.path for c in made)]
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rA",
        "-p",
        "no:cacheprovider",
        *(paths[1:] + paths[:1] if first else paths),
    ]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    outcomes = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "XFAIL", "XPASS", "SKIPPED") and "::" in rest:
            outcomes[rest.split(" - ")[0]] = word
    expect = {k: v for c in made for k, v in c.expect.items()}
    return outcomes, verdicts(expect, outcomes), done.stdout


def test_every_kind_is_planted_and_honest_code_leaves_every_canary_as_expected(tmp_path: Path) -> None:
    made, outcomes, void, out = run(tmp_path, HONEST, frozenset({"test_double"}))
    kinds = {kind for canary in made for kind in canary.kinds.values()}
    assert kinds == {*KINDS, "copy"}, made
    assert void == [], out
    # keyed without the case, judged case by case: each parametrized case of a canary came back
    keys = [k for canary in made for k in canary.expect]
    for key in keys:
        assert any(test == key or test.startswith(key + "[") for test in outcomes), (key, out)
    double = [k for k in keys if k.endswith("::test_double")]
    assert double and all(f"{double[0]}[{case}]" in outcomes for case in ("1-2", "2-4", "5-10"))
    # mutants of passing tests failed, copies passed
    for canary in made:
        for test, expected in canary.expect.items():
            got = {o for t, o in outcomes.items() if t == test or t.startswith(test + "[")}
            assert got == ({"PASSED"} if expected.startswith("=") else {"FAILED"}), (test, got, canary.source)


def test_class_and_unittest_methods_are_copied_and_mutated(tmp_path: Path) -> None:
    for prefer in ({"TestShop::test_total"}, {"T::test_eq"}, {"T::test_side"}):
        made, outcomes, void, out = run(tmp_path, HONEST, frozenset(prefer))
        assert void == [], out
        quals = {qual: kind for canary in made for qual, kind in canary.kinds.items()}
        (target,) = prefer
        assert target in quals and (quals[target] != "copy" or target == "T::test_side"), quals
        if target == "T::test_eq":
            written = ("self.assertEqual(double(3), [6])", "self.assertEqual(double(3), 7)", "(double(4), 6)")
            assert any(w in c.source for c in made for w in written), made
        if target == "T::test_side":
            assert quals[target] == "tail"


def test_a_unittest_only_file_gets_canaries_of_its_own_shape() -> None:
    source = (
        "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(1 + 1, 2)\n"
    )
    made = planted("tests/test_u.py", source, set())
    assert made and all("class T(unittest.TestCase):" in c.source for c in made)
    assert all(key.endswith("::T::test_a") for c in made for key in c.expect)


def test_the_perturbed_mutant_catches_a_value_that_tells_the_wrapped_one_apart(tmp_path: Path) -> None:
    """Potent without its defence: with the wrapped mutant only, a broken implementation returning `Sly` values
    leaves every canary as expected; the perturbed mutant (same type and shape as the expected literal) passes for
    it, and that voids."""
    prefer = frozenset({"test_name"})
    _, outcomes, void, out = run(tmp_path, SLY, prefer, kinds=("wrapped",))
    assert outcomes["tests/test_ops.py::test_name"] == "PASSED" and void == [], out
    _, _, void, out = run(tmp_path, SLY, prefer)
    assert any("came back PASSED (its original passed)" in v for v in void), out


def test_a_forger_passes_a_mutant_and_voids_also_on_parametrized_cases(tmp_path: Path) -> None:
    _, _, void, out = run(tmp_path, HONEST, frozenset({"test_double"}), conftest=FORGER)
    assert any("::test_double[" in v and "its original passed" in v for v in void), out


def test_bad_sources_plant_nothing() -> None:
    assert planted("tests/test_x.py", "def test_a(:\n", set()) == []
    assert planted("tests/test_x.py", "x = 1\n", set()) == []
    assert planted("tests/test_x.py", "[" * 100_000, set()) == []


CALLS_A_TEST = """\
def test_is_valid(check=abs, want=1):
    assert check(-1) == want


def test_is_partial():
    test_is_valid(check=lambda x: x * x, want=1)
"""


def test_a_test_that_another_calls_is_copied_beside_it_and_never_mutated(tmp_path: Path) -> None:
    """toolz's `test_is_partial` calls `test_is_valid`: a canary copy without it failed with NameError (the gold
    voided), and a mutant of it would fail the copy that calls it."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sig.py").write_text(CALLS_A_TEST)
    for round in range(12):  # copies alone half the time: the copy is drawn from either test
        made = planted("tests/test_sig.py", CALLS_A_TEST, {"tests/test_sig.py"}, kinds=KINDS if round % 2 else ())
        assert all(kind in ("copy", "tail") for c in made for kind in c.kinds.values()), made
        assert all(c.kinds.get("test_is_valid") in (None, "copy") for c in made)
        for canary in made:
            (tmp_path / canary.path).write_text(canary.source)
        argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *(c.path for c in made)]
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        for canary in made:
            for test, expected in canary.expect.items():
                want = "PASSED" if expected.startswith("=") else "FAILED"
                assert f"{want} {test}" in done.stdout, done.stdout
            (tmp_path / canary.path).unlink()


def test_a_tab_indented_file_gets_canaries_that_parse_and_fail_as_mutants(tmp_path: Path) -> None:
    """pathspec 0.12.1 indents its tests with tabs: the `tail` mutant's `assert False` came with spaces, the canary
    file did not compile, and every one of its canaries came back not run, so gold scored 0.0 and validation dropped
    every mined task. The mutant now takes the body's own indentation."""
    source = (
        "import unittest\n\nfrom pkg import double\n\n\nclass T(unittest.TestCase):\n"
        "\tdef test_is(self):\n\t\tself.assertIs(double(2) > 3, True)\n\n"
        "\tdef test_eq(self):\n\t\tself.assertEqual(double(3), 6)\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_tabs.py").write_text(source)
    (tmp_path / "pkg.py").write_text("def double(n):\n    return 2 * n\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    made = planted("tests/test_tabs.py", source, {"tests/test_tabs.py"}, frozenset({"T::test_is"}), ("tail",))
    assert [kind for c in made for kind in c.kinds.values()].count("tail") == 1
    outcomes, void, out = run_beside(tmp_path, "tests/test_tabs.py", made)
    assert void == [], out
    expect = {k: v for c in made for k, v in c.expect.items()}
    assert "FAILED" in {outcomes[k] for k, v in expect.items() if v.startswith("!")}, out
    one_liner = "def test_x(): assert_ok()\n"
    assert planted("tests/test_one.py", one_liner, set(), kinds=("tail",)) == [] or all(
        "tail" not in c.kinds.values() for c in planted("tests/test_one.py", one_liner, set(), kinds=("tail",))
    )


NESTED = """\
import pytest

from pkg import double

CASES = [(1, 2), (2, 4)]


def check(n, want):
    assert double(n) == want


def test_loop():
    for n, want in CASES:
        assert double(n) == want


def test_with(tmp_path):
    with open(tmp_path / "x", "w") as handle:
        handle.write("x")
        assert double(3) == 6


def test_if():
    if double(1) > 0:
        assert double(4) == 8


def test_helper():
    check(5, 10)


def test_raises_block_is_not_entered():
    with pytest.raises(ZeroDivisionError):
        assert 1 / 0 == 1
"""


def test_mutants_reach_loops_with_and_if_blocks_and_helpers(tmp_path: Path) -> None:
    """Each test's equality is nested or in a helper: every one gets a wrapped mutant (a guarded one where its block
    may not run, a helper copy the mutant alone calls), honest code fails every mutant and passes every copy; the
    `pytest.raises` block is never mutated (its assert never runs: the mutant would pass for honest code)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_nested.py").write_text(NESTED)
    (tmp_path / "pkg.py").write_text("def double(n):\n    return n + n\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    for name in ("test_loop", "test_with", "test_if", "test_helper", "test_raises_block_is_not_entered"):
        made = planted("tests/test_nested.py", NESTED, {"tests/test_nested.py"}, frozenset({name}), ("wrapped", "tail"))
        kinds = {qual: kind for canary in made for qual, kind in canary.kinds.items() if kind != "copy"}
        assert kinds[name] == ("tail" if name.startswith("test_raises") else "wrapped"), made
        if name == "test_helper":
            assert any("check_" in c.source and "== [want]" in c.source for c in made), made
            assert all("def check(n, want):\n    assert double(n) == want\n" in c.source for c in made)
        if name in ("test_loop", "test_if"):
            assert any("_reached.append(1); assert" in c.source for c in made), made
        outcomes, void, out = run_beside(tmp_path, "tests/test_nested.py", made)
        assert void == [], out
        for canary in made:
            for test, expected in canary.expect.items():
                if expected.startswith("!"):
                    assert outcomes[test] == "FAILED", (test, out)
            (tmp_path / canary.path).unlink()


def test_a_guarded_mutant_fails_when_its_block_does_not_run(tmp_path: Path) -> None:
    """The mutated assert lies in a loop that runs no time: without the guard the mutant passed for honest code (a
    void on a correct fix); with it, it fails."""
    source = "from pkg import double\n\n\ndef test_none():\n    for n in []:\n        assert double(n) == 2 * n\n"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_empty.py").write_text(source)
    (tmp_path / "pkg.py").write_text("def double(n):\n    return n + n\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    made = planted("tests/test_empty.py", source, {"tests/test_empty.py"}, kinds=("wrapped",))
    outcomes, void, out = run_beside(tmp_path, "tests/test_empty.py", made)
    assert void == [] and "FAILED" in outcomes.values(), out


@pytest.mark.parametrize("separator", ["\f", "\u2028", "\x0b", "\x1c", "\x85"])
def test_canaries_split_lines_as_the_tokenizer_does(tmp_path: Path, separator: str) -> None:
    """A form feed (pygments' and CPython's own sources have them) or U+2028 inside a line is not a line end for
    Python, but `str.splitlines` split on it: the canaries were cut at the wrong lines and even the gold failed."""
    bare = "\f\n" if separator == "\f" else ""  # a form feed may stand alone between statements
    source = (
        f"# section{separator}one\nfrom pkg import double\n\n{bare}\n"
        f"def test_a():\n    assert double(2) == 4  # two{separator}words\n\n\n"
        f'def test_b():\n    text = "a{separator}b"\n    assert double(3) == 6\n'
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ff.py").write_text(source, encoding="utf-8", newline="")
    (tmp_path / "pkg.py").write_text("def double(n):\n    return n + n\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    made = planted("tests/test_ff.py", source, {"tests/test_ff.py"}, frozenset({"test_a"}))
    assert len({kind for canary in made for kind in canary.kinds.values()}) >= 3, made
    for canary in made:
        compile(canary.source, canary.path, "exec")
        (tmp_path / canary.path).write_text(canary.source, encoding="utf-8", newline="")
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    expect = {k: v for c in made for k, v in c.expect.items()}
    outcomes = {
        line.split(" ", 1)[1].split(" - ")[0]: line.split(" ", 1)[0]
        for line in done.stdout.splitlines()
        if line.startswith(("PASSED ", "FAILED ", "ERROR "))
    }
    assert verdicts(expect, outcomes) == [], done.stdout


REGISTRY = "REGISTERED = set()\n\n\ndef register(name):\n    if name in REGISTERED:\n        raise ValueError(name)\n    REGISTERED.add(name)\n"
REGISTERS = """\
from pkg import register

register("shapes")


def test_registered():
    from pkg import REGISTERED

    assert "shapes" in REGISTERED


def test_count():
    from pkg import REGISTERED

    assert len(REGISTERED) == 1
"""


def test_import_effects_are_told_apart_from_plain_module_code() -> None:
    plain = (
        '"""Doc."""\nimport re\n\nimport pytest\n\ntry:\n    import numpy\nexcept ImportError:\n    numpy = None\n'
        'PATTERN = re.compile("x")\nCASES = [(1, 2)]\npytestmark = pytest.mark.slow\n\n\n'
        "@pytest.fixture\ndef thing():\n    return register('x')\n\n\nclass TestA:\n    value = 3\n\n\n"
        "x, y = symbols('x y')\n\n\n@skip_if_no('numpy')\ndef test_b():\n    pass\n"
    )
    assert not import_effects(ast.parse(plain))
    for effect in (
        'register("x")\n',
        'REGISTRY["x"] = 1\n',
        "@register\ndef handler():\n    pass\n",
        "@registry.add('x')\nclass Handler:\n    pass\n",
        "class TestA:\n    setup_registry()\n",
        "for name in 'ab':\n    pass\n",
        "if True:\n    setup()\n",
    ):
        assert import_effects(ast.parse(effect)), effect


def test_a_module_that_registers_at_import_gets_canaries_in_a_session_of_their_own(tmp_path: Path) -> None:
    """Imported beside its original, a canary of a module that registers a name at import failed to collect (the
    name was taken), and the gold voided. Each such canary now runs in a pytest session of its own."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_registry.py").write_text(REGISTERS)
    (tmp_path / "pkg.py").write_text(REGISTRY)
    tests = ["tests/test_registry.py::test_registered", "tests/test_registry.py::test_count"]
    graded = Suite(fail_to_pass=tests, pass_to_pass=[], targets=["tests/test_registry.py"], timeout_s=60)
    graded.python = sys.executable
    result, outcomes = grade_here(tmp_path, graded)
    assert result.solved and result.void == [], (result.void, result.output_tail)
    assert any(test.startswith("tests/test_registry_") for test in outcomes), outcomes
    made = planted("tests/test_registry.py", REGISTERS, {"tests/test_registry.py"})
    assert made and all(canary.alone for canary in made)
    # potent without the defence: the same canaries in the suite's session come back as collection errors
    (tmp_path / made[0].path).write_text(made[0].source)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_registry.py", made[0].path],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert "ValueError: shapes" in done.stdout, done.stdout


def grade_here(root: Path, graded: Suite):  # type: ignore[no-untyped-def]
    """Grade the tree at `root` as it is with the real launcher (canaries, sessions, outcome stream)."""
    import verifiers.v1 as vf
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    async def go():  # type: ignore[no-untyped-def]
        runtime = SubprocessRuntime(vf.SubprocessConfig(), name="grading-canaries")
        runtime.workdir = root
        return await run_suite(runtime, graded, str(root.resolve()))

    result, outcomes, canaries = asyncio.run(go())
    return judge(result, outcomes, canaries, graded, time.monotonic()), outcomes


def test_swapped_mutants_call_with_a_recorded_input_and_void_the_memo_on_their_own(tmp_path: Path) -> None:
    """The swapped mutant of `test_two` (`double(2) == 4`) calls `double` with the input of a recorded call whose
    answer differs (`double(3) == 4`): honest code fails it; run first, it passes for the memo oracle (which learns 4
    for the input 3 from the mutant's own frame), and alone among the mutants it voids the grade."""
    from tests.support import attacks

    source = attacks.MEMO_SHAPES["plain"]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_shapes.py").write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    known = answers(
        [
            RecordedCall(
                test="tests/test_shapes.py::test_three",
                target="shapes:double",
                args=[["int", "3"]],
                result=["int", "6"],
            )
        ]
    )
    made = planted(
        "tests/test_shapes.py", source, {"tests/test_shapes.py"}, frozenset({"test_two"}), ("swapped",), known
    )
    assert any("assert double(3) == 4" in c.source for c in made), made
    (tmp_path / "shapes.py").write_text("def double(n):\n    return n + n\n")
    outcomes, void, out = run_beside(tmp_path, "tests/test_shapes.py", made, first=True)
    assert void == [] and "FAILED" in outcomes.values(), out
    (tmp_path / "shapes.py").write_text(attacks.MEMO_SHAPES_PACKAGE)
    outcomes, void, out = run_beside(tmp_path, "tests/test_shapes.py", made, first=True)
    assert any("::test_two came back PASSED" in v for v in void), out


def test_a_folder_at_a_canary_path_is_removed_before_the_canary_is_written(tmp_path: Path) -> None:
    """An agent that leaves an empty folder at every name a canary may take (`tests/test_ops_<word>.py/`) made the
    canary's write raise IsADirectoryError, and grading crashed."""
    from composer_prime.grading.canaries import WORDS

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ops.py").write_text(SUITE)
    (tmp_path / "pkg.py").write_text(HONEST)
    for word in WORDS:
        (tmp_path / "tests" / f"test_ops_{word}.py").mkdir()
    graded = Suite(
        fail_to_pass=["tests/test_ops.py::test_name"], pass_to_pass=[], targets=["tests/test_ops.py"], timeout_s=60
    )
    graded.python = sys.executable
    result, outcomes = grade_here(tmp_path, graded)
    assert result.solved and result.void == [], (result.void, result.output_tail)
    assert any(test.startswith("tests/test_ops_") for test in outcomes), outcomes


EARLY_RETURN = """\
import pytest

from pkg import double


@pytest.mark.parametrize("n, want", [(0, None), (2, 4)])
def test_some_cases_return_early(n, want):
    if want is None:
        return
    assert double(n) == want


def test_plain():
    assert double(3) == 6
"""


def test_a_case_that_returns_before_the_equality_is_never_mutated(tmp_path: Path) -> None:
    """itsdangerous' parametrized `TimedSerializer` test: a case that does not reach the mutated assert passed the
    mutant with honest code, and the gold voided. A test with a way out above its equality gets no mutant of it (and
    no tail mutant either): it is only copied."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_early.py").write_text(EARLY_RETURN)
    (tmp_path / "pkg.py").write_text("def double(n):\n    return n + n\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    for _ in range(4):
        made = planted(
            "tests/test_early.py", EARLY_RETURN, {"tests/test_early.py"}, frozenset({"test_some_cases_return_early"})
        )
        kinds = {qual: kind for canary in made for qual, kind in canary.kinds.items()}
        assert kinds.get("test_some_cases_return_early", "copy") == "copy", made
        outcomes, void, out = run_beside(tmp_path, "tests/test_early.py", made)
        assert void == [], out
        for canary in made:
            (tmp_path / canary.path).unlink()
