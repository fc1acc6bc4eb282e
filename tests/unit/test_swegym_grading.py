"""SWE-bench grading semantics over pytest output (pure functions; the e2e tests run real pytest)."""

from __future__ import annotations

from swe_gym.grading import END, START, diff_paths, directives_for, report

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


def wrap(body: str, code: int = 1) -> str:
    return f"applied\n{START}\n{body}{END} (exit {code})\n"


def test_resolved_needs_every_f2p_and_p2p() -> None:
    out = wrap(VERBOSE_AND_SUMMARY)
    ok = report(out, ["tests/test_a.py::test_ok", "tests/test_a.py::test_xf"], ["tests/test_a.py::test_param[a - b]"])
    assert ok.resolved and ok.f2p_pass_fraction == 1.0 and ok.p2p_pass_fraction == 1.0 and ok.tests_exit_code == 1

    bad = report(out, ["tests/test_a.py::test_ok", "tests/test_a.py::test_bad"], ["tests/test_a.py::test_teardown"])
    assert not bad.resolved
    assert bad.f2p_pass_fraction == 0.5 and bad.f2p_failed == ["tests/test_a.py::test_bad"]
    assert bad.p2p_pass_fraction == 0.0 and bad.p2p_failed == ["tests/test_a.py::test_teardown"]


def test_skipped_f2p_fails_but_skipped_p2p_is_maintained() -> None:
    out = wrap(VERBOSE_AND_SUMMARY)
    assert not report(out, ["tests/test_a.py::test_skip"], []).resolved
    assert report(out, ["tests/test_a.py::test_ok"], ["tests/test_a.py::test_skip"]).resolved


def test_a_test_that_did_not_run_is_a_failure() -> None:
    result = report(wrap(VERBOSE_AND_SUMMARY), ["tests/test_a.py::test_ok"], ["tests/test_a.py::test_missing"])
    assert not result.resolved and result.p2p_failed == ["tests/test_a.py::test_missing"]


def test_timeout_and_unappliable_test_patch_are_unresolved() -> None:
    timed_out = report(wrap("tests/test_a.py::test_ok PASSED [100%]\n", code=124), ["tests/test_a.py::test_ok"], [])
    assert not timed_out.resolved and "timed out" in timed_out.error
    assert timed_out.f2p_pass_fraction == 1.0  # the fraction still says what passed before the limit

    failed_apply = report(">>>>> swe-gym: test_patch does not apply\n", ["t.py::a"], ["t.py::b"])
    assert not failed_apply.resolved and failed_apply.error == ">>>>> swe-gym: test_patch does not apply"
    assert failed_apply.f2p_pass_fraction == 0.0 and failed_apply.p2p_failed == ["t.py::b"]


def test_empty_pass_to_pass_counts_as_fully_maintained() -> None:
    result = report(wrap("PASSED t.py::a\n", code=0), ["t.py::a"], [])
    assert result.resolved and result.p2p_pass_fraction == 1.0
