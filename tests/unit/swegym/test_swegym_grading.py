"""Which tests swe-gym grading runs, and pytest output parsing (pure functions; the e2e tests run real pytest)."""

from __future__ import annotations

from swe_gym.grading import diff_paths, directives_for

from composer_prime.pytest_outcomes import parse_outcomes

TEST_PATCH = """diff --git a/tests/test_ops.py b/tests/test_ops.py
index 1111111..2222222 100644
--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -1 +1,2 @@
 x
+y
diff --git a/tests/test_new.py b/tests/test_new.py
new file mode 100644
--- /dev/null
+++ b/tests/test_new.py
@@ -0,0 +1 @@
+z
diff --git a/tests/test_gone.py b/tests/test_gone.py
deleted file mode 100644
--- a/tests/test_gone.py
+++ /dev/null
@@ -1 +0,0 @@
-q
diff --git a/tests/data/case.txt b/tests/data/case.txt
new file mode 100644
"""


def test_paths_and_directives_follow_the_test_patch() -> None:
    assert diff_paths(TEST_PATCH) == [
        "tests/test_ops.py",
        "tests/test_new.py",
        "tests/test_gone.py",
        "tests/data/case.txt",
    ]
    ids = ["tests/test_new.py::test_a[1-2]", "tests/other/test_more.py::T::test_b", "tests/data/case.txt::x"]
    # Deleted and non-Python files do not run; files named only by a listed test id do.
    assert directives_for(TEST_PATCH, ids[:1], ids[1:]) == [
        "tests/test_ops.py",
        "tests/test_new.py",
        "tests/other/test_more.py",
    ]
    assert directives_for(TEST_PATCH, ids[:2], ids[1:], by_id=True) == ids


VERBOSE_AND_SUMMARY = """\
============================= test session starts ==============================
tests/test_a.py::test_ok PASSED                                          [ 16%]
tests/test_a.py::test_bad FAILED                                         [ 33%]
tests/test_a.py::test_param[a - b] PASSED                                [ 50%]
tests/test_a.py::test_skip SKIPPED (no reason)                           [ 66%]
tests/test_a.py::test_teardown PASSED                                    [ 83%]
tests/test_a.py::test_teardown ERROR                                     [ 83%]
tests/test_a.py::test_xf XFAIL (flaky)                                   [100%]
=========================== short test summary info ============================
PASSED tests/test_a.py::test_ok
PASSED tests/test_a.py::test_param[a - b]
PASSED tests/test_a.py::test_teardown
SKIPPED [1] tests/test_a.py:12: no reason
XFAIL tests/test_a.py::test_xf - flaky
ERROR tests/test_a.py::test_teardown - RuntimeError: boom
FAILED tests/test_a.py::test_bad - assert 1 == 2 - really
"""


def test_parse_outcomes_reads_verbose_lines_and_the_summary() -> None:
    assert parse_outcomes("\x1b[32m" + VERBOSE_AND_SUMMARY + "\x1b[0m") == {
        "tests/test_a.py::test_ok": "PASSED",
        "tests/test_a.py::test_bad": "FAILED",
        "tests/test_a.py::test_param[a - b]": "PASSED",
        "tests/test_a.py::test_skip": "SKIPPED",
        "tests/test_a.py::test_teardown": "ERROR",
        "tests/test_a.py::test_xf": "XFAIL",
    }


def test_the_oracle_drops_calls_handed_private_state_or_test_values() -> None:
    """Arguments are walked whole: an instance with a private attribute, or a function of a test module, in any
    argument drops the call (the entry side a replay would rebuild)."""
    from composer_prime.grading.behaviour import RecordedCall
    from composer_prime.mining.behaviour import names_test_code
    from composer_prime.mining.regression import private_state as _private_state

    cache = ["obj", "pkg.cache:Cache", ["dict", [[["str", "size"], ["int", "2"]], [["str", "_data"], ["dict", []]]]]]
    public = ["obj", "pkg.cache:Cache", ["dict", [[["str", "size"], ["int", "2"]]]]]
    assert _private_state([[cache, ["int", "1"]], []]) and _private_state([[], [["list", [cache]]]])
    assert not _private_state([[public, ["int", "1"]], []])
    call = RecordedCall(target="pkg.bus:on", args=[["str", "a"], ["fn", "test_bus:double"]], result=["none"])
    assert names_test_code(call)
    assert names_test_code(call.model_copy(update={"args": [["obj", "_pytest.monkeypatch:MonkeyPatch", ["dict", []]]]}))
    assert not names_test_code(call.model_copy(update={"args": [["fn", "pkg.bus:double"]]}))
    # unittest's names, as the miner collects them (titlecase's `callback=TestSymbols.at_n_t` from titlecase/tests.py)
    for module in ("titlecase.tests", "testtimeparse", "pkg.footests"):
        assert names_test_code(call.model_copy(update={"args": [["fn", f"{module}:TestSymbols.at_n_t"]]})), module


class _Row:
    fail_to_pass = ["calc/tests.py::test_clamp_high"]
    pass_to_pass = ["calc/tests.py::test_add", "docs/check.py::test_docs"]
    patch = "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1 +1 @@\n-x\n+y\n"


FILES = [
    "calc/ops.py",
    "calc/tests.py",
    "calc/helpers_test.py",
    "calc/checks.py",
    "docs/check.py",
    "suite/check_ops.py",
    "tests/conftest.py",
    "tests/data.json",
]


def test_the_repositorys_collection_rules_decide_which_files_are_tests() -> None:
    """A PASS_TO_PASS test in a file the repository's own `python_files` collects (`calc/tests.py`) is the task's:
    the agent's copy of it is replaced, as `tree.is_test_path`'s names alone never did."""
    from swe_gym.grading import test_files

    default = test_files(FILES, [], _Row(), {})
    assert default == {"calc/tests.py", "calc/helpers_test.py", "docs/check.py", "tests/conftest.py", "tests/data.json"}
    own_rules = test_files(FILES, [], _Row(), {"python_files": "tests.py check_*.py", "testpaths": "calc suite"})
    assert own_rules == default | {"suite/check_ops.py"}  # `calc/checks.py` matches no pattern
    # where the fix goes is never restored, whatever its name
    assert "calc/ops.py" not in test_files(FILES, [], _Row(), {"python_files": "*.py"})
    assert test_files(FILES, ["calc/ops.py"], _Row(), {}) >= {"calc/ops.py"}  # the test patch's own files are


def test_collected_follows_pytests_matching() -> None:
    from composer_prime.grading.pytest_config import collected

    assert collected({}, "pkg/test_a.py") and collected({}, "pkg/a_test.py") and not collected({}, "pkg/tests.py")
    assert collected({"python_files": "tests.py"}, "pkg/tests.py")
    assert not collected({"python_files": "tests.py", "testpaths": "other"}, "pkg/tests.py")
    assert collected({"python_files": "pkg/*.py"}, "pkg/anything.py")  # a pattern with a `/` matches the path
    assert not collected({}, "pkg/test_a.txt")
